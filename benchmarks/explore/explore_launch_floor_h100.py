"""Where does a kept launch's time go below the generated launcher? Microseconds per call (5000
calls back to back, one synchronize, median of 5 rounds taking turns) for add (1537 f32),
softmax (8 x 512 f32) and rms_norm (8 x 512 f16): the whole generated call; the launch the fast
path keeps (``launch(grid, device_index, *tensors, *args)``); Triton's ``CompiledKernel.run``
(its Python ``CudaLauncher.__call__``) with the same arguments; the C ``launch`` that
``__call__`` calls, with the arguments it passed recorded once (so the Python wrapper's share is
the difference; since the runtime calls that C launch itself after a first launch through
``run``, the kept launch's line says which Triton release's argument order it found); and, for
an empty ``@triton.jit`` kernel, the driver's ``cuLaunchKernel`` through
ctypes with the parameters built once (ctypes' own call cost included: an upper bound of the
driver's share). torch's op for each is timed in the same rounds. ``ROUNDS=15`` in the environment takes 15
rounds; the kept launch's gain over ``run`` is given per round (median, min, max)."""

import ctypes
import inspect
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

CALLS = 5000


ROUNDS = int(os.environ.get("ROUNDS", "5"))


def per_call(fns, samples=None):
    for fn in fns.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns} if samples is None else samples
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    return {name: statistics.median(v) for name, v in times.items()}


def recorded_c_launch(run, call):
    """The C launch ``run`` (a CudaLauncher) calls, and the arguments it passed on ``call()``."""
    inner = run.launch
    seen = []

    def spy(*args):
        seen.append(args)
        return inner(*args)

    run.launch = spy
    try:
        call()
    finally:
        run.launch = inner
    return inner, seen[0]


def case(label, module, call, torch_call):
    call()  # a first call that tunes keeps no launch
    module._FAST.clear()
    made = call()
    torch.cuda.synchronize()
    entry = next(iter(module._FAST.values()))
    launch, grid, device_index, args = entry[0], entry[1], entry[2], entry[4]
    names = inspect.getclosurevars(launch).nonlocals
    run, function, metadata = names["run"], names["function"], names["metadata"]
    stream = names["current_stream"]
    tensors = list(module._last_pointers(made))
    print(f"{label}: the kept launch calls Triton's C launch directly in the order of:",
          getattr(launch, "c_launch_layout", "(not at this commit)"))

    def via_run():
        run(grid[0], grid[1], grid[2], stream(device_index), function, metadata, None, None, None, *tensors, *args)

    c_launch, c_args = recorded_c_launch(run, via_run)
    fns = {
        "the generated call": call,
        "kept launch": lambda: launch(grid, device_index, *tensors, *args),
        "Triton's run (CudaLauncher.__call__)": via_run,
        "its C launch, arguments recorded": lambda: c_launch(*c_args),
        "torch's op": torch_call,
    }
    samples = {}
    for name, us in per_call(fns, samples).items():
        print(f"{label:24s} {name:40s} {us:7.2f} us", flush=True)
    kept, through_run = samples["kept launch"], samples["Triton's run (CudaLauncher.__call__)"]
    gaps = sorted(a - b for a, b in zip(kept, through_run, strict=True))
    print(f"{label:24s} kept launch - run, each round: median {statistics.median(gaps):+.2f} us, "
          f"min {gaps[0]:+.2f}, max {gaps[-1]:+.2f} ({len(gaps)} rounds)", flush=True)


@triton.jit
def _empty_kernel(X: tl.constexpr):
    pass


def empty_case():
    compiled = _empty_kernel.warmup(1, grid=(1,))
    compiled._init_handles()
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    scratch = (ctypes.c_uint64 * 4)()
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(scratch) + 8 * i for i in range(4)])
    threads = 32 * compiled.metadata.num_warps
    shared = compiled.metadata.shared
    c_launch, c_args = recorded_c_launch(
        run, lambda: run(1, 1, 1, stream, function, metadata, None, None, None, 1)
    )
    print("empty kernel: C launch arguments", len(c_args), "kernel params (scratch pointers) assumed <= 4")

    def driver():
        cuda.cuLaunchKernel(function, 1, 1, 1, threads, 1, 1, shared, stream, params, None)

    fns = {
        "Triton's run": lambda: run(1, 1, 1, stream, function, metadata, None, None, None, 1),
        "its C launch, arguments recorded": lambda: c_launch(*c_args),
        "cuLaunchKernel through ctypes": driver,
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "ctypes call of a no-op (cuCtxGetCurrent)": lambda: cuda.cuCtxGetCurrent(ctypes.byref(ctypes.c_void_p())),
    }
    for name, us in per_call(fns).items():
        print(f"{'empty kernel':24s} {name:40s} {us:7.2f} us", flush=True)


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    add = load_module(ROOT / "generated" / "add.py")
    softmax = load_module(ROOT / "generated" / "softmax.py")
    rms = load_module(ROOT / "generated" / "rms_norm.py")
    x, y = torch.randn(1537, device="cuda"), torch.randn(1537, device="cuda")
    add._last_pointers = lambda made: [x, y, made]
    case("add 1537 f32", add, lambda: add.add(x, y), lambda: torch.add(x, y))
    r = torch.randn(8, 512, device="cuda")
    softmax._last_pointers = lambda made: [r, made]
    case("softmax 8x512 f32", softmax, lambda: softmax.softmax(r), lambda: torch.softmax(r, -1))
    h, w = torch.randn(8, 512, device="cuda").half(), torch.randn(512, device="cuda").half()
    rms._last_pointers = lambda made: [h, w, made[0] if isinstance(made, tuple) else made]
    case("rms_norm 8x512 f16", rms, lambda: rms.rms_norm(h, w, 1e-6),
         lambda: torch.nn.functional.rms_norm(h, (512,), w, 1e-6))
    empty_case()


if __name__ == "__main__":
    main()
