"""The launchers' fast path and the ops' eager shortcut (issue 34), before and after in one
process: microseconds per call on the host of the generated functions as committed before this
change (commit fe7bd2a's modules and runtime, written by ``git show`` into ``before_fast_path/``
beside this script, which git ignores) and now (``generated/``), of the op
``torch.ops.tilegen.<kernel>`` now, and of the torch op, on tiny inputs (1000 calls back to back,
median of 7 rounds, the ways taking turns)."""

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

BEFORE = Path(__file__).resolve().parent / "before_fast_path"
KERNELS = ("copy", "softmax", "rms_norm", "layer_norm", "swiglu", "cross_entropy", "rms_norm_backward", "mse_loss",
           "matmul_fast")


def write_before():
    """fe7bd2a's generated modules of KERNELS and their runtime, in BEFORE (once)."""
    BEFORE.mkdir(exist_ok=True)
    for name in (*KERNELS, "_tilegen_runtime"):
        path = BEFORE / f"{name}.py"
        if not path.exists():
            path.write_bytes(subprocess.run(["git", "show", f"fe7bd2a:generated/{name}.py"], cwd=ROOT,
                                            check=True, capture_output=True).stdout)


def per_call(ways):
    times = {name: [] for name in ways}
    for fn in ways.values():
        for _ in range(20):
            fn()
    for _ in range(7):
        for name, fn in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(1000):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / 1000 * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    write_before()
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    x, xh, w = r(8, 512), r(8, 512, dtype=torch.float16), r(512, dtype=torch.float16)
    cases = {
        "copy": ((r(128),), lambda x: x.clone()),
        "softmax": ((x,), lambda x: torch.softmax(x, 1)),
        "rms_norm": ((xh, w, 1e-6), lambda x, w, eps: F.rms_norm(x, (512,), w, eps)),
        "layer_norm": ((xh, w, r(512, dtype=torch.float16), 1e-5),
                       lambda x, w, b, eps: F.layer_norm(x, (512,), w, b, eps)),
        "swiglu": ((xh, xh), lambda a, b: F.silu(a) * b),
        "cross_entropy": ((r(8, 1000), torch.randint(0, 1000, (8,), device="cuda")),
                          lambda z, t: F.cross_entropy(z, t, reduction="none")),
        "rms_norm_backward": ((xh, xh, w, 1e-6), None),
        "mse_loss": ((x, x), F.mse_loss),
        "matmul_fast": ((r(64, 64, dtype=torch.float16), r(64, 64, dtype=torch.float16)), torch.matmul),
    }
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print(f"{'kernel':20s} {'before':>8s} {'now':>8s} {'op now':>8s} {'torch':>8s}  (us per call)")
    for name, (args, theirs) in cases.items():
        new = load_module(ROOT / "generated" / f"{name}.py")  # first: its op is torch.ops.tilegen's
        old = load_module(BEFORE / f"{name}.py")
        before, now, op = getattr(old, name), getattr(new, name), getattr(torch.ops.tilegen, name)
        ways = {"before": lambda: before(*args), "now": lambda: now(*args), "op": lambda: op(*args)}
        if theirs is not None:
            ways["torch"] = lambda: theirs(*args)
        for way in ways.values():
            way()
            way()
        t = per_call(ways)
        print(f"{name:20s} {t['before']:8.2f} {t['now']:8.2f} {t['op']:8.2f} {t.get('torch', float('nan')):8.2f}",
              flush=True)


if __name__ == "__main__":
    main()
