"""Cross-entropy as a training loop calls it: reduced, with the statistics it logs.

``cross_entropy(logits, target)`` is ``F.cross_entropy(logits.float(), target)`` through tilegen's
``cross_entropy`` kernel (the loss of each row, with its backward), reduced as ``reduction`` asks,
and, where asked, the numbers Liger-Kernel's ``LigerCrossEntropyLoss`` returns beside the loss:
the z-loss (from the log-sum-exp the loss kernel returns beside each row's loss), the token
accuracy and the predicted tokens (from ``cross_entropy_stats``'s largest logit of each row: one
more read of the logits, made only when one of them is asked for). :func:`statistics` gives them
from those rows for :mod:`tilegen.nn.linear_cross_entropy` too.
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

import torch

from tilegen.nn import module

Reduction = Literal["none", "mean", "sum"]

# loaded on import, not in a call, which torch.compile traces
_LOSS, _STATS = module("cross_entropy"), module("cross_entropy_stats")


class CrossEntropyOutput(NamedTuple):
    """The loss and the statistics asked for (None where not): Liger-Kernel's ``CrossEntropyOutput``.

    ``loss`` float32, reduced as asked; ``z_loss`` float32, ``lse_square_scale * lse^2`` of the rows
    not ignored, reduced alike (the mean divides by the rows not ignored), part of ``loss`` already
    and given for logging; ``token_accuracy`` float32, the fraction of the rows not ignored whose
    largest logit is the target's (per row, 1.0 or 0.0, with ``reduction="none"``);
    ``predicted_tokens`` int64 [N], each row's largest logit's index (torch.argmax's), -1 where the
    row is ignored. The statistics carry no gradient."""

    loss: torch.Tensor
    z_loss: torch.Tensor | None = None
    token_accuracy: torch.Tensor | None = None
    predicted_tokens: torch.Tensor | None = None


#: The environment variable that turns on :func:`check_targets` (any value but "" and "0").
CHECK_INDICES = "TILEGEN_CHECK_INDICES"


def check_targets(target: torch.Tensor, classes: int, ignore_index: int, caller: str) -> None:
    """Where the environment sets ``TILEGEN_CHECK_INDICES`` (to anything but "" or "0"), raise
    IndexError naming the first target outside [0, ``classes``) that is not ``ignore_index`` (as
    torch's CPU cross-entropy does). The check reads the targets on the host, a device sync, so it
    is off by default: then the loss kernel gives such a row the loss NaN (and NaN gradients),
    which every reduction keeps. Skipped under torch.compile."""
    if torch.compiler.is_compiling() or os.environ.get(CHECK_INDICES, "") in ("", "0"):
        return
    outside = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bool(outside.any()):
        bad = int(target[outside][0])
        raise IndexError(f"{caller}: target {bad} is out of bounds: the classes are 0 to {classes - 1} "
                         f"(ignore_index {ignore_index})")


def split_z_loss(weight: torch.Tensor | None, lse_square_scale: float, reduction: str) -> bool:
    """Whether the z-loss is added apart from the cross-entropy kernel's rows: for the mean of
    class-weighted rows, which divides the cross-entropy by the targets' weights and the z-loss by
    the rows (PaLM's and Liger-Kernel's mean). Apart, it is ``lse_square_scale * lse^2`` of the
    kernel's ``lse`` output, whose gradient the kernel's backward adds (no other read of the logits)."""
    return weight is not None and lse_square_scale != 0 and reduction == "mean"


def statistics(lse: torch.Tensor, predicted: torch.Tensor, target: torch.Tensor, *, ignore_index: int,
               lse_square_scale: float, reduction: Reduction, z_loss: bool, token_accuracy: bool,
               predicted_tokens: bool, token_scale: torch.Tensor | None = None
               ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The z-loss, token accuracy and predicted tokens (each None unless asked for) of rows with
    log-sum-exp ``lse`` (float32 [N]) and largest logit at ``predicted`` (int64 [N]), as
    :class:`CrossEntropyOutput` defines them (Liger-Kernel's ``cross_entropy_forward``); each row's
    z-loss times ``token_scale`` (float32 [N]) where given (token scaling)."""
    kept = target != ignore_index
    rows = kept.sum()
    z = accuracy = tokens = None
    if z_loss:
        z = torch.where(kept, lse_square_scale * lse * lse, 0.0)
        z = z if token_scale is None else z * token_scale
        z = z if reduction == "none" else z.sum() / rows if reduction == "mean" else z.sum()
    if token_accuracy:
        correct = ((predicted == target) & kept).float()
        accuracy = correct if reduction == "none" else correct.sum() / rows
    if predicted_tokens:
        tokens = torch.where(kept, predicted, -1)
    return z, accuracy, tokens


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, *,
                  ignore_index: int = -100, label_smoothing: float = 0.0, softcap: float = 0.0,
                  lse_square_scale: float = 0.0, reduction: Reduction = "mean", return_z_loss: bool = False,
                  return_token_accuracy: bool = False, return_predicted_tokens: bool = False
                  ) -> torch.Tensor | CrossEntropyOutput:
    """``F.cross_entropy(logits.float(), target, weight, ignore_index=..., label_smoothing=...,
    reduction=...)`` with Gemma 2's ``softcap`` and PaLM's z-loss (``lse_square_scale``), as
    ``generated/cross_entropy.py`` defines them; differentiable in ``logits``.

    Shapes and dtypes: ``logits`` [N, V] (or [..., V] with ``target`` [...]) in f32, bf16 or f16;
    ``target`` int64 [N]; ``weight`` [V] (any float dtype) or None. The loss is float32: the rows'
    losses with ``reduction="none"``, their sum, or their mean over the rows not ignored (with
    ``weight``, torch's: divided by the weights of the targets not ignored, the z-loss still by
    the rows, as Liger-Kernel's; NaN when every row is ignored). Any of ``return_z_loss``,
    ``return_token_accuracy`` and ``return_predicted_tokens`` gives a :class:`CrossEntropyOutput`
    in place of the loss alone (Liger-Kernel's ``LigerCrossEntropyLoss`` options).

    A target outside [0, V) that is not ``ignore_index`` makes its row's loss NaN (and so the
    reduced loss; its gradients NaN); with ``TILEGEN_CHECK_INDICES=1`` in the environment the call
    raises IndexError instead (:func:`check_targets`: a host sync, for debugging).

    Raises TypeError or ValueError naming the tensor and dimension on bad input (the kernel's
    checks), and ValueError for an unknown ``reduction``.
    """
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"cross_entropy: reduction must be 'none', 'mean' or 'sum', not {reduction!r}")
    if isinstance(logits, torch.Tensor) and isinstance(target, torch.Tensor) and logits.dim() > 2:
        logits, target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)  # [B, S, V] as rows
    if isinstance(logits, torch.Tensor) and isinstance(target, torch.Tensor):
        check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    apart = split_z_loss(weight, lse_square_scale, reduction)
    rows: torch.Tensor
    lse: torch.Tensor
    rows, lse = _LOSS.cross_entropy(logits, target, ignore_index, label_smoothing, softcap,
                                    0.0 if apart else lse_square_scale, weight)
    if reduction == "none":
        loss = rows
    elif reduction == "sum":
        loss = rows.sum()
    else:  # torch's mean over the rows not ignored, or over their targets' weights
        kept = target != ignore_index
        weights = kept.sum() if weight is None else (weight.float()[target.masked_fill(~kept, 0)] * kept).sum()
        loss = rows.sum() / weights
        if apart:  # the z-loss over the rows; differentiable: the kernel's lse has a gradient (the softmax)
            loss = loss + torch.where(kept, lse_square_scale * lse * lse, 0.0).sum() / kept.sum()
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    predicted = _STATS.cross_entropy_stats(logits.detach(), softcap)[1] if return_token_accuracy or \
        return_predicted_tokens else torch.empty(0, dtype=torch.int64, device=lse.device)
    z, accuracy, tokens = statistics(lse.detach(), predicted, target, ignore_index=ignore_index,
                                     lse_square_scale=lse_square_scale, reduction=reduction, z_loss=return_z_loss,
                                     token_accuracy=return_token_accuracy, predicted_tokens=return_predicted_tokens)
    return CrossEntropyOutput(loss, z, accuracy, tokens)
