"""Indexing from data on the GPU against torch: scatter-adds (the embedding backward, bincount,
scatter_add), jagged rows, varlen attention and the MoE grouped GEMM.

``python benchmarks/indexing.py [OUT_DIR]`` (default ``benchmarks/results``) writes
``indexing_<device>.csv`` and prints it. Each row is one kernel at one shape and dtype, timed in
the same process as its torch baseline:

* ``eager_us``: the generated launcher called as a user calls it (its output allocation, the
  zero fill its ``= 0`` declares, its checks or fast path, the kernel), after its first call tuned
  its configs for the shape (``TILEGEN_TUNE=full`` unless the environment says otherwise), median
  of ``triton.testing.do_bench``; ``torch_eager_us`` the same for torch's call;
* ``graphed_us``: both replayed from a CUDA graph (``do_bench_cudagraph``): the GPU's time alone;
* ``speedup_eager`` / ``speedup_graphed``: torch's time over tilegen's (above 1: tilegen faster);
* ``max_error``: the largest difference from torch's result (float sums differ in their order).

Where torch's call cannot be captured in a CUDA graph (``torch.bincount`` reads its size back
to the host), its graphed column is NaN. The embedding backward's baseline is torch's own
(``torch.ops.aten.embedding_dense_backward``, what ``F.embedding``'s autograd runs), in the
table's dtype; tilegen's is the three kernels the embedding's autograd runs (the first token of
each row, the float32 sums over N rows, the rows written in the table's dtype), and the one kernel
it runs under ``torch.use_deterministic_algorithms(True)`` (tokens sorted by row, each row's run
summed in token order by one lane: ``embedding_backward_deterministic``). Shapes:
Llama's vocabularies (32000, 128256) at C = 4096 and N = 8192 tokens, plus odd sizes. The
jagged operators (tritonbench's jagged_sum, jagged_mean, jagged_softmax) run on sequences of
uniform random lengths up to L against ``torch.segment_reduce`` and a nested jagged tensor's
softmax. Varlen causal attention (packed q, k, v [T, H, D] with ``cu_seqlens``, bf16) runs
against FlashAttention-2's varlen kernel in torch (``aten._flash_attention_forward`` with
cumulative sequence lengths) and against SDPA on the batch padded to the longest sequence (the
inputs padded beforehand, untimed; the unpadding of its output timed), and with its backward
against FlashAttention-2's varlen forward and backward (each through autograd).
The MoE grouped GEMM (tokens sorted by expert, bf16) runs at Mixtral 8x7B's and
DeepSeek-V2-Lite's expert shapes against ``torch._grouped_mm`` and a torch loop over the experts,
forward and forward + backward.
Grouped-query attention (causal, bf16, Llama 3's head counts) runs against SDPA with
``enable_gqa=True``, forward and forward + backward.
Paged decode attention (one query a sequence, bf16, Llama 3's head counts, pages of 16 and 256
tokens in shuffled physical order, 32 or 64 sequences of random lengths up to 32k) runs against
SDPA with ``enable_gqa=True`` and a key mask on the keys and values gathered through the block
table and padded to the table's width, the gather timed (what a torch decode step does) and not
(SDPA alone), and in its split-KV form (flash-decoding: splits of 512 tokens, then a combine);
the bandwidth each form reaches is printed (the bytes of q, o and the sequences' keys and values
over its graphed time), decode's limit.
``INDEXING_ONLY=varlen`` (or embedding, bincount, scatter_add, jagged, moe, gqa, paged; several
joined by commas) runs those groups' rows.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402

os.environ.setdefault("TILEGEN_TUNE", "full")  # each kernel's configs timed at each shape (its first call)


def _module(name: str):
    return load_module(ROOT / "generated" / f"{name}.py")


def _row(kernel: str, shape: str, dtype: torch.dtype, ours, theirs) -> dict:
    """Time ``ours`` and ``theirs`` (no-argument callables returning comparable tensors) eager and
    graphed; tilegen's is called first, once, so that its tuning is done before the timing."""
    got, expected = ours().float(), theirs().float()
    error = (got - expected).abs().max().item() if got.numel() else 0.0
    eager = do_bench(ours, return_mode="median")
    torch_eager = do_bench(theirs, return_mode="median")
    graphed = do_bench_cudagraph(ours, return_mode="median")
    try:
        torch_graphed = do_bench_cudagraph(theirs, return_mode="median")
    except RuntimeError:  # torch's op syncs with the host (bincount's size): no graph of it
        torch_graphed = float("nan")
    row = {
        "kernel": kernel, "shape": shape, "dtype": str(dtype).removeprefix("torch."),
        "eager_us": round(eager * 1e3, 1), "torch_eager_us": round(torch_eager * 1e3, 1),
        "graphed_us": round(graphed * 1e3, 1), "torch_graphed_us": round(torch_graphed * 1e3, 1),
        "speedup_eager": round(torch_eager / eager, 2), "speedup_graphed": round(torch_graphed / graphed, 2),
        "max_error": f"{error:.2e}",
    }
    print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return row


