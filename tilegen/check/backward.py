"""A kernel's backward (``backward softmax_backward``): the rules that tie the two specs.

The backward is a spec of its own (``softmax_backward.tile`` beside the forward's file), built
and tested like any other; the forward's generated module registers it with torch.autograd
(:mod:`tilegen.lower.autograd`). Its signature says what it needs, by name:

* an input named as a tensor or scalar of the forward (``y``, ``x``, ``eps``) is that value, saved
  by the forward call (same dtype and shape);
* an input ``d<out>`` for a forward output ``out`` is the gradient of ``out`` (same dtype and
  shape as ``out``, as torch's gradients are);
* each output ``d<in>`` is the gradient of the forward's tensor input ``in`` (same dtype and shape);
  inputs without one get no gradient (an index tensor, a target).
"""

from __future__ import annotations

from collections.abc import Callable

from tilegen import model as m
from tilegen.errors import Collector, SpecError

#: What finds a backward spec: its kernel name -> (source, display path), or None where no spec
#: of that name lies beside the forward's.
Finder = Callable[[str], "tuple[str, str] | None"]


def _shape(tensor: m.Tensor) -> tuple[str, ...]:
    return tuple(d.id if isinstance(d, m.Name) else d.text for d in tensor.dims)


def _typed(tensor: m.Tensor) -> str:
    """``f32[M, N]`` (a scalar: ``f32``)."""
    return tensor.dtype.id + (f"[{', '.join(_shape(tensor))}]" if not tensor.is_scalar else "")


def check_backward(spec: m.Spec, find: Finder | None) -> m.Spec | None:
    """The checked backward spec that ``spec`` names (None where it names none). Raises
    :class:`~tilegen.errors.SpecError` at ``spec``'s ``backward`` line where the backward spec
    cannot be found or its signature does not fit the forward's (the rules above), and the
    backward's own first error where it is not a valid spec (its own check reports them all)."""
    from tilegen.check import check
    from tilegen.parser import parse

    if spec.backward is None:
        return None
    errors = Collector()
    name = spec.backward
    found = find(name.id) if find is not None else None
    if name.id == spec.name.id:
        errors.error(f"'{name.id}' is this kernel; the backward is another spec ('{name.id}_backward')", name.span)
    elif found is None:
        errors.error(f"backward '{name.id}': no spec '{name.id}.tile' beside this one", name.span)
    errors.raise_if_any(spec.path, spec.source)
    try:
        backward = check(parse(*found))
    except SpecError as error:  # its own build reports them at its own lines
        first = error.diagnostics[0].message if error.diagnostics else ""
        errors.error(f"backward '{name.id}': {found[1]} is not a valid spec ({first}); run "
                     f"'tilegen check {found[1]}'", name.span)
        errors.raise_if_any(spec.path, spec.source)
    if backward.name.id != name.id:
        errors.error(f"backward '{name.id}': {backward.path} is kernel '{backward.name.id}'", name.span)
    forward = {t.name.id: t for t in spec.tensors}
    outputs = {f"d{t.name.id}": t for t in spec.outputs}
    inputs = {f"d{t.name.id}": t for t in spec.inputs if not t.is_scalar}
    for tensor in backward.inputs:
        key = tensor.name.id
        like = forward.get(key) or outputs.get(key)
        if like is None:
            names = ", ".join([*forward, *outputs])
            errors.error(f"backward '{name.id}' takes '{key}', which is neither a value of this kernel nor the "
                         f"gradient of one of its outputs ({names})", name.span)
        elif _typed(like) != _typed(tensor):
            what = f"the gradient of '{like.name.id}'" if key in outputs and key not in forward else f"'{key}'"
            errors.error(f"backward '{name.id}' takes '{key}' as {_typed(tensor)}, but {what} is {_typed(like)} here",
                         name.span)
    for tensor in backward.outputs:
        key = tensor.name.id
        like = inputs.get(key)
        if like is None:
            names = ", ".join(inputs) or "none: this kernel has no tensor input"
            errors.error(f"backward '{name.id}' returns '{key}', which is not the gradient of an input of this "
                         f"kernel ({names})", name.span)
        elif _typed(like) != _typed(tensor):
            errors.error(f"backward '{name.id}' returns '{key}' as {_typed(tensor)}, but '{like.name.id}' is "
                         f"{_typed(like)}", name.span)
    if not any(t.name.id in outputs and t.name.id not in forward for t in backward.inputs):
        errors.error(f"backward '{name.id}' takes no output's gradient ({', '.join(outputs)})", name.span)
    errors.raise_if_any(spec.path, spec.source)
    return backward


__all__ = ["Finder", "check_backward"]
