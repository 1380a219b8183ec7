"""Can a generated launcher launch its compiled Triton kernel for less host time than Triton's
own C launcher (which calls cuPointerGetAttribute on every pointer)? torch Inductor's static
launcher (torch._C._StaticCudaLauncher, private) against Triton's `run`, on softmax's kernel at
8 x 512 f32: microseconds per call, 2000 calls, median of 5 rounds; the outputs compared."""

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402


def per_call(ways):
    times = {name: [] for name in ways}
    for fn in ways.values():
        for _ in range(50):
            fn()
    for _ in range(5):
        for name, fn in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / 2000 * 1e6)
    for name, t in times.items():
        print(f"{name:50s} {statistics.median(t):7.2f} us  (min {min(t):.2f})", flush=True)


def main():
    softmax = load_module(ROOT / "generated" / "softmax.py")
    x = torch.randn(8, 512, device="cuda")
    softmax.softmax(x)
    index = softmax._TUNED[(x.device, 512)]
    launch = next(launch for key, launch in softmax._COMPILED.items() if key[1] == index)
    cells = dict(zip(launch.__code__.co_freevars, (c.cell_contents for c in launch.__closure__), strict=True))
    run, function, metadata, stream = cells["run"], cells["function"], cells["metadata"], cells["current_stream"]
    compiled = launch.__closure__  # noqa: F841
    import torch._inductor.runtime as inductor_runtime
    print("inductor runtime modules:", [m for m in dir(inductor_runtime) if "static" in m])
    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    except ImportError:
        from torch._inductor.runtime.static_cuda_launcher import StaticallyLaunchedCudaKernel
    kernel = softmax.softmax_kernel.fn
    config = softmax._CONFIGS[index]
    BM = config.kwargs["BM"]
    grid = ((8 + BM - 1) // BM, 1, 1)
    ck = kernel.warmup(x, torch.empty_like(x), 8, 512, 512, 1, 512, 1, BLOCK_N=512, INT64_OFFSETS=False,
                       grid=grid, **config.all_kwargs())
    print("signature", ck.src.signature)
    ck._cubin_path = None
    static = StaticallyLaunchedCudaKernel(ck)
    import os
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "k.cubin")
    static.reload_cubin_from_raw(path)
    static.load_kernel(0)
    print("arg_tys", static.arg_tys, "full_constexprs", static.full_constexprs)
    kept = [name for name, ty in ck.src.signature.items() if ty != "constexpr"]
    print("kept", kept)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)
    args = (x, y1, 8, 512, 512, 1, 512, 1, BM, 512, False)
    launch(grid, 0, *args)
    c_launch = static.C_impl._launch_kernel
    names = ck.src.fn.arg_names
    sargs = tuple(a for name, a in zip(names, (x, y2, 8, 512, 512, 1, 512, 1), strict=False) if name in kept)
    extra = static.has_global_scratch + static.has_profile_scratch
    tys = static.arg_tys + "O" * extra
    sargs_c = sargs + (None,) * extra
    print("static args", [type(a).__name__ for a in sargs], "scratch params", extra)
    raw = torch._C._cuda_getCurrentRawStream
    c_launch(static.function, *grid, static.num_warps, static.shared, tys, sargs_c, raw(0))
    torch.cuda.synchronize()
    print("static == triton:", torch.equal(y1, y2), "== torch:", torch.allclose(y2, torch.softmax(x, 1)))
    per_call({
        "tilegen launch() (Triton run)": lambda: launch(grid, 0, *args),
        "Triton run() alone": lambda: run(grid[0], 1, 1, stream(0), function, metadata, None, None, None, *args),
        "static.run(...)": lambda: static.run(*grid, raw(0), *sargs),
        "_StaticCudaLauncher._launch_kernel": lambda: c_launch(static.function, *grid, static.num_warps, static.shared,
                                                              tys, sargs_c, raw(0)),
        "torch.softmax": lambda: torch.softmax(x, 1),
        "torch.empty_like": lambda: torch.empty_like(x),
    })


if __name__ == "__main__":
    main()
