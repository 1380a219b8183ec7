"""Fused linear cross-entropy: a language model's head and its loss without the [N, V] logits.

``linear_cross_entropy(h, weight, target)`` is ``F.cross_entropy(h @ weight.T, target)`` computed
over chunks of rows, so that only a chunk's logits exist at a time (Liger-Kernel's fused linear
cross-entropy; Wijmans et al., "Cut Your Losses in Large-Vocabulary Language Models", 2024, make
the same point). Each chunk's logits come from one matmul (cuBLAS through torch), tilegen's
``cross_entropy`` kernel gives the rows' losses and ``cross_entropy_backward`` writes the logits'
gradient over the logits, and two more matmuls turn it into the chunk's rows of ``dh`` and its
term of ``dweight``. The gradients are computed in the forward, where the logits are at hand
(the backward only scales them by the loss's gradient), so the forward of a call that needs no
gradient skips them.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from tilegen.nn import module
from tilegen.nn.cross_entropy import CrossEntropyOutput, check_targets, split_z_loss, statistics

Reduction = Literal["mean", "sum", "none"]

# loaded on import, not in the forward, which torch.compile traces (their launchers are looked up
# on the modules at each call)
_FORWARD, _BACKWARD, _STATS = module("cross_entropy"), module("cross_entropy_backward"), module("cross_entropy_stats")


#: The logits a chunk may hold whatever the weight's size (bytes): 256 MiB.
CHUNK_BYTES = 1 << 28


def default_chunk_rows(rows: int, hidden: int, vocab: int, itemsize: int = 2) -> int:
    """The number of rows per chunk: the largest power of two whose logits ([chunk, V] of
    ``itemsize`` bytes) take at most half the weight's size ([V, H], whose gradient the call holds
    anyway) or :data:`CHUNK_BYTES`, whichever is more; at least 1, at most the next power of two of
    ``rows``. Fewer, larger chunks are faster: each chunk's matmuls are larger and ``dweight`` is
    read and written once per chunk (on an H200, Llama-3-8B's head over 8192 tokens in bf16 took
    1.4x as long in chunks of 256 rows as in chunks of 2048, at the same peak memory)."""
    limit = max(hidden // 2, CHUNK_BYTES // max(vocab * itemsize, 1), 1)
    return min(1 << (limit.bit_length() - 1), 1 << max(rows - 1, 0).bit_length())


def _check(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
           reduction: str, ce_weight: torch.Tensor | None = None) -> None:
    """Raise TypeError or ValueError naming the argument whose type, rank, dtype or size is wrong."""
    for name, value in (("h", h), ("weight", weight), ("target", target)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"linear_cross_entropy: {name} must be a tensor, got {type(value).__name__}")
    if h.dim() != 2 or weight.dim() != 2 or target.dim() != 1:
        raise ValueError(f"linear_cross_entropy: h must be [N, H], weight [V, H] and target [N]; got h of "
                         f"shape {tuple(h.shape)}, weight {tuple(weight.shape)}, target {tuple(target.shape)}")
    if weight.shape[1] != h.shape[1]:
        raise ValueError(f"linear_cross_entropy: dimension 1 of weight is {weight.shape[1]}, "
                         f"but dimension 1 of h (H) is {h.shape[1]}")
    if target.shape[0] != h.shape[0]:
        raise ValueError(f"linear_cross_entropy: dimension 0 of target is {target.shape[0]}, "
                         f"but dimension 0 of h (N) is {h.shape[0]}")
    if target.dtype != torch.int64:
        raise TypeError(f"linear_cross_entropy: target must be int64 class indices, got {target.dtype}")
    if weight.dtype != h.dtype:
        raise TypeError(f"linear_cross_entropy: weight is {weight.dtype} but h is {h.dtype}; cast one of them")
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.dtype != h.dtype):
        raise ValueError(f"linear_cross_entropy: bias must be [{weight.shape[0]}] of {h.dtype}, "
                         f"got {tuple(bias.shape)} of {bias.dtype}")
    if ce_weight is not None and (not isinstance(ce_weight, torch.Tensor) or ce_weight.shape != (weight.shape[0],)
                                  or not ce_weight.is_floating_point()):
        shown = tuple(ce_weight.shape) if isinstance(ce_weight, torch.Tensor) else type(ce_weight).__name__
        raise ValueError(f"linear_cross_entropy: ce_weight must be a float tensor [{weight.shape[0]}] (a weight "
                         f"per class), got {shown}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _in_autocast_dtype(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``h``, ``weight`` and ``bias`` in torch.autocast's dtype where it is on (the matmuls run in
    it, as the unfused ones would; autograd casts the gradients back to the inputs' dtypes)."""
    if not torch.is_autocast_enabled(h.device.type):
        return h, weight, bias
    low = torch.get_autocast_dtype(h.device.type)
    return h.to(low), weight.to(low), None if bias is None else bias.to(low)


