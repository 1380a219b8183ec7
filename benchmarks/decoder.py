"""A small decoder language model whose every kernel is a tilegen spec, beside the same model in torch.

The model (a Llama-style decoder, as in nanoGPT's and Hugging Face's Llama): token embedding, then per
layer ``x += attn(rms_norm(x))`` and ``x += mlp(rms_norm(x))``, a final rms_norm and a linear head,
trained on the mean cross-entropy of the next token. Each residual add is taken with the
rms_norm that follows it (``add_rms_norm``, Liger-Kernel's ``fused_add_rms_norm``). The
attention projects to q, k, v with one matmul, rotates q and k (rope, Hugging Face's
``rotate_half`` form), takes causal attention (FlashAttention-2) and projects back; the MLP is
SwiGLU (``down(silu(gate(x)) * up(x))``).

Two implementations of the same math, chosen by :class:`Ops`:

* :func:`tilegen_ops`: the generated functions of ``specs/`` (``embedding``, ``rms_norm``,
  ``fused_add_rms_norm``, ``matmul_fast`` for every linear layer (``tilegen.nn.matmul``: the float32
  weight's gradient written in float32 by the kernel), ``rope``, ``attention_causal``,
  ``swiglu``), each differentiated by its backward specs (``backward ...`` in the spec, or the
  derived one), and the head's matmul with the loss in chunks of tokens
  (``tilegen.nn.linear_cross_entropy``: cuBLAS and the ``cross_entropy`` specs, the [N, V] logits
  never whole);
* :data:`TORCH`: torch eager (``F.embedding``, ``F.rms_norm`` (after ``+`` for a residual), ``@``,
  ``F.scaled_dot_product_attention``, ``F.silu``, ``F.cross_entropy``).

What stays torch in both: the glue between kernels (views and transposes between
the heads' layout and the rows', the mean of the per-token losses) and the optimizer.

The data (:func:`corpus`) is the Python standard library's own ``.py`` sources as bytes (a
vocabulary of 256), so a run needs no download. Parameters are float32; the model computes in
``Config.compute`` (float32: tensor-core matmuls in TF32 on the GPU, as torch's with
``allow_tf32``; or bfloat16/float16, the parameters cast where used and their gradients float32,
as under torch.autocast).
"""

from __future__ import annotations

import functools
import math
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402


@dataclass(frozen=True)
class Config:
    """The model's sizes: ``vocab`` tokens (256: bytes), ``dim`` wide (``heads`` heads of
    ``dim // heads``), ``layers`` blocks, an MLP of ``hidden``, sequences of ``context`` tokens."""

    vocab: int = 256
    dim: int = 256
    heads: int = 4
    layers: int = 2
    hidden: int = 704
    context: int = 128
    eps: float = 1e-5
    #: the dtype the model computes in (``"float32"``, ``"bfloat16"``, ``"float16"``): the float32
    #: parameters are cast to it where they are used, as torch.autocast does (their gradients come
    #: back float32 through the cast); the logits are float32 for the loss
    compute: str = "float32"


@dataclass(frozen=True)
class Ops:
    """One implementation of every operation the model takes (see the module docstring). Shapes:
    ``embedding(idx i64[N], table [V, C]) -> [N, C]``; ``rms_norm(x [N, C], w [C], eps) -> [N, C]``;
    ``add_rms_norm(x [N, C], residual [N, C], w [C], eps) -> (rms_norm(s, w, eps), s)``, ``s = x +
    residual`` (the next residual);
    ``linear(x [N, K], w [K, M]) -> [N, M]`` (w the float32 parameter, cast to x's dtype);
    ``rope(q [B, H, T, D], k [B, H, T, D], cos [B, T, D],
    sin [B, T, D]) -> (q, k)`` (each sequence's tables, as Hugging Face's); ``attention(q, k, v
    [B, H, T, D], scale) -> [B, H, T, D]`` (causal); ``swiglu(a [N, F], b [N, F]) -> [N, F]``;
    ``head_loss(h [N, C], head [C, V], target i64[N])`` -> the mean cross-entropy of the logits
    ``h @ head`` (in the compute dtype) computed in float32 (torch's on ``logits.float()``, as
    Hugging Face's models call it), a 0-dim f32 tensor."""

    name: str
    embedding: Callable
    rms_norm: Callable
    add_rms_norm: Callable
    linear: Callable
    rope: Callable
    attention: Callable
    swiglu: Callable
    head_loss: Callable


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(q, k, cos, sin):
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _add_rms_norm(x, residual, w, eps):
    s = x + residual
    return F.rms_norm(s, (s.shape[-1],), w, eps), s


TORCH = Ops(
    "torch",
    embedding=F.embedding,
    rms_norm=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    add_rms_norm=_add_rms_norm,
    linear=lambda x, w: x @ w.to(x.dtype),
    rope=lambda q, k, cos, sin: _rope(q, k, cos.unsqueeze(1), sin.unsqueeze(1)),
    attention=lambda q, k, v, scale: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
    swiglu=lambda a, b: F.silu(a) * b,
    head_loss=lambda h, head, target: F.cross_entropy((h @ head).float(), target),
)


