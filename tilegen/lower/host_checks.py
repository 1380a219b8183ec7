"""A launcher's checks of its inputs, lowered: types, dtypes, ranks and device; the size symbols
bound from the inputs' shapes, and the checks that they agree; derived sizes and the divisions in
indexes; axes an unmasked block or a whole tile must cover. Every message names the spec's tensor
and dimension; only a failing check calls the runtime (``_rt.bad_input`` and friends) to build it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from tilegen import model as m
from tilegen.lower.checked import block_of, default_of
from tilegen.lower.names import (
    IndexItem,
    chosen_dtypes,
    dtype_bindings,
    dtype_options,
    is_offset,
    offset_text,
    required_first,
    torch_dtype,
    tuple_text,
)
from tilegen.lower.plan import IfBlock, Line, Op, RowsPlan
from tilegen.row_loops import MAX_TILE
from tilegen.sizes import floors
from tilegen.spec_text import expr_text, extent_text


def constant_indices(spec: m.Spec) -> list[tuple[m.Tensor, int, int]]:
    """(tensor, position, largest constant) for every constant index the body uses."""
    found: dict[tuple[str, int], tuple[m.Tensor, int, int]] = {}
    for stmt in m.statements(spec.body):
        for access in m.accesses(stmt):
            tensor = spec.tensor(access.tensor.id)
            if tensor is None:  # a value a stage computes, not an input of the launcher
                continue
            for position, item in enumerate(access.index):
                if isinstance(item, m.Number):
                    largest = max(int(item.text), found.get((tensor.name.id, position), (None, None, -1))[2])
                    found[(tensor.name.id, position)] = (tensor, position, largest)
    return list(found.values())


def bind_sizes(
    spec: m.Spec, name: str
) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]], dict[str, str]]:
    """Unpack every input's shape once (``M, K = a.shape``; dims bound earlier, or literal,
    go to ``_b0``-style temporaries that are then checked).

    Returns (unpack lines, checks, reference bindings, where each symbol is bound).
    """
    lines: list[str] = []
    checks: list[tuple[str, str]] = []
    sizes: list[tuple[str, str]] = []
    bound: dict[str, str] = {}
    for tensor in required_first(spec.arrays):
        if tensor.role != "in" or tensor.zero_dim:  # a 0-dim input has no dimension to bind (its rank is checked)
            continue
        targets = []
        for position, dim in enumerate(tensor.dims):
            where = f"{name}: {tensor.name.id} dimension {position}"
            if isinstance(dim, m.Name) and dim.id not in bound:
                targets.append(dim.id)
                sizes.append((dim.id, f"{tensor.name.id}.shape[{position}]"))
                bound[dim.id] = f"{tensor.name.id} dimension {position}"
                continue
            temp = f"_{tensor.name.id}{position}"
            targets.append(temp)
            if isinstance(dim, m.Number):
                checks.append((f"{temp} != {dim.text}", f"f\"{where} must be {dim.text}, got {{{temp}}}\""))
            else:
                checks.append(
                    (
                        f"{temp} != {dim.id}",
                        f"f\"{where} ({dim.id}) is {{{temp}}}, but {bound[dim.id]} gives {dim.id} = {{{dim.id}}}\"",
                    )
                )
        lines.append(f"{', '.join(targets)}{',' if len(targets) == 1 else ''} = {tensor.name.id}.shape")
    return lines, checks, sizes, bound


def constant_index_checks(spec: m.Spec, name: str, bound: dict[str, str]) -> list[tuple[str, str]]:
    """Constant indices into symbolic dimensions need that dimension to be large enough."""
    checks: list[tuple[str, str]] = []
    for tensor, position, const in constant_indices(spec):
        dim = tensor.dims[position]
        if isinstance(dim, m.Name) and dim.id in bound:
            checks.append(
                (
                    f"{dim.id} <= {const}",
                    f"f\"{name}: {tensor.name.id} dimension {position} ({dim.id}) must be > {const}, "
                    f"got {{{dim.id}}}\"",
                )
            )
    return checks


def derived_sizes(spec: m.Spec, name: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The checks of the derived sizes (``c over C / G``: ``G`` at least 1 and dividing ``C``)
    and each size with its Python text (``("C_over_G", "(C // G)")``), in
    :attr:`~tilegen.model.Spec.derived` order."""
    checks: list[tuple[str, str]] = []
    texts: list[tuple[str, str]] = []
    for size, extent in spec.derived:
        text = offset_text(extent, lambda n: n)
        texts.append((size, text))
        what = f"the extent ({expr_text(extent)})"
        if not floors(extent):
            checks += _division_checks(extent, name, what, lambda e: True)
            continue
        divisors = {id(e.right) for e in m.subexpressions(extent) if isinstance(e, m.BinOp) and e.op == "/"}
        checks += _division_checks(extent, name, what, _among(divisors))
        if not _loop_only(spec, size):  # a loop of no steps adds nothing: (N + 31) / 32 at N = 0
            checks.append((f"{text} < 1", extent_message(spec, name, size, extent)))
    firsts: dict[str, str] = {}  # each condition once (stride < 1 for every / by stride): the first message
    for condition, message in checks:
        firsts.setdefault(condition, message)
    return list(firsts.items()), texts


