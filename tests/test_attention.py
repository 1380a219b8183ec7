"""Attention from a spec (issue 11's language groundwork): a loop carrying three state tiles,
a dot over ``d`` with ``k`` read transposed, a dot of a computed tile, a causal mask from index
values. Interpreter runs against ``F.scaled_dot_product_attention`` computed in float32."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT, config_indices, specs_find
from tilegen.build import build
from tilegen.compiler import compile_spec
from tilegen.runner import load_module


def _module(tmp_path_factory, name):
    """The spec compiled now, with its backward's modules beside it (the op's autograd formula,
    registered once per process, is this module's when it is imported first)."""
    folder = tmp_path_factory.mktemp(name)
    assert all(result.error is None for result in build([ROOT / "specs" / f"{name}.tile"], folder))
    return load_module(folder / f"{name}.py")


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    return _module(tmp_path_factory, "attention")


@pytest.fixture(scope="module")
def attention_causal(tmp_path_factory):
    return _module(tmp_path_factory, "attention_causal")


def _qkv(s, t, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, n, d, generator=g).half() for n in (s, t, t)]


@pytest.mark.parametrize("d", [16, 32, 20])
@pytest.mark.parametrize("s,t", [(1, 1), (40, 100), (100, 40), (1, 40)])
def test_attention_matches_sdpa(attention, s, t, d):
    """S and T independent and not multiples of the blocks (16); D = 20 pads to a 32 tile."""
    q, k, v = _qkv(s, t, d, seed=s * 1000 + t + d)
    scale = d**-0.5
    out = attention.attention(q, k, v, scale)[0]
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale)
    assert out.dtype == torch.float16 and out.shape == q.shape
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(attention.reference(q, k, v, scale)[0].float(), expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("s", [1, 40, 100])
def test_causal_attention_matches_sdpa(attention_causal, s):
    q, k, v = _qkv(s, s, 32, seed=s)
    out = attention_causal.attention_causal(q, k, v, 0.125)[0]
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.125)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


def test_the_kernel_reads_k_transposed_and_carries_three_state_tiles():
    source = compile_spec((ROOT / "specs" / "attention.tile").read_text(), "attention.tile", specs_find).source
    kernel = source[source.index("def attention_kernel"):source.index("def attention(")]
    pointers = source[source.index("def _attention_pointers_kernel"):source.index("def _attention_pointers(")]
    # TMA: 4D descriptors, index axes z and h as blocks of 1, reshaped away; k's [n, d] tile transposed
    assert "k = k_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, BLOCK_D).T" in kernel
    store = ("o_desc.store([pid_z, pid_h, pid_m * BM, 0], (tl.where(l_i[:, None] == 0, 0.0, acc / l_i[:, None])"
             ".to(DT)).reshape(1, 1, BM, BLOCK_D))")
    assert store in kernel
    # pointers (rows not 16-byte aligned): a [d, n] tile of k by its strides, no copy
    assert "offs_n[None, :] * stride_k_t + offs_d[:, None] * stride_k_d" in pointers
    for text in (kernel, pointers):
        assert "acc = acc * alpha[:, None] + tl.dot(" in text
        assert "p.to(DT)" in text  # dtype DT: f16 or bf16, read off q in the kernel
        # q does not change with the key tile n: loaded once, before the loop (as tutorial 06 does)
        assert text.index("q = ") < text.index("for n in range(") < text.index("k = ")
    assert "    DT = q_desc.dtype\n" in kernel and "    DT = q_ptr.dtype.element_ty\n" in pointers


@pytest.mark.parametrize("name", ["attention_backward_dkdv", "attention_causal_backward_dkdv",
                                  "attention_gqa_backward_dkdv"])
