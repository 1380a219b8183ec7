"""GPU parity: every generated seed kernel against its hand-written seed kernel and reference.

Run on a CUDA machine from the repository root: ``python benchmarks/gpu_parity.py``. Prints one
line per case (``torch.equal`` with the hand-written kernel, max error vs ``reference``) and a
summary; exits 1 on any mismatch. Needs only torch and triton (no lark/jinja).
"""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reference import copy as ref_copy  # noqa: E402
from tests.reference import grayscale as ref_grey  # noqa: E402
from tests.reference import matmul as ref_matmul  # noqa: E402
from tests.reference import swizzle as ref_swizzle  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

DEV = "cuda"
gen = {name: load_module(ROOT / "generated" / f"{name}.py") for name in
       ["copy", "rgb2grey", "matmul_naive", "matmul_grouped", "swizzle"]}
rows = []


def record(kernel, shape, equal, err, tol):
    ok = bool(equal) and err <= tol
    rows.append(ok)
    print(f"{kernel:15s} {shape:28s} equal_handwritten={equal!s:5s} max_err_vs_reference={err:.3g} {'PASS' if ok else 'FAIL'}")


torch.manual_seed(0)
for n in [1, 7, 33, 127, 1000, 98432, 2**24 + 3]:
    x = torch.randn(n, device=DEV)
    z = gen["copy"].copy(x)
    record("copy", f"N={n}", torch.equal(z, ref_copy.copy(x, bs=1024)), (z - gen["copy"].reference(x)).abs().max().item(), 0)

for h, w in [(1, 1), (7, 33), (33, 127), (1066, 1600), (8192, 8192)]:
    x = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, device=DEV)
    y = gen["rgb2grey"].rgb2grey(x)
    err = (y.int() - gen["rgb2grey"].reference(x).int()).abs().max().item()
    record("rgb2grey", f"3x{h}x{w}", torch.equal(y, ref_grey.rgb2grey(x, bs=(32, 32))), err, 1)

for kernel in ["matmul_naive", "matmul_grouped"]:
    for (m, k, n) in [(1, 64, 1), (7, 64, 33), (33, 128, 127), (127, 64, 5), (512, 512, 512), (1000, 1024, 777)]:
        for layout in ["nn", "tt"]:
            a = torch.randn(k, m, device=DEV, dtype=torch.float16).t() if layout[0] == "t" else torch.randn(m, k, device=DEV, dtype=torch.float16)
            b = torch.randn(n, k, device=DEV, dtype=torch.float16).t() if layout[1] == "t" else torch.randn(k, n, device=DEV, dtype=torch.float16)
            if kernel == "matmul_grouped":
                c = gen[kernel].matmul_grouped(a, b)
                hand = ref_matmul.grouped_matmul(a, b, bm=64, bn=64, bk=64, group_sz=8)
            else:
                c = gen[kernel].matmul_naive(a, b)
                hand = ref_matmul.naive_matmul(a, b, bm=64, bn=64, bk=64)
            expected = gen[kernel].reference(a, b).float()
            err = (c.float() - expected).abs().max().item()
            # fp16 output: within 5e-2 absolute plus 1e-2 relative (one or two fp16 ulps at |c| ~ 32).
            close = torch.allclose(c.float(), expected, atol=5e-2, rtol=1e-2)
            torch_err = (c.float() - torch.matmul(a, b).float()).abs().max().item()
            record(kernel, f"{m}x{k}x{n} {layout} (vs torch {torch_err:.3g})", torch.equal(c, hand) and close, err, float("inf"))

x = torch.arange(20, device=DEV).view(5, 4)
z = gen["swizzle"].swizzle(x)
expected = torch.tensor([[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11], [12, 14, 16, 18], [13, 15, 17, 19]], device=DEV)
record("swizzle", "5x4 group 3", torch.equal(z, ref_swizzle.swizzle(x, group_sz=3)) and torch.equal(z, expected),
       (z - gen["swizzle"].reference(x)).abs().max().item(), 0)

print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {__import__('triton').__version__}")
print(f"{sum(rows)} passed, {len(rows) - sum(rows)} failed")
sys.exit(0 if all(rows) else 1)
