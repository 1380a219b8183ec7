"""Declaration rules: the kernel's name, dtype variables, tensors (dtypes, shapes, input
ranges), dimensions, block parameters, the grid and its axes, swizzle, tune configs (through
:mod:`tilegen.check.tuning`), choices and the access style. Each function reports to the
:class:`~tilegen.check.state.CheckState` it is given and raises nothing.
"""

from __future__ import annotations

import keyword

from tilegen import model as m
from tilegen.check.state import KEYWORDS, MIN_DOT_TILE, RESERVED, CheckState, Scope, is_power_of_two, is_two_pieces
from tilegen.check.tuning import check_tune
from tilegen.dtypes import DTYPE_LIMITS, integer_value, is_float
from tilegen.functions import CHOICE_OPTIONS
from tilegen.spec_text import expr_text, extent_text


def check_dtype(state: CheckState, dtype: m.Name) -> None:
    """A dtype written in the spec (a tensor's, a tile declaration's) is one the language has."""
    if dtype.id not in m.DTYPES:
        known = ", ".join(m.DTYPES)
        state.errors.error(f"unknown dtype '{dtype.id}'; expected one of {known}", dtype.span)


def check_sample(state: CheckState, tensor: m.Tensor, sample: tuple[m.Number, m.Number]) -> None:
    """``in x: f32[N] in [low, high]`` (``sample``, the tensor's), the range ``tilegen run`` draws an
    input from: an input's, not empty, of values of the tensor's dtype (integers for an integer dtype)."""
    low, high = sample
    name, dtype = tensor.name.id, tensor.dtype.id
    if tensor.role != "in":
        state.errors.error(
            f"'{name}' is an output; a range (`in [low, high]`) says how `tilegen run` draws an input, "
            "so only 'in' declarations take one",
            low.span,
        )
        return
    limits = DTYPE_LIMITS.get(dtype)
    if limits is None:
        return  # not a dtype: check_dtype says so
    for bound in (low, high):
        if isinstance(limits, tuple):
            value = integer_value(bound)
            if value is None:
                state.errors.error(f"'{name}' is {dtype}: its range takes integers, not {bound.text}", bound.span)
                return
            if not limits[0] <= value <= limits[1]:
                state.errors.error(
                    f"'{name}' is {dtype}, which holds {limits[0]} to {limits[1]}: {bound.text} is outside",
                    bound.span,
                )
                return
        elif not abs(bound.value) <= limits:
            state.errors.error(
                f"'{name}' is {dtype}, whose largest value is {limits:.6g}: {bound.text} is outside", bound.span
            )
            return
    exact_low, exact_high = integer_value(low), integer_value(high)
    if exact_low > exact_high if exact_low is not None and exact_high is not None else low.value > high.value:
        message = f"the range [{low.text}, {high.text}] is empty: {low.text} is above {high.text}"
        state.errors.error(message, low.span)


