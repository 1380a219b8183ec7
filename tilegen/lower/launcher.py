"""Launcher lowering: a checked spec -> the host function as a :class:`LauncherPlan`.

The launcher checks every input (type, dtype, rank, device, shape), binds the size symbols,
refuses shapes an unmasked or whole axis cannot cover, allocates the outputs, builds the grid
and launches. Every error message names the spec's tensor and dimension.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.autograd import autograd_apply
from tilegen.lower.checked import block_of, default_of
from tilegen.lower.fast import FastPath, lower_fast_path
from tilegen.lower.finish import launch_args
from tilegen.lower.kernel import INT64_FLAG, LOOP_STAGES
from tilegen.lower.names import (
    IndexItem,
    dtype_bindings,
    dtype_options,
    is_offset,
    made_outputs,
    offset_text,
    size_symbols,
    torch_dtype,
    tuple_text,
)
from tilegen.lower.names import call_text as _call
from tilegen.lower.plan import (
    Comment,
    HookPlan,
    IfBlock,
    KernelPlan,
    LauncherPlan,
    Line,
    Op,
    RowsPlan,
    StagePlan,
    WithBlock,
)
from tilegen.spec_text import expr_text, extent_text

#: Triton's largest tile (``tl.arange`` extent): TRITON_MAX_TENSOR_NUMEL.
MAX_TILE = 1 << 20


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


def _bind_sizes(
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
    for tensor in spec.arrays:
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
    # Constant indices into symbolic dimensions need that dimension to be large enough.
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
    return lines, checks, sizes, bound


def _derived_sizes(spec: m.Spec, name: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The checks of the derived sizes (``c over C / G``: ``G`` at least 1 and dividing ``C``)
    and each size with its Python text (``("C_over_G", "(C // G)")``), in
    :attr:`~tilegen.model.Spec.derived` order."""
    checks: list[tuple[str, str]] = []
    texts: list[tuple[str, str]] = []
    for size, extent in spec.derived:
        texts.append((size, offset_text(extent, lambda n: n)))
        checks += _division_checks(extent, name, f"the extent ({expr_text(extent)})", lambda e: True)
    return checks, texts


def _division_checks(
    expr: m.Expr, name: str, what: str, sized: Callable[[m.Expr], bool], exact: set[int] | None = None
) -> list[tuple[str, str]]:
    """The launcher's checks of each ``/`` in ``expr`` (``what`` names it in the message): where
    ``sized`` holds for both operands (sizes, integer scalar inputs and integers: the launcher
    knows them) and the quotient is one of ``exact`` (their ids; None: every one), the divisor
    must be at least 1 and divide; where
    ``sized`` holds for the divisor alone (an axis divided, rounding down: ``h / (H / HK)``), it
    must be at least 1."""
    checks: list[tuple[str, str]] = []
    for sub in reversed(list(m.subexpressions(expr))):  # inner divisions first: their divisors are used outside
        if not (isinstance(sub, m.BinOp) and sub.op == "/") or not sized(sub.right):
            continue
        a, b = offset_text(sub.left, lambda n: n), offset_text(sub.right, lambda n: n)
        literal = isinstance(sub.right, m.Number) and sub.right.value >= 1  # nothing to check of it
        if sized(sub.left) and (exact is None or id(sub) in exact):
            at_least = "" if literal else f", and {expr_text(sub.right)} at least 1"
            checks.append((
                f"({a}) % {b}" if literal else f"{b} < 1 or ({a}) % ({b})",
                f"f\"{name}: {what} needs {_shown(sub.left)} to be a multiple of {_shown(sub.right)}{at_least}\"",
            ))
        elif not sized(sub.left) and not literal:
            message = f"{name}: {what} divides by {expr_text(sub.right)}, which must be at least 1, got {{{b}}}"
            checks.append((f"{b} < 1", f"f\"{message}\""))
    return checks


def _shown(expr: m.Expr) -> str:
    """``expr`` in a launcher message: as written, then its value (``H ({H})``) unless a number."""
    if isinstance(expr, m.Number):
        return expr.text
    return f"{expr_text(expr)} ({{{offset_text(expr, lambda n: n)}}})"


def _index_divisions(spec: m.Spec, name: str) -> list[tuple[str, str]]:
    """The checks of the ``/`` in tensors' indexes, as :func:`_division_checks` makes them. A
    quotient of sizes that multiplies or divides an axis is a group size (GQA's ``k[z, h / (H /
    HK), n, d]``, a channel group's ``g * (C / G) + c``): it must divide, as a derived extent's
    does (with H = 6, HK = 4 heads 4 and 5 read past ``k`` and got zeros). One added to an axis
    (``c + N / 2``) shifts it, rounding down. An axis is divided by at least 1. Each condition
    once, for the first access that holds it."""
    axes = {a.name.id for a in spec.axes()}
    if spec.swizzle is not None and spec.swizzle.aliases is not None:
        axes |= {n.id for n in spec.swizzle.aliases}

    def sized(expr: m.Expr) -> bool:
        return all(e.name.id not in axes for e in m.subexpressions(expr) if isinstance(e, m.Ref))

    def groups(expr: m.Expr) -> Iterator[int]:
        """The ids of the quotients of sizes in ``expr`` that scale an axis."""
        if not isinstance(expr, m.BinOp):
            return
        if expr.op in ("*", "/"):
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if sized(side) and not sized(other):
                    yield from (id(e) for e in m.subexpressions(side) if isinstance(e, m.BinOp) and e.op == "/")
        yield from groups(expr.left)
        yield from groups(expr.right)

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
                for condition, message in _division_checks(item, name, what, sized, set(groups(item))):
                    found.setdefault(condition, message)
    return list(found.items())


def _largest(spec: m.Spec, param: str) -> str | None:
    """The largest value any tune config gives ``param`` (None if it is not tuned)."""
    if param not in spec.tuned_params or spec.tune is None:
        return None
    values = [int(value.text) for c in spec.tune.configs if (value := c.get(param)) is not None]
    default = next(p.default for p in spec.params if p.name.id == param)
    if default is not None and len(values) < len(spec.tune.configs):
        values.append(int(default.text))
    return str(max(values))


def _axis_checks(
    spec: m.Spec, name: str, bound: dict[str, str], rows: RowsPlan | None = None
) -> list[tuple[str, str]]:
    """Unmasked axes need multiples of their block; a whole axis's extent fits one tile (unless
    ``rows`` runs its long rows through loops)."""
    checks: list[tuple[str, str]] = []
    for axis in spec.axes():
        written = extent_text(axis)  # C / G as the spec writes it, not the launcher's C_over_G
        where = f"'{axis.name.id} over {written}"
        if axis.bounds == "unmasked":
            largest = _largest(spec, block_of(axis))
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
            origin = f" ({bound[dim]})" if dim in bound else ""
            # the tile spans the other grid axes' blocks too (the largest any config takes)
            others = [a.block.id for a in spec.grid if a is not axis and a.block is not None]
            limit = MAX_TILE
            for block in others:
                largest = _largest(spec, block)
                param = next(p for p in spec.params if p.name.id == block)
                limit //= int(largest or default_of(param))
            checks.append(
                (
                    f"{dim} > {limit}",
                    f"f\"{name}: {where} whole' makes one tile of all of {written}, so {written}{origin} must be "
                    f"<= {limit} (Triton's largest tile holds {MAX_TILE} elements), got {{{dim}}}\"",
                )
            )
    return checks


