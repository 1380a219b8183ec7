"""Kernel lowering: a checked spec -> the ``@triton.jit`` function as a :class:`KernelPlan`.

Every name, offset, mask and pointer expression is decided here. Generated names follow the
seeds (``pid_m``, ``offs_m``, ``mask_m``, ``a_ptrs``, ``acc``, the tutorial's
``num_pid_in_group``/``group_id``/``first_pid_m``); each one is checked against the spec's own
names so nothing a user writes can be shadowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.dtypes import COMPARISONS, INDEX, computes_in_f32, expr_dtype
from tilegen.functions import HELPERS, REDUCTIONS as REDUCTION_NAMES, lookup
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
    TunePlan,
)

#: Module constant, true only under TRITON_INTERPRET=1: Triton's interpreter multiplies the
#: raw bits of bf16 tiles in ``tl.dot`` (triton-lang/triton#11584, "not supported yet"), so
#: there bf16 operands are upcast to f32 first (exact: bf16 products fit in f32). On the GPU
#: the branch is a false constexpr and compiles away.
BF16_DOT_FLAG = "_INTERPRETER_BF16_DOT"

#: Kernel constexpr: offsets in 64 bits (the launcher sets it for tensors of 2**31+ elements).
INT64_FLAG = "INT64_OFFSETS"

#: Default slope of ``leaky_relu`` (Triton tutorial 03, torch's default).
LEAKY_RELU_SLOPE = "0.01"

#: Python's precedence of the spec's binary operators (higher binds tighter). Python puts
#: comparisons below ``|`` and ``&``, the spec above them, so the text parenthesises them.
_PRECEDENCE = {**dict.fromkeys(COMPARISONS, 0), "|": 1, "&": 2, "+": 3, "-": 3, "*": 4, "/": 4}


def binop_text(expr: m.BinOp, left: str, right: str) -> str:
    """``left op right`` with parentheses only where Python's precedence needs them (the same
    text for Triton and torch, so both evaluate in the spec's order). Comparisons never chain."""
    prec = _PRECEDENCE[expr.op]
    if isinstance(expr.left, m.BinOp) and (
        _PRECEDENCE[expr.left.op] < prec or (prec == 0 and _PRECEDENCE[expr.left.op] == 0)
    ):
        left = f"({left})"
    if isinstance(expr.right, m.BinOp) and _PRECEDENCE[expr.right.op] <= prec:
        right = f"({right})"
    return f"{left} {expr.op} {right}"


def number_text(expr: m.Number | m.Neg) -> str:
    """A constant as Python writes it: ``inf`` is ``float("inf")``, ``-inf`` ``float("-inf")``."""
    if isinstance(expr, m.Neg):
        inner = number_text(expr.operand)
        return 'float("-inf")' if inner == 'float("inf")' else f"-{inner}"
    return 'float("inf")' if expr.text == "inf" else expr.text


def printable(text: str, strip: bool = True) -> str:
    """Text safe inside a one-line ``#`` comment: no control or line-separator characters."""
    text = "".join(c if c.isprintable() else "?" for c in text.expandtabs(4)).rstrip()
    return text.strip() if strip else text


def tuple_text(items) -> str:
    """A Python tuple literal: ``(a, b)``, ``(a,)``."""
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def broadcast(var: str, axis: str, context: tuple[str, ...]) -> str:
    """Index ``var`` (1-D over ``axis``) so it broadcasts in a tile over ``context``.

    ``broadcast("offs_m", "m", ("m", "n"))`` is ``offs_m[:, None]``.
    """
    if len(context) <= 1:
        return var
    return var + "[" + ", ".join(":" if a == axis else "None" for a in context) + "]"