def check_dtype_var(state: CheckState, var: m.DtypeVar) -> None:
    """``dtype T in f16, bf16``: a new name standing for two or more distinct float dtypes,
    which the launcher can read off an input tensor; or, where no input is typed with it, which
    the caller chooses (a keyword) for the outputs typed with it. An option may name an earlier
    variable, standing for its dtype in the call (``dtype G in T, f32``)."""
    spec = state.spec
    state.define(var.name, "dtype variable")
    earlier = {v.name.id for v in spec.dtype_vars[:spec.dtype_vars.index(var)]}
    seen: set[str] = set()
    for option in var.options:
        if option.id in earlier:  # G in T, f32: whatever T is in the call, or f32
            pass
        elif option.id in {v.name.id for v in spec.dtype_vars}:
            state.errors.error(
                f"'{option.id}' names a dtype variable declared after '{var.name.id}'; an option may name "
                "an earlier one",
                option.span,
            )
        elif option.id not in m.FLOAT_DTYPES:
            floats = ", ".join(d for d in m.DTYPES if d in m.FLOAT_DTYPES)
            state.errors.error(
                f"dtype variable '{var.name.id}' may stand for float dtypes ({floats}), not '{option.id}'",
                option.span,
            )
        elif option.id in seen:
            state.errors.error(f"'{option.id}' is listed twice for dtype variable '{var.name.id}'", option.span)
        seen.add(option.id)
    if len(var.options) < 2:
        state.errors.error(
            f"dtype variable '{var.name.id}' needs two or more dtypes; for one, write it in place of "
            f"'{var.name.id}'",
            var.span,
        )
    typed = [t for t in spec.tensors if not t.is_scalar and m.as_written(t.dtype) == var.name.id]
    if not typed:
        state.errors.error(
            f"no input or output tensor is typed '{var.name.id}'; the launcher takes '{var.name.id}' from an "
            f"input's dtype (in a: {var.name.id}[...]), or the caller chooses it for the outputs typed with it "
            f"(out y: {var.name.id}[...])",
            var.name.span,
        )


def check_extent(state: CheckState, axis: m.Axis, extent: m.Expr) -> None:
    """A derived extent (``extent``, the axis's), ``c over C / G``: ``+ - * /``, ``minimum`` and
    ``maximum`` of sizes of the tensors' shapes, integer scalar inputs and positive integers (a
    quotient alone divides exactly, which the launcher checks; elsewhere ``/`` rounds down)."""
    scalars = {t.name.id for t in state.spec.inputs if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES}

    def visit(e: m.Expr) -> None:
        if isinstance(e, m.BinOp) and e.op in ("+", "-", "*", "/"):
            visit(e.left)
            visit(e.right)
        elif m.is_extent_call(e):  # minimum(A, B), maximum(A, B)
            for arg in e.args:
                visit(arg)
        elif isinstance(e, m.Ref) and (e.name.id in state.tensor_dims or e.name.id in scalars):
            pass
        elif isinstance(e, m.Number) and e.is_int and e.value > 0:
            pass
        else:
            state.errors.error(
                f"the extent of '{axis.name.id}' is arithmetic (+ - * /, minimum, maximum) of sizes of the tensors' "
                "shapes, "
                "integer scalar inputs and positive integers",
                e.span,
            )

    visit(extent)


