"""What ``split tail`` costs and gains in matmul_fast, against the same spec without it (issue 12).

``python benchmarks/explore/explore_tail_host_h100.py BEFORE.py``, where BEFORE.py is
generated/matmul_fast.py of the commit before ``split tail`` (``git show
e4c038b:generated/matmul_fast.py > BEFORE.py``). Prints, for both modules in one run:

1. host microseconds per call of the launcher, back to back, at 16^3 (no split) and 1536^3 (a
   split where the tuner picks 128 x 128 tiles), kernels shorter than the host's launch: a launch
   that splits makes a TMA descriptor more for each tensor the split divides (made, then encoded
   by Triton's launcher on every call); one that does not, none;
2. kernel time in CUDA graphs at the wave-quantized square sizes and two full-wave ones, each
   module tuned by its own autotuner, and cuBLAS in the same run.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-tail-host-"))
from tilegen.runner import load_module  # noqa: E402


def per_call_us(fn, calls=2000, rounds=7):
    """Median over rounds of the host time per call of ``calls`` back-to-back calls."""
    for _ in range(100):
        fn()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    after = load_module(ROOT / "generated" / "matmul_fast.py").matmul_fast
    before = load_module(Path(sys.argv[1])).matmul_fast
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for n in (16, 1536):  # no split; a split in 2 x 2 (128 x 128 tiles: 144 on 132 SMs) where tuned so
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        rows = {}
        for _ in range(2):  # alternate, so that drift in the host's speed reaches both
            for name, fn in (("before", before), ("split tail", after)):
                rows.setdefault(name, []).append(per_call_us(lambda fn=fn: fn(a, b), calls=1000 if n > 16 else 2000))
        print(f"host us per call at {n}^3 (back to back, eager): "
              + ", ".join(f"{k} {min(v):.2f}" for k, v in rows.items()), flush=True)
    for n in [1152, 1536, 1664, 2176, 2944, 3072, 3200, 3840, 2048, 4096]:
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        before(a, b), after(a, b)  # tune
        t = {name: triton.testing.do_bench_cudagraph(lambda: fn(a, b), rep=100)
             for name, fn in (("cuBLAS", torch.matmul), ("before", before), ("split tail", after))}
        t["cuBLAS again"] = triton.testing.do_bench_cudagraph(lambda: torch.matmul(a, b), rep=100)
        print(f"{n}: " + ", ".join(f"{k} {t['cuBLAS'] / v:.3f}x" for k, v in t.items() if k != "cuBLAS"), flush=True)


if __name__ == "__main__":
    main()
