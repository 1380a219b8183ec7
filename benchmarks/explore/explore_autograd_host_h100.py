"""Where a training step's host time goes through a generated kernel with a backward (softmax,
rms_norm, at 8 x 512, where the GPU waits for the host): microseconds per call (2000 calls, one
synchronize) of the generated function without grad, its custom op, the function on an input
that requires grad (routed through the op and its autograd formula), forward + backward, and
torch's own; then cProfile's top entries of 300 forward + backward steps."""

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

CALLS = 2000


def per_call(fn):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def main():
    softmax = load_module(ROOT / "generated" / "softmax.py")
    rms = load_module(ROOT / "generated" / "rms_norm.py")
    x = torch.randn(8, 512, device="cuda")
    leaf = x.clone().requires_grad_()
    dy = torch.randn_like(x)
    xh, w = x.half(), (1 + torch.randn(512, device="cuda") / 4).half()
    xh_leaf, w_leaf = xh.clone().requires_grad_(), w.clone().requires_grad_()
    dyh = dy.half()

    def step_softmax():
        softmax.softmax(leaf).backward(dy)

    def step_rms():
        rms.rms_norm(xh_leaf, w_leaf, 1e-6).backward(dyh)

    rows = {
        "softmax function, no grad": lambda: softmax.softmax(x),
        "softmax op, no grad": lambda: softmax.op(x),
        "softmax forward, requires grad": lambda: softmax.softmax(leaf),
        "softmax forward + backward": step_softmax,
        "torch softmax forward + backward": lambda: torch.softmax(leaf, dim=1).backward(dy),
        "rms_norm function, no grad": lambda: rms.rms_norm(xh, w, 1e-6),
        "rms_norm forward + backward": step_rms,
        "torch rms_norm forward + backward": lambda: F.rms_norm(xh_leaf, (512,), w_leaf, 1e-6).backward(dyh),
    }
    backward = load_module(ROOT / "generated" / "softmax_backward.py")
    rows["softmax_backward function"] = lambda: backward.softmax_backward(dy, x)
    rows["softmax_backward op"] = lambda: backward.op(dy, x)
    for name, fn in rows.items():
        print(f"{name:40s} {per_call(fn):8.1f} us", flush=True)
    for name, step in (("softmax", step_softmax), ("rms_norm", step_rms)):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            step()
        torch.cuda.synchronize()
        profile.disable()
        print(f"\n{name} forward + backward, 300 steps, by total time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
