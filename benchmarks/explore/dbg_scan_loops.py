"""Why a forward scan walked in tiles (`c over N by BC whole`) was wrong on the H100 past its first
tile while the scan from the end was right: the kernel of specs/row_cumsum.tile at BC = 1024,
compared with torch at 4 x 2048 (its error at each tile's first lane against the tile sums
before it), and hand-written variants of its loop."""

import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import triton
import triton.language as tl

from tilegen.compiler import compile_spec

ROOT = Path(__file__).resolve().parents[2]


def generated(bm=1, bc=1024, warps=4):
    spec = (ROOT / "specs" / "row_cumsum.tile").read_text()
    head, _, rest = spec.partition("  tune key N\n")
    body = rest[rest.index("  y[r, c]"):]
    head = head.replace("  block BM\n", f"  block BM = {bm}, BC = {bc}\n")
    head = head.replace("c over N whole", "c over N by BC whole")
    out = Path(tempfile.mkdtemp()) / "row_cumsum_dbg.py"
    out.write_text(compile_spec(head + body, "row_cumsum.tile").source)
    loader = importlib.util.spec_from_file_location(out.stem, out)
    module = importlib.util.module_from_spec(loader)
    sys.modules[out.stem] = module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader.loader.exec_module(module)
    return module


@triton.jit
def carry_from_sum(x_ptr, y_ptr, N, BC: tl.constexpr):
    row = tl.program_id(0)
    carry = tl.zeros((1,), dtype=tl.float32)
    for c in range(0, N // BC):
        offs = c * BC + tl.arange(0, BC)
        x = tl.load(x_ptr + row * N + offs[None, :])
        tl.store(y_ptr + row * N + offs[None, :], carry[:, None] + tl.cumsum(x, axis=1))
        carry = carry + tl.sum(x, axis=1)


@triton.jit
def carry_from_sum_1d(x_ptr, y_ptr, N, BC: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for c in range(0, N // BC):
        offs = c * BC + tl.arange(0, BC)
        x = tl.load(x_ptr + row * N + offs)
        tl.store(y_ptr + row * N + offs, carry + tl.cumsum(x, axis=0))
        carry = carry + tl.sum(x, axis=0)


@triton.jit
def carry_from_guarded_sum(x_ptr, y_ptr, N, BC: tl.constexpr):
    row = tl.program_id(0)
    carry = tl.zeros((1,), dtype=tl.float32)
    for c in range(0, N // BC):
        offs = c * BC + tl.arange(0, BC)
        x = tl.load(x_ptr + row * N + offs[None, :])
        tl.store(y_ptr + row * N + offs[None, :], carry[:, None] + tl.cumsum(x, axis=1))
        carry = carry + tl.sum(tl.where(offs[None, :] < N, x, 0), axis=1)


def main():
    torch.manual_seed(0)
    m, n, bc = 4, 2048, 1024
    x = torch.rand(m, n, device="cuda")
    want = torch.cumsum(x.double(), dim=1).float()
    module = generated(bc=bc)
    y = module.row_cumsum(x)
    tile_sum = x[:, :bc].double().sum(dim=1).float()
    print("generated: max error", (y - want).abs().max().item())
    print("  error at the second tile's first lane:", (y[:, bc] - want[:, bc]).tolist())
    print("  first tile's sum:", tile_sum.tolist())
    print("  y[:, bc] =", y[:, bc].tolist(), " x[:, bc] =", x[:, bc].tolist())
    for kernel in (carry_from_sum, carry_from_sum_1d, carry_from_guarded_sum):
        y = torch.empty_like(x)
        try:
            kernel[(m,)](x, y, n, BC=bc)
            print(f"{kernel.__name__}: max error", (y - want).abs().max().item(), flush=True)
        except Exception as error:  # Triton's compiler asserts on some of them
            print(f"{kernel.__name__}: {type(error).__name__}: {str(error)[:200]}", flush=True)


if __name__ == "__main__":
    main()
