"""Every large config of ``matmul_fast``, and candidates beyond its configs, forced at given sizes (issue 12), H100.

The square sweep (``benchmarks/results/matmul_sweep_h100.csv``) leaves 1536, 2944, 3072 and 3200
below 0.9x cuBLAS and the geomean at 0.982x. This script asks two questions at once:

1. is the tuner's pick the best of the spec's configs at each size (or is tuning the gap)?
2. does any candidate beyond the spec's configs do better: 320 x 64 (120 tiles at 1536),
   384 x 128 and 192 x 256 (the sizes of cuBLAS's 192 x 192 tile count at 3072), and deeper
   pipelines of the pieced tiles?

``MODULE`` is ``matmul_fast`` built from ``specs/matmul_fast.tile`` with the candidate configs
added before its default (``tilegen build VARIANT.tile -o DIR``). Each config is forced through
the launcher (its split tail included), f16 row-major, timed in CUDA graphs against cuBLAS in the
same round, medians of 3 interleaved rounds.

``python explore_candidates_h100.py MODULE [SIZE | MxNxK ...] [--bf16] [--b-col]`` (a SIZE is M = N = K).
Configs marked ``*`` are not in the committed ``generated/matmul_fast.py``.
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

SIZES = [1152, 1536, 2432, 2560, 2688, 2944, 3072, 3200, 3840, 4096]


def label(config):
    kw = config.kwargs
    return f"{kw['BM']}x{kw['BN']}x{kw['BK']} w{config.num_warps} s{config.num_stages}"


def main(path, sizes, dtype=torch.float16, b_col=False, small=False):
    module = load_module(Path(path))
    least = 1 if small else 128 * 64
    large = [i for i, c in enumerate(module._CONFIGS) if c.kwargs["BM"] * c.kwargs["BN"] >= least]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{dtype}, b {'column' if b_col else 'row'}-major; CUDA graphs, median of 3 interleaved rounds", flush=True)
    committed = load_module(ROOT / "generated" / "matmul_fast.py")._CONFIGS
    known = [(c.kwargs, c.num_warps, c.num_stages) for c in committed]
    new = {i for i, c in enumerate(module._CONFIGS) if (c.kwargs, c.num_warps, c.num_stages) not in known}
    for shape in sizes:
        m, n, k = shape
        shape_text = str(m) if m == n == k else "x".join(map(str, shape))
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        if b_col:
            b = b.t().contiguous().t()
        ref = a.float() @ b.float()
        module.matmul_fast(a, b)  # tune over every config
        key, picked = list(module._TUNED.items())[-1]
        fns = {"cuBLAS": lambda: torch.mm(a, b)}
        for i in large:
            module._TUNED[key] = i
            try:
                c = module.matmul_fast(a, b)
            except Exception as error:  # e.g. shared memory past the H100's when forced
                print(f"  {shape} {label(module._CONFIGS[i])}: {type(error).__name__} {str(error)[:80]}", flush=True)
                continue
            err = (c.float() - ref).abs().max().item()
            if err > 0.02 * k ** 0.5 * (4 if dtype == torch.bfloat16 else 1):
                print(f"  {shape} {label(module._CONFIGS[i])}: WRONG, max error {err}", flush=True)
                continue
            fns[i] = lambda i=i: (module._TUNED.__setitem__(key, i), module.matmul_fast(a, b))[1]
        times = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench_cudagraph(fn, rep=30))
        module._TUNED[key] = picked
        med = {name: statistics.median(t) for name, t in times.items()}
        ratio = {name: med["cuBLAS"] / t for name, t in med.items() if name != "cuBLAS"}
        ranked = sorted(ratio, key=ratio.get, reverse=True)
        text = "  ".join(f"{label(module._CONFIGS[i])}{'*' if i in new else ''} {ratio[i]:.3f}" for i in ranked[:8])
        print(f"{shape_text}: cuBLAS {2 * m * n * k / med['cuBLAS'] / 1e9:.0f} TFLOP/s; tuner picked "
              f"{label(module._CONFIGS[picked])} {ratio.get(picked, float('nan')):.3f}; best: {text}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    dtype = torch.bfloat16 if "--bf16" in args else torch.float16
    b_col = "--b-col" in args
    small = "--all" in args  # every config, not only those of 128 x 64 or more
    args = [x for x in args if not x.startswith("--")]
    shapes = [tuple(int(s) for s in x.split("x")) if "x" in x else (int(x),) * 3 for x in args[1:]]
    main(args[0], shapes or [(s, s, s) for s in SIZES], dtype, b_col, small)