def broadcast_tile(var: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
    """Index a tile over ``axes`` (a subsequence of ``context``) so it broadcasts over ``context``."""
    if axes == context or not axes:
        return var
    return var + "[" + ", ".join(":" if a in axes else "None" for a in context) + "]"


def size_symbols(spec: m.Spec) -> tuple[str, ...]:
    """Symbolic dimensions in order of first appearance."""
    seen: list[str] = []
    for tensor in spec.tensors:
        for dim in tensor.dims:
            if isinstance(dim, m.Name) and dim.id not in seen:
                seen.append(dim.id)
    return tuple(seen)


def whole_dims(spec: m.Spec) -> tuple[str, ...]:
    """Dimensions tiled whole (``i over N whole``): their tile is the next power of two."""
    return tuple(dict.fromkeys(a.dim.id for a in spec.grid if a.bounds == "whole"))


def dim_label(tensor: m.Tensor, position: int) -> str:
    """``m`` for dimension ``M`` when it is unique in the tensor, else the position."""
    dim = tensor.dims[position]
    names = [d.id for d in tensor.dims if isinstance(d, m.Name)]
    if isinstance(dim, m.Name) and names.count(dim.id) == 1:
        return dim.id.lower()
    return str(position)


def stride_name(tensor: m.Tensor, position: int) -> str:
    """The kernel's stride argument for one dimension (``stride_a_m``)."""
    return f"stride_{tensor.name.id}_{dim_label(tensor, position)}"


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
class KernelLowering:
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
    loads: dict[tuple, str] = field(default_factory=dict)  # (tensor, index, context) -> tile loaded in scope
    bf16_dot: bool = False
    int64: bool = False  # the kernel takes INT64_OFFSETS
    descriptor_blocks: dict = field(default_factory=dict)  # tensor -> its descriptor's block shape

    def __post_init__(self) -> None:
        spec = self.spec
        # Tensor names stay free: the kernel calls their pointers ``<name>_ptr`` and the first
        # tile loaded from a tensor takes the tensor's own name, as the seeds do (``a = tl.load``).
        self.taken |= {f"{t.name.id}_ptr" for t in spec.arrays} | {p.name.id for p in spec.params}
        self.taken |= {f"{t.name.id}_desc" for t in spec.arrays}
        self.taken |= {t.name.id for t in spec.tensors if t.is_scalar}
        self.taken |= set(size_symbols(spec)) | set(HELPERS) | {INT64_FLAG, "NUM_SMS"}
        for dim in whole_dims(spec):  # the tile of a whole axis: N rounded up to a power of two
            self.whole_blocks[dim] = self.fresh(f"BLOCK_{dim}")
        for choice in spec.choices:
            self.taken |= {choice.constexpr, f"apply_{choice.name.id}"}
        # The spec's own tile variables keep their names; generated ones go around them.
        self.taken |= {s.name.id for s in m.statements(spec.body) if isinstance(s, (m.Declare, m.Assign))}

    # names -----------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A generated name starting with ``base`` that clashes with nothing else."""
        name, n = base, 1
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def comment(self, span: m.Span) -> Comment:
        line = m.source_lines(self.spec.source)[span.line - 1]
        return Comment(f"{self.spec.path}:{span.line}: {printable(line)}")

    def dtype_of(self, expr: m.Expr) -> str | None:
        """The spec dtype ``expr`` computes to (None for a literal), see :mod:`tilegen.dtypes`."""

        def local(name: str) -> str | None:
            if name in self.locals:
                return self.dtypes.get(name)
            tensor = self.spec.tensor(name)
            return tensor.dtype.id if tensor is not None else INDEX  # an axis or a size

        return expr_dtype(expr, self.spec, local)

    def tile_axes(self, index) -> tuple[str, ...]:
        """The axes of ``tensor[index]`` that are tile dimensions (index axes are scalars)."""
        return tuple(i.id for i in index if isinstance(i, m.Name) and not self.axes[i.id].scalar)

    def expr_axes(self, expr: m.Expr) -> tuple[str, ...]:
        """The tile axes ``expr`` spans, in first-appearance order."""
        if isinstance(expr, m.Load):
            axes = self.tile_axes(expr.index)
            for item in expr.index:
                if isinstance(item, m.Load):  # a gather spans its index tile's axes
                    axes += tuple(a for a in self.expr_axes(item) if a not in axes)
            return axes
        if isinstance(expr, m.Ref):
            name = expr.name.id
            if name in self.locals:
                return self.locals[name]
            if name in self.axes and not self.axes[name].scalar:  # an axis's index values
                return (name,)
            return ()
        if isinstance(expr, m.Neg):
            return self.expr_axes(expr.operand)
        if isinstance(expr, m.BinOp):
            left = self.expr_axes(expr.left)
            return left + tuple(a for a in self.expr_axes(expr.right) if a not in left)
        if isinstance(expr, m.Call):
            if expr.func.id == "dot":
                a, b = (self.expr_axes(arg) for arg in expr.args)
                return (a[0], b[1])
            axes: tuple[str, ...] = ()
            for arg in expr.args:
                axes += tuple(a for a in self.expr_axes(arg) if a not in axes)
            if expr.func.id in REDUCTION_NAMES:
                return tuple(a for a in axes if a != expr.word("dim"))
            return axes
        return ()

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
        if spec.persistent:
            consts += (KernelParam("NUM_SMS", True),)
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
            ops += self.flat_pids(pids)
        else:
            for number, axis in enumerate(spec.grid):
                if axis.bounds != "whole":  # one program covers the whole extent: no program id
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
        if not spec.persistent:
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
        if spec.persistent:
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
        pid = self.fresh("tile_id") if spec.persistent else self.pid
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
            for alias, axis in zip(targets, (first, second)):
                self.canonical[alias] = axis
                pids[alias] = self.fresh(f"pid_{alias}")
        return [
            self.comment(swizzle.span),
            Line(
                f"{pids[targets[0]]}, {pids[targets[1]]} = tl.swizzle2d("
                f"{pids[first]}, {pids[second]}, tl.num_programs(0), tl.num_programs(1), {swizzle.group_text})"
            ),
        ]

    # memory access ---------------------------------------------------------------
    def scalar_terms(self, tensor: m.Tensor, index) -> list[str]:
        """Offset terms of the constant and index-axis positions of ``tensor[index]`` (a
        sequence, or a dict position -> item)."""
        terms = []
        items = index.items() if isinstance(index, dict) else enumerate(index)
        for position, item in items:
            stride = stride_name(tensor, position)
            if isinstance(item, m.Number):
                if item.text != "0":
                    terms.append(f"{item.text} * {stride}")
            elif self.axes[item.id].scalar:
                terms.append(f"{self.axes[item.id].offs} * {stride}")
        return terms

    def pointer_expr(self, access, context: tuple[str, ...], ops: list[Op] | None, load: bool) -> tuple[str, str | None]:
        """Pointer and mask expressions of ``tensor[index]`` as a tile over ``context``.

        With ``ops`` given, a mask combined from several axes is emitted there once (as
        ``mask_hw``) and reused by every later access over the same axes.
        """
        tensor = self.spec.tensor(access.tensor.id)
        label = "".join(context)
        context = tuple(self.canonical.get(a, a) for a in context)  # an alias takes its axis's place
        terms, masks = [], []
        for position, item in enumerate(access.index):
            if isinstance(item, m.Load):  # a gather: offsets from a loaded index tile
                index = self.load(item, context, ops)
                terms.append(f"{index} * {stride_name(tensor, position)}")
                _, index_mask = self.pointer_expr(item, context, None, load=True)
                dim = tensor.dims[position]
                bound = dim.text if isinstance(dim, m.Number) else dim.id
                # lanes the index tile masks, and indices outside the dimension, read nothing
                masks += [*([index_mask] if index_mask else []), f"({index} >= 0)", f"({index} < {bound})"]
                continue
            if not isinstance(item, m.Name) or self.axes[item.id].scalar:
                terms += self.scalar_terms(tensor, {position: item})
                continue
            info = self.axes[item.id]
            slot = self.canonical.get(item.id, item.id)
            offs, mask = (info.load_offs, info.load_mask) if load else (info.offs, info.mask)
            terms.append(f"{broadcast(offs, slot, context)} * {stride_name(tensor, position)}")
            if mask is not None:
                masks.append(broadcast(mask, slot, context))
        ptr = f"{tensor.name.id}_ptr + " + " + ".join(terms) if terms else f"{tensor.name.id}_ptr"
        masks = list(dict.fromkeys(masks))
        mask = " & ".join(masks) if masks else None
        if ops is not None and len(masks) > 1:
            if mask not in self.masks:
                self.masks[mask] = self.fresh("mask_" + (label or tensor.name.id))
                ops.append(Line(f"{self.masks[mask]} = {mask}"))
            mask = self.masks[mask]
        return ptr, mask

    def block_ptr(self, access, ops: list[Op]) -> tuple[str, str]:
        """``tl.make_block_ptr`` over the tile axes of ``tensor[index]``; constant and index-axis
        positions move the base pointer. Returns the variable and its ``boundary_check`` text."""
        tensor = self.spec.tensor(access.tensor.id)
        base_terms = self.scalar_terms(tensor, access.index)
        base = " + ".join([f"{tensor.name.id}_ptr", *base_terms])
        shape, strides, offsets, blocks, checked = [], [], [], [], []
        for position, item in enumerate(access.index):
            if not isinstance(item, m.Name) or self.axes[item.id].scalar:
                continue
            info = self.axes[item.id]
            dim = tensor.dims[position]
            if info.mask is not None:
                checked.append(str(len(shape)))
            shape.append(dim.text if isinstance(dim, m.Number) else dim.id)
            strides.append(stride_name(tensor, position))
            offsets.append(info.start)
            blocks.append(info.tile)
        var = self.fresh(f"{tensor.name.id}_block_ptr")
        order = tuple_text(str(i) for i in reversed(range(len(shape))))
        ops.append(
            Line(
                f"{var} = tl.make_block_ptr({base}, shape={tuple_text(shape)}, strides={tuple_text(strides)}, "
                f"offsets={tuple_text(offsets)}, block_shape={tuple_text(blocks)}, order={order})"
            )
        )
        return var, tuple_text(checked) if checked else ""

    def descriptor(self, access) -> tuple[str, str]:
        """The host-made tensor descriptor argument of ``tensor`` (``a_desc``) and the offsets
        of this access's tile; records the descriptor's block shape for the launcher."""
        tensor = self.spec.tensor(access.tensor.id)
        axes = [self.axes[i.id] for i in access.index]
        self.descriptor_blocks.setdefault(tensor.name.id, tuple(a.tile for a in axes))
        return f"{tensor.name.id}_desc", "[" + ", ".join(a.start for a in axes) + "]"

    def load(self, expr: m.Load, context: tuple[str, ...], ops: list[Op]) -> str:
        """Emit ``tile = tl.load(...)`` and return the tile, broadcast to ``context``. A tile
        loaded before in this scope (same tensor, index and context) is not loaded again:
        inputs are read-only, so it still holds the same values."""
        key = (expr.tensor.id, _index_key(expr.index), context)
        if key in self.loads:
            return self.loads[key]
        consts = [i.text for i in expr.index if isinstance(i, m.Number)]
        var = self.fresh("_".join([expr.tensor.id, *consts]))
        self.loads[key] = var
        axes = self.tile_axes(expr.index)
        if self.spec.access_style in ("block_ptr", "descriptor") and axes:
            if self.spec.access_style == "descriptor":
                desc, offsets = self.descriptor(expr)
                ops.append(Line(f"{var} = {desc}.load({offsets})"))
            else:
                ptr, checked = self.block_ptr(expr, ops)
                args = f"{ptr}, boundary_check={checked}, padding_option=\"zero\"" if checked else ptr
                ops.append(Line(f"{var} = tl.load({args})"))
            canonical = tuple(self.canonical.get(a, a) for a in context)
            own = tuple(self.canonical.get(a, a) for a in axes)
            ordered = tuple(a for a in canonical if a in own)
            if ordered != own:
                ops.append(Line(f"{var} = tl.permute({var}, {tuple_text(str(own.index(a)) for a in ordered)})"))
            return broadcast_tile(var, ordered, canonical)
        ptr, mask = self.pointer_expr(expr, context, ops, load=True)
        ops.append(Line(f"{var} = tl.load({ptr}, mask={mask})" if mask else f"{var} = tl.load({ptr})"))
        return var

    def upcast(self, text: str, expr: m.Expr, compound: bool = True) -> str:
        """``text`` (the Triton text of ``expr``) in float32 when ``expr`` is f16, bf16 or an
        integer: math computes in float32, as torch does."""
        if not computes_in_f32(self.dtype_of(expr)):
            return text
        return f"({text}).to(tl.float32)" if compound and isinstance(expr, (m.BinOp, m.Neg)) else f"{text}.to(tl.float32)"

    # expressions -----------------------------------------------------------------
    def call(self, call: m.Call, context: tuple[str, ...], ops: list[Op]) -> str:
        """A function of :mod:`tilegen.functions`: math in float32, a helper, or a reduction."""
        name = call.func.id
        choice = next((c for c in self.spec.choices if c.name.id == name), None)
        if choice is not None:
            arg = self.expr(call.args[0], context, ops)
            for option in choice.options:
                if option.id != "none":
                    self.helpers.add(option.id)
            return f"apply_{name}({arg}, {choice.constexpr})"
        function = lookup(name)
        if function.kind == "reduction":
            return self.reduction(call, function, context, ops)
        x = self.expr(call.args[0], context, ops)
        values = {"x": x}
        for position, (param, default) in enumerate(function.params, start=1):
            given = call.args[position] if position < len(call.args) else call.kwarg(param)
            values[param] = self.expr(given, context, ops) if given is not None else default
        if function.kind == "math":
            values["x"] = self.upcast(x, call.args[0])
            if name == "pow":
                return self.power(call, values)
        if function.kind == "cast" and isinstance(call.args[0], (m.BinOp, m.Neg)):
            values["x"] = f"({x})"
        if function.kind == "activation" or name in HELPERS:
            if name == "gelu" and call.word("approximate") == "tanh":
                name = "gelu_tanh"
            self.helpers.add(name)
            return f"{name}({', '.join(values[p] for p in ['x', *(p for p, _ in function.params)])})"
        return function.triton.format(**values)

    def power(self, call: m.Call, values: dict[str, str]) -> str:
        """``pow(x, p)``: a small integer exponent multiplies (any sign of ``x``, as torch);
        any other exponent is ``exp2(p * log2(x))``, which needs ``x > 0`` (torch gives NaN
        for a negative base with a fractional exponent too)."""
        exponent = call.args[1] if len(call.args) > 1 else call.kwarg("exponent")
        x = values["x"]
        if isinstance(exponent, m.Number) and exponent.is_int and int(exponent.text) <= 4:
            count = int(exponent.text)
            return " * ".join([x] * count) if count else "1.0"
        return f"tl.exp2({values['exponent']} * tl.log2({x}))"

    def reduction(self, call: m.Call, function, context: tuple[str, ...], ops: list[Op]) -> str:
        """``sum(x, dim=c)``: the operand as a tile over its own axes (in ``context``'s order,
        then the rest), lanes past the end of ``c`` replaced by the reduction's identity
        (0, -inf, inf), reduced over ``c`` into a new variable, broadcast back to ``context``."""
        dim = call.word("dim")
        operand = call.args[0]
        canonical = tuple(self.canonical.get(a, a) for a in context)
        own = self.expr_axes(operand)
        inner = tuple(a for a in canonical if a in own) + tuple(a for a in own if a not in canonical)
        x = self.expr(operand, inner, ops)
        if function.name in ("sum", "mean"):
            x = self.upcast(x, operand) if self.dtype_of(operand) in ("f16", "bf16") else x
        mask = self.axes[dim].mask
        if mask is not None and mask != "checked":
            identity = {"max": 'float("-inf")', "min": 'float("inf")'}.get(function.name, "0.0")
            x = f"tl.where({broadcast(mask, dim, inner)}, {x}, {identity})"
        result = self.fresh(f"{function.name}_{dim}")
        text = function.triton.format(x=x, axis=inner.index(dim), size=self.axes[dim].dim)
        ops.append(Line(f"{result} = {text}"))
        return broadcast_tile(result, tuple(a for a in inner if a != dim), canonical)

    def expr(self, expr: m.Expr, context: tuple[str, ...], ops: list[Op]) -> str:
        """Emit loads into ``ops`` and return the Triton expression for ``expr``."""
        if isinstance(expr, m.Number):
            return number_text(expr)
        if isinstance(expr, m.Ref):
            name = expr.name.id
            canonical = tuple(self.canonical.get(a, a) for a in context)  # an alias is its axis
            if name in self.locals:
                return broadcast_tile(name, self.locals[name], canonical)
            if name in self.axes:  # an axis's index values: its offsets (a program id for an index axis)
                info = self.axes[name]
                return info.offs if info.scalar else broadcast(info.offs, self.canonical.get(name, name), canonical)
            return name  # a scalar input or a size symbol
        if isinstance(expr, m.Load):
            return self.load(expr, context, ops)
        if isinstance(expr, m.Neg):
            if isinstance(expr.operand, m.Number):
                return number_text(expr)
            inner = self.expr(expr.operand, context, ops)
            return f"-({inner})" if isinstance(expr.operand, m.BinOp) else f"-{inner}"
        if isinstance(expr, m.BinOp):
            left = self.expr(expr.left, context, ops)
            return binop_text(expr, left, self.expr(expr.right, context, ops))
        if isinstance(expr, m.Call):
            return self.call(expr, context, ops)
        raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover

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
        if block_ptrs and axis.masked:
            self.axes[k].mask = "checked"  # a block pointer checks the bounds of a masked axis
        advances: list[str] = []
        body: list[Op] = []
        if mask_k:
            body.append(Line(f"{mask_k} = {offs} < {axis.dim.id} - {step} * {axis.block.id}"))
        for stmt in loop.body:  # the checker allows only ``acc += dot(x[.., k], y[k, ..])`` here
            body.append(self.comment(stmt.span))
            call = stmt.value
            tiles = []
            for operand in call.args:
                tensor = self.spec.tensor(operand.tensor.id)
                tile = self.fresh(tensor.name.id)
                position = next(p for p, i in enumerate(operand.index) if isinstance(i, m.Name) and i.id == k)
                if descriptors:  # bounds are checked by the descriptor (TMA): no masks
                    desc, offsets = self.descriptor(operand)
                    body.append(Line(f"{tile} = {desc}.load({offsets})"))
                elif block_ptrs:
                    var, checked = self.block_ptr(operand, ops)
                    args = f"{var}, boundary_check={checked}, padding_option=\"zero\"" if checked else var
                    body.append(Line(f"{tile} = tl.load({args})"))
                    moves = ["0"] * len(self.tile_axes(operand.index))
                    moves[self.tile_axes(operand.index).index(k)] = axis.block.id
                    advances.append(f"{var} = tl.advance({var}, {tuple_text(moves)})")
                else:
                    context = self.tile_axes(operand.index)
                    ptr, mask = self.pointer_expr(operand, context, None, load=True)
                    var = self.fresh(f"{tensor.name.id}_ptrs")
                    ops.append(Line(f"{var} = {ptr}"))
                    load = f"{tile} = tl.load({var}, mask={mask}, other=0.0)" if mask else f"{tile} = tl.load({var})"
                    body.append(Line(load))
                    advances.append(f"{var} += {axis.block.id} * {stride_name(tensor, position)}")
                tiles.append(tile)
            if any(self.spec.tensor(o.tensor.id).dtype.id == "bf16" for o in call.args):
                self.bf16_dot = True
                upcasts = tuple(Line(f"{t} = {t}.to(tl.float32)") for t in tiles)
                body.append(IfBlock(BF16_DOT_FLAG, "Triton's interpreter cannot tl.dot bf16", upcasts))
            precision = call.word("precision")
            extra = f', input_precision="{precision}"' if precision is not None else ""
            body.append(Line(f"{stmt.name.id} += tl.dot({tiles[0]}, {tiles[1]}{extra})"))
        body += [Line(a) for a in advances]
        ops.append(ForLoop(step, f"range(0, tl.cdiv({axis.dim.id}, {axis.block.id}))", tuple(body)))
        return ops

    def tile_loop(self, loop: m.Loop) -> list[Op]:
        """A loop over tiles inside one program (the Intel guide's add_kernel_fine_grained):
        each step makes its own offsets and mask and runs the body on that tile."""
        axis = loop.axis
        k = axis.name.id
        step = self.fresh(k)
        offs = self.fresh(f"offs_{k}")
        start = f"{step} * {axis.block.id}"
        body: list[Op] = [Line(f"{offs} = {start} + tl.arange(0, {axis.block.id})")]
        body += self.int64_casts([offs])
        info = AxisInfo(offs, None, axis.dim.id, axis.block.id, start)
        if axis.masked:
            info.mask = info.load_mask = self.fresh(f"mask_{k}")
            body.append(Line(f"{info.mask} = {offs} < {axis.dim.id}"))
        self.axes[k] = info
        outer_masks, outer_loads = dict(self.masks), dict(self.loads)  # neither outlives the loop
        for stmt in loop.body:
            if not isinstance(stmt, m.Loop):
                body.append(self.comment(stmt.span))
            body.extend(self.statement(stmt))
        self.masks, self.loads = outer_masks, outer_loads
        return [self.comment(loop.span), ForLoop(step, f"range(0, tl.cdiv({axis.dim.id}, {axis.block.id}))", tuple(body))]

    # statements ------------------------------------------------------------------
    def statement(self, stmt: m.Stmt) -> list[Op]:
        ops: list[Op] = []
        if isinstance(stmt, m.Declare):
            axes = tuple(a.id for a in stmt.axes)
            shape = tuple_text(self.axes[a].tile for a in axes)
            dtype = m.DTYPES[stmt.dtype.id][0]
            value = number_text(stmt.init)
            if value in ("0", "0.0"):
                ops.append(Line(f"{stmt.name.id} = tl.zeros({shape}, dtype={dtype})"))
            else:
                ops.append(Line(f"{stmt.name.id} = tl.full({shape}, {value}, dtype={dtype})"))
            self.locals[stmt.name.id] = axes
            self.dtypes[stmt.name.id] = stmt.dtype.id
            self.taken.add(stmt.name.id)
        elif isinstance(stmt, (m.Assign, m.Accumulate)):
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
            ops.extend(self.store(stmt))
        elif isinstance(stmt, m.Loop):
            ops.extend(self.dot_loop(stmt) if m.is_dot_loop(stmt) else self.tile_loop(stmt))
        return ops

    def store(self, stmt: m.Store) -> list[Op]:
        ops: list[Op] = []
        tensor = self.spec.tensor(stmt.tensor.id)
        context = self.tile_axes(stmt.index)
        value = self.expr(stmt.value, context, ops)
        dtype = m.DTYPES[tensor.dtype.id][0]
        if context and not self.expr_axes(stmt.value):  # a scalar value fills the whole tile
            shape = tuple_text(self.axes[a].tile for a in context)
            if isinstance(stmt.value, m.Number):
                value = f"tl.full({shape}, {value}, dtype={dtype})"
            else:
                value = f"tl.zeros({shape}, dtype={dtype}) + {value}"
                if self.dtype_of(stmt.value) != tensor.dtype.id:
                    value = f"({value}).to({dtype})"
        elif self.dtype_of(stmt.value) != tensor.dtype.id:
            if isinstance(stmt.value, (m.BinOp, m.Neg)):
                value = f"({value})"
            value = f"{value}.to({dtype})"
        if self.spec.access_style == "descriptor" and context:
            desc, offsets = self.descriptor(stmt)
            ops.append(Line(f"{desc}.store({offsets}, {value})"))
            return ops
        if self.spec.access_style == "block_ptr" and context:
            ptr, checked = self.block_ptr(stmt, ops)
            extra = f", boundary_check={checked}" if checked else ""
            ops.append(Line(f"tl.store({ptr}, {value}{extra})"))
            return ops
        ptr, mask = self.pointer_expr(stmt, context, ops, load=False)
        if len(context) > 1:
            ptrs = self.fresh(f"{tensor.name.id}_ptrs")
            ops.append(Line(f"{ptrs} = {ptr}"))
            ptr = ptrs
        ops.append(Line(f"tl.store({ptr}, {value}, mask={mask})" if mask else f"tl.store({ptr}, {value})"))
        return ops

    # the kernel ------------------------------------------------------------------
    def tune(self) -> TunePlan | None:
        spec = self.spec
        if spec.tune is None:
            return None
        configs = tuple(config_text(spec, c) for c in spec.tune.configs)
        default = spec.tune.configs.index(spec.default_config())
        return TunePlan(configs, tuple(k.id for k in spec.tune.key), default)

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
        for stmt in self.spec.body:
            if not isinstance(stmt, m.Loop):
                tile.append(self.comment(stmt.span))
            tile.extend(self.statement(stmt))
        body = list(setup)
        if self.spec.persistent:  # each program loops over tiles, NUM_SMS apart (tutorial 09)
            loop = f"tl.range({self.pid}, {self.num_tiles}, NUM_SMS, flatten=True)"
            body.append(ForLoop(self.tile_id, loop, tuple(tile)))
        else:
            body += tile
        name = f"{self.spec.name.id}_kernel"
        doc = f"Triton kernel generated from {self.spec.path}; launch it through {self.spec.name.id}()."
        helpers = tuple(HelperPlan(h, *HELPERS[h]) for h in HELPERS if h in self.helpers)
        if self.int64:  # the flag goes last, after the spec's own constexprs
            flag = KernelParam(INT64_FLAG, True)
            if params and params[-1][0].constexpr:
                params = (*params[:-1], (*params[-1], flag))
            else:
                params = (*params, (flag,))
        descriptors = tuple((t.name.id, self.descriptor_blocks.get(t.name.id, ())) for t in self.spec.arrays)
        return KernelPlan(
            name, params, tuple(body), doc, self.tune(), helpers, self.choices(), self.bf16_dot, self.int64,
            descriptors if self.spec.access_style == "descriptor" else (),
            tuple(self.whole_blocks.items()),
        )


def _index_key(index) -> tuple:
    """A hashable form of a load's index (names, numbers and gathers)."""
    return tuple(
        ("gather", i.tensor.id, _index_key(i.index)) if isinstance(i, m.Load) else (type(i).__name__, getattr(i, "id", None) or i.text)
        for i in index
    )


def lower_kernel(spec: m.Spec) -> KernelPlan:
    """The ``@triton.jit`` kernel of a checked spec."""
    return KernelLowering(spec).kernel()