def embedding_rows() -> list[dict]:
    first, add, write = (_module(f"embedding_backward_{step}") for step in ("first", "sum", "rows"))
    ordered = _module("embedding_backward_deterministic")
    rows = []
    for vocab, channels, tokens in ((32000, 4096, 8192), (128256, 4096, 8192), (50257, 768, 8191), (1000, 333, 4097)):
        for dtype in (torch.bfloat16, torch.float32):
            generator = torch.Generator(device="cuda").manual_seed(vocab)
            idx = torch.randint(0, vocab, (tokens,), device="cuda", generator=generator)
            weight = torch.empty(vocab, channels, device="cuda", dtype=dtype)
            dy = torch.randn(tokens, channels, device="cuda", dtype=dtype, generator=generator)

            def ours(idx=idx, weight=weight, dy=dy):  # the embedding's backward, as its autograd runs it
                slots = first.embedding_backward_first(idx, weight)
                partial = add.embedding_backward_sum(idx, slots, dy)
                return write.embedding_backward_rows(idx, slots, partial, weight)

            def theirs(idx=idx, dy=dy, vocab=vocab):
                return torch.ops.aten.embedding_dense_backward(dy, idx, vocab, -1, False)

            def in_order(idx=idx, weight=weight, dy=dy):  # what autograd runs under use_deterministic_algorithms
                return ordered.embedding_backward_deterministic(idx, dy, weight)

            shape = f"V={vocab} C={channels} N={tokens}"
            rows.append(_row("embedding_backward", shape, dtype, ours, theirs))
            rows.append(_row("embedding_backward_deterministic", shape, dtype, in_order, theirs))
            del weight, dy
            torch.cuda.empty_cache()
    return rows


def bincount_rows() -> list[dict]:
    module = _module("bincount")
    rows = []
    for n, bins in ((1 << 20, 256), (10_000_019, 1000), (4_000_037, 4096), (1 << 24, 65536)):
        x = torch.randint(0, bins, (n,), device="cuda")
        rows.append(_row("bincount", f"N={n} bins={bins}", torch.int64,
                         lambda x=x, bins=bins: module.bincount(x, bins),
                         lambda x=x, bins=bins: torch.bincount(x, minlength=bins)))
    return rows


def scatter_add_rows() -> list[dict]:
    module = _module("scatter_add")
    rows = []
    for n, channels, extent in ((8192, 1024, 512), (4097, 333, 100), (16384, 768, 50257)):
        index = torch.randint(0, extent, (n, channels), device="cuda")
        src = torch.randn(n, channels, device="cuda")
        rows.append(_row("scatter_add", f"N={n} C={channels} V={extent}", torch.float32,
                         lambda index=index, src=src, extent=extent: module.scatter_add(index, src, extent),
                         lambda index=index, src=src, extent=extent, c=channels:
                         torch.zeros(extent, c, device="cuda").scatter_add_(0, index, src)))
    return rows


