"""The stores of the inputs' gradients: each tensor's loads' adjoints, summed over the axes their
index lacks (inside the program, then across programs), the reads at a constant index, through a
gather or at a shifted index added where they land.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from typing import cast

from tilegen import model as m
from tilegen.check.indexing import IndexItem
from tilegen.functions import lookup
from tilegen.grad.adjoint import Adjoint, total_of
from tilegen.grad.adjoints import Adjoints
from tilegen.grad.declarations import NoBackward
from tilegen.grad.forward import parse_expression
from tilegen.spec_text import binary, expr_text, index_text


class Gradients(Adjoints):
    """The stores of the inputs' gradients: their loads' adjoints added and summed, scatters included."""

    def store_gradients(self) -> list[str]:
        """The stores of the inputs' gradients. A tensor read at one index: its loads' adjoints added,
        summed over the axes the index lacks (the ``whole`` ones in the program, then the grid's
        across programs). Read also at a constant index (``x[0, c, 0, 0]``) or through a gather
        (``x[r, target[r]]``) beside a read at the grid's axes (``x[r, c]``): each such read's
        adjoint, summed over the axes it does not span, is added where the axes meet it
        (``where(c == target[r], ...)``), a scatter the one store says."""
        lines = []
        for tensor in self.spec.inputs:
            found = self.gradients.get(tensor.name.id)
            if not found:
                continue
            groups: dict[tuple[object, ...], list[tuple[Adjoint, m.Load]]] = {}
            for key, g, load in found:
                groups.setdefault(key, []).append((g, load))
            main = next((key for key, reads in groups.items()
                         if all(_along(i, self.axes) for i in reads[0][1].index)), None)
            if main is None and len(groups) == 1 and _scatters(found[0][2], self.axes):
                lines.append(self.scatter_added(tensor, [g for _, g, _ in found], found[0][2]))
                continue
            if main is None:
                main = next(iter(groups)) if len(groups) == 1 else None
            if main is None or not all(isinstance(i, m.Number) or _along(i, self.axes)
                                       for i in groups[main][0][1].index):
                loads = [ld for _, _, ld in found]
                how = ("through a gather" if any(isinstance(i, m.Load) for ld in loads for i in ld.index)
                       else "at a shifted index" if any(m.is_offset(i) for ld in loads for i in ld.index)
                       else "at two different indices")
                raise NoBackward(f"'{tensor.name.id}' is read {how}: its gradient is a scatter, which is not "
                                 f"derived yet; write the backward by hand", found[0][2].span)
            load = groups[main][0][1]
            terms = [g for g, _ in groups[main]]
            for key, reads in groups.items():
                if key != main:
                    terms.append(self.scattered(tensor, load, reads))
            index_axes = set(self.spanned(load))
            value = self.stored(terms, index_axes)
            index = ", ".join(index_text(i) for i in load.index)
            if any(_windowed(i, self.axes) for i in load.index):  # lanes of a window (or stride) meet: add
                self.scatters.add(tensor.name.id)
                lines.append(f"d{tensor.name.id}[{index}] += {value}")
                continue
            lines.append(f"d{tensor.name.id}[{index}] = {value}" if load.index else f"d{tensor.name.id} = {value}")
        return lines

    def scatter_added(self, tensor: m.Tensor, terms: list[Adjoint], load: m.Load) -> str:
        """The gradient of a tensor read only through a gather (``weight[idx[t], c]``): its adjoint,
        summed over the axes neither the read nor its loaded index spans, added where the index
        points (``dweight[idx[t], c] += dy[t, c]``), a scatter-add into an f32 gradient that starts
        at 0 (:attr:`scatters`)."""
        keep = set(self.spanned(load)) | {a for i in load.index if isinstance(i, m.Load) for a in self.spanned(i)}
        self.scatters.add(tensor.name.id)
        index = ", ".join(index_text(i) for i in load.index)
        return f"d{tensor.name.id}[{index}] += {self.stored(terms, keep)}"

    def stored(self, terms: list[Adjoint], keep: set[str]) -> str:
        """The value a gradient's store writes: ``terms`` added, each summed over the axes it spans
        outside ``keep``. Where one is summed across programs along a grid axis, the store is that
        one reduction (the language's rule for a store across programs): every term goes inside it,
        one constant along the axis divided by its extent (``sum(dt + dsum / M, dim=r)``)."""
        across = {a for t in terms for a in t.axes - t.implicit - keep if self.axes[a].bounds != "whole"}
        if len(terms) == 1 or not across:
            return total_of([Adjoint(self.summed(t, keep), t.axes & keep) for t in terms]).text
        inside = []
        for term in terms:
            text = self.summed(term, keep | across)
            for axis in self.spec.grid:
                if axis.name.id in across and axis.name.id not in term.axes:
                    text = binary("/", text, self.extent(axis))
            inside.append(Adjoint(text, frozenset()))
        value = total_of(inside).text
        grid = [a for a in self.spec.grid if a.name.id in across]
        self.across |= {a.name.id for a in grid if a.block is not None}
        for axis in reversed(grid):
            value = f"sum({value}, dim={axis.name.id})"
        return value

    def scattered(self, tensor: m.Tensor, main: m.Load, reads: list[tuple[Adjoint, m.Load]]) -> Adjoint:
        """The adjoint of ``reads`` (loads of ``tensor`` at another index than ``main``'s, which is
        all axes) at ``main``'s lanes: summed over the axes the read does not span, kept where each
        axis of ``main`` equals the read's index there (a constant, or a gather's loaded index)."""
        read = reads[0][1]
        conditions, shifts = [], []
        for position, (mine, theirs) in enumerate(zip(main.index, read.index, strict=True)):
            if m.expr_key(theirs) == m.expr_key(mine):
                continue
            if not isinstance(mine, m.Name):  # an offset (main's index is axes and offsets, _along)
                # x[g * CG + c] beside x[g * CG]: the read is where c == 0
                if (isinstance(mine, m.BinOp) and mine.op == "+" and isinstance(mine.right, m.Ref)
                        and m.expr_key(mine.left) == m.expr_key(theirs)):
                    conditions.append(f"{mine.right.name.id} == 0")
                    continue
                raise NoBackward(f"'{tensor.name.id}' is read at two different offsets: its gradient is a scatter, "
                                 f"which is not derived yet; write the backward by hand", read.span)
            offset = _offset(theirs, mine.id)
            if offset is not None:  # x[d + K]: its adjoint at d is x's gradient at d + K
                dim = tensor.dims[position]
                shifts.append((mine.id, offset, dim.id if isinstance(dim, m.Name) else dim.text))
                continue
            if m.is_offset(theirs) or isinstance(theirs, m.Name):
                raise NoBackward(f"'{tensor.name.id}' is read at an index of another axis: its gradient is a "
                                 f"scatter, which is not derived yet; write the backward by hand", read.span)
            conditions.append(f"{mine.id} == {index_text(theirs)}")
        own = set(self.spanned(read))
        terms = [self.total(g, own, f"d{tensor.name.id}_read") for g, _ in reads]
        total = total_of(terms).text
        for axis, (op, amount), _ in shifts:  # the adjoint at d - K (d + K for x[d - K])
            back = "-" if op == "+" else "+"
            moved = self.shifted(parse_expression(total), axis, back, amount, read)
            if not _vanishes(moved):  # outside the row it must be 0, as the forward's read there was
                raise NoBackward(f"'{tensor.name.id}' is read at a shifted index, and its gradient there is not a "
                                 f"product with a value read at the shifted index (0 outside the row); write the "
                                 f"backward by hand", read.span)
            total = expr_text(moved)
        if not conditions:
            return Adjoint(total, frozenset(own | set(self.spanned(main))))
        mask = " & ".join(conditions)
        return Adjoint(f"where({mask}, {total}, 0.0)", frozenset(own | set(self.spanned(main))))

    def shifted(self, expr: m.Expr, axis: str, op: str, amount: m.Expr, read: m.Load) -> m.Expr:
        """``expr`` at ``axis op amount`` instead of ``axis``: its loads' indices moved, the values it
        reads along ``axis`` written out (recomputed there), ``axis`` itself moved; what does not vary
        along ``axis`` (a row's statistic, a reduction over it) as it is."""
        if axis not in self.spanned(expr):
            return expr
        span = expr.span

        def moved(item: IndexItem) -> IndexItem:
            if isinstance(item, m.Name) and item.id == axis:
                return m.BinOp(op, m.Ref(item, span), amount, span)
            if isinstance(item, (m.BinOp, m.Neg)) and axis in m.offset_names(item):  # an offset (m.is_offset)
                cancelled = _offset(item, axis)
                if cancelled is not None and cancelled[0] != op and m.expr_key(cancelled[1]) == m.expr_key(amount):
                    return m.Name(axis, span)
                return m.BinOp(op, item, amount, span)
            return item

        if isinstance(expr, m.Load):
            # (an index holds offsets, BinOp and Neg, which the annotation of m.Load.index leaves out)
            index = cast("tuple[m.Name | m.Number | m.Load, ...]", tuple(moved(i) for i in expr.index))
            return dataclasses.replace(expr, index=index)
        if isinstance(expr, m.Ref):
            if expr.name.id == axis:
                return m.BinOp(op, expr, amount, span)
            definition = self.definition(expr.name.id)
            if definition is None:
                raise NoBackward(f"'{read.tensor.id}' is read at a shifted index whose gradient needs "
                                 f"'{expr.name.id}' elsewhere along '{axis}'; write the backward by hand", read.span)
            return self.shifted(definition, axis, op, amount, read)
        if isinstance(expr, m.Neg):
            return dataclasses.replace(expr, operand=self.shifted(expr.operand, axis, op, amount, read))
        if isinstance(expr, m.BinOp):
            return dataclasses.replace(expr, left=self.shifted(expr.left, axis, op, amount, read),
                                       right=self.shifted(expr.right, axis, op, amount, read))
        if isinstance(expr, m.Call):
            if (function := lookup(expr.func)) is not None and function.kind == "scan":
                raise NoBackward(f"'{read.tensor.id}' is read at a shifted index and its gradient scans along "
                                 f"'{axis}'; write the backward by hand", read.span)
            return dataclasses.replace(expr, args=tuple(self.shifted(a, axis, op, amount, read) for a in expr.args))
        return expr


def _scatters(load: m.Load, axes: Container[str]) -> bool:
    """True for a read through a gather whose gradient is a scatter-add: every index item an axis, an
    offset over one, a constant, or a loaded index of such items (``weight[idx[t], c]``)."""
    def plain(item: IndexItem) -> bool:
        return isinstance(item, m.Number) or _along(item, axes)

    gathers = [i for i in load.index if isinstance(i, m.Load)]
    return bool(gathers) and all(plain(i) for i in load.index if not isinstance(i, m.Load)) and all(
        plain(j) for g in gathers for j in g.index)


def _windowed(item: IndexItem, axes: dict[str, m.Axis]) -> bool:
    """True for an offset that is not one tile axis plus an offset: a window of several tile axes
    (``S * oh + kh - P``) or an axis times a factor (``2 * i``), whose adjoint is added where its
    lanes land (several lanes meet at one element, and elements between a stride's get none)."""
    if not m.is_offset(item):
        return False
    tiles = [n for n in m.offset_names(item) if n in axes and not axes[n].is_index]
    if len(tiles) != 1:
        return len(tiles) > 1

    def added(e: m.Expr) -> bool:  # the tile axis enters with a factor of 1
        if isinstance(e, m.Ref):
            return e.name.id == tiles[0]
        return isinstance(e, m.BinOp) and e.op in "+-" and (added(e.left) or (e.op == "+" and added(e.right)))

    return not added(item)


def _along(item: IndexItem, axes: Container[str]) -> bool:
    """True for an index item that walks the grid: an axis, or an offset over one (``g * CG + c``)."""
    if isinstance(item, m.Name):
        return item.id in axes
    return isinstance(item, (m.BinOp, m.Neg)) and any(n in axes for n in m.offset_names(item))  # (m.is_offset)


def _vanishes(expr: m.Expr) -> bool:
    """True where ``expr`` is 0 wherever a load of it at a shifted index reads outside its tensor
    (which reads 0): a product, quotient or cast with such a load as a factor."""
    if isinstance(expr, m.Load):
        return any(m.is_offset(i) for i in expr.index)
    if isinstance(expr, m.Neg):
        return _vanishes(expr.operand)
    if isinstance(expr, m.BinOp):
        return (expr.op == "*" and (_vanishes(expr.left) or _vanishes(expr.right))) or (
            expr.op == "/" and _vanishes(expr.left))
    if isinstance(expr, m.Call) and (function := lookup(expr.func)) is not None and function.kind == "cast":
        return _vanishes(expr.args[0])
    return False


def _offset(item: IndexItem, axis: str) -> tuple[str, m.Expr] | None:
    """``(op, K)`` of an index item ``axis + K`` or ``axis - K`` (K free of axes), else None."""
    if (isinstance(item, m.BinOp) and item.op in "+-" and isinstance(item.left, m.Ref)
            and item.left.name.id == axis and axis not in m.offset_names(item.right)):
        return item.op, item.right
    return None
