"""The size symbols of a spec and their values: which sizes a run chooses, the integer scalar inputs
sizes are made of, and the derived extents (``C / G``) computed from them, as the launcher computes
them. Shared by :mod:`tilegen.runner` (which chooses sizes) and :mod:`tilegen.tolerance` (which
reads them off a call's tensors).
"""

from __future__ import annotations

import math
from collections.abc import Container

from tilegen import model as m


def size_names(spec: m.Spec) -> list[m.Name]:
    """The size symbols a run chooses, each once: the tensors' shapes (but the numerator of a
    derived extent ``C / G``, which follows from it and ``G``) and the derived ones."""
    numerators = {n for n, _ in divided(spec).values()}
    names: dict[str, m.Name] = {}
    for tensor in spec.tensors:
        for dim in tensor.dims:
            if isinstance(dim, m.Name) and dim.id not in numerators and not is_scalar_input(spec, dim.id):
                names.setdefault(dim.id, dim)
    for axis in spec.axes():
        if axis.extent is not None:
            names.setdefault(axis.dim.id, axis.dim)
    return list(names.values())


def is_scalar_input(spec: m.Spec, name: str) -> bool:
    """Whether ``name`` is a scalar input of ``spec`` (``in G: i32``)."""
    tensor = spec.tensor(name)
    return tensor is not None and tensor.is_scalar


def is_quotient(extent: m.Expr) -> bool:
    """Whether a derived extent is ``A / S`` alone (a size over an integer scalar input or an
    integer): a dimension split into parts (``C / G``), which must divide. In any other extent
    (``(H + 2 * P - K) / S + 1``, a count of windows as torch's shape formulas give it) ``/``
    rounds down."""
    return (isinstance(extent, m.BinOp) and extent.op == "/" and isinstance(extent.left, m.Ref)
            and (isinstance(extent.right, m.Ref) or (isinstance(extent.right, m.Number) and extent.right.is_int)))


def floors(extent: m.Expr) -> bool:
    """Whether a derived extent divides and rounds down (``/`` in it, not :func:`is_quotient`)."""
    return not is_quotient(extent) and any(isinstance(e, m.BinOp) and e.op == "/" for e in m.subexpressions(extent))


def divided(spec: m.Spec) -> dict[str, tuple[str, str | int]]:
    """Derived extents of the form ``A / S`` (:func:`is_quotient`): derived name -> (``A``, ``S``)."""
    found = {}
    for name, extent in spec.derived:
        if isinstance(extent, m.BinOp) and is_quotient(extent):
            left, right = extent.left, extent.right
            assert isinstance(left, m.Ref) and isinstance(right, (m.Ref, m.Number))
            found[name] = (left.name.id, right.name.id if isinstance(right, m.Ref) else int(right.text))
    return found


def _index_quotients(spec: m.Spec) -> list[tuple[str, m.Expr]]:
    """Each ``A / divisor`` in an offset index of ``spec`` whose numerator ``A`` is a size (not an
    axis): ``(A, divisor)``."""
    axes = {a.name.id for a in spec.axes()}
    return [(sub.left.name.id, sub.right)
            for stmt in m.statements(spec.body) for access in m.accesses(stmt)
            for item in access.index if m.is_offset(item) for sub in m.subexpressions(item)
            if isinstance(sub, m.BinOp) and sub.op == "/" and isinstance(sub.left, m.Ref)
            and sub.left.name.id not in axes]


def index_multiples(spec: m.Spec) -> dict[str, int]:
    """The sizes an index divides by an integer (rope's ``x[d - D / 2]``), each with that integer
    (their least common multiple where several): the launcher refuses a size that is not a
    multiple of it (a quotient of sizes in an index must divide)."""
    found: dict[str, int] = {}
    for name, divisor in _index_quotients(spec):
        if isinstance(divisor, m.Number) and divisor.is_int:
            found[name] = math.lcm(found.get(name, 1), int(divisor.text))
    return found


