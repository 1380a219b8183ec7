"""Row pieces from the spec (issue 12), H100: ``matmul_fast`` with configs of 192 and 320 rows.

``specs/matmul_fast.tile`` gained configs whose block of rows is a sum of two powers of two
(192 = 128 + 64, 320 = 256 + 64), which the kernel holds as two row pieces sharing each tile of
``b`` (the hand kernel of ``explore_pieces_h100.py``, now generated). This script

1. checks each pieced config on the GPU (forced, not tuned) against ``torch.matmul`` in f32 on
   odd and even shapes, f16 and bf16, row- and column-major operands, and a long K that
   splits (split-K);
2. times, at the square sizes where power-of-two tiles leave the last wave partly idle and at a
   few others, the new ``matmul_fast`` (tuned over all its configs), the one before this change
   (``BEFORE``, the generated module of the commit before; tuned) and cuBLAS, in CUDA graphs,
   medians of 5 interleaved rounds; and each pieced config forced.

``python explore_pieces_spec_h100.py BEFORE.py [SIZE ...]``.
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-explore-"))

from tilegen.runner import load_module  # noqa: E402

SIZES = [768, 1152, 1536, 1664, 2176, 2944, 3072, 3200, 3328, 2048, 4096]


def forced(module, index):
    """``module.matmul_fast`` run at ``_CONFIGS[index]`` (no tuning; its pointer kernel at config 0)."""
    def run(a, b):
        saved = module._tuned_index
        # the pointer launcher (where TMA cannot serve: rows not 16-byte aligned) runs config 0
        module._tuned_index = lambda launcher, key: index if launcher == "matmul_fast" else 0
        module._TUNED.clear()
        try:
            return module.matmul_fast(a, b)
        finally:
            module._tuned_index = saved
            module._TUNED.clear()
    return run


def label(config):
    return " ".join(f"{k}={v}" for k, v in config.kwargs.items()) + f" w{config.num_warps} s{config.num_stages}"


def main(before_path, sizes):
    new = load_module(ROOT / "generated" / "matmul_fast.py")
    old = load_module(Path(before_path))
    pieced = [i for i, c in enumerate(new._CONFIGS) if c.kwargs["BM"] & (c.kwargs["BM"] - 1)]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    print("## parity: each pieced config forced, max |error| against torch.matmul in f32", flush=True)
    worst = 0.0
    for index in pieced:
        run = forced(new, index)
        for dtype in (torch.float16, torch.bfloat16):
            for m, n, k in [(1000, 1000, 1000), (193, 77, 64), (320, 256, 8192), (2176, 2176, 2176), (65, 129, 40)]:
                for a_col, b_col in [(False, False), (False, True), (True, False)]:
                    a = torch.randn(m, k, device="cuda", dtype=dtype)
                    b = torch.randn(k, n, device="cuda", dtype=dtype)
                    if a_col:
                        a = a.t().contiguous().t()
                    if b_col:
                        b = b.t().contiguous().t()
                    c = run(a, b)
                    err = (c.float() - a.float() @ b.float()).abs().max().item()
                    bound = 0.02 * (k ** 0.5) * (4 if dtype == torch.bfloat16 else 1)
                    ok = err <= bound
                    worst = max(worst, err / bound)
                    if not ok:
                        print(f"  FAIL {label(new._CONFIGS[index])} {dtype} {m}x{n}x{k} a_col={a_col} b_col={b_col}: "
                              f"err {err:.4f} > {bound:.4f}", flush=True)
    print(f"  worst error / bound: {worst:.3f} ({len(pieced)} configs x 2 dtypes x 5 shapes x 3 layouts)", flush=True)
    print("## TFLOP/s, f16 row-major, CUDA graphs, median of 5 interleaved rounds (x = over cuBLAS)", flush=True)
    for size in sizes:
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        fns = {"cuBLAS": lambda: torch.mm(a, b), "before": lambda: old.matmul_fast(a, b),
               "after": lambda: new.matmul_fast(a, b)}
        fns["before"]()
        fns["after"]()
        key, index = list(new._TUNED.items())[-1]
        picked = label(new._CONFIGS[index])
        for i in pieced:
            run = forced(new, i)
            run(a, b)
            saved = dict(new._TUNED)
            fns[label(new._CONFIGS[i])] = (lambda i=i: (new._TUNED.update({key: i}), new.matmul_fast(a, b))[1])
            new._TUNED.clear()
            new._TUNED.update(saved)
        new._TUNED[key] = index
        times = {name: [] for name in fns}
        for _ in range(5):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench_cudagraph(fn, rep=30))
                new._TUNED[key] = index
        flops = 2 * size ** 3
        med = {name: statistics.median(t) for name, t in times.items()}
        text = "  ".join(f"{name} {flops / t / 1e9:6.1f} (x{med['cuBLAS'] / t:.3f})" for name, t in med.items())
        print(f"{size}: after picked [{picked}]  {text}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(arg) for arg in sys.argv[2:]] or SIZES)