def cdiv(size: str, block: str) -> str:
    """Ceiling division as plain integer arithmetic: ``triton.cdiv`` is a Triton builtin that
    costs about 2.5 us per host call, more than the rest of a launcher's checks together."""
    return f"({size} + {block} - 1) // {block}"


def _grid(spec: m.Spec, config: str | None = None) -> str:
    """The launch grid as a 3-tuple (the compiled kernel's runner takes three sizes); tuned block
    sizes are read from the dict named ``config`` (``meta`` in the autotuner's grid lambda)."""
    tuned = set(spec.tuned_params)

    def block(name: str) -> str:
        return f'{config}["{name}"]' if name in tuned else name

    if spec.flat:
        a, b = spec.grid
        tiles = f"({cdiv(a.dim.id, block(block_of(a)))}) * ({cdiv(b.dim.id, block(block_of(b)))})"
        sizes = [f"min(NUM_SMS, {tiles})" if spec.persistent else tiles]
        if spec.split_tail:  # the whole tiles, and the sub-tiles of the last partial wave's
            sizes = [f"_tail_split({a.dim.id}, {b.dim.id}, {block(block_of(a))}, {block(block_of(b))}, NUM_SMS)[0]"]
    else:
        sizes = []
        for axis in spec.grid:
            if axis.is_index:
                sizes.append(axis.dim.id)
            elif axis.bounds == "whole":  # one program along it: no grid dimension
                continue
            elif spec.persistent:  # rows walked by at most one program per SM
                sizes.append(f"min(NUM_SMS, {cdiv(axis.dim.id, block(block_of(axis)))})")
            else:
                sizes.append(cdiv(axis.dim.id, block(block_of(axis))))
    sizes = (sizes or ["1"]) + ["1"] * (3 - len(sizes or ["1"]))
    return tuple_text(sizes)


def _docstring(spec: m.Spec, variant: str | None = None, uses: str = "", over: tuple[str, ...] = ()) -> str:
    if variant is not None:
        name = spec.name.id.removeprefix("_").removesuffix(f"_{variant}")
        configs = ", with the same tune configs" if spec.tune is not None else ""
        return (f"{name}() where its {uses} cannot serve: the kernel of {spec.path} through {variant}{configs}.\n"
                f"Called by {name}(), after its checks.")

    def describe(t: m.Tensor) -> str:
        dtype = m.as_written(t.dtype)
        if t.is_scalar:
            return f"{t.name.id}: {dtype} (a number)"
        dims = "" if t.zero_dim else ", ".join(d.text if isinstance(d, m.Number) else d.id for d in t.dims)
        return f"{t.name.id}: {dtype}[{dims}]"

    plural = "s" if len(spec.outputs) > 1 else ""
    lines = [f"Run the kernel of {spec.path} and return its output{plural}.", ""]
    layout = (
        "tensors may have any strides: TMA descriptors on Hopper or newer for a unit last stride and "
        "16-byte aligned rows, pointers otherwise"
        if spec.access_style == "descriptor"
        else "tensors may have any strides"
    )
    lines.append("Inputs: " + "; ".join(describe(t) for t in spec.inputs) + f" ({layout}).")
    lines.append("Returns: " + "; ".join(describe(t) for t in spec.outputs) + " (new, contiguous).")
    for t in spec.in_place:
        if (written_over := t.in_place_of) is None:
            continue
        lines.append(f"With inplace=True, {t.name.id} is written over {written_over.id} and returned: "
                     f"{written_over.id}'s storage, its strides, its values overwritten (the custom op "
                     "always makes a new tensor).")
    for var, source in dtype_bindings(spec).items():
        options = " or ".join(next(dtype_options(t.dtype) for t in spec.inputs if t.name.id == source))
        lines.append(f"Dtypes: {var} is {options}, the dtype of {source}; one kernel, compiled for each.")
    overrides = [f"{p.name.id}={default_of(p)}" for p in spec.params if p.name.id not in spec.tuned_params]
    overrides += [
        f"{c.name.id}=\"{c.options[0].id}\" (one of {', '.join(o.id for o in c.options)})" for c in spec.choices
    ]
    if overrides:
        lines.append("Keyword arguments: " + ", ".join(overrides) + ".")
    if over:
        names = " and ".join(over)
        lines.append(f"With inplace_backward=True, the backward writes the gradient of {names} over {names} "
                     "(flash-attn's inplace_backward: no second tensor of that size) where autograd computed it "
                     "(not a leaf, nor a view of one); its values are then gone, and a copy autograd saved of it "
                     "elsewhere is refused when its backward reads it.")
    if spec.tune is not None:
        lines.append(
            f"Tuned: {', '.join(spec.tuned_params) or 'the launch options'} come from {len(spec.tune.configs)} "
            f"autotune configs keyed on {spec.tune.key_as_written}, chosen as TILEGEN_TUNE says (none, quick "
            "or full); config= (an index, or a dict of a config's keywords) runs that one; the Triton "
            f"interpreter runs config {spec.tune.configs.index(spec.default_config())} unless one is forced."
        )
    lines.append("Raises TypeError or ValueError naming the tensor and dimension on bad input.")
    return "\n".join(lines)


def _strides(tensor: m.Tensor) -> list[str]:
    """The strides of a new contiguous output, from its sizes (no ``.stride()`` call)."""
    dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
    return [" * ".join(dims[i + 1:]) or "1" for i in range(len(dims))]


def _int64_condition(spec: m.Spec) -> str:
    """True when some tensor spans 2**31 elements or more (then offsets need 64 bits): inputs
    by their shapes and strides, outputs (new and contiguous) by their element count."""
    terms = []
    for tensor in spec.arrays:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        if tensor.role == "out":
            terms.append(f"{' * '.join(dims)} > 2**31")
        else:
            strides = f"_{tensor.name.id}_strides"
            span = " + ".join(f"({d} - 1) * abs({strides}[{i}])" for i, d in enumerate(dims))
            terms.append(f"{span} >= 2**31")
    return " or ".join(dict.fromkeys(terms))


def _annotation(t: m.Tensor) -> str:
    """The Python type of an input: a tensor, or a Python number for a scalar."""
    if not t.is_scalar:
        return "torch.Tensor"
    return "float" if t.dtype.id in m.FLOAT_DTYPES else "int"


