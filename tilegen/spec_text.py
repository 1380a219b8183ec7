"""Spec text from the model: an expression written back as ``.tile`` source, with the fewest
parentheses that keep its meaning (the grammar's precedence, ``grammars/tile.lark``).

:mod:`tilegen.grad` writes the backward it derives with these, so that ``tilegen show --grad``
prints a spec that reads like one a person wrote, and that parses back to the same model.
:func:`safe_path` is a spec's path as generated comments and docstrings may hold it.
"""

from __future__ import annotations

import functools

from tilegen import model as m

#: Binding strength of each binary operator, loosest first (``|`` binds loosest, then ``&``, the
#: comparisons, ``+ -`` and ``* / // %``); a unary minus binds tighter, and an atom (a name, a number,
#: a load or a call) tightest.
LEVELS = {"|": 1, "&": 2, "<": 3, "<=": 3, ">": 3, ">=": 3, "==": 3, "!=": 3, "+": 4, "-": 4,
          "*": 5, "/": 5, "//": 5, "%": 5}
NEG_LEVEL = 6
ATOM_LEVEL = 7


_NESTING = {"(": 1, "[": 1, ")": -1, "]": -1}


@functools.lru_cache(maxsize=4096)  # the derivation asks again of the same texts of growing expressions
def level(text: str) -> int:
    """The binding strength of the outermost operation of expression ``text``, as written by this
    module (binary operators with a space each side, a unary minus without): :data:`ATOM_LEVEL`
    for a name, number, load, call or parenthesized expression."""
    depth, found = 0, ATOM_LEVEL
    for i, char in enumerate(text):
        depth += _NESTING.get(char, 0)
        if depth or char != " ":
            continue
        end = text.find(" ", i + 1)  # the word after this space ends at the next one (linear in all)
        word = text[i + 1:end] if end >= 0 else ""
        if word in LEVELS:
            found = min(found, LEVELS[word])
    if found == ATOM_LEVEL and text.startswith("-"):
        return NEG_LEVEL
    return found


def wrap(text: str, at_least: int) -> str:
    """``text`` in parentheses where its outermost operation binds looser than ``at_least``."""
    return f"({text})" if level(text) < at_least else text


def binary(op: str, left: str, right: str) -> str:
    """``left op right`` with the parentheses the operator's precedence needs (left-associative:
    the right operand of ``-`` or ``/`` is wrapped at the operator's own level too)."""
    strength = LEVELS[op]
    if strength == 3:  # comparisons do not chain
        return f"{wrap(left, 4)} {op} {wrap(right, 4)}"
    return f"{wrap(left, strength)} {op} {wrap(right, strength + 1)}"


def negate(text: str) -> str:
    """``-text``; a negated negation is the text itself."""
    if level(text) == NEG_LEVEL and level(text[1:]) >= NEG_LEVEL:
        inner = text[1:]
        return inner[1:-1] if _one_group(inner) else inner
    return "-" + wrap(text, NEG_LEVEL)


def _one_group(text: str) -> bool:
    """True for ``(...)`` whose first parenthesis closes at the end."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def index_text(item: m.Name | m.Number | m.Expr) -> str:
    """One index item of a load or store: an axis, an integer, a gather or an offset."""
    if isinstance(item, m.Name):
        return item.id
    return expr_text(item)


def expr_text(expr: m.Expr) -> str:
    """``expr`` as spec text (a dtype variable's cast written as the variable: ``T(p)``)."""
    if isinstance(expr, m.Number):
        return expr.text
    if isinstance(expr, m.Ref):
        return expr.name.id
    if isinstance(expr, m.Load):
        return f"{expr.tensor.id}[{', '.join(index_text(i) for i in expr.index)}]"
    if isinstance(expr, m.Neg):
        return negate(expr_text(expr.operand))
    if isinstance(expr, m.BinOp):
        return binary(expr.op, expr_text(expr.left), expr_text(expr.right))
    args = [expr_text(a) for a in expr.args]
    args += [f"{k.id}={v.name.id if isinstance(v, m.Ref) else expr_text(v)}" for k, v in expr.kwargs]
    return f"{m.as_written(expr.func)}({', '.join(args)})"


def extent_text(axis: m.Axis) -> str:
    """What ``axis`` is over, as the spec writes it: ``N``, or a derived extent's arithmetic
    (``R1 - 1``, not the name the generated code gives it, ``R1_minus_1``)."""
    return expr_text(axis.extent) if axis.extent is not None else axis.dim.id


def safe_path(path: str) -> str:
    """The display path as it may appear in generated comments and docstrings: printable,
    with no quotes or backslashes (``?`` instead), so no path can end a comment or a string."""
    return "".join(c if c.isprintable() and c not in "\\\"'" else "?" for c in path)


__all__ = ["binary", "expr_text", "extent_text", "index_text", "level", "negate", "safe_path", "wrap"]