def check_axis_decl(state: CheckState, axis: m.Axis, what: str, scope: Scope | None = None) -> None:
    """A grid axis or (``what`` = "loop axis", in ``scope``) a loop's axis: a new name (a later
    loop may reuse an ended loop's, over the same dimension), over a dimension of some tensor,
    tiled by a declared block parameter whose every value is a power of two (``unmasked`` and
    ``wrapped`` need one). A flat grid's first axis may take a sum of two powers of two, kept in
    ``state.pieced`` for :func:`tilegen.check.schedule.check_pieces`. Loop axes need a block and
    cannot wrap."""
    earlier = state.loop_axes.get(axis.name.id)
    if what == "loop axis" and earlier is not None and scope is not None and axis.name.id not in scope.axes:
        # a later loop may take an ended loop's axis name, over the same dimension
        if earlier.dim.id != axis.dim.id:
            state.errors.error(
                f"loop axis '{axis.name.id}' was over '{extent_text(earlier)}' (line {earlier.span.line}); "
                f"a later loop may reuse the name only over the same dimension",
                axis.dim.span,
            )
    else:
        state.define(axis.name, what)
    if what == "loop axis":
        state.loop_axes.setdefault(axis.name.id, axis)
    literal = m.Number(axis.dim.id, axis.dim.span) if axis.literal else None  # k over 4
    if axis.extent is not None:
        check_extent(state, axis, axis.extent)
    elif literal is not None and not (literal.is_int and literal.value >= 1):
        state.errors.error(f"the extent of '{axis.name.id}' must be a positive integer, not {literal.text}",
                           axis.dim.span)
    elif literal is None and axis.dim.id not in state.dims:
        state.errors.error(
            f"{what} '{axis.name.id}' is over '{axis.dim.id}', which is not a dimension of any tensor",
            axis.dim.span,
        )
    if what == "loop axis" and axis.bounds == "whole":
        state.errors.error(
            f"'whole' is for grid axes; a loop walks all of its dimension: "
            f"'for {axis.name.id} over {extent_text(axis)} by B'",
            axis.span,
        )
        return
    if axis.block is None and axis.bounds in ("unmasked", "wrapped"):  # `by B` left out
        state.errors.error(
            f"'{axis.bounds}' is for tiled axes: '{axis.name.id} over {extent_text(axis)} by B {axis.bounds}'",
            axis.span,
        )
        return
    block = axis.block or axis.chunk  # a whole axis walked in tiles has a chunk
    if block is None:
        return
    if axis.bounds == "wrapped" and what == "loop axis":
        state.errors.error("only grid axes can be 'wrapped'; a loop's tail is masked", axis.span)
    param = state.params.get(block.id)
    if param is None:
        state.errors.error(f"unknown block size '{block.id}'; declare it with 'block {block.id} = ...'", block.span)
        return
    rows = state.spec.flat and what == "grid axis" and axis is state.spec.grid[0]
    for value in state.param_values(param.name.id):
        if is_power_of_two(int(value.text)):
            continue
        if rows and is_two_pieces(int(value.text)):  # see check_pieces
            state.pieced.setdefault(param.name.id, []).append(value)
            continue
        state.errors.error(
            f"block size '{param.name.id}' = {value.text} is not a power of two"
            + (f" or a sum of two each {MIN_DOT_TILE} or more (192 = 128 + 64)" if rows else ""),
            value.span,
        )

def check_declarations(state: CheckState) -> dict[str, m.Axis]:
    """Check every declaration, in the order of the diagnostics: the kernel's name, dtype
    variables, tensors, dimensions, block parameters, that there are outputs and shaped inputs,
    the grid, swizzle, tune configs, choices and the access style. Returns the grid's axes by
    name (swizzle aliases included): the axes in scope at the top of the body."""
    spec = state.spec
    # The kernel name lives at module level (``<name>``, ``<name>_kernel``), apart from the
    # kernel's own names, so it only has to avoid reserved and private names.
    # A kernel may share a language word's name (kernel swizzle), not a Python keyword's.
    name = spec.name.id
    if name in RESERVED - KEYWORDS or keyword.iskeyword(name) or name.startswith(("_", "apply_")):
        state.errors.error(f"kernel name '{spec.name.id}' is reserved; choose another name", spec.name.span)
    for var in spec.dtype_vars:
        check_dtype_var(state, var)
    for tensor in spec.tensors:
        check_tensor(state, tensor)
    for dim in sorted(state.tensor_dims):
        span = next(d.span for t in spec.tensors for d in t.dims if isinstance(d, m.Name) and d.id == dim)
        state.define(m.Name(dim, span), "dimension")
    check_derived_names(state)
    for dim, _ in spec.derived:  # the generated code's name of a derived extent (C_over_G)
        if dim not in state.tensor_dims:
            state.define(next(a.dim for a in spec.axes() if a.dim.id == dim), "dimension")
    for param in spec.params:
        check_param(state, param)
    if not spec.outputs:
        state.errors.error("the kernel has no 'out' tensor", spec.name.span)
    if not any(not t.is_scalar for t in spec.inputs):
        state.errors.error(
            "the kernel has no 'in' tensor with a shape; outputs are made on the inputs' device",
            spec.name.span,
        )
    axes = check_grid(state)
    if spec.swizzle is not None:
        check_swizzle(state, spec.swizzle, axes)
    if spec.tune is not None:
        check_tune(state, spec.tune)
    for choice in spec.choices:
        check_choice(state, choice)
    if spec.access is not None:
        check_access(state, spec.access)
    return axes