def lower_launcher(
    spec: m.Spec,
    kernel: KernelPlan,
    fallback: str | None = None,
    variant: str | None = None,
    uses: str = "",
    rows: RowsPlan | None = None,
    stages: tuple[StagePlan, ...] = (),
    docstring: str | None = None,
    grad: str | None = None,
    over: tuple[str, ...] = (),
) -> LauncherPlan:
    """The host launcher of a checked spec whose kernel is ``kernel``, with the two functions its
    PyTorch custom op needs (the fake implementation and, for pointer kernels, the body
    ``torch.compile`` traces).

    A TMA-descriptor launcher returns ``fallback`` (the call of the spec's pointer launcher)
    where descriptors cannot serve: a GPU before Hopper, a Triton without them, a tensor whose
    rows are not 16-byte aligned or whose last stride is not 1. A block-pointer launcher returns
    it on a Triton without block pointers (3.9 removed them). ``variant`` names such a second
    launcher of the same spec (``"pointers"``): it is part of its tune and compile keys, which
    share the module's caches with the first; ``uses`` names what the first launcher uses
    (for its docstring). With ``rows``, rows longer than ``_WHOLE_LIMIT`` return ``rows.call``,
    the same spec with its whole axis in loops (:mod:`tilegen.lower.rows`), before any output
    is made, and under ``torch.compile`` launch that kernel. With ``stages``, the inputs of
    ``spec`` that they return (:mod:`tilegen.lower.stages`) are not the launcher's: it calls the
    stages' launchers after its checks, in order. ``docstring`` replaces the one it writes.
    ``grad`` is what a call autograd would record does (grad mode on, a float input requiring
    grad): ``"route"`` returns through the module's ``torch.autograd.Function`` over the
    launchers (its keyword arguments passed as positional ones), or the custom op while
    torch.compile traces, both running the spec's backward (:mod:`tilegen.lower.autograd`); ``"refuse"``
    raises, naming the kernel (a spec without a backward); None (a second launcher of the spec)
    checks nothing. ``over``: the inputs the spec's backward may write its gradients over (``in
    place of``); the launcher takes ``inplace_backward=False``, passed to the Function.

    Every check is an inline condition on the fast path; only a failing check calls a helper of
    the runtime (``_rt.bad_input`` and friends) to build its message. A tuned launcher remembers the config
    the autotuner picked for each key and then launches the compiled kernel directly. Tensors on
    a GPU other than the current one run under ``torch.cuda.device`` of theirs; tuning and
    compiling hold the module's lock, so concurrent first calls tune and compile once.
    """
    values = {v for stage in stages for v in stage.values}
    full, spec = spec, dataclasses.replace(spec, tensors=tuple(t for t in spec.tensors if t.name.id not in values))
    name = spec.name.id
    tuned = set(spec.tuned_params)
    arrays_in = [t for t in spec.inputs if not t.is_scalar]
    keywords = tuple((p.name.id, default_of(p)) for p in spec.params if p.name.id not in tuned)
    keywords += tuple((c.name.id, f'"{c.options[0].id}"') for c in spec.choices)
    inputs = tuple(t.name.id for t in spec.inputs)
    arguments = ", ".join([*inputs, *(f"{k}={k}" for k, _ in keywords)])
    call = f"{name}({arguments})"  # the launcher calling itself with its own arguments
    annotated = [f"{t.name.id}: {_annotation(t)}" for t in spec.inputs]
    kinds = {p.name.id: "int" for p in spec.params} | {c.name.id: "str" for c in spec.choices}
    if keywords:
        annotated += ["*", *(f"{k}: {kinds[k]} = {default}" for k, default in keywords)]
    annotation = (
        "torch.Tensor" if len(spec.outputs) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(spec.outputs))}]"
    )
    head: list[Op] = []  # the inputs' types, dtypes, ranks and device
    sources = dtype_bindings(spec)  # dtype variable -> the input it is read from
    for t in spec.inputs:
        if t.is_scalar:
            kind = "float" if t.dtype.id in m.FLOAT_DTYPES else "int"
            head.append(Line(f'{t.name.id} = _check_scalar("{name}", "{t.name.id}", {t.name.id}, {kind})'))
            continue
        x, rank = t.name.id, 0 if t.zero_dim else len(t.dims)
        dtype, like, test = torch_dtype(t.dtype), "", f"{x}.dtype != {torch_dtype(t.dtype)}"
        source = sources.get(t.dtype.var) if isinstance(t.dtype, m.BoundDtype) else None
        if source == x:  # the input T is read from
            dtype = tuple_text(m.DTYPES[o][1] for o in dtype_options(t.dtype))
            test = f"{x}.dtype not in {dtype}"
        elif source is not None:
            like = f', "{source}"'
        head.append(
            IfBlock(
                f"not isinstance({x}, torch.Tensor) or {test} or {x}.dim() != {rank}",
                "",
                (Line(f'_rt.bad_input("{name}", "{x}", {x}, {dtype}, {rank}{like})'),),
            )
        )
        if source == x:
            head.append(Line(f"{m.as_written(t.dtype)} = {x}.dtype"))  # the variable (T)
    first = arrays_in[0].name.id
    head.append(Line(f"device = {first}.device"))
    others = [f"{t.name.id}.device != device" for t in arrays_in[1:]]
    tensors = ", ".join(f"{t.name.id}={t.name.id}" for t in arrays_in)
    head.append(
        IfBlock(
            " or ".join([*others, f"(not {first}.is_cuda and not _INTERPRET)"]),
            "",
            (Line(f'_rt.bad_device("{name}", {tensors})'),),
        )
    )
    differentiable = [t.name.id for t in arrays_in if isinstance(t.dtype, m.BoundDtype) or t.dtype.id in m.FLOAT_DTYPES]
    if grad is not None and differentiable:
        needs = " or ".join(f"{x}.requires_grad" for x in differentiable)
        switch = ["inplace_backward"] if over else []
        eager = f"{autograd_apply(name)}({', '.join([*inputs, *(k for k, _ in keywords), *switch])})"
        action = Line(f'_rt.no_backward("{name}")') if grad != "route" else Line(f"return {eager}")
        why = ("autograd records this call: through a Function whose backward is the spec's"
               if grad == "route" else "autograd would record this call, and the spec has no backward")
        autograd = [IfBlock(f"torch.is_grad_enabled() and ({needs})", why, (action,))]
    else:
        autograd = []
    device_guard = IfBlock(
        f"{first}.is_cuda and device.index != torch.cuda.current_device()",
        "tensors on another GPU: run there, on its current stream",
        (WithBlock("torch.cuda.device(device)", "", (Line(f"return {call}"),)),),
    )
    middle: list[Op] = []  # block sizes, choices, shapes, outputs
    for block in dict.fromkeys(a.block.id for a in spec.axes() if a.block is not None and a.block.id not in tuned):
        middle.append(
            IfBlock(
                f"type({block}) is not int or {block} < 1 or {block} & ({block} - 1)",
                "",
                (Line(f'_rt.bad_block("{name}", "{block}", {block})'),),
            )
        )
    for choice in spec.choices:
        options = tuple_text(f'"{o.id}"' for o in choice.options)
        message = (
            f"f\"{name}: {choice.name.id} must be one of {', '.join(o.id for o in choice.options)}, "
            f"got {{{choice.name.id}!r}}\""
        )
        middle.append(IfBlock(f"{choice.name.id} not in {options}", "", (Line(f"raise ValueError({message})"),)))
    unpack, shape_checks, sizes, bound = _bind_sizes(spec, name)
    derived_checks, derived_sizes = _derived_sizes(spec, name)
    sizes += derived_sizes
    derived = [f"{size} = {text}" for size, text in derived_sizes]
    middle += [Line(line) for line in unpack]
    for condition, message in shape_checks + derived_checks:
        middle.append(IfBlock(condition, "", (Line(f"raise ValueError({message})"),)))
    middle += [Line(line) for line in derived]
    for condition, message in _index_divisions(spec, name) + _axis_checks(spec, name, bound, rows):
        middle.append(IfBlock(condition, "", (Line(f"raise ValueError({message})"),)))
    def dims(tensor: m.Tensor) -> list[str]:
        return [] if tensor.zero_dim else [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]

    outputs = [(t.name.id, tuple_text(dims(t)), torch_dtype(t.dtype)) for t in spec.outputs]
    # sizes as separate arguments: torch parses them about 2 us faster than a shape tuple
    made = made_outputs(spec, lambda t: ", ".join(dims(t)) or "()")  # over their inputs with inplace=True
    made_new = made_outputs(spec, lambda t: ", ".join(dims(t)) or "()", inplace=False)  # the op's fake: new
    returns = ", ".join(t.name.id for t in spec.outputs)
    extents = {
        d.text if isinstance(d, m.Number) else d.id for t in spec.outputs for d in t.dims if not isinstance(d, m.Number)
    }
    order = (*size_symbols(spec), *(t.name.id for t in spec.inputs if t.is_scalar))  # g over G: G a scalar
    empty = " or ".join(f"{d} == 0" for d in sorted(extents, key=order.index)) or "False"
    nothing = IfBlock(empty, "nothing to compute: no launch", (Line(f"return {returns}"),))
    setup: list[Op] = []  # what the launch passes: strides, whole-axis tiles, descriptors, flags
    descriptors = spec.access_style == "descriptor"
    # Every input's strides are bound once: the launch passes them and the specialization key reads them.
    bound_strides = [t for t in full.arrays if descriptors or t.role == "in" or t.in_place_of is not None]
    for t in bound_strides:  # a 0-dim input: the kernel's one element, at index 0, whatever its stride
        setup.append(Line(f"_{t.name.id}_strides = " + ("(0,)" if t.zero_dim else f"{t.name.id}.stride()")))
    sizes_passed = size_symbols(spec)
    scalars = tuple(t.name.id for t in spec.inputs if t.is_scalar)
    int_scalars = tuple(t.name.id for t in spec.inputs if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES)
    if descriptors:  # the descriptors carry the pointers, shapes and strides
        setup += _descriptor_checks(spec, fallback, kernel)
        setup += _make_descriptors(spec, kernel)
        tail = kernel.tail.descriptors if kernel.tail is not None else ()
        pieces = kernel.pieces.descriptors if kernel.pieces is not None else ()
        groups = [tuple(f"{t.name.id}_desc" for t in spec.arrays) + tuple(f"{t}_piece_desc" for t in pieces)
                  + tuple(f"{t}_tail_desc" for t in tail), sizes_passed, scalars]
        pointers: tuple[str, ...] = ()
        ints = [*sizes_passed, *int_scalars, *(f"*_{t.name.id}_strides" for t in spec.arrays)]
    else:
        strides = tuple(
            ", ".join(_strides(t)) if t not in bound_strides else f"*_{t.name.id}_strides" for t in full.arrays
        )
        groups = [tuple(t.name.id for t in full.arrays), sizes_passed, scalars, strides]
        pointers = tuple(t.name.id for t in full.arrays)
        ints = [*sizes_passed, *int_scalars, *(f"*_{t.name.id}_strides" for t in bound_strides)]
        for t in spec.outputs:  # a new output's strides: products of the later sizes; literal ones never vary
            ints += [] if t.in_place_of is not None else [stride for i, stride in enumerate(_strides(t))
                     if not all(isinstance(d, m.Number) for d in t.dims[i + 1:]) and stride not in ints]
    flags: list[Op] = []  # whole-axis tiles, 64-bit offsets, SM count: the same in the traced body
    for dim, block in kernel.whole_blocks:  # the tile of a whole axis: the extent rounded up to a power of two
        flags.append(Line(f"{block} = 1 << ({dim} - 1).bit_length()"))
    meta = tuple(f"{p.name.id}={p.name.id}" for p in spec.params if p.name.id not in tuned)
    meta += tuple(f"{block}={block}" for _, block in kernel.whole_blocks)
    meta += tuple(f"{c.constexpr}={c.name.id}" for c in spec.choices)
    meta += tuple(f"{flag}={flag}" for _, flag in kernel.transposed)
    for scalar, flag in kernel.sign_flags:  # the kernel's max of x * scalar is max(x) * scalar, or min
        flags.append(Line(f"{flag} = bool({scalar} >= 0)  # the kernel reduces {scalar}-scaled tiles unscaled"))
        meta += (f"{flag}={flag}",)
    if kernel.int64:
        flags.append(Line(f"int64 = {_int64_condition(full)}  # offsets past 2**31 elements"))
        meta += ("INT64_OFFSETS=int64",)
    if spec.persistent or spec.split_tail:
        flags.append(Line("NUM_SMS = _num_sms(device)"))
        meta += ("NUM_SMS=NUM_SMS",)
    if kernel.split is not None:  # the f32 workspace of a split loop's partial sums
        groups[0] = (*groups[0], "partials")
    for finish in kernel.finishes:  # the f32 workspaces of the partials of reductions across programs
        groups[0] = (*groups[0], *finish.workspaces)
    launch = _LaunchArgs(
        groups=tuple(g for g in groups if g),
        meta=meta,
        constexprs=_constexpr_values(full, kernel),
        pointers=pointers,
        ints=tuple(ints),
    )
    fast_path = lower_fast_path(spec, kernel, keywords, launch.groups[0],
                           tuple(a for group in launch.groups[1:] for a in group) + launch.constexprs,
                           differentiable if grad is not None else [], stages)
    without: list[Op] = []  # a Triton without block pointers runs the pointer launcher
    if spec.access_style == "block_ptr":
        without.append(IfBlock("not _BLOCK_POINTERS", "a Triton without block pointers", (Line(f"return {fallback}"),)))
    whole = len(kernel.whole_blocks)  # whole-axis tiles first: a descriptor's block shape may name one
    route: list[Op] = []  # rows longer than one tile holds: the looped kernel (before the outputs are made)
    if rows is not None:
        why = f"rows too long for one tile: {rows.launcher}() loops over them"
        route = [IfBlock(f"{rows.dim} > _WHOLE_LIMIT", why, (Line(f"return {rows.call}"),))]
    staged: list[Op] = [Line(f"{', '.join(stage.values)} = {stage.launcher.call}") for stage in stages]
    if staged:
        staged.insert(0, Comment("values every program uses: kernels of their own compute them first"))
    forcing: list[Op] = []  # config=: the call runs the config it names (the runtime's Tuner.forcing)
    if spec.tune is not None and variant is None and not name.startswith("_"):
        again = ", ".join([*inputs, *(f"{k}={k}" for k, _ in keywords),
                           *(["inplace=inplace"] if spec.in_place else []),
                           *(["inplace_backward=inplace_backward"] if over else [])])
        forcing = [IfBlock("config is not None", "a config the caller names: this call runs it",
                           (Line(f'return _tuner.forcing("{name}", config, lambda: {name}({again}))'),))]
    compiling: list[Op] = []  # torch.compile traces the custom op, never the fast path (dynamo cannot trace it)
    if grad is not None:
        compiling = [IfBlock("torch.compiler.is_compiling()" + (" and not inplace" if spec.in_place else ""),
                             "torch.compile traces the custom op: its fake and its traced launch, not this call's",
                             (Line(f"return op({arguments})"),))]
    body = [*forcing, *compiling, *(fast_path.ops if fast_path else ()), *head, *autograd, device_guard, *middle,
            *route, *made, nothing, *without, *staged, *flags[:whole], *setup, *flags[whole:]]
    body += _launch(full, kernel, name, launch, call, variant, fast_path)
    # under torch.compile a keyword may arrive as a symbolic int; it is a constexpr: make it one
    constant = tuple(Line(f"{p.name.id} = int({p.name.id})") for p in spec.params if p.name.id not in tuned)
    fake = (*constant, *head, *middle, *made_new, Line(f"return {returns}"))
    traced = None
    # torch traces a pointer kernel's launch; a TMA descriptor's it cannot, nor a split loop's sum
    # nor a finish kernel (the parts and the programs depend on the config the autotuner picks)
    if not descriptors and kernel.split is None and not kernel.finishes and not stages:
        traced = (
            *constant,
            Line(f"{returns} = _{name}_fake({arguments})"),
            *(Line(line) for line in (*unpack, *derived)),
            nothing,
            *([IfBlock(f"{rows.dim} > _WHOLE_LIMIT", f"rows too long for one tile: {rows.launcher}()'s kernel",
                       rows.traced)] if rows is not None else []),
            *([Line(f"device = {first}.device")] if spec.persistent or spec.split_tail else []),
            *setup,
            # under torch.compile a whole axis's extent is a symbolic size: int() makes it a constant
            *(Line(f"{block} = 1 << (int({dim}) - 1).bit_length()") for dim, block in kernel.whole_blocks),
            *flags[whole:],
            *_traced_launch(spec, kernel, launch),
        )
    switches = [*(["inplace: bool = False"] if spec.in_place else []),
                *(["inplace_backward: bool = False"] if over else [])]
    if forcing:
        switches.append("config: int | dict | None = None")
    own = [*annotated, *([] if keywords or not switches else ["*"]), *switches]
    return LauncherPlan(
        name=name,
        inputs=inputs,
        keywords=keywords,
        signature=", ".join(annotated),
        own_signature=", ".join(own),
        in_place=bool(spec.in_place),
        annotation=annotation,
        call=call,
        sizes=tuple(sizes),
        outputs=tuple(outputs),
        body=tuple(body),
        tuned=spec.tune is not None,
        num_sms=spec.persistent or bool(spec.split_tail),
        descriptors=descriptors,
        block_pointers=spec.access_style == "block_ptr",
        scalars=any(t.is_scalar for t in spec.inputs),
        blocks=any(a.block is not None and a.block.id not in tuned for a in spec.axes()),
        returns=returns,
        docstring=docstring or _docstring(spec, variant, uses, over),
        fake=fake,
        traced=traced,
        # without block pointers the op runs the pointer launcher, opaque to torch.compile
        op_traced="None" if traced is None else (
            f"_{name}_traced if _BLOCK_POINTERS else None" if spec.access_style == "block_ptr" else f"_{name}_traced"
        ),
    )