def _segments(batch: int, longest: int, columns: int, seed: int):
    """values [T, columns] (f32, CUDA) and offsets [batch + 1] of sequences of uniform lengths in
    [1, longest]."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    lengths = torch.randint(1, longest + 1, (batch,), device="cuda", generator=generator)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    values = torch.randn(int(offsets[-1]), columns, device="cuda", generator=generator)
    return values, offsets


def jagged_rows() -> list[dict]:
    """tritonbench's jagged operators against torch: ``torch.segment_reduce`` for the sum and the
    mean, and the softmax of a nested jagged tensor (``torch.nested.nested_tensor_from_jagged``)."""
    rows = []
    for batch, longest, columns in ((1024, 256, 128), (512, 1024, 256), (64, 2048, 1024)):
        values, offsets = _segments(batch, longest, columns, batch)
        shape = f"B={batch} L={longest} D={columns} T={values.shape[0]}"
        for kernel, reduce in (("jagged_sum", "sum"), ("jagged_mean", "mean")):
            module = _module(kernel)
            rows.append(_row(kernel, shape, torch.float32,
                             lambda m=module, k=kernel, v=values, o=offsets, n=longest: getattr(m, k)(v, o, n),
                             lambda v=values, o=offsets, r=reduce: torch.segment_reduce(v, r, offsets=o, axis=0)))
        module = _module("jagged_softmax")
        nested = torch.nested.nested_tensor_from_jagged(values, offsets)
        rows.append(_row("jagged_softmax", shape, torch.float32,
                         lambda m=module, v=values, o=offsets, n=longest: m.jagged_softmax(v, o, n),
                         lambda t=nested: torch.softmax(t, dim=1).values()))
    return rows


def varlen_attention_rows() -> list[dict]:
    """varlen_attention against torch's FlashAttention-2 varlen forward and padded SDPA (causal)."""
    import torch.nn.functional as F

    module = _module("varlen_attention")
    rows = []
    for batch, heads, dim, longest in ((16, 32, 128, 4096), (64, 12, 64, 1024), (8, 16, 128, 8192)):
        generator = torch.Generator(device="cuda").manual_seed(batch)
        lengths = torch.randint(1, longest + 1, (batch,), device="cuda", generator=generator)
        cu = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).to(torch.int32)
        total = int(cu[-1])
        # do (the backward's output gradient) made now: a failed graph capture of torch's padded
        # call below leaves the default generator refusing new draws
        q, k, v, do = (torch.randn(total, heads, dim, device="cuda", dtype=torch.bfloat16, generator=generator)
                       for _ in range(4))
        scale = dim ** -0.5
        valid = torch.arange(longest, device="cuda")[None, :] < lengths[:, None]  # [B, L]
        padded = []
        for t in (q, k, v):
            p = t.new_zeros(batch, longest, heads, dim)
            p[valid] = t
            padded.append(p.transpose(1, 2))  # [B, H, L, D]
        shape = f"B={batch} H={heads} D={dim} L={longest} T={total}"

        def ours(a, b, c, cu=cu, n=longest, s=scale):
            return module.varlen_attention(a, b, c, cu, n, s)[0]  # o (the rows' log-sum-exp: its second output)

        def flash(a, b, c, cu=cu, n=longest, s=scale):
            return torch.ops.aten._flash_attention_forward(a, b, c, cu, cu, n, n, 0.0, True, False, scale=s)[0]

        sdpa = lambda p=padded, m=valid, s=scale: F.scaled_dot_product_attention(  # noqa: E731
            *p, is_causal=True, scale=s).transpose(1, 2)[m]
        rows.append(_row("varlen_attention vs flash varlen", shape, torch.bfloat16,
                         lambda f=ours, t=(q, k, v): f(*t), lambda f=flash, t=(q, k, v): f(*t)))
        rows.append(_row("varlen_attention vs padded SDPA", shape, torch.bfloat16,
                         lambda f=ours, t=(q, k, v): f(*t), sdpa))
        # forward and backward (dq, dk, dv stacked), each through its autograd
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def both(forward, leaves=leaves, do=do):
            return torch.stack(torch.autograd.grad(forward(*leaves), leaves, do))

        try:
            rows.append(_row("varlen_attention forward + backward vs flash varlen", shape, torch.bfloat16,
                             lambda f=ours: both(f), lambda f=flash: both(f)))
        except RuntimeError as error:  # a torch without autograd through its varlen forward: say so, go on
            print(f"varlen_attention forward + backward, {shape}: {str(error).splitlines()[0][:200]}", flush=True)
    return rows


