"""A kernel's backward (``backward softmax_backward``): the rules that tie the two specs.

The backward is a spec of its own (``softmax_backward.tile`` beside the forward's file), built
and tested like any other; the forward's generated module registers it with torch.autograd
(:mod:`tilegen.lower.autograd`). Its signature says what it needs, by name:

* an input named as a tensor or scalar of the forward (``y``, ``x``, ``eps``) is that value, saved
  by the forward call (same dtype and shape; a backward may name the sizes otherwise, each of its
  names standing for one of the forward's throughout, and its dtype variables too, each standing
  for one of the forward's dtypes throughout and listing all of its options, :class:`_Sizes`);
* an input ``d<out>`` for a forward output ``out`` is the gradient of ``out`` (same dtype and
  shape as ``out``, as torch's gradients are);
* each output ``d<in>`` is the gradient of the forward's tensor input ``in`` (same dtype and shape,
  or float32 for a float input: torch.autograd casts it, as for a gradient summed by atomic adds);
  inputs without one get no gradient (an index tensor, a target).

A backward of several kernels (``backward matmul_fast_backward_da, matmul_fast_backward_db``) runs
them in order; an output of one that is not a gradient (``lse``, a row's statistics) is an input
of a later one, by name and with the same dtype and shape, and must be read by one. Each gradient
comes from one kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tilegen import model as m
from tilegen.check import check  # (tilegen.check does not import this module: it checks one spec)
from tilegen.dtypes import is_float
from tilegen.errors import Collector, SpecError
from tilegen.parser import parse

#: What finds a backward spec: its kernel name -> (source, display path), or None where no spec
#: of that name lies beside the forward's.
Finder = Callable[[str], "tuple[str, str] | None"]


def _shape(tensor: m.Tensor) -> tuple[str, ...]:
    return tuple(d.id if isinstance(d, m.Name) else d.text for d in tensor.dims)


def _widened(like: m.Tensor, gradient: m.Tensor, forward_spec: m.Spec, sizes: _Sizes) -> bool:
    """A float32 gradient of a float input of the same shape (``dweight: f32[V, C]`` for
    ``weight: T[V, C]``, summed by atomic adds in f32): torch.autograd casts a gradient to its
    input's dtype."""
    floats = all(is_float(d) for d in forward_spec.dtype_options(like.dtype))
    return floats and sizes.fit(like, gradient, dtype="f32")


def _typed(tensor: m.Tensor) -> str:
    """``f32[M, N]`` (a scalar: ``f32``)."""
    return tensor.dtype.id + (f"[{', '.join(_shape(tensor))}]" if not tensor.is_scalar else "")


