"""Launcher lowering: a checked spec -> the host function as a :class:`LauncherPlan`.

The launcher checks every input (type, dtype, rank, device, shape), binds the size symbols,
refuses shapes an unmasked or whole axis cannot cover, allocates the outputs, builds the grid
and launches. Every error message names the spec's tensor and dimension.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.lower.kernel import size_symbols, tuple_text, whole_dims
from tilegen.lower.plan import KernelPlan, LauncherPlan, TensorCheck

#: Triton's largest tile (``tl.arange`` extent): TRITON_MAX_TENSOR_NUMEL.
MAX_TILE = 1 << 20


def constant_indices(spec: m.Spec) -> list[tuple[m.Tensor, int, int]]:
    """(tensor, position, largest constant) for every constant index the body uses."""
    found: dict[tuple[str, int], tuple[m.Tensor, int, int]] = {}

    def visit_index(tensor_name: m.Name, index) -> None:
        tensor = spec.tensor(tensor_name.id)
        for position, item in enumerate(index):
            if isinstance(item, m.Number):
                key = (tensor.name.id, position)
                largest = max(int(item.text), found.get(key, (None, None, -1))[2])
                found[key] = (tensor, position, largest)

    def visit(expr) -> None:
        if isinstance(expr, m.Load):
            visit_index(expr.tensor, expr.index)
        elif isinstance(expr, m.BinOp):
            visit(expr.left)
            visit(expr.right)
        elif isinstance(expr, m.Neg):
            visit(expr.operand)
        elif isinstance(expr, m.Call):
            for arg in expr.args:
                visit(arg)

    def walk(body) -> None:
        for stmt in body:
            if isinstance(stmt, m.Loop):
                walk(stmt.body)
            elif isinstance(stmt, m.Store):
                visit_index(stmt.tensor, stmt.index)
                visit(stmt.value)
            elif isinstance(stmt, (m.Assign, m.Accumulate)):
                visit(stmt.value)

    walk(spec.body)
    return list(found.values())


def _bind_sizes(spec: m.Spec, name: str):
    """Size bindings from the first input that has each symbol, and checks for the rest."""
    sizes: list[tuple[str, str]] = []
    checks: list[tuple[str, str]] = []
    bound: dict[str, str] = {}
    for tensor in spec.inputs:
        for position, dim in enumerate(tensor.dims):
            shape = f"{tensor.name.id}.shape[{position}]"
            where = f"{name}: {tensor.name.id} dimension {position}"
            if isinstance(dim, m.Number):
                checks.append((f"{shape} != {dim.text}", f"f\"{where} must be {dim.text}, got {{{shape}}}\""))
            elif dim.id in bound:
                checks.append(
                    (
                        f"{shape} != {dim.id}",
                        f"f\"{where} ({dim.id}) is {{{shape}}}, but {bound[dim.id]} gives {dim.id} = {{{dim.id}}}\"",
                    )
                )
            else:
                sizes.append((dim.id, shape))
                bound[dim.id] = f"{tensor.name.id} dimension {position}"
    # Constant indices into symbolic dimensions need that dimension to be large enough.
    for tensor, position, const in constant_indices(spec):
        dim = tensor.dims[position]
        if isinstance(dim, m.Name) and dim.id in bound:
            checks.append(
                (
                    f"{dim.id} <= {const}",
                    f"f\"{name}: {tensor.name.id} dimension {position} ({dim.id}) must be > {const}, got {{{dim.id}}}\"",
                )
            )
    return sizes, checks, bound


def _largest(spec: m.Spec, param: str) -> str | None:
    """The largest value any tune config gives ``param`` (None if it is not tuned)."""
    if param not in spec.tuned_params:
        return None
    values = [int(c.get(param).text) for c in spec.tune.configs if c.get(param) is not None]
    default = next(p.default for p in spec.params if p.name.id == param)
    if default is not None and len(values) < len(spec.tune.configs):
        values.append(int(default.text))
    return str(max(values))


def _axis_checks(spec: m.Spec, name: str, bound: dict[str, str]) -> list[tuple[str, str]]:
    """Unmasked axes need multiples of their block; whole axes a power-of-two extent."""
    checks = []
    for axis in spec.axes():
        where = f"'{axis.name.id} over {axis.dim.id}"
        if axis.bounds == "unmasked":
            largest = _largest(spec, axis.block.id)
            block = largest or axis.block.id
            value = f"{axis.block.id} = {largest} (the largest in the tune configs)" if largest else (
                f"{axis.block.id} = {{{axis.block.id}}}"
            )
            checks.append(
                (
                    f"{axis.dim.id} % {block}",
                    f"f\"{name}: {where} by {axis.block.id}' is unmasked, so "
                    f"{axis.dim.id} = {{{axis.dim.id}}} must be a multiple of {value}\"",
                )
            )
        elif axis.bounds == "whole":
            dim = axis.dim.id
            origin = f" ({bound[dim]})" if dim in bound else ""
            checks.append(
                (
                    f"{dim} & ({dim} - 1) or {dim} > {MAX_TILE}",
                    f"f\"{name}: {where} whole' makes one tile of all of {dim}, so {dim}{origin} must be "
                    f"a power of two <= {MAX_TILE}, got {{{dim}}}\"",
                )
            )
    return checks


def _grid(spec: m.Spec) -> str:
    """The launch grid: a tuple, or ``lambda meta: ...`` when tuned block sizes shape it."""
    tuned = set(spec.tuned_params)

    def block(name: str) -> str:
        return f'meta["{name}"]' if name in tuned else name

    if spec.flat:
        a, b = spec.grid
        sizes = [f"triton.cdiv({a.dim.id}, {block(a.block.id)}) * triton.cdiv({b.dim.id}, {block(b.block.id)})"]
    else:
        sizes = []
        for axis in spec.grid:
            if axis.is_index:
                sizes.append(axis.dim.id)
            elif axis.bounds == "whole":
                sizes.append("1")
            else:
                sizes.append(f"triton.cdiv({axis.dim.id}, {block(axis.block.id)})")
    text = tuple_text(sizes or ["1"])
    return f"lambda meta: {text}" if tuned else text


def _docstring(spec: m.Spec) -> str:
    def describe(t: m.Tensor) -> str:
        if t.is_scalar:
            return f"{t.name.id}: {t.dtype.id} (a number)"
        dims = ", ".join(d.text if isinstance(d, m.Number) else d.id for d in t.dims)
        return f"{t.name.id}: {t.dtype.id}[{dims}]"

    plural = "s" if len(spec.outputs) > 1 else ""
    lines = [f"Run the kernel of {spec.path} and return its output{plural}.", ""]
    lines.append("Inputs: " + "; ".join(describe(t) for t in spec.inputs) + " (tensors may have any strides).")
    lines.append("Returns: " + "; ".join(describe(t) for t in spec.outputs) + " (new, contiguous).")
    overrides = [f"{p.name.id}={p.default.text}" for p in spec.params if p.name.id not in spec.tuned_params]
    overrides += [f"{c.name.id}=\"{c.options[0].id}\" (one of {', '.join(o.id for o in c.options)})" for c in spec.choices]
    if overrides:
        lines.append("Keyword arguments: " + ", ".join(overrides) + ".")
    if spec.tune is not None:
        lines.append(
            f"Tuned: {', '.join(spec.tuned_params)} come from {len(spec.tune.configs)} autotune configs keyed on "
            f"{', '.join(k.id for k in spec.tune.key)}; the Triton interpreter runs config "
            f"{spec.tune.configs.index(spec.default_config())}."
        )
    lines.append("Raises TypeError or ValueError naming the tensor and dimension on bad input.")
    return "\n".join(lines)


def lower_launcher(spec: m.Spec, kernel: KernelPlan) -> LauncherPlan:
    """The host launcher of a checked spec whose kernel is ``kernel``."""
    name = spec.name.id
    checks = tuple(
        TensorCheck(t.name.id, m.DTYPES[t.dtype.id][1], None if t.is_scalar else len(t.dims), t.dtype.id)
        for t in spec.inputs
    )
    sizes, shape_checks, bound = _bind_sizes(spec, name)
    shape_checks += _axis_checks(spec, name, bound)
    outputs = []
    for tensor in spec.outputs:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        outputs.append((tensor.name.id, tuple_text(dims), m.DTYPES[tensor.dtype.id][1]))
    tuned = set(spec.tuned_params)
    keywords = tuple((p.name.id, p.default.text) for p in spec.params if p.name.id not in tuned)
    keywords += tuple((c.name.id, f'"{c.options[0].id}"') for c in spec.choices)
    whole = whole_dims(spec)
    call_args = [
        tuple(t.name.id for t in spec.arrays),
        tuple(d for d in size_symbols(spec) if d not in whole),
        tuple(t.name.id for t in spec.inputs if t.is_scalar),
    ]
    call_args += [tuple(f"{t.name.id}.stride({i})" for i in range(len(t.dims))) for t in spec.arrays]
    int64 = ()
    if kernel.int64:
        tensors = ", ".join(t.name.id for t in spec.arrays)
        int64 = (f"INT64_OFFSETS=_needs_int64({tensors})",)
    call_args.append(
        tuple(f"{p.name.id}={p.name.id}" for p in spec.params if p.name.id not in tuned)
        + tuple(f"{d}={d}" for d in whole)
        + tuple(f"{c.constexpr}={c.name.id}" for c in spec.choices)
        + int64
    )
    block_names = tuple(
        dict.fromkeys(a.block.id for a in spec.axes() if a.block is not None and a.block.id not in tuned)
    )
    choice_checks = tuple(
        (c.name.id, tuple_text(f'"{o.id}"' for o in c.options)) for c in spec.choices
    )
    return LauncherPlan(
        name=name,
        kernel=kernel.name,
        inputs=tuple(t.name.id for t in spec.inputs),
        arrays=tuple(t.name.id for t in spec.inputs if not t.is_scalar),
        keywords=keywords,
        block_names=block_names,
        tensor_checks=checks,
        choice_checks=choice_checks,
        sizes=tuple(sizes),
        shape_checks=tuple(shape_checks),
        outputs=tuple(outputs),
        grid=_grid(spec),
        call_args=tuple(group for group in call_args if group),
        tuned=spec.tune is not None,
        default_config=kernel.tune.default if kernel.tune is not None else 0,
        returns=", ".join(t.name.id for t in spec.outputs),
        docstring=_docstring(spec),
    )