def _routing(tokens: int, experts: int, top_k: int, seed: int) -> list[int]:
    """Rows per expert of ``tokens`` tokens each routed to ``top_k`` distinct experts, the router's
    choice drawn with random (uneven) expert popularity, as a trained router's load is."""
    generator = torch.Generator().manual_seed(seed)
    popularity = torch.rand(experts, generator=generator) + 0.25
    choice = torch.multinomial(popularity.expand(tokens, experts), top_k, generator=generator)
    return torch.bincount(choice.flatten(), minlength=experts).tolist()


def moe_rows() -> list[dict]:
    """The MoE grouped GEMM at Mixtral 8x7B's (E 8, top-2, 4096 -> 14336) and DeepSeek-V2-Lite's
    (E 64, top-6, 2048 -> 1408) expert shapes, 4096 tokens, bf16, the weights in nn.Linear's layout
    ([E, N, K], read transposed), against torch._grouped_mm and a torch loop over the experts;
    forward, and forward + backward through autograd with the weights in [E, K, N] (the layout of
    the weight gradient tilegen makes)."""
    module = _module("moe_grouped_gemm")
    rows = []
    for name, experts, top_k, k, n in (("Mixtral-8x7B", 8, 2, 4096, 14336), ("DeepSeek-V2-Lite", 64, 6, 2048, 1408)):
        counts = _routing(4096, experts, top_k, seed=experts)
        x = torch.randn(sum(counts), k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(experts, n, k, device="cuda") / k**0.5).to(torch.bfloat16).transpose(1, 2)
        ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        bounds = list(zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True))
        longest = max(counts)
        shape = f"{name}: E={experts} top{top_k} S={sum(counts)} K={k} N={n}"

        def ours(x=x, w=w, ends=ends, longest=longest):
            return module.moe_grouped_gemm(x, w, ends, longest)

        def loop(x=x, w=w, bounds=bounds):
            return torch.cat([x[s:e] @ w[i] for i, (s, e) in enumerate(bounds)])

        rows.append(_row("moe_grouped_gemm vs loop", shape, torch.bfloat16, ours, loop))
        if hasattr(torch, "_grouped_mm"):
            rows.append(_row("moe_grouped_gemm vs _grouped_mm", shape, torch.bfloat16, ours,
                             lambda x=x, w=w, ends=ends: torch._grouped_mm(x, w, offs=ends)))
        # the gradient of w is made contiguous, [E, K, N]: weights kept in that layout take it as it is
        # (in nn.Linear's, autograd copies it into theirs, a strided copy of the weights' size)
        xg, wg = x.clone().requires_grad_(), w.contiguous().requires_grad_()
        dy = torch.randn(sum(counts), n, device="cuda", dtype=torch.bfloat16)

        def both(f, xg=xg, wg=wg, dy=dy):
            xg.grad = wg.grad = None
            f(xg, wg).backward(dy)
            return wg.grad

        rows.append(_row("moe_grouped_gemm forward + backward vs loop", shape, torch.bfloat16,
                         lambda: both(lambda a, b: ours(a, b)), lambda: both(lambda a, b: loop(a, b))))
        if hasattr(torch, "_grouped_mm"):
            try:
                rows.append(_row("moe_grouped_gemm forward + backward vs _grouped_mm", shape, torch.bfloat16,
                                 lambda: both(lambda a, b: ours(a, b)),
                                 lambda ends=ends: both(lambda a, b: torch._grouped_mm(a, b, offs=ends))))
            except RuntimeError as error:  # a torch without _grouped_mm's backward: say so, go on
                print(f"moe_grouped_gemm forward + backward, {shape}: {str(error).splitlines()[0][:200]}", flush=True)
    return rows