class _Sizes:
    """One backward kernel's size names and dtype variables as the forward's. A spec names its own
    sizes, so a backward may call a dimension otherwise (``conv2d_backward_dbias``'s ``dy: T[N, O,
    H_out, W_out]`` serves ``conv2d_depthwise``'s ``y: T[N, C, H_out, W_out]``), as long as each of
    its names stands for one of the forward's, the same at every place, and no two for one. A
    dtype variable of the backward (``dtype S in f16, bf16, f32``) likewise stands for one of the
    forward's dtypes (its ``T``, or ``f32``), the same at every place, and lists every option that
    one has; two of the backward's may stand for one of the forward's."""

    def __init__(self, forward_spec: m.Spec, backward_spec: m.Spec) -> None:
        self.forward: dict[str, str] = {}  # a backward's size -> the forward's
        self.backward: dict[str, str] = {}  # and back
        self.dtypes: dict[str, str] = {}  # a backward's dtype variable -> the forward's dtype
        self.specs = forward_spec, backward_spec
        self.variables = {v.name.id for v in backward_spec.dtype_vars}

    def _dtype_fits(self, dtypes: dict[str, str], ours: m.Name, theirs: str, like: m.Tensor) -> bool:
        """Whether the backward's dtype ``ours`` stands for the forward's ``theirs`` (``like``'s, or
        the float32 of a widened gradient), binding a dtype variable of the backward in ``dtypes``
        on first use."""
        if ours.id not in self.variables:
            return ours.id == theirs
        forward_spec, backward_spec = self.specs
        wanted = forward_spec.dtype_options(like.dtype) if theirs == like.dtype.id else (theirs,)
        return dtypes.setdefault(ours.id, theirs) == theirs and set(wanted) <= set(backward_spec.dtype_options(ours))

    def why(self, like: m.Tensor, tensor: m.Tensor) -> str:
        """Where ``tensor``'s dtype is a variable of the backward that lists fewer dtypes than
        ``like``'s may be: `` ('S' lists f16, f32; 'T' may be f16, bf16, f32)``; else ``""``."""
        forward_spec, backward_spec = self.specs
        if tensor.dtype.id not in self.variables:
            return ""
        ours, theirs = backward_spec.dtype_options(tensor.dtype), forward_spec.dtype_options(like.dtype)
        if set(theirs) <= set(ours):
            return ""
        return f" ('{tensor.dtype.id}' lists {', '.join(ours)}; '{like.dtype.id}' may be {', '.join(theirs)})"

    def fit(self, like: m.Tensor, tensor: m.Tensor, dtype: str | None = None) -> bool:
        """Whether ``tensor`` (the backward's) has ``like``'s dtype (or ``dtype``) and shape, its
        sizes and dtype variables renamed consistently with the earlier tensors; the renaming grows
        where it does."""
        dtypes = dict(self.dtypes)
        if not self._dtype_fits(dtypes, tensor.dtype, dtype or like.dtype.id, like) \
                or len(like.dims) != len(tensor.dims) or like.is_scalar != tensor.is_scalar:
            return False
        forward, backward = dict(self.forward), dict(self.backward)
        for ours, theirs in zip(_shape(tensor), _shape(like), strict=True):
            literal = ours[0].isdigit() or theirs[0].isdigit()
            if (ours != theirs) if literal else (forward.setdefault(ours, theirs) != theirs
                                                 or backward.setdefault(theirs, ours) != ours):
                return False
        self.forward, self.backward, self.dtypes = forward, backward, dtypes
        return True


