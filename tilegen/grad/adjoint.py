"""The derivation's data: an :class:`Adjoint` (spec text and the axes it spans), their sum, and
a named :class:`Value` of the recomputed forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen import model as m
from tilegen.spec_text import binary, index_text, negate


@dataclass(frozen=True)
class Adjoint:
    """An adjoint: float32 spec text and the axes it spans (it may span more than its value, a
    broadcast's axes, which the gradient's store sums over). Along the ``implicit`` ones (of
    ``axes``) its text does not vary, though its value's lanes do (a reduction's operand takes the
    reduction's adjoint in every lane): summed over one, it is multiplied by the extent."""

    text: str
    axes: frozenset[str]
    implicit: frozenset[str] = frozenset()

    def map(self, text: str, *more: tuple[str, ...]) -> Adjoint:
        """Another adjoint, ``text``, spanning these axes and ``more``'s (which its text now varies along)."""
        real = frozenset().union(*more)
        return Adjoint(text, self.axes | real, self.implicit - real)


def total_of(terms: list[Adjoint]) -> Adjoint:
    """The sum of ``terms`` (``a - b`` for a negated one; a term twice: ``2.0 * a``)."""
    counted: dict[str, int] = {}
    for term in terms:
        counted[term.text] = counted.get(term.text, 0) + 1
    first = {term.text: term for term in terms}
    terms = [Adjoint(text if n == 1 else binary("*", f"{float(n)!r}", text), first[text].axes, first[text].implicit)
             for text, n in counted.items()]
    text = terms[0].text
    for term in terms[1:]:
        if term.text.startswith("-") and negate(term.text) != term.text:
            text = binary("-", text, negate(term.text))
        else:
            text = binary("+", text, term.text)
    real = frozenset().union(*(t.axes - t.implicit for t in terms))
    return Adjoint(text, frozenset().union(*(t.axes for t in terms)),
                    frozenset().union(*(t.implicit for t in terms)) - real)


@dataclass
class Value:
    """A named value of the recomputed forward: its defining expression (hoisted parts named)."""

    name: str
    expr: m.Expr


def read_text(store: m.Store) -> str:
    """The load of what ``store`` wrote, at its index (``mu[r]``)."""
    return f"{store.tensor.id}[{', '.join(index_text(i) for i in store.index)}]"