def _traced_launch(spec: m.Spec, kernel: KernelPlan, launch: _LaunchArgs) -> list[Op]:
    """The launch as ``torch.compile`` traces it: ``wrap_triton(kernel)[grid](...)``, Triton's
    own call (a tuned kernel through its autotuner, whose configs Inductor then times)."""
    returns = ", ".join(t.name.id for t in spec.outputs)
    grid = f"lambda meta: {_grid(spec, 'meta')}" if spec.tune is not None else _grid(spec)
    return [
        Line(f"grid = {grid}"),
        Line(_call(f"wrap_triton({kernel.name})[grid]", (*launch.groups, launch.meta))),
        Line(f"return {returns}"),
    ]


def _descriptor_checks(spec: m.Spec, fallback: str | None, kernel: KernelPlan) -> list[Op]:
    """Tensor descriptors (TMA) need Hopper or newer, a Triton that has them, and tensors with a
    unit last stride, 16-byte aligned other strides and a 16-byte aligned base; otherwise the
    launcher returns ``fallback``, the same spec through pointers. A column-major 2D input (unit
    first stride, ``b = w.t()``) sets its ``transposed`` flag: its descriptor spans its transpose."""
    ops: list[Op] = [
        IfBlock("not _has_tma(device)", "a GPU or a Triton without TMA descriptors", (Line(f"return {fallback}"),))
    ]
    flags = dict(kernel.transposed)
    for column_major, flag_name in flags.items():
        ops.append(Line(f"{flag_name} = _{column_major}_strides[1] != 1 and _{column_major}_strides[0] == 1"
                        f"  # {column_major} is column-major"))
    # a descriptor's shape must be positive: an empty input (K = 0) runs the pointer kernel
    terms = [f"{d} == 0" for d in dict.fromkeys(d.id for t in spec.arrays for d in t.dims if isinstance(d, m.Name))]
    blocks = dict(kernel.descriptors)
    for t in spec.arrays:
        sizes = {m.DTYPE_BYTES[d] for d in dtype_options(t.dtype)}  # a dtype variable's may differ
        smallest = min(sizes)
        size = sizes.pop() if len(sizes) == 1 else f"{m.as_written(t.dtype)}.itemsize"  # T.itemsize
        strides = f"_{t.name.id}_strides"
        flag = flags.get(t.name.id)
        shape = blocks.get(t.name.id, ())
        if flag is not None:  # rows of whichever layout it has
            terms.append(f"(not {flag} and {strides}[1] != 1)")
            terms.append(f"({strides}[1] if {flag} else {strides}[0]) * {size} % 16")
            first, last = (_smallest_block(spec, b) for b in (shape[0], shape[-1])) if shape else ("", "")
            row = (first if first == last else f"({first} if {flag} else {last})") if shape else None
        else:
            terms.append(f"{strides}[{len(t.dims) - 1}] != 1")
            terms += [f"{strides}[{i}] * {size} % 16" for i in range(len(t.dims) - 1)]
            row = _smallest_block(spec, shape[-1]) if shape else None
        if row is not None and not (row.isdigit() and int(row) * smallest >= 16):
            terms.append(f"{row} * {size} < 16")  # TMA moves rows of 16 bytes or more
        terms.append(f"{t.name.id}.data_ptr() % 16")
    ops.append(IfBlock(" or ".join(terms), "a layout TMA cannot address", (Line(f"return {fallback}"),)))
    return ops