def check_derived_names(state: CheckState) -> None:
    """Each derived extent's size symbol (:func:`~tilegen.model.derived_name`: ``C_over_G``; for a
    long one ``C_KD_KH_KW``, a product's factors, or ``H_out``) names one extent, and no dimension an
    input declares by that name."""
    spec = state.spec
    written = [(a.dim, a.extent) for a in spec.axes() if a.extent is not None]
    written += [(d, e) for t in spec.tensors for (name, e) in t.extents for d in t.dims
                if isinstance(d, m.Name) and d.id == name]
    first: dict[str, m.Expr] = {}
    declared = {d.id for t in spec.inputs for d in t.dims if isinstance(d, m.Name)}
    declared -= {name for t in spec.inputs for name, _ in t.extents}
    for dim, extent in written:
        earlier = first.setdefault(dim.id, extent)
        if m.expr_key(earlier) != m.expr_key(extent):
            state.errors.error(f"the extents {expr_text(earlier)} and {expr_text(extent)} are both named '{dim.id}' "
                               "in the generated code; write one of them with another first size", extent.span)
        elif dim.id in declared:
            state.errors.error(f"the extent {expr_text(extent)} is named '{dim.id}' in the generated code, which is a "
                               "dimension of an input: rename that dimension", extent.span)


def check_tensor(state: CheckState, tensor: m.Tensor) -> None:
    """A tensor declaration: a new name, a known dtype, a shape (0-dim tensors and shapeless
    outputs are refused), an f32, f64 or integer dtype for a scalar, positive literal dimensions, and an input
    range (:func:`check_sample`) where one is given."""
    state.define(tensor.name, "tensor")
    check_dtype(state, tensor.dtype)
    if tensor.is_scalar and tensor.role == "out":
        state.errors.error(
            f"output '{tensor.name.id}' needs a shape; only inputs can be scalars", tensor.name.span
        )
    if tensor.is_scalar and tensor.dtype.id in ("f16", "bf16"):
        # a Python number reaches a kernel as f32 or f64 (a typed argument); torch rounds it to a
        # 16-bit tensor's dtype where they meet
        state.errors.error(
            f"scalar '{tensor.name.id}' is {tensor.dtype.id}, but a kernel takes a Python number as f32 or f64; "
            "declare it f32",
            tensor.dtype.span,
        )
    for dim in tensor.dims:
        if isinstance(dim, m.Number) and (not dim.is_int or int(dim.text) < 1):
            state.errors.error("a literal dimension must be a positive integer", dim.span)
        scalar = state.spec.tensor(dim.id) if isinstance(dim, m.Name) else None
        if tensor.role == "in" and scalar is not None and scalar.is_scalar:  # an output's may be: y: f32[B, G]
            state.errors.error(f"'{scalar.name.id}' is a scalar input; an input's shape gives sizes of its own, "
                               "so name this dimension otherwise", dim.span)
        if isinstance(dim, m.Name) and dim.id in dict(tensor.extents):
            check_dim_extent(state, tensor, dict(tensor.extents)[dim.id])
            continue
        named = {name for t in state.spec.outputs for name, _ in t.extents}  # another output's H_out = ...
        if (tensor.role == "out" and isinstance(dim, m.Name) and dim.id not in _given_sizes(state.spec)
                and dim.id not in named):
            what = "a float scalar input" if scalar is not None and scalar.is_scalar else "given by no input"
            state.errors.error(
                f"output '{tensor.name.id}' has dimension '{dim.id}', which is {what}: the launcher makes "
                f"outputs from the sizes of its inputs, so name a dimension of an input tensor, or take it as "
                f"an integer scalar input ('in {dim.id}: i32')",
                dim.span,
            )
    if tensor.sample is not None:
        check_sample(state, tensor, tensor.sample)
    if tensor.initial is not None:
        check_initial(state, tensor, tensor.initial)
    if tensor.packed_span is not None:
        check_packed(state, tensor, tensor.packed_span)


