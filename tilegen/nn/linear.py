"""Matmuls over weights kept in another dtype than the activations (float32 master weights
training in bf16): the weight cast for the forward, its gradient written in the weight's dtype.

``matmul(x, b)`` is ``x @ b.to(x.dtype)`` and ``linear(x, weight)`` is
``F.linear(x, weight.to(x.dtype))``, through ``matmul_fast`` and its two backward kernels. Written
in torch, the cast's backward is a second kernel (autograd's ``ToCopyBackward``) reading the
gradient in the activations' dtype and writing it in float32; here ``matmul_fast_backward_db``
writes its float32 accumulator as the float32 gradient (its output dtype ``G``, the caller's), so
that kernel and the rounding to bf16 before it are gone. The gradient comes out in the weight's
memory order (a column-major ``b``, the transpose ``linear`` passes, gets a column-major
gradient), so autograd accumulates it without a copy. Mixed-precision training with float32
master weights is Micikevicius et al., "Mixed Precision Training", 2018; Megatron-LM writes the
weight gradient into a float32 buffer from its GEMM the same way (``gradient_accumulation_fusion``).
"""

from __future__ import annotations

from typing import Any

import torch

from tilegen.nn import module

# loaded on import, not in the forward, which torch.compile traces
_FORWARD, _DA, _DB = module("matmul_fast"), module("matmul_fast_backward_da"), module("matmul_fast_backward_db")


def _check(x: Any, b: Any, function: str, name: str) -> None:
    """Raise TypeError or ValueError naming the argument whose type, rank or size is wrong."""
    for label, value in (("x", x), (name, b)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{function}: {label} must be a tensor, got {type(value).__name__}")
    if x.dim() < 1 or b.dim() != 2:
        raise ValueError(f"{function}: x must be [..., K] and {name} 2-D; got x of shape {tuple(x.shape)}, "
                         f"{name} {tuple(b.shape)}")
    if not x.is_floating_point() or not b.is_floating_point():
        raise TypeError(f"{function}: x and {name} must be float tensors, got {x.dtype} and {b.dtype}")


class _Matmul(torch.autograd.Function):
    """``x @ b.to(x.dtype)`` for x [M, K] and b [K, N]; db in b's dtype and memory order."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        cast = b.to(x.dtype)
        ctx.save_for_backward(x, cast)
        ctx.b_dtype, ctx.b_column_major = b.dtype, b.stride(0) == 1 and b.stride(1) != 1
        out: torch.Tensor = _FORWARD.matmul_fast(x, cast)
        return out

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, cast = ctx.saved_tensors
        dx = _DA.matmul_fast_backward_da(dy, cast) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.needs_input_grad[1]:
            # the kernel writes T or float32; another dtype (f16 weights of a bf16 model) autograd casts
            wanted = ctx.b_dtype if ctx.b_dtype in (x.dtype, torch.float32) else None
            if ctx.b_column_major:  # db.T = dy^T @ x: row-major, so db is b's column-major
                db = _DB.matmul_fast_backward_db(dy, x, G=wanted).T
            else:
                db = _DB.matmul_fast_backward_db(x, dy, G=wanted)
        return dx, db


def matmul(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x @ b.to(x.dtype)``: x [..., K] (f16, bf16 or f32), b [K, N] of any float dtype (float32
    master weights) and layout; returns [..., N] in x's dtype, f32 accumulation (matmul_fast).

    Differentiable in both: dx in x's dtype; db = x^T @ dy written by the kernel in b's dtype
    where b is float32 or x's dtype (else in x's, cast by autograd) and in b's memory order.
    It computes in x's dtype whether or not torch.autocast is on (cast x to compute in another).
    Raises TypeError or ValueError naming x or b (and the kernels' errors for their sizes)."""
    _check(x, b, "matmul", "b")
    if x.shape[-1] != b.shape[0]:
        raise ValueError(f"matmul: dimension 0 of b is {b.shape[0]}, but the last dimension of x (K) is {x.shape[-1]}")
    return _apply(x, b)


def _apply(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:class:`_Matmul` over x's rows, checked by the caller."""
    out: torch.Tensor = _Matmul.apply(x.reshape(-1, x.shape[-1]), b)  # type: ignore[no-untyped-call]
    return out.view(*x.shape[:-1], b.shape[1])


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight.to(x.dtype))`` (no bias): x [..., K], weight [N, K] (torch's layout);
    returns [..., N] in x's dtype. :func:`matmul` of ``weight.T``: the weight's gradient comes out
    [N, K] row-major in its dtype (float32 master weights: no cast kernel after the matmul).
    Raises TypeError or ValueError naming x or weight."""
    _check(x, weight, "linear", "weight")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: dimension 1 of weight is {weight.shape[1]}, but the last dimension of x (K) is "
                         f"{x.shape[-1]}")
    return _apply(x, weight.T)
