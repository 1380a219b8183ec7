"""The looped kernel of a spec whose rows are longer than one tile: :func:`lower_rows` lowers the
rewrite of :mod:`tilegen.row_loops` (a ``whole`` axis as loops over tiles of it) as a second kernel
and launcher of the module (``_<kernel>_loops``), which the launcher returns through where the row
is longer than ``_WHOLE_LIMIT`` elements (:class:`~tilegen.lower.plan.RowsPlan`); the one-tile
kernel keeps the rows up to it, and its autotuner compiles and times only the configs whose tile
fits the threads' registers (``whole_fits`` of the runtime, tilegen/runtime.py,
:func:`whole_pruned`). The reference stays the spec as written: one tile, whole-tensor torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.kernel import lower_kernel
from tilegen.lower.launcher import LauncherRole, lower_launcher
from tilegen.lower.names import tuple_text
from tilegen.lower.passes import kernel_spec
from tilegen.lower.plan import Comment, FallbackPlan, ForLoop, IfBlock, KernelPlan, Line, Op, RowsPlan, WithBlock
from tilegen.row_loops import loop_rows, whole_limit

#: The name of the looped kernel's variant: ``_<kernel>_loops``, with its launcher.
VARIANT = "loops"


# ----------------------------------------------------------------------------- lowering


@dataclass(frozen=True)
class Rows:
    """What :func:`lower_rows` gives the module: the looped kernel and launcher, and what the
    launcher routes on."""

    fallback: FallbackPlan
    plan: RowsPlan


def lower_rows(spec: m.Spec, fast: bool = True) -> Rows | None:
    """The looped kernel and launcher of ``spec`` (``_<kernel>_loops``, see :func:`loop_rows`),
    None where the rewrite does not take the spec. A tuned looped kernel gets the runtime's
    ``whole_fits`` as its autotuner's ``early_config_prune`` (as :func:`whole_pruned` gives the
    one-tile kernel): no config whose tile would spill is compiled. ``fast=False`` where the
    spec's launcher is planned, so its fast path keeps the looped launch too: the looped launcher
    has none of its own (see :class:`LauncherRole`)."""
    looped = loop_rows(spec)
    if looped is None:
        return None
    name = f"_{spec.name.id}_{VARIANT}"
    other = dataclasses.replace(looped.spec, name=dataclasses.replace(spec.name, id=name))
    default = next(p.default for p in other.params if p.name.id == looped.block)
    # lower() loops a chunked whole axis (the spec's own block, maybe without a default) itself
    assert default is not None, f"lower_rows takes no spec with a chunked whole axis ({looped.block})"
    chunk = default.text
    rows = tuple_text(f'"{r}"' for r in looped.rows)
    loops = _dedupe_comments(lower_kernel(kernel_spec(other)))
    if loops.tune is not None:
        prune = f'_rt.whole_fits("{looped.block}", {rows})'
        loops = dataclasses.replace(loops, tune=dataclasses.replace(loops.tune, name="_LOOPS_CONFIGS", prune=prune))
    launcher = lower_launcher(other, loops, LauncherRole(variant=VARIANT, fast=fast))
    dim = looped.dim
    doc = (f"{spec.name.id}() where the rows are too long for one tile ({dim} > _WHOLE_LIMIT): the kernel of\n"
           f"{spec.path} with its whole axis in loops over tiles of {looped.block} (a keyword, default {chunk}).\n"
           + (f"Called by {spec.name.id}(), after its checks." if fast else
              f"{spec.name.id}() runs it through its plan, its fast path keeping the launch; "
              "this one has no fast path."))
    if spec.tune is not None:
        doc += f" Its tune configs are those of {spec.name.id}() with the fewest rows per program."
    launcher = dataclasses.replace(launcher, docstring=doc)
    keywords = [p.name.id for p in spec.params if p.name.id not in spec.tuned_params]
    keywords += [c.name.id for c in spec.choices]
    keywords += [v.name.id for v in spec.chosen_dtype_vars()]
    call = f"{name}({', '.join([*(t.name.id for t in spec.inputs), *(f'{k}={k}' for k in keywords)])})"
    traced: tuple[Op, ...] = ()
    if launcher.traced is not None:  # its launch after the outputs are made (the outer launcher made them)
        start = next(i for i, op in enumerate(launcher.traced)
                     if isinstance(op, IfBlock) and op.why == "nothing to compute: no launch") + 1
        traced = (Line(f"{looped.block} = {chunk}"), *launcher.traced[start:])
    limit, hard = whole_limit(spec, looped.rows)
    plan = RowsPlan(dim, limit, hard, call, traced, name)
    return Rows(FallbackPlan(loops, launcher), plan)


def whole_pruned(spec: m.Spec, kernel: KernelPlan) -> KernelPlan:
    """``kernel`` with the runtime's ``whole_fits`` as its autotuner's ``early_config_prune``
    where it is tuned and holds one ``whole`` axis as a tile (a row, whether or not the spec has a
    looped variant) and no ``dot``, so that no config whose tile would spill is compiled or timed;
    ``kernel`` unchanged otherwise."""
    whole = [a for a in spec.grid if a.bounds == "whole"]
    if kernel.tune is None or len(whole) != 1:
        return kernel
    if any(m.is_dot(p) for s in m.statements(spec.body) for v in m.values(s) for p in m.subexpressions(v)):
        return kernel  # a whole axis of a dot (attention's head dimension) is not a row: its configs stand
    block = dict(kernel.whole_blocks).get(whole[0].dim.id)
    if block is None:
        return kernel
    rows = tuple_text(f'"{a.block.id}"' for a in spec.grid if a is not whole[0] and a.block is not None)
    prune = f'_rt.whole_fits("{block}", {rows})'
    return dataclasses.replace(kernel, tune=dataclasses.replace(kernel.tune, prune=prune))


def _dedupe_comments(kernel: KernelPlan) -> KernelPlan:
    """The looped kernel without a comment that repeats the one before it in the same block
    (statements made from one spec line, such as the online max's updates, name it once)."""

    def clean(ops: tuple[Op, ...]) -> tuple[Op, ...]:
        out: list[Op] = []
        last = None
        for op in ops:
            if isinstance(op, Comment):
                if op.text == last:
                    continue
                last = op.text
            elif isinstance(op, ForLoop | WithBlock):
                op = dataclasses.replace(op, body=clean(op.body))
            elif isinstance(op, IfBlock):
                op = dataclasses.replace(op, body=clean(op.body), orelse=clean(op.orelse))
            out.append(op)
        return tuple(out)

    return dataclasses.replace(kernel, body=clean(kernel.body))
