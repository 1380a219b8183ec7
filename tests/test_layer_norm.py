"""Layer norm (specs/layer_norm.tile and its backward, specs/layer_norm_backward.tile) in every float
dtype it takes (f16, bf16, f32, Liger-Kernel's layer_norm test dtypes), at every tune config of the
forward and of the backward (through autograd), at rows with tails (N = 7, 130, 333), rows of both
signs and weights of both signs, and rows holding NaN or an infinity.

The answer is torch's, computed the way torch computes half-precision layer norm: in float32 (here
torch's own F.layer_norm and its autograd on float32 copies of the same values), rounded once to
the inputs' dtype. Each output must lie within half a unit in the last place (ulp) of that float32
value, plus a float32 slack for the other order of the float32 sums (:func:`_assert_one_rounding`).
Triton's interpreter rounds float32 to bf16 toward zero (its ``.to(tl.bfloat16)``, where a GPU
rounds to nearest), so there bf16 outputs get a whole ulp; the same tests run on a GPU with half an
ulp::

    TILEGEN_TEST_GPU=1 python -m pytest -n 0 tests/test_layer_norm.py
"""

import os

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices, force_config

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
SHAPES = [(1, 7), (5, 333), (6, 130)]
EPS = 1e-5
#: float32 slack, relative to the magnitude of the terms an output sums (its ``scale``): torch's
#: float32 sums of N <= 333 terms in another order than the kernel's (a few 2**-24 each)
F32_SLACK = 2e-5


def _ulp(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s values at each element of ``value`` (float64): 2**(e - p) for
    |value| in [2**e, 2**(e + 1)), the subnormal spacing below ``dtype``'s smallest normal."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(value.double().abs())
    binade = torch.ldexp(torch.ones_like(value, dtype=torch.float64), exponent - 1)
    return info.eps * torch.where(value == 0, info.tiny, torch.clamp(binade, min=info.tiny))


def _assert_one_rounding(name: str, got: torch.Tensor, exact: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
    """``got`` (an output in ``dtype``) is ``exact`` (torch's float32 value) rounded once to
    ``dtype``: within half an ulp of it (a whole ulp for bf16 in the interpreter, which truncates)
    plus :data:`F32_SLACK` times ``scale``; NaN exactly where ``exact`` is NaN."""
    assert got.dtype == dtype, f"{name}: dtype {got.dtype}, not {dtype}"
    got, exact = got.double().cpu(), exact.double().cpu()
    assert torch.equal(got.isnan(), exact.isnan()), f"{name}: NaN at other places than torch's"
    ulps = 1.0 if INTERPRET and dtype == torch.bfloat16 else 0.5
    bound = ulps * _ulp(exact, dtype) + F32_SLACK * scale.double().cpu()
    error = torch.where(exact.isnan(), 0.0, (got - exact).abs())
    worst = int((error - bound).argmax())
    got_at, exact_at, error_at, bound_at = (t.flatten()[worst].item() for t in (got, exact, error, bound))
    assert bool((error <= bound).all()), (
        f"{name}: {got_at} at flat index {worst}, torch's float32 {exact_at}: error {error_at:.3g} > {bound_at:.3g}"
    )


def _inputs(m: int, n: int, dtype: torch.dtype, seed: int):
    """x (rows centred at +3 and -3 in turn, spread 2), weight and bias of both signs, and dy, in
    ``dtype`` on the test's device."""
    g = torch.Generator().manual_seed(seed)
    shift = torch.tensor([3.0 if i % 2 == 0 else -3.0 for i in range(m)])[:, None]
    x = torch.randn(m, n, generator=g) * 2 + shift
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g) / 4
    dy = torch.randn(m, n, generator=g)
    return tuple(t.to(dtype).to(DEVICE) for t in (x, w, b, dy))


def _torch_f32(x, w, b, dy):
    """torch's float32 layer norm of float32 copies, and its autograd's gradients where dy is given:
    (y, mu, rstd, (dx, dweight, dbias) or None, xhat)."""
    leaves = [t.detach().float().clone().requires_grad_() for t in (x, w, b)]  # leaves of their own
    y = F.layer_norm(leaves[0], (x.shape[1],), leaves[1], leaves[2], EPS)
    grads = None
    if dy is not None:
        y.backward(dy.float())
        grads = tuple(t.grad for t in leaves)
    _, mu, rstd = torch.ops.aten.native_layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), EPS)
    xhat = (x.float() - mu) * rstd
    return y.detach(), mu.flatten(), rstd.flatten(), grads, xhat


