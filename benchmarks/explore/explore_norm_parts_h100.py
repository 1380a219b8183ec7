"""Where rms_norm's and layer_norm's forward + backward time goes against torch's (issue 33's >= 1.5x goal).

Times each half alone in CUDA graphs (do_bench_cudagraph): the generated forward and backward
functions (the backward on the saved values, as autograd calls it) against torch's forward
(F.rms_norm, F.layer_norm) and torch's backward kernels (aten's _fused_rms_norm_backward and
native_layer_norm_backward, as autograd calls them), at f16 and
bf16 rows of 4096 and 8192, and reports each as a fraction of the H100's DRAM bandwidth (the bytes
each must move: the forward reads x and writes y, the backward reads dy and x and writes dx).

Run from the repository root on a CUDA machine: python benchmarks/explore/explore_norm_parts_h100.py
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402

PEAK = 3.35e12  # bytes/s, H100 SXM HBM3


def module(name):
    return load_module(ROOT / "generated" / f"{name}.py")


def timed(fn):
    return triton.testing.do_bench_cudagraph(fn, rep=200) * 1e-3  # seconds


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    rms, rms_b = module("rms_norm"), module("rms_norm_backward")
    layer, layer_b = module("layer_norm"), module("layer_norm_backward")
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in [(4096, 4096), (8192, 4096), (4096, 8192), (16384, 2048)]:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w = (1 + torch.randn(n, device="cuda") / 4).to(dtype)
            b = (torch.randn(n, device="cuda") / 4).to(dtype)
            dy = torch.randn(m, n, device="cuda", dtype=dtype)
            size = m * n * x.element_size()
            _, mu, rstd = layer.layer_norm(x, w, b, 1e-6)
            # torch's backward kernels through their aten ops (autograd's engine cannot be captured)
            _, rms_rstd = torch.ops.aten._fused_rms_norm(x, [n], w, 1e-6)
            _, ln_mean, ln_rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-6)
            parts = {
                "rms fwd": (lambda: rms.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6), 2 * size),
                "rms bwd": (lambda: rms_b.rms_norm_backward(dy, x, w, 1e-6),
                            lambda: torch.ops.aten._fused_rms_norm_backward(dy, x, [n], rms_rstd, w, [True, True]),
                            3 * size),
                "ln fwd": (lambda: layer.layer_norm(x, w, b, 1e-6), lambda: F.layer_norm(x, (n,), w, b, 1e-6),
                           2 * size),
                "ln bwd": (lambda: layer_b.layer_norm_backward(dy, x, w, mu, rstd),
                           lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], ln_mean, ln_rstd, w, b,
                                                                             [True, True, True]), 3 * size),
            }
            for part, (ours, theirs, moved) in parts.items():
                a, t = timed(ours), timed(theirs)
                print(f"{str(dtype)[6:]} {m}x{n} {part}: tilegen {a * 1e6:.1f} us "
                      f"({moved / a / PEAK:.0%} of DRAM peak), "
                      f"torch {t * 1e6:.1f} us ({moved / t / PEAK:.0%}), torch/tilegen {t / a:.2f}", flush=True)


if __name__ == "__main__":
    main()
