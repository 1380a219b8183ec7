"""Expression rules: the dtype and the axes of the tile an expression evaluates to, masks
against numbers, and calls (arguments and keywords as :mod:`tilegen.functions` describes each
function, choices, reductions, ``dot``). Each function reports to the
:class:`~tilegen.check.state.CheckState` it is given and raises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilegen import model as m
from tilegen.check.indexing import index_axes
from tilegen.check.state import MIN_DOT_TILE, CheckState, Scope, block_text
from tilegen.dtypes import BOOL, COMPARISONS, GIVEN, INDEX, LOGIC, expr_dtype, is_int
from tilegen.functions import CASTS, FUNCTIONS, Function, lookup
from tilegen.spec_text import extent_text

#: Operand dtypes ``tl.dot`` takes, and the accumulator dtypes each may add into.
DOT_ACCUMULATORS = {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32",), "f8e4m3": ("f32",), "f8e5m2": ("f32",),
                    "i8": ("i32",)}


def dtype_of(state: CheckState, expr: m.Expr, scope: Scope) -> str | None:
    """The dtype ``expr`` computes to (None for a literal), see :mod:`tilegen.dtypes`."""

    def local(name: str) -> str | None:
        if name in scope.locals:
            return scope.dtypes.get(name)
        tensor = state.spec.tensor(name)
        if tensor is not None:
            return tensor.dtype.id
        return INDEX if name in scope.axes or name in state.dims else None

    return expr_dtype(expr, state.spec, local)


def expr_axes(state: CheckState, expr: m.Expr, scope: Scope) -> tuple[str, ...]:
    """Check an expression and return the axes of the tile it evaluates to."""
    if isinstance(expr, m.Number):
        return ()
    if isinstance(expr, m.Ref):
        name = expr.name.id
        if name in scope.locals:
            return scope.locals[name]
        if name in scope.axes:  # an axis's index values
            return () if scope.axes[name].is_index else (name,)
        if name in state.dims:  # a size symbol's value
            return ()
        tensor = state.spec.tensor(name)
        if tensor is not None and (tensor.is_scalar or (tensor.zero_dim and tensor.role == "in")):
            return ()  # a number: a scalar, or a 0-dim input's one element
        if tensor is not None:
            state.errors.error(f"tensor '{name}' must be indexed, e.g. '{name}[...]'", expr.span)
        elif name in state.params:
            state.errors.error(f"'{name}' is a block size, which has no value in the body", expr.span)
        else:
            state.errors.error(f"unknown name '{name}'", expr.span)
        return ()
    if isinstance(expr, m.Load):
        return index_axes(state, expr.tensor, expr.index, scope, writing=False)
    if isinstance(expr, m.Neg):
        if dtype_of(state, expr.operand, scope) == BOOL:
            state.errors.error("a comparison is a mask, not a number; negate a number", expr.span)
        return expr_axes(state, expr.operand, scope)
    if isinstance(expr, m.BinOp):
        left = expr_axes(state, expr.left, scope)
        right = expr_axes(state, expr.right, scope)
        check_operands(state, expr, scope)
        return left + tuple(a for a in right if a not in left)
    if isinstance(expr, m.Call):
        return call_axes(state, expr, scope)
    raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover


def check_operands(state: CheckState, expr: m.BinOp, scope: Scope) -> None:
    """Masks (comparisons, ``&``, ``|``) combine with ``&``/``|`` and feed ``where``; numbers
    do arithmetic and comparisons."""
    for side in (expr.left, expr.right):
        dtype = dtype_of(state, side, scope)
        is_mask = dtype == BOOL
        if expr.op in m.FLOOR_OPERATORS and dtype is not None and not is_mask and not is_int(dtype):
            state.errors.error(
                f"'{expr.op}' takes integers (an axis, a size, an integer tile), not {dtype}; for floats use "
                f"{'floor(a / b)' if expr.op == '//' else 'remainder(a, b)'}", side.span
            )
        if expr.op in LOGIC and not is_mask:
            state.errors.error(
                f"'{expr.op}' combines masks (comparisons such as 'n <= m'), not numbers", side.span
            )
        elif expr.op not in LOGIC and is_mask:
            what = "compared" if expr.op in COMPARISONS else "used as a number"
            state.errors.error(
                f"a comparison is a mask and cannot be {what}; use where(mask, a, b) to pick numbers",
                side.span,
            )


def check_given(state: CheckState, call: m.Call) -> None:
    """``given(weight)``: one argument, the bare name of an optional input (``in weight: T[N] = 1``)."""
    arg = call.args[0] if len(call.args) == 1 and not call.kwargs else None
    tensor = state.spec.tensor(arg.name.id) if isinstance(arg, m.Ref) else None
    if tensor is None or not tensor.optional:
        optional = [t.name.id for t in state.spec.inputs if t.optional]
        which = f": one of {', '.join(optional)}" if optional else "; this spec has none"
        state.errors.error(f"'given' takes the name of an optional input ('in w: f32[N] = 1'){which}", call.span)


def call_axes(state: CheckState, call: m.Call, scope: Scope) -> tuple[str, ...]:
    """Check a call of a choice or of a function of :mod:`tilegen.functions` (by its entry:
    ``dot`` and reductions by their kind, the argument counts, parameters, keywords, number
    arguments and masks by the entry's fields) and return the axes of its result."""
    name = call.func.id
    if name == GIVEN:
        check_given(state, call)
        return ()
    choice = next((c for c in state.spec.choices if c.name.id == name), None)
    function = lookup(name)
    if choice is None and function is None:
        known = sorted([*FUNCTIONS, *CASTS, *(c.name.id for c in state.spec.choices)])
        state.errors.error(f"unknown function '{name}'; known: {', '.join(known)}", call.func.span)
        return ()
    operands = [expr_axes(state, arg, scope) for arg in call.args]
    params = [p for p, _ in function.params] if function is not None else []
    given_axes = dict(zip(params, operands[1:], strict=False))  # each parameter's value's axes; counts may differ
    for key, value in call.kwargs:
        if key.id in params:  # a number given by keyword; words (dim=c, precision=ieee) are not values
            operands.append(expr_axes(state, value, scope))
            given_axes.setdefault(key.id, operands[-1])
    if choice is not None or function is None:  # a choice (an unknown name returned above)
        if len(call.args) != 1 or call.kwargs:
            state.errors.error(
                f"'{name}' (a choice) takes 1 argument, not {len(call.args) + len(call.kwargs)}", call.span
            )
        return operands[0] if operands else ()
    if function.kind == "dot":
        if len(call.args) != 2:
            state.errors.error(f"'dot' takes 2 arguments, not {len(call.args)}", call.span)
            return ()
        check_keywords(state, call, function, ())
        return dot_axes(state, call, operands[:2], scope)
    if function.kind in ("reduction", "scan"):
        return reduction_axes(state, call, function, operands, scope)
    if function.kind == "random":
        random_arguments(state, call, scope)
    count = len(call.args)
    if not function.min_args <= count <= function.max_args:
        wanted = (
            str(function.min_args)
            if function.min_args == function.max_args
            else f"{function.min_args} to {function.max_args}"
        )
        state.errors.error(f"'{name}' takes {wanted} arguments, not {count}", call.span)
        return ()
    check_keywords(state, call, function, params[: count - 1])
    given = set(params[: count - 1]) | {k.id for k, _ in call.kwargs}
    missing = [p for p, default in function.params if default is None and p not in given]
    if missing:
        state.errors.error(f"'{name}' needs its argument '{missing[0]}'", call.span)
    if function.one_of and not given & set(function.one_of):
        either = " or ".join(f"'{p}'" for p in function.one_of)
        state.errors.error(f"'{name}' needs {either} (or both), e.g. {name}(x, {function.one_of[0]}=0)", call.span)
    for position, param in enumerate(params, start=1):
        argument = call.args[position] if position < count else call.kwarg(param)
        if param in function.numbers and argument is not None and given_axes.get(param):
            state.errors.error(
                f"the {param} of '{name}' must be a number (a constant or a scalar input), e.g. "
                f"{name}(x, {dict(function.params)[param]})",
                argument.span,
            )
    if function.selects and call.args and dtype_of(state, call.args[0], scope) != BOOL:
        state.errors.error(
            f"the first argument of '{name}' is a mask, e.g. where(n <= m, acc, 0)", call.args[0].span
        )
    elif not function.selects:
        for arg in call.args:
            if dtype_of(state, arg, scope) == BOOL:
                state.errors.error(f"'{name}' takes numbers, not a mask; use where(mask, a, b)", arg.span)
    if function.floats and call.args and is_int(dtype_of(state, call.args[0], scope)):
        state.errors.error(f"'{name}' takes a float tile (torch has no integer {name}); cast it first, e.g. "
                           f"{name}(f32(x))", call.args[0].span)
    if function.unsigned_limits and call.args and dtype_of(state, call.args[0], scope) == "u8":
        for position, (param, default) in enumerate(function.params, start=1):
            argument = call.args[position] if position < count else call.kwarg(param)
            negative = _negative_literal(argument) if argument is not None else (default or "").startswith("-")
            if param in function.unsigned_limits and negative:
                state.errors.error(f"'{name}' of a u8 tile cannot have a negative {param} (torch refuses "
                                   f"negative limits for an unsigned type); give {name}(x, 0, ...)",
                                   (argument or call).span)
                break
    result: tuple[str, ...] = ()
    for axes in operands:
        result += tuple(a for a in axes if a not in result)
    return result


def random_arguments(state: CheckState, call: m.Call, scope: Scope) -> None:
    """``rand(seed, offset)``: ``seed`` an integer scalar input, ``offset`` an integer expression
    (of axes, sizes and scalars: each element's index, ``r * N + c``)."""
    name = call.func.id
    if len(call.args) != 2 or call.kwargs:
        return  # the count is checked as any function's
    seed, offset = call.args
    scalar = state.spec.tensor(seed.name.id) if isinstance(seed, m.Ref) else None
    if scalar is None or not scalar.is_scalar or not is_int(scalar.dtype.id):
        state.errors.error(f"the seed of '{name}' is an integer scalar input ('in seed: i64'), e.g. "
                           f"{name}(seed, r * N + c)", seed.span)
    if not is_int(dtype_of(state, offset, scope)):
        state.errors.error(f"the offset of '{name}' is an integer expression of axes (each element's own "
                           f"number), e.g. {name}(seed, r * N + c)", offset.span)


def _negative_literal(expr: m.Expr) -> bool:
    """``-1``, ``-0.5``: a number written negative."""
    if isinstance(expr, m.Neg):
        return isinstance(expr.operand, m.Number) and float(expr.operand.text) != 0
    return isinstance(expr, m.Number) and float(expr.text) < 0


def check_keywords(state: CheckState, call: m.Call, function: Function, positional: Sequence[str]) -> None:
    """Keywords name a parameter not given by position, or a choice with a known word."""
    params = [p for p, _ in function.params]
    for key, value in call.kwargs:
        if key.id in function.choices:
            word = call.word(key.id)
            if word not in function.choices[key.id]:
                state.errors.error(
                    f"unknown {key.id} '{word or 'value'}'; expected one of {', '.join(function.choices[key.id])}",
                    value.span,
                )
        elif key.id in params and key.id not in positional:
            continue
        else:
            expected = [*function.choices, *(p for p in params if p not in positional)]
            why = f"expected {', '.join(repr(k) for k in expected)}" if expected else "it takes none"
            state.errors.error(f"unknown argument '{key.id}' to '{function.name}'; {why}", key.span)


def reduction_axes(
    state: CheckState, call: m.Call, function: Function, operands: list[tuple[str, ...]], scope: Scope
) -> tuple[str, ...]:
    """``sum(x, dim=c)`` (``function`` the call's, ``operands`` its arguments' axes): ``c`` is a tile
    axis of ``x`` that one program covers (a whole axis or the current tile of a loop axis); the
    result spans ``x``'s other axes. A scan (``cumsum(x, dim=c, reverse=true)``) runs along a whole
    axis and keeps every axis of ``x``."""
    name = call.func.id
    is_scan = function.kind == "scan"
    if len(call.args) != 1:
        optional = "".join(f", optionally {k}=" for k in function.choices)
        state.errors.error(f"'{name}' takes 1 argument and dim={optional}, not {len(call.args)} arguments", call.span)
        return ()
    operand_dtype = dtype_of(state, call.args[0], scope)
    if operand_dtype == BOOL and not function.masks:
        state.errors.error(f"'{name}' takes numbers, not a mask; use where(mask, 1, 0)", call.args[0].span)
    elif function.masks and operand_dtype != BOOL:
        state.errors.error(f"'{name}' takes a mask (a comparison or a bool tile), e.g. {name}(x != 0, dim=c)",
                           call.args[0].span)
    elif function.floats and is_int(operand_dtype):
        state.errors.error(f"'{name}' takes a float tile; cast it first, e.g. {name}(f32(x), dim=c)",
                          call.args[0].span)
    value, word = call.kwarg("dim"), call.word("dim")
    for key, given in call.kwargs:
        if key.id in function.choices:
            if call.word(key.id) not in function.choices[key.id]:
                state.errors.error(f"{key.id}= is one of {', '.join(function.choices[key.id])}", given.span)
        elif key.id != "dim":
            expected = ", ".join(repr(k) for k in ("dim", *function.choices))
            state.errors.error(f"unknown argument '{key.id}' to '{name}'; expected {expected}", key.span)
    if value is None:
        what = "runs along" if is_scan else "reduces"
        state.errors.error(f"'{name}' needs the axis it {what}: {name}(x, dim=<axis>)", call.span)
        return operands[0]
    across = id(call) in state.across  # a reduction across programs (programs.py accepted it)
    if (word is None or not isinstance(value, m.Ref)  # (a word is given as a Ref)
            or word not in scope.axes or (scope.axes[word].is_index and not across)):
        what = f"'{word}' is not a tile axis in scope" if word else "not an expression"
        state.errors.error(f"dim= names a tile axis of the operand; {what}", value.span)
        return operands[0]
    dim = value.name
    axis = scope.axes[dim.id]
    if axis.is_index:  # across programs, each holding one index of it
        return operands[0]
    if dim.id not in operands[0]:
        spans = ", ".join(operands[0]) or "no axis"
        state.errors.error(
            f"'{name}' {'runs along' if is_scan else 'reduces over'} '{dim.id}', but its operand spans {spans}",
            dim.span
        )
        return operands[0]
    result = operands[0] if is_scan else tuple(a for a in operands[0] if a != dim.id)
    merges = function.combine is not None or function.picks is not None
    if (is_scan or not merges) and axis.bounds != "whole":  # no partial results to merge
        where = "a 'for' loop's axis" if dim.id in scope.loop_axes else f"a grid axis tiled by {block_text(axis)}"
        missing = "a scan whose running value carries across tiles" if is_scan else "merging its partials"
        state.errors.error(
            f"'{name}' {'runs along' if is_scan else 'reduces'} a 'whole' axis (one program holds the row); "
            f"'{dim.id}' is {where}, and {missing} is not in the language yet: "
            f"write 'grid ... {dim.id} over {extent_text(axis)} whole'",
            dim.span,
        )
        return result
    if is_scan:
        return result
    if dim.id not in scope.loop_axes and axis.bounds != "whole" and not across:
        state.errors.error(
            f"'{dim.id}' is a grid axis tiled by {block_text(axis)}, so one program sees one tile of "
            f"{extent_text(axis)}, not all of it; reduce over a 'whole' axis or a 'for' loop's axis, or store "
            f"or assign the reduction itself (out[...] = sum(x, dim={dim.id}) or v = sum(x, dim={dim.id}) at the top "
            "level reduces across programs)",
            dim.span,
        )
    return result


def dot_axes(state: CheckState, call: m.Call, operands: list[tuple[str, ...]], scope: Scope) -> tuple[str, ...]:
    """``dot(a, b)``: two 2D tiles sharing exactly one axis, which the product contracts
    (``dot(q[m, d], k[n, d])`` is over ``d``, the second operand read transposed); the result
    spans the first operand's other axis, then the second's."""
    dtypes = [dtype_of(state, arg, scope) for arg in call.args]
    names = [
        f"'{arg.tensor.id}'" if isinstance(arg, m.Load) else f"'{arg.name.id}'" if isinstance(arg, m.Ref) else which
        for arg, which in zip(call.args, ("the first", "the second"), strict=True)
    ]
    for arg, dtype, name in zip(call.args, dtypes, names, strict=True):
        if dtype not in DOT_ACCUMULATORS and dtype in m.DTYPES:
            state.errors.error(
                f"'dot' does not take {dtype} tiles ({name}); operands are one of {', '.join(DOT_ACCUMULATORS)}"
                + ("" if isinstance(arg, m.Load) else ": cast it, e.g. f16(p)"),
                arg.span,
            )
    if dtypes[0] != dtypes[1] and all(d in DOT_ACCUMULATORS for d in dtypes):
        state.errors.error(
            f"'dot' operands must have one dtype; {names[0]} is {dtypes[0]}, {names[1]} is {dtypes[1]} "
            f"(cast one, e.g. {dtypes[0]}(...))",
            call.span,
        )
    (a, b) = operands
    if len(a) != 2 or len(b) != 2:
        if a and b:
            state.errors.error("'dot' operands must be 2D tiles", call.span)
        return ()
    shared = [x for x in a if x in b]
    if len(shared) != 1:
        state.errors.error(
            f"'dot' contracts over the one axis its operands share; they span {', '.join(a)} and "
            f"{', '.join(b)}",
            call.span,
        )
        return ()
    for name in (*a, *b):
        axis = scope.axes.get(name)
        if axis is None or axis.block is None:
            continue
        for value in state.param_values(axis.block.id):
            if int(value.text) < MIN_DOT_TILE:
                state.errors.error(
                    f"'dot' tiles need every block size >= {MIN_DOT_TILE}; '{axis.block.id}' = {value.text}",
                    call.span,
                )
                break
    return (next(x for x in a if x not in shared), next(x for x in b if x not in shared))

# statements ------------------------------------------------------------------
