"""Paged decode attention (vLLM's ``paged_attention_v1``, grouped-query heads): one query token per
sequence, its keys and values in a cache of pages named by a block table. Compared with an
independent reference (each sequence's keys and values gathered through its block table, then
softmax(q k^T * scale) v per query head in float64 torch, the key heads repeated as
``repeat_interleave`` does) at several block sizes, page sizes and GQA ratios, with a sequence of
one token, partly filled last pages, pages in shuffled physical order, an empty sequence (the spec
gives 0 there), and NaN in every cache row no sequence owns (none reaches the output). The split-KV
form (flash-decoding: paged_decode_attention_split's partial outputs and log-sum-exps per split of
the pages, merged by paged_decode_attention_combine) against the same reference and split by split."""

import math
import os

import pytest
import torch

from tests.conftest import force_config
from tilegen.compiler import compile_spec

#: Where the tests run: the CPU through Triton's interpreter, or the GPU with TILEGEN_TEST_GPU=1
DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"
#: float32 dots run in tf32 on a GPU (10 bits of mantissa)
F32 = 1e-5 if DEVICE == "cpu" else 1e-2
TOLERANCE = {torch.float32: F32, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _paged(lengths, heads, kv_heads, dim, page, dtype, seed, spare_pages=3, device=DEVICE):
    """q [B, H, D], a cache of pages in shuffled physical order with ``spare_pages`` no sequence
    uses, and a block table whose entries past each sequence's last page name other sequences' pages
    (what a table of a reused batch slot holds): the kernel must not read them."""
    generator = torch.Generator().manual_seed(seed)
    needed = [-(-n // page) for n in lengths]
    max_pages = max(max(needed), 1) + 1  # a column more than the longest sequence needs
    pages = sum(needed) + spare_pages
    q = torch.randn(len(lengths), heads, dim, generator=generator).to(dtype)
    k_cache, v_cache = (torch.randn(pages, page, kv_heads, dim, generator=generator).to(dtype) for _ in range(2))
    order = torch.randperm(pages, generator=generator)
    table = torch.randint(0, pages, (len(lengths), max_pages), generator=generator)
    used = 0
    for b, count in enumerate(needed):
        table[b, :count] = order[used:used + count]
        used += count
    move = (q, k_cache, v_cache, table.to(torch.int32), torch.tensor(lengths, dtype=torch.int32))
    return tuple(t.to(device) for t in move)


def _torch_paged(q, k_cache, v_cache, block_table, seq_lens, scale):
    """Each sequence on its own, in float64: its keys and values gathered page by page through its
    row of the block table, cut at its length, each key head repeated for its H / HK query heads;
    then softmax(q k^T * scale) v. An empty sequence's row is 0 (the spec's choice, tested apart)."""
    batch, heads, dim = q.shape
    page, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(batch, heads, dim, dtype=torch.float64, device=q.device)
    for b, n in enumerate(seq_lens.tolist()):
        if n <= 0:
            continue
        pages = block_table[b, : -(-n // page)].long()
        keys, values = (c[pages].reshape(-1, kv_heads, dim)[:n].double().repeat_interleave(heads // kv_heads, dim=1)
                        for c in (k_cache, v_cache))  # [n, H, D]
        scores = torch.einsum("hd,nhd->hn", q[b].double(), keys) * scale
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), values)
    return out


#: (lengths, H, HK, D, PAGE): one token, a partly filled last page, whole pages, lengths off every
#: block; GQA ratios 1 and 4, a head dimension that is no power of two, a page that is none either
SHAPES = [
    ([1, 37, 16, 50], 8, 2, 16, 16),
    ([9, 1, 23, 15], 4, 4, 24, 5),
]


@pytest.mark.parametrize("config", [None, {"BN": 32}, {"BN": 128}])
@pytest.mark.parametrize("shape", SHAPES, ids=["ratio4-page16", "ratio1-page5"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_decode_attention_is_each_sequences_attention(generated, monkeypatch, config, shape, dtype):
    module = generated("paged_decode_attention")
    force_config(monkeypatch, module, config)
    lengths, heads, kv_heads, dim, page = shape
    inputs = _paged(lengths, heads, kv_heads, dim, page, dtype, seed=dim + len(str(config)))
    scale = 1 / math.sqrt(dim)
    want = _torch_paged(*inputs, scale)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(module.paged_decode_attention(*inputs, scale).double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(module.reference(*inputs, scale).double(), want, rtol=tol, atol=tol)


def test_f16_and_a_negative_scale(generated):
    module = generated("paged_decode_attention")
    inputs = _paged([21, 3, 40], 8, 2, 16, 8, torch.float16, seed=5)
    want = _torch_paged(*inputs, -0.4)
    tol = TOLERANCE[torch.float16]
    torch.testing.assert_close(module.paged_decode_attention(*inputs, -0.4).double(), want, rtol=tol, atol=tol)


def test_an_empty_sequence_gives_zeros(generated):
    """seq_lens[b] = 0 (a batch slot with nothing cached yet, or padding): its heads come out 0, as
    FlashAttention's kernels give for no keys, where torch's softmax over none gives NaN; the other
    sequences are unchanged by it, and the generated reference agrees."""
    module = generated("paged_decode_attention")
    q, k_cache, v_cache, table, lengths = _paged([7, 0, 18], 8, 2, 16, 4, torch.float32, seed=2)
    out = module.paged_decode_attention(q, k_cache, v_cache, table, lengths, 0.25)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    torch.testing.assert_close(module.reference(q, k_cache, v_cache, table, lengths, 0.25)[1], out[1], rtol=0, atol=0)
    alone = module.paged_decode_attention(q[[0, 2]], k_cache, v_cache, table[[0, 2]], lengths[[0, 2]], 0.25)
    torch.testing.assert_close(out[[0, 2]], alone, rtol=0, atol=0)
    want = _torch_paged(q, k_cache, v_cache, table, lengths, 0.25)
    torch.testing.assert_close(out.double(), want, rtol=F32, atol=F32)


@pytest.mark.parametrize("config", [None, {"BN": 128}])
def test_nan_in_rows_no_sequence_owns_does_not_reach_the_output(generated, monkeypatch, config):
    """Every cache row that is not one of a sequence's keys holds NaN: the last pages' unused rows,
    the pages the table names past each sequence's end, the pages no one uses. Their scores are
    -inf and their values are masked out of the load (a 0 weight times NaN would be NaN)."""
    module = generated("paged_decode_attention")
    force_config(monkeypatch, module, config)
    q, k_cache, v_cache, table, lengths = _paged([5, 1, 30, 0], 4, 2, 16, 8, torch.float32, seed=9)
    want = _torch_paged(q, k_cache, v_cache, table, lengths, 0.3)
    owned = torch.zeros(k_cache.shape[:2], dtype=torch.bool, device=k_cache.device)
    for b, n in enumerate(lengths.tolist()):
        for key in range(n):
            owned[table[b, key // 8], key % 8] = True
    assert not owned.all()
    for cache in (k_cache, v_cache):
        cache[~owned] = float("nan")
    out = module.paged_decode_attention(q, k_cache, v_cache, table, lengths, 0.3)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), want, rtol=F32, atol=F32)
    torch.testing.assert_close(module.reference(q, k_cache, v_cache, table, lengths, 0.3).double(), want,
                               rtol=F32, atol=F32)


def test_more_query_heads_per_key_head_than_one_tile_holds(generated):
    """H / HK = 20 query heads per key head take two g-tiles of 16 rows: two programs per key head."""
    module = generated("paged_decode_attention")
    inputs = _paged([12, 3], 40, 2, 16, 4, torch.float32, seed=4)
    torch.testing.assert_close(module.paged_decode_attention(*inputs, 0.25).double(), _torch_paged(*inputs, 0.25),
                               rtol=F32, atol=F32)


def test_table_entries_past_a_sequence_may_be_anything(generated):
    """vLLM pads block tables: the entries past a sequence's last page (here -1, and pages of other
    sequences) are never followed, so the output is the same whatever they hold."""
    module = generated("paged_decode_attention")
    q, k_cache, v_cache, table, lengths = _paged([6, 13], 4, 1, 16, 4, torch.float32, seed=6)
    out = module.paged_decode_attention(q, k_cache, v_cache, table, lengths, 0.5)
    padded = table.clone()
    padded[0, 2:] = -1
    padded[1, 4:] = -1
    torch.testing.assert_close(module.paged_decode_attention(q, k_cache, v_cache, padded, lengths, 0.5), out,
                               rtol=0, atol=0)


def test_query_heads_must_be_a_multiple_of_key_heads(generated):
    module = generated("paged_decode_attention")
    q, k_cache, v_cache, table, lengths = _paged([3], 6, 4, 16, 4, torch.float32, seed=1)
    with pytest.raises(ValueError, match=r"H \(6\) to be a multiple of HK \(4\)"):
        module.paged_decode_attention(q, k_cache, v_cache, table, lengths, 0.5)


def test_the_key_loop_ends_at_the_sequences_length():
    """The guard n < n_b (n_b = seq_lens[b]) ends every range of the key loop at the sequence's own
    length, and the value tile's load is masked by it; the page index is gathered per key lane."""
    from tests.conftest import ROOT

    text = (ROOT / "specs" / "paged_decode_attention.tile").read_text()
    source = compile_spec(text, "specs/paged_decode_attention.tile").source
    loops = [line.strip() for line in source.splitlines() if line.strip().startswith("for n in range(")]
    assert len(loops) == 2 and all(line.endswith(", tl.cdiv(n_b, BN))):") for line in loops), loops
    assert "(offs_n[None, :] // PAGE) * stride_block_table_maxp" in source
    assert "(offs_n[:, None] % PAGE) * stride_v_cache_page" in source
    assert "mask=mask_nd & (offs_n[:, None] < n_b), other=0.0)" in source


def _split_then_combine(generated, inputs, scale, pages_per_split):
    split = generated("paged_decode_attention_split")
    o_part, lse = split.paged_decode_attention_split(*inputs, scale, pages_per_split)
    return generated("paged_decode_attention_combine").paged_decode_attention_combine(o_part, lse), o_part, lse


@pytest.mark.parametrize("pages_per_split", [1, 3, 20])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_kv_then_combine_is_each_sequences_attention(generated, pages_per_split, dtype):
    """Flash-decoding: splits of 1 page (a split per page), 3 pages (the last split partly past
    MAXP) and 20 (one split, more pages than the table has), merged by their log-sum-exps; the
    empty sequence and splits past a sequence's end merge to the unsplit kernel's result."""
    inputs = _paged([1, 37, 0, 50, 16], 8, 2, 16, 8, dtype, seed=pages_per_split)
    out, o_part, _ = _split_then_combine(generated, inputs, 0.3, pages_per_split)
    assert o_part.shape == (5, 8, -(-inputs[3].shape[1] // pages_per_split), 16) and o_part.dtype == dtype
    want = _torch_paged(*inputs, 0.3)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    split, combine = generated("paged_decode_attention_split"), generated("paged_decode_attention_combine")
    reference = combine.reference(*split.reference(*inputs, 0.3, pages_per_split))
    torch.testing.assert_close(reference.double(), want, rtol=tol, atol=tol)


def test_each_split_holds_its_keys_attention_and_log_sum_exp(generated):
    """Split s of sequence b covers its keys s * PPS * PAGE to (s + 1) * PPS * PAGE - 1: o_part is
    their attention alone and lse their scores' log-sum-exp (torch.logsumexp); a split past the
    sequence's end has lse -inf and o_part 0. NaN in the rows no sequence owns reaches neither."""
    q, k_cache, v_cache, table, lengths = _paged([9, 0, 30], 4, 2, 16, 4, torch.float32, seed=8)
    clean = (k_cache.clone(), v_cache.clone())
    owned = torch.zeros(k_cache.shape[:2], dtype=torch.bool, device=k_cache.device)
    for b, n in enumerate(lengths.tolist()):
        for key in range(n):
            owned[table[b, key // 4], key % 4] = True
    for cache in (k_cache, v_cache):
        cache[~owned] = float("nan")
    _, o_part, lse = _split_then_combine(generated, (q, k_cache, v_cache, table, lengths), 0.5, 2)
    assert not o_part.isnan().any() and not lse.isnan().any()
    span = 2 * 4  # keys per split
    for b, n in enumerate(lengths.tolist()):
        for split in range(o_part.shape[2]):
            first, last = split * span, min((split + 1) * span, n)
            if first >= n:
                assert (lse[b, :, split] == float("-inf")).all() and (o_part[b, :, split] == 0).all()
                continue
            pages = table[b, split * 2: split * 2 + 2].long()
            keys, values = (c[pages].reshape(-1, 2, 16)[: last - first].double().repeat_interleave(2, dim=1)
                            for c in clean)
            scores = torch.einsum("hd,nhd->hn", q[b].double(), keys) * 0.5
            torch.testing.assert_close(lse[b, :, split].double(), torch.logsumexp(scores, dim=-1), rtol=F32, atol=F32)
            want = torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), values)
            torch.testing.assert_close(o_part[b, :, split].double(), want, rtol=F32, atol=F32)


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_paged_decode_attention_on_the_gpu(generated, dtype):
    """Llama-3-8B's heads (32 over 8, D 128), pages of 16 tokens, sequences of 0 to 2000 tokens,
    every config the tuner may pick; split-KV at 32 pages (512 tokens) a split."""
    module = generated("paged_decode_attention")
    inputs = _paged([2000, 1, 0, 129, 16, 777], 32, 8, 128, 16, dtype, seed=7, device="cuda")
    want = _torch_paged(*inputs, 0.088)
    for index in range(len(module._CONFIGS)):
        out = module.paged_decode_attention(*inputs, 0.088, config=index)
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2, msg=f"config {index}")
    split = generated("paged_decode_attention_split")
    for index in range(len(split._CONFIGS)):
        o_part, lse = split.paged_decode_attention_split(*inputs, 0.088, 32, config=index)
        out = generated("paged_decode_attention_combine").paged_decode_attention_combine(o_part, lse)
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2, msg=f"split config {index}")
