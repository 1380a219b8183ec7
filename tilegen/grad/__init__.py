"""The backward of a spec, derived from the forward by reverse-mode differentiation.

``tilegen show --grad specs/rms_norm.tile`` prints it; the build uses it for a kernel whose spec
names no ``backward``. The result is ``.tile`` text, parsed and checked like a hand-written
backward (:mod:`tilegen.check.backward`'s rules: it takes ``d<out>`` for each float output and the
forward's inputs it reads, and returns ``d<in>`` for each float tensor input that reaches an
output), on the forward's grid, blocks and tune configs.

What it does, for a body of assignments and stores over the grid's axes (the row kernels:
elementwise math, reductions over ``whole`` axes and across programs, scans, ``where``):

* **recompute, save the inputs.** The backward reads the forward's inputs (which autograd keeps)
  and recomputes every value it needs, a row's statistics included; nothing else is saved, so a
  forward + backward holds no more than the inputs and the gradients. A value a rule reads (the
  ``y`` of ``exp``'s ``dy * y``, the other factor of a product) that the forward computes inside an
  expression gets a name of its own (``rsqrt1``), so the backward says it once. A value the
  forward stores exactly (layer_norm's ``mu[r] = row_mean``) is read back from that output
  (:meth:`~tilegen.grad.reverse.Deriver.saved_values`), and so is a softmax or log-softmax stored as an output
  (:meth:`~tilegen.grad.adjoints.Adjoints.normalized`).
* **one rule per operation**, each in its operation's one home: the functions' ``grad`` templates
  in :data:`tilegen.functions.FUNCTIONS` (``exp``: ``{g} * {y}``; ``max`` over an axis: the
  gradient split among the maxima, as torch's ``amax``), the operators' here (``+ - * /``). A
  reduction's gradient is its operand's broadcast (``sum``; ``mean`` divides by the extent); a
  cast passes the gradient through, in float32.
* **the adjoints** of a value used more than once add up (``dxf = ... + ...``); a load's adjoint
  is its tensor's gradient, stored at the load's index, summed over the axes the index lacks: a
  ``whole`` axis inside the program, a grid axis across programs (``dweight[c] = sum(..., dim=r)``,
  the reduction across programs of the language: deterministic). An adjoint a reduction over a
  grid axis needs summed first is a value of its own (``dmean = sum(sum(..., dim=h), dim=b)``).
* **scatters the store says**: beside its read at the grid's axes, a tensor read at a constant
  index or through a gather adds that read's adjoint where the axes meet it (``where(c == 0 & ...,
  ...)``); one read at a shifted index (``x[r, c + 1]``) adds its adjoint moved back along the axis.

A matmul's accumulate-dot loop derives two products (:mod:`tilegen.grad.matmul`,
:func:`derive_backwards`). Where neither can, :class:`NoBackward` says why, at the construct: another
loop or an accumulator, a value assigned twice, a tensor read only through a gather or at two
offsets, an operation without a rule (``prod``, ``cumprod``).

The package, in the order a derivation runs: :mod:`~tilegen.grad.declarations` (what both
derivations share), :mod:`~tilegen.grad.forward` (refusals, the forward hoisted),
:mod:`~tilegen.grad.adjoints` (the adjoints of expressions), :mod:`~tilegen.grad.gradients` (the
stores of the inputs' gradients), :mod:`~tilegen.grad.reverse` (the backward's text), and
:mod:`~tilegen.grad.matmul` (a matmul's two products).
"""

from __future__ import annotations

import dataclasses

from tilegen import model as m
from tilegen.grad.declarations import NoBackward, backward_name
from tilegen.grad.matmul import derive_dot_backwards, is_dot_body
from tilegen.grad.reverse import derive_backward


def derive_backwards(spec: m.Spec, kernel: str | None = None) -> tuple[tuple[str, str], ...]:
    """The backward kernels of the checked ``spec`` as (kernel name, ``.tile`` text), in the order
    they run: one (:func:`derive_backward`), or for a matmul's accumulate-dot loop two, ``da`` and
    ``db`` (:mod:`tilegen.grad.matmul`); ``kernel`` names the forward (default its own name). Raises
    :class:`NoBackward` as they do."""
    if is_dot_body(spec):
        named = spec if kernel is None else dataclasses.replace(spec, name=m.Name(kernel, spec.name.span))
        return derive_dot_backwards(named)
    name = backward_name(kernel or spec.name.id)
    return ((name, derive_backward(spec, name)),)


__all__ = ["NoBackward", "backward_name", "derive_backward", "derive_backwards"]