@functools.cache
def tilegen_ops(folder: Path = ROOT / "generated") -> Ops:
    """The :class:`Ops` of the generated modules in ``folder`` (the committed build by default),
    each module loaded once per process (so its tuning cache and compiled launches persist)."""

    def kernel(name):
        return getattr(load_module(folder / f"{name}.py"), name)

    causal = kernel("attention_causal")

    def attention(q, k, v, scale):
        return causal(q, k, v, scale)[0]  # o (each row's log-sum-exp: its second output)

    from tilegen.nn.linear import matmul  # the committed build's matmul_fast kernels
    from tilegen.nn.linear_cross_entropy import linear_cross_entropy  # the committed build's cross_entropy kernels

    return Ops(
        "tilegen",
        embedding=kernel("embedding"),
        rms_norm=kernel("rms_norm"),
        add_rms_norm=kernel("fused_add_rms_norm"),
        linear=matmul,
        rope=kernel("rope"),
        attention=attention,
        swiglu=kernel("swiglu"),
        head_loss=lambda h, head, target: linear_cross_entropy(h, head.T, target),
    )


def init_params(cfg: Config, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """float32 parameters (leaves that require grad): normal(0, 0.02) matrices, the output
    projections scaled by 1/sqrt(2 * layers) (GPT-2's init), norm weights of ones."""
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    params = {"embedding": normal(cfg.vocab, cfg.dim), "norm": torch.ones(cfg.dim),
              "head": normal(cfg.dim, cfg.vocab)}
    out_std = 0.02 / math.sqrt(2 * cfg.layers)
    for i in range(cfg.layers):
        params |= {
            f"{i}.attn_norm": torch.ones(cfg.dim),
            f"{i}.qkv": normal(cfg.dim, 3 * cfg.dim),
            f"{i}.out": normal(cfg.dim, cfg.dim, std=out_std),
            f"{i}.mlp_norm": torch.ones(cfg.dim),
            f"{i}.gate": normal(cfg.dim, cfg.hidden),
            f"{i}.up": normal(cfg.dim, cfg.hidden),
            f"{i}.down": normal(cfg.hidden, cfg.dim, std=out_std),
        }
    return {k: v.to(device).requires_grad_() for k, v in params.items()}


def rope_tables(cfg: Config, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of shape [context, head dim] (Hugging Face's Llama: base 10000, the
    frequencies repeated over both halves)."""
    d = cfg.dim // cfg.heads
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(cfg.context, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device), emb.sin().to(device)


def loss(ops: Ops, params: dict, idx: torch.Tensor, target: torch.Tensor, cfg: Config, tables) -> torch.Tensor:
    """The mean next-token cross-entropy of ``idx`` (i64[B, T], T <= context) against ``target``
    (i64[B, T]) through ``ops``: a 0-dim float32 tensor."""
    b, t = idx.shape
    heads, d = cfg.heads, cfg.dim // cfg.heads
    compute = getattr(torch, cfg.compute)

    def w(name):  # a parameter in the compute dtype (a no-op in float32)
        return params[name].to(compute)

    cos, sin = (table[:t].to(compute).expand(b, t, d) for table in tables)  # shared by the batch: stride 0
    x = ops.embedding(idx.reshape(-1), w("embedding"))  # [B * T, C]: the residual stream
    h = ops.rms_norm(x, w("0.attn_norm"), cfg.eps)
    for i in range(cfg.layers):
        qkv = ops.linear(h, params[f"{i}.qkv"]).view(b, t, 3, heads, d)  # (linear casts its weight)
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))  # [B, H, T, D] views
        q, k = ops.rope(q, k, cos, sin)
        a = ops.attention(q, k, v, 1.0 / math.sqrt(d)).transpose(1, 2).reshape(b * t, cfg.dim)
        h, x = ops.add_rms_norm(ops.linear(a, params[f"{i}.out"]), x, w(f"{i}.mlp_norm"), cfg.eps)
        gated = ops.swiglu(ops.linear(h, params[f"{i}.gate"]), ops.linear(h, params[f"{i}.up"]))
        norm = f"{i + 1}.attn_norm" if i + 1 < cfg.layers else "norm"  # the next layer's, or the last
        h, x = ops.add_rms_norm(ops.linear(gated, params[f"{i}.down"]), x, w(norm), cfg.eps)
    return ops.head_loss(h, w("head"), target.reshape(-1))


def corpus(limit: int | None = None) -> torch.Tensor:
    """The bytes of the standard library's ``.py`` files (sorted by path, top folder only), as
    i64[N]; the first ``limit`` bytes where given."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    data = bytearray()
    for path in sorted(folder.glob("*.py")):
        data += path.read_bytes()
        if limit is not None and len(data) >= limit:
            break
    return torch.tensor(list(data[:limit] if limit is not None else data), dtype=torch.int64)


def batches(data: torch.Tensor, cfg: Config, batch: int, steps: int, seed: int = 0):
    """``steps`` pairs ``(idx, target)`` of i64[batch, context]: windows of ``data`` at random
    offsets (one seeded generator, so every run and both models see the same batches), the target
    the window shifted by one byte."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - cfg.context - 1, (batch,), generator=g)
        windows = torch.stack([data[s:s + cfg.context + 1] for s in starts.tolist()])
        yield windows[:, :-1], windows[:, 1:]


def train(ops: Ops, cfg: Config, data: torch.Tensor, steps: int, batch: int, device: str = "cpu",
          lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Train a fresh model (:func:`init_params` of ``seed``) through ``ops`` for ``steps`` AdamW
    steps on :func:`batches` of ``data``; returns each step's loss (before its update)."""
    params = init_params(cfg, seed, device)
    tables = rope_tables(cfg, device)
    optimizer = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.0)
    losses = []
    for idx, target in batches(data, cfg, batch, steps, seed):
        value = loss(ops, params, idx.to(device), target.to(device), cfg, tables)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        losses.append(value.item())
    return losses