def gqa_rows() -> list[dict]:
    """attention_gqa (causal, bf16) at Llama 3 8B's and 70B's head counts (32 and 64 query heads
    over 8 key/value heads, D 128, B * S = 16384) against SDPA with ``enable_gqa=True``, forward and
    forward + backward (each through its autograd)."""
    import torch.nn.functional as F

    module = _module("attention_gqa")
    rows = []
    for heads, kv_heads, seq in ((32, 8, 2048), (64, 8, 4096)):
        batch, dim = 16384 // seq, 128
        generator = torch.Generator(device="cuda").manual_seed(seq)
        q, do = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=generator)
                 for _ in range(2))
        k, v = (torch.randn(batch, kv_heads, seq, dim, device="cuda", dtype=torch.bfloat16, generator=generator)
                for _ in range(2))
        scale = dim ** -0.5
        shape = f"B={batch} H={heads} HK={kv_heads} S={seq} D={dim}"

        def ours(a, b, c, s=scale):
            return module.attention_gqa(a, b, c, s)[0]  # o (the rows' log-sum-exp: its second output)

        def sdpa(a, b, c, s=scale):
            return F.scaled_dot_product_attention(a, b, c, is_causal=True, scale=s, enable_gqa=True)

        rows.append(_row("attention_gqa vs SDPA enable_gqa", shape, torch.bfloat16,
                         lambda f=ours, t=(q, k, v): f(*t), lambda f=sdpa, t=(q, k, v): f(*t)))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def both(forward, leaves=leaves, do=do):
            return torch.cat([g.flatten() for g in torch.autograd.grad(forward(*leaves), leaves, do)])

        rows.append(_row("attention_gqa forward + backward vs SDPA enable_gqa", shape, torch.bfloat16,
                         lambda f=ours: both(f), lambda f=sdpa: both(f)))
    return rows


def paged_cache(lengths: torch.Tensor, heads: int, kv_heads: int, dim: int, page: int, dtype: torch.dtype,
                generator: torch.Generator) -> tuple:
    """q [B, H, D], k and v caches [P, PAGE, HK, D] holding exactly the sequences' pages in a
    shuffled physical order, the block table [B, MAXP] (MAXP for the longest length; entries past a
    sequence's pages 0) and seq_lens, on ``lengths``' device."""
    device = lengths.device
    needed = (lengths + page - 1) // page
    max_pages = int(needed.max())
    pages = int(needed.sum())
    q = torch.randn(len(lengths), heads, dim, device=device, dtype=dtype, generator=generator)
    k_cache, v_cache = (torch.randn(pages, page, kv_heads, dim, device=device, dtype=dtype, generator=generator)
                        for _ in range(2))
    order = torch.randperm(pages, device=device, generator=generator)
    column = torch.arange(max_pages, device=device)
    inside = column[None, :] < needed[:, None]
    first = needed.cumsum(0) - needed  # each sequence's first slot in the order
    table = torch.zeros(len(lengths), max_pages, dtype=torch.int32, device=device)
    table[inside] = order[(first[:, None] + column[None, :])[inside]].to(torch.int32)
    return q, k_cache, v_cache, table, lengths.to(torch.int32)


def paged_sdpa(q, k_cache, v_cache, table, seq_lens, scale, gathered=None):
    """torch's paged decode step: the caches gathered through the table into [B, HK, MAXP * PAGE, D]
    (or ``gathered``, the pair made before), then SDPA with ``enable_gqa`` under a key mask."""
    import torch.nn.functional as F

    batch, max_pages = table.shape
    page, kv_heads, dim = k_cache.shape[1:]
    if gathered is None:
        gathered = [c[table.long()].reshape(batch, max_pages * page, kv_heads, dim).transpose(1, 2)
                    for c in (k_cache, v_cache)]
    keys = torch.arange(max_pages * page, device=q.device)[None, :] < seq_lens[:, None]
    return F.scaled_dot_product_attention(q[:, :, None, :], *gathered, attn_mask=keys[:, None, None, :],
                                          scale=scale, enable_gqa=True)[:, :, 0]


