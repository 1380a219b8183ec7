"""``out dx: f32[M, N] in place of x``: an output the launcher may write over one of its inputs.

With ``inplace=True`` the generated launcher writes ``dx`` into ``x``'s storage instead of a new
tensor (flash-attn's ``inplace_backward``, Liger-Kernel's cross-entropy gradient written over the
logits): no second tensor of that size. That is only right where every element of ``x`` is read
before anything overwrites it, by the program that overwrites it. These rules prove it on the
spec's text:

* ``x`` is an input tensor with ``dx``'s dtype and dimensions, and no other output is written in
  place of it;
* ``dx`` is stored by one statement, indexed by axis names alone, naming every grid axis that
  tiles (so each element has one owner program) and every enclosing loop's axis (so each step
  writes elements of its own);
* every read of ``x`` flows into the value stored (so Triton orders the read before the store,
  whichever threads hold the element), and is either in the store's own block, before it or in
  it, at the store's index (a tile read, then overwritten), or in a statement of the body before
  the one holding the store, at the store's grid axes where the store has them (elements of the
  program's own tiles, before any is overwritten).

Without ``inplace`` the output is a new tensor, as any other.
"""

from __future__ import annotations

from collections.abc import Iterator

from tilegen import model as m
from tilegen.check.state import CheckState


def check_in_place_declarations(state: CheckState) -> None:
    """The declarations: ``in place of`` on an output only, naming an input tensor of the same
    dtype and dimensions, one output per input."""
    spec = state.spec
    taken: dict[str, str] = {}
    for tensor in spec.tensors:
        source = tensor.in_place_of
        if source is None:
            continue
        if tensor.role != "out":
            state.errors.error(f"'in place of' is for outputs; '{tensor.name.id}' is an input", source.span)
            continue
        target = spec.tensor(source.id)
        if target is None or target.role != "in" or target.is_scalar:
            state.errors.error(f"'{source.id}' is not an input tensor of this kernel", source.span)
        elif target.dtype.id != tensor.dtype.id:
            state.errors.error(f"'{tensor.name.id}' is {tensor.dtype.id} but '{source.id}' is {target.dtype.id}; "
                               "an output written in place of an input has its dtype", source.span)
        elif [m.expr_key(d) for d in target.dims] != [m.expr_key(d) for d in tensor.dims]:
            state.errors.error(f"'{tensor.name.id}' and '{source.id}' differ in shape; an output written in place "
                               "of an input has its dimensions", source.span)
        elif source.id in taken:
            state.errors.error(f"'{taken[source.id]}' is already written in place of '{source.id}'", source.span)
        else:
            taken[source.id] = tensor.name.id


def check_in_place(state: CheckState) -> None:
    """The body (a valid one): each output written in place of an input is safe to write there
    (the rules of this module), else an error at the read or store that is not."""
    spec = state.spec
    for tensor in spec.in_place:
        source = tensor.in_place_of
        if source is None or spec.tensor(source.id) is None:  # (spec.in_place holds the outputs with one)
            continue
        if spec.backward:
            state.errors.error(f"'{tensor.name.id}' cannot be written in place of '{source.id}' in a kernel with a "
                               "backward, whose formula reads the inputs", source.span)
            continue
        if spec.access_style != "pointers" or any(a.bounds == "whole" for a in spec.grid):
            state.errors.error(f"'{tensor.name.id}' cannot be written in place of '{source.id}': in place is for "
                               "kernels of pointers without whole grid axes, for now", source.span)
            continue
        problem = _unsafe(spec, tensor.name.id, source.id)
        if problem is not None:
            message, span = problem
            state.errors.error(f"'{tensor.name.id}' cannot be written in place of '{source.id}': {message}", span)


def _positions(
    body: tuple[m.Stmt, ...], at: tuple[int, ...] = (), loops: tuple[m.Axis, ...] = ()
) -> Iterator[tuple[tuple[int, ...], tuple[m.Axis, ...], m.Stmt]]:
    """(position, enclosing loop axes, statement) for every statement of ``body``, nested ones
    included: a position is the statement's index in each enclosing body, outermost first."""
    for i, stmt in enumerate(body):
        yield (*at, i), loops, stmt
        if isinstance(stmt, m.Loop):
            yield from _positions(stmt.body, (*at, i), (*loops, stmt.axis))


def _flowing(spec: m.Spec, store: m.Store) -> set[m.Span]:
    """The spans of the loads whose values flow into ``store``'s value: its own, and those of
    every assignment (any earlier one: loop-carried values included) to the names it reads."""
    assigned: dict[str, list[m.Expr]] = {}
    for stmt in m.statements(spec.body):
        if (name := m.local_name(stmt)) is not None:
            assigned.setdefault(name, []).extend(m.values(stmt))
    loads: set[m.Span] = set()
    seen: set[str] = set()
    pending = [store.value]
    while pending:
        for e in m.subexpressions(pending.pop()):
            if isinstance(e, m.Load):
                loads.add(e.span)
            elif isinstance(e, m.Ref) and e.name.id not in seen:
                seen.add(e.name.id)
                pending.extend(assigned.get(e.name.id, ()))
    return loads


def _unsafe(spec: m.Spec, out: str, source: str) -> tuple[str, m.Span] | None:
    """Why writing ``out`` over input ``source`` could overwrite an element before it is read
    (a message and the span to report it at), or None where it cannot."""
    stores = [(at, loops, s) for at, loops, s in _positions(spec.body) if isinstance(s, m.Store) and s.tensor.id == out]
    if not stores:  # never written: check_state says so at the output
        return None
    if len(stores) != 1:
        return f"'{out}' is stored by {len(stores)} statements; in place, one", stores[1][2].span
    at, loops, store = stores[0]
    names = [i for i in store.index if isinstance(i, m.Name)]
    if len(names) != len(store.index):
        return "its store is indexed by axis names alone", store.span
    named = {i.id for i in names}
    for axis in spec.grid:
        if axis.bounds != "whole" and axis.name.id not in named:
            return f"programs along grid axis '{axis.name.id}' would all write its elements", store.span
    for axis in loops:
        if axis.name.id not in named:
            return f"every step of the loop over '{axis.name.id}' would write the same elements", store.span
    grid = {a.name.id for a in spec.grid if a.bounds != "whole"}
    index = [m.expr_key(i) for i in store.index]
    flowing = _flowing(spec, store)
    for where, _, stmt in _positions(spec.body):
        for load in (e for v in m.values(stmt) for e in m.subexpressions(v) if isinstance(e, m.Load)):
            if load.tensor.id != source:
                continue
            if load.span not in flowing:
                return f"'{source}' is read here but the value stored does not depend on the read", load.span
            same_block = where[:-1] == at[:-1] and where[-1] <= at[-1]
            if same_block and [m.expr_key(i) for i in load.index] == index:
                continue
            before = where[0] < at[0]
            own = all(
                isinstance(read, m.Name) and read.id == item.id
                for read, item in zip(load.index, names, strict=True) if item.id in grid
            )
            if not before:
                return (f"'{source}' is read here at another index than the store's, "
                        "after or beside the store"), load.span
            if not own:
                return (f"'{source}' is read here outside the program's own tiles, "
                        "which other programs overwrite"), load.span
    return None
