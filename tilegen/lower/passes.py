"""Spec-to-spec rewrites: each a function from a checked :class:`~tilegen.model.Spec` to another
(plain data, spans kept), listed here in the order :func:`tilegen.lower.lower` runs them.

:data:`PASSES` holds the rewrites of one spec into one spec, each with its stage:

1. ``printable_path`` (stage ``module``, :func:`printable_path`): the display path as generated
   comments and docstrings may hold it. First, because every later part writes the path (kernel
   comments, launcher and reference docstrings, error messages of specializations).
2. ``one_element`` (stage ``module``, :func:`one_element`): a 0-dim output as a tensor of one
   element, stored at index 0, which every later part lowers as it lowers any tensor (only the
   launcher's allocation and the reference's shape read ``zero_dim``).
3. ``derived_refs`` (stage ``module``, :func:`derived_refs`): an offset's arithmetic that is a
   derived extent (``C / G``) as the size naming it (``C_over_G``), in the kernel and the
   reference alike.
4. ``without_detach`` (stage ``kernels``, :func:`without_detach`): each ``detach(e)`` as ``e``.
   After the ``module`` stage and the specialization: the torch reference and the autograd
   formula are lowered from the spec with its ``detach`` calls (torch's keep autograd of it
   right); before the other kernels' specs are derived, which recognise ``x - max(x)``.
5. ``exp2`` (stage ``kernel``, :func:`tilegen.lower.exp2.fold_exp2`): exponentials of logits in
   base 2, ``log2(e)`` folded into the scalar factor they are scaled by. Last, and on the spec of
   each kernel only (:func:`kernel_spec`, just before :func:`tilegen.lower.kernel.lower_kernel`):
   the launcher and the torch reference are lowered from the spec without it (the reference is
   the spec as written), and the kernel variants below are derived from the spec without it
   (:func:`tilegen.row_loops.loop_rows` recognises ``sum(exp(x - max(x)))`` as an online softmax,
   which the rewrite would hide). It assumes a spec whose dtype variables are bound.

Three steps of :func:`tilegen.lower.lower` map a spec to other specs and are not passes, each
because it makes specs of more than one kernel, or more than one spec:

* :func:`tilegen.model.specialize`, between the ``module`` and ``kernels`` stages: one spec per
  binding of the dtype variables, each lowered (all must lower to one text);
* after the ``kernels`` stage, the module's other kernels, each then through the ``kernel`` stage:
  :func:`access_variant`, the same spec through plain pointers (``_<kernel>_pointers``, where TMA
  descriptors or block pointers cannot serve) or through descriptors (``_<kernel>_descriptors``,
  a block-pointer spec on a Triton without block pointers); :func:`tilegen.row_loops.loop_rows`, a
  ``whole`` axis as loops over its tiles (``_<kernel>_loops``, rows too long for one tile), which
  also returns what the launcher routes on; :func:`tilegen.lower.stages.stage_specs`, a spec that
  reduces across programs split into launches (a kernel per stage and the spec's own).

The derivation of backwards (:mod:`tilegen.grad`) specializes too, to ask about dtypes; its text
writes the dtype variables, so it rewrites no spec that is lowered.

Analyses that rewrite nothing stay with the lowering that uses them (:mod:`tilegen.lower.scaled`,
:mod:`tilegen.lower.ranges`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from tilegen import model as m
from tilegen.lower.exp2 import fold_exp2
from tilegen.lower.names import pieced_block
from tilegen.spec_text import safe_path


def printable_path(spec: m.Spec) -> m.Spec:
    """``spec`` with its display path made :func:`safe_path`."""
    return dataclasses.replace(spec, path=safe_path(spec.path))


@dataclass(frozen=True)
class Pass:
    """One spec rewrite: its ``name``, the function, and its ``stage``: ``module`` (the spec every
    part of the module is lowered from), ``kernels`` (the spec the kernels, their launchers and the
    other kernels' specs are lowered from; not the reference) or ``kernel`` (each kernel's spec,
    just before kernel lowering)."""

    name: str
    rewrite: Callable[[m.Spec], m.Spec]
    stage: Literal["module", "kernels", "kernel"]


def one_element(spec: m.Spec) -> m.Spec:
    """``spec`` with each 0-dim tensor (``loss: f32[]``) a tensor of one element (``[1]``): an
    output's store ``loss[0] = ...``, an input's reads (its name, ``dloss``) ``dloss[0]``: the
    kernel's view of it. The tensor keeps ``zero_dim``, so the launcher makes and checks it, and
    the reference takes and returns it, with torch's shape ``()``."""
    outputs = {t.name.id for t in spec.outputs if t.zero_dim}
    inputs = {t.name.id for t in spec.inputs if t.zero_dim}
    if not outputs and not inputs:
        return spec
    tensors = tuple(
        dataclasses.replace(t, dims=(m.Number("1", t.span),)) if t.zero_dim else t for t in spec.tensors
    )

    def read(e: m.Expr) -> m.Expr | None:  # a 0-dim input read by its name: its one element
        if isinstance(e, m.Ref) and e.name.id in inputs:
            return m.Load(e.name, (m.Number("0", e.span),), e.span)
        return None

    def stmt(s: m.Stmt) -> m.Stmt:
        if isinstance(s, m.Store) and s.tensor.id in outputs:
            s = dataclasses.replace(s, index=(m.Number("0", s.span),))
        return m.map_values(s, lambda e: m.map_expr(e, read))

    return dataclasses.replace(spec, tensors=tensors, body=m.map_body(spec.body, stmt))


