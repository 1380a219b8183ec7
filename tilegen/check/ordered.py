"""The rules of a ``deterministic`` kernel: its ``+=`` stores add in the order of their tokens.

``dweight[idx[t], c] += dy[t, c]`` under ``deterministic``: the programs walk the positions of
the tokens sorted by ``idx`` (:mod:`tilegen.lower.ordered`), so each element's sum is
``start + v[t1] + v[t2] + ...`` with ``t1 < t2 < ...``, added in that order whatever the block
sizes. That needs one sort key for every ``+=`` store: a 1-D integer input loaded at one grid
axis alone (``idx[t]``), that axis tiled by a block, each element one program's, and no value
reduced over a grid axis. Each function reports to the
:class:`~tilegen.check.state.CheckState` it is given and raises nothing.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.check.state import CheckState
from tilegen.dtypes import is_int
from tilegen.spec_text import extent_text

#: What ``deterministic`` asks of a ``+=`` store, said in the messages.
SHAPE = "y[idx[t], c] += v, with idx a 1-D integer input and t a grid axis"
#: Grid axis bounds a deterministic kernel takes (a ``whole`` axis's rows may need loops, which
#: the walk does not have).
TILED = ("masked", "unmasked")


def sort_key(spec: m.Spec, store: m.Store) -> tuple[str, str] | None:
    """The (index input, grid axis) a ``+=`` store scatters through (``("idx", "t")`` for
    ``y[idx[t], c] += v``), where it has exactly one such item and its other items are the other
    grid axes, each once (so that no two programs add into one element); None otherwise."""
    grid = {a.name.id for a in spec.grid}
    gathers = [i for i in store.index if isinstance(i, m.Load)]
    if len(gathers) != 1 or any(not isinstance(i, m.Load | m.Name) for i in store.index):
        return None
    gather = gathers[0]
    tensor = spec.tensor(gather.tensor.id)
    if (tensor is None or tensor.role != "in" or len(tensor.dims) != 1 or len(gather.index) != 1
            or not isinstance(gather.index[0], m.Name) or gather.index[0].id not in grid):
        return None
    if not all(is_int(d) for d in spec.dtype_options(tensor.dtype)):
        return None
    axis = gather.index[0].id
    names = [i.id for i in store.index if isinstance(i, m.Name)]
    if sorted(names) != sorted(grid - {axis}):
        return None
    return tensor.name.id, axis


def check_deterministic(state: CheckState) -> None:
    """A ``deterministic`` kernel: at least one ``+=`` store, each at the top of the body, one to
    an output, all through one index input at one tiled grid axis (:func:`sort_key`); no value
    reduced over a grid axis (over ``t`` it would mix tokens; over another, a value every program
    uses, it would need a stage); a grid of plain program axes, tiled or one program per index
    (not whole, flat, persistent or swizzled, no ``split tail``)."""
    spec = state.spec
    if spec.deterministic is None:
        return
    line = spec.deterministic
    adds = [s for s in m.statements(spec.body) if isinstance(s, m.Store) and s.update == "add"]
    if not adds:
        state.errors.error("'deterministic' orders a kernel's '+=' stores, and this kernel has none", line)
        return
    keys, outputs = set(), set()
    for store in adds:
        if store not in spec.body:
            state.errors.error("under 'deterministic' a '+=' store goes at the top of the body, not in a loop",
                               store.span)
        key = sort_key(spec, store)
        if key is None:
            state.errors.error(f"under 'deterministic' a '+=' store scatters through one index: {SHAPE}, "
                               "its other index items the other grid axes (the programs walk the tokens sorted "
                               "by idx, and each element is one program's)", store.span)
        else:
            keys.add(key)
        if store.tensor.id in outputs:  # said at the second store
            state.errors.error(f"under 'deterministic' '{store.tensor.id}' takes one '+=' store: add the values first",
                               store.span)
        outputs.add(store.tensor.id)
    if len(keys) > 1:
        state.errors.error("under 'deterministic' every '+=' store scatters through the same index at the same axis "
                           f"(here: {', '.join(f'{k}[{a}]' for k, a in sorted(keys))})", line)
    if len(keys) != 1:
        return
    _, axis = next(iter(keys))
    found = next(a for a in spec.grid if a.name.id == axis)
    if found.block is None or found.bounds not in TILED:
        state.errors.error(f"under 'deterministic' the axis '{axis}' walks sorted tokens in tiles: write "
                           f"'{axis} over {extent_text(found)} by B{axis.upper()}'", found.name.span)
    if spec.flat or spec.persistent or spec.swizzle is not None or spec.split_tail:
        state.errors.error("'deterministic' takes a grid of plain program axes (not flat, persistent or swizzled, "
                           "no 'split tail')", line)
    for other in spec.grid:
        if other.name.id != axis and other.bounds not in (*TILED, "index"):
            state.errors.error(f"under 'deterministic' the grid axes are tiled by blocks or one program per index; "
                               f"'{other.name.id}' is {other.bounds}", other.name.span)
    grid = {a.name.id for a in spec.grid}
    for stmt in m.statements(spec.body):
        for value in m.values(stmt):
            for expr in m.subexpressions(value):
                if not isinstance(expr, m.Call):
                    continue
                over = expr.word("dim")
                if over == axis:
                    state.errors.error(f"under 'deterministic' no value spans several tokens: '{expr.func.id}' over "
                                       f"'{axis}' would mix the tokens of different indices", expr.span)
                elif over in grid:  # a value reduced across programs: a stage of its own, which the walk has not
                    state.errors.error(f"under 'deterministic' no value is reduced over a grid axis ('{over}'): sum it "
                                       "in a kernel of its own first", expr.span)
