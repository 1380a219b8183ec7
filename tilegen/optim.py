"""Optimizers whose update is one tilegen kernel a parameter: ``tilegen.optim.AdamW``.

torch's default AdamW on the GPU (``foreach``) runs its update as a chain of multi-tensor
kernels, each reading and writing whole tensors: about 80 bytes of memory traffic per float32
parameter a step. ``specs/adamw.tile`` reads the parameter, its gradient and the two moving
averages once and writes the three it updates once, 28 bytes, so a step whose optimizer moves
gigabytes (a model of billions of float32 parameters) spends a third of the time on it. The
update is torch's (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", 2019, as
``torch.optim.AdamW`` computes it), its state the same tensors under the same names, so a state
dict moves between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from tilegen.nn import kernel

#: The parameter dtypes ``specs/adamw.tile`` updates (its ``dtype T in f32, bf16, f16``).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its memory without gaps or overlaps, in some order of its
    dimensions (contiguous, channels-last, a transpose): then a 1-D view of that memory holds them."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda d: d[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _where(group: int, index: int, p: torch.Tensor) -> str:
    """How an error names parameter ``index`` of param group ``group``."""
    return f"parameter {index} of group {group} (shape {list(p.shape)})"


def _flat(tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], group: int,
          index: int) -> tuple[torch.Tensor, ...]:
    """``tensors`` (parameter ``index`` of group ``group``, its gradient, its two moving averages:
    one shape) as 1-D views of their memory, element i of each the same element of the parameter.

    Raises ValueError naming the parameter when their memory orders differ or one has gaps."""
    p, grad, exp_avg, exp_avg_sq = tensors
    if p.is_contiguous() and grad.is_contiguous() and exp_avg.is_contiguous() and exp_avg_sq.is_contiguous():
        return tensors if p.dim() == 1 else (p.view(-1), grad.view(-1), exp_avg.view(-1), exp_avg_sq.view(-1))
    strides = p.stride()
    if all(t.stride() == strides for t in tensors) and _dense(p):
        return tuple(t.as_strided((t.numel(),), (1,)) for t in tensors)
    layouts = ", ".join(f"{name} {t.stride()}" for name, t in zip(("param", "grad", "exp_avg", "exp_avg_sq"), tensors,
                                                                  strict=True))
    raise ValueError(f"tilegen.optim.AdamW: {_where(group, index, p)}: the parameter, its gradient and moving "
                     f"averages must share one dense memory order to be updated as one vector; strides: {layouts}")


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW``'s update (decoupled weight decay; no amsgrad, no maximize), each
    parameter's step one launch of ``specs/adamw.tile``'s kernel, in place.

    Arguments as torch's: ``params`` (tensors or param groups), ``lr`` (a float, or a scheduler's),
    ``betas``, ``eps``, ``weight_decay``. Parameters are float32, bf16 or f16 of any shape whose
    memory is dense (contiguous, channels-last, transposed); their gradients are dense tensors of
    the same dtype and memory order. The state per parameter is torch's: ``step`` (a float32 CPU
    scalar tensor), ``exp_avg`` and ``exp_avg_sq`` (zeros like the parameter, in its dtype, at its
    first step), so ``load_state_dict`` takes a ``torch.optim.AdamW``'s and the other way.

    The update computes in float32 and rounds each updated tensor once to the parameter's dtype,
    as torch's ``fused=True`` step does; for float32 parameters these are the values of torch's
    single-tensor step (``foreach=False``) to a few float32 units (torch rounds after each of its
    operations). The bias corrections ``1 - beta ** step`` are computed in float64 in the kernel,
    as torch computes them in Python floats.

    Raises ValueError at construction for a negative ``lr``, ``eps`` or ``weight_decay`` or a beta
    outside [0, 1) (torch's checks: this is its AdamW with another :meth:`step`); at :meth:`step`,
    TypeError naming a parameter (its group, index and shape) whose dtype is not float32, bf16 or
    f16, whose gradient's dtype differs or that is sparse, ValueError for a gradient in another
    memory order. Parameters are checked before any is updated.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    def _state(self, p: torch.Tensor, group: int, index: int) -> dict[str, Any]:
        """``p``'s state, made at its first step (torch's: a step count and two zero tensors like
        ``p``); raises TypeError for a parameter or gradient the kernel does not update."""
        grad = p.grad
        assert grad is not None
        if p.dtype not in DTYPES:
            raise TypeError(f"tilegen.optim.AdamW: {_where(group, index, p)} is {p.dtype}; the adamw kernel "
                            "updates float32, bf16 and f16 parameters (torch.optim.AdamW updates the others)")
        if grad.is_sparse or grad.dtype != p.dtype:
            kind = "sparse" if grad.is_sparse else str(grad.dtype)
            raise TypeError(f"tilegen.optim.AdamW: {_where(group, index, p)}: its gradient is {kind}; the adamw "
                            f"kernel takes a dense gradient of the parameter's dtype {p.dtype}")
        state: dict[str, Any] = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter with a gradient: one kernel launch each, on the
        parameter's device and current stream. ``closure`` (optional) recomputes the loss, which is
        returned, as torch's optimizers do."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        updates = []  # every parameter checked before any is updated: a refusal changes nothing
        for g, group in enumerate(self.param_groups):
            beta1, beta2 = group["betas"]
            hyper = (float(group["lr"]), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]))
            for i, p in enumerate(group["params"]):
                if p.grad is not None:
                    state = self._state(p, g, i)
                    updates.append((hyper, state, _flat((p, p.grad, state["exp_avg"], state["exp_avg_sq"]), g, i)))
        adamw = kernel("adamw")
        for hyper, state, tensors in updates:
            step = state["step"]
            step += 1
            adamw(*tensors, *hyper, step.item(), inplace=True)
        return loss