def _loop_only(spec: m.Spec, size: str) -> bool:
    """Whether the derived size ``size`` is the extent of loops only: no grid axis and no output
    dimension is over it, so where it rounds down to 0 its loops take no step, which is no error."""
    grid = {a.dim.id for a in spec.grid}
    outputs = {d.id for t in spec.outputs for d in t.dims if isinstance(d, m.Name)}
    return size not in grid and size not in outputs


def _among(divisors: set[int]) -> Callable[[m.Expr], bool]:
    """Whether an expression is one of ``divisors`` (their ids): the operands the launcher knows in
    an extent that rounds down, where the dividend is a count of positions, not a size to divide."""
    return lambda e: id(e) in divisors


def extent_message(spec: m.Spec, name: str, size: str, extent: m.Expr) -> str:
    """The launcher's message for a derived extent that rounds down below 1 (a window larger than
    the padded input), naming the output dimension (else the axis) it is and the sizes it reads."""
    where = next((f"dimension {i} of '{t.name.id}'" for t in spec.outputs for i, d in enumerate(t.dims)
                  if isinstance(d, m.Name) and d.id == size), None)
    where = where or next(f"the extent of axis '{a.name.id}'" for a in spec.axes() if a.dim.id == size)
    values = ", ".join(f"{n} = {{{n}}}" for n in dict.fromkeys(m.offset_names(extent)))
    return (f"f\"{name}: {where}, {expr_text(extent)}, is {{{offset_text(extent, lambda n: n)}}} at {values}; it must "
            f"be at least 1 (the window is larger than the padded input)\"")


def _division_checks(
    expr: m.Expr, name: str, what: str, sized: Callable[[m.Expr], bool]
) -> list[tuple[str, str]]:
    """The launcher's checks of each ``/`` in ``expr`` (``what`` names it in the message): where
    ``sized`` holds for both operands (sizes, integer scalar inputs and integers: the launcher
    knows them), the divisor must be at least 1 and divide; where ``sized`` holds for the divisor
    alone (an axis divided, rounding down: ``h / (H / HK)``), it must be at least 1."""
    checks: list[tuple[str, str]] = []
    for sub in reversed(list(m.subexpressions(expr))):  # inner divisions first: their divisors are used outside
        if not (isinstance(sub, m.BinOp) and sub.op == "/") or not sized(sub.right):
            continue
        a, b = offset_text(sub.left, lambda n: n), offset_text(sub.right, lambda n: n)
        literal = isinstance(sub.right, m.Number) and sub.right.value >= 1  # nothing to check of it
        if sized(sub.left):
            at_least = "" if literal else f", and {expr_text(sub.right)} at least 1"
            checks.append((
                f"({a}) % {b}" if literal else f"{b} < 1 or ({a}) % ({b})",
                f"f\"{name}: {what} needs {_shown(sub.left)} to be a multiple of {_shown(sub.right)}{at_least}\"",
            ))
        elif not literal:
            message = f"{name}: {what} divides by {expr_text(sub.right)}, which must be at least 1, got {{{b}}}"
            checks.append((f"{b} < 1", f"f\"{message}\""))
    return checks


def _shown(expr: m.Expr) -> str:
    """``expr`` in a launcher message: as written, then its value (``H ({H})``) unless a number."""
    if isinstance(expr, m.Number):
        return expr.text
    return f"{expr_text(expr)} ({{{offset_text(expr, lambda n: n)}}})"


