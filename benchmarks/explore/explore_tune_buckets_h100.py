"""What a model's varying batch costs ``matmul_fast`` now that it tunes once per power of two of M
(issue 12), H100.

A serving loop calls ``x @ w.t()`` with a new number of tokens M at almost every batch. With the
key ``next_power_of_2(M), N, K`` only the first M of each power of two autotunes; the others take
that config (and compile a kernel only where Triton specializes differently). For a sequence of
Ms this prints the wall time of each first call, whether it tuned, the max error against
``torch.matmul`` and then, warm, kernel time in CUDA graphs against cuBLAS.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from tilegen.runner import load_module  # noqa: E402

MS = [1, 3, 17, 24, 31, 100, 128, 129, 200, 256, 300, 500, 1000, 1024]


def main() -> None:
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "x[M, 4096] @ w.t(), w[4096, 4096] f16", flush=True)
    for m in MS:
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
        tuned = len(module._TUNED)
        torch.cuda.synchronize()
        start = time.perf_counter()
        c = module.matmul_fast(x, w.t())
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        err = (c.float() - x.float() @ w.float().t()).abs().max().item()
        ours = triton.testing.do_bench_cudagraph(lambda x=x: module.matmul_fast(x, w.t()), rep=50)
        cublas = triton.testing.do_bench_cudagraph(lambda x=x: torch.matmul(x, w.t()), rep=50)
        print(f"M={m:5d} (key {triton.next_power_of_2(m):5d}): first call {first * 1e3:8.1f} ms "
              f"({'tuned' if len(module._TUNED) > tuned else 'no tune'}), max err {err:.3g}, "
              f"then {ours * 1e3:6.1f} us against cuBLAS {cublas * 1e3:6.1f} us (x{cublas / ours:.3f})", flush=True)


if __name__ == "__main__":
    main()
