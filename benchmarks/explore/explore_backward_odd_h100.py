"""Why matmul_fast's backward products trail cuBLAS at 3000^3 (0.76-0.80x, benchmarks/results/
matmul_backward_h100.csv): every config of each product forced in turn, kernel time replayed in a
CUDA graph, against cuBLAS on the same views, bf16; the forward at the same size beside them.
Prints, per product, cuBLAS's time, the tuned pick's, and each config's, fastest first."""

import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402


def graphed(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=50)


def main(size=3000):
    m = n = k = size
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    dc = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    cases = [("matmul_fast", "c = a b", (a, b), lambda: a @ b),
             ("matmul_fast_backward_da", "da = dc b^T", (dc, b), lambda: dc @ b.T),
             ("matmul_fast_backward_db", "db = a^T dc", (a, dc), lambda: a.T @ dc)]
    for name, label, args, cublas in cases:
        module = load_module(ROOT / "generated" / f"{name}.py")
        launcher = getattr(module, name)
        theirs = graphed(cublas)
        pick = graphed(lambda: launcher(*args))
        print(f"{label} at {size}^3: cuBLAS {theirs * 1e3:.1f} us; tuned pick {pick * 1e3:.1f} us "
              f"({theirs / pick:.3f}x)", flush=True)
        original = module._tuned_index
        times = []
        for index, config in enumerate(module._CONFIGS):
            module._tuned_index = lambda launcher_name, key, index=index: index
            module._TUNED.clear()
            module._FAST.clear()
            try:
                t = graphed(lambda: launcher(*args))
            except Exception as failure:  # a config that does not fit (shared memory)
                print(f"  config {index}: {type(failure).__name__}: {str(failure)[:80]}", flush=True)
                continue
            times.append((t, index, config))
        module._tuned_index = original
        module._TUNED.clear()
        module._FAST.clear()
        for t, index, config in sorted(times, key=lambda item: item[0])[:8]:
            print(f"  config {index:2d} {config.kwargs} w{config.num_warps} s{config.num_stages}: "
                  f"{t * 1e3:.1f} us ({theirs / t:.3f}x)", flush=True)


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:]))
