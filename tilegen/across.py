"""Reductions across programs: a store whose value reduces over a grid axis.

``loss = mean((p[r, c] - t[r, c]) ** 2, dim=(r, c))`` with ``r`` and ``c`` grid axes: no
program sees all of ``M`` or ``N``, so no program can compute the mean. Each program reduces its
own tile instead (its *partial* result), stores it in a float32 workspace at its place in the
grid, and a second kernel, the *finish*, merges the partials in program order and computes the
rest of the stored value from them (its *epilogue*: here the division by ``M * N``). The order
is fixed, so a result is bitwise the same run to run (it may round differently at other block
sizes, as any reduction does). The split is Inductor's and CUTLASS's "parallel" reduction; no
atomics.

This module finds such stores (:func:`across`), for the checker (which says what a spec may
write) and the lowering (:mod:`tilegen.lower.finish`, which writes the workspace store and the
finish kernel). It knows no Triton.

What a store may say: ``out[index] = epilogue`` where the epilogue combines numbers, scalar
inputs and size symbols with one or more *chains*: a reduction over one or more grid axes, the
axes it reduces written as nested calls of reductions that merge alike (``sum(sum(x, dim=c),
dim=r)``, which ``dim=(r, c)`` is; ``sum`` and ``mean`` merge alike, by ``+``). A chain may reduce
tile axes too (``c over N whole``); those stay inside the program. Every chain of one store
reduces the same grid axes, those the store does not index.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen import model as m
from tilegen.functions import Function, partial_reduction, reduction


@dataclass(frozen=True)
class Partial:
    """One chain of reductions over grid axes in a store's value.

    ``call`` is the chain's outermost call as written; ``value`` what one program computes of
    it: the chain with each ``mean`` over a grid axis written as a ``sum`` (the finish divides by
    the extents in ``averaged``) and each reduction over an index axis (``b over B``: one index
    per program) left out. ``function`` merges the partials (``sum``, ``prod``, ``max``, ``min``);
    ``axes`` are the grid axes the chain reduces, in grid order."""

    call: m.Call
    value: m.Expr
    function: Function
    axes: tuple[str, ...]
    averaged: tuple[str, ...]  # the size symbols of the grid axes a mean reduces


@dataclass(frozen=True)
class Across:
    """A store whose value reduces across programs: its chains (:class:`Partial`), in the order
    they appear in the value."""

    store: m.Store
    partials: tuple[Partial, ...]

    @property
    def axes(self) -> tuple[str, ...]:
        """The grid axes reduced (every chain's: the checker requires them equal)."""
        return self.partials[0].axes

    def epilogue(self, values: list[m.Expr]) -> m.Expr:
        """The stored value with each chain replaced by ``values[i]`` (what the finish holds of
        chain ``i``: its merged partials, divided by the count for a mean)."""
        swap = {id(p.call): value for p, value in zip(self.partials, values, strict=True)}
        return m.map_expr(self.store.value, lambda e: swap.get(id(e)))


def chain(call: m.Call) -> list[m.Call]:
    """The nested reductions starting at ``call`` that merge alike (``sum`` and ``mean`` by
    ``+``; ``max`` by ``maximum``), outermost first. A reduction that cannot merge (``argmax``),
    or whose partials are masks (``any``; the partials' tensors are float32), is a chain of none."""
    function = reduction(call)
    if function is None or function.combine is None or function.masks:
        return []
    calls = [call]
    while (isinstance(operand := calls[-1].args[0], m.Call) and (inner := reduction(operand)) is not None
           and inner.combine == function.combine):
        calls.append(operand)
    return calls


def _chains(expr: m.Expr, grid: dict[str, m.Axis]) -> list[list[m.Call]]:
    """The chains of ``expr`` that reduce a grid axis, outside any other reduction (a chain
    inside another reduction's operand is not one: the checker refuses it there)."""
    if isinstance(expr, m.Call) and reduction(expr) is not None:
        calls = chain(expr)
        if any(c.word("dim") in grid for c in calls):
            return [calls]
        return []
    parts: tuple[m.Expr, ...] = ()
    if isinstance(expr, m.BinOp):
        parts = (expr.left, expr.right)
    elif isinstance(expr, m.Neg):
        parts = (expr.operand,)
    elif isinstance(expr, m.Call):
        parts = expr.args
    return [c for part in parts for c in _chains(part, grid)]


def _partial(calls: list[m.Call], grid: dict[str, m.Axis], order: list[str]) -> Partial:
    """The :class:`Partial` of one chain."""
    first = reduction(calls[0])
    assert first is not None  # a chain (:func:`chain`) is of reductions
    function = partial_reduction(first)

    def averages(call: m.Call) -> bool:  # a mean: the finish divides
        called = reduction(call)
        return called is not None and called.averages

    axes = [dim for c in calls if (dim := c.word("dim")) in grid]
    averaged = tuple(grid[dim].dim.id for c in calls if (dim := c.word("dim")) in grid and averages(c))

    def per_program(k: int) -> m.Expr:  # calls[k:] as one program computes them
        if k == len(calls):
            return calls[-1].args[0]
        call, operand = calls[k], per_program(k + 1)
        dim = call.word("dim")
        if dim in grid and grid[dim].is_index:  # one index of it per program: nothing to reduce
            return operand
        if dim in grid and averages(call):  # the finish divides
            return dataclasses.replace(call, func=dataclasses.replace(call.func, id=function.name),
                                       args=(operand, *call.args[1:]))
        return dataclasses.replace(call, args=(operand, *call.args[1:]))

    return Partial(calls[0], per_program(0), function, tuple(a for a in order if a in axes), averaged)


def across(store: m.Store, grid: tuple[m.Axis, ...]) -> Across | None:
    """The reductions across programs of ``store`` (a top-level store of a spec whose grid is
    ``grid``), or None where its value reduces no grid axis (but ``whole`` ones, which one program
    holds) outside another reduction."""
    axes = {a.name.id: a for a in grid if a.bounds != "whole"}  # a whole axis is in one program
    chains = _chains(store.value, axes)
    if not chains:
        return None
    order = [a.name.id for a in grid]
    return Across(store, tuple(_partial(calls, axes, order) for calls in chains))



def assigned(stmt: m.Assign, grid: tuple[m.Axis, ...]) -> Across | None:
    """The reductions across programs of a top-level assignment ``v = f(sum(x, dim=r))``, read
    as the store ``v = ...`` would be, or None. Every program uses ``v``, which none can compute:
    the compiler computes it in a kernel of its own, a *stage*, which stores it (through the
    partials and the finish kernel of a store), and the spec's kernel loads it
    (:mod:`tilegen.lower.stages`)."""
    return across(m.Store(stmt.name, (), stmt.value, stmt.span), grid)


def names_in(expr: m.Expr) -> set[str]:
    """The names ``expr`` reads: locals, axes, sizes and scalars, those of offset indices too."""
    found: set[str] = set()
    for sub in m.subexpressions(expr):
        if isinstance(sub, m.Ref):
            found.add(sub.name.id)
        elif isinstance(sub, m.Load):
            for item in sub.index:
                if isinstance(item, m.Name):
                    found.add(item.id)
                elif not isinstance(item, m.Number | m.Load):  # an offset index: c + N / 2
                    found |= names_in(item)
    return found


def defined(stmt: m.Stmt) -> set[str]:
    """The local names a top-level statement sets (a loop: those its body sets)."""
    return {name for s in m.statements((stmt,)) if (name := m.local_name(s)) is not None}


def needed(body: tuple[m.Stmt, ...], position: int, leaves: frozenset[int] = frozenset()) -> list[int]:
    """The positions in ``body`` (top-level statements) before ``position`` that set a local the
    statement at ``position`` reads, directly or through them, in body order. A position in
    ``leaves`` is taken but what it reads is not followed (a value another stage computes)."""
    reader = body[position]
    assert isinstance(reader, m.Assign | m.Store)  # a statement whose value reduces across programs
    wanted = set(names_in(reader.value))
    found: list[int] = []
    for i in range(position - 1, -1, -1):
        if not defined(body[i]) & wanted:
            continue
        found.append(i)
        stmt = body[i]
        if isinstance(stmt, m.Assign | m.Declare):  # it sets the name afresh
            wanted.discard(stmt.name.id)
        if i not in leaves:
            reads = [value for s in m.statements((stmt,)) for value in m.values(s)]
            wanted |= {n for value in reads for n in names_in(value)}
    return sorted(found)
