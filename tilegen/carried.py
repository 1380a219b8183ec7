"""Values carried across the steps of a ``for`` loop: the rule that keeps a spec's result
independent of its block sizes.

A loop ``for c over N by BN`` runs its body once per tile of ``N``; blocks and configs choose
``BN``, never the result. Inside the loop, a value carried from step to step (a local defined
before the loop and updated in it), and a reduction over ``c``, hold a *partial* result: what
the tiles seen so far give, which depends on ``BN``. So the checker refuses, at its line:

* a store inside the loop of a partial value (a running sum stored at every step is a scan,
  ``cumsum``, not yet in the language: store after the loop);
* an update of a carried value in a form whose end result would depend on ``BN``. Accepted are
  the forms whose end result is the same for every split of ``N`` into tiles:

  - ``acc += e`` and ``acc = acc + e`` where ``e`` is *additive over c*: a ``sum``/``mean``
    over ``c`` (or a ``dot`` contracting ``c``) of values that are not partial, sums of such
    terms, and such a term times or divided by a value that does not change along the loop
    (``cnt += 1`` would count steps; ``acc += max(x, dim=c)`` would add the tiles' maxima);
  - ``m = maximum(m, max(x, dim=c))`` (``minimum``/``min``), directly or through a local
    (``m_new = maximum(m_i, max(s, dim=n))``, then ``m_i = m_new``);
  - ``p = p * prod(x, dim=c)``: a carried value merged with a reduction over ``c`` by that
    reduction's own ``combine`` (:mod:`tilegen.functions`);
  - the online-softmax rescaling (Milakov and Gimelshein, 2018; FlashAttention): ``l = l *
    exp(m_old - m_new) + A``, where ``m_new`` is such a running maximum of ``m_old`` (not yet
    advanced) and ``A`` is a ``sum`` over ``c`` (or a ``dot`` contracting ``c``) of a product
    with the factor ``exp(x - m_new)``, ``x`` the values whose max ``m_new`` takes (so no
    factor exceeds 1). Where ``m_new`` is still ``-inf`` (every value so far ``-inf``: masked),
    the kernel takes these exponentials relative to 0 instead, so they are 0 as the reference's
    are, not ``exp(-inf + inf)`` (:meth:`tilegen.lower.loops.Loops.online_extrema`).

The generated reference evaluates a loop body once over the whole dimension (one tile), which
gives exactly the end result of every accepted form; see :mod:`tilegen.lower.reference`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from typing_extensions import assert_never

from tilegen import model as m
from tilegen.errors import Collector
from tilegen.functions import combining, reduction
from tilegen.spec_text import extent_text


def _additive_reduction(expr: m.Expr) -> TypeGuard[m.Call]:
    """A reduction whose partial results add (``sum``, ``mean``)."""
    return (function := reduction(expr)) is not None and function.combine == "+"


def _extremum_of(name: str) -> str | None:
    """The reduction whose partials the elementwise ``name`` merges, when merging is idempotent
    (``maximum``: ``max``), else None."""
    found = [f.name for f in combining(name) if f.idempotent and not f.averages]
    return found[0] if found else None

#: How the message names what says a running value properly.
_SCAN_HINT = (
    "a running total along the loop is a scan: write it as cumsum(x, dim=c) over an axis 'c over N by BC "
    "whole' (the compiler carries it across tiles), or store after the loop, where the carried value is "
    "complete"
)


def check_carried(spec: m.Spec, errors: Collector) -> None:
    """Apply the rules above to every loop of ``spec`` (nested loops each on their own axis);
    problems go to ``errors`` at the statement's position. Assumes an otherwise valid body."""
    _walk(spec, spec.body, set(), errors)


def running_extrema(spec: m.Spec, loop: m.Loop, before: frozenset[str]) -> dict[str, tuple[str, str]]:
    """The locals of ``loop``'s body that hold a running extremum of a value carried across its
    steps: ``m_new = maximum(m_i, max(s, dim=n))`` with ``m_i`` among ``before`` (the locals
    defined before the loop) gives ``{"m_new": ("max", "m_i")}`` (``min`` for ``minimum``).
    The kernel lowering guards the exponentials taken relative to them
    (:mod:`tilegen.lower.loops`). Assumes a checked body (its refusals are not reported here)."""
    analysis = _Loop(spec, loop, before, Collector())
    analysis.run()
    return dict(analysis.extremum)