def _smallest_block(spec: m.Spec, block: str) -> str:
    """The smallest value a descriptor block dimension takes: a literal, the least of the tune
    configs' values for a tuned parameter (every config must fit), else the launcher's variable
    (a keyword, or a whole axis's tile)."""
    if block.isdigit() or block not in spec.tuned_params or spec.tune is None:
        return block
    param = next(p for p in spec.params if p.name.id == block)

    def value(config: m.Config) -> int:
        given = config.get(block)
        return int(given.text if given is not None else default_of(param))

    return str(min(value(c) for c in spec.tune.configs))


def _make_descriptors(
    spec: m.Spec, kernel: KernelPlan, tail: bool = False, split: bool = False, piece: bool = False
) -> list[Op]:
    """``a_desc = TensorDescriptor(a, shape, strides, block_shape)`` for every tensor; a tuned
    kernel's block shapes are set by ``_descriptor_blocks``. ``tail``: ``a_tail_desc`` for the
    sub-tiles of the last wave, for every tensor a grid axis tiles, their block shapes set by
    ``_descriptor_blocks`` per config (the autotuner's launch); with ``split``, made with the block
    shape of this launch's split (``tail_m``, ``tail_n``), and only for the tensors whose blocks the
    split divides (the others stay None). ``piece``: ``a_piece_desc`` for the second row piece of
    every tensor tiled along the rows (see :class:`~tilegen.lower.plan.PiecePlan`), block shapes
    set by ``_descriptor_blocks``."""
    ops: list[Op] = []
    tuned = set(spec.tuned_params)
    blocks = dict(kernel.descriptors)
    if piece:
        assert kernel.pieces is not None, "piece descriptors of a kernel without row pieces"
        made = [(t, "piece_desc") for t in spec.arrays if t.name.id in kernel.pieces.descriptors]
    elif tail:
        assert kernel.tail is not None, "tail descriptors of a kernel without split tail"
        made = [(t, "tail_desc") for t in spec.arrays if t.name.id in kernel.tail.descriptors]
    else:
        made = [(t, "desc") for t in spec.arrays]
    divided: dict[str, str] = {}
    if split:  # each grid axis's block divided by the split along it
        assert kernel.tail is not None, "a split of a kernel without split tail"
        (_, block_m), (_, block_n) = kernel.tail.tiles
        divided = {block_m: "tail_m", block_n: "tail_n"}

    def value(block: str) -> str:
        return f'config["{block}"]' if block in tuned else block

    for t, suffix in made:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in t.dims]
        shape = blocks[t.name.id]
        block = ["1"] * len(shape) if suffix != "desc" or any(b in tuned for b in shape) else list(shape)
        if split:
            block = [f"{value(b)} // {divided[b]}" if b in divided else value(b) for b in shape]
        line = (f"{t.name.id}_{suffix} = TensorDescriptor({t.name.id}, [{', '.join(dims)}], "
                f"[*_{t.name.id}_strides], [{', '.join(block)}])")
        flag = dict(kernel.transposed).get(t.name.id)
        op: Op = Line(line)
        if flag is not None:
            strides = f"_{t.name.id}_strides"
            transposed = (f"{t.name.id}_{suffix} = TensorDescriptor({t.name.id}, [{', '.join(reversed(dims))}], "
                          f"[{strides}[1], 1], [{', '.join(reversed(block))}])")
            why = f"the tiles of {t.name.id}.T, read transposed by the kernel"
            op = IfBlock(flag, why, (Line(transposed),), (Line(line),))
        along = [divided[b] for b in dict.fromkeys(shape) if b in divided]
        if split and len(along) == 1:  # tiled along one grid axis: divided where the split divides that axis
            op = IfBlock(f"{along[0]} > 1", f"the split divides {t.name.id}'s blocks", (op,))
        ops.append(op)
    return ops


