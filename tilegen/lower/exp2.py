"""Base-2 exponentials: ``exp`` of scaled logits as ``exp2``, the scale folded in (a spec rewrite).

GPUs compute ``exp(x)`` as ``exp2(x * log2(e))``: a multiply on every element before the
special-function unit. FlashAttention's kernels (Triton tutorial 06: ``qk_scale = sm_scale *
1.44269504``, ``tl.math.exp2``) keep the logits in base 2 instead, so that the ``log2(e)``
factor rides on the softmax scale they multiply by anyway. :func:`fold_exp2` finds the local
variables whose values reach only the exponent of an ``exp`` (through ``max``, ``maximum``,
``where`` and differences of two of them), multiplies their definitions by ``log2(e)`` (into a
scalar factor where the definition ends with one, ``dot(..) * scale``) and turns those ``exp``
into ``exp2``: ``exp(s - m) = exp2(s * log2(e) - m * log2(e))``. A store that adds such a
variable to something (``lse[z, h, m] = m_i + log(l_i)``, attention's log-sum-exp) reads it back
in base e, ``m_i * ln(2)``, an ulp or so from the value it would have had; a variable used
anywhere else (stored alone, ``floor(m_i)``, ``x = m_i + 1``) keeps its exact values, and so does
every ``exp`` of it.

The rewrite is of the model (plain data, spans kept); the kernel lowering renders the result.
The torch reference is lowered from the spec as written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import TypeGuard

from tilegen import model as m
from tilegen.dtypes import INDEX, expr_dtype
from tilegen.functions import function_of, lookup

#: log2(e): exp(x) = exp2(x * LOG2E).
LOG2E = "1.4426950408889634"
#: ln(2): a base-2 logit read back in base e (x = x2 * LN2).
LN2 = "0.6931471805599453"


def _exact_under_scale(expr: m.Expr) -> TypeGuard[m.Call]:
    """A call that a positive scale passes through exactly (``max``, ``min``, ``maximum``,
    ``minimum``: :attr:`~tilegen.functions.Function.mirror`)."""
    return isinstance(expr, m.Call) and (f := lookup(expr.func)) is not None and f.mirror is not None


def fold_exp2(spec: m.Spec) -> m.Spec:
    """``spec`` with its exponentials of logits in base 2 (unchanged when there are none)."""
    domain = _logit_variables(spec)
    if not domain:
        return spec
    return dataclasses.replace(spec, body=m.map_body(spec.body, lambda s: _rewrite_stmt(s, domain, spec)))


def _dtypes(spec: m.Spec) -> dict[str, str | None]:
    """The dtype of every local the body declares or assigns (its first definition)."""
    found: dict[str, str | None] = {}

    def local(name: str) -> str | None:
        if name in found:
            return found[name]
        tensor = spec.tensor(name)
        return tensor.dtype.id if tensor is not None else INDEX

    for stmt in m.statements(spec.body):
        match stmt:
            case m.Declare():
                found.setdefault(stmt.name.id, stmt.dtype.id)
            case m.Assign() | m.Accumulate():
                found.setdefault(stmt.name.id, expr_dtype(stmt.value, spec, local))
            case _:  # any other statement defines no local
                pass
    return found


def _refs(expr: m.Expr) -> set[str]:
    return {p.name.id for p in m.subexpressions(expr) if isinstance(p, m.Ref)}


def _is_domain(expr: m.Expr, domain: set[str]) -> bool:
    """True when ``expr`` can hold base-2 logits: a constant, a domain variable, an extremum or
    a ``where`` of such, or a root (an expression that uses no domain variable), which the
    rewrite multiplies by log2(e)."""
    if isinstance(expr, (m.Number, m.Neg)) and not _refs(expr):
        return True
    if not (_refs(expr) & domain) and not (_exact_under_scale(expr) or _is_call(expr, "where")):
        return True  # a root
    if isinstance(expr, m.Ref):
        return expr.name.id in domain
    if _exact_under_scale(expr) and function_of(expr.func).kind == "reduction":  # max(x, dim=c)
        return _is_domain(expr.args[0], domain)
    if _exact_under_scale(expr):  # maximum(x, y)
        return len(expr.args) == 2 and all(_is_domain(a, domain) for a in expr.args)
    if _is_call(expr, "where"):
        return not (_refs(expr.args[0]) & domain) and all(_is_domain(a, domain) for a in expr.args[1:])
    return False


def _is_call(expr: m.Expr, *names: str) -> TypeGuard[m.Call]:
    return isinstance(expr, m.Call) and expr.func.id in names


def _exponent_ok(arg: m.Expr, domain: set[str]) -> bool:
    """``exp(arg)`` can become ``exp2``: ``arg`` is ``a - b`` or ``a`` with ``a``, ``b`` in the domain."""
    if isinstance(arg, m.BinOp) and arg.op == "-":
        return _is_domain(arg.left, domain) and _is_domain(arg.right, domain) and bool(_refs(arg) & domain)
    return isinstance(arg, m.Ref) and arg.name.id in domain


def _bad_uses(expr: m.Expr, domain: set[str], ok: bool = False) -> set[str]:
    """The domain variables ``expr`` uses where base-2 values would change its result: anywhere
    but the exponent of an ``exp`` or (``ok``) a domain expression assigned to a domain variable."""
    if isinstance(expr, m.Ref):
        return set() if ok or expr.name.id not in domain else {expr.name.id}
    if not (_refs(expr) & domain):
        return set()
    if _is_call(expr, "exp") and _exponent_ok(expr.args[0], domain):
        arg = expr.args[0]
        parts = [arg.left, arg.right] if isinstance(arg, m.BinOp) else [arg]
        return set[str]().union(*(_bad_uses(p, domain, ok=True) for p in parts))
    if ok and isinstance(expr, m.Call) and _is_domain(expr, domain):  # an extremum or a where (roots use no domain)
        args = expr.args[1:] if _is_call(expr, "where") else expr.args
        return set[str]().union(*(_bad_uses(a, domain, ok=True) for a in args))
    if isinstance(expr, m.BinOp):
        return _bad_uses(expr.left, domain) | _bad_uses(expr.right, domain)
    if isinstance(expr, m.Neg):
        return _bad_uses(expr.operand, domain)
    if isinstance(expr, m.Call):
        return set[str]().union(*(_bad_uses(a, domain) for a in expr.args))
    return set()


def _bad_store_uses(expr: m.Expr, domain: set[str]) -> set[str]:
    """:func:`_bad_uses` of a stored value, but for a domain variable that is an operand of ``+``
    or ``-`` (``m_i + log(l_i)``): that one the store reads back in base e (:func:`_read_back`)."""
    if isinstance(expr, m.BinOp) and expr.op in ("+", "-"):
        sides = [s for s in (expr.left, expr.right) if not (isinstance(s, m.Ref) and s.name.id in domain)]
        return set[str]().union(*(_bad_store_uses(s, domain) for s in sides))
    if isinstance(expr, m.BinOp):
        return _bad_store_uses(expr.left, domain) | _bad_store_uses(expr.right, domain)
    if isinstance(expr, m.Neg):
        return _bad_store_uses(expr.operand, domain)
    if isinstance(expr, m.Call) and not (_is_call(expr, "exp") and _exponent_ok(expr.args[0], domain)):
        return set[str]().union(*(_bad_store_uses(a, domain) for a in expr.args))
    return _bad_uses(expr, domain)


def _logit_variables(spec: m.Spec) -> set[str]:
    """The f32 locals whose every definition is a domain expression and every use an exponent or
    the definition of another such local (the greatest such set, by elimination)."""
    dtypes = _dtypes(spec)
    stmts = list(m.statements(spec.body))
    domain = {name for name, dtype in dtypes.items() if dtype == "f32"}
    changed = True
    while changed and domain:
        changed = False
        for stmt in stmts:
            bad: set[str] = set()
            match stmt:
                case m.Accumulate():
                    if stmt.name.id in domain:
                        bad.add(stmt.name.id)
                    bad |= _bad_uses(stmt.value, domain)
                case m.Declare():
                    if stmt.name.id in domain and _refs(stmt.init):
                        bad.add(stmt.name.id)
                case m.Assign():
                    if stmt.name.id in domain and not _is_domain(stmt.value, domain):
                        bad.add(stmt.name.id)
                    target = stmt.name.id in domain and stmt.name.id not in bad
                    bad |= _bad_uses(stmt.value, domain, ok=target)
                case m.Store():  # a domain variable it adds is read back (_read_back); any other use is bad
                    for value in m.values(stmt):
                        bad |= _bad_store_uses(value, domain)
                case _:  # a loop: its statements are among these
                    pass
            if bad:
                domain -= bad
                changed = True
    # Worth it only when every root folds log2(e) into a scalar factor: a root multiplied
    # element by element costs what each exp2 saves (softmax's exp(x - max(x)) stays as written).
    exps = [p for s in stmts for v in m.values(s)
            for p in m.subexpressions(v) if _is_call(p, "exp") and _exponent_ok(p.args[0], domain)]
    # (an update's local is not in the domain: only declarations and assignments define one)
    roots = [r for s in stmts if m.local_name(s) in domain for v in m.values(s) for r in _roots(v, domain)]
    roots += [r for e in exps if isinstance(e.args[0], m.BinOp) for part in (e.args[0].left, e.args[0].right)
              for r in _roots(part, domain)]
    if not exps or not all(_folds(r, spec) for r in roots):
        return set()
    return domain


def _roots(expr: m.Expr, domain: set[str]) -> Iterator[m.Expr]:
    """The roots of a domain expression: the parts the rewrite multiplies by log2(e)."""
    if isinstance(expr, m.Ref) and expr.name.id in domain:
        return
    if _is_call(expr, "where"):
        for arg in expr.args[1:]:
            yield from _roots(arg, domain)
    elif _exact_under_scale(expr) and _refs(expr) & domain:
        for arg in expr.args:
            yield from _roots(arg, domain)
    else:
        yield expr


def _folds(root: m.Expr, spec: m.Spec) -> bool:
    """A root scaled for free: a constant, or ``x * scalar`` (log2(e) joins the scalar)."""
    if isinstance(root, m.Number) or (isinstance(root, m.Neg) and isinstance(root.operand, m.Number)):
        return True
    return isinstance(root, m.BinOp) and root.op == "*" and _is_scalar(root.right, spec)


# ----------------------------------------------------------------------------- rewrite


def _scaled(expr: m.Expr, domain: set[str], spec: m.Spec) -> m.Expr:
    """A domain expression in base 2: roots times log2(e) (into a trailing scalar factor when
    there is one), constants scaled, extrema and wheres rewritten inside."""
    span = expr.span
    if isinstance(expr, m.Neg) and isinstance(expr.operand, m.Number):
        return dataclasses.replace(expr, operand=_scaled(expr.operand, domain, spec))
    if isinstance(expr, m.Number):
        if expr.value in (0.0, math.inf):
            return expr
        return dataclasses.replace(expr, text=repr(expr.value * float(LOG2E)))
    if isinstance(expr, m.Ref) and expr.name.id in domain:
        return expr
    if _is_call(expr, "where"):
        args = (expr.args[0], *(_scaled(a, domain, spec) for a in expr.args[1:]))
        return dataclasses.replace(expr, args=args)
    if _exact_under_scale(expr):
        return dataclasses.replace(expr, args=tuple(_scaled(a, domain, spec) for a in expr.args))
    log2e = m.Number(LOG2E, span)
    if isinstance(expr, m.BinOp) and expr.op == "*" and _is_scalar(expr.right, spec):
        return dataclasses.replace(expr, right=m.BinOp("*", expr.right, log2e, span))
    return m.BinOp("*", expr, log2e, span)


def _is_scalar(expr: m.Expr, spec: m.Spec) -> bool:
    """A number, a scalar input or a size symbol: one value per launch."""
    if isinstance(expr, m.Number):
        return True
    if isinstance(expr, m.Ref):
        tensor = spec.tensor(expr.name.id)
        return tensor is not None and tensor.is_scalar
    return False


def _rewrite_expr(expr: m.Expr, domain: set[str], spec: m.Spec) -> m.Expr:
    """``exp`` of a domain exponent -> ``exp2`` of it in base 2 (domain variables hold base-2
    values already; a root operand is scaled)."""

    def exp2(e: m.Expr) -> m.Expr | None:
        if not (_is_call(e, "exp") and _exponent_ok(e.args[0], domain)):
            return None
        arg = e.args[0]
        if isinstance(arg, m.BinOp):
            arg = dataclasses.replace(arg, left=_scaled(arg.left, domain, spec), right=_scaled(arg.right, domain, spec))
        return dataclasses.replace(e, func=dataclasses.replace(e.func, id="exp2"), args=(arg,))

    return m.map_expr(expr, exp2)


def _rewrite_stmt(stmt: m.Stmt, domain: set[str], spec: m.Spec) -> m.Stmt:
    """One statement in base 2 (a loop's body is :func:`tilegen.model.map_body`'s): a domain
    local's definition scaled, every other value's exponentials rewritten."""
    match stmt:
        case m.Declare() if stmt.name.id in domain:
            return dataclasses.replace(stmt, init=_scaled(stmt.init, domain, spec))
        case m.Assign() if stmt.name.id in domain:
            return dataclasses.replace(stmt, value=_scaled(stmt.value, domain, spec))
        case m.Store():  # its exponentials, and the domain variables it reads elsewhere in base e
            return m.map_values(stmt, lambda e: _read_back(e, domain, spec))
        case _:  # any other statement: its values' exponentials
            return m.map_values(stmt, lambda e: _rewrite_expr(e, domain, spec))


def _read_back(expr: m.Expr, domain: set[str], spec: m.Spec) -> m.Expr:
    """A stored value in base e: its exponentials rewritten as :func:`_rewrite_expr` does, and a
    domain variable it adds (:func:`_bad_store_uses` allows no other) multiplied by ln(2)
    (``m_i + log(l_i)`` -> ``m_i * ln(2) + log(l_i)``, ``m_i`` holding base-2 logits)."""

    def back(e: m.Expr) -> m.Expr | None:
        if _is_call(e, "exp") and _exponent_ok(e.args[0], domain):
            return _rewrite_expr(e, domain, spec)
        if isinstance(e, m.Ref) and e.name.id in domain:
            return m.BinOp("*", e, m.Number(LN2, e.span), e.span)
        return None

    return m.map_expr(expr, back)