def check_packed(state: CheckState, tensor: m.Tensor, span: m.Span) -> None:
    """``in weight: T[O, C, KH, KW] packed [KH, KW, O, C]``: an input tensor (not a scalar, not one an
    output is written over), each of whose dimensions is a size named once in its shape and once in
    the order."""
    name = tensor.name.id
    if tensor.role != "in" or tensor.is_scalar:
        what = "an output" if tensor.role == "out" else "a scalar"
        state.errors.error(f"'{name}' is {what}; only an input tensor can be packed (the launcher copies it "
                           "into that memory order before the launch)", span)
        return
    for out in state.spec.outputs:
        if out.in_place_of is not None and out.in_place_of.id == name:
            state.errors.error(f"'{out.name.id}' is written in place of '{name}', which is packed (a copy): "
                               "drop one of them", span)
    shape = [d.id for d in tensor.dims if isinstance(d, m.Name)]
    if len(shape) != len(tensor.dims) or len(set(shape)) != len(shape):
        state.errors.error(f"'{name}' is packed, so each of its dimensions must be a size named once in its "
                           f"shape, to be named in the order", span)
        return
    order = [n.id for n in tensor.packed]
    for n in tensor.packed:
        if n.id not in shape:
            state.errors.error(f"'{n.id}' is not a dimension of '{name}' ({', '.join(shape)})", n.span)
        elif order.count(n.id) > 1:
            state.errors.error(f"'{n.id}' is named twice in the order '{name}' is packed in", n.span)
    missing = [d for d in shape if d not in order]
    if missing:
        state.errors.error(f"the order '{name}' is packed in leaves out {', '.join(repr(d) for d in missing)}: "
                           f"name each of its {len(shape)} dimensions once", span)


def check_dim_extent(state: CheckState, tensor: m.Tensor, extent: m.Expr) -> None:
    """``out y: f32[B1 - 1, D]``: an output's dimension written as ``+ - * /``, ``minimum`` and
    ``maximum`` of the sizes of the inputs' shapes, integer scalar inputs and positive integers (an
    input's dimensions are sizes: the launcher reads them from its shape)."""
    if tensor.role == "in":
        state.errors.error(f"input '{tensor.name.id}' has a dimension written as an expression; an input's "
                           "dimensions are sizes or literals (an output's may be expressions of them)", extent.span)
        return
    given = _given_sizes(state.spec)
    for part in m.subexpressions(extent):
        arithmetic = isinstance(part, m.BinOp) and part.op in ("+", "-", "*", "/")
        if arithmetic or m.is_extent_call(part) or (isinstance(part, m.Number) and part.is_int):
            continue
        if isinstance(part, m.Ref) and part.name.id in given:
            continue
        state.errors.error(f"a dimension of '{tensor.name.id}' is arithmetic (+ - * /, minimum, maximum) of the "
                           "inputs' sizes, integer scalar inputs and integers", part.span)
        return


def check_initial(state: CheckState, tensor: m.Tensor, initial: m.Number) -> None:
    """``out y: f32[V, C] = 0``: only an output starts filled, not one written over an input (which
    starts as that input), and an integer output with an integer. ``in eps: f32 = 1e-5``: a
    scalar input's default, the launcher's when the caller leaves it out; the inputs after one
    with a default have one too (a Python signature's rule). ``in weight: f32[V] = 1``: an
    optional tensor input (:func:`check_optional`)."""
    name = tensor.name.id
    if tensor.optional:
        check_optional(state, tensor)
    if tensor.role == "in":
        inputs = state.spec.inputs
        at = inputs.index(tensor)
        later = [t for t in inputs[at + 1:] if t.initial is None]
        if later and all(t.initial is None for t in inputs[:at]):  # said once, by the first default
            state.errors.error(f"input '{later[0].name.id}' has no default but follows '{name}', which has one: "
                               "declare the inputs with defaults last", later[0].name.span)
    elif tensor.in_place_of is not None:
        state.errors.error(f"'{name}' is written in place of '{tensor.in_place_of.id}', so it starts as that "
                           "input; drop '= " + initial.text + "' or 'in place of'", initial.span)
    dtypes = state.spec.dtype_options(tensor.dtype)
    if not initial.text.lstrip("-").isdigit() and any(not is_float(d) for d in dtypes):
        state.errors.error(f"'{name}' is {tensor.dtype.id}: it starts at an integer, not {initial.text}",
                           initial.span)


