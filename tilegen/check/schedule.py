"""Scheduling rules: what ``split`` (split-K), ``split tail`` and blocks of two pieces ask of a
spec's grid, access style, configs and body. They assume an otherwise valid spec. Each
function reports to the :class:`~tilegen.check.state.CheckState` it is given and raises
nothing.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.check.state import CheckState, block_text, is_two_pieces
from tilegen.functions import lookup
from tilegen.row_loops import loop_rows  # the rewrite's own rules, not repeated here
from tilegen.spec_text import extent_text


def check_split(state: CheckState) -> None:
    """``for k over K by BK split``: the launcher may run the loop of each output tile in
    several programs (split-K) and add up their f32 partial sums, so the program must be
    exactly "sum over k, then store the sum": f32 accumulators set to 0 before the loop, a
    loop of ``acc += dot(..)`` lines, and after it one store of an accumulator (or of its
    cast to the output's dtype) into a 2D output indexed by the grid's two tiled axes in the
    grid's order. Raises nothing: problems go to ``state.errors``."""
    spec = state.spec
    top = [s for s in spec.body if isinstance(s, m.Loop) and s.split]
    nested = [s for s in m.statements(spec.body) if isinstance(s, m.Loop) and s.split and s not in top]
    for loop in nested:
        state.errors.error("'split' needs a loop of the kernel's body, not one inside another loop", loop.span)
    if not top:
        return
    loop = top[0]
    if len(top) > 1:
        state.errors.error("'split' can be given to one loop only", top[1].span)
    if not m.is_dot_loop(loop):
        state.errors.error(
            "'split' needs a loop of `acc += dot(x[.., k], y[k, ..])` lines only (a matmul's K loop)", loop.span
        )
        return
    launched = [a for a in spec.grid if a.bounds != "whole"]
    if spec.persistent or len(launched) != 2 or any(a.is_index for a in launched):
        state.errors.error(
            "'split' needs a grid of two tiled axes (flat or not, not persistent): the split parts take "
            "another grid axis",
            loop.span,
        )
    if spec.access_style == "block_ptr":
        state.errors.error("'split' needs access pointers or descriptor, not block_ptr", loop.span)
    accumulators = {s.name.id for s in loop.body if isinstance(s, m.Accumulate)}  # (every line of a dot loop)
    before, after = spec.body[: spec.body.index(loop)], spec.body[spec.body.index(loop) + 1 :]
    for stmt in before:
        if isinstance(stmt, m.Declare) and stmt.name.id in accumulators:
            if stmt.dtype.id != "f32" or not isinstance(stmt.init, m.Number) or stmt.init.value != 0:
                state.errors.error(
                    f"a split loop's accumulator '{stmt.name.id}' must start as f32 zeros "
                    f"(`{stmt.name.id}: f32[..] = 0`): its partial sums are added up in f32",
                    stmt.span,
                )
        else:
            state.errors.error(
                "before a split loop the body can only declare its accumulators: each part of K runs it", stmt.span
            )
    grid_axes = [a.name.id for a in launched]
    stores = [s for s in after if isinstance(s, m.Store)]
    for stmt in after:
        value = stmt.value if isinstance(stmt, m.Store) else None
        tensor = spec.tensor(stmt.tensor.id) if isinstance(stmt, m.Store) else None
        if isinstance(value, m.Call) and len(value.args) == 1:  # a cast of the accumulator to the output's dtype
            function = lookup(value.func)
            own = None if tensor is None else m.as_written(tensor.dtype)
            if function is not None and function.kind == "cast" and m.as_written(value.func) == own:
                value = value.args[0]
        plain = (
            isinstance(stmt, m.Store)
            and isinstance(value, m.Ref)
            and value.name.id in accumulators
            and tensor is not None
            and tensor.role == "out"
            and [state.alias_of.get(i.id, i.id) if isinstance(i, m.Name) else None for i in stmt.index] == grid_axes
            and len(tensor.dims) == 2
        )
        if not plain or len(stores) > 1:
            state.errors.error(
                "after a split loop the body can only store the accumulator as it is (`c[m, n] = acc`, or a "
                "cast of it to the output's dtype) into one 2D output indexed by the grid's axes in the grid's "
                f"order ({', '.join(grid_axes)}): the launcher adds up the partial sums into that output",
                stmt.span,
            )
            break


def check_split_tail(state: CheckState) -> None:
    """``split tail``: one line, on a flat grid that is not persistent, whose two axes have
    blocks of their own (each is halved on its own), and a store of a tile over both axes
    (the tiles split are output tiles). Raises nothing: problems go to ``state.errors``."""
    spec = state.spec
    if not spec.split_tail:
        return
    span = spec.split_tail[0]
    for extra in spec.split_tail[1:]:
        state.errors.error("'split tail' is given twice", extra)
    if not spec.flat or spec.persistent:
        state.errors.error(
            "'split tail' needs a flat grid that is not persistent ('grid flat m over M by BM, n over N by BN'): "
            "it splits the tiles of the last wave of a one-program-per-tile launch",
            span,
        )
        return
    first, second = spec.grid
    if block_text(first) == block_text(second):
        state.errors.error(
            f"'split tail' halves each grid axis's block on its own: the axes need different block "
            f"parameters, not both {block_text(first)}",
            span,
        )
    tensors = {t.name.id: t for t in spec.tensors}
    for name, tensor in tensors.items():  # x's sub-tile descriptor is x_tail_desc, also x_tail's own
        if spec.access_style == "descriptor" and name.endswith("_tail") and name[: -len("_tail")] in tensors:
            state.errors.error(
                f"with 'split tail' the descriptor of {name[: -len('_tail')]}'s sub-tiles is named {name}_desc, "
                f"as is {name}'s own: rename '{name}'",
                tensor.name.span,
            )
    names = {first.name.id, second.name.id}
    stores = [s for s in m.statements(spec.body) if isinstance(s, m.Store)]
    if not any(names <= {i.id for i in s.index if isinstance(i, m.Name)} for s in stores):
        state.errors.error(
            f"'split tail' splits output tiles: the body must store a tile over both grid axes "
            f"({first.name.id}, {second.name.id})",
            span,
        )


def check_pieces(state: CheckState) -> None:
    """A block of the rows of a flat grid's output that is a sum of two powers of two (192 =
    128 + 64) where Triton's tiles are powers of two: the kernel holds each tile as two
    row pieces, each its own accumulator, ``a`` tile and store, sharing each ``b`` tile of the
    loop (:func:`tilegen.lower.pieces.pieces_setup`). This needs TMA
    descriptors (a descriptor per piece), tune configs (the pieces' descriptors take their
    block shapes per config), and a body of tile declarations, dot loops whose first operand
    holds the rows, and stores of a local over them. Raises nothing: problems go to
    ``state.errors``, at the block value."""
    spec = state.spec
    names = {t.name.id for t in spec.tensors}
    for tensor in spec.tensors if state.pieced and spec.access_style == "descriptor" else ():
        name = tensor.name.id  # x's second piece's descriptor is x_piece_desc, also x_piece's own
        if name.endswith("_piece") and name[: -len("_piece")] in names:
            state.errors.error(
                f"with row pieces the descriptor of {name[: -len('_piece')]}'s second piece is named "
                f"{name}_desc, as is {name}'s own: rename '{name}'",
                tensor.name.span,
            )
    for param, values in state.pieced.items():
        rows = spec.grid[0].name.id
        why = None
        if spec.access_style != "descriptor" or spec.tune is None:
            why = "'access descriptor' and tune configs (a tensor descriptor for each piece, set per config)"
        if why is None and spec.grid[0].bounds != "masked":
            why = f"masked rows (the launcher checks an unmasked '{extent_text(spec.grid[0])}' against one block)"
        for stmt in spec.body:
            if why is not None:
                break
            body = "a body of tile declarations, loops of dots ('acc += dot(a[m, k], b[k, n])') and stores"
            match stmt:
                case m.Loop() if not m.is_dot_loop(stmt):
                    why = body
                case m.Loop():  # a dot loop: acc += dot(a[..], b[..]) lines
                    if any(
                        isinstance(i, m.Name) and i.id == rows
                        for s in stmt.body if isinstance(s, m.Accumulate) and isinstance(s.value, m.Call)
                        for b in s.value.args[1:2] if isinstance(b, m.Load)
                        for i in b.index
                    ):
                        why = f"'{rows}' in the first operand of each dot (its rows)"
                case m.Store():
                    over = any(isinstance(i, m.Name) and i.id == rows for i in stmt.index)
                    if over and not isinstance(stmt.value, m.Ref):
                        why = f"stores of a local over '{rows}' ('c[m, n] = acc')"
                case m.Declare():
                    pass
                case _:  # any other statement (an assignment, an update)
                    why = body
        for role, chosen in (("default", spec.default_config()), ("interpreter", spec.interpreter_config())):
            value = chosen.get(param) or state.params[param].default if chosen is not None else None
            if why is None and value is not None and is_two_pieces(int(value.text)):
                where = ("Triton's interpreter runs it through pointers" if role == "interpreter" else
                         "it runs through pointers where TMA cannot serve (and in Triton's interpreter, "
                         "without an interpreter config)")
                state.errors.error(
                    f"the {role} config sets '{param}' = {value.text}: {where}, whose tiles are powers of two; "
                    "make it a power of two",
                    value.span,
                )
                break
        if why is None:
            continue
        for value in values:
            state.errors.error(
                f"block size '{param}' = {value.text} is not a power of two: a block of a sum of two (held as two "
                f"pieces) needs {why}",
                value.span,
            )


def check_chunks(state: CheckState) -> None:
    """``k over D1 by BK whole``: each program covers all of ``D1`` in a loop over tiles of ``BK``,
    which :func:`tilegen.row_loops.loop_rows` writes; the body must be one it takes (reductions
    that merge across tiles, elementwise work, stores), and so must the grid: one whole axis,
    pointers. Raises nothing: problems go to ``state.errors``."""
    chunked = [(a, a.chunk) for a in state.spec.grid if a.chunk is not None]
    if not chunked or loop_rows(state.spec) is not None:
        return
    axis, chunk = chunked[0]
    state.errors.error(
        f"'{axis.name.id} over {extent_text(axis)} by {chunk.id} whole' walks {extent_text(axis)} in tiles of "
        f"{chunk.id}, which this spec's body cannot take: it needs one whole axis, pointer access, "
        "no dtype variables, offsets, loops, tile declarations, '+=', gathers, dots or scans, each local "
        f"assigned once; write '{axis.name.id} over {extent_text(axis)} whole' to hold the row in one tile",
        axis.span,
    )
