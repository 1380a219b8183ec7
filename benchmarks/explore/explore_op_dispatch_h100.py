"""What a PyTorch custom op adds to a launcher's host cost per call, by how the op is registered
(issue 34): softmax at 8 x 512 f32 (tuned, fast path), microseconds per call, 2000 calls back to
back, median of 5 rounds. Ways: the generated function; its op as tilegen registers it
(``torch.library.triton_op`` + ``register_kernel("cuda")`` + ``register_autograd``); an op of
the same schema made with ``torch.library.Library`` (``define`` + a CUDA kernel, no autograd
kernel: torch's C++ fallback below autograd); the same plus a Python Autograd kernel that
calls the launcher directly for plain tensors without grad (else redispatches below
autograd); ``torch.softmax``."""

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
        print(f"{name:60s} {statistics.median(t):7.2f} us  (min {min(t):.2f})", flush=True)


def main():
    softmax = load_module(ROOT / "generated" / "softmax.py")
    x = torch.randn(8, 512, device="cuda")
    launcher = softmax.softmax
    launcher(x)
    launcher(x)

    plain = torch.library.Library("tilegen_explore", "DEF")
    plain.define("softmax_plain(Tensor x) -> Tensor")
    plain.impl("softmax_plain", launcher, "CUDA")
    plain.define("softmax_autograd(Tensor x) -> Tensor")
    plain.impl("softmax_autograd", launcher, "CUDA")
    after_autograd = torch._C._after_autograd_keyset
    redispatch = torch.ops.tilegen_explore.softmax_autograd.default.redispatch
    depth = torch._C._len_torch_dispatch_stack

    def autograd_kernel(keyset, x):
        if type(x) is torch.Tensor and not depth() and not (torch.is_grad_enabled() and x.requires_grad):
            return launcher(x)
        return redispatch(keyset & after_autograd, x)

    plain.impl("softmax_autograd", autograd_kernel, "Autograd", with_keyset=True)
    ops = torch.ops.tilegen_explore
    default = ops.softmax_plain.default
    for fn in (ops.softmax_plain, ops.softmax_autograd):
        torch.testing.assert_close(fn(x), torch.softmax(x, 1))
    per_call({
        "generated function": lambda: launcher(x),
        "torch.ops.tilegen.softmax (triton_op, autograd registered)": lambda: torch.ops.tilegen.softmax(x),
        "Library op, CUDA kernel only": lambda: ops.softmax_plain(x),
        "Library op, CUDA kernel only, .default": lambda: default(x),
        "Library op + Python Autograd kernel (direct when plain)": lambda: ops.softmax_autograd(x),
        "torch.softmax": lambda: torch.softmax(x, 1),
    })


if __name__ == "__main__":
    main()
