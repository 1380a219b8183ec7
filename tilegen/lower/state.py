"""The state of one kernel's lowering, which its parts share explicitly.

:class:`KernelState` is what lowering a spec's kernel learns and decides as it goes: the names
taken, what the kernel calls each axis (:class:`AxisInfo`), the locals and their shapes, the masks
and loads of the scope being lowered, the helpers called, the constexprs the launcher must set.
Each part of the kernel lowering takes it as an argument (functions) or holds a reference to it
(small classes): :mod:`~tilegen.lower.grid` (program ids, offsets, masks), :mod:`~tilegen.lower.pieces`
(row pieces), :mod:`~tilegen.lower.access` (pointers, block pointers, descriptors, loads),
:mod:`~tilegen.lower.expressions` (arithmetic, calls, reductions), :mod:`~tilegen.lower.statements`
and :mod:`~tilegen.lower.loops` (statements, loops), :mod:`~tilegen.lower.tail` (``split tail``)
and :mod:`~tilegen.lower.kernel`, which assembles the :class:`~tilegen.lower.plan.KernelPlan`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tilegen import model as m
from tilegen.across import Across
from tilegen.functions import HELPERS
from tilegen.lower.names import printable, size_symbols, whole_dims
from tilegen.lower.plan import Comment, Op, PiecePlan, SplitPlan
from tilegen.lower.scaled import Factor, reduced_locals

if TYPE_CHECKING:  # the walk holds the state: a cycle for the type checker only
    from tilegen.lower.ordered import OrderedWalk

#: Kernel constexpr: offsets in 64 bits (the launcher sets it for tensors of 2**31+ elements).
#: Shared by the kernel (:func:`tilegen.lower.grid.int64_casts`) and the launcher, which imports
#: it through :mod:`tilegen.lower.kernel`.
INT64_FLAG = "INT64_OFFSETS"

#: Kernel constexpr of a grid of two or three program ids: the launcher ran every program along
#: program id 0, whose grid had more programs along id 1 or 2 than a launch may have there (CUDA's
#: 65535, ``MAX_GRID_YZ`` in the runtime); the kernel then reads each axis's program id from id 0
#: (:func:`tilegen.lower.grid.folded_pids`). Set by the launcher (:func:`tilegen.lower.grid.fold_condition`).
FOLD_FLAG = "FOLDED_GRID"

#: Kernel constexprs of a descriptor kernel's ``split tail``: each tail tile's sub-tiles along each axis.
TAIL_FLAGS = ("TAIL_M", "TAIL_N")

#: Kernel constexpr of a tuned persistent kernel whose configs give ``num_stages``: the tile loop's
#: ``tl.range(..., num_stages=LOOP_STAGES)``, each config's num_stages (None where it gives none).
#: Triton pipelines the loads of a loop without dots only where the loop says how deep
#: (c43ff28:benchmarks/explore/explore_persistent_loop_h100.log: rms_norm's backward 37.8 us with it, 42.1 without).
LOOP_STAGES = "LOOP_STAGES"

#: A load as :attr:`KernelState.loads` keys it: the load's :func:`~tilegen.model.expr_key`, the
#: axes of the tile it is broadcast to, and what its masked-off lanes read (``other=``), if given.
LoadKey = tuple[tuple[object, ...], tuple[str, ...], str | None]


def pipelines_tiles(spec: m.Spec) -> bool:
    """Whether ``spec``'s kernel takes :data:`LOOP_STAGES`: programs walking row tiles (``grid
    persistent r over M by BM, c over N whole``; a flat persistent grid's loop holds the dots,
    which Triton pipelines at the config's num_stages already), tuned, with a config that gives
    ``num_stages``."""
    return spec.walks_rows and spec.tune is not None and any(c.get("num_stages") is not None
                                                             for c in spec.tune.configs)


@dataclass
class AxisInfo:
    """What the kernel calls one axis.

    ``offs``/``mask`` serve stores (and loads of plain axes); ``load_offs``/``load_mask``
    serve loads (they differ for wrapped axes). ``start`` is the tile's first index (block
    pointer offsets); ``scalar`` marks an index axis, whose ``offs`` is one program id.
    ``mask`` is None for an unmasked axis and ``"checked"`` where block pointers or descriptors
    check the bounds themselves.
    """

    offs: str
    mask: str | None
    dim: str
    tile: str
    start: str
    load_offs: str = ""
    load_mask: str | None = None
    scalar: bool = False

    def __post_init__(self) -> None:
        if not self.load_offs:
            self.load_offs = self.offs
            self.load_mask = self.mask


@dataclass
class KernelState:
    """Everything the kernel lowering of one checked ``spec`` decides and reads back as it goes.

    Made once per kernel (:func:`tilegen.lower.kernel.lower_kernel`); the parts mutate it in
    place. Construction reserves the names the kernel must not take for its own (tensors'
    pointers and descriptors, params, sizes, helpers, the launcher's constexprs, the spec's
    locals) and names the tile constexpr of each ``whole`` dimension.
    """

    spec: m.Spec
    taken: set[str] = field(default_factory=set)  # every name in use: fresh() goes around them
    axes: dict[str, AxisInfo] = field(default_factory=dict)  # grid or loop axis -> its names
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)  # local -> its tile axes
    dtypes: dict[str, str | None] = field(default_factory=dict)  # local -> spec dtype if known
    written: dict[str, str | None] = field(default_factory=dict)  # local -> its Triton dtype text (T) if known
    masks: dict[str, str] = field(default_factory=dict)  # combined mask expression -> variable
    canonical: dict[str, str] = field(default_factory=dict)  # swizzled alias -> its grid axis
    helpers: set[str] = field(default_factory=set)  # HELPERS the kernel calls
    whole_blocks: dict[str, str] = field(default_factory=dict)  # 'whole' dimension -> its tile constexpr
    loads: dict[LoadKey, str] = field(default_factory=dict)  # (load key, context, fill) -> tile loaded in scope
    hoisted_loads: set[LoadKey] = field(default_factory=set)  # keys of loads placed before a loop
    # causal guard (its expr_key) -> True where it holds in the whole loop range, None where it may not
    known_conditions: dict[tuple[object, ...], bool | None] = field(default_factory=dict)
    # (axis, ops before its loop) of each enclosing tile loop
    hoists: list[tuple[str, list[Op]]] = field(default_factory=list)
    bf16_dot: bool = False  # some dot takes bf16 operands (the interpreter upcasts them)
    contracted: set[str] = field(default_factory=set)  # the dimensions some dot contracts over
    int64: bool = False  # the kernel takes INT64_OFFSETS
    folded: bool = False  # the kernel takes FOLDED_GRID
    # tensor -> its descriptor's block shape
    descriptor_blocks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # outputs whose descriptor store may be split in halves of its columns (see Statements.store_tile)
    subtiled: set[str] = field(default_factory=set)
    # 2D input -> constexpr: column-major, descriptor of its .T
    transposed: dict[str, str] = field(default_factory=dict)
    split: SplitPlan | None = None  # the split loop (set by kernel_params)
    split_pid: str = ""  # the program's part of a split loop (``pid_k``), once lowered
    split_parts: str = ""  # the number of parts (``split_k``)
    reduced: frozenset[str] = frozenset()  # locals some max/min reduces directly (see scaled.py)
    # local -> (its unscaled tile, factor text, Factor) in this scope
    scaled: dict[str, tuple[str, str, Factor]] = field(default_factory=dict)
    sign_flags: dict[str, str] = field(default_factory=dict)  # float scalar input -> constexpr: it is >= 0
    # optional input -> constexpr: the caller gave it (else its loads are its number, see Access.load)
    given_flags: dict[str, str] = field(default_factory=dict)
    # a count's output -> (its extent, constexpr: the bins of a per-program histogram, 0 for atomics per lane)
    histograms: dict[str, tuple[str, str]] = field(default_factory=dict)
    # running extremum of the loop being lowered -> (its identity, -inf, the name of its guarded
    # copy in this loop range once made, else ""): see Loops.online_extrema
    online: dict[str, tuple[float, str]] = field(default_factory=dict)
    # a flat grid's names (grid.flat_setup, grid.flat_pids)
    pid: str = ""  # the program id (``pid``; ``start_pid`` persistent)
    num_a: str = ""  # tiles along the first axis (``num_pid_m``)
    num_b: str = ""  # tiles along the second axis (``num_pid_n``)
    num_tiles: str = ""  # their product (persistent or split tail)
    in_group: str = ""  # ``num_pid_in_group`` (swizzled)
    tile_id: str = ""  # the tile the program computes (``tile_id`` persistent or split tail, else ``pid``)
    tile_map: list[Op] = field(default_factory=list)  # split tail: the tile id -> pid_m, pid_n lines
    tile_pids: tuple[str, ...] = ()  # split tail: (pid_m, pid_n), the tile function's coordinates
    pieces: PiecePlan | None = None  # a block of the rows held as two pieces (see pieces.pieces_setup)
    piece_infos: tuple[AxisInfo, ...] = ()  # the rows axis's AxisInfo in each piece
    piece: int | None = None  # the piece being lowered (see pieces.in_piece)
    renames: dict[str, str] = field(default_factory=dict)  # local -> its name in the piece being lowered
    pids: dict[str, str] = field(default_factory=dict)  # grid axis -> its program id (a plain grid; grid.grid_ops)
    # launched grid axis of a plain grid -> its number of programs (``tl.cdiv(N, BN)``, or ``B`` for an
    # index axis: the count itself, which a folded launch keeps; grid.grid_ops)
    num_programs: dict[str, str] = field(default_factory=dict)
    across: dict[int, Across] = field(default_factory=dict)  # id of a store that reduces across programs -> its Across
    # a persistent walk over rows: each across-programs partial carried over the program's tiles,
    # started before the tile loop (``carried``) and stored after it (``after_tiles``)
    carried: list[Op] = field(default_factory=list)
    after_tiles: list[Op] = field(default_factory=list)
    walk: OrderedWalk | None = None  # a deterministic kernel's walk over sorted tokens (lower_kernel makes it)

    def __post_init__(self) -> None:
        spec = self.spec
        # Tensor names stay free: the kernel calls their pointers ``<name>_ptr`` and the first
        # tile loaded from a tensor takes the tensor's own name, as the seeds do (``a = tl.load``).
        self.taken |= {f"{t.name.id}_ptr" for t in spec.arrays} | {p.name.id for p in spec.params}
        self.taken |= {f"{t.name.id}_{s}" for t in spec.arrays for s in ("desc", "tail_desc", "piece_desc")}
        self.taken |= {t.name.id for t in spec.tensors if t.is_scalar}
        self.taken |= set(size_symbols(spec)) | set(HELPERS)
        self.taken |= {INT64_FLAG, FOLD_FLAG, "NUM_SMS", LOOP_STAGES, *TAIL_FLAGS}
        for choice in spec.choices:
            self.taken |= {choice.constexpr, f"apply_{choice.name.id}"}
        # The spec's own tile variables keep their names; generated ones go around them.
        self.reduced = reduced_locals(spec)
        self.taken |= {s.name.id for s in m.statements(spec.body) if isinstance(s, (m.Declare, m.Assign))}
        for t in spec.inputs:
            if t.optional:
                self.given_flags[t.name.id] = self.fresh(f"HAS_{t.name.id.upper()}")
        for dim in whole_dims(spec):  # the tile of a whole axis: N rounded up to a power of two
            # a launcher local too, so it must not take an input's name either
            self.whole_blocks[dim] = self.fresh(f"BLOCK_{dim}", avoid={t.name.id for t in spec.tensors})

    def fresh(self, base: str, avoid: Collection[str] = frozenset()) -> str:
        """A generated name starting with ``base`` that clashes with nothing else (nor ``avoid``)."""
        name, n = base, 1
        while name in self.taken or name in avoid:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def comment(self, span: m.Span) -> Comment:
        """The comment naming the spec line at ``span`` (``# specs/x.tile:7: grid ...``)."""
        line = m.source_lines(self.spec.source)[span.line - 1]
        return Comment(f"{self.spec.path}:{span.line}: {printable(line)}")
