"""Loops in the kernel: a ``dot`` loop over tiles of K (pointers made once and advanced, or block
pointers, or descriptors; a split loop's part of K), and a loop over tiles inside one program, in
up to two ranges (see :mod:`tilegen.lower.ranges`) with the loads that do not change with its axis
hoisted before it.

:class:`Loops` holds the :class:`~tilegen.lower.state.KernelState` (it gives each loop's axis its
:class:`~tilegen.lower.state.AxisInfo` and scopes ``masks``, ``loads`` and names to each range),
an :class:`~tilegen.lower.access.Access`, and the function lowering one statement of a body.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

from tilegen import model as m
from tilegen.carried import running_extrema
from tilegen.functions import function_of, literal_value
from tilegen.lower.access import Access
from tilegen.lower.checked import block_of, tensor_of
from tilegen.lower.expressions import Expressions
from tilegen.lower.grid import int64_casts
from tilegen.lower.names import BF16_DOT_OPERAND, dtype_options, mentions, stride_name, tuple_text
from tilegen.lower.pieces import in_piece, local_name, pieced
from tilegen.lower.plan import Comment, ForLoop, IfBlock, Line, Op, code_lines
from tilegen.lower.ranges import (
    Guard,
    end_bound,
    find_guard,
    from_below,
    guard_steps,
    lanes_past_end_are_guarded,
    second_guard,
    skips_when_false,
    splits_full_tiles,
    step_skips,
)
from tilegen.lower.state import AxisInfo, KernelState


class Loops:
    """The ops of a ``for`` statement: :meth:`dot_loop` or :meth:`tile_loop`. ``statement``
    lowers one statement of a loop's body (:meth:`tilegen.lower.statements.Statements.statement`);
    ``exprs`` lowers expressions (a step's condition)."""

    def __init__(self, state: KernelState, access: Access, statement: Callable[[m.Stmt], list[Op]],
                 exprs: Expressions):
        self.state = state
        self.access = access
        self.statement = statement
        self.exprs = exprs

    def dot_loop(self, loop: m.Loop, taps: tuple[m.Loop, ...] = ()) -> list[Op]:
        """``acc += dot(a[m, k], b[k, n])`` over tiles of k: pointers (or block pointers) made
        once before the loop and advanced each step; a masked loop masks the K tail.

        ``taps``, the index loops around it (a convolution's ``for kh over KH``, ``for kw over
        KW``; see :func:`taps_chain`), become digits of one loop with it: step ``i`` of
        ``range(0, KH * KW * tl.cdiv(C, BC))`` runs tap ``(i // KW % KH, i % KW)`` on tile
        ``i // (KH * KW)`` of k, its pointers made from those digits. Triton software-pipelines
        only a loop with no loop inside it, and a few tiles of k per tap (3 to 64 channels) leave
        an inner loop too short to pipeline; one loop over all of them keeps the next tiles'
        loads in flight while a ``dot`` runs."""
        state = self.state
        axis = loop.axis
        k = axis.name.id
        block = block_of(axis)
        ops: list[Op] = [*(state.comment(t.span) for t in taps), state.comment(loop.span)]
        block_ptrs = state.spec.access_style == "block_ptr"
        descriptors = state.spec.access_style == "descriptor"
        step = state.fresh(k)
        offs = mask_k = None
        if not block_ptrs and not descriptors:
            offs = state.fresh(f"offs_{k}")
            ops.append(Line(f"{offs} = tl.arange(0, {block})"))
            mask_k = state.fresh(f"mask_{k}") if axis.masked else None
        start = f"{step} * {block}" if descriptors else "0"
        state.axes[k] = AxisInfo(offs or "", mask_k, axis.dim.id, block, start)
        tiles = f"tl.cdiv({axis.dim.id}, {block})"
        first = "0"
        iterable = f"range(0, {tiles})"
        digits: list[Op] = []
        loop_var = step
        if taps:  # one loop over the taps (fastest, the innermost last) and the tiles of k
            loop_var, digits = self._digits(taps, k, tiles, step)
            iterable = f"range(0, {' * '.join(t.axis.dim.id for t in taps)} * {tiles})"
            ops.append(Comment(f"the taps ({', '.join(t.axis.name.id for t in taps)}) and the tiles of {k} in one "
                               "loop, software-pipelined as one"))
        if loop.split:  # this program's part of the loop: tl.num_programs(..) programs share the tile
            split = state.split
            assert split is not None, "a split loop without its plan"
            pid, parts = state.fresh(f"pid_{k}"), state.fresh(f"split_{k}")
            per_part, first = state.fresh(f"{k}_per_part"), state.fresh(f"{k}_first")
            state.split_pid, state.split_parts = pid, parts
            ops += [
                Line(f"{pid} = tl.program_id({split.axis})"),
                Line(f"{parts} = tl.num_programs({split.axis})  # 1 where the output tiles fill the GPU"),
                Line(f"{per_part} = tl.cdiv({tiles}, {parts})"),
                Line(f"{first} = {pid} * {per_part}"),
                *int64_casts(state, [first]),
            ]
            iterable = f"range({first}, min({first} + {per_part}, {tiles}))"
        if block_ptrs and axis.masked:
            state.axes[k].mask = "checked"  # a block pointer checks the bounds of a masked axis
        advances: list[str] = []
        body: list[Op] = digits
        if mask_k:
            body.append(Line(f"{mask_k} = {offs} < {axis.dim.id} - {step} * {block}"))
        def operand_tile(number: int, operand: m.Load, into: list[Op], bf16: bool) -> str:
            """Load dot operand ``number`` (0: rows, 1: columns) into ``into``; return its tile (for
            a ``bf16`` dot, as the interpreter's upcast operand)."""
            tensor = tensor_of(state.spec, operand.tensor.id)
            tile = state.fresh(tensor.name.id)
            position = next(p for p, i in enumerate(operand.index) if isinstance(i, m.Name) and i.id == k)
            own = self.access.tile_axes(operand.index)
            other = next(a for a in own if a != k)
            context = (other, k) if number == 0 else (k, other)  # (M, K) @ (K, N): b read as [k, n]
            if descriptors:  # bounds are checked by the descriptor (TMA): no masks
                into.append(self.access.descriptor_load(operand, tile))
            elif block_ptrs:
                var, checked = self.access.block_ptr(operand, ops)
                args = f"{var}, boundary_check={checked}, padding_option=\"zero\"" if checked else var
                into.append(Line(f"{tile} = tl.load({args})"))
                moves = ["0"] * len(self.access.tile_axes(operand.index))
                moves[self.access.tile_axes(operand.index).index(k)] = block
                advances.append(f"{var} = tl.advance({var}, {tuple_text(moves)})")
            else:
                ptr, mask = self.access.pointer_expr(operand, context, None, load=True)
                var = state.fresh(f"{tensor.name.id}_ptrs")
                if taps:  # made each step, at the step's tap and tile of k
                    into.append(Line(f"{var} = {ptr} + {step} * {block} * {stride_name(tensor, position)}"))
                else:
                    ops.append(Line(f"{var} = {ptr}"))
                    advances.append(f"{var} += {block} * {stride_name(tensor, position)}")
                load = f"{tile} = tl.load({var}, mask={mask}, other=0.0)" if mask else f"{tile} = tl.load({var})"
                into.append(Line(load))
            if (descriptors or block_ptrs) and own != context:  # a tile in the tensor's order
                into.append(Line(f"{tile} = tl.trans({tile})"))
            if bf16:  # see BF16_DOT_FLAG: the interpreter upcasts them
                state.bf16_dot = True
                return f"{BF16_DOT_OPERAND}({tile})"
            return tile

        for stmt in loop.body:  # the checker allows only ``acc += dot(x[.., k], y[k, ..])`` here
            body.append(state.comment(stmt.span))
            acc, call, operands = _dot_step(stmt)
            precision = call.word("precision")
            extra = f', input_precision="{precision}"' if precision is not None else ""
            bf16 = any("bf16" in dtype_options(tensor_of(state.spec, o.tensor.id).dtype) for o in operands)
            two = pieced(state, operands[0].index)  # the rows in two pieces: the same tile of b for both
            with in_piece(state, 0) if two else nullcontext():
                loaded = [operand_tile(number, operand, body, bf16) for number, operand in enumerate(operands)]
                body.append(Line(f"{acc.name.id} += tl.dot({loaded[0]}, {loaded[1]}{extra})"))
            if two:
                assert state.pieces is not None
                second: list[Op] = []
                with in_piece(state, 1):
                    rows = operand_tile(0, operands[0], second, bf16)
                    second.append(Line(f"{local_name(state, acc.name.id)} += tl.dot({rows}, {loaded[1]}{extra})"))
                body.append(IfBlock(f"{state.pieces.rows[1]} > 0", "the second piece's rows", tuple(second)))
        body += [Line(a) for a in advances]
        if first != "0" and advances:  # pointers start at the part's first tile of k
            ops += [Line(a.replace(" += ", f" += {first} * ", 1)) for a in advances]
        ops.append(ForLoop(loop_var, iterable, tuple(body)))
        return ops

    def _digits(self, taps: tuple[m.Loop, ...], k: str, tiles: str, step: str) -> tuple[str, list[Op]]:
        """The variable of one loop over ``taps`` and the ``tiles`` of ``k``, and the lines that
        split its step into the taps' indices (the innermost tap fastest) and ``step``, the tile
        of k (slowest); each tap becomes a scalar axis of the state."""
        state = self.state
        flat = state.fresh("_".join([t.axis.name.id for t in taps] + [k]))
        digits: list[Op] = []
        inside: list[str] = []  # the extents of the taps inside this one
        for tap in reversed(taps):
            index, extent = state.fresh(tap.axis.name.id), tap.axis.dim.id
            state.axes[tap.axis.name.id] = AxisInfo(index, None, extent, "1", index, scalar=True)
            digits.insert(0, Line(f"{index} = {flat}{_over(inside)} % {extent}"))
            inside.insert(0, extent)
        digits.append(Line(f"{step} = {flat}{_over(inside)}"))
        return flat, digits

    def index_loop(self, loop: m.Loop) -> list[Op]:
        """A loop over the indices of a dimension (``for kh over K``, no block): each step's index
        is one number, as a batch axis's program id is, so the body's tiles do not grow by it
        (a convolution's window taps, the query heads a key head serves)."""
        taps, assigns, inner = taps_chain(loop, self.state)
        if inner is not None:  # a dot loop comes with no assignments (taps_chain)
            return self.dot_loop(inner, taps) if m.is_dot_loop(inner) else self.tile_loop(inner, taps, assigns)
        state = self.state
        axis = loop.axis
        k = axis.name.id
        step = state.fresh(k)
        state.axes[k] = AxisInfo(step, None, axis.dim.id, "1", step, scalar=True)
        outer_masks, outer_loads = dict(state.masks), dict(state.loads)
        preheader: list[Op] = []  # loads of a loop inside that change with neither loop: before this one
        state.hoists.append((k, preheader))
        body: list[Op] = []
        for stmt in loop.body:
            if not isinstance(stmt, m.Loop):
                body.append(state.comment(stmt.span))
            body.extend(self.statement(stmt))
        state.hoists.pop()
        state.masks, state.loads = outer_masks, outer_loads
        state.taken |= _defined(preheader)
        if preheader:
            preheader.insert(0, Comment(f"tiles that do not change with {k}: loaded once, before the loop"))
        return [state.comment(loop.span), *preheader, ForLoop(step, f"range(0, {axis.dim.id})", tuple(body))]

    def tile_loop(self, loop: m.Loop, taps: tuple[m.Loop, ...] = (), assigns: tuple[m.Assign, ...] = ()) -> list[Op]:
        """A loop over tiles inside one program (the Intel guide's add_kernel_fine_grained):
        each step makes its own offsets and mask and runs the body on that tile.

        The innermost loop of a nest runs in up to two ranges (see :mod:`tilegen.lower.ranges`):
        first the tiles wholly inside the dimension (and, with a causal guard, wholly on its true
        side), with no masks; then the edge tiles, masked. Tiles where a causal guard holds
        nowhere are skipped when that provably changes nothing. A loop with a loop nested in it
        runs as one masked loop over all its tiles (:func:`tilegen.lower.ranges.splits_full_tiles`:
        the code stays linear in the depth of the nest). Loads that do not change with the
        loop's axis go before the loop, once, for every range.

        ``taps``, index loops around it, and ``assigns``, the assignments among them (see
        :func:`taps_chain`), make one loop with it, as :meth:`dot_loop` does, in two ranges (the
        tiles inside the dimension at every tap, unmasked; then the last tile at every tap), the
        taps' digits and the assignments first in each step; the rest of a step runs under ``if``
        the conditions of :func:`tilegen.lower.ranges.step_skips` (a transposed convolution's
        taps the stride skips).
        """
        state = self.state
        axis = loop.axis
        k = axis.name.id
        block = block_of(axis)
        step = state.fresh(k)
        offs = state.fresh(f"offs_{k}")
        mask = state.fresh(f"mask_{k}") if axis.masked else None
        tile_axes = {a for a, info in state.axes.items() if not info.scalar and a != k}
        guard = find_guard(loop, tile_axes)
        guarded = False  # lanes past the end are on the guard's false side: masked on loads only
        tiles, whole_tiles = f"tl.cdiv({axis.dim.id}, {block})", f"{axis.dim.id} // {block}"
        if not splits_full_tiles(loop):  # an outer level of a nest: one loop over every tile, masked
            checks = ["masked"] if axis.masked else []
            checks += [f"{k} {guard.op} {guard.axis} evaluated"] if guard is not None else []
            why = f"every tile of {k}, {', '.join(checks)}: a loop around loops (only the innermost splits)"
            ranges = [(("0", tiles), not checks, why if checks else "")]
        elif guard is not None and from_below(guard):  # skipped tiles first, then masked ones, then whole ones
            other = state.axes[guard.axis]
            full, live = guard_steps(guard, other.start, other.tile, block)
            cond = f"{k} {guard.op} {guard.axis}"
            first, skipped = "0", ""
            if skips_when_false(loop, guard, set(state.locals)):
                first, skipped = live, f"; earlier tiles change nothing (where {cond} holds nowhere): skipped"
            ranges = [
                ((first, f"min({tiles}, {full})"), False,
                 f"tiles where {cond} holds for some lanes: masked{skipped}"),
                ((full, whole_tiles), True,
                 f"tiles of {k} inside {axis.dim.id} where {cond} holds everywhere: no masks"),
            ]
            if axis.masked:
                ranges.append(((f"max({full}, {whole_tiles})", tiles), False,
                               f"the last tile, if {axis.dim.id} % {block} != 0: masked"))
        elif guard is not None:
            other = state.axes[guard.axis]
            full, live = guard_steps(guard, other.start, other.tile, block)
            skip = skips_when_false(loop, guard, set(state.locals))
            cond, split = f"{k} {guard.op} {guard.axis}", f"min({whole_tiles}, {full})"
            end, skipped = tiles, ""
            if skip:
                end = f"min({tiles}, {live})"
                skipped = f"; later tiles change nothing (where {cond} holds nowhere): skipped"
            # block pointers check bounds from the same mask the tile's math uses: they keep it
            guarded = axis.masked and state.spec.access_style != "block_ptr" and lanes_past_end_are_guarded(
                loop, guard, set(state.locals), other.dim == axis.dim.id
            )
            if guarded:
                dim = axis.dim.id
                skipped += f"; lanes past {dim} fail {cond} in every row stored: only the loads check {dim}"
            ranges = [
                (
                    ("0", split),
                    True,
                    f"tiles of {k} inside {axis.dim.id} where {cond} holds everywhere: no masks",
                ),
                (
                    (split, end),
                    False,
                    f"tiles where {cond} holds for some lanes, or past {axis.dim.id}: masked{skipped}",
                ),
            ]
        elif axis.masked and loop.reverse:  # the last tile first; step i takes tile tiles - 1 - i
            ranges = [
                (("0", f"{tiles} - {whole_tiles}"), False,
                 f"from the end: the last tile, if {axis.dim.id} % {block} != 0: masked"),
                ((f"{tiles} - {whole_tiles}", tiles), True,
                 f"the tiles of {k} inside {axis.dim.id}, from the last: no masks"),
            ]
        elif axis.masked:
            ranges = [
                (("0", whole_tiles), True, f"tiles of {k} inside {axis.dim.id}: no masks"),
                (
                    (whole_tiles, tiles),
                    False,
                    f"the last tile, if {axis.dim.id} % {block} != 0: masked",
                ),
            ]
        else:
            ranges = [(("0", tiles), True, "from the end" if loop.reverse else "")]
        digits: list[Op] = []
        flat = step  # the loop's variable
        tile = f"({tiles} - 1 - {step})" if loop.reverse else step  # the tile a step takes
        if taps:  # one loop over the taps and the tiles of k: the tiles inside its dimension, then the last
            flat, digits = self._digits(taps, k, tiles, step)
            named, steps = ", ".join(t.axis.name.id for t in taps), " * ".join(t.axis.dim.id for t in taps)
            ranges = [(("0", f"{steps} * ({whole_tiles})" if axis.masked else f"{steps} * {tiles}"), True,
                       f"the taps ({named}) and the tiles of {k} inside {axis.dim.id} in one loop: no masks")]
            if axis.masked:  # the tile of k is the slowest digit: the last one's steps come last
                ranges.append(((f"{steps} * ({whole_tiles})", f"{steps} * {tiles}"), False,
                               f"the last tile, if {axis.dim.id} % {block} != 0, at every tap: masked"))
        outer_masks, outer_loads, outer_taken = dict(state.masks), dict(state.loads), set(state.taken)
        outer_online, online = state.online, self.online_extrema(loop)
        outer_locals = set(state.locals)
        preheader: list[Op] = []  # loads that do not change with k go here, before the loop
        loops: list[Op] = []
        # tiles at or past a number per program (m < n_b), or on the false side of a guard on the other
        # side of k from the causal one, change nothing: every range is clamped to the others
        scalars = {n for n, axes in state.locals.items() if not axes}
        clamps: list[tuple[Guard, str]] = []  # (the bound, the tile where its live tiles start or end)
        if splits_full_tiles(loop) and not loop.reverse:
            if (bound := end_bound(loop, scalars, set(state.locals))) is not None:
                clamps.append((bound, f"tl.cdiv({bound.axis}{' + 1' if bound.op == '<=' else ''}, {block})"))
            if guard is not None and not taps and (other_side := second_guard(loop, tile_axes, guard,
                                                                              set(state.locals))) is not None:
                other = state.axes[other_side.axis]
                clamps.append((other_side, guard_steps(other_side, other.start, other.tile, block)[1]))
        for clamp, live in clamps:
            if from_below(clamp):  # its first live tile: every range starts there or later
                ranges = [((f"max({first}, {live})", last), inside, why) for (first, last), inside, why in ranges]
            else:  # past its last live tile: every range ends there or sooner
                ranges = [((first, f"min({last}, {live})"), inside, why) for (first, last), inside, why in ranges]
        for (first, last), inside, why in ranges:
            iterable = f"range({first}, {last})"
            body: list[Op] = list(digits)
            for assign in assigns:  # the statements between the taps, at this step's tap
                body += [state.comment(assign.span), *self.statement(assign)]
            condition = self.live_step(loop, assigns, outer_locals) if taps else None
            head = len(body)
            body.append(Line(f"{offs} = {tile} * {block} + tl.arange(0, {block})"))
            body += int64_casts(state, [offs])
            info = AxisInfo(offs, None, axis.dim.id, block, f"{tile} * {block}")
            if mask is not None and not inside:
                info.mask = None if guarded else mask
                info.load_mask = mask
                if not guarded or state.spec.access_style == "pointers":
                    body.append(Line(f"{mask} = {offs} < {axis.dim.id}"))
            state.axes[k] = info
            if guard is not None:
                state.known_conditions[guard.key] = True if inside else None
            # each range sees the masks and loads of the enclosing scope, and the tiles hoisted
            # before the loop; it names its own tiles as the other range does
            hoisted = {key: state.loads[key] for key in state.hoisted_loads if key in state.loads}
            state.masks, state.loads = dict(outer_masks), {**outer_loads, **hoisted}
            state.taken = outer_taken | _defined(preheader)
            state.hoists.append((k, preheader))
            state.online = {**outer_online, **{name: (identity, "") for name, identity in online.items()}}
            for stmt in loop.body:
                if not isinstance(stmt, m.Loop):
                    body.append(state.comment(stmt.span))
                body.extend(self.statement(stmt))
            made = Line(f"{mask} = {offs} < {axis.dim.id}")
            if made in body and not mentions(code_lines(op for op in body if op != made), str(mask)):
                body.remove(made)  # no load or store took it (offset loads carry their own bounds)
            state.hoists.pop()
            if condition is not None:  # the step's tiles, loads and dot only where it adds something
                why_not = "a step where this is false adds nothing: skipped"
                body[head:] = [IfBlock(condition, why_not, tuple(body[head:]))]
            if why:
                loops.append(Comment(why))
            loops.append(ForLoop(flat, iterable, tuple(body)))
        for clamp, _ in clamps:
            side = "starts after" if from_below(clamp) else "ends before"
            loops.insert(0, Comment(f"tiles of {k} where {k} {clamp.op} {clamp.axis} holds nowhere change nothing: "
                                    f"each range {side} them"))
        if guard is not None:
            state.known_conditions.pop(guard.key, None)
        state.masks, state.loads, state.online = outer_masks, outer_loads, outer_online
        state.taken |= _defined(preheader)
        if preheader:
            preheader.insert(0, Comment(f"tiles that do not change with {k}: loaded once, before the loop"))
        return [*(state.comment(t.span) for t in taps), state.comment(loop.span), *preheader, *loops]

    def live_step(self, loop: m.Loop, assigns: tuple[m.Assign, ...], carried: set[str]) -> str | None:
        """The condition (kernel text) under which a step of the loop over taps and tiles of
        ``loop`` changes something (:func:`tilegen.lower.ranges.step_skips`), once ``assigns``
        are lowered; None where every step may. ``carried``: the locals defined before it."""
        def uniform(expr: m.Expr) -> bool:
            return (not self.exprs.expr_axes(expr)
                    and not any(isinstance(part, m.Load) for part in m.subexpressions(expr)))

        conditions = step_skips(loop, assigns, uniform, carried)
        if not conditions:
            return None
        ops: list[Op] = []
        texts = [self.exprs.expr(cond, (), ops) for cond in conditions]
        assert not ops, "a uniform condition needs no lines of its own"
        return " & ".join(f"({text})" if len(texts) > 1 else text for text in texts)

    def online_extrema(self, loop: m.Loop) -> dict[str, float]:
        """The running extrema of ``loop`` (:func:`tilegen.carried.running_extrema`: ``m_new =
        maximum(m_i, max(s, dim=n))``) that the body takes exponentials relative to (``exp(s -
        m_new)``, ``exp(m_i - m_new)``, or ``exp2``), where the carried value may still hold the
        extremum's identity (it does not start at a finite number): name -> that identity (``-inf``).

        Online softmax's rescaling, as the spec writes it, is NaN for a row whose tiles so far
        were all ``-inf`` (a mask that hides a row's first keys): ``m_new`` is ``-inf`` and so is
        every value it is subtracted from, ``exp(-inf + inf)``. The reference sees the whole row at
        once and computes relative to its finite maximum. :meth:`Statements.statement
        <tilegen.lower.statements.Statements.statement>` copies such an ``m_new`` with 0 for its
        identity, and :meth:`Expressions.call <tilegen.lower.expressions.Expressions.call>` takes
        the exponentials relative to the copy: ``exp(-inf - 0) = 0``, the weight the reference
        gives those values and the running sums once a finite maximum comes (FlexAttention's
        ``m_ij_masked``); where ``m_new`` is finite the copy is ``m_new``. Every value of such a
        row is the identity, so none is weighed wrongly."""
        state = self.state
        found = running_extrema(state.spec, loop, frozenset(state.locals))
        starts = {s.name.id: s.init for s in m.statements(state.spec.body) if isinstance(s, m.Declare)}
        relative = {
            part.args[0].right.name.id
            for stmt in loop.body for value in m.values(stmt)
            for part in m.subexpressions(value)
            if isinstance(part, m.Call) and part.func.id in ("exp", "exp2") and isinstance(part.args[0], m.BinOp)
            and part.args[0].op == "-" and isinstance(part.args[0].right, m.Ref)
        }
        guarded: dict[str, float] = {}
        for name, (extremum, running) in found.items():
            start = literal_value(starts[running]) if running in starts else None
            if name in relative and (start is None or math.isinf(start)):
                identity = function_of(extremum).identity
                assert identity is not None, f"{extremum} has no identity"
                guarded[name] = identity
        return guarded


def taps_chain(loop: m.Loop, state: KernelState) -> tuple[tuple[m.Loop, ...], tuple[m.Assign, ...], m.Loop | None]:
    """The index loops from ``loop`` in (outermost first), the assignments among them, and the
    loop over tiles they end in, where :meth:`Loops.dot_loop` or :meth:`Loops.tile_loop` can run
    them as one loop; ``((), (), None)`` where they cannot.

    Each index loop's body is assignments that load nothing (a convolution's ``h = oh + ph - dh *
    kh``), then the next loop. The last loop is either a ``dot`` loop with no assignment before
    it (pointers, not split, its operands in one row piece), or an innermost loop over tiles with
    no loop inside it, no causal guard, no running extremum, not reversed (a transposed
    convolution's ``acc += dot(w[c, o, kh, kw], where(divides, x[..], 0))``)."""
    chain, assigns = [loop], []
    while chain[-1].axis.is_index and chain[-1].body and isinstance(chain[-1].body[-1], m.Loop):
        head = chain[-1].body[:-1]
        if not all(isinstance(s, m.Assign) and not any(isinstance(e, m.Load) for e in m.subexpressions(s.value))
                   for s in head):
            break
        assigns += [s for s in head if isinstance(s, m.Assign)]
        chain.append(chain[-1].body[-1])
    last = chain[-1]
    if len(chain) < 2 or last.axis.is_index:
        return (), (), None
    if m.is_dot_loop(last):
        pointers = state.spec.access_style == "pointers"
        if (not assigns and pointers and not last.split
                and not any(pieced(state, _dot_step(s)[2][0].index) for s in last.body)):
            return tuple(chain[:-1]), (), last
        return (), (), None
    tile_axes = {a for a, info in state.axes.items() if not info.scalar}
    if (not splits_full_tiles(last) or last.reverse or last.split or find_guard(last, tile_axes) is not None
            or running_extrema(state.spec, last, frozenset(state.locals))
            or not _sums_only(last.body, assigns, set(state.locals))):
        return (), (), None
    return tuple(chain[:-1]), tuple(assigns), last


def _sums_only(body: tuple[m.Stmt, ...], assigns: list[m.Assign], before: set[str]) -> bool:
    """Whether ``body`` only adds into carried values (``acc += ..``, with assignments of
    temporaries), none of which any statement reads: its steps then commute, and a loop over
    the taps and tiles may take them in another order (up to rounding, as another block size
    does). A store, an assignment to a value defined before the loop (``peak = maximum(peak,
    ..)``), or a value that reads what the loop carries (a running scan) keeps its order: its
    loops stay nested. ``before``: the locals defined before the loops."""
    sums = [s for s in body if isinstance(s, m.Assign | m.Accumulate)]
    if len(sums) != len(body):
        return False
    carried = {s.name.id for s in sums if isinstance(s, m.Accumulate)}
    if any(s.name.id in before for s in sums if isinstance(s, m.Assign)):
        return False
    values = [s.value for s in (*assigns, *sums)]
    return not any(isinstance(e, m.Ref) and e.name.id in carried for v in values for e in m.subexpressions(v))


def _over(extents: list[str]) -> str:
    """`` // E`` or `` // (E1 * E2)``: a flat loop's step divided down to a digit's place."""
    if not extents:
        return ""
    return f" // {extents[0]}" if len(extents) == 1 else f" // ({' * '.join(extents)})"


def _dot_step(stmt: m.Stmt) -> tuple[m.Accumulate, m.Call, tuple[m.Load, m.Load]]:
    """One statement of a dot loop (:func:`tilegen.model.is_dot_loop`), ``acc += dot(a[.., k],
    b[k, ..])``: the statement, its call and the call's two loads."""
    assert isinstance(stmt, m.Accumulate) and isinstance(stmt.value, m.Call), "not a dot loop's statement"
    a, b = stmt.value.args
    assert isinstance(a, m.Load) and isinstance(b, m.Load), "a dot loop's operands are loads"
    return stmt, stmt.value, (a, b)


def _defined(ops: list[Op]) -> set[str]:
    """The names the lines of ``ops`` assign (``q = tl.load(...)`` defines ``q``)."""
    return {op.code.split(" = ", 1)[0] for op in ops if isinstance(op, Line) and " = " in op.code}

