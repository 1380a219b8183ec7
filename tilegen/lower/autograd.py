"""The autograd formula of a spec with a backward (``backward softmax_backward``), as data.

The generated module declares it in one call of the runtime's ``autograd`` (``tilegen.runtime``),
which registers it with ``torch.library.register_autograd`` on its custom op and returns the apply
of a ``torch.autograd.Function`` over the launchers (``_softmax_apply``), which the launcher calls
for an eager call autograd records (it skips the custom ops' dispatch, about 75 us a call on the
H100). What it declares: the spec's inputs and outputs; what the forward call saves for the
backward spec (its inputs named as the forward's tensors and scalars: tensors through
``ctx.save_for_backward``, scalars as attributes of ``ctx``); the backward's kernels in order, each
with the names of its arguments (those saved values, the outputs' gradients ``d<out>``, an earlier
kernel's results) and of its results. Each runs through its custom op (its module, generated
beside this one, imported on first use; the op, not the launcher, so that torch.compile traces the
backward through the op's fake implementation), or its launcher where the call was eager; the
backward returns a gradient per input of the op: the backward's ``d<in>`` where it has one, else
None (scalars, keywords, inputs without a gradient).
A backward kernel that may write a gradient over a forward input (``in place of``) does so on an
eager call made with ``inplace_backward=True`` (:func:`backward_overwrites`).
Where the backward reads the gradient of one output alone (layer norm's ``dy``, not those of its
statistics ``mu`` and ``rstd``), the eager Function has autograd make no zeros for the others
(``ctx.set_materialize_grads(False)``: two allocations and two fills a step saved) and returns no
gradients where that one output took no part in what was differentiated (:func:`unread_grads`).
The rules that make the two specs fit are :mod:`tilegen.check.backward`'s.
"""

from __future__ import annotations

from collections.abc import Iterable

from tilegen import model as m
from tilegen.lower.names import tuple_text
from tilegen.lower.plan import AutogradPlan


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


def shape_only(backward: tuple[m.Spec, ...], saved: Iterable[str]) -> tuple[str, ...]:
    """The tensors of ``saved`` that no kernel of ``backward`` loads from (:func:`m.tensors_read`)
    nor writes over: those kernels take them for their shape, dtype and device alone (embedding's
    ``weight``, which sizes ``dweight``). The forward saves a stand-in of one element instead
    (``tilegen.runtime.stand_in``), so the tensor itself is not kept alive until the backward."""
    named = {n for b in backward for n in m.tensors_read(b.body)}
    named |= {t.in_place_of.id for b in backward for t in b.in_place if t.in_place_of is not None}
    return tuple(n for n in saved if n not in named)


def lower_autograd(spec: m.Spec, backward: tuple[m.Spec, ...], keywords: tuple[str, ...],
                   deterministic: tuple[m.Spec, ...] = ()) -> AutogradPlan:
    """The :class:`AutogradPlan` of ``spec`` whose checked backward specs are ``backward`` (run in
    order, each on what the forward saved, the outputs' gradients and the earlier ones' outputs);
    ``keywords`` are the forward launcher's keyword arguments (also inputs of its op). Where the
    backward may write over inputs (:func:`backward_overwrites`), the Function also takes
    ``inplace_backward`` (last; the op does not), and the eager backward passes it as ``inplace``
    to the kernels that write over them. ``deterministic``: the specs run instead where torch's
    deterministic algorithms are on (``backward deterministic``; the forward saves what either needs)."""
    forward = {t.name.id: t for t in spec.tensors}
    over = backward_overwrites(spec, backward)
    both = (*backward, *deterministic)
    needs = list(dict.fromkeys(t.name.id for b in both for t in b.inputs if t.name.id in forward))

    def names(items: Iterable[str]) -> str:
        return tuple_text(f'"{n}"' for n in items)

    def steps(specs: tuple[m.Spec, ...]) -> str:
        return tuple_text(
            tuple_text([f'"{b.name.id}"', names(t.name.id for t in b.inputs), names(t.name.id for t in b.outputs),
                        str(any(t.in_place_of is not None and t.in_place_of.id in over for t in b.in_place))])
            for b in specs)

    name = spec.name.id
    arguments = [", ".join(["op", name, "__file__", names(t.name.id for t in spec.inputs),
                            names(t.name.id for t in spec.outputs)]), f"backward={steps(backward)}"]
    if deterministic:
        arguments.append(f"deterministic={steps(deterministic)}")
    optional = {
        "saved": [n for n in needs if not forward[n].is_scalar],
        "shapes": shape_only(both, (n for n in needs if not forward[n].is_scalar)),
        "scalars": [n for n in needs if forward[n].is_scalar],
        "keywords": keywords,
        "over": over,
        "unread": unread_grads(spec, both),
        "optional": [t.name.id for t in spec.inputs if t.optional],
    }
    arguments += [f"{key}={names(value)}" for key, value in optional.items() if value]
    return AutogradPlan(autograd_apply(name), tuple(arguments))