def test_the_dkdv_kernel_transposes_no_register_tile_and_reads_q_and_do_once_a_step(name):
    source = compile_spec((ROOT / "specs" / f"{name}.tile").read_text(), f"{name}.tile", specs_find).source
    kernel = source[source.index(f"def {name}_kernel"):source.index(f"def {name}(")]
    steps = kernel.count("for m in range(")
    assert steps >= 1 and "tl.permute" not in kernel  # p and ds are [BN, BM], as the dots take them
    # q and do: one descriptor load each a step ([d, m] for k q^T, [m, d] for do v^T), the other order by .T
    assert kernel.count("q_desc.load(") == kernel.count("do_desc.load(") == steps
    assert kernel.count("_dot_operand(q.T)") == kernel.count("_dot_operand(do.T)") == steps


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["BHSD", "BSHD"])
@pytest.mark.parametrize("s,d", [(40, 32), (57, 16), (33, 20)])
def test_every_dtype_and_layout_matches_sdpa(attention, attention_causal, causal, dtype, layout, s, d):
    """f16 and bf16 (one spec, dtype DT); [B, H, S, D] contiguous and the [B, S, H, D] storage of a
    projection viewed as [B, H, S, D] (strides, no copy), both through 4D TMA descriptors; D = 20
    rows are 40 bytes, not 16-byte aligned: the pointer kernel. One batch entry of two heads: the
    layouts differ in the head and sequence strides (a batch entry's stride is H * S * D in both;
    the other tests here run two entries)."""
    g = torch.Generator().manual_seed(s + d)
    shape = (1, 2, s, d) if layout == "BHSD" else (1, s, 2, d)
    q, k, v = (torch.randn(shape, generator=g).to(dtype) for _ in range(3))
    if layout == "BSHD":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    out = attention_causal.attention_causal(q, k, v, 0.3)[0] if causal else attention.attention(q, k, v, 0.3)[0]
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=0.3)
    assert out.dtype == dtype and out.shape == q.shape
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-2  # bf16 has 8 bits of mantissa: p and o round
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,d", [(16, 16), (48, 32), (64, 16)])
def test_attention_matches_tutorial_06(attention, attention_causal, n, d, causal):
    """Against Triton tutorial 06's forward kernel, hand-written (it takes S == T, a multiple of 16)."""
    from tests.reference import attention as ref_attention

    q, k, v = _qkv(n, n, d, seed=n + d)
    hand = ref_attention.attention(q, k, v, causal, 0.25)
    ours = attention_causal.attention_causal(q, k, v, 0.25)[0] if causal else attention.attention(q, k, v, 0.25)[0]
    torch.testing.assert_close(ours.float(), hand.float(), atol=1e-2, rtol=1e-2)


def _plain_attention(q, k, v, scale, causal):
    """Softmax attention in float32 torch math (SDPA's math backend scales q and k by
    sqrt(scale) each, which is NaN for a negative scale)."""
    s = torch.einsum("bhsd,bhtd->bhst", q.float(), k.float()) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhst,bhtd->bhsd", torch.softmax(s, dim=-1), v.float())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [-0.3, 0.0, 0.3])
@pytest.mark.parametrize("s,d", [(40, 32), (33, 20)])
def test_any_sign_of_scale(attention, attention_causal, causal, scale, s, d):
    """The row max of ``s = dot(q, k) * scale`` is taken before the scale (tutorial 06's
    ``tl.max(qk, 1) * qk_scale``), which needs scale >= 0; the launcher's SCALE_NONNEG flag picks
    ``min(qk) * scale`` otherwise. Descriptors (D = 32) and pointers (D = 20)."""
    q, k, v = _qkv(s, s, d, seed=s + d)
    out = attention_causal.attention_causal(q, k, v, scale)[0] if causal else attention.attention(q, k, v, scale)[0]
    torch.testing.assert_close(out.float(), _plain_attention(q, k, v, scale, causal), atol=1e-2, rtol=1e-2)


