"""fp8 tensors (``f8e4m3``, ``f8e5m2``: torch's float8_e4m3fn and float8_e5m2) in the interpreter.

``specs/matmul_fp8.tile`` (a row-wise scaled GEMM, torch._scaled_mm's recipe) runs every config's
tile shape against torch computing the same product in float32 from the fp8 values, at sizes with
tails, through descriptors (K a multiple of 16) and through pointers (K not), with a per-tensor
scale as an expanded one, NaN and infinities. Arithmetic on fp8 tiles computes in float32;
``dot`` takes two fp8 tiles of one dtype. ``TILEGEN_TEST_GPU=1`` runs the GEMM tests on the GPU.
"""

import os

import pytest
import torch

from tests.conftest import config_indices
from tilegen.errors import SpecError
from tilegen.tolerance import UNIT_ROUNDOFF, gamma

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"
FP8 = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}


def operands(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    """a [m, k], b [n, k] in ``dtype`` (values of both signs), positive row and column scales."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 4).to(dtype)
    b = (torch.randn(n, k, generator=g) * 4).to(dtype)
    scale_a = torch.rand(m, generator=g) + 0.25
    scale_b = torch.rand(n, generator=g) + 0.25
    return tuple(t.to(DEVICE) for t in (a, b, scale_a, scale_b))


def scaled_mm(a, b, scale_a, scale_b):
    """torch's product of the fp8 values in float32 (exact products, float32 sums), scaled, bf16."""
    return ((a.float() @ b.float().T) * scale_a[:, None] * scale_b[None, :]).to(torch.bfloat16)


def assert_bf16_close(got: torch.Tensor, want: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                      scale_a: torch.Tensor, scale_b: torch.Tensor) -> None:
    """Equal but for the order of float32 sums (a unit of bf16 where the rounding falls apart) and,
    on the GPU, the fp8 accumulator of Hopper's tensor cores: about 14 bits (2**-14 per rounding,
    tilegen.tolerance's bound) of the summed magnitudes |a| @ |b|^T, scaled."""
    assert got.dtype == torch.bfloat16
    allowed = 1e-3 + 2**-7 * want.float().abs()
    if DEVICE != "cpu":
        sums = (a.float().abs() @ b.float().abs().T) * scale_a[:, None] * scale_b[None, :]
        allowed = allowed + 2 * gamma(a.shape[1], UNIT_ROUNDOFF["fp8_dot"]) * sums
    error = (got.float() - want.float()).abs()
    same = (got.isnan() & want.isnan()) | (got == want)  # NaN where torch has it, equal infinities
    bad = ~same & ~(error <= allowed)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements off, first at {bad.nonzero()[0].tolist()}"


@pytest.mark.parametrize("name", sorted(FP8))
@pytest.mark.parametrize(("m", "n", "k"), [(70, 50, 96), (33, 130, 40), (1, 17, 70)])
def test_matmul_fp8_matches_torch_at_every_tile_shape(generated, name, m, n, k):
    module = generated("matmul_fp8")
    a, b, scale_a, scale_b = operands(m, n, k, FP8[name])
    want = scaled_mm(a, b, scale_a, scale_b)
    assert_bf16_close(module.reference(a, b, scale_a, scale_b), want, a, b, scale_a, scale_b)
    for config in config_indices(module):
        assert_bf16_close(module.matmul_fp8(a, b, scale_a, scale_b, config=config), want, a, b, scale_a, scale_b)


def test_matmul_fp8_takes_a_per_tensor_scale_and_strided_operands(generated):
    module = generated("matmul_fp8")
    a, b, _, _ = operands(64, 48, 80, torch.float8_e4m3fn, seed=1)
    one_a, one_b = torch.full((1,), 0.5, device=DEVICE), torch.full((1,), 3.0, device=DEVICE)
    got = module.matmul_fp8(a, b, one_a.expand(64), one_b.expand(48))
    want = ((a.float() @ b.float().T) * 1.5).to(torch.bfloat16)
    assert_bf16_close(got, want, a, b, one_a.expand(64), one_b.expand(48))
    wide = torch.zeros(64, 160, device=DEVICE).to(torch.float8_e4m3fn)
    wide[:, ::2] = a  # a view with a column stride of 2
    got = module.matmul_fp8(wide[:, ::2], b, one_a.expand(64), one_b.expand(48))
    assert_bf16_close(got, want, a, b, one_a.expand(64), one_b.expand(48))


@pytest.mark.skipif(DEVICE == "cpu", reason="Triton's interpreter loads fp8 NaN and infinities as finite numbers")
def test_matmul_fp8_nan_and_infinity_reach_their_rows_and_columns(generated):
    """e4m3 has NaN and no infinity (torch's float8_e4m3fn), e5m2 both: a NaN operand makes its row
    NaN, an infinity in e5m2 gives torch's inf or NaN, and the other rows stay finite."""
    module = generated("matmul_fp8")
    for dtype in FP8.values():
        a, b, scale_a, scale_b = operands(40, 24, 48, dtype, seed=2)
        a[3, 5] = float("nan")
        if dtype == torch.float8_e5m2:
            b[7, 2] = float("inf")
        want = scaled_mm(a, b, scale_a, scale_b)
        got = module.matmul_fp8(a, b, scale_a, scale_b)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        assert got[3].isnan().all()
        assert_bf16_close(got, want, a, b, scale_a, scale_b)


SPEC = """\
kernel f8_math
  in  x: {dtype}[M, N]
  in  y: {other}[M, N]
  out z: f32[M, N]
  block BM = 4, BN = 16
  grid  r over M by BM, c over N by BN
  z[r, c] = {expr}
"""


@pytest.mark.parametrize("name", sorted(FP8))
def test_arithmetic_on_fp8_computes_in_float32(compiled, name):
    """fp8 tiles with each other, with f16 and with literals compute in float32 (torch has no fp8
    arithmetic: its reference converts as the kernel does)."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(9, 37, generator=g) * 8).to(FP8[name]).to(DEVICE)
    for other, expr, want in [
        (name, "x[r, c] * y[r, c] + 0.5", lambda y: x.float() * y.float() + 0.5),
        ("f16", "x[r, c] - y[r, c] / 3.0", lambda y: x.float() - (y / 3.0).float()),  # y / 3.0 in f16
        (name, "exp(x[r, c] / 16.0) + 0.0 * y[r, c]", lambda y: torch.exp(x.float() / 16.0)),
    ]:
        y = (torch.randn(9, 37, generator=g) * 8).to(FP8.get(other, torch.float16)).to(DEVICE)
        module = compiled(SPEC.format(dtype=name, other=other, expr=expr), f"f8_{other}_{len(expr)}")
        torch.testing.assert_close(module.f8_math(x, y), want(y), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(module.reference(x, y), want(y), rtol=1e-6, atol=1e-6)


def test_dot_takes_fp8_operands_of_one_dtype(compiled):
    source = """\
kernel mixed
  in  a: f8e4m3[M, K]
  in  b: {other}[K, N]
  out c: f32[M, N]
  block BM = 16, BN = 16, BK = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n])
  c[m, n] = acc
