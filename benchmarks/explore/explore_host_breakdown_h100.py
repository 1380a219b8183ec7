"""Where a generated launcher's host time goes (issue 34), on tiny inputs where the GPU waits for
the host: microseconds per call (2000 calls back to back, one synchronize, median of 5 rounds)
of the generated function, its custom op, torch's op, and of each piece a launch is made of
(allocation, device and grad reads, the specialization key, the prebound launch, Triton's C
launcher alone, a host TensorDescriptor); then cProfile's top entries of the custom op's calls;
then cross_entropy's memory during one forward + backward at 4096 x 128256 (the backward table's
peak reading)."""

import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

CALLS, ROUNDS = 2000, 5


def per_call(ways):
    times = {name: [] for name in ways}
    for fn in ways.values():
        for _ in range(50):
            fn()
    for _ in range(ROUNDS):
        for name, fn in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    for name, t in times.items():
        print(f"{name:55s} {statistics.median(t):7.2f} us  (min {min(t):.2f})", flush=True)


def closure(fn):
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__), strict=True))


def main():
    gen = ROOT / "generated"
    softmax, rms, copy = (load_module(gen / f"{n}.py") for n in ("softmax", "rms_norm", "copy"))
    layer, matmul = load_module(gen / "layer_norm.py"), load_module(gen / "matmul_fast.py")
    x = torch.randn(8, 512, device="cuda")
    xh, w, b = x.half(), (1 + torch.randn(512, device="cuda") / 4).half(), torch.randn(512, device="cuda").half()
    c = torch.randn(128, device="cuda")
    ma, mb = torch.randn(64, 64, device="cuda").half(), torch.randn(64, 64, device="cuda").half()
    for fn in (lambda: softmax.softmax(x), lambda: rms.rms_norm(xh, w, 1e-6), lambda: copy.copy(c),
               lambda: layer.layer_norm(xh, w, b, 1e-5), lambda: matmul.matmul_fast(ma, mb)):
        fn()
    torch.cuda.synchronize()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print("\n## whole calls")
    per_call({
        "softmax function 8x512 f32": lambda: softmax.softmax(x),
        "softmax op": lambda: torch.ops.tilegen.softmax(x),
        "softmax op .default": lambda: torch.ops.tilegen.softmax.default(x),
        "torch.softmax": lambda: torch.softmax(x, 1),
        "rms_norm function 8x512 f16": lambda: rms.rms_norm(xh, w, 1e-6),
        "rms_norm op": lambda: torch.ops.tilegen.rms_norm(xh, w, 1e-6),
        "F.rms_norm": lambda: F.rms_norm(xh, (512,), w, 1e-6),
        "layer_norm function 8x512 f16": lambda: layer.layer_norm(xh, w, b, 1e-5),
        "F.layer_norm": lambda: F.layer_norm(xh, (512,), w, b, 1e-5),
        "copy function 128 f32": lambda: copy.copy(c),
        "copy op": lambda: torch.ops.tilegen.copy(c),
        "torch.clone": lambda: torch.clone(c),
        "matmul_fast function 64^3 f16": lambda: matmul.matmul_fast(ma, mb),
        "matmul_fast op": lambda: torch.ops.tilegen.matmul_fast(ma, mb),
        "torch @": lambda: ma @ mb,
    })

    print("\n## pieces of softmax's launch")
    index = softmax._TUNED[(x.device, 512)]
    launch = next(launch for key, launch in softmax._COMPILED.items() if key[1] == index)
    inner = closure(launch)
    run, function, metadata, stream = inner["run"], inner["function"], inner["metadata"], inner["current_stream"]
    y = torch.empty_like(x)
    ints = (8, 512, 512, 1, 512, 1)
    config = softmax._CONFIGS[index].kwargs
    grid = ((8 + config["BM"] - 1) // config["BM"], 1, 1)
    consts = (config["BM"], 512, False)
    dev = x.device
    fast = {(x.shape, x.stride(), x.dtype, dev, 0): (grid, launch)}

    def fast_path():
        if torch.is_grad_enabled() and x.requires_grad:
            raise AssertionError
        entry = fast.get((x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15))
        out = torch.empty(8, 512, device=dev, dtype=torch.float32)
        entry[1](entry[0], 0, x, out, *ints, *consts)
        return out

    per_call({
        "torch.empty(8, 512, device, dtype)": lambda: torch.empty(8, 512, device=dev, dtype=torch.float32),
        "torch.empty((8, 512), ...)": lambda: torch.empty((8, 512), device=dev, dtype=torch.float32),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "x.new_empty((8, 512))": lambda: x.new_empty((8, 512)),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "x.device": lambda: x.device,
        "x.stride()": lambda: x.stride(),
        "x.shape": lambda: x.shape,
        "x.data_ptr() % 16": lambda: x.data_ptr() % 16,
        "key tuple (shape, stride, dtype, device, ptr&15)": lambda: (
            x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15),
        "dict get of that key": lambda: fast.get((x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15)),
        "launch(grid, 0, x, y, ...) prebound": lambda: launch(grid, 0, x, y, *ints, *consts),
        "Triton's C launcher run(...) alone": lambda: run(
            grid[0], 1, 1, stream(0), function, metadata, None, None, None, x, y, *ints, *consts),
        "current_stream(0)": lambda: stream(0),
        "fast path mock (key, get, empty, launch)": fast_path,
        "softmax function (again, same run)": lambda: softmax.softmax(x),
    })

    print("\n## pieces of matmul_fast's launch")
    TensorDescriptor = matmul.TensorDescriptor
    per_call({
        "TensorDescriptor(a, [64, 64], strides, [1, 1])": lambda: TensorDescriptor(ma, [64, 64], [64, 1], [1, 1]),
        "TensorDescriptor.from_tensor(a, [64, 64])": lambda: TensorDescriptor.from_tensor(ma, [64, 64]),
        "matmul_fast function (again)": lambda: matmul.matmul_fast(ma, mb),
    })

    for name, fn in (("softmax op", lambda: torch.ops.tilegen.softmax(x)),
                     ("rms_norm function", lambda: rms.rms_norm(xh, w, 1e-6)),
                     ("matmul_fast function", lambda: matmul.matmul_fast(ma, mb))):
        print(f"\n## cProfile, 2000 calls of {name}")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            fn()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)

    print("\n## cross_entropy 4096 x 128256 f32: memory (MiB) through one forward + backward")
    entropy = load_module(gen / "cross_entropy.py")
    logits = (torch.randn(4096, 128256, device="cuda") * 3).requires_grad_()
    target = torch.randint(0, 128256, (4096,), device="cuda")
    for label, fn in (("tilegen", lambda: entropy.cross_entropy(logits, target)),
                      ("torch", lambda: F.cross_entropy(logits, target, reduction="none"))):
        for attempt in range(2):
            logits.grad = None
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            loss = fn()
            torch.cuda.synchronize()
            after_forward = torch.cuda.memory_allocated() - base
            loss.backward(torch.ones_like(loss))
            torch.cuda.synchronize()
            print(f"{label} #{attempt}: base {base / 2**20:.1f}, after forward +{after_forward / 2**20:.1f}, "
                  f"after backward +{(torch.cuda.memory_allocated() - base) / 2**20:.1f}, "
                  f"peak +{(torch.cuda.max_memory_allocated() - base) / 2**20:.1f}, "
                  f"grad {None if logits.grad is None else tuple(logits.grad.shape)}, "
                  f"grad_fn {type(loss.grad_fn).__name__}", flush=True)
            del loss


if __name__ == "__main__":
    main()
