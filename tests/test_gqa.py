"""Grouped-query attention (specs/attention_gqa.tile and its three backward specs) against torch's
``F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True)``, forward and backward, and
its second output, each query row's log-sum-exp, against torch's ``logsumexp`` of the masked
scores, its gradient included (a loss that reads it), in
the interpreter (``TILEGEN_TEST_GPU=1``: on the GPU, every config): query heads per key head 1, 3
and 4, sequence lengths off every block, f32 and bf16, and the launch refusing heads that do not
group (H not a multiple of HK).
"""

import os

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def inputs(b, h, hk, s, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s, d, generator=g).to(DEVICE, dtype).requires_grad_()
    k = torch.randn(b, hk, s, d, generator=g).to(DEVICE, dtype).requires_grad_()
    v = torch.randn(b, hk, s, d, generator=g).to(DEVICE, dtype).requires_grad_()
    return q, k, v


def scores_lse(q, k, scale):
    """Each query row's log-sum-exp of its causal scores, in float32, with the key head h / (H / HK)."""
    group = q.shape[1] // k.shape[1]
    s = q.float() @ k.float().repeat_interleave(group, dim=1).transpose(-1, -2) * scale
    keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
    return torch.logsumexp(s.masked_fill(~keep, float("-inf")), dim=-1)


def sdpa(q, k, v, scale):
    """torch's causal attention with grouped heads, in float32 (the oracle)."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=scale,
                                          enable_gqa=True)


@pytest.mark.parametrize(("h", "hk", "s"), [(4, 1, 37), (6, 2, 16), (3, 3, 50)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gqa_forward_and_backward_match_sdpa(generated, h, hk, s, dtype):
    module = generated("attention_gqa")
    q, k, v = inputs(2, h, hk, s, 16, dtype)
    tol = {"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    o, lse = module.attention_gqa(q, k, v, 0.25)
    want, want_lse = sdpa(q, k, v, 0.25), scores_lse(q, k, 0.25)
    assert o.dtype == dtype and lse.dtype == torch.float32
    torch.testing.assert_close(o.float(), want, **tol)
    torch.testing.assert_close(lse, want_lse, atol=2e-5 if dtype == torch.float32 else 1e-2, rtol=2e-5)
    g = torch.Generator().manual_seed(1)
    do = torch.randn(o.shape, generator=g).to(DEVICE, dtype)
    dlse = torch.randn(lse.shape, generator=g).to(DEVICE)
    got = torch.autograd.grad((o, lse), (q, k, v), (do, dlse))  # both outputs reach the loss
    wanted = torch.autograd.grad((want, want_lse), (q, k, v), (do.float(), dlse))
    if DEVICE != "cpu" and dtype == torch.float32:  # the backward's float32 dots are tf32 there (Triton's
        tol = {"atol": 1e-2, "rtol": 1e-2}  # default, as attention_causal's backward): 2**-11 per operand
    for name, a, b in zip("qkv", got, wanted, strict=True):
        assert a.dtype == dtype and a.shape == b.shape, name
        torch.testing.assert_close(a.float(), b.float(), **tol, msg=lambda m, name=name: f"d{name}: {m}")


def test_gqa_every_config_and_the_reference(generated):
    module = generated("attention_gqa")
    q, k, v = inputs(1, 4, 2, 45, 16, torch.float32, seed=2)
    want = sdpa(q, k, v, 0.2)
    torch.testing.assert_close(module.reference(q.detach(), k.detach(), v.detach(), 0.2)[0], want, atol=2e-5,
                               rtol=2e-5)
    for config in config_indices(module):
        got, lse = module.attention_gqa(q.detach(), k.detach(), v.detach(), 0.2, config=config)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(lse, scores_lse(q, k, 0.2), atol=2e-5, rtol=2e-5)


def test_gqa_refuses_heads_that_do_not_group(generated):
    module = generated("attention_gqa")
    q, k, v = inputs(1, 6, 4, 16, 16, torch.float32)
    with pytest.raises(ValueError, match="HK"):
        module.attention_gqa(q.detach(), k.detach(), v.detach(), 0.25)


@pytest.mark.parametrize(("drawn", "given", "want"), [
    ({"H": 12, "HK": 5}, (), {"H": 12, "HK": 4}),  # the largest divisor of H not above the draw
    ({"H": 3, "HK": 89}, (), {"H": 3, "HK": 3}),
    ({"H": 7, "HK": 4}, ("HK",), {"H": 8, "HK": 4}),  # HK given: H rounded up to a multiple
])
def test_a_run_draws_heads_that_group(drawn, given, want):
    """`tilegen run` and the demo choose sizes the launch accepts: H a multiple of HK."""
    from tests.conftest import spec_named
    from tilegen.sizes import index_quotients, round_to_multiples

    spec = spec_named("attention_gqa")
    assert index_quotients(spec) == [("H", "HK")]
    assert round_to_multiples(spec, dict(drawn), given) == want
