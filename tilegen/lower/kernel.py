"""Kernel lowering: a checked spec -> the ``@triton.jit`` function as a :class:`KernelPlan`.

Every name, offset, mask and pointer expression is decided here. Generated names follow the
seeds (``pid_m``, ``offs_m``, ``mask_m``, ``a_ptrs``, ``acc``, the tutorial's
``num_pid_in_group``/``group_id``/``first_pid_m``); each one is checked against the spec's own
names so nothing a user writes can be shadowed.
"""

from __future__ import annotations

import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

from tilegen import model as m
from tilegen.functions import HELPERS
from tilegen.lower.access import AccessLowering
from tilegen.lower.exp2 import fold_exp2
from tilegen.lower.expressions import ExpressionLowering
from tilegen.lower.names import (
    BF16_DOT_OPERAND,
    broadcast,
    call_text,
    dtype_bindings,
    dtype_options,
    number_text,
    pieced_block,
    printable,
    size_symbols,
    stride_name,
    triton_dtype,
    tuple_text,
    whole_dims,
)
from tilegen.lower.plan import (
    ChoicePlan,
    Comment,
    ForLoop,
    HelperPlan,
    IfBlock,
    KernelParam,
    KernelPlan,
    Line,
    Op,
    PiecePlan,
    SplitPlan,
    TailPlan,
    TunePlan,
)
from tilegen.lower.ranges import (
    find_guard,
    guard_steps,
    lanes_past_end_are_guarded,
    skips_when_false,
    splits_full_tiles,
)
from tilegen.lower.scaled import reduced_locals, split_product

#: Kernel constexpr: offsets in 64 bits (the launcher sets it for tensors of 2**31+ elements).
INT64_FLAG = "INT64_OFFSETS"

#: Kernel constexprs of a descriptor kernel's ``split tail``: each tail tile's sub-tiles along each axis.
TAIL_FLAGS = ("TAIL_M", "TAIL_N")

#: Default slope of ``leaky_relu`` (Triton tutorial 03, torch's default).
LEAKY_RELU_SLOPE = "0.01"

def config_text(spec: m.Spec, config: m.Config) -> str:
    """``triton.Config({...}, num_warps=4, num_stages=3)`` for one config; tuned parameters a
    config leaves out take their default, so every config sets every tuned parameter."""
    meta = []
    for name in spec.tuned_params:
        value = config.get(name) or next(p.default for p in spec.params if p.name.id == name)
        meta.append(f'"{name}": {value.text}')
    options = [f"{o}={v.text}" for o in m.LAUNCH_OPTIONS if (v := config.get(o)) is not None]
    if spec.access_style == "descriptor":  # the descriptors' block shapes follow the config
        options.append("pre_hook=_descriptor_blocks")
    return ", ".join(["triton.Config({" + ", ".join(meta) + "}", *options]) + ")"


