"""``split tail``: the body as a tile function the kernel calls at the whole block shape, and at
half or a quarter of it for the tiles of the last partial wave.

Functions of the :class:`~tilegen.lower.state.KernelState` after the body is lowered (they read
the flat grid's names: ``pid``, ``tile_id``, ``num_tiles``, ``tile_map``, ``tile_pids``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tilegen.lower.checked import block_of
from tilegen.lower.names import call_text
from tilegen.lower.plan import Comment, ForLoop, IfBlock, KernelParam, KernelPlan, Line, Op, TailPlan
from tilegen.lower.state import KernelState


def tail_split(
    state: KernelState, params: tuple[tuple[KernelParam, ...], ...], body: list[Op]
) -> tuple[TailPlan, list[Op]]:
    """``split tail``: the tile function (``body``: one output tile at ``pid_m``, ``pid_n`` in
    units of its block constexprs) and the kernel's ops after the grid setup, which map the
    program to a tile, or to a sub-tile of a tile of the last partial wave, and call it.

    The launcher launches ``whole + tail * sub-tiles`` programs (``_tail_split``): the first
    ``whole`` compute a tile each, in grouped order; the rest a sub-tile each of the ``tail``
    tiles of the last wave (``num_tiles % NUM_SMS``), so that the last wave fills the GPU. A
    descriptor kernel reads the sub-tiles (TAIL_M x TAIL_N, a constexpr) from the block shape of
    a tail descriptor the launcher made for them (:func:`descriptor_dispatch`); a pointer kernel
    reads their number from its grid and compiles a call for each split the launcher may
    choose (:func:`grid_dispatch`)."""
    spec = state.spec
    first, second = spec.grid
    bm, bn = block_of(first), block_of(second)
    used = _names_used(body)  # the tile function takes the kernel's arguments its body reads
    own = tuple(g for g in (tuple(p for p in group if p.name in used) for group in params) if g)
    pid_m, pid_n = state.tile_pids
    doc = (
        f"One output tile of {spec.path}: tile ({pid_m}, {pid_n}) of {bm} x {bn}. {spec.name.id}_kernel calls it "
        "at its block shape, and at half or a quarter of it for the tiles of its last partial wave (split tail)."
    )
    function = KernelPlan(
        f"{spec.name.id}_tile", ((KernelParam(pid_m), KernelParam(pid_n)), *own), tuple(body), doc, None, (), (),
        state.bf16_dot, state.int64,
    )
    descriptors: tuple[str, ...] = ()
    carrier, positions = "", (0, 1)
    if spec.access_style == "descriptor":  # tensors tiled along a grid axis get a tail descriptor
        blocks = state.descriptor_blocks
        descriptors = tuple(t.name.id for t in spec.arrays if {bm, bn} & set(blocks.get(t.name.id, ())))
        # an output stored over both axes (the checker asks for one), in its own order
        carrier = next(t for t in descriptors if t not in state.transposed and {bm, bn} <= set(blocks[t]))
        positions = (blocks[carrier].index(bm), blocks[carrier].index(bn))
    call = _TileCall(function.name, own, (bm, bn), descriptors, carrier)
    tail, whole, tiles = state.fresh("tail_tiles"), state.fresh("whole_tiles"), state.num_tiles
    ops: list[Op] = [
        state.comment(spec.split_tail[0]),
        Line(f"{tail} = {tiles} % NUM_SMS if {tiles} > NUM_SMS else 0  # the last partial wave's tiles"),
        Line(f"{whole} = {tiles} - {tail}"),
    ]
    if descriptors:
        ops += descriptor_dispatch(state, call, whole, f"{carrier}_tail_desc", positions)
    else:
        ops += grid_dispatch(state, call, tail, whole)
    dims = ((first.dim.id, bm), (second.dim.id, bn))
    return TailPlan(dims, function, descriptors, carrier, positions), ops


def descriptor_dispatch(
    state: KernelState, call: _TileCall, whole: str, tail_desc: str, positions: tuple[int, int]
) -> list[Op]:
    """A descriptor kernel's tail: TAIL_M x TAIL_N from the block shape of ``tail_desc`` (None
    where the launch does not split), one call at the whole block shape and one at the sub-tiles'."""
    (bm, bn), (pid_m, pid_n), pid, sub = call.blocks, state.tile_pids, state.pid, state.fresh("sub_tile")
    shape = f"{tail_desc}.block_shape"
    return [
        Comment("each tail tile runs as TAIL_M x TAIL_N sub-tiles, a program each: the launcher's choice,"),
        Comment(f"which the block shape of {tail_desc} carries (constexprs; None where the launch does not"),
        Comment("split: then only the whole tiles' call compiles)"),
        *(Line(f"TAIL_{axis}: tl.constexpr = 1 if {tail_desc} is None else {block} // {shape}[{at}]")
          for axis, block, at in (("M", bm, positions[0]), ("N", bn, positions[1]))),
        Line(f"{state.tile_id} = {pid} if {pid} < {whole} else {whole} + ({pid} - {whole}) // (TAIL_M * TAIL_N)"),
        Line(f"{sub} = ({pid} - {whole}) % (TAIL_M * TAIL_N)"),
        *state.tile_map,
        IfBlock(
            f"TAIL_M * TAIL_N == 1 or {pid} < {whole}",
            "",
            (call((pid_m, pid_n), (bm, bn)),),
            (
                Comment("a sub-tile of a tail tile: its coordinates and blocks in sub-tiles"),
                call(
                    (f"{pid_m} * TAIL_M + {sub} // TAIL_N", f"{pid_n} * TAIL_N + {sub} % TAIL_N"),
                    (f"{bm} // TAIL_M", f"{bn} // TAIL_N"),
                    sub=True,
                ),
            ),
        ),
    ]