def index_quotients(spec: m.Spec) -> list[tuple[str, str]]:
    """The pairs of sizes ``(A, B)`` an index divides one by the other (grouped-query attention's
    ``k[z, h / (H / HK), n, d]``: ``(H, HK)``): the launcher refuses ``A`` not a multiple of ``B``."""
    axes = {a.name.id for a in spec.axes()}
    pairs = [(name, divisor.name.id) for name, divisor in _index_quotients(spec)
             if isinstance(divisor, m.Ref) and divisor.name.id not in axes]
    return list(dict.fromkeys(pairs))


def round_to_multiples(spec: m.Spec, sizes: dict[str, int], given: Container[str] = ()) -> dict[str, int]:
    """``sizes`` with each size of :func:`index_multiples` not ``given`` rounded up to its multiple,
    and each divisor ``B`` of an :func:`index_quotients` pair ``(A, B)`` made the largest divisor of
    ``A`` not above it (``A`` rounded up to a multiple of ``B`` where ``B`` is given)."""
    for name, factor in index_multiples(spec).items():
        if name in sizes and name not in given:
            sizes[name] += -sizes[name] % factor
    for numerator, divisor in index_quotients(spec):
        if numerator not in sizes or divisor not in sizes:
            continue
        if divisor not in given:
            sizes[divisor] = max(d for d in range(1, min(sizes[divisor], sizes[numerator]) + 1)
                                 if sizes[numerator] % d == 0)
        elif numerator not in given:
            sizes[numerator] += -sizes[numerator] % sizes[divisor]
    return sizes


def scalar_sizes(spec: m.Spec, given: dict[str, int] | None = None) -> dict[str, int]:
    """A value for each integer scalar input a size is made of (``g over G``, ``C / G``, an output's
    dimension ``out counts: i64[bins]``): given, else its sample range's low end, else its default
    (pooling's ``ceil_mode = 0``), else 3 (what :func:`tilegen.runner.random_inputs` passes for it)."""
    given = given or {}
    used = {a.dim.id for a in spec.axes()} | {n for _, e in spec.derived for n in m.offset_names(e)}
    used |= {d.id for t in spec.outputs for d in t.dims if isinstance(d, m.Name)}  # out counts: i64[bins]
    values = {}
    for t in spec.inputs:
        if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES and t.name.id in used:
            if t.sample is not None:
                values[t.name.id] = given.get(t.name.id, max(int(t.sample[0].value), 1))
            else:
                default = t.default
                values[t.name.id] = given.get(t.name.id, 3 if default is None else int(default))
    return values


def solve_derived(spec: m.Spec, sizes: dict[str, int], given: dict[str, int] | None = None) -> dict[str, int]:
    """``sizes`` with the numerator of each derived extent ``A / S`` made ``A = (A / S) * S``
    (given values win: then the derived one follows from them), and every other derived size
    computed from the sizes it is made of."""
    given = given or {}
    quotients = divided(spec)
    for name, (numerator, divisor) in quotients.items():
        factor = divisor if isinstance(divisor, int) else sizes[divisor]
        if numerator in given:
            sizes[name] = given[numerator] // factor
        sizes[numerator] = sizes[name] * factor
    for name, extent in spec.derived:
        if name not in quotients:
            sizes[name] = _evaluate(extent, sizes)
    return sizes


def _evaluate(extent: m.Expr, sizes: dict[str, int]) -> int:
    """A derived extent's value at ``sizes`` (``/`` rounds down, as the launcher's ``//``)."""
    if isinstance(extent, m.Number):
        return int(extent.text)
    if isinstance(extent, m.Ref):
        return sizes[extent.name.id]
    if m.is_extent_call(extent):
        return (min if extent.func.id == "minimum" else max)(_evaluate(a, sizes) for a in extent.args)
    assert isinstance(extent, m.BinOp)  # the checker's: a derived extent is arithmetic of sizes
    left, right = _evaluate(extent.left, sizes), _evaluate(extent.right, sizes)
    return {"+": left + right, "-": left - right, "*": left * right, "/": left // max(right, 1)}[extent.op]
