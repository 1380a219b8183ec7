"""Row pieces: a block of a flat grid's rows that is not a power of two, held as two tiles.

Where a config sets the rows' block to a sum of two powers of two (192 = 128 + 64), the kernel
holds the rows' accumulator as two tiles (its pieces), each with its own loads and store of the
tensors tiled along the rows. Functions of the :class:`~tilegen.lower.state.KernelState` they
read and set (``pieces``, ``piece_infos``, ``piece``, ``renames``); the other parts ask
:func:`pieced` whether an access spans the rows and lower it once per piece (:func:`each_piece`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from tilegen import model as m
from tilegen.lower.names import pieced_block
from tilegen.lower.plan import Comment, IfBlock, Line, Op, PiecePlan
from tilegen.lower.state import KernelState


def pieces_setup(state: KernelState) -> list[Op]:
    """Where a config sets the block of a flat grid's rows to a sum of two powers of two
    (192 = 128 + 64; the checker allows no other), the tile function's constexprs of its two
    row pieces: ``BM_1 = BM & -BM`` (the lowest power of two in it) where BM is not a power
    of two, else 0 (one piece), and ``BM_0 = BM - BM_1``. Triton's tiles are powers of two;
    a tile of 192 rows is held as an accumulator of 128 rows and one of 64, each with its own
    ``a`` tile and store, both taking the same ``b`` tile of each step (as cuBLAS's 192 x 128
    tiles fill the H100's waves where power-of-two tiles leave it partly idle). Empty where
    every value of the block is a power of two."""
    block = pieced_block(state.spec)
    if block is None or state.spec.access_style != "descriptor":
        return []
    rows = state.spec.grid[0].name.id
    accesses = [a for stmt in m.statements(state.spec.body) for a in m.accesses(stmt)]
    tensors = dict.fromkeys(a.tensor.id for a in accesses if pieced(state, a.index, rows))
    first, second = state.fresh(f"{block}_0"), state.fresh(f"{block}_1")
    state.pieces = PiecePlan(block, tuple(tensors), (first, second))
    info = state.axes[rows]
    state.piece_infos = (replace(info, tile=first), replace(info, tile=second, start=f"{info.start} + {first}"))
    return [
        Comment(f"{block} rows in two power-of-two pieces where {block} is not a power of two (192 = 128 + 64):"),
        Comment(f"{first} rows, then {second} through the *_piece_desc descriptors ({second} = 0: one piece)"),
        Line(f"{second}: tl.constexpr = {block} & -{block} if {block} & ({block} - 1) else 0"),
        Line(f"{first}: tl.constexpr = {block} - {second}"),
    ]


def pieced(state: KernelState, index: Iterable[m.Name | m.Expr], rows: str | None = None) -> bool:
    """Whether an access or a tile with these axes spans the rows held as two pieces (or
    the axis ``rows``)."""
    rows = rows or piece_rows(state)
    return rows is not None and any(isinstance(i, m.Name) and i.id == rows for i in index)


def piece_rows(state: KernelState) -> str | None:
    """The grid axis whose tiles are held as two row pieces; None where there are none."""
    return state.spec.grid[0].name.id if state.pieces is not None else None


@contextmanager
def in_piece(state: KernelState, number: int) -> Iterator[None]:
    """Lower the statements of this block for row piece ``number`` (0 or 1): the rows axis
    has that piece's tile and first row; in the second, locals over it take their second
    piece's names (:func:`local_name`) and tensors tiled along it their ``_piece_desc``."""
    rows = state.spec.grid[0].name.id
    whole = state.axes[rows]
    state.axes[rows], state.piece = state.piece_infos[number], number
    try:
        yield
    finally:
        state.axes[rows], state.piece = whole, None


def local_name(state: KernelState, name: str) -> str:
    """A local's name in the piece being lowered: ``acc`` in the first, ``acc_1`` in the second
    (made on first use) for a local over the rows axis."""
    if state.piece != 1 or piece_rows(state) not in state.locals.get(name, ()):
        return name
    if name not in state.renames:
        state.renames[name] = state.fresh(f"{name}_1")
    return state.renames[name]


def each_piece(state: KernelState, lower: Callable[[], Iterable[Op]], why: str) -> list[Op]:
    """``lower()`` (a function returning ops) for the first piece, then for the second under
    ``if BM_1 > 0`` (a constexpr: compiled only where the block has two pieces)."""
    assert state.pieces is not None, "no row pieces"
    with in_piece(state, 0):
        ops = list(lower())
    with in_piece(state, 1):
        second = tuple(lower())
    return [*ops, IfBlock(f"{state.pieces.rows[1]} > 0", why, second)]

