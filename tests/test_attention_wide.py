"""specs/attention_wide.tile: attention whose head dimension is split into tiles (the scores summed
over tiles of D, the output in column tiles across programs), against torch's
``F.scaled_dot_product_attention`` as the oracle, in Triton's interpreter: every config (tails in
S, T and D at each), inputs of both signs and scales, f32 (tf32 scores) and bf16, NaN in a row."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import force_config


def _qkv(b, h, s, t, d, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s, d, generator=g)
    k = torch.randn(b, h, t, d, generator=g)
    v = torch.randn(b, h, t, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _expected(q, k, v, scale):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale)


@pytest.mark.parametrize("index", range(6))
def test_every_config_matches_sdpa(generated, monkeypatch, index):
    """Each config (the interpreter's 16s and the GPU's 32-256) at sizes off every block: S and T
    not multiples of BM and BN, D of two and a half column tiles of the smaller configs."""
    module = generated("attention_wide")
    force_config(monkeypatch, module, index)
    q, k, v = _qkv(2, 3, 37, 45, 40, seed=index)
    out = module.attention_wide(q, k, v, 1 / math.sqrt(40))
    # the scores on tf32 tensor cores where Triton runs them: its rounding (2**-11) of q and k
    torch.testing.assert_close(out.double(), _expected(q, k, v, 1 / math.sqrt(40)), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("scale", [0.05, -0.3, 1.0])
def test_scales_of_both_signs_and_bf16(generated, scale):
    module = generated("attention_wide")
    for dtype, tolerance in ((torch.float32, 2e-3), (torch.bfloat16, 2e-2)):
        q, k, v = _qkv(1, 2, 20, 33, 24, seed=7, dtype=dtype)
        out = module.attention_wide(q, k, v, scale)
        assert out.dtype == dtype and out.shape == q.shape
        torch.testing.assert_close(out.double(), _expected(q, k, v, scale), atol=tolerance, rtol=tolerance)


def test_a_nan_reaches_the_rows_that_read_it(generated):
    """A NaN in one key makes every row's scores NaN there: every output of that (batch, head) is
    NaN, as torch's; other heads are untouched."""
    module = generated("attention_wide")
    q, k, v = _qkv(1, 2, 9, 11, 20, seed=3)
    k[0, 1, 4, 7] = math.nan
    out = module.attention_wide(q, k, v, 0.2)
    expected = _expected(q, k, v, 0.2)
    assert out[0, 1].isnan().all() and expected[0, 1].isnan().all()
    torch.testing.assert_close(out[0, 0].double(), expected[0, 0], atol=2e-3, rtol=2e-3)


def test_no_keys_give_zeros_as_torch(generated):
    module = generated("attention_wide")
    q = torch.randn(1, 2, 5, 24)
    k, v = torch.randn(1, 2, 0, 24), torch.randn(1, 2, 0, 24)
    out = module.attention_wide(q, k, v, 0.2)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v, scale=0.2))
