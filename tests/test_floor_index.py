"""Integer ``//`` and ``%`` (Python's: the quotient rounded down, the remainder of the divisor's
sign), in values and in indices: a tile axis split into digits (``p // W``, ``p % W``) reads and
stores through them, which is how a spec walks a flattened extent (an implicit GEMM's
``q over C * KH * KW``, its output pixels ``p over H_out * W_out``). In Triton's interpreter, against
torch's ``//`` and ``%`` and independent index arithmetic."""

import os

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import load_module

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def _module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    return load_module(path)


VALUES = """\
kernel floors
  in  x: i32[N]
  in  d: i32
  out q: i32[N]
  out r: i32[N]
  block BN = 4
  grid  i over N by BN
  q[i] = x[i] // d
  r[i] = x[i] % d
"""


@pytest.mark.parametrize("d", [3, -3, 1, 7])
def test_floor_divide_and_remainder_round_down_as_pythons(tmp_path, d):
    """Triton's own // and % round toward 0 (C's); a negative x or d takes the kernel's helper."""
    module = _module(tmp_path, VALUES, "floors")
    x = torch.arange(-11, 12, dtype=torch.int32, device=DEVICE)
    q, r = module.floors(x, d)
    assert torch.equal(q, torch.div(x, d, rounding_mode="floor")) and torch.equal(r, torch.remainder(x, d))
    assert torch.equal(q * d + r, x)
    for ours, theirs in zip(module.reference(x, d), (q, r), strict=True):
        assert torch.equal(ours, theirs)


DIGITS = """\
kernel digits
  in  x: f32[H, W]
  out y: f32[W, H]
  block BP = 4
  grid  p over H * W by BP
  y[p % W, p // W] = x[p // W, p % W] + 1
"""


@pytest.mark.parametrize("bp", [1, 4, 16, 64])
def test_a_flattened_axis_reads_and_stores_through_its_digits(tmp_path, bp):
    """p over H * W walks x in row-major order: its digits read x[h, w] and store the transpose."""
    module = _module(tmp_path, DIGITS, "digits")
    x = torch.randn(5, 7, device=DEVICE)
    assert torch.equal(module.digits(x, BP=bp), x.T + 1)
    assert torch.equal(module.reference(x), x.T + 1)


IM2COL = """\
kernel im2col
  in  x: f32[C, L]
  in  w: f32[K]
  out y: f32[C * K, L_out = L - K + 1]
  block BQ = 4, BL = 8
  grid  q over C * K by BQ, l over L_out by BL
  c = q // K
  k = q % K
  y[q, l] = x[c, l + k] * w[k]
"""


@pytest.mark.parametrize(("bq", "bl"), [(1, 1), (4, 8), (16, 2)])
def test_im2col_gathers_a_window_per_flattened_row(tmp_path, bq, bl):
    """Row q of the output is channel q // K at tap q % K, scaled by the tap's weight: torch's
    unfold, row for row (locals of index arithmetic: c and k are inlined into the indices)."""
    module = _module(tmp_path, IM2COL, "im2col")
    x, w = torch.randn(3, 10, device=DEVICE), torch.randn(4, device=DEVICE)
    want = (x.unfold(1, 4, 1) * w).permute(0, 2, 1).reshape(3 * 4, 7)  # [C, L_out, K] -> [C * K, L_out]
    assert torch.equal(module.im2col(x, w, BQ=bq, BL=bl), want)
    assert torch.equal(module.reference(x, w), want)


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


HEAD = ("kernel k\n  in  x: f32[H, W]\n  in  s: f32\n  out y: f32[H, W]\n  block BP = 8\n"
        "  grid p over H * W by BP\n")


@pytest.mark.parametrize(("line", "words"), [
    ("  y[p / W, p % W] = x[p / W, p % W]\n", "tile axis 'p' is divided with '/', which divides sizes"),
    ("  y[p // W, p % H] = x[p // W, p % W]\n", "are not its mixed-radix digits"),
    ("  y[p // W % H, p % W] = x[p // W, p % W]\n", "the last digit of 'p' has no modulus"),
    ("  y[p // W, p % W + 1] = x[p // W, p % W]\n", "each offset is 'p // D', 'p // D % M' or 'p % M'"),
    ("  y[p // W, p % W] = x[p // W, W // p]\n", "tile axis 'p' divides ('//')"),
    ("  y[p // W, p % W] = x[p // W, p % W] % s\n", "'%' takes integers"),
    ("  y[p // W, p % W] = x[p // W, p % W] // 2.0\n", "'//' takes integers"),
])
def test_digits_and_floor_operators_are_checked(line, words):
    assert any(words in e for e in _errors(HEAD + line)), _errors(HEAD + line)


HALVED = """\
kernel halved
  in  x: f32[H, C]
  out y: f32[H, C]
  block BC = 4
  grid  h over H, c over C by BC
  y[h, c] = x[(h - 1) / 2, c]
"""


def test_an_index_axis_divided_rounds_down_below_zero(tmp_path):
    """(h - 1) / 2 at h = 0 is -1 (rounded down, not toward 0): the row reads 0, not row 0."""
    module = _module(tmp_path, HALVED, "halved")
    x = torch.randn(5, 6, device=DEVICE)
    want = torch.stack([x[(h - 1) // 2] if h > 0 else torch.zeros(6, device=DEVICE) for h in range(5)])
    assert torch.equal(module.halved(x), want)
    assert torch.equal(module.reference(x), want)
