"""round, floor, ceil, trunc, sign, fmod and remainder against torch, in the interpreter.

Each runs in a one-line spec at several block sizes over a shape that leaves tails along both
axes, on values of both signs, ties (``k + 0.5``: ``round`` takes the even neighbour), zeros of
both signs, NaN, infinities, values beyond float32's integers and integers; the results must be
torch's exactly (the sign of a zero included), as the kernel and as the module's torch reference.
``TILEGEN_TEST_GPU=1`` runs the same tests on the GPU.
"""

import math
import os

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.runner import load_module

UNARY = """\
kernel {name}
  in  x: {dtype}[M, N]
  out z: {dtype}[M, N]
  block BM = {bm}, BN = {bn}
  grid  r over M by BM, c over N by BN
  z[r, c] = {expr}
"""

BINARY = """\
kernel {name}
  in  x: {dtype}[M, N]
  in  y: {dtype}[M, N]
  in  d: {scalar}
  out z: {dtype}[M, N]
  block BM = {bm}, BN = {bn}
  grid  r over M by BM, c over N by BN
  z[r, c] = {expr}
"""

DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32}
BLOCKS = [(1, 16), (4, 8), (16, 64)]
SHAPE = (19, 21)
DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def build(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source)
    return load_module(path)


def values(dtype: str, seed: int = 0) -> torch.Tensor:
    """A [19, 21] tensor of ``dtype``: the special values first, then ties and random ones of both signs."""
    special = torch.tensor([math.nan, -0.0, 0.0, math.inf, -math.inf, 8388609.0, 2.0**24 + 2, 1e30, -1e30,
                            -1e-10, 1e-10, 0.49999997, -0.49999997, 0.5, -0.5])
    ties = torch.arange(-8, 9) + 0.5
    count = SHAPE[0] * SHAPE[1] - len(special) - 2 * len(ties)
    x = torch.cat([special, ties, -ties, torch.randn(count, generator=torch.Generator().manual_seed(seed)) * 10])
    if dtype == "i32":
        return x.nan_to_num(0.0, 0.0, 0.0).clamp(-1000, 1000).to(DEVICE, torch.int32).reshape(SHAPE)
    return x.to(DEVICE, DTYPES[dtype]).reshape(SHAPE)


def assert_same(got: torch.Tensor, want: torch.Tensor, ulps: int = 0) -> None:
    """``got`` is ``want``: equal, NaN where it is NaN, zeros of the same sign (``ulps``: within that
    many of ``want``'s units in the last place, for a result the interpreter rounds itself)."""
    assert got.dtype == want.dtype
    if ulps:
        spacing = torch.finfo(want.dtype).eps * want.abs().float().clamp(min=1.0) * ulps
        close = (got.float() - want.float()).abs() <= spacing
        assert bool((close | (got.isnan() & want.isnan()) | (got == want)).all()), (got, want)
        return
    same = (got == want) | (got.isnan() & want.isnan())
    assert bool(same.all()), (got[~same][:8], want[~same][:8])
    if want.is_floating_point():
        zero = want == 0
        assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero])), "a zero's sign"


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["round", "floor", "ceil", "trunc", "sign"])
def test_rounding_matches_torch(tmp_path, name, dtype, block):
    module = build(tmp_path, UNARY.format(name=f"k_{name}", dtype=dtype, bm=block[0], bn=block[1],
                                          expr=f"{name}(x[r, c])"), name)
    x = values(dtype)
    want = getattr(torch, name)(x)
    assert_same(getattr(module, f"k_{name}")(x), want)
    assert_same(module.reference(x), want)


def test_round_takes_ties_to_even():
    """The oracle itself: torch.round is half to even, so the test above checks ties."""
    assert torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5])).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


def divisors(dtype: str) -> torch.Tensor:
    """Divisors of both signs with 0, -0, infinities and NaN among them (integers: none 0)."""
    y = torch.randn(SHAPE, generator=torch.Generator().manual_seed(5)) * 3
    y.view(-1)[:8] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 3.0])
    if dtype == "i32":
        y = y.nan_to_num(7.0, 7.0, -7.0).to(DEVICE, torch.int32)
        return torch.where(y == 0, -3, y)
    return y.to(DEVICE, DTYPES[dtype])


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["fmod", "remainder"])
def test_fmod_and_remainder_match_torch(tmp_path, name, dtype, block):
    """fmod takes the dividend's sign (C's), remainder the divisor's (Python's); by 0 NaN (floats), of
    inf NaN, by inf the dividend (remainder: moved by the divisor where the signs differ). Also
    with a scalar input, a literal divisor and a literal dividend."""
    literal = "2" if dtype == "i32" else "2.5"
    scalar = "i32" if dtype == "i32" else "f32"
    wide = torch.promote_types(DTYPES[dtype], DTYPES[scalar])
    module = build(tmp_path, BINARY.format(name=f"k_{name}", dtype=dtype, scalar=scalar, bm=block[0], bn=block[1],
                                           expr=f"{name}(x[r, c], y[r, c])"), name)
    x, y = values(dtype), divisors(dtype)
    f = getattr(torch, name)
    # remainder adds the divisor: in float32 for f16 and bf16, rounded once (torch: per operation); and
    # the interpreter truncates float32 to bf16 where torch rounds
    ulps = 1 if dtype in ("f16", "bf16") and name == "remainder" else 0
    assert_same(getattr(module, f"k_{name}")(x, y, 3), f(x, y), ulps)
    assert_same(module.reference(x, y, 3), f(x, y))
    # a scalar input is float32: f16 and bf16 tiles meet it in float32
    cases = [(f"{name}(x[r, c], d)", lambda d: f(x.to(wide), torch.tensor(d, dtype=wide)).to(x.dtype)),
             (f"{name}(x[r, c], {literal})", lambda d: f(x, torch.tensor(float(literal), dtype=x.dtype))),
             (f"{name}(-{literal}, y[r, c])", lambda d: f(torch.tensor(-float(literal), dtype=y.dtype), y))]
    for i, (expr, oracle) in enumerate(cases):
        text = BINARY.format(name=f"{name}{i}", dtype=dtype, scalar=scalar, bm=block[0], bn=block[1], expr=expr)
        other = build(tmp_path, text, f"{name}{i}")
        d = -3 if dtype == "i32" else -0.75
        assert_same(getattr(other, f"{name}{i}")(x, y, d), oracle(d), ulps)
        assert_same(other.reference(x, y, d), oracle(d), ulps)