@dataclass
class AxisInfo:
    """What the kernel calls one axis.

    ``offs``/``mask`` serve stores (and loads of plain axes); ``load_offs``/``load_mask``
    serve loads (they differ for wrapped axes). ``start`` is the tile's first index (block
    pointer offsets); ``scalar`` marks an index axis, whose ``offs`` is one program id.
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
class KernelLowering(AccessLowering, ExpressionLowering):
    """Builds the :class:`KernelPlan` of one checked spec (use :func:`lower_kernel`)."""

    spec: m.Spec
    taken: set[str] = field(default_factory=set)
    axes: dict[str, AxisInfo] = field(default_factory=dict)
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dtypes: dict[str, str | None] = field(default_factory=dict)  # local -> spec dtype if known
    masks: dict[str, str] = field(default_factory=dict)  # combined mask expression -> variable
    canonical: dict[str, str] = field(default_factory=dict)  # swizzled alias -> its grid axis
    helpers: set[str] = field(default_factory=set)
    whole_blocks: dict[str, str] = field(default_factory=dict)  # 'whole' dimension -> its tile constexpr
    loads: dict[tuple, str] = field(default_factory=dict)  # (load key, context, fill) -> tile loaded in scope
    hoisted_loads: set = field(default_factory=set)  # keys of loads placed before a loop
    known_conditions: dict = field(default_factory=dict)  # causal guard (expr_key) -> True in this loop range
    hoists: list = field(default_factory=list)  # (axis, ops before its loop) of each enclosing tile loop
    bf16_dot: bool = False
    int64: bool = False  # the kernel takes INT64_OFFSETS
    descriptor_blocks: dict = field(default_factory=dict)  # tensor -> its descriptor's block shape
    transposed: dict = field(default_factory=dict)  # 2D input -> constexpr: column-major, descriptor of its .T
    split: SplitPlan | None = None  # the split loop (set by kernel_params)
    split_pid: str = ""  # the program's part of a split loop (``pid_k``), once lowered
    split_parts: str = ""  # the number of parts (``split_k``)
    reduced: frozenset = frozenset()  # locals some max/min reduces directly (see scaled.py)
    scaled: dict = field(default_factory=dict)  # local -> (its unscaled tile, factor text, Factor) in this scope
    sign_flags: dict = field(default_factory=dict)  # float scalar input -> constexpr: it is >= 0
    tile_map: list = field(default_factory=list)  # split tail: the tile id -> pid_m, pid_n lines
    tile_pids: tuple = ()  # split tail: (pid_m, pid_n), the tile function's coordinates
    pieces: PiecePlan | None = None  # a block of the rows held as two pieces (see pieces_setup)
    piece_infos: tuple = ()  # the rows axis's AxisInfo in each piece
    piece: int | None = None  # the piece being lowered (see in_piece)
    renames: dict = field(default_factory=dict)  # local -> its name in the piece being lowered

    def __post_init__(self) -> None:
        spec = self.spec
        # Tensor names stay free: the kernel calls their pointers ``<name>_ptr`` and the first
        # tile loaded from a tensor takes the tensor's own name, as the seeds do (``a = tl.load``).
        self.taken |= {f"{t.name.id}_ptr" for t in spec.arrays} | {p.name.id for p in spec.params}
        self.taken |= {f"{t.name.id}_{s}" for t in spec.arrays for s in ("desc", "tail_desc", "piece_desc")}
        self.taken |= {t.name.id for t in spec.tensors if t.is_scalar}
        self.taken |= set(size_symbols(spec)) | set(HELPERS) | {INT64_FLAG, "NUM_SMS", *TAIL_FLAGS}
        for choice in spec.choices:
            self.taken |= {choice.constexpr, f"apply_{choice.name.id}"}
        # The spec's own tile variables keep their names; generated ones go around them.
        self.reduced = reduced_locals(spec)
        self.taken |= {s.name.id for s in m.statements(spec.body) if isinstance(s, (m.Declare, m.Assign))}
        for dim in whole_dims(spec):  # the tile of a whole axis: N rounded up to a power of two
            # a launcher local too, so it must not take an input's name either
            self.whole_blocks[dim] = self.fresh(f"BLOCK_{dim}", avoid={t.name.id for t in spec.tensors})

    # names -----------------------------------------------------------------------
    def fresh(self, base: str, avoid: set[str] = frozenset()) -> str:
        """A generated name starting with ``base`` that clashes with nothing else (nor ``avoid``)."""
        name, n = base, 1
        while name in self.taken or name in avoid:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def comment(self, span: m.Span) -> Comment:
        line = m.source_lines(self.spec.source)[span.line - 1]
        return Comment(f"{self.spec.path}:{span.line}: {printable(line)}")

    # row pieces ------------------------------------------------------------------
    def pieces_setup(self) -> list[Op]:
        """Where a config sets the block of a flat grid's rows to a sum of two powers of two
        (192 = 128 + 64; the checker allows no other), the tile function's constexprs of its two
        row pieces: ``BM_1 = BM & -BM`` (the lowest power of two in it) where BM is not a power
        of two, else 0 (one piece), and ``BM_0 = BM - BM_1``. Triton's tiles are powers of two;
        a tile of 192 rows is held as an accumulator of 128 rows and one of 64, each with its own
        ``a`` tile and store, both taking the same ``b`` tile of each step (as cuBLAS's 192 x 128
        tiles fill the H100's waves where power-of-two tiles leave it partly idle). Empty where
        every value of the block is a power of two."""
        block = pieced_block(self.spec)
        if block is None or self.spec.access_style != "descriptor":
            return []
        rows = self.spec.grid[0].name.id
        accesses = [a for stmt in m.statements(self.spec.body) for a in m.accesses(stmt)]
        tensors = dict.fromkeys(a.tensor.id for a in accesses if self.pieced(a.index, rows))
        first, second = self.fresh(f"{block}_0"), self.fresh(f"{block}_1")
        self.pieces = PiecePlan(block, tuple(tensors), (first, second))
        info = self.axes[rows]
        self.piece_infos = (replace(info, tile=first), replace(info, tile=second, start=f"{info.start} + {first}"))
        return [
            Comment(f"{block} rows in two power-of-two pieces where {block} is not a power of two (192 = 128 + 64):"),
            Comment(f"{first} rows, then {second} through the *_piece_desc descriptors ({second} = 0: one piece)"),
            Line(f"{second}: tl.constexpr = {block} & -{block} if {block} & ({block} - 1) else 0"),
            Line(f"{first}: tl.constexpr = {block} - {second}"),
        ]

    def pieced(self, index, rows: str | None = None) -> bool:
        """Whether an access or a tile with these axes spans the rows held as two pieces (or
        the axis ``rows``)."""
        rows = rows or self.piece_rows()
        return rows is not None and any(isinstance(i, m.Name) and i.id == rows for i in index)

    def piece_rows(self) -> str | None:
        """The grid axis whose tiles are held as two row pieces; None where there are none."""
        return self.spec.grid[0].name.id if self.pieces is not None else None

    @contextmanager
    def in_piece(self, number: int):
        """Lower the statements of this block for row piece ``number`` (0 or 1): the rows axis
        has that piece's tile and first row; in the second, locals over it take their second
        piece's names (:meth:`local_name`) and tensors tiled along it their ``_piece_desc``."""
        rows = self.spec.grid[0].name.id
        whole = self.axes[rows]
        self.axes[rows], self.piece = self.piece_infos[number], number
        try:
            yield
        finally:
            self.axes[rows], self.piece = whole, None

    def local_name(self, name: str) -> str:
        """A local's name in the piece being lowered: ``acc`` in the first, ``acc_1`` in the second
        (made on first use) for a local over the rows axis."""
        if self.piece != 1 or self.piece_rows() not in self.locals.get(name, ()):
            return name
        if name not in self.renames:
            self.renames[name] = self.fresh(f"{name}_1")
        return self.renames[name]

    def each_piece(self, lower, why: str) -> list[Op]:
        """``lower()`` (a function returning ops) for the first piece, then for the second under
        ``if BM_1 > 0`` (a constexpr: compiled only where the block has two pieces)."""
        with self.in_piece(0):
            ops = list(lower())
        with self.in_piece(1):
            second = tuple(lower())
        return [*ops, IfBlock(f"{self.pieces.rows[1]} > 0", why, second)]

    # signature -------------------------------------------------------------------
    def kernel_params(self) -> tuple[tuple[KernelParam, ...], ...]:
        spec = self.spec
        whole = whole_dims(spec)
        descriptors = spec.access_style == "descriptor"  # shape and strides live in the descriptor
        pointers = tuple(KernelParam(f"{t.name.id}_desc" if descriptors else f"{t.name.id}_ptr") for t in spec.arrays)
        sizes = tuple(KernelParam(d) for d in size_symbols(spec))
        scalars = tuple(KernelParam(t.name.id) for t in spec.inputs if t.is_scalar)
        strides = () if descriptors else tuple(
            tuple(KernelParam(stride_name(t, i)) for i in range(len(t.dims))) for t in spec.arrays
        )
        consts = tuple(KernelParam(p.name.id, True) for p in spec.params)
        consts += tuple(KernelParam(self.whole_blocks[d], True) for d in whole)
        consts += tuple(KernelParam(c.constexpr, True) for c in spec.choices)
        if descriptors:  # a 2D input read in 2D tiles may come column-major (b = w.t()): the launcher says which
            index_axes = {a.name.id for a in spec.grid if a.is_index}
            accesses = [a for stmt in m.statements(spec.body) for a in m.accesses(stmt)]
            for t in spec.inputs:
                indexes = [a.index for a in accesses if a.tensor.id == t.name.id]
                tiles_only = all(isinstance(i, m.Name) and i.id not in index_axes for index in indexes for i in index)
                if len(t.dims) == 2 and tiles_only:
                    self.transposed[t.name.id] = self.fresh(f"{t.name.id.upper()}_T")
            consts += tuple(KernelParam(flag, True) for flag in self.transposed.values())
        if spec.persistent or spec.split_tail:
            consts += (KernelParam("NUM_SMS", True),)
        loop = next((s for s in spec.body if isinstance(s, m.Loop) and s.split), None)
        if loop is not None:  # the f32 workspace of the partial sums goes after the tensors
            workspace = self.fresh("partials_ptr")
            pointers += (KernelParam(workspace),)
            store = next(s for s in spec.body if isinstance(s, m.Store))
            tiled = [a for a in spec.grid if a.bounds != "whole"]
            self.split = SplitPlan(
                workspace,
                store.tensor.id,
                tuple((a.dim.id, a.block.id) for a in tiled),
                (loop.axis.dim.id, loop.axis.block.id),
                1 if spec.flat else len(tiled),
            )
        groups = (pointers, sizes, scalars, *strides, consts)
        for group in groups:
            self.taken |= {p.name for p in group}
        return tuple(g for g in groups if g)

    # grid ------------------------------------------------------------------------
    def grid_ops(self) -> tuple[list[Op], list[Op]]:
        """Program ids -> tile offsets and masks for every grid axis (after any swizzle).

        Returns (setup, per-tile) ops: the same program's setup runs once; a persistent
        program runs the per-tile part (and the body) once per tile it takes.
        """
        spec = self.spec
        if not spec.grid:
            return [], []
        setup: list[Op] = [self.comment(spec.grid[0].span)]
        ops: list[Op] = []
        pids: dict[str, str] = {}
        if spec.flat:
            setup += self.flat_setup()
            if spec.split_tail:  # the kernel maps programs to tiles; the tile function takes pid_m, pid_n
                self.tile_map = self.flat_pids(pids)
                self.tile_pids = tuple(pids.values())
            else:
                ops += self.flat_pids(pids)
        else:
            launched = [a for a in spec.grid if a.bounds != "whole"]  # a whole axis takes no program id
            for number, axis in enumerate(launched):
                pids[axis.name.id] = self.fresh(f"pid_{axis.name.id}")
                setup.append(Line(f"{pids[axis.name.id]} = tl.program_id({number})"))
            setup += self.swizzle2d(pids)
        ops += self.int64_casts(list(dict.fromkeys(pids.values())), self.constant_strides())
        grid_axes = {a.name.id: a for a in spec.grid}
        names = list(pids) + [a.name.id for a in spec.grid if a.name.id not in pids]
        for name in names:
            axis = grid_axes[self.canonical.get(name, name)]
            if axis.is_index:
                self.axes[name] = AxisInfo(pids[name], None, axis.dim.id, "1", pids[name], scalar=True)
                continue
            whole = axis.bounds == "whole"
            start = "0" if whole else f"{pids[name]} * {axis.block.id}"
            if self.spec.access_style in ("block_ptr", "descriptor"):
                # Block pointers and descriptors take the tile start and check bounds themselves.
                mask = "checked" if axis.masked or whole else None
                tile = self.whole_blocks[axis.dim.id] if whole else axis.block.id
                self.axes[name] = AxisInfo("", mask, axis.dim.id, tile, start)
                continue
            offs = self.fresh(f"offs_{name}")
            if whole:  # one tile of all of the dimension, padded to a power of two and masked
                block = self.whole_blocks[axis.dim.id]
                mask = self.fresh(f"mask_{name}")
                ops += [Line(f"{offs} = tl.arange(0, {block})"), Line(f"{mask} = {offs} < {axis.dim.id}")]
                self.axes[name] = AxisInfo(offs, mask, axis.dim.id, block, "0")
                continue
            ops.append(Line(f"{offs} = {start} + tl.arange(0, {axis.block.id})"))
            info = AxisInfo(offs, None, axis.dim.id, axis.block.id, start)
            if axis.masked:
                info.mask = info.load_mask = self.fresh(f"mask_{name}")
                ops.append(Line(f"{info.mask} = {offs} < {axis.dim.id}"))
            if axis.bounds == "wrapped":  # loads wrap around (% dim); stores stay masked
                info.load_offs = self.fresh(f"offs_{name}_wrapped")
                info.load_mask = None
                ops.append(Line(f"{info.load_offs} = {offs} % {axis.dim.id}"))
            self.axes[name] = info
        if not spec.persistent and not spec.split_tail:
            return setup + ops, []
        return setup, ops

    def int64_casts(self, names: list[str], strides: list[str] = ()) -> list[Op]:
        """``if INT64_OFFSETS:`` recast tensors ``names`` and scalar arguments ``strides`` to
        int64 (``tl.cast`` also takes a stride Triton specialised to the constant 1). The
        launcher sets the constexpr when some tensor spans 2**31 elements or more, where int32
        offsets would wrap around."""
        if (not names and not strides) or self.spec.access_style == "descriptor":
            return []  # descriptors address with 64 bits themselves (TMA); coordinates fit int32
        self.int64 = True
        casts = tuple(Line(f"{n} = {n}.to(tl.int64)") for n in names)
        casts += tuple(Line(f"{n} = tl.cast({n}, tl.int64)") for n in strides)
        return [IfBlock(INT64_FLAG, "a tensor spans 2**31 elements or more: 64-bit offsets", casts)]

    def constant_strides(self) -> list[str]:
        """Strides multiplied by a constant index (``2 * stride_x_0``): int32 products too."""
        found = []
        for stmt in m.statements(self.spec.body):
            for access in m.accesses(stmt):
                tensor = self.spec.tensor(access.tensor.id)
                for position, item in enumerate(access.index):
                    if isinstance(item, m.Number) and item.text != "0":
                        found.append(stride_name(tensor, position))
        return list(dict.fromkeys(found))

    def flat_setup(self) -> list[Op]:
        """The program-invariant part of a flat grid: tile counts (and, persistent, the
        program's first tile)."""
        spec = self.spec
        first, second = spec.grid
        a, b = first.name.id, second.name.id
        self.pid = self.fresh("start_pid" if spec.persistent else "pid")
        self.num_a, self.num_b = self.fresh(f"num_pid_{a}"), self.fresh(f"num_pid_{b}")
        ops: list[Op] = [
            Line(f"{self.pid} = tl.program_id(0)"),
            Line(f"{self.num_a} = tl.cdiv({first.dim.id}, {first.block.id})"),
            Line(f"{self.num_b} = tl.cdiv({second.dim.id}, {second.block.id})"),
        ]
        if spec.persistent or spec.split_tail:
            self.num_tiles = self.fresh("num_tiles")
            ops.append(Line(f"{self.num_tiles} = {self.num_a} * {self.num_b}"))
        if spec.swizzle is not None:
            self.in_group = self.fresh("num_pid_in_group")
            ops.append(Line(f"{self.in_group} = {spec.swizzle.group_text} * {self.num_b}"))
        return ops

    def flat_pids(self, pids: dict[str, str]) -> list[Op]:
        """Tile ids of a flat grid: row-major, or grouped by GROUP_SIZE_M (tutorial 03). A
        persistent program maps each ``tile_id`` it loops over; others their program id."""
        spec = self.spec
        first, second = spec.grid
        a, b = first.name.id, second.name.id
        pid = self.fresh("tile_id") if spec.persistent or spec.split_tail else self.pid
        self.tile_id = pid
        pids[a], pids[b] = self.fresh(f"pid_{a}"), self.fresh(f"pid_{b}")
        if spec.swizzle is None:
            return [Line(f"{pids[a]} = {pid} // {self.num_b}"), Line(f"{pids[b]} = {pid} % {self.num_b}")]
        group = spec.swizzle.group_text
        in_group, group_id = self.in_group, self.fresh("group_id")
        first_pid, size = self.fresh(f"first_pid_{a}"), self.fresh(f"group_size_{a}")
        return [
            self.comment(spec.swizzle.span),
            Line(f"{group_id} = {pid} // {in_group}"),
            Line(f"{first_pid} = {group_id} * {group}"),
            Line(f"{size} = min({self.num_a} - {first_pid}, {group})"),
            Line(f"{pids[a]} = {first_pid} + (({pid} % {in_group}) % {size})"),
            Line(f"{pids[b]} = ({pid} % {in_group}) // {size}"),
        ]

    def swizzle2d(self, pids: dict[str, str]) -> list[Op]:
        """``tl.swizzle2d`` on a 2D grid; with ``as`` the remapped ids get the alias names."""
        swizzle = self.spec.swizzle
        if swizzle is None:
            return []
        first, second = (a.id for a in swizzle.axes)
        targets = (first, second)
        if swizzle.aliases:
            targets = tuple(a.id for a in swizzle.aliases)
            for alias, axis in zip(targets, (first, second), strict=True):
                self.canonical[alias] = axis
                pids[alias] = self.fresh(f"pid_{alias}")
        return [
            self.comment(swizzle.span),
            Line(
                f"{pids[targets[0]]}, {pids[targets[1]]} = tl.swizzle2d("
                f"{pids[first]}, {pids[second]}, tl.num_programs(0), tl.num_programs(1), {swizzle.group_text})"
            ),
        ]

    # loops -----------------------------------------------------------------------
    def dot_loop(self, loop: m.Loop) -> list[Op]:
        """``acc += dot(a[m, k], b[k, n])`` over tiles of k: pointers (or block pointers) made
        once before the loop and advanced each step; a masked loop masks the K tail."""
        axis = loop.axis
        k = axis.name.id
        ops: list[Op] = [self.comment(loop.span)]
        block_ptrs = self.spec.access_style == "block_ptr"
        descriptors = self.spec.access_style == "descriptor"
        step = self.fresh(k)
        offs = mask_k = None
        if not block_ptrs and not descriptors:
            offs = self.fresh(f"offs_{k}")
            ops.append(Line(f"{offs} = tl.arange(0, {axis.block.id})"))
            mask_k = self.fresh(f"mask_{k}") if axis.masked else None
        start = f"{step} * {axis.block.id}" if descriptors else "0"
        self.axes[k] = AxisInfo(offs or "", mask_k, axis.dim.id, axis.block.id, start)
        tiles = f"tl.cdiv({axis.dim.id}, {axis.block.id})"
        first = "0"
        iterable = f"range(0, {tiles})"
        if loop.split:  # this program's part of the loop: tl.num_programs(..) programs share the tile
            pid, parts = self.fresh(f"pid_{k}"), self.fresh(f"split_{k}")
            per_part, first = self.fresh(f"{k}_per_part"), self.fresh(f"{k}_first")
            self.split_pid, self.split_parts = pid, parts
            ops += [
                Line(f"{pid} = tl.program_id({self.split.axis})"),
                Line(f"{parts} = tl.num_programs({self.split.axis})  # 1 where the output tiles fill the GPU"),
                Line(f"{per_part} = tl.cdiv({tiles}, {parts})"),
                Line(f"{first} = {pid} * {per_part}"),
                *self.int64_casts([first]),
            ]
            iterable = f"range({first}, min({first} + {per_part}, {tiles}))"
        if block_ptrs and axis.masked:
            self.axes[k].mask = "checked"  # a block pointer checks the bounds of a masked axis
        advances: list[str] = []
        body: list[Op] = []
        if mask_k:
            body.append(Line(f"{mask_k} = {offs} < {axis.dim.id} - {step} * {axis.block.id}"))
        def operand_tile(number: int, operand: m.Load, into: list[Op], bf16: bool) -> str:
            """Load dot operand ``number`` (0: rows, 1: columns) into ``into``; return its tile (for
            a ``bf16`` dot, as the interpreter's upcast operand)."""
            tensor = self.spec.tensor(operand.tensor.id)
            tile = self.fresh(tensor.name.id)
            position = next(p for p, i in enumerate(operand.index) if isinstance(i, m.Name) and i.id == k)
            own = self.tile_axes(operand.index)
            other = next(a for a in own if a != k)
            context = (other, k) if number == 0 else (k, other)  # (M, K) @ (K, N): b read as [k, n]
            if descriptors:  # bounds are checked by the descriptor (TMA): no masks
                into.append(self.descriptor_load(operand, tile))
            elif block_ptrs:
                var, checked = self.block_ptr(operand, ops)
                args = f"{var}, boundary_check={checked}, padding_option=\"zero\"" if checked else var
                into.append(Line(f"{tile} = tl.load({args})"))
                moves = ["0"] * len(self.tile_axes(operand.index))
                moves[self.tile_axes(operand.index).index(k)] = axis.block.id
                advances.append(f"{var} = tl.advance({var}, {tuple_text(moves)})")
            else:
                ptr, mask = self.pointer_expr(operand, context, None, load=True)
                var = self.fresh(f"{tensor.name.id}_ptrs")
                ops.append(Line(f"{var} = {ptr}"))
                load = f"{tile} = tl.load({var}, mask={mask}, other=0.0)" if mask else f"{tile} = tl.load({var})"
                into.append(Line(load))
                advances.append(f"{var} += {axis.block.id} * {stride_name(tensor, position)}")
            if (descriptors or block_ptrs) and own != context:  # a tile in the tensor's order
                into.append(Line(f"{tile} = tl.trans({tile})"))
            if bf16:  # see BF16_DOT_FLAG: the interpreter upcasts them
                self.bf16_dot = True
                return f"{BF16_DOT_OPERAND}({tile})"
            return tile

        for stmt in loop.body:  # the checker allows only ``acc += dot(x[.., k], y[k, ..])`` here
            body.append(self.comment(stmt.span))
            call = stmt.value
            precision = call.word("precision")
            extra = f', input_precision="{precision}"' if precision is not None else ""
            bf16 = any("bf16" in dtype_options(self.spec.tensor(o.tensor.id).dtype) for o in call.args)
            pieced = self.pieced(call.args[0].index)  # the rows in two pieces: the same tile of b for both
            with self.in_piece(0) if pieced else nullcontext():
                tiles = [operand_tile(number, operand, body, bf16) for number, operand in enumerate(call.args)]
                body.append(Line(f"{stmt.name.id} += tl.dot({tiles[0]}, {tiles[1]}{extra})"))
            if pieced:
                second: list[Op] = []
                with self.in_piece(1):
                    rows = operand_tile(0, call.args[0], second, bf16)
                    second.append(Line(f"{self.local_name(stmt.name.id)} += tl.dot({rows}, {tiles[1]}{extra})"))
                body.append(IfBlock(f"{self.pieces.rows[1]} > 0", "the second piece's rows", tuple(second)))
        body += [Line(a) for a in advances]
        if first != "0" and advances:  # pointers start at the part's first tile of k
            ops += [Line(a.replace(" += ", f" += {first} * ", 1)) for a in advances]
        ops.append(ForLoop(step, iterable, tuple(body)))
        return ops

    def tile_loop(self, loop: m.Loop) -> list[Op]:
        """A loop over tiles inside one program (the Intel guide's add_kernel_fine_grained):
        each step makes its own offsets and mask and runs the body on that tile.

        The innermost loop of a nest runs in up to two ranges (see :mod:`tilegen.lower.ranges`):
        first the tiles wholly inside the dimension (and, with a causal guard, wholly on its true
        side), with no masks; then the edge tiles, masked. Tiles where a causal guard holds
        nowhere are skipped when that provably changes nothing. A loop with a loop nested in it
        runs as one masked loop over all its tiles (:func:`tilegen.lower.ranges.splits_full_tiles`:
        the code stays linear in the depth of the nest). Loads that do not change with the
        loop's axis go before the loop, once, for every range.
        """
        axis = loop.axis
        k = axis.name.id
        step = self.fresh(k)
        offs = self.fresh(f"offs_{k}")
        mask = self.fresh(f"mask_{k}") if axis.masked else None
        tile_axes = {a for a, info in self.axes.items() if not info.scalar and a != k}
        guard = find_guard(loop, tile_axes)
        guarded = False  # lanes past the end are on the guard's false side: masked on loads only
        tiles, whole_tiles = f"tl.cdiv({axis.dim.id}, {axis.block.id})", f"{axis.dim.id} // {axis.block.id}"
        if not splits_full_tiles(loop):  # an outer level of a nest: one loop over every tile, masked
            checks = ["masked"] if axis.masked else []
            checks += [f"{k} {guard.op} {guard.axis} evaluated"] if guard is not None else []
            why = f"every tile of {k}, {', '.join(checks)}: a loop around loops (only the innermost splits)"
            ranges = [(f"range(0, {tiles})", not checks, why if checks else "")]
        elif guard is not None:
            other = self.axes[guard.axis]
            full, live = guard_steps(guard, other.start, other.tile, axis.block.id)
            skip = skips_when_false(loop, guard, set(self.locals))
            cond, split = f"{k} {guard.op} {guard.axis}", f"min({whole_tiles}, {full})"
            end, skipped = tiles, ""
            if skip:
                end = f"min({tiles}, {live})"
                skipped = f"; later tiles change nothing (where {cond} holds nowhere): skipped"
            # block pointers check bounds from the same mask the tile's math uses: they keep it
            guarded = axis.masked and self.spec.access_style != "block_ptr" and lanes_past_end_are_guarded(
                loop, guard, set(self.locals), other.dim == axis.dim.id
            )
            if guarded:
                dim = axis.dim.id
                skipped += f"; lanes past {dim} fail {cond} in every row stored: only the loads check {dim}"
            ranges = [
                (
                    f"range(0, {split})",
                    True,
                    f"tiles of {k} inside {axis.dim.id} where {cond} holds everywhere: no masks",
                ),
                (
                    f"range({split}, {end})",
                    False,
                    f"tiles where {cond} holds for some lanes, or past {axis.dim.id}: masked{skipped}",
                ),
            ]
        elif axis.masked:
            ranges = [
                (f"range(0, {whole_tiles})", True, f"tiles of {k} inside {axis.dim.id}: no masks"),
                (
                    f"range({whole_tiles}, {tiles})",
                    False,
                    f"the last tile, if {axis.dim.id} % {axis.block.id} != 0: masked",
                ),
            ]
        else:
            ranges = [(f"range(0, {tiles})", True, "")]
        outer_masks, outer_loads, outer_taken = dict(self.masks), dict(self.loads), set(self.taken)
        preheader: list[Op] = []  # loads that do not change with k go here, before the loop
        loops: list[Op] = []
        for iterable, inside, why in ranges:
            body: list[Op] = [Line(f"{offs} = {step} * {axis.block.id} + tl.arange(0, {axis.block.id})")]
            body += self.int64_casts([offs])
            info = AxisInfo(offs, None, axis.dim.id, axis.block.id, f"{step} * {axis.block.id}")
            if mask is not None and not inside:
                info.mask = None if guarded else mask
                info.load_mask = mask
                if not guarded or self.spec.access_style == "pointers":
                    body.append(Line(f"{mask} = {offs} < {axis.dim.id}"))
            self.axes[k] = info
            if guard is not None:
                self.known_conditions[guard.key] = True if inside else None
            # each range sees the masks and loads of the enclosing scope, and the tiles hoisted
            # before the loop; it names its own tiles as the other range does
            hoisted = {key: self.loads[key] for key in self.hoisted_loads if key in self.loads}
            self.masks, self.loads = dict(outer_masks), {**outer_loads, **hoisted}
            self.taken = outer_taken | _defined(preheader)
            self.hoists.append((k, preheader))
            for stmt in loop.body:
                if not isinstance(stmt, m.Loop):
                    body.append(self.comment(stmt.span))
                body.extend(self.statement(stmt))
            self.hoists.pop()
            if why:
                loops.append(Comment(why))
            loops.append(ForLoop(step, iterable, tuple(body)))
        if guard is not None:
            self.known_conditions.pop(guard.key, None)
        self.masks, self.loads = outer_masks, outer_loads
        self.taken |= _defined(preheader)
        if preheader:
            preheader.insert(0, Comment(f"tiles that do not change with {k}: loaded once, before the loop"))
        return [self.comment(loop.span), *preheader, *loops]

    # statements ------------------------------------------------------------------
    def statement(self, stmt: m.Stmt) -> list[Op]:
        ops: list[Op] = []
        if isinstance(stmt, m.Declare):
            axes = tuple(a.id for a in stmt.axes)
            dtype = triton_dtype(stmt.dtype)
            value = number_text(stmt.init)
            self.locals[stmt.name.id] = axes

            def declare() -> list[Op]:
                name, shape = self.local_name(stmt.name.id), tuple_text(self.axes[a].tile for a in axes)
                if value in ("0", "0.0"):
                    return [Line(f"{name} = tl.zeros({shape}, dtype={dtype})")]
                return [Line(f"{name} = tl.full({shape}, {value}, dtype={dtype})")]

            ops += self.each_piece(declare, "the second piece's") if self.pieced(stmt.axes) else declare()
            self.dtypes[stmt.name.id] = stmt.dtype.id
            self.taken.add(stmt.name.id)
        elif isinstance(stmt, (m.Assign, m.Accumulate)) and not self.scaled_assign(stmt, ops):
            context = self.locals.get(stmt.name.id) or self.expr_axes(stmt.value)
            value = self.expr(stmt.value, context, ops)
            if isinstance(stmt, m.Assign) and set(self.expr_axes(stmt.value)) != set(context):
                # a smaller value broadcast into a variable that keeps its shape (a loop carries it)
                shape = tuple_text(self.axes[self.canonical.get(a, a)].tile for a in context)
                value = f"tl.broadcast_to({value}, {shape})"
            operator = "+=" if isinstance(stmt, m.Accumulate) else "="
            ops.append(Line(f"{stmt.name.id} {operator} {value}"))
            self.locals.setdefault(stmt.name.id, context)
            self.dtypes.setdefault(stmt.name.id, self.dtype_of(stmt.value))
            self.taken.add(stmt.name.id)
        elif isinstance(stmt, m.Store):
            if self.pieced(stmt.index):
                ops += self.each_piece(lambda: self.store(stmt), "the second piece's rows")
            else:
                ops.extend(self.store(stmt))
        elif isinstance(stmt, m.Loop):
            ops.extend(self.dot_loop(stmt) if m.is_dot_loop(stmt) else self.tile_loop(stmt))
        return ops

    def scaled_assign(self, stmt: m.Assign | m.Accumulate, ops: list[Op]) -> bool:
        """``s = x * c`` (``c`` a scalar factor) for a local some ``max``/``min`` reduces: emit
        ``s_unscaled = x`` and apply ``c`` where ``s`` is used (:mod:`tilegen.lower.scaled`).
        False, emitting nothing, when ``stmt`` is not such an assignment in this loop range."""
        name = stmt.name.id
        self.scaled.pop(name, None)
        if not isinstance(stmt, m.Assign) or name not in self.reduced:
            return False
        value = stmt.value
        if isinstance(value, m.Call) and value.func.id == "where" and (known := self.known_branch(value)) is not None:
            value = known  # a causal guard known to hold in this range
        float_tile = lambda x: bool(self.expr_axes(x)) and self.dtype_of(x) in m.FLOAT_DTYPES  # noqa: E731
        found = split_product(value, self.spec, float_tile)
        if found is None:
            return False
        x, factor, sign = found
        context = self.expr_axes(stmt.value)
        if set(self.expr_axes(x)) != set(context):
            return False
        raw = self.fresh(f"{name}_unscaled")
        ops.append(Line(f"{raw} = {self.expr(x, context, ops)}"))
        if sign.scalar is not None and sign.scalar not in self.sign_flags:
            self.sign_flags[sign.scalar] = self.fresh(f"{sign.scalar.upper()}_NONNEG")
        text = self.expr(factor, (), ops)
        self.scaled[name] = (raw, f"({text})" if isinstance(factor, m.BinOp) else text, sign)
        self.locals.setdefault(name, context)
        self.dtypes.setdefault(name, self.dtype_of(stmt.value))
        self.taken.add(name)
        return True

    def store(self, stmt: m.Store) -> list[Op]:
        ops: list[Op] = []
        tensor = self.spec.tensor(stmt.tensor.id)
        context = self.tile_axes(stmt.index)
        value = self.expr(stmt.value, context, ops)
        dtype = triton_dtype(tensor.dtype)
        # a dtype variable's store casts unless the value is a tile of a tensor typed with it
        # (Triton's .to() of a tile already in that dtype is free)
        if isinstance(tensor.dtype, m.BoundDtype):
            typed = stmt.value.func if isinstance(stmt.value, m.Call) else None  # a cast: T(p)
            if isinstance(stmt.value, m.Load):
                typed = self.spec.tensor(stmt.value.tensor.id).dtype
            same = isinstance(typed, m.BoundDtype) and typed.var == tensor.dtype.var
        else:
            same = self.dtype_of(stmt.value) == tensor.dtype.id
        if context and not self.expr_axes(stmt.value):  # a scalar value fills the whole tile
            shape = tuple_text(self.axes[a].tile for a in context)
            if isinstance(stmt.value, m.Number):
                value = f"tl.full({shape}, {value}, dtype={dtype})"
            else:
                value = f"tl.zeros({shape}, dtype={dtype}) + {value}"
                if not same:
                    value = f"({value}).to({dtype})"
        elif not same:
            if isinstance(stmt.value, (m.BinOp, m.Neg)):
                value = f"({value})"
            value = f"{value}.to({dtype})"
        if self.split is not None and context:  # the store after a split loop (the checker allows no other)
            return [*ops, self.partial_store(stmt, context, value)]
        ops.extend(self.store_tile(stmt, context, value))
        return ops

    def store_tile(self, stmt: m.Store, context: tuple[str, ...], value: str) -> list[Op]:
        """The store of the tile ``value`` (already lowered) into ``stmt``'s tensor."""
        ops: list[Op] = []
        tensor = self.spec.tensor(stmt.tensor.id)
        if self.spec.access_style == "descriptor" and context:
            desc, offsets = self.descriptor(stmt)
            if self.unit_reshape(stmt):  # the tile as the descriptor's block: 1 for each index axis
                blocks = dict(self.descriptor_blocks)[stmt.tensor.id]
                value = f"({value}).reshape({', '.join(blocks)})"
            ops.append(Line(f"{desc}.store({offsets}, {value})"))
            return ops
        if self.spec.access_style == "block_ptr" and context:
            ptr, checked = self.block_ptr(stmt, ops)
            extra = f", boundary_check={checked}" if checked else ""
            ops.append(Line(f"tl.store({ptr}, {value}{extra})"))
            return ops
        ptr, mask = self.pointer_expr(stmt, context, ops, load=False)
        sources = [self.canonical[i.id] for i in stmt.index if isinstance(i, m.Name) and i.id in self.canonical]
        if sources:  # through swizzle aliases: only lanes whose source is inside (see swizzled_outputs)
            canonical = tuple(self.canonical.get(a, a) for a in context)
            masks = [broadcast(self.axes[a].mask, a, canonical) for a in sources if self.axes[a].mask]
            mask = " & ".join(([mask] if mask else []) + masks) or None
        if len(context) > 1:
            ptrs = self.fresh(f"{tensor.name.id}_ptrs")
            ops.append(Line(f"{ptrs} = {ptr}"))
            ptr = ptrs
        ops.append(Line(f"tl.store({ptr}, {value}, mask={mask})" if mask else f"tl.store({ptr}, {value})"))
        return ops

    def partial_store(self, stmt: m.Store, context: tuple[str, ...], value: str) -> IfBlock:
        """The store after a split loop: with one part (``tl.num_programs`` of the split axis is
        1) the spec's own store; with several, the part's f32 partial sum into the workspace
        [parts, *output], which the launcher adds up into the output."""
        acc = stmt.value.args[0] if isinstance(stmt.value, m.Call) else stmt.value
        tensor = self.spec.tensor(stmt.tensor.id)
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        ops: list[Op] = []
        offsets, masks = [], []
        for axis, dim, index in zip(context, dims, ("[:, None]", "[None, :]"), strict=True):
            info = self.axes[axis]
            offs = info.offs
            if not offs:  # descriptor and block-pointer tiles have no offsets of their own
                offs = self.fresh(f"offs_{axis}")
                ops.append(Line(f"{offs} = {info.start} + tl.arange(0, {info.tile})"))
            offsets.append(offs)
            has_mask = info.mask not in (None, "checked")
            masks.append(f"{info.mask}{index}" if has_mask else f"({offs}{index} < {dim})")
        om, on = offsets
        mask = " & ".join(masks)
        ptrs = self.fresh("partials_ptrs")
        ops += [
            Line(f"{ptrs} = {self.split.workspace} + ({self.split_pid} * {dims[0]} + {om}[:, None]) * {dims[1]} "
                 f"+ {on}[None, :]"),
            Line(f"tl.store({ptrs}, {self.local_name(acc.name.id)}, mask={mask})"),
        ]
        why = f"one of {self.split_parts} partial sums over {self.split.loop[0]}: to the f32 workspace, summed later"
        return IfBlock(f"{self.split_parts} > 1", why, tuple(ops), tuple(self.store_tile(stmt, context, value)))

    # the kernel ------------------------------------------------------------------
    def tune(self) -> TunePlan | None:
        spec = self.spec
        if spec.tune is None:
            return None
        configs = tuple(config_text(spec, c) for c in spec.tune.configs)
        default = spec.tune.configs.index(spec.default_config())
        # each operand layout tunes on its own: a transposed tile may want another config
        key = (*(k.id for k in spec.tune.key), *self.transposed.values())
        hook = "_sum_partials_hook" if self.split is not None else None  # a split config is timed with its sum
        return TunePlan(configs, key, default, post_hook=hook)

    def choices(self) -> tuple[ChoicePlan, ...]:
        plans = []
        for choice in self.spec.choices:
            branches = []
            for option in choice.options:
                if option.id == "none":
                    continue
                call = f"leaky_relu(x, {LEAKY_RELU_SLOPE})" if option.id == "leaky_relu" else f"{option.id}(x)"
                branches.append((option.id, call))
            plans.append(ChoicePlan(f"apply_{choice.name.id}", choice.constexpr, tuple(branches)))
        return tuple(plans)

    def kernel(self) -> KernelPlan:
        params = self.kernel_params()
        setup, tile = self.grid_ops()
        tile += self.pieces_setup()
        if self.pieces is not None:  # the pieces' descriptors follow the descriptors
            first = params[0]
            last = max(i for i, p in enumerate(first) if p.name.endswith("_desc")) + 1
            extra = tuple(KernelParam(f"{t}_piece_desc") for t in self.pieces.descriptors)
            params = ((*first[:last], *extra, *first[last:]), *params[1:])
        for stmt in self.spec.body:
            if not isinstance(stmt, m.Loop):
                tile.append(self.comment(stmt.span))
            tile.extend(self.statement(stmt))
        # a float argument arrives as fp32 from Triton's JIT but as fp64 from torch.compile, which
        # passes a symbolic float in double: fix its type, so loop-carried tiles keep theirs
        prelude: list[Op] = [
            Line(f"{t.name.id} = tl.cast({t.name.id}, {m.DTYPES[t.dtype.id][0]})")
            for t in self.spec.inputs if t.is_scalar and t.dtype.id in m.FLOAT_DTYPES
        ]
        # a dtype variable is the dtype of the first input typed with it
        pointer = "{name}_desc.dtype" if self.spec.access_style == "descriptor" else "{name}_ptr.dtype.element_ty"
        bound = dtype_bindings(self.spec, pointer)
        for var in self.spec.dtype_vars:
            prelude += [self.comment(var.span), Line(f"{var.name.id} = {bound[var.name.id]}")]
        # constexprs the launcher sets, after the spec's own: scalar inputs' signs, then 64-bit offsets
        flags = (*self.sign_flags.values(), *([INT64_FLAG] if self.int64 else []))
        if flags:
            constexprs = tuple(KernelParam(flag, True) for flag in flags)
            if params and params[-1][0].constexpr:
                params = (*params[:-1], (*params[-1], *constexprs))
            else:
                params = (*params, constexprs)
        tail = None
        if self.spec.split_tail:  # the body is the tile function's; the kernel picks the tile and calls it
            tail, dispatch = self.tail_split(params, prelude + tile)
            body = setup + dispatch
            if tail.descriptors:  # the tail descriptors follow the descriptors
                first = params[0]
                last = max(i for i, p in enumerate(first) if p.name.endswith("_desc")) + 1
                extra = tuple(KernelParam(f"{t}_tail_desc") for t in tail.descriptors)
                params = ((*first[:last], *extra, *first[last:]), *params[1:])
        elif self.spec.persistent:  # each program loops over tiles, NUM_SMS apart (tutorial 09)
            loop = f"tl.range({self.pid}, {self.num_tiles}, NUM_SMS, flatten=True)"
            body = [*prelude, *setup, ForLoop(self.tile_id, loop, tuple(tile))]
        else:
            body = [*prelude, *setup, *tile]
        name = f"{self.spec.name.id}_kernel"
        doc = f"Triton kernel generated from {self.spec.path}; launch it through {self.spec.name.id}()."
        helpers = tuple(HelperPlan(h, *HELPERS[h]) for h in HELPERS if h in self.helpers)
        descriptors = tuple((t.name.id, self.descriptor_blocks.get(t.name.id, ())) for t in self.spec.arrays)
        return KernelPlan(
            name, params, tuple(body), doc, self.tune(), helpers, self.choices(), self.bf16_dot, self.int64,
            descriptors if self.spec.access_style == "descriptor" else (),
            tuple(self.whole_blocks.items()),
            tuple(self.transposed.items()),
            self.split,
            tuple(self.sign_flags.items()),
            tail,
            self.pieces,
        )

    def tail_split(self, params: tuple, body: list[Op]) -> tuple[TailPlan, list[Op]]:
        """``split tail``: the tile function (``body``: one output tile at ``pid_m``, ``pid_n`` in
        units of its block constexprs) and the kernel's ops after the grid setup, which map the
        program to a tile, or to a sub-tile of a tile of the last partial wave, and call it.

        The launcher launches ``whole + tail * sub-tiles`` programs (``_tail_split``): the first
        ``whole`` compute a tile each, in grouped order; the rest a sub-tile each of the ``tail``
        tiles of the last wave (``num_tiles % NUM_SMS``), so that the last wave fills the GPU. A
        descriptor kernel reads the sub-tiles (TAIL_M x TAIL_N, a constexpr) from the block shape of
        a tail descriptor the launcher made for them (:meth:`descriptor_dispatch`); a pointer kernel
        reads their number from its grid and compiles a call for each split the launcher may
        choose (:meth:`grid_dispatch`)."""
        spec = self.spec
        first, second = spec.grid
        bm, bn = first.block.id, second.block.id
        used = _names_used(body)  # the tile function takes the kernel's arguments its body reads
        own = tuple(g for g in (tuple(p for p in group if p.name in used) for group in params) if g)
        pid_m, pid_n = self.tile_pids
        doc = (
            f"One output tile of {spec.path}: tile ({pid_m}, {pid_n}) of {bm} x {bn}. {spec.name.id}_kernel calls it "
            "at its block shape, and at half or a quarter of it for the tiles of its last partial wave (split tail)."
        )
        function = KernelPlan(
            f"{spec.name.id}_tile", ((KernelParam(pid_m), KernelParam(pid_n)), *own), tuple(body), doc, None, (), (),
            self.bf16_dot, self.int64,
        )
        descriptors: tuple[str, ...] = ()
        carrier, positions = "", (0, 1)
        if spec.access_style == "descriptor":  # tensors tiled along a grid axis get a tail descriptor
            blocks = self.descriptor_blocks
            descriptors = tuple(t.name.id for t in spec.arrays if {bm, bn} & set(blocks.get(t.name.id, ())))
            # an output stored over both axes (the checker asks for one), in its own order
            carrier = next(t for t in descriptors if t not in self.transposed and {bm, bn} <= set(blocks[t]))
            positions = (blocks[carrier].index(bm), blocks[carrier].index(bn))
        call = _TileCall(function.name, own, (bm, bn), descriptors, carrier)
        tail, whole, tiles = self.fresh("tail_tiles"), self.fresh("whole_tiles"), self.num_tiles
        ops: list[Op] = [
            self.comment(spec.split_tail[0]),
            Line(f"{tail} = {tiles} % NUM_SMS if {tiles} > NUM_SMS else 0  # the last partial wave's tiles"),
            Line(f"{whole} = {tiles} - {tail}"),
        ]
        if descriptors:
            ops += self.descriptor_dispatch(call, whole, f"{carrier}_tail_desc", positions)
        else:
            ops += self.grid_dispatch(call, tail, whole)
        tiles = ((first.dim.id, bm), (second.dim.id, bn))
        return TailPlan(tiles, function, descriptors, carrier, positions), ops

    def descriptor_dispatch(self, call: _TileCall, whole: str, tail_desc: str, positions: tuple[int, int]) -> list[Op]:
        """A descriptor kernel's tail: TAIL_M x TAIL_N from the block shape of ``tail_desc`` (None
        where the launch does not split), one call at the whole block shape and one at the sub-tiles'."""
        (bm, bn), (pid_m, pid_n), pid, sub = call.blocks, self.tile_pids, self.pid, self.fresh("sub_tile")
        shape = f"{tail_desc}.block_shape"
        return [
            Comment("each tail tile runs as TAIL_M x TAIL_N sub-tiles, a program each: the launcher's choice,"),
            Comment(f"which the block shape of {tail_desc} carries (constexprs; None where the launch does not"),
            Comment("split: then only the whole tiles' call compiles)"),
            *(Line(f"TAIL_{axis}: tl.constexpr = 1 if {tail_desc} is None else {block} // {shape}[{at}]")
              for axis, block, at in (("M", bm, positions[0]), ("N", bn, positions[1]))),
            Line(f"{self.tile_id} = {pid} if {pid} < {whole} else {whole} + ({pid} - {whole}) // (TAIL_M * TAIL_N)"),
            Line(f"{sub} = ({pid} - {whole}) % (TAIL_M * TAIL_N)"),
            *self.tile_map,
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

    def grid_dispatch(self, call: _TileCall, tail: str, whole: str) -> list[Op]:
        """A pointer (or block-pointer) kernel's tail: the number of sub-tiles from the grid, and a
        call for each split the launcher may choose (quarters, halves of the longer side), each
        compiled only where its blocks stay 16 or more, as the launcher's rule does."""
        (bm, bn), (pid_m, pid_n), pid = call.blocks, self.tile_pids, self.pid
        sub, subs = self.fresh("sub_tile"), self.fresh("sub_tiles")
        quarter = call((f"{pid_m} * 2 + {sub} // 2", f"{pid_n} * 2 + {sub} % 2"), (f"{bm} // 2", f"{bn} // 2"))
        half_m = call((f"{pid_m} * 2 + {sub}", pid_n), (f"{bm} // 2", bn))
        half_n = call((pid_m, f"{pid_n} * 2 + {sub}"), (bm, f"{bn} // 2"))
        sixteen = "constexprs: the launcher splits no block below 16"
        return [
            Comment("each tail tile runs as 1, 2 or 4 sub-tiles, a program each: the launcher's choice, read"),
            Comment("from the grid"),
            Line(f"{subs} = max((tl.num_programs(0) - {whole}) // max({tail}, 1), 1)"),
            Line(f"{self.tile_id} = {pid} if {pid} < {whole} else {whole} + ({pid} - {whole}) // {subs}"),
            Line(f"{sub} = ({pid} - {whole}) % {subs}"),
            *self.tile_map,
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
    params: tuple
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


def _names_used(ops) -> set[str]:
    """Every name the code of ``ops`` mentions (comments aside), nested bodies included."""
    found: set[str] = set()
    for op in ops:
        texts = {Line: ("code",), ForLoop: ("var", "iterable"), IfBlock: ("condition",)}.get(type(op), ())
        for attribute in texts:
            found |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", getattr(op, attribute)))
        for attribute in ("body", "orelse"):
            found |= _names_used(getattr(op, attribute, ()))
    return found


def _defined(ops: list[Op]) -> set[str]:
    """The names the lines of ``ops`` assign (``q = tl.load(...)`` defines ``q``)."""
    return {op.code.split(" = ", 1)[0] for op in ops if isinstance(op, Line) and " = " in op.code}


def lower_kernel(spec: m.Spec) -> KernelPlan:
    """The ``@triton.jit`` kernel of a checked spec (its exponentials of logits in base 2, see
    :mod:`tilegen.lower.exp2`)."""
    return KernelLowering(fold_exp2(spec)).kernel()