def grid_dispatch(state: KernelState, call: _TileCall, tail: str, whole: str) -> list[Op]:
    """A pointer (or block-pointer) kernel's tail: the number of sub-tiles from the grid, and a
    call for each split the launcher may choose (quarters, halves of the longer side), each
    compiled only where its blocks stay 16 or more, as the launcher's rule does."""
    (bm, bn), (pid_m, pid_n), pid = call.blocks, state.tile_pids, state.pid
    sub, subs = state.fresh("sub_tile"), state.fresh("sub_tiles")
    quarter = call((f"{pid_m} * 2 + {sub} // 2", f"{pid_n} * 2 + {sub} % 2"), (f"{bm} // 2", f"{bn} // 2"))
    half_m = call((f"{pid_m} * 2 + {sub}", pid_n), (f"{bm} // 2", bn))
    half_n = call((pid_m, f"{pid_n} * 2 + {sub}"), (bm, f"{bn} // 2"))
    sixteen = "constexprs: the launcher splits no block below 16"
    return [
        Comment("each tail tile runs as 1, 2 or 4 sub-tiles, a program each: the launcher's choice, read"),
        Comment("from the grid"),
        Line(f"{subs} = max((tl.num_programs(0) - {whole}) // max({tail}, 1), 1)"),
        Line(f"{state.tile_id} = {pid} if {pid} < {whole} else {whole} + ({pid} - {whole}) // {subs}"),
        Line(f"{sub} = ({pid} - {whole}) % {subs}"),
        *state.tile_map,
        IfBlock(
            f"{pid} < {whole} or {subs} == 1",
            "",
            (call((pid_m, pid_n), (bm, bn)),),
            (
                IfBlock(
                    f"{subs} == 4",
                    "quarters",
                    (IfBlock(f"{bm} >= 32 and {bn} >= 32", sixteen, (quarter,)),),
                    (
                        IfBlock(
                            f"{bm} >= {bn}",
                            "halves of the longer side",
                            (IfBlock(f"{bm} >= 32", sixteen, (half_m,)),),
                            (IfBlock(f"{bn} >= 32", sixteen, (half_n,)),),
                        ),
                    ),
                ),
            ),
        ),
    ]


@dataclass(frozen=True)
class _TileCall:
    """A kernel's call of its tile function (``split tail``): the kernel arguments the function takes
    passed through (``params``, grouped as in the signature), but the tile coordinates, the two
    grid axes' blocks (``blocks``) and, for a sub-tile, the tail descriptors of ``descriptors``
    (the carrier's as it is; the others None where the split leaves their blocks whole)."""

    function: str
    params: tuple[tuple[KernelParam, ...], ...]
    blocks: tuple[str, str]
    descriptors: tuple[str, ...] = ()
    carrier: str = ""

    def __call__(self, coords: tuple[str, str], blocks: tuple[str, str], sub: bool = False) -> Line:
        swap = dict(zip(self.blocks, blocks, strict=True))
        for t in self.descriptors if sub else ():
            desc, tail_desc = f"{t}_desc", f"{t}_tail_desc"
            swap[desc] = tail_desc if t == self.carrier else f"({desc} if {tail_desc} is None else {tail_desc})"
        groups = [coords, *(tuple(swap.get(p.name, p.name) for p in group) for group in self.params)]
        return Line(call_text(self.function, groups))


def _names_used(ops: Iterable[Op]) -> set[str]:
    """Every name the code of ``ops`` mentions (comments aside), nested bodies included."""
    found: set[str] = set()
    for op in ops:
        texts = {Line: ("code",), ForLoop: ("var", "iterable"), IfBlock: ("condition",)}.get(type(op), ())
        for attribute in texts:
            found |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", getattr(op, attribute)))
        for attribute in ("body", "orelse"):
            found |= _names_used(getattr(op, attribute, ()))
    return found


