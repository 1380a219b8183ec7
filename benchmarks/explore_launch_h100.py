"""Where a launch's host time goes on the H100 machine: per-call microseconds of Triton's JIT
dispatch (``kernel[grid](...)``), of a compiled kernel launched through ``CompiledKernel[grid]``
(the fused-softmax tutorial's path), of the generated launcher, and of torch's own ``copy_``.
``python benchmarks/explore_launch_h100.py``. Informs issue 5's 2-microsecond target.
"""

import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402


def per_call_us(fn, calls=5000):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


copy = load_module(ROOT / "generated" / "copy.py")
x = torch.randn(1024, device="cuda")
z = torch.empty_like(x)
args = (x, z, 1024, 1, 1)
jit = lambda: copy.copy_kernel[(1,)](*args, BS=1024, INT64_OFFSETS=False)  # noqa: E731
compiled = copy.copy_kernel.warmup(*args, BS=1024, INT64_OFFSETS=False, grid=(1,))
compiled._init_handles()
runner = compiled[(1, 1, 1)]
direct = lambda: runner(*args, 1024, False)  # noqa: E731
print(f"triton {triton.__version__}: copy 4 KiB per call")
for name, fn in [("JIT dispatch kernel[grid](...)", jit), ("CompiledKernel[grid](...)", direct),
                 ("generated launcher copy(x)", lambda: copy.copy(x)), ("torch z.copy_(x)", lambda: z.copy_(x)),
                 ("torch.empty_like(x)", lambda: torch.empty_like(x))]:
    print(f"  {name}: {per_call_us(fn):.2f} us")
z.zero_()
direct()
torch.cuda.synchronize()
print("  CompiledKernel path computes the copy:", torch.equal(z, x))
