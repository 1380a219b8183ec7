"""One-off (issue 12): how many waves should a split loop fill on memory-bound shapes?

matmul_fast's ``_split_grid`` fills the SMs once. Here ``_num_sms`` is scaled by 1, 2 and 4 (so
the parts fill 1, 2 or 4 waves) and the launcher retunes each time (an empty tuning cache); the
config the autotuner picks and its kernel time in CUDA graphs are printed against cuBLAS, also
with a cold L2 (``do_bench``, which flushes it) as real weights would be.
Run on the GPU from the repository root: ``python benchmarks/explore/explore_split_h100.py``.
"""

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-split-")

import torch  # noqa: E402
import triton  # noqa: E402

from tilegen.runner import load_module  # noqa: E402

module = load_module(ROOT / "generated" / "matmul_fast.py")
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"# {torch.cuda.get_device_name()}, Triton {triton.__version__}, {sms} SMs")
SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (16, 4096, 14336), (4096, 1, 4096),
          (128, 128, 131072), (256, 256, 65536)]
for waves in (1, 2, 4):
    module._num_sms = lambda device, waves=waves: sms * waves
    module._TUNED.clear()
    module.matmul_fast_kernel.cache.clear()
    module._matmul_fast_pointers_kernel.cache.clear()
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16).t()  # nn.Linear's weight
        module.matmul_fast(a, b)
        key = next(key for key in module._TUNED if (m, n, k) in (key[1:4], key[2:5]))  # TMA or pointers
        config = module._CONFIGS[module._TUNED[key]].kwargs
        parts = module._split_grid(m, n, k, config["BM"], config["BN"], config["BK"], a.device)[1]
        ours = triton.testing.do_bench_cudagraph(lambda: module.matmul_fast(a, b), rep=100)
        cublas = triton.testing.do_bench_cudagraph(lambda: torch.matmul(a, b), rep=100)
        cold = triton.testing.do_bench(lambda: module.matmul_fast(a, b), rep=100)
        cold_cublas = triton.testing.do_bench(lambda: torch.matmul(a, b), rep=100)
        size = (m * k + k * n + m * n) * 2
        print(f"waves={waves} {m}x{n}x{k} {config} parts={parts}: graphs {ours * 1e3:.1f} us vs cuBLAS "
              f"{cublas * 1e3:.1f} us = {cublas / ours:.2f}x ({size / ours * 1e-9:.2f} TB/s); cold L2 "
              f"{cold * 1e3:.1f} vs {cold_cublas * 1e3:.1f} us = {cold_cublas / cold:.2f}x", flush=True)