def check_optional(state: CheckState, tensor: m.Tensor) -> None:
    """``in weight: f32[V] = 1``: where the caller leaves the tensor out, the launcher passes one
    whose every element is that number (one element, broadcast: stride 0), so its shape comes from
    the inputs the caller must give: each size a dimension of one of them (or an integer scalar
    input). Its dtype is theirs where it shares their dtype variable, else its dtype's first option
    (``dtype W in f32, bf16``: float32). No output is written over it."""
    name = tensor.name.id
    given = _given_sizes(state.spec)
    for dim in tensor.dims:
        if isinstance(dim, m.Name) and dim.id not in given:
            state.errors.error(f"optional input '{name}' has dimension '{dim.id}', which no required input gives: "
                               "where it is left out its shape comes from the others", dim.span)
    for out in state.spec.outputs:
        if out.in_place_of is not None and out.in_place_of.id == name:
            state.errors.error(f"'{out.name.id}' is written in place of '{name}', an optional input (absent, "
                               "it is one element broadcast)", out.in_place_of.span)


def _given_sizes(spec: m.Spec) -> set[str]:
    """The sizes the launcher's arguments give: the symbols of the required input tensors' shapes
    and the integer scalar inputs."""
    shapes = {d.id for t in spec.inputs if not t.is_scalar and not t.optional for d in t.dims if isinstance(d, m.Name)}
    return shapes | {t.name.id for t in spec.inputs if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES}


def check_param(state: CheckState, param: m.Param) -> None:
    """``block BM = 64``: a new name whose default is a positive integer; only a tuned spec may
    leave the value to its configs."""
    state.define(param.name, "parameter")
    if param.default is None:
        if state.spec.tune is None:
            state.errors.error(
                f"'{param.name.id}' needs a value: 'block {param.name.id} = 64' (only tuned specs "
                "may leave block sizes to their configs)",
                param.name.span,
            )
    elif not param.default.is_int or int(param.default.text) < 1:
        state.errors.error(
            f"'{param.name.id}' must be a positive integer, not {param.default.text}",
            param.default.span,
        )


def check_grid(state: CheckState) -> dict[str, m.Axis]:
    """The grid: two tiled axes for a flat or persistent grid, and each axis by
    :func:`check_axis_decl` (any number of them: past three, the first ones launched share program
    id 0). Returns the axes by name."""
    spec = state.spec
    axes: dict[str, m.Axis] = {}
    if spec.walks_rows:  # a persistent walk over the tiles of one axis (rows)
        tiled = [a for a in spec.grid if a.bounds != "whole"]
        if len(tiled) != 1 or tiled[0].block is None or tiled[0].is_index:
            state.errors.error(
                "a persistent grid walks the tiles of two tiled axes ('grid persistent m over M by BM, n over N by "
                "BN') or of one tiled axis beside whole ones ('grid persistent r over M by BM, c over N whole')",
                spec.grid[0].span,
            )
    if spec.flat and (len(spec.grid) != 2 or any(a.block is None for a in spec.grid)):
        kind = "persistent" if spec.persistent else "flat"
        state.errors.error(
            f"a {kind} grid flattens two tiled axes: 'grid {kind} m over M by BM, n over N by BN'",
            spec.grid[0].span,
        )
    for axis in spec.grid:
        check_axis_decl(state, axis, "grid axis")
        axes[axis.name.id] = axis
    return axes