def test_the_row_max_is_taken_before_the_scale():
    source = compile_spec((ROOT / "specs" / "attention.tile").read_text(), "attention.tile", specs_find).source
    kernel = source[source.index("def attention_kernel"):source.index("def attention(")]
    factor = "(scale * 1.4426950408889634)"
    # never multiplied on its own; in full float32 (ieee) where the inputs are float32
    assert 's_unscaled = tl.dot(_dot_operand(q), _dot_operand(k), input_precision="ieee")\n' in kernel
    assert "        if SCALE_NONNEG:  # scale >= 0: max(x * c) = max(x) * c, else min(x) * c\n" in kernel
    assert f"max_n = amax(s_unscaled, 1) * {factor}\n        else:\n" in kernel
    assert f"max_n = amin(s_unscaled, 1) * {factor}\n" in kernel
    # one fused multiply-add (the cast, a no-op in float32, is there for the f16 and bf16 bindings' sake:
    # the dtypes of this one kernel are decided over every binding of DT, f32 among them)
    assert f"p = tl.exp2(((s_unscaled * {factor}) - m_new_or_0[:, None]).to(tl.float32))" in kernel
    assert "    SCALE_NONNEG = bool(scale >= 0)" in source and "SCALE_NONNEG: tl.constexpr" in kernel


@pytest.mark.parametrize("causal", [False, True])
def test_every_tune_config_matches_sdpa(attention, attention_causal, causal):
    """On the GPU the autotuner may pick any config, so each one (block sizes from 32 to 128, BN
    above D included) runs here, its tuning cache set by hand, at sizes that leave tails in both
    S and T, through the descriptors and (k not contiguous) through pointers. (In the interpreter
    one config of each block size: num_warps and num_stages change nothing there.)"""
    module = attention_causal if causal else attention
    launcher = getattr(module, "attention_causal" if causal else "attention")
    for s, t, d in [(40, 100, 16), (100, 40, 32)]:
        t = s if causal else t
        q, k, v = _qkv(s, t, d, seed=s + t + d)
        k_strided = k.transpose(2, 3).contiguous().transpose(2, 3)
        expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=0.3)
        sizes = (s, d, torch.float16) if causal else (s, t, d, torch.float16)
        try:
            for index in config_indices(module)[1:]:
                config = module._CONFIGS[index]
                module._tuner.tuned[(q.device, *sizes)] = index
                module._tuner.tuned[(q.device, "pointers", *sizes)] = index
                module._FAST.clear()  # no launch kept for another config
                for key_tensor in (k, k_strided):
                    out = launcher(q, key_tensor, v, 0.3)[0]
                    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2,
                                               msg=lambda m, c=config: f"{c}: {m}")
        finally:  # the module is shared with the other tests: no forced config left behind
            module._tuner.tuned.clear()
            module._FAST.clear()


def test_no_keys_give_zeros_and_an_lse_of_minus_inf_as_torch(attention):
    """T = 0: softmax over no keys weighs nothing, so o is 0 (torch's SDPA) and each row's
    log-sum-exp is -inf (torch.logsumexp over an empty dimension), not 0 / 0."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 16, generator=g)
    k, v = torch.randn(2, 3, 0, 16), torch.randn(2, 3, 0, 16)
    o, lse = attention.attention(q, k, v, 0.25)
    torch.testing.assert_close(o, F.scaled_dot_product_attention(q, k, v, scale=0.25))
    assert torch.equal(o, torch.zeros_like(o)) and torch.equal(lse, torch.full_like(lse, -math.inf))


@pytest.mark.parametrize("d", [1, 6, 8, 16, 24])
def test_a_head_dimension_under_16_is_a_tile_of_16(attention, generated, d):
    """tl.dot takes no contraction under 16 on the GPU (a CompilationError there; the interpreter
    takes any), so the tile of a whole axis a dot contracts over is at least 16, its lanes past
    the extent masked: the same outputs as sdpa. A whole axis no dot contracts over (softmax's
    rows) keeps the power of two of its extent."""
    q, k, v = (torch.randn(1, 2, 17, d, generator=torch.Generator().manual_seed(d + i)) for i in range(3))
    for plan in (attention._attention_plan, attention._attention_pointers_plan):
        assert plan(q, k, v, 0.5).meta["BLOCK_D"] == max(16, 1 << (d - 1).bit_length())
    o, _ = attention.attention(q, k, v, 0.5)
    torch.testing.assert_close(o, F.scaled_dot_product_attention(q, k, v, scale=0.5), atol=1e-5, rtol=1e-5)
    softmax = generated("softmax")
    assert softmax._softmax_plan(torch.randn(3, 5)).meta["BLOCK_N"] == 8
