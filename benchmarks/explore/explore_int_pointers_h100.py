"""Does a compiled launch cost less when its pointer arguments are ints (``t.data_ptr()``) rather
than tensors? Triton's C launcher takes an int as the address itself; for a tensor it calls
``data_ptr()`` and asks the driver about the address (``cuPointerGetAttribute``). Microseconds per
call (5000 calls back to back, one synchronize, median of 5 rounds taking turns) of the launch a
launcher's fast path keeps (``_FAST``), for add (3 pointers), softmax (2), rms_norm_backward's
main kernel (6) and layer_norm_backward's (10): with the tensors, with ``.data_ptr()`` of each at
the call, and with the ints computed once (the floor); then the whole generated call."""

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

CALLS = 5000


def per_call(fns):
    for fn in fns.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    return {name: statistics.median(v) for name, v in times.items()}


def case(label, module, call, pointers):
    """``call()`` fills ``module._FAST``; ``pointers(made)`` gives the kept launch's pointer
    arguments (tensors) from the call's output."""
    call()  # a first call that tunes keeps no launch
    module._FAST.clear()
    made = call()
    torch.cuda.synchronize()
    entry = next(iter(module._FAST.values()))
    launch, grid, device_index, args = entry[0], entry[1], entry[2], entry[4]
    tensors = pointers(made)
    ints = [t.data_ptr() for t in tensors]
    fns = {
        "tensors": lambda: launch(grid, device_index, *tensors, *args),
        ".data_ptr() at the call": lambda: launch(grid, device_index, *[t.data_ptr() for t in tensors], *args),
        "ints made once": lambda: launch(grid, device_index, *ints, *args),
        "the generated call": call,
    }
    for name, us in per_call(fns).items():
        print(f"{label:28s} {name:26s} {us:7.2f} us", flush=True)


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    add = load_module(ROOT / "generated" / "add.py")
    softmax = load_module(ROOT / "generated" / "softmax.py")
    rmsb = load_module(ROOT / "generated" / "rms_norm_backward.py")
    lnb = load_module(ROOT / "generated" / "layer_norm_backward.py")
    x, y = torch.randn(1537, device="cuda"), torch.randn(1537, device="cuda")
    z = torch.empty_like(x)

    def add_call():
        return add.add(x, y)

    case("add (3 pointers)", add, add_call, lambda made: [x, y, z])
    r = torch.randn(8, 512, device="cuda")
    s_out = torch.empty_like(r)
    case("softmax (2 pointers)", softmax, lambda: softmax.softmax(r), lambda made: [r, s_out])
    dy, xh = torch.randn(8, 512, device="cuda").half(), torch.randn(8, 512, device="cuda").half()
    w, b = torch.randn(512, device="cuda").half(), torch.randn(512, device="cuda").half()
    part = torch.empty(8 * 512, device="cuda")
    dx, dw, db = torch.empty_like(dy), torch.empty_like(w), torch.empty_like(b)
    case("rms_norm_backward (6)", rmsb, lambda: rmsb.rms_norm_backward(dy, xh, w, 1e-6),
         lambda made: [dy, xh, w, dx, dw, part])
    mu, rstd = xh.float().mean(1), torch.rand(8, device="cuda") + 1
    part2 = torch.empty(8 * 512, device="cuda")
    case("layer_norm_backward (10)", lnb, lambda: lnb.layer_norm_backward(dy, xh, w, mu, rstd),
         lambda made: [dy, xh, w, mu, rstd, dx, dw, db, part, part2])


if __name__ == "__main__":
    main()
