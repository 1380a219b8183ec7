"""The autograd formula of a spec with a backward (``backward softmax_backward``).

The generated module registers, with ``torch.library.register_autograd`` on its custom op
(``tilegen.runtime.register_backward``), a ``setup_context`` that saves what the backward spec
reads of the forward call (its inputs named as the forward's tensors and scalars: tensors through
``ctx.save_for_backward``, scalars as attributes of ``ctx``) and a ``backward`` that calls the
backward spec's custom op (its module, generated beside this one, imported on first use; the op,
not the launcher, so that torch.compile traces the backward through the op's fake implementation)
with those and the outputs' gradients (``d<out>``) (its launcher where the call was eager, through
``_<Kernel>Autograd``, a ``torch.autograd.Function`` over the launchers that skips the custom ops'
dispatch, about 75 us a call on the H100), and returns a gradient per input of the op: the
backward's ``d<in>`` where it has one, else None (scalars, keywords, inputs without a gradient).
A backward kernel that may write a gradient over a forward input (``in place of``) does so on an
eager call made with ``inplace_backward=True`` (:func:`backward_overwrites`).
Where the backward reads the gradient of one output alone (layer norm's ``dy``, not those of its
statistics ``mu`` and ``rstd``), the eager Function has autograd make no zeros for the others
(``ctx.set_materialize_grads(False)``: two allocations and two fills a step saved) and returns no
gradients where that one output took no part in what was differentiated (:func:`unread_grads`).
The rules that make the two specs fit are :mod:`tilegen.check.backward`'s.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.lower.passes import safe_path
from tilegen.lower.plan import AutogradPlan


def autograd_class(kernel: str) -> str:
    """The name of the generated ``torch.autograd.Function`` of ``kernel`` (``_SoftmaxAutograd``)."""
    return "_" + "".join(part.capitalize() for part in kernel.split("_")) + "Autograd"


def autograd_apply(kernel: str) -> str:
    """The name of the module's ``apply`` of ``kernel``'s Function (``_softmax_apply``: see
    ``tilegen.runtime.autograd_apply``), which the launcher calls for a call autograd records."""
    return f"_{kernel}_apply"


def backward_overwrites(spec: m.Spec, backward: tuple[m.Spec, ...]) -> tuple[str, ...]:
    """The inputs of ``spec`` that a kernel of its ``backward`` may write a gradient over (``out
    dlogits: f32[M, V] in place of logits``, ``logits`` an input of both): with the forward
    launcher's ``inplace_backward=True``, the eager backward passes ``inplace=True``."""
    inputs = {t.name.id for t in spec.inputs if not t.is_scalar}
    return tuple(dict.fromkeys(t.in_place_of.id for b in backward for t in b.in_place
                               if t.in_place_of is not None and t.in_place_of.id in inputs))


def unread_grads(spec: m.Spec, backward: tuple[m.Spec, ...]) -> tuple[str, ...]:
    """The gradients of ``spec``'s outputs (``d<out>``) that no kernel of its ``backward`` reads, where
    those kernels read exactly one other output's (else ``()``: autograd's zeros stand in for an
    unused output's gradient that a backward reads)."""
    grads = [f"d{t.name.id}" for t in spec.outputs]
    read = {t.name.id for b in backward for t in b.inputs}
    unread = tuple(g for g in grads if g not in read)
    return unread if len(grads) - len(unread) == 1 else ()


def lower_autograd(spec: m.Spec, backward: tuple[m.Spec, ...], keywords: tuple[str, ...]) -> AutogradPlan:
    """The :class:`AutogradPlan` of ``spec`` whose checked backward specs are ``backward`` (run in
    order, each on what the forward saved, the outputs' gradients and the earlier ones' outputs);
    ``keywords`` are the forward launcher's keyword arguments (also inputs of its op). Where the
    backward may write over inputs (:func:`backward_overwrites`), the Function also takes
    ``inplace_backward`` (last; the op does not): ``ctx.inplace`` is it, where every such input is
    one autograd computed (``_rt.overwritable``), and the eager backward passes it as ``inplace``."""
    forward = {t.name.id: t for t in spec.tensors}
    over = backward_overwrites(spec, backward)
    needs = list(dict.fromkeys(t.name.id for b in backward for t in b.inputs if t.name.id in forward))
    saved = tuple(n for n in needs if not forward[n].is_scalar)
    scalars = tuple(n for n in needs if forward[n].is_scalar)
    inputs = [t.name.id for t in spec.inputs]
    outputs = [t.name.id for t in spec.outputs]
    setup = [f"{n} = inputs[{i}]" for i, n in enumerate(inputs) if n in needs]
    setup += [(f"{n} = output[{i}]" if len(outputs) > 1 else f"{n} = output")
              for i, n in enumerate(outputs) if n in needs]
    if saved:
        setup.append(f"ctx.save_for_backward({', '.join(saved)})")
    setup += [f"ctx.{n} = {n}" for n in scalars]
    if over:  # the Function's last input, which the op's inputs lack
        n = len(inputs) + len(keywords)
        safe = " and ".join(f"_rt.overwritable(inputs[{inputs.index(x)}])" for x in over)
        setup.append(f"ctx.inplace = len(inputs) > {n} and bool(inputs[{n}]) and {safe}")
    body = []
    if saved:
        body.append(f"{', '.join(saved)}, = ctx.saved_tensors")
    body += [f"{n} = ctx.{n}" for n in scalars]
    given = set()
    for kernel in backward:
        args = ", ".join(t.name.id for t in kernel.inputs)
        body.append(f'module = _rt.sibling(__file__, "{kernel.name.id}")')
        call = f"(module.{kernel.name.id} if eager else module.op)({args})"
        if any(t.in_place_of is not None and t.in_place_of.id in over for t in kernel.in_place):
            call = f"module.{kernel.name.id}({args}, inplace=ctx.inplace) if eager else module.op({args})"
        results = [t.name.id for t in kernel.outputs]
        body.append(f"{', '.join(results)} = {call}")
        given.update(results)
    grads = [f"d{n}" if f"d{n}" in given else "None" for n in inputs]  # keyword-only inputs get none
    body.append(f"return {grads[0]}" if len(grads) == 1 else f"return {', '.join(grads)}")
    return AutogradPlan(tuple(b.name.id for b in backward), tuple(safe_path(b.path) for b in backward), tuple(setup),
                        tuple(f"d{n}" for n in outputs), tuple(body), saved + scalars, autograd_class(spec.name.id),
                        tuple(inputs), keywords + (("inplace_backward",) if over else ()), unread_grads(spec, backward))