def paged_rows() -> list[dict]:
    """paged_decode_attention (bf16, D 128) at Llama 3 8B's heads (32 over 8) and 70B's (64 over
    8), against SDPA on the gathered, padded keys and values (:func:`paged_sdpa`), gathered in the
    timed call and before it; and its split-KV form (paged_decode_attention_split, 512 tokens a
    split, then paged_decode_attention_combine) against the first."""
    module = _module("paged_decode_attention")
    split, combine = _module("paged_decode_attention_split"), _module("paged_decode_attention_combine")
    rows = []
    for batch, heads, kv_heads, page, shortest, longest in ((32, 32, 8, 16, 1024, 32768),
                                                             (32, 32, 8, 256, 1024, 32768),
                                                             (32, 32, 8, 16, 1024, 4096),
                                                             (64, 64, 8, 16, 128, 4096)):
        dim, dtype = 128, torch.bfloat16
        generator = torch.Generator(device="cuda").manual_seed(longest + page + heads)
        lengths = torch.randint(shortest, longest + 1, (batch,), device="cuda", generator=generator)
        q, k_cache, v_cache, table, seq_lens = paged_cache(lengths, heads, kv_heads, dim, page, dtype, generator)
        scale = dim ** -0.5
        shape = (f"B={batch} H={heads} HK={kv_heads} D={dim} PAGE={page} lengths {shortest}-{longest} "
                 f"(T={int(lengths.sum())})")

        def ours(t=(q, k_cache, v_cache, table, seq_lens), s=scale):
            return module.paged_decode_attention(*t, s)

        def theirs(t=(q, k_cache, v_cache, table, seq_lens), s=scale):
            return paged_sdpa(*t, s)

        rows.append(_row("paged_decode_attention vs gather + SDPA", shape, dtype, ours, theirs))
        gathered = [c[table.long()].reshape(batch, -1, kv_heads, dim).transpose(1, 2) for c in (k_cache, v_cache)]
        rows.append(_row("paged_decode_attention vs SDPA on gathered K/V", shape, dtype, ours,
                         lambda t=(q, k_cache, v_cache, table, seq_lens), s=scale, g=gathered: paged_sdpa(*t, s, g)))
        del gathered
        pages_per_split = max(512 // page, 1)  # vLLM v2's partitions of 512 tokens

        def ours_split(t=(q, k_cache, v_cache, table, seq_lens), s=scale, n=pages_per_split):
            return combine.paged_decode_attention_combine(*split.paged_decode_attention_split(*t, s, n))

        rows.append(_row(f"paged_decode_attention split-KV ({pages_per_split} pages a split) + combine "
                         "vs gather + SDPA", shape, dtype, ours_split, theirs))
        moved = (2 * int(lengths.sum()) * kv_heads * dim + 2 * batch * heads * dim) * q.element_size()
        for row in rows[-3::2]:  # the bytes a decode step must move, over the GPU's time
            print(f"{row['kernel']}, {shape}: {moved / 1e9:.2f} GB moved, "
                  f"{moved / (row['graphed_us'] * 1e-6) / 1e9:.0f} GB/s graphed", flush=True)
    return rows


def main(out: Path) -> None:
    device = torch.cuda.get_device_name()
    print(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}")
    only = os.environ.get("INDEXING_ONLY")  # some groups' rows (keys of groups, joined by commas)
    groups = {"embedding": embedding_rows, "bincount": bincount_rows, "scatter_add": scatter_add_rows,
              "jagged": jagged_rows, "varlen": varlen_attention_rows, "moe": moe_rows,
              "gqa": gqa_rows, "paged": paged_rows}
    rows = [row for name, group in groups.items() if only is None or name in only.split(",") for row in group()]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"indexing_{device.replace(' ', '_')}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results")