def without_detach(spec: m.Spec) -> m.Spec:
    """``spec`` with each ``detach(e)`` as ``e``: ``detach`` changes no value, only what a gradient
    flows through (:mod:`tilegen.grad`), so the kernels are lowered from this and see the
    expressions they recognise (``x - max(x)``, :mod:`tilegen.row_loops`); the torch reference is
    lowered from the spec as written, whose ``torch.detach`` keeps autograd of it right."""

    def inside(e: m.Expr) -> m.Expr | None:
        return m.map_expr(e.args[0], inside) if m.is_detach(e) else None

    def stmt(s: m.Stmt) -> m.Stmt:
        return m.map_values(s, lambda e: m.map_expr(e, inside))

    if not any(m.is_detach(e) for s in m.statements(spec.body) for v in m.values(s) for e in m.subexpressions(v)):
        return spec
    return dataclasses.replace(spec, body=m.map_body(spec.body, stmt))


def derived_refs(spec: m.Spec) -> m.Spec:
    """``spec`` with each offset index's arithmetic that is a derived extent (``C / G`` in
    ``x[b, g * (C / G) + c]`` where an axis is over ``C / G``) the size that names it
    (``C_over_G``), which the launcher computes once and passes, as it does the other sizes."""
    names = {m.expr_key(extent): name for name, extent in spec.derived}
    if not names:
        return spec

    def size(e: m.Expr) -> m.Expr | None:  # arithmetic that is a derived extent: the size naming it
        if isinstance(e, m.BinOp) and m.expr_key(e) in names:
            return m.Ref(m.Name(names[m.expr_key(e)], e.span), e.span)
        return None

    def named(e: m.Expr) -> m.Expr:
        return m.map_expr(e, size)

    def index(item: m.Index) -> m.Index:
        # an offset item whose whole arithmetic is a derived extent becomes a Ref to its size
        return cast(m.Index, named(item)) if m.is_offset(item) else dataclasses.replace(item, index=tuple(
            index(i) for i in item.index)) if isinstance(item, m.Load) else item

    def load(e: m.Expr) -> m.Expr | None:  # the offsets of a load's (and its gathers') index
        return cast(m.Expr, index(e)) if isinstance(e, m.Load) else None

    def stmt(s: m.Stmt) -> m.Stmt:
        if isinstance(s, m.Store):
            s = dataclasses.replace(s, index=tuple(index(i) for i in s.index))
        return m.map_values(s, lambda e: m.map_expr(e, load))

    return dataclasses.replace(spec, body=m.map_body(spec.body, stmt))


