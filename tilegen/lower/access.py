"""Memory access in the kernel: tile offsets of a tensor index, masks, pointer tiles, block
pointers, tensor descriptors, gathers, and loads (reused within a scope).

:class:`Access` holds the :class:`~tilegen.lower.state.KernelState` it reads (``spec``, ``axes``,
``canonical``, the row pieces) and extends (``masks``, ``loads``, ``descriptor_blocks``, names).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tilegen import model as m
from tilegen.lower.checked import tensor_of
from tilegen.lower.names import (
    IndexItem,
    broadcast,
    broadcast_tile,
    is_offset,
    number_text,
    offset_text,
    size_symbols,
    stride_name,
    tuple_text,
)
from tilegen.lower.pieces import pieced
from tilegen.lower.plan import IfBlock, Line, Op
from tilegen.lower.state import KernelState, LoadKey


class Access:
    """Loads and the pointer, mask, block-pointer and descriptor expressions of accesses
    (``tensor[index]``: a :class:`~tilegen.model.Load` or a :class:`~tilegen.model.Store`)."""

    def __init__(self, state: KernelState):
        self.state = state

    def tile_axes(self, index: Iterable[IndexItem]) -> tuple[str, ...]:
        """The axes of ``tensor[index]`` that are tile dimensions (index axes are scalars), an
        offset axis's (``c`` of ``c + N / 2``) included."""
        names = [n for i in index for n in ([i.id] if isinstance(i, m.Name) else m.offset_names(i) if is_offset(i)
                                            else [])]
        return tuple(dict.fromkeys(n for n in names if n in self.state.axes and not self.state.axes[n].scalar))

    def store_axes(self, index: Iterable[IndexItem]) -> tuple[str, ...]:
        """The tile axes of a store's ``tensor[index]``: :meth:`tile_axes`, where a scatter's loaded
        index (``dweight[idx[t], c]``) spans the tile axes of its own index in its place."""
        names: list[str] = []
        for item in index:
            names += self.store_axes(item.index) if isinstance(item, m.Load) else self.tile_axes((item,))
        return tuple(dict.fromkeys(names))

    def offset(self, item: m.Expr, context: tuple[str, ...], ops: list[Op] | None = None) -> str:
        """The index values of an offset axis (``c + N / 2``) as a tile over ``context``: axes
        their offsets (an index axis its program id), sizes and scalars themselves, a loaded start
        (``offsets[r] + c``) the number loaded once per program into ``ops``, ``/`` as ``//``
        (sizes are whole numbers)."""
        state = self.state
        canonical = tuple(state.canonical.get(a, a) for a in context)

        def name(n: str) -> str:
            info = state.axes.get(n)
            if info is None:  # a size or an integer scalar input
                return n
            return info.offs if info.scalar else broadcast(info.offs, state.canonical.get(n, n), canonical)

        return offset_text(item, name, lambda start: self.load(start, (), ops), self.floor)

    def unsigned(self) -> set[str]:
        """The names index arithmetic reads that are never negative: axes (offsets, program ids)
        and sizes."""
        return {*self.state.axes, *size_symbols(self.state.spec)}

    def floor(self, item: m.BinOp, left: str, right: str) -> str:
        """``left // right`` (``/`` in an index too) or ``left % right`` (``item``'s operands' text)
        rounded down, as Python's:
        Triton's own where neither side can be negative (axes, sizes, integers), else the runtime's
        ``floor_divide`` or ``torch_remainder`` (Triton's round toward 0, as C's)."""
        unsigned = self.unsigned()
        op = "%" if item.op == "%" else "//"  # an index's / of sizes rounds down as //
        if m.nonnegative(item.left, unsigned) and m.nonnegative(item.right, unsigned):
            return f"({left} {op} {right})"
        helper = "floor_divide" if op == "//" else "torch_remainder"
        self.state.helpers.add(helper)
        return f"{helper}({left}, {right})"

    def scalar_terms(self, tensor: m.Tensor, index: Sequence[IndexItem] | dict[int, IndexItem]) -> list[str]:
        """Offset terms of the constant and index-axis positions of ``tensor[index]`` (a
        sequence, or a dict position -> item)."""
        state = self.state
        terms: list[str] = []
        items: Iterable[tuple[int, IndexItem]] = index.items() if isinstance(index, dict) else enumerate(index)
        for position, item in items:
            stride = stride_name(tensor, position)
            if isinstance(item, m.Number):
                if item.text != "0":
                    terms.append(f"{item.text} * {stride}")
                continue
            assert isinstance(item, m.Name), f"not a constant or an axis: {item}"
            if state.axes[item.id].scalar:
                terms.append(f"{state.axes[item.id].offs} * {stride}")
        return terms

    def pointer_expr(
        self, access: m.Load | m.Store, context: tuple[str, ...], ops: list[Op] | None, load: bool
    ) -> tuple[str, str | None]:
        """Pointer and mask expressions of ``tensor[index]`` as a tile over ``context``.

        With ``ops`` given, a mask combined from several axes is emitted there once (as
        ``mask_hw``) and reused by every later access over the same axes; without, a gather's
        index tile must have been loaded before (:meth:`load`).
        """
        state = self.state
        tensor = tensor_of(state.spec, access.tensor.id)
        label = "".join(context)
        context = tuple(state.canonical.get(a, a) for a in context)  # an alias takes its axis's place
        terms: list[str] = []
        masks: list[str] = []
        scalar: list[str] = []  # conditions on program ids alone: one truth value per program
        for position, item in enumerate(access.index):
            if isinstance(item, m.Load):  # a gather: offsets from a loaded index tile
                index = self.load(item, context, ops)
                terms.append(f"{index} * {stride_name(tensor, position)}")
                _, index_mask = self.pointer_expr(item, context, None, load=True)
                dim = tensor.dims[position]
                bound = dim.text if isinstance(dim, m.Number) else dim.id
                # lanes the index tile masks, and indices outside the dimension, read nothing
                conditions = [*([index_mask] if index_mask else []), f"({index} >= 0)", f"({index} < {bound})"]
                (masks if self.tile_axes(item.index) else scalar).extend(conditions)
                continue
            if is_offset(item):  # lanes whose index falls outside the dimension read nothing (0)
                index = self.offset(item, context, ops)
                dim = tensor.dims[position]
                bound = dim.text if isinstance(dim, m.Number) else dim.id
                if ops is not None and ("floor_divide(" in index or "torch_remainder(" in index):
                    index = self.named(index, f"{tensor.name.id}_{bound.lower()}_index", ops)
                terms.append(f"{index} * {stride_name(tensor, position)}")
                for axis in self.tile_axes((item,)):
                    info = state.axes[axis]
                    if info.mask is not None:
                        masks.append(broadcast(info.mask, state.canonical.get(axis, axis), context))
                below = [] if m.nonnegative(item, self.unsigned()) else [f"({index} >= 0)"]  # q // KW is never negative
                modulus = (isinstance(item, m.BinOp) and item.op == "%"
                           and (item.right.name.id if isinstance(item.right, m.Ref) else
                                item.right.text if isinstance(item.right, m.Number) else None) == bound)
                above = [] if modulus and below == [] else [f"({index} < {bound})"]  # nor is q % KW past KW
                (masks if self.tile_axes((item,)) else scalar).extend([*below, *above])
                continue
            if not isinstance(item, m.Name) or state.axes[item.id].scalar:
                terms += self.scalar_terms(tensor, {position: item})
                continue
            info = state.axes[item.id]
            slot = state.canonical.get(item.id, item.id)
            offs, mask = (info.load_offs, info.load_mask) if load else (info.offs, info.mask)
            terms.append(f"{broadcast(offs, slot, context)} * {stride_name(tensor, position)}")
            if mask is not None:
                masks.append(broadcast(mask, slot, context))
        ptr = f"{tensor.name.id}_ptr + " + " + ".join(terms) if terms else f"{tensor.name.id}_ptr"
        masks, scalar = list(dict.fromkeys(masks)), list(dict.fromkeys(scalar))
        mask = " & ".join(masks) if masks else None
        if scalar and self.tile_axes(access.index):  # a tile's mask: the program's truth value selects it
            # (``ok & mask_n`` would broadcast the scalar ``ok``, which Triton 3.9's interpreter
            # makes a tile of int32: "mask has unsupported dtype"; a select keeps the lanes' mask)
            mask = f"tl.where({' & '.join(scalar)}, {mask or 'True'}, False)"
            masks = [*masks, *scalar]
        elif scalar:
            masks = [*masks, *scalar]
            mask = " & ".join(masks)
        if ops is not None and mask is not None and len(masks) > 1:
            if mask not in state.masks:
                state.masks[mask] = state.fresh("mask_" + (label or tensor.name.id))
                ops.append(Line(f"{state.masks[mask]} = {mask}"))
            mask = state.masks[mask]
        return ptr, mask

    def named(self, text: str, base: str, ops: list[Op]) -> str:
        """A variable holding ``text`` (a computed index: ``x_h_index = floor_divide(oh + ph - dh * kh,
        sh)``), emitted into ``ops`` once per scope, so that its mask and its pointer read it
        (Triton's interpreter would compute it again for each)."""
        key = f"index: {text}"
        if key not in self.state.masks:
            self.state.masks[key] = self.state.fresh(base)
            ops.append(Line(f"{self.state.masks[key]} = {text}"))
        return self.state.masks[key]

    def block_ptr(self, access: m.Load | m.Store, ops: list[Op]) -> tuple[str, str]:
        """``tl.make_block_ptr`` over the tile axes of ``tensor[index]``; constant and index-axis
        positions move the base pointer. Returns the variable and its ``boundary_check`` text."""
        state = self.state
        tensor = tensor_of(state.spec, access.tensor.id)
        base_terms = self.scalar_terms(tensor, access.index)
        base = " + ".join([f"{tensor.name.id}_ptr", *base_terms])
        shape: list[str] = []
        strides: list[str] = []
        offsets: list[str] = []
        blocks: list[str] = []
        checked: list[str] = []
        for position, item in enumerate(access.index):
            if not isinstance(item, m.Name) or state.axes[item.id].scalar:
                continue
            info = state.axes[item.id]
            dim = tensor.dims[position]
            if info.mask is not None:
                checked.append(str(len(shape)))
            shape.append(dim.text if isinstance(dim, m.Number) else dim.id)
            strides.append(stride_name(tensor, position))
            offsets.append(info.start)
            blocks.append(info.tile)
        var = state.fresh(f"{tensor.name.id}_block_ptr")
        order = tuple_text(str(i) for i in reversed(range(len(shape))))
        ops.append(
            Line(
                f"{var} = tl.make_block_ptr({base}, shape={tuple_text(shape)}, strides={tuple_text(strides)}, "
                f"offsets={tuple_text(offsets)}, block_shape={tuple_text(blocks)}, order={order})"
            )
        )
        return var, tuple_text(checked) if checked else ""

    def descriptor_load(self, access: m.Load, var: str) -> Op:
        """``var = a_desc.load([...])``; for a 2D input whose layout the launcher decides (a
        ``transposed`` flag), the column-major case reads the transpose's tile and transposes it,
        as tutorial 09 reads ``b`` stored ``[N, K]``. Index axes and constants of the index are
        blocks of 1, reshaped away: ``k_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, BLOCK_D)``."""
        desc, offsets = self.descriptor(access)
        load = Line(f"{var} = {desc}.load([{', '.join(offsets)}]){self.unit_reshape(access)}")
        flag = self.state.transposed.get(access.tensor.id)
        if flag is None:
            return load
        column = Line(f"{var} = {desc}.load([{', '.join(reversed(offsets))}]).T")
        why = f"{access.tensor.id} is column-major: its descriptor spans {access.tensor.id}.T"
        return IfBlock(flag, why, (column,), (load,))

    def descriptor(self, access: m.Load | m.Store) -> tuple[str, list[str]]:
        """The host-made tensor descriptor argument of ``tensor`` (``a_desc``) and the offsets
        of this access's tile, one a dimension; records the descriptor's block shape for the launcher (1 where
        the index holds an index axis, a constant or an offset of index axes and sizes)."""
        state = self.state
        tensor = tensor_of(state.spec, access.tensor.id)
        blocks: list[str] = []
        offsets: list[str] = []
        pieces = dict.fromkeys(state.pieces.rows, state.pieces.block) if state.pieces is not None else {}
        for item in access.index:
            if isinstance(item, m.Number):
                blocks.append("1")
                offsets.append(item.text)
            elif is_offset(item):  # one number per program (k[z, h / (H / HK), n, d]): a block of 1
                blocks.append("1")
                offsets.append(self.offset(item, ()))
            else:
                assert isinstance(item, m.Name), f"not a constant or an axis: {item}"
                tile = state.axes[item.id].tile
                blocks.append(pieces.get(tile, tile))  # a row piece's descriptor: the launcher sets its block
                offsets.append(state.axes[item.id].start)
        state.descriptor_blocks.setdefault(tensor.name.id, tuple(blocks))
        second = state.piece == 1 and pieced(state, access.index)  # the second row piece's descriptor
        return f"{tensor.name.id}_{'piece_desc' if second else 'desc'}", offsets

    def unit_reshape(self, access: m.Load | m.Store) -> str:
        """``.reshape(...)`` from a descriptor's block to the access's tile, dropping the blocks
        of 1 of index axes and constants; empty where the index has tile axes only."""
        tiles = [self.state.axes[a].tile for a in self.tile_axes(access.index)]
        if len(tiles) == len(access.index):
            return ""
        return f".reshape({', '.join(tiles)})" if tiles else ".reshape(())"

    def hoisted(self, expr: m.Load, ops: list[Op]) -> list[Op]:
        """Where a load goes: before the outermost enclosing tile loop whose axis (nor any loop
        inside it) it does not use, as attention loads q once before its loop over keys; else
        ``ops``, where it is used."""
        used: set[str] = set()
        for part in m.subexpressions(expr):
            if isinstance(part, m.Load):
                used |= {i.id for i in part.index if isinstance(i, m.Name)}
                used |= {n for i in part.index if is_offset(i) for n in m.offset_names(i)}  # values[offsets[b] + l]
        for axis, preheader in reversed(self.state.hoists):
            if axis in used:
                break
            ops = preheader
        return ops

    def takes_guard(self, expr: m.Load, context: tuple[str, ...], ops: list[Op] | None, fill: str | None) -> bool:
        """Whether :meth:`load` of ``expr`` joins a ``guard`` to its mask: not where the tile is
        loaded whole already (no second load), nor where the load is hoisted before a loop, goes
        through block pointers or descriptors, or has no tile axis (only a load made where the
        guard is, through pointers, takes it)."""
        state = self.state
        return ((m.expr_key(expr), context, fill) not in state.loads and ops is not None
                and self.hoisted(expr, ops) is ops and state.spec.access_style == "pointers"
                and bool(self.tile_axes(expr.index)))

    def load(self, expr: m.Load, context: tuple[str, ...], ops: list[Op] | None, fill: str | None = None,
             guard: str | None = None) -> str:
        """Emit ``tile = tl.load(...)`` and return the tile, broadcast to ``context``; masked-off
        lanes read ``fill`` (``other=``; a ``dot`` operand asks for 0.0), or nothing defined. A
        tile loaded before in this scope (same tensor, index, context and fill) is not loaded
        again: inputs are read-only, so it still holds the same values; through descriptors, one
        loaded across (the same two axes in the other order: ``dot(k[n, d], q[m, d])`` beside
        ``dot(ds, q[m, d])``) is taken transposed, ``tile.T``, rather than read a second time
        (pointer loads are built in the order asked for, as before). ``guard`` (a mask over
        ``context``, the condition of a ``where`` that keeps this tile) joins the load's mask, so
        that the lanes the ``where`` drops cost no memory traffic; it is left out where the load is
        hoisted before a loop or goes through block pointers or descriptors. Without ``ops``, only such
        a tile (a nested gather's index, whose mask :meth:`pointer_expr` recomputes)."""
        state = self.state
        if guard is not None and not self.takes_guard(expr, context, ops, fill):
            guard = None
        key: LoadKey = (m.expr_key(expr), context, fill if guard is None else f"{fill} if {guard}")
        if key in state.loads:
            return state.loads[key]
        if state.spec.access_style == "descriptor" and len(context) == 2:  # the same tile loaded across
            across = state.loads.get((key[0], context[::-1], key[2]))
            if across is not None and across.isidentifier():
                return f"{across}.T"  # transposed, not read again
        assert ops is not None, f"{expr.tensor.id}: a load with nowhere to go"
        target = self.hoisted(expr, ops)
        if target is not ops:  # before a loop: every range of the loop reuses it
            state.hoisted_loads.add(key)
        ops = target
        consts = [i.text for i in expr.index if isinstance(i, m.Number)]
        var = state.fresh("_".join([expr.tensor.id, *consts]))
        state.loads[key] = var
        axes = self.tile_axes(expr.index)
        if state.spec.access_style in ("block_ptr", "descriptor") and axes:
            canonical = tuple(state.canonical.get(a, a) for a in context)
            own = tuple(state.canonical.get(a, a) for a in axes)
            ordered = tuple(a for a in canonical if a in own)
            permute = f"tl.permute({var}, {tuple_text(str(own.index(a)) for a in ordered)})" if ordered != own else ""
            if state.spec.access_style == "descriptor":
                load = self.descriptor_load(expr, var)
                if permute and len(own) == 2 and isinstance(load, Line):  # a [d, n] tile of k: k_desc.load(..).T
                    load, permute = Line(f"{load.code}.T"), ""
                ops.append(load)
            else:
                ptr, checked = self.block_ptr(expr, ops)
                args = f"{ptr}, boundary_check={checked}, padding_option=\"zero\"" if checked else ptr
                ops.append(Line(f"{var} = tl.load({args})"))
            if permute:
                ops.append(Line(f"{var} = {permute}"))
            state.loads[key] = broadcast_tile(var, ordered, canonical)  # a later use broadcasts it alike
            return state.loads[key]
        ptr, mask = self.pointer_expr(expr, context, ops, load=True)
        if guard is not None:  # where(l < n, values[...], 0): the lanes the where drops are not read
            mask = f"{mask} & ({guard})" if mask else guard
        if fill is None and any(is_offset(i) for i in expr.index):  # an offset's lanes outside the tensor read 0
            fill = "0"
        other = f", other={fill}" if fill is not None else ""
        flag = state.given_flags.get(expr.tensor.id)
        if flag is not None:  # an optional input left out: its number, which the compiler folds
            pointers = state.fresh(f"{var}_ptrs")
            ops.append(Line(f"{pointers} = {ptr}"))
            ptr = pointers
        loaded = f"tl.load({ptr}, mask={mask}{other})" if mask else f"tl.load({ptr})"
        if flag is not None:
            initial = next(t.initial for t in state.spec.inputs if t.name.id == expr.tensor.id)
            assert initial is not None
            dtype = f"{expr.tensor.id}_ptr.dtype.element_ty"
            loaded += f" if {flag} else tl.full({ptr}.shape, {number_text(initial)}, {dtype})"
        ops.append(Line(f"{var} = {loaded}"))
        return var