def check_access(state: CheckState, access: m.Name) -> None:
    """``access STYLE``: a known style; block pointers and tensor descriptors cannot wrap a grid
    axis's offsets, and tensor descriptors (TMA) address at most 5 dimensions."""
    spec = state.spec
    if access.id not in m.ACCESS_STYLES:
        state.errors.error(
            f"unknown access style '{access.id}'; expected one of {', '.join(m.ACCESS_STYLES)}",
            access.span,
        )
    elif access.id in ("block_ptr", "descriptor"):
        what = "block pointers" if access.id == "block_ptr" else "tensor descriptors"
        for axis in spec.grid:
            if axis.bounds == "wrapped":
                state.errors.error(
                    f"{what} cannot wrap offsets; use 'access pointers' or drop 'wrapped'",
                    axis.span,
                )
        if access.id == "descriptor":
            for tensor in spec.tensors:
                if len(tensor.dims) > 5:
                    state.errors.error(
                        f"tensor descriptors (TMA) address at most 5 dimensions; '{tensor.name.id}' has "
                        f"{len(tensor.dims)}: use 'access pointers'",
                        tensor.name.span,
                    )


def check_choice(state: CheckState, choice: m.Choice) -> None:
    """``choose activation from relu, gelu``: new names (the choice's and its kernel constexpr's)
    and known options, each once."""
    state.define(choice.name, "choice")
    # The kernel's constexpr ACTIVATION for 'choose activation' must not clash either.
    state.define(m.Name(choice.constexpr, choice.name.span), "choice constexpr")
    seen: set[str] = set()
    for option in choice.options:
        if option.id not in CHOICE_OPTIONS:
            state.errors.error(
                f"'{option.id}' cannot be chosen; options are {', '.join(CHOICE_OPTIONS)}", option.span
            )
        elif option.id in seen:
            state.errors.error(f"option '{option.id}' is listed twice", option.span)
        seen.add(option.id)


def check_swizzle(state: CheckState, swizzle: m.Swizzle, axes: dict[str, m.Axis]) -> None:
    """``swizzle m, n group G [as mm, nn]``: a 2D grid's axes in order, a positive or declared
    group, and aliases (not on a flat grid) as new names, added to ``axes`` and recorded in
    ``state.alias_of``."""
    grid_names = tuple(a.name.id for a in state.spec.grid)
    if len(grid_names) != 2:
        state.errors.error(
            f"swizzle needs a 2D grid; this grid has {len(grid_names)} axes", swizzle.span
        )
    elif tuple(a.id for a in swizzle.axes) != grid_names:
        state.errors.error(
            f"swizzle must name the grid axes in order: 'swizzle {grid_names[0]}, {grid_names[1]}'",
            swizzle.axes[0].span,
        )
    if isinstance(swizzle.group, m.Number) and (
        not swizzle.group.is_int or int(swizzle.group.text) < 1
    ):
        state.errors.error("the swizzle group must be a positive integer", swizzle.group.span)
    if isinstance(swizzle.group, m.Name) and swizzle.group.id not in state.params:
        state.errors.error(
            f"unknown parameter '{swizzle.group.id}'; declare it or write 'group {swizzle.group.id} = 8'",
            swizzle.group.span,
        )
    if state.spec.flat and swizzle.aliases:
        state.errors.error("'as' aliases need a 2D grid, not a flat one", swizzle.aliases[0].span)
    if swizzle.aliases:
        for alias, axis in zip(swizzle.aliases, swizzle.axes, strict=True):
            state.define(alias, "swizzled axis")
            if axis.id in axes:
                axes[alias.id] = axes[axis.id]
                state.alias_of[alias.id] = axis.id

# expressions -----------------------------------------------------------------
