"""Are the eager outliers of ``matmul_sweep.py`` one-off stalls or the launcher's steady cost?

In the sweep's first eager run (session of 2026-11-26, H100) a few rows' tilegen eager time was
twice its neighbours' (square f16 1024^3 0.437x cuBLAS, f16 b column-major 512^3 0.411x and
2048^3 0.604x, bf16 768^3 0.28x, 896^3 0.462x, 2048^3 0.53x), while cuBLAS's eager times ran
smooth. ``triton.testing.do_bench`` returns the mean of its per-call times, so one stall of a few
milliseconds inside one timed call moves the mean of ~1000 calls by microseconds.

For each size this does what ``matmul_sweep.measure`` does (first call tunes, then both sides in
CUDA graphs), then times each side eager ROUNDS times in turns with ``return_mode="all"`` and
prints each round's mean, median, max and the number of calls over twice the median.

``python benchmarks/explore/explore_eager_outliers_h100.py``
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ROUNDS = 3
CASES = [  # (dtype, b column-major, size): the outliers, and neighbours that ran smooth
    ("float16", False, 1024), ("float16", False, 1152), ("float16", True, 512), ("float16", True, 2048),
    ("bfloat16", False, 768), ("bfloat16", False, 896), ("bfloat16", False, 2048), ("float16", False, 2048),
]


def summary(times: list[float]) -> str:
    median = statistics.median(times)
    slow = sum(t > 2 * median for t in times)
    return (f"mean {statistics.fmean(times) * 1e3:7.2f} median {median * 1e3:7.2f} max {max(times) * 1e3:9.1f} us, "
            f"{slow}/{len(times)} calls > 2x median")


def main() -> None:
    import torch
    import triton
    from matmul_layouts import operand

    from tilegen.runner import load_module

    launcher = load_module(ROOT / "generated" / "matmul_fast.py").matmul_fast
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}", flush=True)
    for dtype_name, b_col, n in CASES:
        dtype = getattr(torch, dtype_name)
        a, b = operand(n, n, False, dtype), operand(n, n, b_col, dtype)
        launcher(a, b)  # tunes
        torch.cuda.synchronize()
        graph = {"tilegen": triton.testing.do_bench_cudagraph(lambda: launcher(a, b), rep=100),
                 "cuBLAS": triton.testing.do_bench_cudagraph(lambda: torch.matmul(a, b), rep=100)}
        print(f"{dtype_name} {'bt ' if b_col else ''}{n}^3: graphs tilegen {graph['tilegen'] * 1e3:.2f} us, "
              f"cuBLAS {graph['cuBLAS'] * 1e3:.2f} us", flush=True)
        means = {"tilegen": [], "cuBLAS": []}
        medians = {"tilegen": [], "cuBLAS": []}
        for round_ in range(ROUNDS):
            for name, fn in (("tilegen", lambda: launcher(a, b)), ("cuBLAS", lambda: torch.matmul(a, b))):
                times = triton.testing.do_bench(fn, rep=100, return_mode="all")
                means[name].append(statistics.fmean(times))
                medians[name].append(statistics.median(times))
                print(f"  round {round_} {name:7s} eager: {summary(times)}", flush=True)
        print(f"  eager ratio by round, of means: "
              f"{[round(c / t, 3) for t, c in zip(means['tilegen'], means['cuBLAS'], strict=True)]}, "
              f"of medians: {[round(c / t, 3) for t, c in zip(medians['tilegen'], medians['cuBLAS'], strict=True)]}",
              flush=True)


if __name__ == "__main__":
    main()
