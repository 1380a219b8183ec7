"""Loop ranges: which tiles of a ``for`` loop over tiles need masks, and which can be skipped.

Hand-written kernels do not mask every tile of a loop: they run the tiles wholly inside the
dimension without masks and mask only the edge (Triton tutorial 06 splits its key loop into an
unmasked part and a masked diagonal part, ``STAGE`` 1 and 2; FlashAttention-2, Dao 2023, §3.1.1,
skips the key blocks above the diagonal). The kernel lowering does the same from the spec:

* a loop ``for n over T by BN`` runs its first ``T // BN`` tiles with no mask on ``n`` and the
  partial last tile (if any) masked, when it is the innermost loop of its nest
  (:func:`splits_full_tiles`); a loop with a loop nested in it runs all its tiles as one masked
  loop, so that a nest of depth d generates d + 1 loops, not 2 + 4 + ... + 2**d;
* a **causal guard** in the loop, ``where(n <= m, x, y)`` (or ``n < m``, ``m >= n``, ``m > n``)
  comparing the loop's axis ``n`` with another tile axis ``m`` of the program, splits it
  further: tiles where the comparison holds for every lane take ``x`` with no comparison, tiles
  where it holds for some lanes evaluate it, and tiles where it holds for no lane are skipped
  when :func:`skips_when_false` proves that the body leaves every variable the loop carries
  unchanged there. The guard may also bound the loop's axis from below (``n >= m``, ``m <= n``:
  FlashAttention-2's backward walks, for a tile of keys, the queries at or after it): then the
  tiles it skips come first and those where it holds everywhere last. A second guard on the
  other side (``k >= m`` and ``k <= n``: a product of triangular matrices) clamps every range to
  the tiles where it holds for some lane (:func:`second_guard`).

Plain functions of the model; :meth:`tilegen.lower.loops.Loops.tile_loop` uses them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from tilegen import model as m
from tilegen.across import across
from tilegen.functions import lookup, reduction

#: The comparison with the loop axis on the left that each written form means.
_FLIPPED = {"<=": ">=", "<": ">", ">=": "<=", ">": "<"}


@dataclass(frozen=True)
class Guard:
    """A causal guard of a loop over ``n``: ``n <= m``, ``n < m``, ``n >= m`` or ``n > m`` (``op``,
    the loop's axis on the left) with ``m`` another tile axis (``axis``); ``key`` identifies the
    comparison as written (see :func:`tilegen.model.expr_key`). With ``op`` and ``axis`` empty,
    any condition (:func:`step_skips`)."""

    key: tuple[object, ...]
    op: str
    axis: str


def find_guard(loop: m.Loop, tile_axes: set[str]) -> Guard | None:
    """The first causal guard among the ``where`` conditions of ``loop``'s own statements
    (nested loops excluded): a comparison of the loop axis with one of ``tile_axes`` (the
    program's tile axes in scope) that holds for the lower triangle (keys ``n`` at or before
    ``m``). None when there is none."""
    return next((guard for guard in _comparisons(loop, conjuncts=False)
                 if guard.axis in tile_axes and guard.axis != loop.axis.name.id), None)


def _comparisons(loop: m.Loop, conjuncts: bool) -> Iterator[Guard]:
    """The ``where`` conditions of ``loop``'s own statements that compare its axis with a name
    (``n <= m``, ``e > n``), as :class:`Guard` with the loop's axis on the left; with
    ``conjuncts``, each comparison of an ``&`` too (``(n <= m) & (m < e)``)."""
    n = loop.axis.name.id
    for condition in _where_conditions(v for stmt in loop.body for v in m.values(stmt)):
        for cond in _conjuncts(condition) if conjuncts else [condition]:
            if not (isinstance(cond, m.BinOp) and isinstance(cond.left, m.Ref) and isinstance(cond.right, m.Ref)):
                continue
            left, right, op = cond.left.name.id, cond.right.name.id, cond.op
            if right == n and left != n:
                left, right, op = right, left, _FLIPPED.get(op, op)
            if left == n and op in _FLIPPED:
                yield Guard(m.expr_key(cond), op, right)


@dataclass(frozen=True)
class ProgramExit:
    """A program whose every store is guarded by ``axis < end`` (``<=`` for ``op`` ``"<="``), with
    ``axis`` a tiled grid axis and ``end`` a number per program (a local the body's statement
    ``after``, at the top level, defines from index-axis loads and scalars; or a scalar input):
    a program whose tile of ``axis`` starts past ``end`` stores nothing, and returns at once."""

    axis: str
    op: str
    end: str
    after: int  # the index in the body of the statement that defines ``end``; -1: an input


def program_exit(spec: m.Spec) -> ProgramExit | None:
    """The early exit of a jagged grid (:class:`ProgramExit`; a program per (sequence, tile) where
    tiles past a sequence's end do nothing: ``o[starts[b] + m, d] = v where m < n_b``), else None.
    Every store must carry the same guard, since a program with an unguarded store has work to do;
    a persistent grid (each program loops over tiles), a split tail, a split loop and a store that
    reduces across programs (whose partials every program writes) do not exit."""
    body = list(m.statements(spec.body))
    stores = [s for s in body if isinstance(s, m.Store)]
    if spec.persistent or spec.split_tail or any(isinstance(s, m.Loop) and s.split for s in body):
        return None
    if any(across(s, spec.grid) is not None for s in stores):
        return None
    cond = stores[0].guard if stores else None
    if cond is None or any(s.guard is None or m.expr_key(s.guard) != m.expr_key(cond) for s in stores):
        return None
    if not (isinstance(cond, m.BinOp) and cond.op in ("<", "<=") and isinstance(cond.left, m.Ref)
            and isinstance(cond.right, m.Ref)):
        return None
    axis, end = cond.left.name.id, cond.right.name.id
    if axis not in {a.name.id for a in spec.grid if a.block is not None and a.bounds != "whole"}:
        return None
    if any(t.name.id == end and t.is_scalar for t in spec.inputs):
        return ProgramExit(axis, cond.op, end, -1)
    writes = [s for s in body if isinstance(s, (m.Assign, m.Accumulate, m.Declare)) and s.name.id == end]
    # the number the stores compare with must be the one the exit reads: one top-level assignment
    position = next((i for i, s in enumerate(spec.body) if writes and s is writes[0]), None)
    if len(writes) != 1 or position is None or not isinstance(writes[0], m.Assign):
        return None
    # one number per program: refs to index axes and scalars, loads at them (offsets[b + 1])
    known = {a.name.id for a in spec.grid if a.is_index} | {t.name.id for t in spec.inputs if t.is_scalar}
    parts = list(m.subexpressions(writes[0].value))
    refs = {p.name.id for p in parts if isinstance(p, m.Ref)}
    loaded = {name for p in parts if isinstance(p, m.Load) for i in p.index
              for name in ([i.id] if isinstance(i, m.Name) else m.offset_names(i) if m.is_offset(i) else [])}
    return ProgramExit(axis, cond.op, end, position) if refs | loaded <= known else None


def end_bound(loop: m.Loop, scalars: set[str], carried: set[str]) -> Guard | None:
    """A bound from data on ``loop``'s axis: a ``where`` condition of its own statements that is
    (or has as a conjunct, ``&``) ``n < e`` or ``n <= e`` (``e > n``, ``e >= n``) with ``e`` one of
    ``scalars`` (a number per program, defined before the loop: a sequence's length ``n_b``),
    where a tile with the condition false in every lane changes nothing of ``carried`` (the locals
    the loop may update; :func:`skips_when_false`). As a :class:`Guard` whose ``axis`` is ``e``;
    the loop's tiles from ``cdiv(e, block)`` on (``cdiv(e + 1, block)`` for ``<=``) are skipped.
    None where there is none."""
    assigned = {s.name.id for s in m.statements(loop.body) if isinstance(s, (m.Assign, m.Accumulate))}
    return next((guard for guard in _comparisons(loop, conjuncts=True)
                 if guard.op in ("<", "<=") and guard.axis in scalars and guard.axis not in assigned
                 and skips_when_false(loop, guard, carried)), None)


def second_guard(loop: m.Loop, tile_axes: set[str], first: Guard, carried: set[str]) -> Guard | None:
    """A causal guard of ``loop`` on the other side of its axis from ``first`` (the guard
    :func:`find_guard` took): ``first`` bounds the loop's axis from below and this one from above,
    or the other way round, each against a tile axis of the program. A product of two triangular
    matrices, ``dot(where(k >= m, a[m, k], 0), where(k <= n, b[k, n], 0))``, sums only over
    ``m <= k <= n``. Taken only where a tile with it false in every lane changes nothing of
    ``carried`` (:func:`skips_when_false`): the loop's tiles before (or after) the ones where it
    holds for some lane are skipped, every range clamped to them. None where there is none."""
    return next((guard for guard in _comparisons(loop, conjuncts=False)
                 if guard.axis in tile_axes and guard.axis != loop.axis.name.id and guard.key != first.key
                 and from_below(guard) != from_below(first) and skips_when_false(loop, guard, carried)), None)


def _where_conditions(values: Iterable[m.Expr]) -> Iterator[m.Expr]:
    """The condition of each ``where`` in ``values`` and their subexpressions, in order."""
    for value in values:
        for part in m.subexpressions(value):
            if isinstance(part, m.Call) and part.func.id == "where" and part.args:
                yield part.args[0]


def _conjuncts(cond: m.Expr) -> list[m.Expr]:
    """``a & b & c`` -> [a, b, c]; another condition -> [it]."""
    if isinstance(cond, m.BinOp) and cond.op == "&":
        return _conjuncts(cond.left) + _conjuncts(cond.right)
    return [cond]


def from_below(guard: Guard) -> bool:
    """Whether ``guard`` bounds the loop's axis from below (``n >= m``, ``n > m``): its true
    side is the loop's last tiles."""
    return guard.op in (">=", ">")


def splits_full_tiles(loop: m.Loop) -> bool:
    """Whether ``loop`` runs in ranges (its full tiles unmasked, then the masked edge; with a
    causal guard, the guard's ranges): only where no loop is nested in its body.

    Splitting a loop copies its body once per range, nested loops included, so splitting every
    level of a nest multiplies the code by 2 per level (a four-level Frobenius norm generated 30
    loops). The split pays where the kernel spends its time, the innermost loop: it runs every
    step of the nest, its loads and stores along its axis lose their masks, and its reductions
    over that axis their ``where``. An outer level steps once per pass of the loops inside it,
    and its mask is uniform along their axes (``mask_c[:, None, None]``: one predicate per
    row of the inner tiles, which leaves their loads vectorizable); so an outer level runs as
    one masked loop (``range(0, tl.cdiv(C, BC))``, ``mask_c`` each step), and every nest gets
    one split, that of its innermost loops. A causal guard on an outer level is evaluated on every tile there
    (no tiles are skipped: :func:`skips_when_false` proves nothing of a body with a loop)."""
    return not any(isinstance(stmt, m.Loop) for stmt in m.statements(loop.body))


def guard_steps(guard: Guard, start: str, tile: str, block: str) -> tuple[str, str]:
    """``(full, live)``: the number of loop tiles (of ``block`` lanes) from the first where the
    guard holds for every lane of the other axis's tile (``tile`` lanes from ``start``), and the
    number where it holds for some lane (a guard :func:`from_below`: the first tile of each).
    For ``n <= m`` a key tile ``[n0, n0 + block)`` is wholly
    inside when ``n0 + block - 1 <= start`` and touched when ``n0 <= start + tile - 1``."""
    if guard.op == "<=":
        return f"({start} + 1) // {block}", f"tl.cdiv({start} + {tile}, {block})"
    if guard.op == "<":
        return f"{start} // {block}", f"tl.cdiv({start} + {tile} - 1, {block})"
    # from below, the other way round: ``full`` is the first tile where the guard holds for every
    # lane, ``live`` the first where it holds for some (for n >= m: n0 >= start + tile - 1, and
    # n0 + block - 1 >= start)
    if guard.op == ">=":
        return f"tl.cdiv({start} + {tile} - 1, {block})", f"{start} // {block}"
    return f"tl.cdiv({start} + {tile}, {block})", f"({start} + 1) // {block}"


# ----------------------------------------------------------------------- the no-op proof
# Abstract values: ("const", float) a tile of one number; ("same", name) the value the loop
# variable ``name`` had when the iteration began; ("bool", b) a mask of one truth value; None
# for anything else.

_Const = tuple[Literal["const"], float]
_Same = tuple[Literal["same"], str]
_Truth = tuple[Literal["bool"], bool]
_Abstract = _Const | _Same | _Truth | None

_FALSE: _Truth = ("bool", False)
_TRUE: _Truth = ("bool", True)
_ZERO: _Const = ("const", 0.0)
_ONE: _Const = ("const", 1.0)


def skips_when_false(loop: m.Loop, guard: Guard, carried: set[str], strict: bool = False,
                     before: tuple[m.Assign, ...] = ()) -> bool:
    """True when an iteration of ``loop`` in which ``guard`` is false for every lane leaves
    every variable in ``carried`` (the locals declared before the loop) unchanged and stores
    nothing, so that such tiles can be skipped.

    It evaluates the body on abstract values: the guard is false, a ``where`` on it takes its
    other branch, ``-inf`` propagates through ``max``/``maximum`` and ``exp``, a ``dot`` or a
    product with a tile of zeros is zero, and ``x - x`` is zero. For FlashAttention's online
    softmax (``s = where(n <= m, .., -inf)``; ``m_new = maximum(m_i, max(s))``; ``p = exp(s - m_new)``;
    ``alpha = exp(m_i - m_new)``; ``l_i = l_i * alpha + sum(p)``; ``acc = acc * alpha + dot(p, v)``)
    every carried variable comes out the same. The proof assumes the carried values and loaded
    tiles are finite (a row that has seen no unmasked key yet, ``m_i`` still ``-inf``, keeps its
    initial state, as the unskipped loop does: it takes those exponentials relative to 0,
    :meth:`tilegen.lower.loops.Loops.online_extrema`). With
    ``strict``, values computed from loaded tiles are not assumed finite (only the loaded tiles
    themselves, and the carried values): a product or ``dot`` with zeros is zero only where the
    other factor is known or is itself a load. ``before``: assignments that run ahead of each
    step, evaluated first (the taps' ``divides = (h % sh == 0) & (v % sw == 0)``).
    """
    env: dict[str, _Abstract] = {name: ("same", name) for name in carried}
    for assign in before:
        env[assign.name.id] = _value(assign.value, env, guard, strict)
    for stmt in loop.body:
        match stmt:
            case m.Declare():
                env[stmt.name.id] = _value(stmt.init, env, guard, strict)
            case m.Assign():
                env[stmt.name.id] = _value(stmt.value, env, guard, strict)
            case m.Accumulate():
                if _value(stmt.value, env, guard, strict) != _ZERO:
                    env[stmt.name.id] = None
            case _:  # any other statement (a store, a loop): not shown to change nothing
                return False
    return all(env.get(name) == ("same", name) for name in carried if _assigned(loop, name))


def step_skips(loop: m.Loop, assigns: tuple[m.Assign, ...], uniform: Callable[[m.Expr], bool],
               carried: set[str]) -> list[m.Expr]:
    """The conditions under which a step of one loop over a convolution's taps and the tiles of
    ``loop`` (:func:`tilegen.lower.loops.taps_chain`; ``assigns`` run first in each step) does
    something: the conjuncts of its ``where`` conditions that are one value per step (``uniform``:
    no tile axis, no load; ``h % sh == 0`` of a transposed convolution's ``divides = (h % sh ==
    0) & (v % sw == 0)``, with ``h`` from the program's output row and the tap) and that, false,
    leave every variable in ``carried`` unchanged (:func:`skips_when_false`: the ``dot`` takes a
    tile of zeros). The kernel runs the step's loads and ``dot`` under ``if`` them: at stride s a
    tap meets the output row in one case of s, and the others cost no memory traffic. As for a
    causal guard, the loaded tiles are taken to be finite (torch's transposed convolution does
    not multiply the taps the stride skips either)."""
    defined = {a.name.id: a.value for a in assigns}
    n = loop.axis.name.id

    def conjuncts(cond: m.Expr) -> list[m.Expr]:  # through the assignments: divides -> its conjuncts
        parts = _conjuncts(cond)
        return [p for part in parts for p in (conjuncts(defined[part.name.id]) if isinstance(part, m.Ref)
                                              and part.name.id in defined else [part])]

    values = [*(a.value for a in assigns), *(v for s in loop.body for v in m.values(s))]
    conditions = [c for condition in _where_conditions(values) for c in conjuncts(condition)]
    found: dict[tuple[object, ...], m.Expr] = {}
    for cond in conditions:
        key = m.expr_key(cond)
        own_axis = any(isinstance(p, m.Ref) and p.name.id == n for p in m.subexpressions(cond))
        if (key not in found and not own_axis and uniform(cond)
                and skips_when_false(loop, Guard(key, "", ""), carried, before=assigns)):
            found[key] = cond
    return list(found.values())


def lanes_past_end_are_guarded(loop: m.Loop, guard: Guard, carried: set[str], same_dim: bool) -> bool:
    """True when the lanes of a masked tile past the end of the loop's dimension need no mask
    beyond the guard: the guard's axis tiles the same dimension (``n <= m`` with ``m < S`` puts
    every lane ``n >= S`` on its false side for each row that is stored), a tile with the guard
    false everywhere changes nothing (:func:`skips_when_false`, strict: past the end the tiles
    loaded are zeros, and what is computed from them may be infinite, ``1 / 0``), and every
    tile loaded along the loop's axis is a ``dot`` operand, which reads zeros past the end.
    The kernel then keeps the bounds mask on loads only: tutorial 06's diagonal blocks
    apply the causal mask alone."""
    if not same_dim or not skips_when_false(loop, guard, carried, strict=True):
        return False
    n = loop.axis.name.id
    values = [value for s in m.statements(loop.body) for value in m.values(s)]
    parts = [part for value in values for part in m.subexpressions(value)]
    operands = {id(arg) for part in parts if isinstance(part, m.Call) and m.is_dot(part) for arg in part.args}
    along_n = [p for p in parts if isinstance(p, m.Load) and _along(p, n)]
    return all(id(load) in operands for load in along_n) and _reductions_neutral(loop, guard, carried)


def _along(load: m.Load, axis: str) -> bool:
    """Whether ``load`` reads a tile along ``axis`` (one of its indexes is that axis)."""
    return any(isinstance(i, m.Name) and i.id == axis for i in load.index)


def _reductions_neutral(loop: m.Loop, guard: Guard, carried: set[str]) -> bool:
    """True when every reduction over the loop's axis ``n`` takes, where the guard is false, the
    reduction's identity (0 for ``sum``, ``-inf`` for ``max``, ``inf`` for ``min``), and every
    ``dot`` contracting ``n`` (both operands span it) has an operand of zeros there: then a lane
    on the guard's false side adds nothing, whichever row it is in. (That a whole tile with the
    guard false changes nothing does not show it: ``max(acc, min(s))`` with ``s = -inf`` there
    changes ``acc`` per lane.)"""
    n = loop.axis.name.id
    env: dict[str, _Abstract] = {name: ("same", name) for name in carried}
    spanning: set[str] = set()  # locals whose tiles span n

    def spans(expr: m.Expr) -> bool:
        if isinstance(expr, m.Load):
            return _along(expr, n)
        if isinstance(expr, m.Ref):
            return expr.name.id == n or expr.name.id in spanning
        if isinstance(expr, m.Call) and expr.word("dim") == n:
            return False
        if isinstance(expr, m.Call) and m.is_dot(expr):
            inner = [spans(a) for a in expr.args[:2]]
            return any(inner) and not all(inner)
        if isinstance(expr, m.BinOp):
            return spans(expr.left) or spans(expr.right)
        if isinstance(expr, m.Neg):
            return spans(expr.operand)
        return isinstance(expr, m.Call) and any(spans(a) for a in expr.args)

    def neutral(expr: m.Expr) -> bool:
        for part in m.subexpressions(expr):
            if not isinstance(part, m.Call):
                continue
            if part.word("dim") == n and spans(part.args[0]):
                function = reduction(part)
                if function is None or _value(part.args[0], env, guard, True) != ("const", function.identity):
                    return False
            if m.is_dot(part) and all(spans(a) for a in part.args[:2]):
                if _ZERO not in [_value(a, env, guard, True) for a in part.args[:2]]:
                    return False
        return True

    for stmt in loop.body:
        match stmt:
            case m.Declare() | m.Assign():  # a local's value
                value = m.values(stmt)[0]
                if not neutral(value):
                    return False
                env[stmt.name.id] = _value(value, env, guard, True)
                if spans(value):
                    spanning.add(stmt.name.id)
            case m.Accumulate() | m.Store():
                if not neutral(stmt.value):
                    return False
            case _:  # any other statement (a loop): not shown to be neutral
                return False
    return True


def _assigned(loop: m.Loop, name: str) -> bool:
    return any(isinstance(s, (m.Assign, m.Accumulate)) and s.name.id == name for s in m.statements(loop.body))


def _value(expr: m.Expr, env: dict[str, _Abstract], guard: Guard, strict: bool = False) -> _Abstract:
    """The abstract value of ``expr`` in an iteration where ``guard`` is false everywhere."""
    if isinstance(expr, m.Number):
        return ("const", expr.value)
    if isinstance(expr, m.Ref):
        return env.get(expr.name.id)
    if isinstance(expr, m.Neg):
        inner = _value(expr.operand, env, guard, strict)
        return ("const", -inner[1]) if inner is not None and inner[0] == "const" else None
    if isinstance(expr, m.BinOp):
        if m.expr_key(expr) == guard.key:
            return _FALSE
        left, right = _value(expr.left, env, guard, strict), _value(expr.right, env, guard, strict)
        return _binop(expr.op, left, right, strict)
    if isinstance(expr, m.Call):
        return _call(expr, env, guard, strict)
    return None  # a load: any values


def _binop(op: str, left: _Abstract, right: _Abstract, strict: bool = False) -> _Abstract:
    if op == "&" and _FALSE in (left, right):
        return _FALSE
    if op == "|":
        return right if left == _FALSE else left if right == _FALSE else None
    if left is None and right is None:
        return None
    if left is not None and right is not None and left[0] == right[0] == "const":
        try:
            a, b = left[1], right[1]
            return ("const", {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op])
        except (KeyError, ZeroDivisionError):
            return None
    if op == "+":
        return left if right == _ZERO else right if left == _ZERO else None
    if op == "-":
        if right == _ZERO:
            return left
        if left == right and left is not None and left[0] == "same":
            return _ZERO  # finite values
        if left is not None and left[0] == "const" and math.isinf(left[1]) and not (strict and right is None):
            return left  # -inf minus a finite value
        return None
    if op == "*":
        if _ZERO in (left, right) and not (strict and None in (left, right)):
            return _ZERO  # finite values
        return left if right == _ONE else right if left == _ONE else None
    if op == "/":
        return left if right == _ONE else None
    return None


def _call(call: m.Call, env: dict[str, _Abstract], guard: Guard, strict: bool = False) -> _Abstract:
    name = call.func.id
    args = [_value(a, env, guard, strict) for a in call.args]
    if name == "where":
        cond, x, y = args[0], args[1], args[2]
        return x if cond == _TRUE else y if cond == _FALSE else (x if x == y else None)
    if name == "dot":
        if strict:  # zeros times a known tile or a loaded one (finite): zero
            finite = [isinstance(e, m.Load) or (a is not None and not (a[0] == "const" and math.isinf(a[1])))
                      for a, e in zip(args, call.args, strict=True)]
            return _ZERO if any(a == _ZERO and finite[1 - i] for i, a in enumerate(args[:2])) else None
        return _ZERO if _ZERO in args else None
    function = lookup(name)
    if function is not None and function.kind == "elementwise" and function.identity is not None:
        identity = ("const", function.identity)  # maximum(x, -inf) = x
        if args[1] == identity:
            return args[0]
        if args[0] == identity:
            return args[1]
    values = [a[1] for a in args if a is not None and a[0] == "const"]
    if not args or len(values) != len(args):  # not every argument a tile of one number
        return None
    value = values[0]
    if function is not None and function.mirror is not None and function.kind == "elementwise":
        assert function.identity is not None, f"{name} has no identity"
        pick = max if function.identity < 0 else min  # maximum, minimum
        return ("const", pick(values))
    if function is not None and function.kind == "reduction" and function.combine is not None:  # a tile of one value
        if function.idempotent or value == function.identity:
            return ("const", value)
        return None
    if name in ("exp", "exp2"):
        try:
            return ("const", math.exp(value) if name == "exp" else 2.0**value)
        except OverflowError:
            return ("const", math.inf)
    function = lookup(name)
    if function is not None and function.kind == "cast" and (value in (0.0, 1.0) or math.isinf(value)):
        return args[0]  # exact in every float dtype
    return None
