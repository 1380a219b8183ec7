"""Semantic checks: a parsed :class:`~tilegen.model.Spec` is either valid or every problem in it
is reported at once as a :class:`~tilegen.errors.SpecError` with ``file:line:col``.

The rules here are what lowering relies on: names are defined once and are safe identifiers,
tensors are indexed with their rank and with axes over the dimension they index, block sizes
are powers of two, ``dot`` contracts over the enclosing loop's axis, outputs are written and
inputs are not.

The rules are split by concern, each module a set of functions over one shared
:class:`~tilegen.check.state.CheckState` (the spec, the diagnostics, and what earlier rules
learned: names, swizzle aliases, loop axes, blocks of two pieces, descriptor block shapes):

* :mod:`tilegen.check.declarations`: names, dtypes, dtype variables, input ranges, the grid's
  axes, swizzle, choices, the access style; :mod:`tilegen.check.tuning`: the autotune key and
  configs;
* :mod:`tilegen.check.indexing`: tensor accesses, gathers, a descriptor's block shape;
  :mod:`tilegen.check.expressions`: an expression's dtype and axes, calls, reductions, ``dot``;
* :mod:`tilegen.check.body`: the body's statements in order, with the names in scope;
* :mod:`tilegen.check.schedule`: ``split``, ``split tail`` and blocks of two pieces;
* :mod:`tilegen.check.in_place`: outputs written over an input (``in place of``);
* :mod:`tilegen.carried`: values carried across a loop's steps;
* :mod:`tilegen.check.ordered`: a ``deterministic`` kernel's ``+=`` stores.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.carried import check_carried
from tilegen.check.body import check_body
from tilegen.check.declarations import check_declarations
from tilegen.check.expressions import DOT_ACCUMULATORS
from tilegen.check.in_place import check_in_place, check_in_place_declarations
from tilegen.check.indexing import check_unread_arrays
from tilegen.check.ordered import check_deterministic
from tilegen.check.schedule import check_chunks, check_pieces, check_split, check_split_tail
from tilegen.check.state import (
    GENERATED_PREFIXES,
    GENERATED_SUFFIXES,
    KEYWORDS,
    MAX_TMA_BOX,
    MIN_DOT_TILE,
    RESERVED,
    CheckState,
    Scope,
    is_power_of_two,
    is_two_pieces,
)
from tilegen.errors import Collector
from tilegen.functions import CASTS, CHOICE_OPTIONS, FUNCTIONS

__all__ = [
    "CASTS",
    "CHOICE_OPTIONS",
    "DOT_ACCUMULATORS",
    "FUNCTIONS",
    "GENERATED_PREFIXES",
    "GENERATED_SUFFIXES",
    "KEYWORDS",
    "MAX_TMA_BOX",
    "MIN_DOT_TILE",
    "RESERVED",
    "CheckState",
    "Scope",
    "check",
    "check_state",
    "is_power_of_two",
    "is_two_pieces",
]


def check_state(spec: m.Spec) -> CheckState:
    """Run every rule over ``spec`` (one binding of its dtype variables) and return the
    :class:`CheckState` holding the diagnostics found, in the order the rules report them:
    declarations, the body, then (only where those found nothing) carried values, ``split``,
    ``split tail`` and pieces, and last the outputs never written. Raises nothing."""
    state = CheckState(spec)
    axes = check_declarations(state)
    check_in_place_declarations(state)
    check_body(state, spec.body, Scope(dict(axes)))
    if not state.errors.diagnostics:  # these rules assume an otherwise valid body
        check_carried(spec, state.errors)
        check_split(state)
        check_split_tail(state)
        check_pieces(state)
        check_chunks(state)
        check_in_place(state)
        check_deterministic(state)
        check_unread_arrays(state)
    for tensor in spec.outputs:
        if tensor.name.id not in state.written:
            state.errors.error(f"output tensor '{tensor.name.id}' is never written", tensor.name.span)
    return state


def check(spec: m.Spec) -> m.Spec:
    """Validate ``spec``; return it unchanged or raise :class:`~tilegen.errors.SpecError`
    listing every problem found (up to :data:`tilegen.errors.MAX_DIAGNOSTICS`).

    A spec with dtype variables is checked once per binding (:func:`tilegen.model.specialize`);
    a problem that only some bindings have says which (``with T = f32``)."""
    bindings = spec.bindings()
    found: dict[tuple[str, m.Span], list[str]] = {}
    for binding in bindings:
        state = check_state(m.specialize(spec, binding))
        where = ", ".join(f"{var} = {dtype}" for var, dtype in binding.items())
        for diagnostic in state.errors.diagnostics:
            seen = found.setdefault((diagnostic.message, diagnostic.span), [])
            if where not in seen:
                seen.append(where)
    errors = Collector()
    for (message, span), wheres in found.items():
        if len(wheres) < len(bindings):
            message = f"{message} (with {'; '.join(wheres)})"
        errors.error(message, span)
    errors.raise_if_any(spec.path, spec.source)
    return spec