#: The spec rewrites, in the order they run (see the module docstring for why each is where it is).
PASSES: tuple[Pass, ...] = (
    # first: every later part writes the path (comments, docstrings, errors)
    Pass("printable_path", printable_path, "module"),
    # before any lowering: every part then lowers a 0-dim tensor as any other
    Pass("one_element", one_element, "module"),
    # before any lowering: the kernel and the reference alike read the size, not its arithmetic
    Pass("derived_refs", derived_refs, "module"),
    # after the reference's spec is taken, before the kernels' specs are derived from this one
    Pass("without_detach", without_detach, "kernels"),
    # last, on each kernel's own spec: the launcher, reference and variants need exp as written
    Pass("exp2", fold_exp2, "kernel"),
)


def _run(spec: m.Spec, stage: str) -> m.Spec:
    for rewrite in PASSES:
        if rewrite.stage == stage:
            spec = rewrite.rewrite(spec)
    return spec


def module_spec(spec: m.Spec) -> m.Spec:
    """A checked spec after the ``module`` passes: what the kernel, launcher and reference of the
    module are lowered from."""
    return _run(spec, "module")


def kernels_spec(spec: m.Spec) -> m.Spec:
    """A specialized module spec after the ``kernels`` passes: what the kernels, their launchers
    and the module's other kernels' specs are lowered from (the reference is lowered from the spec
    before them)."""
    return _run(spec, "kernels")


def kernel_spec(spec: m.Spec) -> m.Spec:
    """A kernel's spec (the module's, or a variant's) after the ``kernel`` passes: what
    :func:`tilegen.lower.kernel.lower_kernel` takes. Its dtype variables must be bound."""
    return _run(spec, "kernel")


def access_variant(spec: m.Spec, access: str | None, variant: str) -> m.Spec:
    """``spec`` as the module's kernel ``_<kernel>_<variant>``, its tiles moving through ``access``
    (``"descriptor"``; None: plain pointers). A spec whose rows' block may be a sum of two powers of
    two keeps, for an access other than descriptors, only its configs whose block is a power of
    two (only descriptors hold two row pieces: :func:`tilegen.lower.pieces.pieces_setup`)."""
    name = dataclasses.replace(spec.name, id=f"_{spec.name.id}_{variant}")
    access_name = None
    if access is not None:
        assert spec.access is not None, "an access variant of a spec with an 'access' line"
        access_name = dataclasses.replace(spec.access, id=access)
    other = dataclasses.replace(spec, access=access_name, name=name)
    block = pieced_block(spec)
    if block is not None and access != "descriptor":  # configs of two row pieces need descriptors: dropped
        other = dataclasses.replace(other, tune=_power_of_two_configs(spec, block))
    return other


def _power_of_two_configs(spec: m.Spec, block: str) -> m.Tune:
    """``spec``'s tune without the configs that set ``block`` to a value that is not a power of
    two: the pointer kernel's tiles are powers of two (the checker keeps the default config one,
    so the interpreter's config, ``_CONFIGS[default]``, serves both kernels). Each config kept is
    also in ``_CONFIGS``, where ``_config_index`` finds it by its keywords."""
    default = next(p.default for p in spec.params if p.name.id == block)
    tune = spec.tune
    assert tune is not None, "the checker refuses a pieced block without tune configs"

    def kept(config: m.Config) -> bool:
        number = config.get(block) or default
        assert number is not None, f"a config without '{block}' in a spec without its default"
        value = int(number.text)
        return not value & (value - 1)

    return dataclasses.replace(tune, configs=tuple(c for c in tune.configs if kept(c)))
