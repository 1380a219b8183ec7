"""The tolerance rule of tilegen.tolerance (used by ``tilegen run``, the demo and the tests):
it grows with the length of the spec's sums, so the float32 reorderings a GPU makes pass at
K = 1297 (the H100 demo's matmul_f32 and matmul_block_ptr), while wrong results still fail.

No kernel runs here: the "GPU" results are simulated in float32 with other summation orders.
"""

import math

import pytest
import torch

from tests.conftest import spec_named
from tilegen import model as m
from tilegen import runner
from tilegen.check import check
from tilegen.parser import parse
from tilegen.tolerance import (
    UNIT_ROUNDOFF,
    Accumulation,
    accumulations,
    allowed_errors,
    assert_close,
    compare,
    extents,
    gamma,
    growth,
)

U32 = UNIT_ROUNDOFF["f32"]


def _matmul(a, b):
    return a.float() @ b.float()


def _operands(m, k, n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)


def _sequential(a, b):
    """One float32 rounding per term, k by k: the longest rounding chain any order has."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc += torch.outer(a[:, k].float(), b[k, :].float())
    return acc


def _blocked(a, b, bk=32):
    """A tile loop's order: a float32 partial product per BK slice of K, added in turn."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], bk):
        acc += a[:, k:k + bk].float() @ b[k:k + bk, :].float()
    return acc


# ----------------------------------------------------------------------------- the rule's parts


def test_gamma_is_higham_for_short_sums_and_probabilistic_for_long_ones():
    assert gamma(0, U32) == 0.0
    assert gamma(1, U32) == pytest.approx(U32, rel=1e-6)
    assert gamma(10, U32) == pytest.approx(10 * U32 / (1 - 10 * U32), rel=1e-6)  # deterministic: smaller
    k = 1297
    assert gamma(k, U32) == pytest.approx(math.exp(10 * math.sqrt(k) * U32 + k * U32**2 / (1 - U32)) - 1)
    assert gamma(k, U32) < k * U32
    # a tf32 dot: both operands rounded to 10 mantissa bits first
    assert gamma(k, U32, UNIT_ROUNDOFF["tf32"]) == pytest.approx(2 * 2.0**-11, rel=0.1)


def test_accumulations_follow_the_spec():
    assert accumulations(spec_named("copy")) == ()
    assert accumulations(spec_named("swizzle")) == ()
    assert accumulations(spec_named("matmul_f32")) == (Accumulation("dot", "K", U32),)
    assert accumulations(spec_named("matmul_block_ptr")) == (Accumulation("dot", "K", U32),)  # f16: exact products
    assert accumulations(spec_named("softmax")) == (Accumulation("sum", "N", U32),)  # max is exact
    assert accumulations(spec_named("layer_norm")) == (Accumulation("mean", "N", U32),) * 2
    # attention: q.k over D, then the sum of p and the dot p.v over the key tiles (T)
    found = [(a.kind, a.dim) for a in accumulations(m.specialize(spec_named("attention"), {"DT": "f16"}))]
    assert found == [("dot", "D"), ("sum", "T"), ("dot", "T")]


def test_a_float32_dot_without_precision_is_tf32():
    text = (spec_named("matmul_f32").source).replace(", precision=ieee", "")
    (dot,) = accumulations(check(parse(text, "tf32.tile")))
    assert dot.operand_unit == UNIT_ROUNDOFF["tf32"]


def test_extents_are_read_off_the_arguments():
    a, b = torch.zeros(3, 5), torch.zeros(5, 7)
    assert extents(spec_named("matmul_f32"), (a, b)) == {"M": 3, "K": 5, "N": 7}
    with pytest.raises(KeyError, match="'K'"):
        growth(spec_named("matmul_f32"), {"M": 3})


# ----------------------------------------------------------------------------- matmul_f32, K = 1297


@pytest.fixture(scope="module")
def k1297():
    """The H100 demo's matmul_f32 operands (K = 1297), with fewer rows to stay quick."""
    a, b = _operands(96, 1297, 80)
    return a, b, _matmul(a, b)


@pytest.mark.parametrize("order", ["sequential", "blocked", "exact"])
def test_correct_float32_results_pass_at_k_1297(k1297, order):
    a, b, ref = k1297
    out = {
        "sequential": lambda: _sequential(a, b),
        "blocked": lambda: _blocked(a, b),
        "exact": lambda: (a.double() @ b.double()).float(),  # correctly rounded
    }[order]()
    result = assert_close(spec_named("matmul_f32"), (a, b), out, ref, _matmul)
    assert result.ratio < 0.05  # a wide margin: these orders are 20x inside the bound or more


def test_the_h100_error_passes_where_the_old_fixed_tolerance_failed(k1297):
    a, b, ref = k1297
    out = ref + 4.0e-4 * torch.sign(torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)))
    assert not torch.allclose(out, ref, atol=1e-4, rtol=1e-4)  # the fixed f32 tolerance
    assert compare(spec_named("matmul_f32"), (a, b), out, ref, _matmul).passed