def index_divisions(spec: m.Spec, name: str) -> list[tuple[str, str]]:
    """The checks of the ``/`` in tensors' indexes, as :func:`_division_checks` makes them. A
    quotient of sizes in an index must divide, as a derived extent's does: a group size that
    multiplies or divides an axis (GQA's ``k[z, h / (H / HK), n, d]``: with H = 6, HK = 4 heads 4
    and 5 read past ``k`` and got zeros; a channel group's ``g * (C / G) + c``) and a shift
    (rope's ``x[d - D / 2]``: with D = 7 the halves overlapped and lanes mixed). An axis divided
    rounds down, by at least 1. Each condition once, for the first access that holds it."""
    axes = {a.name.id for a in spec.axes()}
    if spec.swizzle is not None and spec.swizzle.aliases is not None:
        axes |= {n.id for n in spec.swizzle.aliases}

    def sized(expr: m.Expr) -> bool:
        return all(e.name.id not in axes for e in m.subexpressions(expr) if isinstance(e, m.Ref))

    def items(index: Iterable[IndexItem]) -> Iterator[m.BinOp | m.Neg]:
        for item in index:
            if isinstance(item, m.Load):
                yield from items(item.index)
            elif is_offset(item):
                yield item

    found: dict[str, str] = {}
    for stmt in m.statements(spec.body):
        for access in m.accesses(stmt):
            for item in items(access.index):
                what = f"the index {expr_text(item)} of {access.tensor.id}"
                for condition, message in _division_checks(item, name, what, sized):
                    found.setdefault(condition, message)
    return list(found.items())


def largest_value(spec: m.Spec, param: str) -> str | None:
    """The largest value any tune config gives ``param`` (None if it is not tuned)."""
    if param not in spec.tuned_params or spec.tune is None:
        return None
    values = [int(value.text) for c in spec.tune.configs if (value := c.get(param)) is not None]
    default = next(p.default for p in spec.params if p.name.id == param)
    if default is not None and len(values) < len(spec.tune.configs):
        values.append(int(default.text))
    return str(max(values))


def axis_checks(
    spec: m.Spec, name: str, bound: dict[str, str], rows: RowsPlan | None = None
) -> list[tuple[str, str]]:
    """Unmasked axes need multiples of their block; a whole axis's extent fits one tile (unless
    ``rows`` runs its long rows through loops)."""
    checks: list[tuple[str, str]] = []
    for axis in spec.axes():
        written = extent_text(axis)  # C / G as the spec writes it, not the launcher's C_over_G
        where = f"'{axis.name.id} over {written}"
        if axis.bounds == "unmasked":
            largest = largest_value(spec, block_of(axis))
            block = largest or block_of(axis)
            value = f"{block_of(axis)} = {largest} (the largest in the tune configs)" if largest else (
                f"{block_of(axis)} = {{{block_of(axis)}}}"
            )
            checks.append(
                (
                    f"{axis.dim.id} % {block}",
                    f"f\"{name}: {where} by {block_of(axis)}' is unmasked, so "
                    f"{written} = {{{axis.dim.id}}} must be a multiple of {value}\"",
                )
            )
        elif axis.bounds == "whole" and (rows is None or rows.dim != axis.dim.id):
            dim = axis.dim.id
            if dim in bound and written == dim:  # the runtime's Inputs checks it (whole_limits)
                continue
            origin = f" ({bound[dim]})" if dim in bound else ""
            limit = whole_limit(spec, axis)
            checks.append(
                (
                    f"{dim} > {limit}",
                    f"f\"{name}: {where} whole' makes one tile of all of {written}, so {written}{origin} must be "
                    f"<= {limit} (Triton's largest tile holds {MAX_TILE} elements), got {{{dim}}}\"",
                )
            )
    return checks


def whole_limit(spec: m.Spec, axis: m.Axis) -> int:
    """The longest extent a ``whole`` axis may have: its tile spans the other grid axes' blocks too
    (the largest any config takes), within Triton's largest tile."""
    limit = MAX_TILE
    for block in (a.block.id for a in spec.grid if a is not axis and a.block is not None):
        largest = largest_value(spec, block)
        param = next(p for p in spec.params if p.name.id == block)
        limit //= int(largest or default_of(param))
    return limit


def whole_limits(spec: m.Spec, rows: RowsPlan | None) -> list[str]:
    """``(axis, size, limit)`` (as text) of each ``whole`` axis over a size an input binds, which
    the runtime's Inputs checks fits one tile (:func:`whole_limit`); but the axis whose long rows
    ``rows`` loops over. :func:`axis_checks` writes out the checks of the others."""
    bound = bind_sizes(spec, spec.name.id)[3]
    found = []
    for axis in spec.axes():
        dim = axis.dim.id
        if axis.bounds == "whole" and (rows is None or rows.dim != dim) and dim in bound and extent_text(axis) == dim:
            found.append(f'("{axis.name.id}", "{dim}", {whole_limit(spec, axis)})')
    return found


def inputs_name(name: str) -> str:
    """The name of launcher ``name``'s :class:`tilegen.runtime.Inputs` in its module."""
    return f"_{name.lstrip('_')}_inputs"