"""
    with pytest.raises(SpecError, match="'dot' operands must have one dtype; 'a' is f8e4m3, 'b' is f16"):
        compiled(source.format(other="f16"), "mixed")
    with pytest.raises(SpecError, match="'a' is f8e4m3, 'b' is f8e5m2"):
        compiled(source.format(other="f8e5m2"), "mixed")


def test_casts_to_fp8_store_what_torch_converts(compiled):
    """``f8e4m3(...)`` and ``f8e5m2(...)`` of values each dtype holds exactly (the interpreter's own
    rounding of other values is not torch's), and an fp8 output written from float32."""
    source = """\
kernel to_f8
  in  x: f32[N]
  out y: f8e4m3[N]
  out z: f8e5m2[N]
  block BN = 32
  grid  i over N by BN
  y[i] = f8e4m3(x[i] * 2.0)
  z[i] = x[i]
"""
    module = compiled(source, "to_f8")
    exact = torch.tensor([0.0, -0.0, 1.0, -1.5, 0.125, 3.0, -28.0, 0.015625, 112.0, -96.0, 2.0**-7, 5.0])
    x = exact.repeat(7)[:77].to(DEVICE)
    y, z = module.to_f8(x)
    assert y.dtype == torch.float8_e4m3fn and z.dtype == torch.float8_e5m2
    assert torch.equal(y.float(), (x * 2.0).to(torch.float8_e4m3fn).float())
    assert torch.equal(z.float(), x.to(torch.float8_e5m2).float())
    want_y, want_z = module.reference(x)
    assert torch.equal(want_y.float(), y.float()) and torch.equal(want_z.float(), z.float())