@pytest.mark.parametrize(("m", "n"), SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32"])
def test_layer_norm_in_every_dtype_at_every_config(generated, monkeypatch, dtype, m, n):
    """y in the inputs' dtype, torch's float32 layer norm rounded once, and within an ulp of
    F.layer_norm in that dtype; mu and rstd in float32, torch's (native_layer_norm in float32)."""
    module = generated("layer_norm")
    x, w, b, _ = _inputs(m, n, dtype, seed=n)
    want_y, want_mu, want_rstd, _, xhat = _torch_f32(x, w, b, None)
    theirs = F.layer_norm(x, (n,), w, b, EPS)  # torch in dtype: float32 inside, rounded once
    scale = xhat.abs() * w.float().abs() + b.float().abs()
    for index in config_indices(module):
        force_config(monkeypatch, module, index)
        y, mu, rstd = module.layer_norm(x, w, b, EPS)
        _assert_one_rounding(f"y (config {index})", y, want_y, scale, dtype)
        assert mu.dtype == rstd.dtype == torch.float32
        torch.testing.assert_close(mu, want_mu, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rstd, want_rstd, rtol=1e-5, atol=0)
        gap = (y.double() - theirs.double()).abs().cpu()
        assert bool((gap <= _ulp(theirs, dtype).cpu() + F32_SLACK * scale.double().cpu()).all())


@pytest.mark.parametrize(("m", "n"), SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32"])
def test_layer_norm_gradients_in_every_dtype_at_every_config(generated, monkeypatch, dtype, m, n):
    """dx, dweight and dbias through autograd (the spec's ``backward layer_norm_backward``, from
    the forward's saved mu and rstd), at every config of the backward: in the inputs' dtype,
    torch's float32 autograd of F.layer_norm rounded once (dweight and dbias summed over the rows
    across programs in float32)."""
    module, backward = generated("layer_norm"), generated("layer_norm_backward")
    x, w, b, dy = _inputs(m, n, dtype, seed=n + 1)
    _, _, rstd, (want_dx, want_dw, want_db), xhat = _torch_f32(x, w, b, dy)
    g = dy.float() * w.float()
    row = {"dim": 1, "keepdim": True}
    scales = (
        rstd[:, None] * (g.abs() + g.abs().mean(**row) + xhat.abs() * (g * xhat).abs().mean(**row)),
        (dy.float() * xhat).abs().sum(dim=0),
        dy.float().abs().sum(dim=0),
    )
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = module.layer_norm(*leaves, EPS)[0]  # mu and rstd: statistics, not followed
    for index in config_indices(backward):  # one forward, its graph differentiated at each config
        force_config(monkeypatch, backward, index)
        grads = torch.autograd.grad(y, leaves, dy, retain_graph=True)
        for name, grad, want, scale in zip(("dx", "dweight", "dbias"), grads, (want_dx, want_dw, want_db), scales,
                                           strict=True):
            _assert_one_rounding(f"{name} (config {index})", grad, want, scale, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16", "f32"])
def test_layer_norm_rows_with_nan_and_inf(generated, dtype):
    """A row holding NaN, +inf, -inf, or both infinities comes out NaN, as torch's (F.layer_norm in
    the dtype and in float32): y, dx and dweight NaN where torch's are (dweight: every column, a
    sum over the rows); the other rows and dbias (sum of dy alone) as torch's."""
    module = generated("layer_norm")
    m, n = 6, 333
    x, w, b, dy = _inputs(m, n, dtype, seed=7)
    x[1, 5] = float("nan")
    x[2, 0] = float("inf")
    x[3, n - 1] = float("-inf")
    x[4, [10, 200]] = torch.tensor([float("inf"), float("-inf")], dtype=dtype, device=x.device)
    want_y, _, _, (want_dx, want_dw, want_db), xhat = _torch_f32(x, w, b, dy)
    theirs = F.layer_norm(x, (n,), w, b, EPS)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y, mu, rstd = module.layer_norm(*leaves, EPS)
    assert bool(y[1:5].isnan().all())
    assert torch.equal(y.isnan(), theirs.isnan()) and torch.equal(y.isnan(), want_y.isnan())
    assert bool(rstd[1:5].isnan().all()) and bool(mu[1].isnan())
    finite = [0, 5]
    scale = xhat[finite].abs() * w.float().abs() + b.float().abs()
    _assert_one_rounding("y of the finite rows", y[finite].detach(), want_y[finite], scale, dtype)
    y.backward(dy)
    assert bool(leaves[0].grad[1:5].isnan().all()) and not leaves[0].grad[finite].isnan().any()
    assert torch.equal(leaves[0].grad.isnan(), want_dx.isnan())
    assert bool(leaves[1].grad.isnan().all()) and bool(want_dw.isnan().all())
    _assert_one_rounding("dbias", leaves[2].grad, want_db, dy.float().abs().sum(dim=0), dtype)


def test_f32_and_bf16_are_taken_and_other_dtypes_refused(generated):
    """The launchers take f16, bf16 and f32, each giving its own dtype back (the spec's ``dtype T
    in f16, bf16, f32``), require weight and bias in x's dtype, and refuse f64."""
    module, backward = generated("layer_norm"), generated("layer_norm_backward")
    for dtype in DTYPES:
        x, w, b, dy = _inputs(2, 9, dtype, seed=1)
        y, mu, rstd = module.layer_norm(x, w, b, EPS)
        assert (y.dtype, mu.dtype, rstd.dtype) == (dtype, torch.float32, torch.float32)
        assert {t.dtype for t in backward.layer_norm_backward(dy, x, w, mu, rstd)} == {dtype}
    x, w, b, _ = _inputs(2, 9, torch.bfloat16, seed=1)
    with pytest.raises(TypeError, match=r"layer_norm: weight must have dtype torch.bfloat16 like x, got torch.float32"):
        module.layer_norm(x, w.float(), b, EPS)
    refused = r"layer_norm: x must have dtype torch.float16 or torch.bfloat16 or torch.float32, got torch.float64"
    with pytest.raises(TypeError, match=refused):
        module.layer_norm(x.double(), w.double(), b.double(), EPS)
