"""Scaled extrema: ``max(x * c, dim=n)`` as ``max(x, dim=n) * c`` for a scalar ``c >= 0``.

FlashAttention's logits are ``s = dot(q, k) * scale``; the online softmax needs their row max
and ``exp(s - m)``. Triton tutorial 06 multiplies after the max (``tl.max(qk, 1) * qk_scale``)
and folds the scale into the exponent's argument (``qk * qk_scale - m``, one fused multiply-add
per element), so the tile is never multiplied on its own: one multiply per element less. That
holds for ``scale >= 0``; for ``scale < 0`` the max of ``x * c`` is ``min(x) * c``. The tutorial
assumes a positive scale; tilegen does not: where the factor's sign depends on a scalar input,
the kernel takes a constexpr (``SCALE_NONNEG``), set by the launcher from the value (``scale >=
0``), so a call with a negative scale compiles the other branch.

A local qualifies when the body assigns it once, as a float tile times a scalar factor (numbers
and at most one float scalar input, which may multiply but not divide: ``1 / -0.0`` is ``-inf``
while ``-0.0 >= 0``), and some ``max`` or ``min`` reduces it directly. The kernel then keeps the
tile unscaled (``s_unscaled = tl.dot(q, k)``), reduces that, and writes ``(s_unscaled * factor)``
where the local is used otherwise. Integer tiles are left alone (a product that wraps around
does not keep the order). Like the loop-range proof (:mod:`tilegen.lower.ranges`), the rule
assumes finite tiles: with a factor of 0, ``max(x) * 0`` is NaN where ``x`` holds an infinity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilegen import model as m
from tilegen.functions import reduction


@dataclass(frozen=True)
class Factor:
    """A scalar factor's sign: that of its numbers (``sign``, 1 or -1) times that of ``scalar``,
    the one scalar input it holds (None: the numbers alone)."""

    sign: int
    scalar: str | None


def factor_of(expr: m.Expr, spec: m.Spec) -> Factor | None:
    """The sign of ``expr`` as a product or quotient of numbers and at most one float scalar
    input; None for anything else (a tile, a size symbol, a sum)."""
    if isinstance(expr, m.Number):
        return Factor(-1 if float(expr.text) < 0 else 1, None)
    if isinstance(expr, m.Neg):
        inner = factor_of(expr.operand, spec)
        return None if inner is None else Factor(-inner.sign, inner.scalar)
    if isinstance(expr, m.Ref):
        tensor = spec.tensor(expr.name.id)
        if tensor is not None and tensor.is_scalar and tensor.dtype.id in m.FLOAT_DTYPES:
            return Factor(1, expr.name.id)
        return None
    if isinstance(expr, m.BinOp) and expr.op in ("*", "/"):
        left, right = factor_of(expr.left, spec), factor_of(expr.right, spec)
        if left is None or right is None or (left.scalar and right.scalar):
            return None
        if expr.op == "/" and right.scalar:  # 1 / scale: the sign of -0.0 would be lost
            return None
        return Factor(left.sign * right.sign, left.scalar or right.scalar)
    return None


def reduced_locals(spec: m.Spec) -> frozenset[str]:
    """Locals the body assigns exactly once (never declares) and some ``max`` or ``min``
    reduces directly: ``max(s, dim=n)``."""
    assigned: dict[str, int] = {}
    declared: set[str] = set()
    reduced: set[str] = set()
    for stmt in m.statements(spec.body):
        match stmt:
            case m.Declare():
                declared.add(stmt.name.id)
            case m.Assign() | m.Accumulate():
                assigned[stmt.name.id] = assigned.get(stmt.name.id, 0) + 1
            case _:  # any other statement defines no local
                pass
        for part in (p for value in m.values(stmt) for p in m.subexpressions(value)):
            if (isinstance(part, m.Call) and (f := reduction(part)) is not None and f.mirror is not None
                    and part.word("dim") is not None
                    and len(part.args) == 1 and isinstance(part.args[0], m.Ref)):
                reduced.add(part.args[0].name.id)
    return frozenset(n for n in reduced if assigned.get(n) == 1 and n not in declared)


def split_product(expr: m.Expr, spec: m.Spec, tile: Callable[[m.Expr], bool]) -> tuple[m.Expr, m.Expr, Factor] | None:
    """``(x, c, sign of c)`` for ``expr = x * c`` (or ``c * x``) with ``tile(x)`` true and ``c``
    a scalar :func:`factor_of`; None otherwise."""
    if not (isinstance(expr, m.BinOp) and expr.op == "*"):
        return None
    for x, c in ((expr.left, expr.right), (expr.right, expr.left)):
        factor = factor_of(c, spec)
        if factor is not None and tile(x):
            return x, c, factor
    return None
