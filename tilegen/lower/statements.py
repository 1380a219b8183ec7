"""Statements in the kernel: declarations, assignments (scaled ones too, see
:mod:`tilegen.lower.scaled`), ``+=``, stores (a split loop's partial sums included), and the
dispatch of loops to :class:`~tilegen.lower.loops.Loops`.

:class:`Statements` holds the :class:`~tilegen.lower.state.KernelState` (it records each local's
axes and dtype there), an :class:`~tilegen.lower.access.Access` and an
:class:`~tilegen.lower.expressions.Expressions`.
"""

from __future__ import annotations

from typing_extensions import assert_never

from tilegen import model as m
from tilegen.lower.access import Access
from tilegen.lower.checked import tensor_of
from tilegen.lower.descriptors import may_subtile, subtiled_store
from tilegen.lower.expressions import Expressions
from tilegen.lower.finish import partial_stores
from tilegen.lower.loops import Loops
from tilegen.lower.names import broadcast, number_text, stride_name, triton_dtype, tuple_text
from tilegen.lower.pieces import each_piece, local_name, pieced
from tilegen.lower.plan import Comment, IfBlock, Line, Op
from tilegen.lower.scaled import split_product
from tilegen.lower.state import KernelState


class Statements:
    """The ops of each statement of the body, in order (:meth:`statement`)."""

    def __init__(self, state: KernelState, access: Access, exprs: Expressions):
        self.state = state
        self.access = access
        self.exprs = exprs
        self.loops = Loops(state, access, self.statement, exprs)

    def statement(self, stmt: m.Stmt) -> list[Op]:
        """The ops of one statement of the body (or of a loop's body), recording in the state the
        locals it defines (their axes and dtype) and the names it takes."""
        state = self.state
        ops: list[Op] = []
        match stmt:
            case m.Declare():
                axes = tuple(a.id for a in stmt.axes)
                dtype = triton_dtype(stmt.dtype)
                value = number_text(stmt.init)
                state.locals[stmt.name.id] = axes

                def declare() -> list[Op]:
                    name, shape = local_name(state, stmt.name.id), tuple_text(state.axes[a].tile for a in axes)
                    if value in ("0", "0.0"):
                        return [Line(f"{name} = tl.zeros({shape}, dtype={dtype})")]
                    return [Line(f"{name} = tl.full({shape}, {value}, dtype={dtype})")]

                ops += each_piece(state, declare, "the second piece's") if pieced(state, stmt.axes) else declare()
                state.dtypes[stmt.name.id] = stmt.dtype.id
                state.written[stmt.name.id] = dtype
                state.taken.add(stmt.name.id)
            case m.Assign() | m.Accumulate():
                if self.scaled_assign(stmt, ops):  # emitted as a scaled local
                    return ops
                context = state.locals.get(stmt.name.id) or self.exprs.expr_axes(stmt.value)
                value = self.exprs.expr(stmt.value, context, ops)
                if isinstance(stmt, m.Assign) and set(self.exprs.expr_axes(stmt.value)) != set(context):
                    # a smaller value broadcast into a variable that keeps its shape (a loop carries it)
                    shape = tuple_text(state.axes[state.canonical.get(a, a)].tile for a in context)
                    value = f"tl.broadcast_to({value}, {shape})"
                operator = "+=" if isinstance(stmt, m.Accumulate) else "="
                ops.append(Line(f"{stmt.name.id} {operator} {value}"))
                state.locals.setdefault(stmt.name.id, context)
                state.dtypes.setdefault(stmt.name.id, self.exprs.dtype_of(stmt.value))
                state.written.setdefault(stmt.name.id, self.exprs.written(stmt.value))
                state.taken.add(stmt.name.id)
                if isinstance(stmt, m.Assign) and stmt.name.id in state.online:
                    ops.extend(self.guarded_extremum(stmt.name.id))
            case m.Store():
                if pieced(state, stmt.index):
                    ops += each_piece(state, lambda: self.store(stmt), "the second piece's rows")
                else:
                    ops.extend(self.store(stmt))
            case m.Loop():
                if stmt.axis.is_index:
                    ops.extend(self.loops.index_loop(stmt))
                else:
                    ops.extend(self.loops.dot_loop(stmt) if m.is_dot_loop(stmt) else self.loops.tile_loop(stmt))
            case _:
                assert_never(stmt)
        return ops

    def guarded_extremum(self, name: str) -> list[Op]:
        """The copy of the running extremum ``name`` that exponentials are taken relative to: 0
        where it still holds its identity (see :meth:`tilegen.lower.loops.Loops.online_extrema`)."""
        state = self.state
        identity, _ = state.online[name]
        safe = state.fresh(f"{name}_or_0")
        state.locals[safe], state.dtypes[safe] = state.locals[name], state.dtypes[name]
        state.written[safe] = state.written.get(name)
        state.online[name] = (identity, safe)
        return [
            Comment(f"{name}, or 0 where it is {identity} (a row of {identity} alone so far): exp(x - {name}) "
                    "relative to it is then 0, not NaN"),
            Line(f'{safe} = tl.where({name} == float("{identity}"), 0.0, {name})'),
        ]

    def scaled_assign(self, stmt: m.Assign | m.Accumulate, ops: list[Op]) -> bool:
        """``s = x * c`` (``c`` a scalar factor) for a local some ``max``/``min`` reduces: emit
        ``s_unscaled = x`` and apply ``c`` where ``s`` is used (:mod:`tilegen.lower.scaled`).
        False, emitting nothing, when ``stmt`` is not such an assignment in this loop range."""
        state = self.state
        name = stmt.name.id
        state.scaled.pop(name, None)
        if not isinstance(stmt, m.Assign) or name not in state.reduced:
            return False
        value = stmt.value
        if isinstance(value, m.Call) and (known := self.exprs.known_branch(value)) is not None:
            value = known  # a causal guard known to hold in this range
        float_tile = lambda x: bool(self.exprs.expr_axes(x)) and self.exprs.dtype_of(x) in m.FLOAT_DTYPES  # noqa: E731
        found = split_product(value, state.spec, float_tile)
        if found is None:
            return False
        x, factor, sign = found
        context = self.exprs.expr_axes(stmt.value)
        if set(self.exprs.expr_axes(x)) != set(context):
            return False
        raw = state.fresh(f"{name}_unscaled")
        ops.append(Line(f"{raw} = {self.exprs.expr(x, context, ops)}"))
        if sign.scalar is not None and sign.scalar not in state.sign_flags:
            state.sign_flags[sign.scalar] = state.fresh(f"{sign.scalar.upper()}_NONNEG")
        text = self.exprs.expr(factor, (), ops)
        state.scaled[name] = (raw, f"({text})" if isinstance(factor, m.BinOp) else text, sign)
        state.locals.setdefault(name, context)
        state.dtypes.setdefault(name, self.exprs.dtype_of(stmt.value))
        state.taken.add(name)
        return True

    def store(self, stmt: m.Store) -> list[Op]:
        """The ops of ``tensor[index] = value``: the value in the tensor's dtype (a scalar filling
        the tile), stored through the spec's access style, or as a split loop's partial sum."""
        state = self.state
        ops: list[Op] = []
        tensor = tensor_of(state.spec, stmt.tensor.id)
        context = self.access.store_axes(stmt.index)
        if id(stmt) in state.across:  # each program's partial, into the workspace
            return partial_stores(state, stmt, state.across[id(stmt)], context, self.exprs, self.access)
        value = self.exprs.expr(stmt.value, context, ops)
        dtype = triton_dtype(tensor.dtype)
        if state.walk is not None and stmt.update == "add":  # deterministic: added into the run's sum, its dtype
            dtype = state.walk.sum_dtype(tensor)
        # a dtype variable's store casts unless the value is a tile of a tensor typed with it
        # (Triton's .to() of a tile already in that dtype is free)
        if isinstance(tensor.dtype, m.BoundDtype):
            typed = stmt.value.func if isinstance(stmt.value, m.Call) else None  # a cast: T(p)
            if isinstance(stmt.value, m.Load):
                typed = tensor_of(state.spec, stmt.value.tensor.id).dtype
            same = isinstance(typed, m.BoundDtype) and typed.var == tensor.dtype.var
        else:  # a tile typed with a dtype variable (T) casts under every binding: one kernel for all
            written = self.exprs.written(stmt.value)
            varies = written is not None and not written.startswith("tl.")
            same = self.exprs.dtype_of(stmt.value) == tensor.dtype.id and not varies
        same = same and dtype == triton_dtype(tensor.dtype)  # a run's sum may be wider than its output
        if context and not self.exprs.expr_axes(stmt.value):  # a scalar value fills the whole tile
            shape = tuple_text(state.axes[a].tile for a in context)
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
        if state.split is not None and context:  # the store after a split loop (the checker allows no other)
            return [*ops, self.partial_store(stmt, context, value)]
        ops.extend(self.store_tile(stmt, context, value))
        return ops

    def store_tile(self, stmt: m.Store, context: tuple[str, ...], value: str) -> list[Op]:
        """The store of the tile ``value`` (already lowered) into ``stmt``'s tensor."""
        state = self.state
        ops: list[Op] = []
        tensor = tensor_of(state.spec, stmt.tensor.id)
        if state.spec.access_style == "descriptor" and context:
            desc, offsets = self.access.descriptor(stmt)
            blocks = state.descriptor_blocks[stmt.tensor.id]
            if self.access.unit_reshape(stmt):  # the tile as the descriptor's block: 1 for each index axis
                value = f"({value}).reshape({', '.join(blocks)})"
            elif may_subtile(state.spec, tensor, blocks):
                state.subtiled.add(tensor.name.id)
                tiles = [state.axes[i.id].tile for i in stmt.index if isinstance(i, m.Name)]
                return [*ops, subtiled_store(desc, offsets, value, tiles)]
            ops.append(Line(f"{desc}.store([{', '.join(offsets)}], {value})"))
            return ops
        if state.spec.access_style == "block_ptr" and context:
            ptr, checked = self.access.block_ptr(stmt, ops)
            extra = f", boundary_check={checked}" if checked else ""
            ops.append(Line(f"tl.store({ptr}, {value}{extra})"))
            return ops
        ptr, mask = self.access.pointer_expr(stmt, context, ops, load=False)
        inside, guard = mask, None
        if stmt.guard is not None:  # y[...] = v where c < n: the lanes the guard holds for
            guard = self.exprs.expr(stmt.guard, context, ops)
            if not self.exprs.expr_axes(stmt.guard):  # one truth value per program: a tile of them
                guard = f"tl.broadcast_to({guard}, {tuple_text(state.axes[a].tile for a in context)})"
            mask = f"{mask} & ({guard})" if mask else guard
        sources = [state.canonical[i.id] for i in stmt.index if isinstance(i, m.Name) and i.id in state.canonical]
        if sources:  # through swizzle aliases: only lanes whose source is inside (see swizzled_outputs)
            canonical = tuple(state.canonical.get(a, a) for a in context)
            masks = [broadcast(axis_mask, a, canonical) for a in sources if (axis_mask := state.axes[a].mask)]
            mask = " & ".join(([mask] if mask else []) + masks) or None
        if len(context) > 1:
            ptrs = state.fresh(f"{tensor.name.id}_ptrs")
            ops.append(Line(f"{ptrs} = {ptr}"))
            ptr = ptrs
        if state.walk is not None and stmt.update == "add":  # deterministic: into the run's accumulator
            assert inside, "a scatter's store has the mask of its index"
            ops.extend(state.walk.accumulate(stmt, context, ptr, inside, guard, value))
            return ops
        if stmt.atomic:  # a scatter-add (max, min): lanes meeting at an element all combine (in no order)
            masked = f", mask={mask}" if mask else ""
            atomic = Line(f'tl.atomic_{stmt.update}({ptr}, {value}{masked}, sem="relaxed")')
            counted = self.count(stmt, context, mask) if guard is None and not sources else None
            ops.append(atomic if counted is None else IfBlock(counted[0], counted[1], counted[2], (atomic,)))
            return ops
        ops.append(Line(f"tl.store({ptr}, {value}, mask={mask})" if mask else f"tl.store({ptr}, {value})"))
        return ops

    def count(
        self, stmt: m.Store, context: tuple[str, ...], mask: str | None
    ) -> tuple[str, str, tuple[Op, ...]] | None:
        """A count, ``counts[x[i]] += 1`` (a constant added into a 1-D output at a loaded index over
        one tile axis), where its output has few elements: the condition (a constexpr the launcher
        sets, ``_rt.histogram_bins``), why, and the ops that count the program's lanes in a
        histogram (``tl.histogram``: the lanes outside the output, or masked, counted in a bin past
        it) and add each bin that holds any into the output, one atomic add per bin instead of one
        per lane, most of them at the same few addresses. None for any other scatter."""
        state = self.state
        tensor = tensor_of(state.spec, stmt.tensor.id)
        index = stmt.index[0] if len(stmt.index) == 1 else None
        if (stmt.update != "add" or len(tensor.dims) != 1 or len(context) != 1 or mask is None
                or not isinstance(stmt.value, m.Number) or not isinstance(index, m.Load)
                or state.spec.access_style != "pointers"):
            return None
        bins = tensor.dims[0].text if isinstance(tensor.dims[0], m.Number) else tensor.dims[0].id
        name = stmt.tensor.id
        if name not in state.histograms:
            state.histograms[name] = (bins, state.fresh(f"{name.upper()}_HISTOGRAM"))
        flag = state.histograms[name][1]
        lanes = self.exprs.expr(index, context, [])  # loaded already, for the pointer
        hist, offs = state.fresh(f"{name}_histogram"), state.fresh(f"{name}_bins")
        ops = (
            Line(f"{hist} = tl.histogram(tl.where({mask}, {lanes}, {flag} - 1).to(tl.int32), {flag})"),
            Line(f"{offs} = tl.arange(0, {flag})"),
            Line(f"tl.atomic_add({name}_ptr + {offs} * {stride_name(tensor, 0)}, "
                 f"{hist}.to({triton_dtype(tensor.dtype)}) * {stmt.value.text}, "
                 f'mask=({offs} < {bins}) & ({hist} > 0), sem="relaxed")'),
        )
        why = f"few elements of {name} (_rt.histogram_bins): a histogram of the program's lanes, an atomic add per bin"
        return flag, why, ops

    def partial_store(self, stmt: m.Store, context: tuple[str, ...], value: str) -> IfBlock:
        """The store after a split loop: with one part (``tl.num_programs`` of the split axis is
        1) the spec's own store; with several, the part's f32 partial sum into the workspace
        [parts, *output], which the launcher adds up into the output."""
        state, split = self.state, self.state.split
        assert split is not None, "a partial store without a split loop"
        acc = stmt.value.args[0] if isinstance(stmt.value, m.Call) else stmt.value
        assert isinstance(acc, m.Ref), "the checker stores a split loop's accumulator, or a cast of it"
        tensor = tensor_of(state.spec, stmt.tensor.id)
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        ops: list[Op] = []
        offsets: list[str] = []
        masks: list[str] = []
        for axis, dim, index in zip(context, dims, ("[:, None]", "[None, :]"), strict=True):
            info = state.axes[axis]
            offs = info.offs
            if not offs:  # descriptor and block-pointer tiles have no offsets of their own
                offs = state.fresh(f"offs_{axis}")
                ops.append(Line(f"{offs} = {info.start} + tl.arange(0, {info.tile})"))
            offsets.append(offs)
            has_mask = info.mask not in (None, "checked")
            masks.append(f"{info.mask}{index}" if has_mask else f"({offs}{index} < {dim})")
        om, on = offsets
        mask = " & ".join(masks)
        ptrs = state.fresh("partials_ptrs")
        ops += [
            Line(f"{ptrs} = {split.workspace} + ({state.split_pid} * {dims[0]} + {om}[:, None]) * {dims[1]} "
                 f"+ {on}[None, :]"),
            Line(f"tl.store({ptrs}, {local_name(state, acc.name.id)}, mask={mask})"),
        ]
        why = f"one of {state.split_parts} partial sums over {split.loop[0]}: to the f32 workspace, summed later"
        return IfBlock(f"{state.split_parts} > 1", why, tuple(ops), tuple(self.store_tile(stmt, context, value)))