def check_backward(spec: m.Spec, find: Finder | None) -> tuple[m.Spec, ...]:
    """The checked backward specs that ``spec`` names, in the order they run (() where it names
    none). Raises :class:`~tilegen.errors.SpecError` at ``spec``'s ``backward`` line where a
    backward spec cannot be found or the signatures do not fit the forward's (the rules above),
    and a backward's own first error where it is not a valid spec (its own check reports them all)."""
    if not spec.backward:
        return ()
    errors = Collector()
    found: list[tuple[m.Name, m.Spec]] = []  # each backward's name and its checked spec
    named: set[str] = set()
    for name in spec.backward:
        if name.id == spec.name.id:
            errors.error(f"'{name.id}' is this kernel; the backward is another spec ('{name.id}_backward')",
                         name.span)
        elif name.id in named:
            errors.error(f"backward '{name.id}' is named twice", name.span)
        elif (backward := _load(spec, name, find, errors)) is not None:  # else an error is reported
            found.append((name, backward))
        named.add(name.id)
    errors.raise_if_any(spec.path, spec.source)
    forward = {t.name.id: t for t in spec.tensors}
    outputs = {f"d{t.name.id}": t for t in spec.outputs}
    inputs = {f"d{t.name.id}": t for t in spec.inputs if not t.is_scalar}
    made: dict[str, tuple[m.Tensor, m.Name]] = {}  # an earlier backward's output -> it, the kernel
    read: set[str] = set()
    for name, backward in found:
        sizes = _Sizes(spec, backward)
        for tensor in backward.inputs:
            key = tensor.name.id
            read.add(key)
            like = forward.get(key) or outputs.get(key) or made.get(key, (None,))[0]
            if like is None:
                names = ", ".join([*forward, *outputs, *made])
                earlier = ", an output of an earlier backward" if made else ""
                errors.error(f"backward '{name.id}' takes '{key}', which is neither a value of this kernel{earlier} "
                             f"nor the gradient of one of its outputs ({names})", name.span)
            # an earlier backward's output is in that backward's size names: the same names here
            elif not (sizes.fit(like, tensor) if key in forward or key in outputs else _typed(like) == _typed(tensor)):
                what = (f"the gradient of '{like.name.id}'" if key in outputs and key not in forward
                        else f"'{key}' of backward '{made[key][1].id}'" if key in made else f"'{key}'")
                errors.error(f"backward '{name.id}' takes '{key}' as {_typed(tensor)}, but {what} is "
                             f"{_typed(like)} here{'' if key in made else sizes.why(like, tensor)}", name.span)
        for tensor in backward.outputs:
            key = tensor.name.id
            like = inputs.get(key)
            if key in made:
                errors.error(f"backward '{name.id}' returns '{key}', which backward '{made[key][1].id}' "
                             f"returns too", name.span)
            elif like is None and (key in forward or key in outputs):
                errors.error(f"backward '{name.id}' returns '{key}', a name of this kernel's values; a gradient "
                             f"is named d<input> ({', '.join(inputs) or 'none: no tensor input'})", name.span)
            elif like is not None and not sizes.fit(like, tensor) and not _widened(like, tensor, spec, sizes):
                errors.error(f"backward '{name.id}' returns '{key}' as {_typed(tensor)}, but '{like.name.id}' is "
                             f"{_typed(like)}{sizes.why(like, tensor)}", name.span)
            made[key] = (tensor, name)
    for key, (_, name) in made.items():
        if key not in inputs and key not in read:
            names = ", ".join(inputs) or "none: this kernel has no tensor input"
            errors.error(f"backward '{name.id}' returns '{key}', which is not the gradient of an input of this "
                         f"kernel ({names})" + (" nor read by a later backward" if len(found) > 1 else ""),
                         name.span)
    if not any(key in outputs and key not in forward for key in read):
        errors.error(f"backward '{spec.backward[0].id}' takes no output's gradient ({', '.join(outputs)})",
                     spec.backward[0].span)
    errors.raise_if_any(spec.path, spec.source)
    return tuple(backward for _, backward in found)


def check_deterministic_backward(spec: m.Spec, find: Finder | None) -> tuple[m.Spec, ...]:
    """The checked specs of ``spec``'s ``backward deterministic`` line (() where it has none),
    each held to the rules above as a ``backward`` line's: the kernels autograd runs instead where
    torch's deterministic algorithms are on. Raises :class:`~tilegen.errors.SpecError` as
    :func:`check_backward` does, and at the line where there is no ``backward`` line beside it."""
    if not spec.deterministic_backward:
        return ()
    if not spec.backward:
        errors = Collector()
        errors.error("'backward deterministic' names what runs instead of a 'backward' line's kernels under "
                     "torch.use_deterministic_algorithms(True); write the 'backward' line too",
                     spec.deterministic_backward[0].span)
        errors.raise_if_any(spec.path, spec.source)
    return check_backward(dataclasses.replace(spec, backward=spec.deterministic_backward), find)


def _load(spec: m.Spec, name: m.Name, find: Finder | None, errors: Collector) -> m.Spec | None:
    """The checked spec of the backward ``name`` (None, with an error at its name, where it cannot be
    found, is invalid, or is another kernel)."""
    found = find(name.id) if find is not None else None
    if found is None:
        errors.error(f"backward '{name.id}': no spec '{name.id}.tile' beside this one", name.span)
        return None
    try:
        backward = check(parse(*found))
    except SpecError as error:  # its own build reports them at its own lines
        first = error.diagnostics[0].message if error.diagnostics else ""
        errors.error(f"backward '{name.id}': {found[1]} is not a valid spec ({first}); run "
                     f"'tilegen check {found[1]}'", name.span)
        return None
    if backward.name.id != name.id:
        errors.error(f"backward '{name.id}': {backward.path} is kernel '{backward.name.id}'", name.span)
    return backward


__all__ = ["Finder", "check_backward", "check_deterministic_backward"]