def test_noise_at_the_bound_passes(k1297):
    """The f64 product plus uniform noise up to g * |A| @ |B| (the kernel's own share)."""
    a, b, ref = k1297
    g = growth(spec_named("matmul_f32"), {"K": a.shape[1]})
    size = a.abs().double() @ b.abs().double()
    noise = (2 * torch.rand(ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) - 1) * g * size
    out = (a.double() @ b.double() + noise).float()
    assert compare(spec_named("matmul_f32"), (a, b), out, ref, _matmul).passed


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(lambda a, b: _matmul(a, b) * 1.01, id="one-percent-off"),
        pytest.param(lambda a, b: _matmul(a[:, :-1], b[:-1]), id="last-k-dropped"),
        pytest.param(lambda a, b: _matmul(a[:, 1:], b[1:]), id="first-k-dropped"),
        pytest.param(lambda a, b: _matmul(a[:, 1:], b[:-1]), id="k-shifted-by-one"),
        pytest.param(lambda a, b: _blocked(a[:, :1280], b[:1280]), id="k-tail-tile-lost"),
    ],
)
def test_wrong_results_fail_at_k_1297(k1297, bug):
    a, b, ref = k1297
    result = compare(spec_named("matmul_f32"), (a, b), bug(a, b), ref, _matmul)
    assert not result.passed and result.ratio > 3
    with pytest.raises(AssertionError, match=r"matmul_f32 is outside its tolerance .*c\[\d+, \d+\]"):
        assert_close(spec_named("matmul_f32"), (a, b), bug(a, b), ref, _matmul)


@pytest.mark.parametrize("rounded", [torch.float16, torch.bfloat16])
def test_operands_silently_rounded_below_float32_fail(rounded):
    """A precision=ieee matmul whose operands lost bits (as tf32 would): caught at moderate K."""
    a, b = _operands(64, 64, 64, seed=3)
    out = _matmul(a.to(rounded), b.to(rounded))
    assert not compare(spec_named("matmul_f32"), (a, b), out, _matmul(a, b), _matmul).passed


def test_block_ptr_on_tensor_cores_passes_at_k_1280():
    """f16 operands, exact products, float32 sums in k order: the H100's 5.8e-4 case."""
    a, b = _operands(64, 1280, 64, dtype=torch.float16, seed=4)
    ref = _matmul(a, b)
    assert compare(spec_named("matmul_block_ptr"), (a, b), _sequential(a, b), ref, _matmul).passed
    assert not compare(spec_named("matmul_block_ptr"), (a, b), ref * 1.01, ref, _matmul).passed


def test_the_runner_uses_the_same_rule(k1297):
    a, b, ref = k1297
    spec = spec_named("matmul_f32")
    for out in (_sequential(a, b), ref * 1.01):
        expected = compare(spec, (a, b), out, ref, _matmul)
        assert runner.compare(out, ref, spec, (a, b), _matmul) == (expected.max_error, expected.passed)


# ----------------------------------------------------------------------------- other outputs


def test_sums_grow_the_bound_only_as_the_reference_allows():
    """A float32 row sum (softmax) adds 2 * gamma_N * |y| at most; elementwise specs add nothing."""
    x = torch.randn(4, 3000)
    y = torch.softmax(x, dim=1)
    (bound,) = allowed_errors(spec_named("softmax"), (x,), y, lambda x: torch.softmax(x, dim=1))
    base = 1e-4 + 1e-4 * y.double()
    assert bool((bound >= base).all()) and bool((bound - base <= 2 * gamma(3000, U32) * 1.0).all())
    (copy_bound,) = allowed_errors(spec_named("copy"), (x[0],), x[0], lambda v: v)
    assert torch.equal(copy_bound, 1e-4 + 1e-4 * x[0].double().abs())


def test_integer_outputs_are_exact_unless_stored_from_float_math():
    x = torch.arange(12).reshape(3, 4)
    spec = spec_named("swizzle")
    assert compare(spec, (x,), x.clone(), x).passed
    assert not compare(spec, (x,), x + torch.eye(3, 4, dtype=x.dtype), x).passed  # off by one
    grey = torch.full((2, 2), 100, dtype=torch.uint8)
    image = torch.zeros(3, 2, 2, dtype=torch.uint8)
    assert compare(spec_named("rgb2grey"), (image,), grey + 1, grey).passed  # a rounding step
    assert not compare(spec_named("rgb2grey"), (image,), grey + 2, grey).passed


def test_nan_fails_and_equal_infinities_pass():
    x = torch.tensor([1.0, float("inf"), -float("inf")])
    spec = spec_named("copy")
    assert compare(spec, (x,), x.clone(), x).passed
    nan = x.clone()
    nan[0] = float("nan")
    result = compare(spec, (x,), nan, x)
    assert not result.passed and result.max_error == math.inf
    assert not compare(spec, (x,), x[:2], x).passed  # a shape mismatch


@pytest.mark.parametrize(
    "reference,output",
    [
        ([1.0, 2.0, float("inf"), 4.0], [1.0, 2.0, -float("inf"), 4.0]),  # the other infinity
        ([1.0, 2.0, float("inf"), 4.0], [1.0, 2.0, 3.0, 4.0]),  # a finite value for an infinity
        ([1.0, 2.0, float("inf"), 4.0], [100.0, 2.0, float("nan"), 4.0]),  # a NaN beside a wrong value
        ([1.0, float("nan"), 3.0, 4.0], [100.0, 7.0, 3.0, 4.0]),  # a NaN reference
        ([1.0, float("nan"), 3.0, 4.0], [1.0, float("nan"), 3.0, 4.0]),  # NaN on both sides
    ],
)
def test_non_finite_values_fail_unless_equal_infinities(reference, output):
    """An unbounded reference must not make its element, or the others, pass."""
    spec = spec_named("copy")
    ref, out = torch.tensor(reference), torch.tensor(output)
    result = compare(spec, (ref,), out, ref)
    assert not result.passed and result.ratio == math.inf