def _target_probability(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, ignore_index: int,
                        softcap: float) -> torch.Tensor:
    """Each row's probability of its target, ``softmax(z)[target] = exp(z[target] - lse)`` of the
    (soft-capped) logits ``z`` from the loss kernel's log-sum-exp, in float32; 0 where the row is
    ignored (Liger-Kernel's ``use_token_scaling`` factor; it carries no gradient)."""
    kept = target != ignore_index
    index = target.masked_fill(~kept, 0).clamp(0, logits.shape[1] - 1)
    z = logits.detach().gather(1, index[:, None])[:, 0].float()
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    return torch.where(kept, torch.exp(z - lse), 0.0)


def _weight_product(dlogits: torch.Tensor, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``dlogits.T @ h`` ([V, H]: a chunk's term of the weight's gradient) in the weight's memory
    order: for a weight passed transposed (a [H, V] head as ``head.T``) the product is made as
    ``(h.T @ dlogits).T``, so that its gradient reaches the parameter without a transposing copy."""
    if weight.stride(0) == 1 and weight.stride(1) != 1:  # column-major: the transpose of a row-major [H, V]
        return (h.T @ dlogits).T
    return dlogits.T @ h


def _add_weight_product(dw: torch.Tensor, dlogits: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``dw += dlogits.T @ h`` in place, written in ``dw``'s memory order (:func:`_weight_product`'s):
    for a column-major ``dw`` through its transpose, row-major, so that the product lands in it
    without a transposing copy (which functionalization makes under torch.compile)."""
    if dw.stride(0) == 1 and dw.stride(1) != 1:
        dw.T.addmm_(h.T, dlogits)
    else:
        dw.addmm_(dlogits.T, h)
    return dw


def _logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``h @ weight.T + bias``: a chunk's logits, one cuBLAS matmul."""
    return h @ weight.T if bias is None else torch.addmm(bias, h, weight.T)


class _LinearCrossEntropy(torch.autograd.Function):
    """The autograd of :func:`linear_cross_entropy`: gradients made in the forward, scaled in the
    backward by the loss's (0-dim) gradient. With ``stats`` it also returns each row's log-sum-exp
    (the loss kernel's) and largest logit's index (``cross_entropy_stats``; empty without),
    which carry no gradient."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, softcap: float,
                lse_square_scale: float, reduction: Reduction, chunk_rows: int | None,
                ce_weight: torch.Tensor | None, stats: bool, accum_dtype: torch.dtype | None, token_scaling: bool
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        n, hidden = h.shape
        vocab = weight.shape[0]
        want_h, want_w = h.requires_grad, weight.requires_grad
        want_b = bias is not None and bias.requires_grad
        h, weight, bias = _in_autocast_dtype(h, weight, bias)
        grads = want_h or want_w or want_b
        loss_rows = torch.empty(n, device=h.device, dtype=torch.float32)
        lse = torch.empty(n if stats else 0, device=h.device, dtype=torch.float32)
        predicted = torch.empty(n if stats else 0, device=h.device, dtype=torch.int64)
        scales = torch.empty(n if token_scaling else 0, device=h.device, dtype=torch.float32)
        accumulate = accum_dtype if accum_dtype is not None and accum_dtype != weight.dtype else None
        dh = torch.empty_like(h) if want_h else None
        dw: torch.Tensor | None = None  # the first chunk's product, then each later one added in
        db = torch.zeros(vocab, device=h.device, dtype=torch.float32) if want_b else None
        kept = target != ignore_index
        if ce_weight is None:
            valid = kept.sum()
        else:  # torch's mean with class weights divides by the weights of the rows' targets
            valid = (ce_weight.float()[target.masked_fill(~kept, 0)] * kept).sum()
        # d(loss)/d(loss_row): 1 for a sum, 1 / (rows not ignored, or their weights) for a mean
        row_grad = (torch.ones((), device=h.device) if reduction == "sum" else 1.0 / valid.float()).expand(n)
        apart = split_z_loss(ce_weight, lse_square_scale, reduction)  # the z-loss from the kernel's lse, apart
        z_sum, kept_rows = torch.zeros((), device=h.device), kept.sum()
        step = chunk_rows or default_chunk_rows(n, hidden, vocab, h.element_size())
        no_dlse = torch.zeros(0 if apart or not grads else min(step, n), device=h.device)  # lse's gradient: none
        inplace = not torch.compiler.is_compiling()  # the op under torch.compile always makes a new tensor
        for start in range(0, n, step):
            rows = slice(start, min(start + step, n))
            h_c, t_c = h[rows], target[rows]
            logits = _logits(h_c, weight, bias)
            options = (ignore_index, label_smoothing, softcap, 0.0 if apart else lse_square_scale)
            loss_c, lse_c = _FORWARD.cross_entropy(logits, t_c, *options, ce_weight)
            grad_c = row_grad[rows]
            if token_scaling:  # each row's loss (and so its gradient) times its target's probability, detached
                p_c = scales[rows] = _target_probability(logits, t_c, lse_c, ignore_index, softcap)
                loss_c, grad_c = loss_c * p_c, grad_c * p_c
            loss_rows[rows] = loss_c
            if stats:
                lse[rows] = lse_c
                predicted[rows] = _STATS.cross_entropy_stats(logits.detach(), softcap)[1]
            z_factor = scales[rows] if token_scaling else 1.0
            if apart:
                z_sum += (torch.where(t_c != ignore_index, lse_square_scale * lse_c * lse_c, 0.0) * z_factor).sum()
            if not grads:
                continue
            # the z-loss apart: d(scale * lse^2 / rows) / d(lse) = 2 * scale * lse / rows, which the backward
            # turns into the logits'
            dlse = torch.where(t_c != ignore_index, 2 * lse_square_scale * lse_c, 0.0) * z_factor / kept_rows \
                if apart else no_dlse[:len(lse_c)]
            dlogits = _BACKWARD.cross_entropy_backward(grad_c, dlse, logits, t_c, lse_c, *options, ce_weight,
                                                       inplace=inplace)
            if dh is not None:
                torch.mm(dlogits, weight, out=dh[rows])
            if want_w and accumulate is not None:  # each chunk's product added up in accum_dtype
                product = _weight_product(dlogits, h_c, weight).to(accumulate)
                dw = product if dw is None else dw.add_(product)
            elif want_w:  # accumulated in the weight's dtype, as Liger-Kernel does by default
                dw = _weight_product(dlogits, h_c, weight) if dw is None else _add_weight_product(dw, dlogits, h_c)
            if db is not None:
                db += dlogits.sum(0, dtype=torch.float32)
        if want_w and dw is None:  # no rows: no chunk
            dw = torch.zeros_like(weight)
        elif dw is not None and dw.dtype != weight.dtype:
            dw = dw.to(weight.dtype)
        ctx.save_for_backward(dh, dw, None if db is None else db.to(bias.dtype))  # type: ignore[union-attr]
        ctx.scaled = False
        ctx.mark_non_differentiable(lse, predicted, scales)
        loss = loss_rows.sum()
        loss = loss / valid + z_sum / kept_rows if reduction == "mean" else loss
        return loss, lse, predicted, scales

    @staticmethod
    def backward(ctx: Any, dloss: torch.Tensor, *unused: Any) -> tuple[torch.Tensor | None, ...]:
        if ctx.scaled:
            raise RuntimeError("linear_cross_entropy: a second backward through one call (retain_graph=True): "
                               "its gradients were made in the forward and scaled in place by the first")
        ctx.scaled = True
        dh, dw, db = ctx.saved_tensors
        if torch.compiler.is_compiling():  # out of place: Inductor fuses the scale into what reads the
            # gradient next (a bf16 head's cast back to its float32 parameter: one kernel), where an
            # in-place scale of a saved tensor is a mutation functionalization has to replay
            dh, dw, db = (None if g is None else g * dloss.to(g.dtype) for g in (dh, dw, db))
        else:  # in place: a scaled copy of dweight would double the peak memory
            for grad in (dh, dw, db):
                if grad is not None:
                    grad.mul_(dloss.to(grad.dtype))
        return dh, dw, None, db, None, None, None, None, None, None, None, None, None, None


class _LinearCrossEntropyRows(torch.autograd.Function):
    """The autograd of :func:`linear_cross_entropy` with ``reduction="none"``: the forward keeps
    each row's log-sum-exp, not the gradients (they depend on each row's gradient, which only the
    backward has), and the backward makes each chunk's logits again, then their gradient, ``dh``
    rows and ``dweight`` terms, as the forward of the other reductions does."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, softcap: float,
                lse_square_scale: float, chunk_rows: int | None, ce_weight: torch.Tensor | None,
                accum_dtype: torch.dtype | None, argmax: bool, token_scaling: bool
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        h, weight, bias = _in_autocast_dtype(h, weight, bias)
        n = h.shape[0]
        step = chunk_rows or default_chunk_rows(n, h.shape[1], weight.shape[0], h.element_size())
        options = (ignore_index, label_smoothing, softcap, lse_square_scale)
        loss = torch.empty(n, device=h.device, dtype=torch.float32)
        lse = torch.empty(n, device=h.device, dtype=torch.float32)
        predicted = torch.empty(n if argmax else 0, device=h.device, dtype=torch.int64)
        scales = torch.empty(n if token_scaling else 0, device=h.device, dtype=torch.float32)
        for start in range(0, n, step):
            rows = slice(start, min(start + step, n))
            logits = _logits(h[rows], weight, bias)
            loss[rows], lse[rows] = _FORWARD.cross_entropy(logits, target[rows], *options, ce_weight)
            if token_scaling:  # each row's loss times its target's probability, detached
                scales[rows] = _target_probability(logits, target[rows], lse[rows], options[0], options[2])
                loss[rows] *= scales[rows]
            if argmax:
                predicted[rows] = _STATS.cross_entropy_stats(logits, softcap)[1]
        ctx.save_for_backward(h, weight, target, bias, ce_weight, lse, scales)
        ctx.options, ctx.step, ctx.accum_dtype = options, step, accum_dtype
        ctx.mark_non_differentiable(lse, predicted, scales)
        return loss, lse, predicted, scales

    @staticmethod
    def backward(ctx: Any, dloss: torch.Tensor, *unused: Any) -> tuple[torch.Tensor | None, ...]:
        h, weight, target, bias, ce_weight, lse, scales = ctx.saved_tensors
        want_h, want_w, want_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[3]
        accumulate = ctx.accum_dtype if ctx.accum_dtype not in (None, weight.dtype) else weight.dtype
        dh = torch.empty_like(h) if want_h else None
        dw = torch.zeros_like(weight, dtype=accumulate) if want_w else None  # in the weight's memory order
        db = torch.zeros(weight.shape[0], device=h.device, dtype=torch.float32) if want_b else None
        dloss = dloss.float().contiguous()
        if scales.numel():  # token scaling: the loss of a row is its cross-entropy times a constant
            dloss = dloss * scales
        no_dlse = torch.zeros_like(lse)  # the log-sum-exp is not an output of linear_cross_entropy
        for start in range(0, h.shape[0], ctx.step):
            rows = slice(start, min(start + ctx.step, h.shape[0]))
            dlogits = _BACKWARD.cross_entropy_backward(dloss[rows], no_dlse[rows], _logits(h[rows], weight, bias),
                                                       target[rows], lse[rows], *ctx.options, ce_weight, inplace=True)
            if dh is not None:
                dh[rows] = dlogits @ weight
            if dw is not None:
                dw += _weight_product(dlogits, h[rows], weight).to(dw.dtype)
            if db is not None:
                db += dlogits.sum(0, dtype=torch.float32)
        dw = None if dw is None else dw.to(weight.dtype)
        db = None if db is None else db.to(bias.dtype)
        return dh, dw, None, db, None, None, None, None, None, None, None, None, None


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         bias: torch.Tensor | None = None, *, ignore_index: int = -100,
                         label_smoothing: float = 0.0, softcap: float = 0.0, lse_square_scale: float = 0.0,
                         reduction: Reduction = "mean", chunk_rows: int | None = None,
                         ce_weight: torch.Tensor | None = None, accum_dtype: torch.dtype | None = None,
                         return_z_loss: bool = False, return_token_accuracy: bool = False,
                         return_predicted_tokens: bool = False, use_token_scaling: bool = False
                         ) -> torch.Tensor | CrossEntropyOutput:
    """``F.cross_entropy(h @ weight.T + bias, target, ignore_index=..., label_smoothing=...,
    reduction=...)`` without the [N, V] logits: a 0-dim float32 loss, differentiable in ``h``,
    ``weight`` and ``bias``.

    Shapes and dtypes: ``h`` [N, H] (or [..., H] with ``target`` [...], taken as rows) and
    ``weight`` [V, H] (``nn.Linear``'s layout, a language model's ``lm_head.weight``) of one float
    dtype (f32, bf16 or f16); ``bias`` [V] of that dtype or None; ``target`` int64 [N], where
    ``ignore_index`` marks rows that count for nothing (the mean divides by the rows not ignored,
    as torch's does: NaN when every row is ignored).
    ``label_smoothing`` in [0, 0.5]; ``softcap`` (Gemma 2's ``softcap * tanh(logits / softcap)``,
    off at 0) and ``lse_square_scale`` (PaLM's z-loss, ``scale * logsumexp(logits)^2`` added to
    each row's loss, off at 0) as ``generated/cross_entropy.py`` has them. The logits are h's
    dtype, as ``h @ weight.T`` gives them, and the loss is computed from them in float32.
    ``reduction`` is ``"mean"``, ``"sum"`` or ``"none"`` (each row's loss, float32 [N]: its gradients
    depend on each row's gradient, so the backward makes each chunk's logits again, one more matmul
    per chunk). ``ce_weight`` [V] (any float dtype; Liger-Kernel's
    name for ``F.cross_entropy``'s ``weight``) weighs each class: a row's loss is scaled by its
    target's weight (and the smoothing term by each class's), and the mean divides by the weights
    of the targets not ignored, as torch's does; the z-loss is not weighted, and its mean is over
    the rows not ignored (PaLM's and Liger-Kernel's).

    ``chunk_rows`` rows at a time (default :func:`default_chunk_rows`: a chunk's logits at most half
    the size of ``weight``, or 256 MiB) hold their logits; ``dh`` and ``dweight`` (each the size of
    its input) are made in the forward when the input requires grad, ``dweight`` accumulated over
    chunks in the weight's dtype, or in ``accum_dtype`` where given (``torch.float32`` for a bf16
    weight: each chunk's product rounded once, their sum not; one float32 [V, H] more). Peak memory
    beyond the inputs is therefore about ``h`` + ``weight`` + one chunk's logits, against ``N x V``
    logits (and their float32 copy and gradient) unfused.

    ``return_z_loss``, ``return_token_accuracy`` and ``return_predicted_tokens`` (Liger-Kernel's
    options) give a :class:`~tilegen.nn.cross_entropy.CrossEntropyOutput` in place of the loss
    alone: the z-loss from the loss kernel's log-sum-exp, the others from ``cross_entropy_stats``
    (one more read of each chunk's logits, only when asked for).

    ``use_token_scaling`` (Liger-Kernel's option) multiplies each row's loss (its z-loss too) by the
    probability the row's (soft-capped) logits give its target, ``softmax(z)[target]``, taken as a
    constant (detached: the gradient of a row is its cross-entropy's times that probability); an
    ignored row's factor is 0. The probability comes from the loss kernel's log-sum-exp and the
    target's logit (no further read of the logits), in float32; the returned z-loss is scaled alike.

    A target outside [0, V) that is not ``ignore_index`` makes the loss NaN (and the gradients);
    with ``TILEGEN_CHECK_INDICES=1`` in the environment the call raises IndexError instead
    (:func:`~tilegen.nn.cross_entropy.check_targets`: a host sync, for debugging).

    Raises TypeError or ValueError naming the argument on a wrong type, rank, size or dtype.
    """
    if isinstance(h, torch.Tensor) and isinstance(target, torch.Tensor) and h.dim() > 2:
        if h.shape[:-1] != target.shape:
            raise ValueError(f"linear_cross_entropy: h's leading dimensions {tuple(h.shape[:-1])} are not "
                             f"target's shape {tuple(target.shape)}")
        h, target = h.reshape(-1, h.shape[-1]), target.reshape(-1)  # [B, S, H] tokens as [B * S, H] rows
    _check(h, weight, target, bias, reduction, ce_weight)
    check_targets(target, weight.shape[0], ignore_index, "linear_cross_entropy")
    stats = return_z_loss or return_token_accuracy or return_predicted_tokens
    if reduction == "none":
        loss, lse, predicted, scales = _LinearCrossEntropyRows.apply(  # type: ignore[no-untyped-call]
            h, weight, target, bias, ignore_index, label_smoothing, softcap, lse_square_scale, chunk_rows,
            ce_weight, accum_dtype, return_token_accuracy or return_predicted_tokens, use_token_scaling)
    else:
        loss, lse, predicted, scales = _LinearCrossEntropy.apply(  # type: ignore[no-untyped-call]
            h, weight, target, bias, ignore_index, label_smoothing, softcap, lse_square_scale, reduction, chunk_rows,
            ce_weight, stats, accum_dtype, use_token_scaling)
    if not stats:
        return loss  # type: ignore[no-any-return]
    z, accuracy, tokens = statistics(lse, predicted, target, ignore_index=ignore_index,
                                     lse_square_scale=lse_square_scale, reduction=reduction, z_loss=return_z_loss,
                                     token_accuracy=return_token_accuracy, predicted_tokens=return_predicted_tokens,
                                     token_scale=scales if use_token_scaling else None)
    return CrossEntropyOutput(loss, z, accuracy, tokens)
