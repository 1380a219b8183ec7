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


def _tf32(x):
    """``x`` (float32) rounded to the nearest tf32 (10 stored mantissa bits). A GPU's own conversion
    may truncate instead: the H200 demo's error sat nearer the bound (0.79 of it) than this gives."""
    return ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("scale_end", [0, 1])
def test_the_demos_f32_row_holds_tf32_scores(generated, scale_end):
    """The interpreter's dots are exact, so its demo cannot show what tf32 does to f32 attention:
    here each dot's operands are rounded to tf32 (in float64 after) at the demo's sizes and the
    ends of the spec's scale range, and the result must sit within the demo's tolerance. At the
    scale the demo drew before the range (0.5) this is 43 times over it, as the GPU demo was."""
    from tests.conftest import spec_named
    from tilegen import model as m
    from tilegen import runner, tolerance

    spec = m.specialize(spec_named("attention_wide"), {"DT": "f32"})
    inputs = runner.random_inputs(spec, runner.default_sizes(spec, 40), "cpu")
    scale = next(t for t in spec.inputs if t.name.id == "scale")
    inputs["scale"] = scale.sample[scale_end].value
    q, k, v, scale = args = tuple(inputs.values())
    s = torch.einsum("bhsd,bhtd->bhst", _tf32(q).double(), _tf32(k).double()) * scale
    p = torch.softmax(s, dim=-1).float()
    out = torch.einsum("bhst,bhtd->bhsd", _tf32(p).double(), _tf32(v).double())
    module = generated("attention_wide")
    expected = module.reference(*args)
    allowed = tolerance.allowed_errors(spec, args, expected, module.reference)[0]
    assert ((out - expected.double()).abs() <= allowed).all()
