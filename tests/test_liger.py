"""Liger-Kernel's forward ops as specs (swiglu, geglu, fused_add_rms_norm) and KernelBench's RMS
norm over the channels of [B, C, H, W], checked in Triton's interpreter at every tune config
against torch written here the way Liger computes them: the activation in float32 rounded to the
inputs' dtype, then the product in that dtype. SwiGLU's gate and down multipliers (Falcon H1's)
forward and backward, against torch's autograd.

bf16 is left to the GPU runs: Triton's interpreter holds bf16 tiles as uint16 and its arithmetic
on them (a bf16 product) is not bf16 arithmetic.
"""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import force_config


def _randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _each_config(module, monkeypatch):
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        yield index


GATES = {
    "swiglu": lambda a: F.silu(a.float()),
    "geglu": lambda a: F.gelu(a.float(), approximate="tanh"),
}


@pytest.mark.parametrize("name", sorted(GATES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gated_activations_at_every_config(generated, monkeypatch, name, dtype):
    module = generated(name)
    a, b = _randn(6, 1030, seed=1, dtype=dtype), _randn(6, 1030, seed=2, dtype=dtype)
    expected = GATES[name](a).to(dtype) * b
    # the activation's float32 math (exp, tanh) may differ from torch's by an ulp, which the
    # rounding to f16 may carry into one ulp of f16
    ulp = 2e-3 if dtype == torch.float16 else 1e-6
    for _ in _each_config(module, monkeypatch):
        torch.testing.assert_close(getattr(module, name)(a, b), expected, rtol=ulp, atol=1e-6)
    torch.testing.assert_close(module.reference(a, b), expected, rtol=ulp, atol=1e-6)


#: (gate_multiplier, down_multiplier): Falcon H1's, Liger's test's, and signs both ways.
MULTIPLIERS = [(0.7, 1.3), (1.5, 0.5), (-0.7, 1.3), (1.5, -0.5), (-2.0, -0.25)]


@pytest.mark.parametrize(("gate", "down"), MULTIPLIERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_swiglu_multipliers_forward_and_backward_at_every_config(generated, monkeypatch, gate, down, dtype):
    """Falcon H1's mlp_multipliers: y = silu(a * gate) * b * down (Liger's LigerSiLUMulFunction with
    multipliers), rows with a tail of every config's blocks, forward at every config against torch
    rounded as Liger rounds (the gate to the dtype, then the product), the gradients at every config
    of the backward against torch's autograd in float64, rounded once to the dtype."""
    module, backward = generated("swiglu"), generated("swiglu_backward")
    a, b = _randn(6, 1030, seed=11, dtype=dtype), _randn(6, 1030, seed=12, dtype=dtype)
    dy = _randn(6, 1030, seed=13, dtype=dtype)
    expected = (F.silu(a.float() * gate).to(dtype).float() * b.float() * down).to(dtype)
    ad, bd = a.double().requires_grad_(), b.double().requires_grad_()
    (F.silu(ad * gate) * bd * down).backward(dy.double())
    ulp = 2e-3 if dtype == torch.float16 else 2e-6
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index % len(backward._CONFIGS))
        torch.testing.assert_close(module.swiglu(a, b, gate, down), expected, rtol=ulp, atol=1e-6)
        ours_a, ours_b = a.clone().requires_grad_(), b.clone().requires_grad_()
        module.swiglu(ours_a, ours_b, gate_multiplier=gate, down_multiplier=down).backward(dy)
        torch.testing.assert_close(ours_a.grad, ad.grad.to(dtype), rtol=2 * ulp, atol=2 * ulp)
        torch.testing.assert_close(ours_b.grad, bd.grad.to(dtype), rtol=2 * ulp, atol=2 * ulp)
    torch.testing.assert_close(module.reference(a, b, gate, down), expected, rtol=ulp, atol=1e-6)


def test_swiglu_multipliers_of_one_are_the_plain_swiglu(generated):
    """The defaults, 1.0, give the plain SwiGLU bit for bit, and its gradients."""
    module = generated("swiglu")
    a, b, dy = (_randn(3, 77, seed=seed) for seed in (14, 15, 16))
    assert torch.equal(module.swiglu(a, b, 1.0, 1.0), module.swiglu(a, b))
    grads = []
    for multipliers in ((), (1.0, 1.0)):
        ours_a, ours_b = a.clone().requires_grad_(), b.clone().requires_grad_()
        module.swiglu(ours_a, ours_b, *multipliers).backward(dy)
        grads.append((ours_a.grad, ours_b.grad))
    assert all(torch.equal(x, y) for x, y in zip(*grads, strict=True))


@pytest.mark.parametrize(("gate", "down"), [(0.7, 1.3), (-0.7, 1.3), (1.5, -0.5)])
def test_swiglu_multipliers_carry_infinities_and_nan_as_torch(generated, gate, down):
    """a of +-inf and NaN (b of inf too): silu(inf) = inf and silu(-inf) = NaN (x * sigmoid(x), as
    torch's), NaN in NaN out, forward and gradients where torch's autograd has them."""
    module = generated("swiglu")
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([[inf, -inf, nan, 3.0, -2.0, 0.5, 40.0, -40.0]])
    b = torch.tensor([[1.5, -2.0, 1.0, inf, 2.0, nan, -1.0, 0.25]])
    dy = torch.tensor([[1.0, 1.0, 1.0, 1.0, -inf, 2.0, 1.0, 1.0]])
    at, bt = a.clone().requires_grad_(), b.clone().requires_grad_()
    want = F.silu(at * gate) * bt * down
    want.backward(dy)
    ours_a, ours_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    got = module.swiglu(ours_a, ours_b, gate, down)
    got.backward(dy)
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(ours_a.grad, at.grad, rtol=1e-5, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(ours_b.grad, bt.grad, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_fused_add_rms_norm_returns_the_sum_and_the_normalised_rows(generated, monkeypatch, dtype, offset):
    """Llama's casting (the normalised row rounded to the dtype, then times the weight); offset 1.0
    scales by 1 + weight (Gemma's)."""
    module = generated("fused_add_rms_norm")
    x, residual = _randn(5, 333, seed=3, dtype=dtype), _randn(5, 333, seed=4, dtype=dtype)
    weight, eps = _randn(333, seed=5, dtype=dtype), 1e-6
    s = x + residual
    h = s.double()
    normed = (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)).to(dtype)
    expected = (normed.float() * (offset + weight.float())).to(dtype)
    ulp = 2e-3 if dtype == torch.float16 else 2e-6  # the rstd's float32 rounding, moved by one f16 rounding
    for _ in _each_config(module, monkeypatch):
        y, total = module.fused_add_rms_norm(x, residual, weight, eps, offset)
        assert torch.equal(total, s)
        torch.testing.assert_close(y, expected, rtol=ulp, atol=ulp)


def test_rms_norm_over_channels_at_every_config(generated, monkeypatch):
    module = generated("rms_norm_channels")
    x = _randn(2, 6, 3, 37, seed=6)
    expected = x / torch.sqrt(torch.mean(x.double() ** 2, dim=1, keepdim=True) + 1e-5).float()
    for _ in _each_config(module, monkeypatch):
        torch.testing.assert_close(module.rms_norm_channels(x, 1e-5), expected, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(module.reference(x, 1e-5), expected, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_rms_norm_with_gemmas_offset_scales_by_offset_plus_weight(generated, monkeypatch, dtype, offset):
    """Gemma's RMSNorm, x * rstd * (1 + w) (Liger-Kernel's ``offset=1.0``), forward and backward at
    every config of both kernels, against torch's autograd in float64 rounded once to the dtype;
    offset 0 is torch's F.rms_norm."""
    module = generated("rms_norm")
    x, weight = _randn(5, 333, seed=6, dtype=dtype) + 0.5, _randn(333, seed=7, dtype=dtype) / 4
    dy, eps = _randn(5, 333, seed=8, dtype=dtype), 1e-6
    xd, wd = x.double().requires_grad_(), weight.double().requires_grad_()
    yd = xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps) * (offset + wd)
    yd.backward(dy.double())
    ulp = 2e-3 if dtype == torch.float16 else 2e-6
    backward = generated("rms_norm_backward")
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index % len(backward._CONFIGS))
        xs, ws = x.clone().requires_grad_(), weight.clone().requires_grad_()
        y = module.rms_norm(xs, ws, eps, offset) if offset else module.rms_norm(xs, ws, eps)
        torch.testing.assert_close(y, yd.detach().to(dtype), rtol=ulp, atol=ulp)
        y.backward(dy)
        torch.testing.assert_close(xs.grad, xd.grad.to(dtype), rtol=4 * ulp, atol=4 * ulp)
        torch.testing.assert_close(ws.grad, wd.grad.to(dtype), rtol=4 * ulp, atol=4 * ulp)
    torch.testing.assert_close(module.reference(x, weight, eps, offset), yd.detach().to(dtype), rtol=ulp, atol=ulp)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_rms_norm_without_a_weight_is_the_normalised_row(generated, monkeypatch, dtype, offset):
    """F.rms_norm(x, (N,), weight=None) (Liger's ``elementwise_affine=False``): the weight left out,
    y = x * rstd whatever the offset (Gemma's norm without a weight has no 1 + w either), forward
    and backward at every config of both kernels, against torch's autograd in float64."""
    module, backward = generated("rms_norm"), generated("rms_norm_backward")
    x, dy, eps = _randn(5, 333, seed=9, dtype=dtype) + 0.5, _randn(5, 333, seed=10, dtype=dtype), 1e-6
    xd = x.double().requires_grad_()
    yd = F.rms_norm(xd, (333,), None, eps)
    yd.backward(dy.double())
    ulp = 2e-3 if dtype == torch.float16 else 2e-6
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index % len(backward._CONFIGS))
        xs = x.clone().requires_grad_()
        y = module.rms_norm(xs, None, eps, offset)
        torch.testing.assert_close(y, yd.detach().to(dtype), rtol=ulp, atol=ulp)
        y.backward(dy)
        torch.testing.assert_close(xs.grad, xd.grad.to(dtype), rtol=4 * ulp, atol=4 * ulp)
    torch.testing.assert_close(module.reference(x, None, eps, offset), yd.detach().to(dtype), rtol=ulp, atol=ulp)
    torch.testing.assert_close(module.rms_norm(x), F.rms_norm(x.double(), (333,), None, 1e-6).to(dtype),
                               rtol=ulp, atol=ulp)  # eps defaults to 1e-6, Llama's