def inputs_table(spec: m.Spec, name: str, rows: RowsPlan | None = None) -> str:
    """The module's :class:`tilegen.runtime.Inputs` of launcher ``name``: each input of ``spec``
    (those the caller must give first) as the runtime checks it: a scalar's type; a tensor's
    dtype (the dtypes it may have where it binds a dtype variable, the input it shares one with,
    or its torch dtype) and dimensions; then the ``whole`` axes whose extent must fit one tile
    (:func:`whole_limits`)."""
    sources = dtype_bindings(spec)  # dtype variable -> the input it is read from
    entries: list[str] = []
    for t in required_first(spec.inputs):
        x = t.name.id
        if t.is_scalar:
            entries.append(f'("{x}", {"float" if t.dtype.id in m.FLOAT_DTYPES else "int"})')
            continue
        source = sources.get(t.dtype.var) if isinstance(t.dtype, m.BoundDtype) else None
        if source == x:  # the input the dtype variable is read from
            dtype = tuple_text(m.DTYPES[o][1] for o in dtype_options(t.dtype))
        else:
            dtype = f'"{source}"' if source is not None else torch_dtype(t.dtype)
        dims = "" if t.zero_dim else " ".join(d.text if isinstance(d, m.Number) else d.id for d in t.dims)
        entries.append(f'("{x}", {dtype}, "{dims}")')
    whole = whole_limits(spec, rows)
    if whole:
        entries.append(f"whole={tuple_text(whole)}")
    return f"{inputs_name(name)} = _rt.Inputs({', '.join(entries)})"


def checked_names(spec: m.Spec) -> tuple[str, ...]:
    """What :class:`tilegen.runtime.Inputs` returns, in order: the device, each dtype variable
    read from an input, each scalar, each size bound from the inputs' shapes."""
    sources = dtype_bindings(spec)
    inputs = [t.name.id for t in required_first(spec.inputs)]
    dtypes = sorted((var for var, source in sources.items() if source in inputs),
                    key=lambda var: inputs.index(sources[var]))
    scalars = [t.name.id for t in required_first(spec.inputs) if t.is_scalar]
    return ("device", *dtypes, *scalars, *(size for size, _ in bind_sizes(spec, spec.name.id)[2]))


def input_checks(spec: m.Spec, name: str) -> list[Op]:
    """The checks of every input of launcher ``name`` (:func:`inputs_table`, which the runtime
    runs): a tensor's type, dtype (binding a dtype variable from the input it is read from),
    rank and dimensions (binding the size symbols), a scalar's type; ``device``, the first
    tensor's, which every tensor must share (a GPU's, or any under the interpreter)."""
    names = checked_names(spec)
    given = ", ".join(t.name.id for t in required_first(spec.inputs))
    return [Line(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {inputs_name(name)}(\"{name}\", {given})")]


def shape_checks(spec: m.Spec, name: str, rows: RowsPlan | None) -> tuple[list[Op], list[str], list[str]]:
    """The checks after the inputs': block-size keywords (powers of two), choices (one of their
    options), then the sizes bound from the inputs' shapes and checked against each other, the
    derived sizes, the divisions in indexes and the axes' extents (:func:`axis_checks`; ``rows``:
    the whole axis whose long rows loop). Returns (those ops, the lines binding the sizes, the
    lines binding the derived sizes): the traced body binds the sizes again."""
    tuned = set(spec.tuned_params)
    ops: list[Op] = [*chosen_dtypes(spec, name)]
    for block in dict.fromkeys(a.block.id for a in spec.axes() if a.block is not None and a.block.id not in tuned):
        ops.append(IfBlock(f"type({block}) is not int or {block} < 1 or {block} & ({block} - 1)", "",
                           (Line(f'_rt.bad_block("{name}", "{block}", {block})'),)))
    for choice in spec.choices:
        options = tuple_text(f'"{o.id}"' for o in choice.options)
        message = (f"f\"{name}: {choice.name.id} must be one of {', '.join(o.id for o in choice.options)}, "
                   f"got {{{choice.name.id}!r}}\"")
        ops.append(IfBlock(f"{choice.name.id} not in {options}", "", (Line(f"raise ValueError({message})"),)))
    unpack, _, _, bound = bind_sizes(spec, name)
    derived_checks, derived = derived_sizes(spec, name)
    checks = constant_index_checks(spec, name, bound)
    ops += [IfBlock(c, "", (Line(f"raise ValueError({message})"),)) for c, message in checks + derived_checks]
    bindings = [f"{size} = {text}" for size, text in derived]
    ops += [Line(line) for line in bindings]
    for condition, message in index_divisions(spec, name) + axis_checks(spec, name, bound, rows):
        ops.append(IfBlock(condition, "", (Line(f"raise ValueError({message})"),)))
    return ops, unpack, bindings