@dataclass(frozen=True)
class _LaunchArgs:
    """The kernel's arguments as launcher text.

    ``groups`` and ``meta`` are the JIT call's positional groups and constexpr keywords;
    ``constexprs`` the constexpr values in signature order (the compiled kernel's launcher takes
    every argument by position); ``pointers`` and ``ints`` what Triton specializes on.
    """

    groups: tuple[tuple[str, ...], ...]
    meta: tuple[str, ...]
    constexprs: tuple[str, ...]
    pointers: tuple[str, ...]
    ints: tuple[str, ...]


def _constexpr_values(spec: m.Spec, kernel: KernelPlan) -> tuple[str, ...]:
    """The value of every constexpr parameter, in the kernel's signature order: tuned ones from
    the remembered ``config``, choices from their keyword, INT64_OFFSETS from ``int64``."""
    tuned = set(spec.tuned_params)
    choices = {c.constexpr: c.name.id for c in spec.choices}
    values: list[str] = []
    for group in kernel.param_groups:
        for param in group:
            if not param.constexpr:
                continue
            if param.name in tuned or param.name == LOOP_STAGES:
                values.append(f'config["{param.name}"]')
            elif param.name == INT64_FLAG:
                values.append("int64")
            else:
                values.append(choices.get(param.name, param.name))
    return tuple(values)


def _specialization_key(spec: m.Spec, launch: _LaunchArgs, variant: str | None = None, tail_desc: bool = False) -> str:
    """The compiled-kernel cache key: what Triton's JIT specializes a kernel on (the current
    device, the pointers' 16-byte alignment, ``_int_class`` of every integer, the constexpr
    values), plus the tune config; one group of terms per line."""
    first = ["device_index"] + (["config_index"] if spec.tune is not None else [])
    first += [f'"{variant}"'] if variant else []  # a second launcher of the spec shares _COMPILED
    first += [v.name.id for v in spec.dtype_vars]  # the dtypes the kernel is specialized for
    lines = [", ".join(first)]
    if launch.pointers:
        lines.append(", ".join(f"{p}.data_ptr() % 16" for p in launch.pointers))
    if launch.ints:
        lines.append(f"*map(_int_class, {tuple_text(launch.ints)})")
    constexprs = [c for c in launch.constexprs if not c.startswith("config[")]
    if constexprs:
        lines.append(", ".join(constexprs))
    if tail_desc:  # the split of the last wave, which the kernel reads from its tail descriptors
        lines.append("tail_m, tail_n")
    return "\n".join(["key = ("] + [f"    {line}," for line in lines] + [")"])