def _walk(spec: m.Spec, body: tuple[m.Stmt, ...], defined: set[str], errors: Collector) -> None:
    for stmt in body:
        match stmt:
            case m.Loop():
                if not stmt.axis.is_index:  # an index loop (``for kh over K``) has no block to depend on
                    _Loop(spec, stmt, frozenset(defined), errors).run()
                _walk(spec, stmt.body, set(defined), errors)
            case m.Declare() | m.Assign():
                defined.add(stmt.name.id)
            case _:  # any other statement defines no new local (an update's is declared)
                pass


@dataclass
class _Loop:
    """The analysis of one loop: which names are partial, varying along the loop's axis, or
    hold one of the accepted running forms, statement by statement."""

    spec: m.Spec
    loop: m.Loop
    before: frozenset[str]
    errors: Collector
    partial: set[str] = field(default_factory=set)  # values that depend on the tiles seen so far
    varying: set[str] = field(default_factory=set)  # tiles along the loop's axis (this step's)
    zero: set[str] = field(default_factory=set)  # declared in the loop as 0 (sums of additive terms)
    extremum: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (max|min, running name)
    # running extremum -> keys (model.expr_key) of the values it bounds
    bounds: dict[str, set[tuple[object, ...]]] = field(default_factory=dict)
    rescale: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (old, new): exp(old - new)
    factor: dict[str, str] = field(default_factory=dict)  # local -> new: a product with exp(x - new)
    advanced: set[str] = field(default_factory=set)  # running maxima already set to their new value

    @property
    def axis(self) -> str:
        return self.loop.axis.name.id

    def where(self) -> str:
        axis = self.loop.axis
        block = f" by {axis.block.id}" if axis.block is not None else ""
        return f"the loop 'for {axis.name.id} over {extent_text(axis)}{block}' (line {self.loop.span.line})"

    def run(self) -> None:
        stmts = list(m.statements(self.loop.body))
        updated = {s.name.id for s in stmts if isinstance(s, (m.Assign, m.Accumulate))}
        self.partial = set(updated & self.before)
        carried = set(self.partial)
        for stmt in stmts:
            match stmt:
                case m.Declare():
                    if _is_zero(stmt.init):
                        self.zero.add(stmt.name.id)
                case m.Accumulate():
                    self.accumulate(stmt, carried)
                case m.Assign():
                    self.assign(stmt, carried)
                case m.Store():
                    if self.is_partial(stmt.value):
                        self.errors.error(
                            f"'{stmt.tensor.id}' is stored inside {self.where()} from "
                            f"{self.partial_what(stmt.value)}: at each step it holds what the tiles seen so far "
                            f"give, so the result would depend on the block size; {_SCAN_HINT}",
                            stmt.value.span,
                        )
                case m.Loop():
                    pass
                case _:
                    assert_never(stmt)

    # what an expression is ---------------------------------------------------------
    def varies(self, expr: m.Expr) -> bool:
        """True where ``expr`` reads this step's tile along the loop's axis (indexed by the axis,
        or by an offset of it: ``v[starts[b] + n, d]``)."""
        for part in m.subexpressions(expr):
            if isinstance(part, m.Load) and any(
                (isinstance(i, m.Name) and i.id == self.axis) or (m.is_offset(i) and self.axis in m.offset_names(i))
                for i in part.index
            ):
                return True
            if isinstance(part, m.Ref) and (part.name.id == self.axis or part.name.id in self.varying):
                return True
        return False

    def reduces_over_axis(self, expr: m.Expr) -> bool:
        """A reduction over the loop's axis, or a ``dot`` contracting it (both operands are
        tiles along it): the current tile's share only."""
        if isinstance(expr, m.Call) and reduction(expr) is not None:
            return expr.word("dim") == self.axis
        return m.is_dot(expr) and len(expr.args) == 2 and all(self.varies(a) for a in expr.args)

    def is_partial(self, expr: m.Expr) -> bool:
        return any(
            (isinstance(p, m.Ref) and p.name.id in self.partial) or self.reduces_over_axis(p)
            for p in m.subexpressions(expr)
        )

    def partial_what(self, expr: m.Expr) -> str:
        for part in m.subexpressions(expr):
            if isinstance(part, m.Ref) and part.name.id in self.partial:
                return f"'{part.name.id}', a value carried across the loop's steps"
        return f"a reduction over '{self.axis}', which sees one tile of it per step"

    def additive(self, expr: m.Expr) -> bool:
        """Additive over the loop's axis: its sum over the steps is the same for every tiling."""
        if isinstance(expr, m.Ref):
            return expr.name.id in self.zero and expr.name.id not in self.partial
        if isinstance(expr, m.Neg):
            return self.additive(expr.operand)
        if isinstance(expr, m.BinOp):
            if expr.op in ("+", "-"):
                return self.additive(expr.left) and self.additive(expr.right)
            if expr.op == "*":
                return (self.additive(expr.left) and self.steady(expr.right)) or (
                    self.additive(expr.right) and self.steady(expr.left)
                )
            if expr.op == "/":
                return self.additive(expr.left) and self.steady(expr.right)
            return False
        if isinstance(expr, m.Call):
            name = expr.func.id
            if _additive_reduction(expr):
                if expr.word("dim") == self.axis:
                    return not self.is_partial(expr.args[0])
                return self.additive(expr.args[0])  # a sum over another axis of an additive tile
            if m.is_dot(expr) and len(expr.args) == 2:
                if self.reduces_over_axis(expr):
                    return not any(self.is_partial(a) for a in expr.args)
                a, b = expr.args
                return (self.additive(a) and self.steady(b)) or (self.additive(b) and self.steady(a))
            if name in m.DTYPES or isinstance(expr.func, m.BoundDtype):  # a cast
                return self.additive(expr.args[0])
        return False

    def steady(self, expr: m.Expr) -> bool:
        """The same at every step: reads no tile along the axis and nothing partial."""
        return not self.varies(expr) and not self.is_partial(expr)

    def running_extremum(self, expr: m.Expr, carried_name: str | None = None) -> tuple[str, str] | None:
        """``maximum(m, max(x, dim=c))`` (either order; ``minimum``/``min``) with ``m`` carried
        (``carried_name`` when given) and ``x`` not partial: (``max``, ``m``), else None."""
        if not isinstance(expr, m.Call) or len(expr.args) != 2:
            return None
        extremum = _extremum_of(expr.func.id)
        if extremum is None:
            return None
        for running, other in (expr.args, expr.args[::-1]):
            if not isinstance(running, m.Ref) or running.name.id not in self.partial:
                continue
            if carried_name is not None and running.name.id != carried_name:
                continue
            if self.merges_over_axis(other, expr.func.id):
                return extremum, running.name.id
        return None

    def merges_over_axis(self, expr: m.Expr, combine: str) -> bool:
        """``expr`` is a reduction whose partials ``combine`` merges (``*``: ``prod``;
        ``maximum``: ``max``) over the loop's axis of values that are not partial, or such a
        reduction over another axis of one (``prod(prod(x, dim=j), dim=i)`` in a loop over ``j``):
        what the steps give, merged by ``combine``, is the same for every tiling."""
        function = reduction(expr)
        if not isinstance(expr, m.Call) or function is None or function.combine != combine or function.averages:
            return False
        if expr.word("dim") == self.axis:
            return not self.is_partial(expr.args[0])
        return self.merges_over_axis(expr.args[0], combine)

    def rescaling(self, expr: m.Expr) -> tuple[str, str] | None:
        """``exp(old - new)`` (or a local holding it) with ``new`` a running extremum of ``old``
        and ``old`` not yet advanced: (``old``, ``new``)."""
        if isinstance(expr, m.Ref):
            return self.rescale.get(expr.name.id)
        if isinstance(expr, m.Call) and expr.func.id == "exp" and isinstance(arg := expr.args[0], m.BinOp):
            if arg.op == "-" and isinstance(arg.left, m.Ref) and isinstance(arg.right, m.Ref):
                old, new = arg.left.name.id, arg.right.name.id
                if self.extremum.get(new, ("", ""))[1] == old and old not in self.advanced:
                    return old, new
        return None

    def scaled_factor(self, expr: m.Expr) -> str | None:
        """The running maximum ``new`` where ``expr`` is a product with ``exp(x - new)`` (``x``
        not partial, and one of the values whose max ``new`` takes, so ``x - new <= 0``), through
        locals and casts; else None. (With another ``x`` the partial sums would not be exact:
        ``exp(x - new)`` overflows where the tiles seen so far have a max far below ``x``, and a
        ``new`` of ``-inf``, no value seen yet, would weigh ``x`` by ``exp(x + inf)``.)"""
        if isinstance(expr, m.Ref):
            return self.factor.get(expr.name.id)
        if isinstance(expr, m.Call):
            if expr.func.id == "exp" and isinstance(arg := expr.args[0], m.BinOp) and arg.op == "-":
                if isinstance(arg.right, m.Ref) and arg.right.name.id in self.extremum:
                    new = arg.right.name.id
                    bounded = m.expr_key(arg.left) in self.bounds.get(new, ())
                    return new if bounded and not self.is_partial(arg.left) else None
                return None
            if expr.func.id in m.DTYPES or isinstance(expr.func, m.BoundDtype):
                return self.scaled_factor(expr.args[0])
        if isinstance(expr, m.BinOp) and expr.op in ("*", "/"):
            left = self.scaled_factor(expr.left)
            if left is not None and not self.is_partial(expr.right):
                return left
            if expr.op == "*" and not self.is_partial(expr.left):
                return self.scaled_factor(expr.right)
        return None

    def rescaled_additive(self, expr: m.Expr, new: str) -> bool:
        """A sum over the axis (or a ``dot`` contracting it) of a product with ``exp(x - new)``."""
        if isinstance(expr, m.BinOp) and expr.op == "+":
            return self.rescaled_additive(expr.left, new) and self.rescaled_additive(expr.right, new)
        if _additive_reduction(expr) and expr.word("dim") == self.axis:
            return self.scaled_factor(expr.args[0]) == new
        if m.is_dot(expr) and len(expr.args) == 2 and self.reduces_over_axis(expr):
            factors = [self.scaled_factor(a) for a in expr.args]
            return any(
                f == new and not self.is_partial(other) for f, other in zip(factors, expr.args[::-1], strict=True)
            )
        return False

    # statements ----------------------------------------------------------------------
    def accumulate(self, stmt: m.Accumulate, carried: set[str]) -> None:
        name = stmt.name.id
        if self.additive(stmt.value):
            return
        if name in carried:
            self.refuse_update(stmt, name)
        else:
            self.zero.discard(name)
            self.mark(name, stmt.value)

    def assign(self, stmt: m.Assign, carried: set[str]) -> None:
        name, value = stmt.name.id, stmt.value
        if name not in carried:  # a local of the loop body
            if isinstance(value, m.Call) and (found := self.running_extremum(value)) is not None:
                self.extremum[name] = found
                self.bounds[name] = {m.expr_key(e) for arg in value.args for e in _reduced(arg)}
            elif (found := self.rescaling(value)) is not None:
                self.rescale[name] = found
            elif (new := self.scaled_factor(value)) is not None:
                self.factor[name] = new
            self.mark(name, value)
            return
        if self.update_is_exact(name, value):
            return
        self.refuse_update(stmt, name)

    def update_is_exact(self, name: str, value: m.Expr) -> bool:
        """One of the accepted forms of updating the carried ``name`` (see the module doc)."""
        if isinstance(value, m.BinOp) and value.op == "+":
            for own, other in ((value.left, value.right), (value.right, value.left)):
                if isinstance(own, m.Ref) and own.name.id == name and self.additive(other):
                    return True  # acc = acc + e
                if isinstance(own, m.BinOp) and own.op == "*":  # l = l * exp(old - new) + A
                    for ref, scale in ((own.left, own.right), (own.right, own.left)):
                        if isinstance(ref, m.Ref) and ref.name.id == name and (found := self.rescaling(scale)):
                            if self.rescaled_additive(other, found[1]):
                                return True
        if self.running_extremum(value, name) is not None:
            return True  # m = maximum(m, max(x, dim=c))
        if isinstance(value, m.BinOp) and value.op != "+":  # p = p * prod(x, dim=c): a reduction's own combine
            for own, other in ((value.left, value.right), (value.right, value.left)):
                if isinstance(own, m.Ref) and own.name.id == name and self.merges_over_axis(other, value.op):
                    return True
        if isinstance(value, m.Ref) and self.extremum.get(value.name.id, ("", ""))[1] == name:
            self.advanced.add(name)  # m_i = m_new
            return True
        return False

    def mark(self, name: str, value: m.Expr) -> None:
        if self.varies(value):
            self.varying.add(name)
        if self.is_partial(value):
            self.partial.add(name)

    def refuse_update(self, stmt: m.Assign | m.Accumulate, name: str) -> None:
        axis = self.axis
        self.errors.error(
            f"'{name}' is carried across the steps of {self.where()}, and this update would give a result "
            f"that depends on the block size; a carried value is added to ('{name} += sum(x, dim={axis})' or "
            f"a 'dot' over '{axis}'), combined by maximum/minimum with a max/min over '{axis}', multiplied by a "
            f"prod over '{axis}', or rescaled "
            f"as online softmax does ('{name} = {name} * exp(m_old - m_new) + sum(exp(x - m_new), dim={axis})' "
            f"where 'm_new = maximum(m_old, max(x, dim={axis}))')",
            stmt.span,
        )


def _reduced(expr: m.Expr) -> Iterator[m.Expr]:
    """The operands ``expr`` reduces, level by level: ``max(max(x, dim=j), dim=i)`` gives
    ``max(x, dim=j)`` and ``x`` (nothing for an expression that is not a reduction)."""
    while isinstance(expr, m.Call) and reduction(expr) is not None:
        expr = expr.args[0]
        yield expr


def _is_zero(expr: m.Expr) -> bool:
    return isinstance(expr, m.Number) and expr.value == 0
