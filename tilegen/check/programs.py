"""Rules of reductions across programs (:mod:`tilegen.across`): a top-level store whose value
reduces over grid axes. Reports to the :class:`~tilegen.check.state.CheckState` it is given;
records the reductions it accepts in ``state.across``, which
:func:`~tilegen.check.expressions.reduction_axes` reads (a reduction over a grid axis anywhere
else is refused there)."""

from __future__ import annotations

from tilegen import model as m
from tilegen.across import Across, across, chain, needed
from tilegen.check.expressions import dtype_of
from tilegen.check.state import CheckState, Scope


def check_across(state: CheckState, found: Across, scope: Scope) -> None:
    """``out[index] = f(sum(x, dim=r), ...)`` with ``r`` a grid axis: a plain grid of pointer
    tiles (the finish kernel reads each program's partial at its place in the grid), every chain
    over the same grid axes, none of which the store indexes, and outside the chains only
    numbers, scalar inputs and sizes (the finish kernel has nothing else)."""
    spec, store = state.spec, found.store
    for partial in found.partials:
        state.across.update(id(c) for c in chain(partial.call))
    first = found.partials[0]
    what = f"'{store.tensor.id}' reduces across programs (over {', '.join(first.axes)})"
    plain = [
        (spec.flat, "a flat grid"),
        (spec.persistent and spec.flat, "a flat persistent grid"),
        (spec.swizzle is not None, "a swizzle"),
        (bool(spec.split_tail), "'split tail'"),
        (spec.access_style != "pointers", f"'access {spec.access_style}'"),
        (any(isinstance(s, m.Loop) and s.split for s in m.statements(spec.body)), "a split loop"),
    ]
    for bad, name in plain:
        if bad:
            state.errors.error(f"{what}, which needs a plain grid of pointer tiles; this spec has {name}", store.span)
    writes = [s for s in m.statements(spec.body) if isinstance(s, m.Store) and s.tensor.id == store.tensor.id]
    # said once, at the second write: by the first write where it reduces across programs, else by this one
    if len(writes) > 1 and (store is writes[0] or across(writes[0], spec.grid) is None):
        again = writes[1] if store is writes[0] else store
        state.errors.error(f"{what}, so a finish kernel writes it once from every program's partial; it is "
                           f"also written at line {writes[0].span.line}: write it once", again.span)
    for partial in found.partials[1:]:
        if partial.axes != first.axes:
            state.errors.error(
                f"every reduction across programs in one store reduces the same grid axes: "
                f"{', '.join(partial.axes)} here, {', '.join(first.axes)} before",
                partial.call.span,
            )
    for item in store.index:
        if isinstance(item, m.Name) and item.id in first.axes:
            state.errors.error(
                f"the store to '{store.tensor.id}' is indexed by '{item.id}', which its value reduces over",
                item.span,
            )
    placeholders: list[m.Expr] = [m.Number("0", p.call.span) for p in found.partials]
    for sub in m.subexpressions(found.epilogue(placeholders)):
        tile = isinstance(sub, m.Load) or (
            isinstance(sub, m.Ref) and (sub.name.id in scope.locals or sub.name.id in scope.axes)
        )
        if tile:
            state.errors.error(
                f"{what}; outside those reductions its value may use numbers, scalar inputs and sizes, "
                "not a tile: move it inside the reduction, or store it from another kernel",
                sub.span,
            )
            break


def _setter(stmt: m.Stmt) -> str | None:
    """What sets a value a stage reads, in words, where a stage cannot read it (None: an assignment,
    which it recomputes)."""
    match stmt:
        case m.Assign():
            return None
        case m.Loop():
            return "a loop"
        case m.Accumulate():
            return "'+='"
        case m.Declare():
            return "a tile declaration"
        case _:  # (a store sets no local: needed() gives none)
            return "a statement"


def check_stage(state: CheckState, body: tuple[m.Stmt, ...], position: int, scope: Scope) -> None:
    """``v = f(sum(x, dim=r))`` at the top level, ``r`` a grid axis: a kernel of its own (a
    stage, :mod:`tilegen.lower.stages`) computes ``v`` before the spec's kernel runs, from the
    assignments before it, and holds it in float32 for the spec's kernel to load."""
    stmt = body[position]
    if not isinstance(stmt, m.Assign):  # a stage is an assignment (the body's rules call this for one)
        return
    what = f"'{stmt.name.id}' reduces across programs, so a kernel of its own computes it before this one"
    for i in reversed(needed(body, position)):  # the nearest first
        if (kind := _setter(body[i])) is not None:
            state.errors.error(
                f"{what}, from the assignments before it; it reads what {kind} at line {body[i].span.line} sets: "
                "compute it with plain assignments, or in another spec",
                stmt.span,
            )
            return
    dtype = dtype_of(state, stmt.value, scope)
    if dtype in m.DTYPES and dtype != "f32":
        state.errors.error(f"{what}, which holds it in float32; its value here is {dtype}: wrap it in f32(...)",
                           stmt.value.span)
