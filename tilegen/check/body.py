"""Body rules: the statements of the kernel's body in order (tile declarations, assignments,
``+=``, stores, loops), with the names in scope at each. Reports to the
:class:`~tilegen.check.state.CheckState` it is given and raises nothing.
"""

from __future__ import annotations

from typing_extensions import assert_never

from tilegen import model as m
from tilegen.across import across, assigned
from tilegen.check.declarations import check_axis_decl, check_dtype
from tilegen.check.expressions import DOT_ACCUMULATORS, dtype_of, expr_axes
from tilegen.check.indexing import check_atomic_store, index_axes
from tilegen.check.programs import check_across, check_stage
from tilegen.check.state import CheckState, Scope
from tilegen.dtypes import BOOL


def check_body(state: CheckState, body: tuple[m.Stmt, ...], scope: Scope) -> None:
    """Check ``body``'s statements in order, updating ``scope`` as they define names: a tile
    declaration (known dtype and axes, a constant initial value), an assignment (a new name,
    or a value within the variable's axes), ``+=`` (onto a declared tile, a ``dot`` into an
    accumulator of a dtype it may add into), a store (recorded in ``state.written``; the value
    spans only the axes the store indexes) and a loop (its axis, then its body in a scope of
    its own whose updated variables stay visible after it)."""
    for position, stmt in enumerate(body):
        match stmt:
            case m.Declare():
                check_dtype(state, stmt.dtype)
                for axis in stmt.axes:
                    if axis.id not in scope.axes:
                        state.errors.error(f"unknown axis '{axis.id}'", axis.span)
                    elif scope.axes[axis.id].is_index:
                        state.errors.error(
                            f"'{axis.id}' is an index axis (no block), not a tile dimension", axis.span
                        )
                init = stmt.init.operand if isinstance(stmt.init, m.Neg) else stmt.init
                if not isinstance(init, m.Number):
                    state.errors.error("a tile is initialised with a constant, e.g. '= 0' or '= -inf'", stmt.init.span)
                state.define(stmt.name, "variable")
                scope.locals[stmt.name.id] = tuple(a.id for a in stmt.axes)
                scope.declared.add(stmt.name.id)
                scope.dtypes[stmt.name.id] = stmt.dtype.id
            case m.Assign():
                found = assigned(stmt, state.spec.grid) if not scope.loop_axes else None
                if found is not None:  # a value every program uses and none can compute: a stage
                    check_across(state, found, scope)
                    check_stage(state, body, position, scope)
                axes = expr_axes(state, stmt.value, scope)
                dtype = dtype_of(state, stmt.value, scope)
                name = stmt.name.id
                if name not in scope.locals:
                    state.define(stmt.name, "variable")
                    scope.locals[name] = axes
                    scope.dtypes[name] = dtype
                elif not set(axes) <= set(scope.locals[name]):
                    # a variable keeps its shape (a loop carries it from step to step)
                    state.errors.error(
                        f"'{name}' spans {list(scope.locals[name])}, but the new value spans {list(axes)}; "
                        "use a new name",
                        stmt.value.span,
                    )
            case m.Accumulate():
                axes = expr_axes(state, stmt.value, scope)
                if stmt.name.id not in scope.declared:
                    state.errors.error(
                        f"'{stmt.name.id}' must be declared before '+=', e.g. '{stmt.name.id}: f32[...] = 0'",
                        stmt.name.span,
                    )
                elif not set(axes) <= set(scope.locals[stmt.name.id]):
                    state.errors.error(
                        f"'{stmt.name.id}' spans {list(scope.locals[stmt.name.id])} but the value spans {list(axes)}",
                        stmt.value.span,
                    )
                elif isinstance(stmt.value, m.Call) and m.is_dot(stmt.value) and len(stmt.value.args) == 2:
                    operand = dtype_of(state, stmt.value.args[0], scope)
                    allowed = DOT_ACCUMULATORS.get(operand, ()) if operand is not None else ()
                    acc = scope.dtypes.get(stmt.name.id)
                    if allowed and acc not in allowed:
                        state.errors.error(
                            f"'{stmt.name.id}' is {acc}, but 'dot' of {operand} tiles accumulates in "
                            f"{' or '.join(allowed)}",
                            stmt.name.span,
                        )
            case m.Store():
                state.written.add(stmt.tensor.id)
                found = across(stmt, state.spec.grid) if not scope.loop_axes and not stmt.atomic else None
                if found is not None:
                    check_across(state, found, scope)
                if stmt.atomic:
                    check_atomic_store(state, stmt)
                target = index_axes(state, stmt.tensor, stmt.index, scope, writing=True, atomic=stmt.atomic)
                axes = expr_axes(state, stmt.value, scope)
                canonical = {state.alias_of.get(a, a) for a in target}
                extra = [a for a in axes if state.alias_of.get(a, a) not in canonical]
                if stmt.guard is not None:
                    check_guard(state, stmt, stmt.guard, target, scope)
                scatters = any(isinstance(i, m.Load) for i in stmt.index)  # every lane stores: none may repeat
                if extra and state.spec.tensor(stmt.tensor.id) is not None and (len(target) == len(stmt.index)
                                                                                  or scatters):
                    state.errors.error(
                        f"the value spans axis '{extra[0]}', which the store to '{stmt.tensor.id}' does not index",
                        stmt.value.span,
                    )
            case m.Loop():
                check_axis_decl(state, stmt.axis, "loop axis", scope)
                inner = Scope(
                    {**scope.axes, stmt.axis.name.id: stmt.axis},
                    dict(scope.locals),
                    set(scope.declared),
                    (*scope.loop_axes, stmt.axis.name.id),
                    dict(scope.dtypes),
                )
                check_body(state, stmt.body, inner)
                # Tile variables updated in the loop stay visible after it.
                scope.locals.update({k: v for k, v in inner.locals.items() if k in scope.locals})
            case _:
                assert_never(stmt)


def check_guard(state: CheckState, store: m.Store, guard: m.Expr, target: tuple[str, ...], scope: Scope) -> None:
    """``y[offsets[r] + c] = v where c < n``: the guard is a mask (a comparison, or ``&``/``|`` of
    them) over axes the store indexes, so that each lane it stores has its own truth value."""
    axes = expr_axes(state, guard, scope)
    if state.spec.access_style != "pointers":
        state.errors.error(f"a store's 'where' masks pointers; '{state.spec.access_style}' cannot: use 'access "
                           "pointers'", guard.span)
    if dtype_of(state, guard, scope) != BOOL:
        state.errors.error("a store's 'where' takes a mask: a comparison (c < n), or & and | of them", guard.span)
    canonical = {state.alias_of.get(a, a) for a in target}
    outside = [a for a in axes if state.alias_of.get(a, a) not in canonical]
    if outside:
        state.errors.error(f"the mask spans axis '{outside[0]}', which the store to '{store.tensor.id}' does not "
                           "index", guard.span)
