"""Where a launch's host time goes on the H100 machine: per-call microseconds of Triton's JIT
dispatch (``kernel[grid](...)``), of a compiled kernel launched through ``CompiledKernel[grid]``
(the fused-softmax tutorial's path) and through its raw ``run``, of the generated launcher and
the pieces it adds (allocation, device, specialization key), and of torch's own ``copy_``.
``python benchmarks/explore/explore_launch_h100.py``. Informs issue 5's 2-microsecond target.
"""

import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
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
stream = torch.cuda.current_stream().cuda_stream
raw = lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,  # noqa: E731
                           *args, 1024, False)
device = x.device
print(f"triton {triton.__version__}: copy 4 KiB per call")
for name, fn in [("JIT dispatch kernel[grid](...)", jit), ("CompiledKernel[grid](...)", direct),
                 ("CompiledKernel.run(...) (raw launcher)", raw),
                 ("generated launcher copy(x)", lambda: copy.copy(x)), ("torch z.copy_(x)", lambda: z.copy_(x)),
                 ("torch.empty_like(x)", lambda: torch.empty_like(x)),
                 ("torch.empty((1024,), device=device, dtype=torch.float32)",
                  lambda: torch.empty((1024,), device=device, dtype=torch.float32)),
                 ("x.new_empty((1024,))", lambda: x.new_empty((1024,))),
                 ("x.new_empty((1024,), dtype=torch.float32)", lambda: x.new_empty((1024,), dtype=torch.float32)),
                 ("torch.empty(1024, device=device)", lambda: torch.empty(1024, device=device)),
                 ("torch.empty((1024,), device=device)", lambda: torch.empty((1024,), device=device)),
                 ("torch.empty(1024, device=device, dtype=torch.float32)",
                  lambda: torch.empty(1024, device=device, dtype=torch.float32)),
                 ("torch.empty(1024, dtype=torch.float32, device=device)",
                  lambda: torch.empty(1024, dtype=torch.float32, device=device)),
                 ("torch.empty((32, 32), device=device, dtype=torch.float16)",
                  lambda: torch.empty((32, 32), device=device, dtype=torch.float16)),
                 ("torch.empty(32, 32, device=device, dtype=torch.float16)",
                  lambda: torch.empty(32, 32, device=device, dtype=torch.float16)),
                 ("torch.cuda.current_device()", torch.cuda.current_device),
                 ("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0)),
                 ("triton driver get_current_stream(0)", lambda: triton.runtime.driver.active.get_current_stream(0)),
                 ("copy's specialization key", lambda: (torch.cuda.current_device(), x.data_ptr() % 16,
                                                        z.data_ptr() % 16, *map(copy._int_class, (1024, 1)), 1024,
                                                        False)),
                 ("copy's checks (dtype, rank, device, block)", lambda: (
                     not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() != 1, x.device,
                     not x.is_cuda, type(1024) is not int or 1024 < 1 or 1024 & 1023, x.shape, x.stride()))]:  # noqa: UP003 - times the launcher's own `type(BS) is not int`
    print(f"  {name}: {per_call_us(fn):.2f} us")
z.zero_()
direct()
torch.cuda.synchronize()
print("  CompiledKernel path computes the copy:", torch.equal(z, x))
