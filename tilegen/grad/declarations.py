"""What both derivations (:mod:`tilegen.grad.reverse`, :mod:`tilegen.grad.matmul`) share: the
:class:`NoBackward` refusal, the backward's name and the declarations it takes from the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tilegen import model as m
from tilegen.dtypes import is_float

#: Declarations the backward takes from the forward as written, by a line's first word (with the
#: indented ``config`` lines under ``tune``).
_COPIED = ("dtype", "block", "grid", "swizzle", "tune", "access", "split")


class NoBackward(Exception):
    """The forward has no derived backward: ``reason`` says why, at ``span`` (a construct of the
    forward's spec, or None for the spec as a whole)."""

    def __init__(self, reason: str, span: m.Span | None = None):
        super().__init__(reason)
        self.reason = reason
        self.span = span


def backward_name(kernel: str) -> str:
    """The name of ``kernel``'s derived backward (``rms_norm_backward``)."""
    return f"{kernel}_backward"


def float_tensor(tensor: m.Tensor) -> bool:
    """True for a tensor of a float dtype (a dtype variable: every dtype it may stand for)."""
    if isinstance(tensor.dtype, m.BoundDtype):
        return all(is_float(o) for o in tensor.dtype.options)
    return is_float(tensor.dtype.id)


def declared(tensor: m.Tensor, default: bool = True) -> str:
    """``T[M, N]`` as the spec declares it (a scalar's range and, with ``default``, an input's
    default kept: ``i32 in [4, 4]``, ``f32 = 0.0``, an optional tensor's ``T[N] = 1``; a gradient
    output declared like its input takes no default)."""
    dims = ", ".join(d.id if isinstance(d, m.Name) else d.text for d in tensor.dims)
    shape = f"[{dims}]" if tensor.dims or tensor.zero_dim else ""
    sample = f" in [{tensor.sample[0].text}, {tensor.sample[1].text}]" if tensor.sample and tensor.is_scalar else ""
    kept = f" = {tensor.initial.text}" if default and tensor.role == "in" and tensor.initial is not None else ""
    return f"{m.as_written(tensor.dtype)}{shape}{sample}{kept}"


def declarations(spec: m.Spec, tensors: list[str], configs: Sequence[str] = (),
                 keep: Callable[[str], bool] = lambda line: True,
                 rewrite: Callable[[str, str], str] = lambda word, line: line) -> list[str]:
    """A backward's declaration lines (each ending in a newline): the forward's dtype variables,
    then ``tensors`` (the backward's ``in``/``out`` lines), then the forward's blocks, grid, swizzle,
    tune with the configs ``keep`` keeps and then ``configs``, access and split tail, each line as
    written or as ``rewrite(first word, line)`` makes it."""
    head: list[str] = []
    rest: list[str] = []
    inside = False
    for line in m.source_lines(spec.source):
        words = line.split()
        if not words:
            continue
        if inside and line.startswith("    "):
            rest += [line + "\n"] if keep(line) else []
            continue
        if inside:
            rest += configs
        inside = False
        if words[0] in _COPIED and line.startswith("  ") and not line.startswith("   "):
            (head if words[0] == "dtype" else rest).append(rewrite(words[0], line) + "\n")
            inside = words[0] == "tune"
    if inside:
        rest += configs
    return head + list(tensors) + rest
