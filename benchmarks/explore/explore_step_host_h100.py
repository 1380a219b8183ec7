"""Where the host time of one eager training step (forward + backward) goes for the norms and
softmaxes of issue 33's table (softmax, log_softmax f32; rms_norm, layer_norm f16), at 8 x 512
where the GPU waits for the host: microseconds per call (1000 calls back to back, one
synchronize, median of 3 rounds) of each piece (the forward with grad, the backward launcher
alone, the whole step with gradients reset to None as backward.py does, torch's step), with
autograd's device threads on (torch's default) and off; then cProfile's top entries of 300 steps
with the threads off (so that the backward's Python runs on the profiled thread)."""

import cProfile
import functools
import pstats
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

CALLS = 1000


def per_call(fn):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(times)


def _no_grad(fn):
    with torch.no_grad():
        return fn()


def _mod(name):
    return load_module(ROOT / "generated" / f"{name}.py")


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    softmax, log_softmax, rms, layer = _mod("softmax"), _mod("log_softmax"), _mod("rms_norm"), _mod("layer_norm")
    x = torch.randn(8, 512, device="cuda")
    dy = torch.randn_like(x)
    xh, w, b = x.half(), (1 + torch.randn(512, device="cuda") / 4).half(), (torch.randn(512, device="cuda") / 4).half()
    dyh = dy.half()
    leaves = {}

    def leaf(name, t):
        leaves[name] = t.clone().requires_grad_()
        return leaves[name]

    lx, lxh, lw, lb = leaf("x", x), leaf("xh", xh), leaf("w", w), leaf("b", b)

    def reset():
        for t in leaves.values():
            t.grad = None

    backwards = {name: _mod(f"{name}_backward") for name in ("softmax", "log_softmax", "rms_norm", "layer_norm")}
    cases = {
        "softmax": (lambda: softmax.softmax(lx), lambda: torch.softmax(lx, dim=1), dy,
                    lambda: backwards["softmax"].softmax_backward(dy, x)),
        "log_softmax": (lambda: log_softmax.log_softmax(lx), lambda: torch.log_softmax(lx, dim=1), dy,
                        lambda: backwards["log_softmax"].log_softmax_backward(dy, x)),
        "rms_norm": (lambda: rms.rms_norm(lxh, lw, 1e-6), lambda: F.rms_norm(lxh, (512,), lw, 1e-6), dyh,
                     lambda: backwards["rms_norm"].rms_norm_backward(dyh, xh, w, 1e-6)),
        "layer_norm": (lambda: layer.layer_norm(lxh, lw, lb, 1e-5)[0],
                       lambda: F.layer_norm(lxh, (512,), lw, lb, 1e-5), dyh, None),
    }
    mu = xh.float().mean(1)
    rstd = torch.rsqrt(xh.float().var(1, unbiased=False) + 1e-5)
    lnb = backwards["layer_norm"].layer_norm_backward
    cases["layer_norm"] = (*cases["layer_norm"][:3], lambda: lnb(dyh, xh, w, mu, rstd))
    steps = {}
    for name, (ours, theirs, grad, backward) in cases.items():
        def step(f=ours, g=grad):
            reset()
            f().backward(g)

        def torch_step(f=theirs, g=grad):
            reset()
            f().backward(g)

        steps[name] = step
        rows = {
            "forward, no grad": functools.partial(_no_grad, ours),
            "forward, requires grad": ours,
            "torch forward, requires grad": theirs,
            "backward launcher alone": backward,
            "reset + forward + backward": step,
            "torch reset + forward + backward": torch_step,
        }
        for threads in (True, False):
            torch.autograd.set_multithreading_enabled(threads)
            for label, fn in rows.items():
                if not threads and "backward" not in label:
                    continue
                mode = "on " if threads else "off"
                print(f"{name:12s} {label:36s} threads {mode} {per_call(fn):8.1f} us", flush=True)
        torch.autograd.set_multithreading_enabled(True)
        print(flush=True)
    _thread_costs(lx, dy, backwards["layer_norm"].layer_norm_backward, (dyh, xh, w, mu, rstd), reset)
    torch.autograd.set_multithreading_enabled(False)
    for name in ("rms_norm", "layer_norm"):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            steps[name]()
        torch.cuda.synchronize()
        profile.disable()
        print(f"\n{name} reset + forward + backward, 300 steps, threads off, by total time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, dy):
        return dy


def _thread_costs(leaf, grad, backward, args, reset):
    """What autograd's device thread adds: a step through a Python Function whose backward returns
    its gradient, and through a native op (x * 1), threads on and off; layer_norm's backward
    launcher called in another Python thread, handed each call over (threading.Event) or looped
    there, against the main thread."""
    def python_step():
        reset()
        _Identity.apply(leaf).backward(grad)

    def native_step():
        reset()
        (leaf * 1).backward(grad)

    for threads in (True, False):
        torch.autograd.set_multithreading_enabled(threads)
        mode = "on " if threads else "off"
        print(f"Python Function identity step, threads {mode} {per_call(python_step):8.1f} us", flush=True)
        print(f"native x * 1 step, threads {mode}          {per_call(native_step):8.1f} us", flush=True)
    torch.autograd.set_multithreading_enabled(True)
    request, done = threading.Event(), threading.Event()
    results = {"fn": lambda: backward(*args)}

    def serve():
        torch.cuda.set_device(0)
        results["looped"] = per_call(lambda: backward(*args))
        while True:
            request.wait()
            request.clear()
            if results.get("stop"):
                return
            results["fn"]()
            done.set()

    def handed_over():
        request.set()
        done.wait()
        done.clear()

    thread = threading.Thread(target=serve)
    thread.start()
    while "looped" not in results:
        time.sleep(0.01)
    print(f"layer_norm_backward launcher, main thread              {per_call(lambda: backward(*args)):8.1f} us")
    print(f"layer_norm_backward launcher, looped in another thread {results['looped']:8.1f} us")
    print(f"layer_norm_backward launcher, handed to another thread {per_call(handed_over):8.1f} us")
    results["fn"] = lambda: None
    print(f"no-op handed to another thread                         {per_call(handed_over):8.1f} us", flush=True)
    results["stop"] = True
    request.set()
    thread.join()


if __name__ == "__main__":
    main()