def _launch(
    spec: m.Spec,
    kernel: KernelPlan,
    name: str,
    launch: _LaunchArgs,
    call: str,
    variant: str | None = None,
    fast: FastPath | None = None,
) -> list[Op]:
    """The launch. Under the interpreter: Triton's JIT call. On the GPU: the compiled kernel for
    this specialization, made once by ``_rt.compile_launch`` (Triton's ``warmup``: its compile and
    cache) and launched by the runtime's ``launcher`` (the fused-softmax tutorial's
    ``compiled[grid](*args)`` without its per-call lookups), which skips the JIT's per-call
    binding and cache lookup. A tuned kernel runs the autotuner on the first call per device and
    sizes (``_rt.autotune``; or takes the config from tilegen's cache on disk), settles the
    autotuner's near ties by timing ``call`` (this launcher's call of itself) at each
    (``_settle_ties``), and after that its remembered config is one more part of the key. With
    ``fast`` (:mod:`tilegen.lower.fast`), the launch is kept for the launcher's fast path."""
    returns = ", ".join(t.name.id for t in spec.outputs)
    jit = kernel.name
    ops: list[Op] = []
    if spec.tune is not None:
        flags = [flag for _, flag in kernel.transposed]  # each operand layout tunes on its own
        dtypes = [v.name.id for v in spec.dtype_vars]  # and each dtype
        # Triton's autotuner keys its own cache on tensor dtypes, which a descriptor does not
        # show: a dtype variable's other dtypes must not take a config tuned for the first
        retune = [Line(f"{jit}.cache.clear()  # tilegen's tune key tells the dtypes apart; Triton's cannot")] if (
            dtypes and kernel.descriptors) else []
        key = tuple_text(
            ["device", *([f'"{variant}"'] if variant else []), *(spec.tune.key_text(k.id) for k in spec.tune.key),
             *flags, *dtypes]
        )
        tune_launch: list[Op] = [Line(f"grid = lambda meta: {_grid(spec, 'meta')}")]
        summed: list[Op] = []
        if kernel.split is not None:  # a workspace for the config that splits the most; the best one's sum
            assert kernel.tune is not None, "a tuned spec's kernel without its configs"
            tune_launch = [
                Line(f"parts = max(_split_grid({_split_args(spec, kernel, 'config.kwargs')}, device)[1] "
                     f"for config in {kernel.tune.name})  # the most parts any config runs"),
                _workspace(kernel),
                Line(f"grid = lambda meta: _split_grid({_split_args(spec, kernel, 'meta')}, device)[0]"),
            ]
            summed = [
                Line(f"config = {jit}.best_config.kwargs"),
                Line(f"_, parts = _split_grid({_split_args(spec, kernel, 'config')}, device)"),
                _sum(kernel),
            ]
        if kernel.tail is not None and kernel.descriptors:  # each config's split: the pre_hook sets their blocks
            tune_launch = [*_make_descriptors(spec, kernel, tail=True), *tune_launch]
        if kernel.pieces is not None:  # each config's second row piece: the pre_hook sets their blocks
            tune_launch = [*_make_descriptors(spec, kernel, piece=True), *tune_launch]
        tune_launch += _workspaces(spec, kernel, smallest=True)
        tune_launch.append(Line(_call("_rt.autotune", ((jit, "grid"), *launch.groups, launch.meta))))
        ops += [
            Line(f"tune_key = {key}"),
            Line("config_index = _TUNED.get(tune_key)"),
            *([IfBlock("config_index is None and inplace",
                       "tuned with new outputs first: the trials must not read what they overwrote",
                       (Line(call), Line("config_index = _TUNED.get(tune_key)")))]
              if spec.in_place else []),
            IfBlock(
                "config_index is None",
                "first call with these sizes on this device (one thread at a time)",
                (
                    WithBlock(
                        "_tuner.lock",
                        "",
                        (
                            Line(f'config_index = _tuned_index("{name}", tune_key)'),
                            IfBlock(
                                "config_index is None",
                                "tune, and remember the choice on disk",
                                (
                                    *retune,
                                    *tune_launch,
                                    *summed,
                                    Line(f"_remember(tune_key, _settle_ties(tune_key, {jit}, lambda: {call}))"),
                                    # the partials of the config picked (the last run's may be another's)
                                    Line(f"return {call if kernel.finishes else returns}"),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
            Line("config = _CONFIGS[config_index].kwargs"),
        ]
        jit = f"{kernel.name}.fn"
    if kernel.pieces is not None:
        ops += _piece_descriptors(spec, kernel)
    if kernel.descriptors and spec.tune is not None:
        ops.append(_set_blocks(spec, kernel))
    if kernel.descriptors and kernel.tail is not None:
        ops += _tail_descriptors(spec, kernel)
    summed = _finished(kernel)
    if kernel.split is None:
        ops.append(Line(f"grid = {_grid(spec, 'config')}"))
    else:  # the loop's parts, and their workspace
        ops += [Line(f"grid, parts = _split_grid({_split_args(spec, kernel, 'config')}, device)"), _workspace(kernel)]
        summed = [_sum(kernel)]
    ops += _workspaces(spec, kernel)
    config = (("**config",) if spec.tune is not None else ())
    keep = fast.keep if fast is not None else (lambda launcher, index: [])  # the launch kept for the fast path

    ops.append(
        IfBlock(
            "_INTERPRET",
            "Triton's interpreter runs the kernel on the CPU",
            (
                Line(_call(f"{jit}[grid]", (*launch.groups, (*launch.meta, *config)))),
                *summed,
                *keep(f"_rt.interpreted({jit})", "None"),
                Line(f"return {returns}"),
            ),
        )
    )
    tail_desc = kernel.tail is not None and bool(kernel.tail.carrier)
    options = ("**_CONFIGS[config_index].all_kwargs()",) if spec.tune is not None else ()
    ops += [
        Comment("the compiled kernel for Triton's specialization of these arguments (compiled on a new one)"),
        Line("device_index = device.index"),
        Line(_specialization_key(spec, launch, variant, tail_desc)),
        Line(_call("launch = _COMPILED.get(key) or _rt.compile_launch",
                   (("_COMPILED", "key", jit, "grid"), *launch.groups, (*launch.meta, *options)))),
        Line(_call("launch", (("grid", "device_index"), *launch.groups, launch.constexprs))),
        *(_finished_compiled(kernel) if kernel.finishes else summed),
        *keep("launch", "device_index"),
        Line(f"return {returns}"),
    ]
    return ops


def _set_blocks(spec: m.Spec, kernel: KernelPlan) -> Line:
    """``_descriptor_blocks({...})`` before a direct launch: the descriptors' block shapes for the
    remembered config (its tail descriptors, if any, are made with theirs)."""
    tuned = set(spec.tuned_params)
    shapes = [b for _, shape in kernel.descriptors for b in shape]
    fixed = dict.fromkeys(b for b in shapes if b not in tuned and not b.isdigit())  # not the 1s of index axes
    nargs = [f'"{t}_desc": {t}_desc' for t, _ in kernel.descriptors] + [f'"{b}": {b}' for b in fixed]
    nargs += [f'"{t}_piece_desc": {t}_piece_desc' for t in (kernel.pieces.descriptors if kernel.pieces else ())]
    nargs += [f'"{flag}": {flag}' for _, flag in kernel.transposed]
    config = ", **config" if spec.tune is not None else ""
    return Line(f"_descriptor_blocks({{{', '.join(nargs)}{config}}})")


def _piece_descriptors(spec: m.Spec, kernel: KernelPlan) -> list[Op]:
    """The second row piece's descriptors for this launch: None where the config's block of the
    rows is a power of two (one piece: the kernel reads none), else made for ``_descriptor_blocks``
    to give them the second piece's block shape."""
    assert kernel.pieces is not None, "a kernel without row pieces"
    block = f'config["{kernel.pieces.block}"]'
    return [
        Line(" = ".join(f"{t}_piece_desc" for t in kernel.pieces.descriptors) + " = None  # one piece: none"),
        IfBlock(
            f"{block} & ({block} - 1)",
            f"{kernel.pieces.block} is a sum of two powers of two: the second row piece's descriptors",
            tuple(_make_descriptors(spec, kernel, piece=True)),
        ),
    ]


def _tail_descriptors(spec: m.Spec, kernel: KernelPlan) -> list[Op]:
    """The split of the last wave for this launch, and the tail descriptors it needs: none where
    it does not split (the kernel takes None, and compiles its whole-tile call only), else those of
    the tensors whose block shape the split divides. Each descriptor costs host time per launch
    (made, then encoded by Triton's launcher): none is made that the launch does not use."""
    tuned = set(spec.tuned_params)
    assert kernel.tail is not None, "a kernel without split tail"
    (dim_m, block_m), (dim_n, block_n) = kernel.tail.tiles
    blocks = [f'config["{b}"]' if b in tuned else b for b in (block_m, block_n)]
    tails = kernel.tail.descriptors
    return [
        Line(f"_, tail_m, tail_n = _tail_split({dim_m}, {dim_n}, {', '.join(blocks)}, NUM_SMS)"),
        Line(" = ".join(f"{t}_tail_desc" for t in tails) + " = None  # no split: the kernel takes none"),
        IfBlock(
            "tail_m * tail_n > 1",
            "split tail: the sub-tiles' descriptors of the tensors whose blocks the split divides",
            tuple(_make_descriptors(spec, kernel, tail=True, split=True)),
        ),
    ]


def _split_args(spec: m.Spec, kernel: KernelPlan, config: str) -> str:
    """The sizes and block sizes ``_split_grid`` takes, tuned block sizes read from the dict named
    ``config``."""
    tuned = set(spec.tuned_params)
    assert kernel.split is not None, "a kernel without a split loop"
    dims = (*kernel.split.tiles, kernel.split.loop)
    blocks = [f'{config}["{b}"]' if b in tuned else b for _, b in dims]
    return ", ".join([*(d for d, _ in dims), *blocks])


def _workspaces(spec: m.Spec, kernel: KernelPlan, smallest: bool = False) -> list[Op]:
    """The f32 workspaces of the partials of each reduction across programs: one row per
    program along the reduced axes (counted with ``config``'s blocks, or with ``smallest``, the
    least block of any config: room for every config the autotuner runs)."""
    tuned = set(spec.tuned_params)
    ops: list[Op] = []
    for finish in kernel.finishes:
        counts: list[str] = []
        for dim, block in finish.programs:
            if block is not None and block in tuned:
                block = _smallest_block(spec, block) if smallest else f'config["{block}"]'
            counts.append(dim if block is None else f"({cdiv(dim, block)})")
        along = ", ".join(d for d, _ in finish.programs)
        if spec.persistent:  # at most one program per SM, each storing its one partial
            ops.append(Line(f"{finish.count} = min(NUM_SMS, {' * '.join(counts)})  # programs walking {along}"))
        else:
            ops.append(Line(f"{finish.count} = {' * '.join(counts)}  # programs along {along}"))
        for name in finish.workspaces:
            ops.append(Line(f"{name} = torch.empty({finish.size}, device=device, dtype=torch.float32)"))
    return ops


def _finished(kernel: KernelPlan) -> list[Op]:
    """The finish kernels' launches through Triton's JIT (the interpreter's): each merges its
    workspaces' partials into its output."""
    return [Line(f"{f.kernel.name}[{f.grid}]({', '.join(f.args)})") for f in kernel.finishes]


def _finished_compiled(kernel: KernelPlan) -> list[Op]:
    """The finish kernels' launches on the GPU: each compiled once per specialization (as the
    spec's kernel is: ``_rt.compile_launch``) and launched directly, without the JIT's per-call
    binding (about 15 us a call)."""
    ops: list[Op] = []
    for finish in kernel.finishes:
        name = f"{finish.output}_finish"
        pointers, rest, ints, constexprs = launch_args(finish)
        key = ", ".join([f'"{finish.kernel.name}"', "device_index", *(f"{p}.dtype" for p in pointers),
                         f"*map(_int_class, {tuple_text(ints)})", *constexprs])  # the pointers' dtypes: Triton's too
        assert finish.grid.endswith(",)"), "a finish kernel's grid is one axis"
        ops += [
            Line(f"{name}_grid = {finish.grid[:-2]}, 1, 1)  # the launch takes three sizes"),
            Line(f"{name}_key = ({key})"),
            Line(f"{name} = _COMPILED.get({name}_key) or _rt.compile_launch(_COMPILED, {name}_key, "
                 f"{finish.kernel.name}, {name}_grid, {', '.join(finish.args)})"),
            Line(f"{name}({name}_grid, device_index, {', '.join([*pointers, *rest])})"),
        ]
    return ops


def _workspace(kernel: KernelPlan) -> Line:
    """The f32 workspace of the partial sums: ``parts`` times the output (an empty one for one part)."""
    assert kernel.split is not None, "a kernel without a split loop"
    size = " * ".join(d for d, _ in kernel.split.tiles)
    workspace = f"torch.empty(parts * {size}, device=device, dtype=torch.float32)"
    return Line(f"partials = {workspace} if parts > 1 else _no_partials(device)")


def _sum(kernel: KernelPlan) -> IfBlock:
    """The partial sums added up into the output, where the loop ran in parts."""
    assert kernel.split is not None, "a kernel without a split loop"
    return IfBlock(
        "parts > 1",
        "partial sums over parts of the loop: added up",
        (Line(f"_sum_partials(partials, {kernel.split.output}, parts)"),),
    )


def lower_descriptor_blocks(kernel: KernelPlan) -> HookPlan:
    """``_descriptor_blocks(nargs)``, the autotune ``pre_hook`` of a tuned kernel that takes TMA
    descriptors (``kernel``): it gives each descriptor in ``nargs`` the block shape of the config
    about to run. With row pieces (:class:`~tilegen.lower.plan.PiecePlan`) the first descriptor of
    a tensor tiled along the rows takes the first piece's rows and its ``_piece_desc`` the
    second's (where there is one); with ``split tail`` each ``_tail_desc`` takes the sub-tiles'
    block shape (``_tail_split`` of the call's sizes), unless the call has none (a direct launch
    makes its tail descriptors with their blocks). A transposed input's block shape is reversed
    where its flag is set."""
    flags = dict(kernel.transposed)
    pieces, tail = kernel.pieces, kernel.tail
    block_m = block_n = None
    if tail is not None:
        (dim_m, block_m), (dim_n, block_n) = tail.tiles

    def item(block: str, suffix: str) -> str:
        """The text of one block dimension for descriptors ``<tensor>_<suffix>``."""
        if block.isdigit():
            return block
        if pieces is not None and block == pieces.block:
            return {"piece_desc": "second", "tail_desc": "first // tail_m"}.get(suffix, "first")
        divided = {block_m: "tail_m", block_n: "tail_n"}.get(block) if suffix == "tail_desc" else None
        return f'nargs["{block}"] // {divided}' if divided else f'nargs["{block}"]'

    def assignments(suffix: str, tensors: tuple[str, ...] | None) -> tuple[Op, ...]:
        lines: list[Op] = []
        for tensor, shape in kernel.descriptors:
            if tensors is not None and tensor not in tensors:
                continue
            items = [item(b, suffix) for b in shape]
            block = f"[{', '.join(items)}]"
            if tensor in flags:
                block = f'[{", ".join(reversed(items))}] if nargs["{flags[tensor]}"] else {block}'
            lines.append(Line(f'nargs["{tensor}_{suffix}"].block_shape = {block}'))
        return tuple(lines)

    body: list[Op] = []
    doc = "Autotune pre_hook: give each tensor descriptor the block shape of the config about to run"
    if pieces is not None:
        body.append(Line(f'first, second = _pieces(nargs["{pieces.block}"])'))
        doc += (f" (the\nfirst row piece's rows where {pieces.block} is two pieces, and the second piece's to each "
                "_piece_desc: see _pieces)")
    body += assignments("desc", None)
    if pieces is not None:
        body.append(IfBlock(f'nargs.get("{pieces.descriptors[0]}_piece_desc") is not None',
                            "the second row piece's (None: one piece)", assignments("piece_desc", pieces.descriptors)))
    if tail is not None:
        doc += ", and each tail\ndescriptor the block shape of the sub-tiles of the last partial wave (see _tail_split)"
        body += [
            IfBlock(f'nargs.get("{tail.carrier}_tail_desc") is None',
                    "a direct launch: it makes its tail descriptors with their blocks", (Line("return"),)),
            Line(f'_, tail_m, tail_n = _tail_split(nargs["{dim_m}"], nargs["{dim_n}"], nargs["{block_m}"], '
                 f'nargs["{block_n}"], nargs["NUM_SMS"])'),
            *assignments("tail_desc", tail.descriptors),
        ]
    return HookPlan(docstring=doc + ".", body=tuple(body))
