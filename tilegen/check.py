"""Semantic checks: a parsed :class:`~tilegen.model.Spec` is either valid or every problem in it
is reported at once as a :class:`~tilegen.errors.SpecError` with ``file:line:col``.

The rules here are what lowering relies on: names are defined once and are safe identifiers,
tensors are indexed with their rank and with axes over the dimension they index, block sizes
are powers of two, ``dot`` contracts over the enclosing loop's axis, outputs are written and
inputs are not.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.errors import Collector

#: Names a spec may not use: they are Python keywords or names the generated module defines.
RESERVED = frozenset(
    set(keyword.kwlist)
    | set(keyword.softkwlist)
    | {"tl", "triton", "torch", "os", "grid", "reference", "kernel", "meta", "math", "self"}
    | {"True", "False", "None", "range", "min", "max", "abs", "len", "int", "float", "print"}
)

#: Functions an expression may call, with their number of positional arguments.
FUNCTIONS = {"dot": 2}

#: Triton's ``tl.dot`` needs every tile dimension to be at least this large.
MIN_DOT_TILE = 16


def is_power_of_two(value: int) -> bool:
    """True for 1, 2, 4, 8, ... (``tl.arange`` extents must be powers of two)."""
    return value >= 1 and value & (value - 1) == 0


@dataclass
class Scope:
    """What names mean at one point of the body: axes in scope and local tile variables."""

    axes: dict[str, m.Axis]
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> axes
    declared: set[str] = field(default_factory=set)  # names made with ``name: dtype[...]``
    loop_axes: tuple[str, ...] = ()


class Checker:
    """Runs every rule over one spec, collecting diagnostics in ``self.errors``."""

    def __init__(self, spec: m.Spec):
        self.spec = spec
        self.errors = Collector()
        self.dims: set[str] = {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
        self.params = {p.name.id: p for p in spec.params}
        self.written: set[str] = set()
        self.names: dict[str, m.Span] = {}
        self.alias_of: dict[str, str] = {}  # swizzled axis name -> the grid axis it remaps

    # helpers ---------------------------------------------------------------------
    def define(self, name: m.Name, what: str) -> None:
        """Record a new name; report reserved, dunder and duplicate names."""
        ident = name.id
        if ident in RESERVED or ident.startswith("__"):
            self.errors.error(f"{what} name '{ident}' is reserved; choose another name", name.span)
        elif ident in self.names:
            first = self.names[ident]
            self.errors.error(
                f"duplicate name '{ident}' (first defined at line {first.line})", name.span
            )
        else:
            self.names[ident] = name.span

    def check_dtype(self, dtype: m.Name) -> None:
        if dtype.id not in m.DTYPES:
            known = ", ".join(m.DTYPES)
            self.errors.error(f"unknown dtype '{dtype.id}'; expected one of {known}", dtype.span)

    def check_axis_decl(self, axis: m.Axis, what: str) -> None:
        self.define(axis.name, what)
        if axis.dim.id not in self.dims:
            self.errors.error(
                f"{what} '{axis.name.id}' is over '{axis.dim.id}', which is not a dimension of any tensor",
                axis.dim.span,
            )
        param = self.params.get(axis.block.id)
        if param is None:
            self.errors.error(
                f"unknown block size '{axis.block.id}'; declare it with 'block {axis.block.id} = ...'",
                axis.block.span,
            )
        elif not is_power_of_two(int(param.default.text)):
            self.errors.error(
                f"block size '{param.name.id}' = {param.default.text} is not a power of two",
                param.default.span,
            )

    # declarations ----------------------------------------------------------------
    def check_declarations(self) -> dict[str, m.Axis]:
        spec = self.spec
        # The kernel name lives at module level (``<name>``, ``<name>_kernel``), apart from the
        # kernel's own names, so it only has to avoid reserved and private names.
        if spec.name.id in RESERVED or spec.name.id.startswith("_"):
            self.errors.error(f"kernel name '{spec.name.id}' is reserved; choose another name", spec.name.span)
        for tensor in spec.tensors:
            self.define(tensor.name, "tensor")
            self.check_dtype(tensor.dtype)
            for dim in tensor.dims:
                if isinstance(dim, m.Number) and (not dim.is_int or int(dim.text) < 1):
                    self.errors.error("a literal dimension must be a positive integer", dim.span)
        for dim in sorted(self.dims):
            span = next(d.span for t in spec.tensors for d in t.dims if isinstance(d, m.Name) and d.id == dim)
            self.define(m.Name(dim, span), "dimension")
        for param in spec.params:
            self.define(param.name, "parameter")
            if not param.default.is_int or int(param.default.text) < 1:
                self.errors.error(
                    f"'{param.name.id}' must be a positive integer, not {param.default.text}",
                    param.default.span,
                )
        if not spec.outputs:
            self.errors.error("the kernel has no 'out' tensor", spec.name.span)
        axes: dict[str, m.Axis] = {}
        if not spec.grid:
            self.errors.error("the kernel has no 'grid' line", spec.name.span)
        if len(spec.grid) > 3:
            self.errors.error(
                f"a grid has at most 3 axes (Triton's program_id 0..2), not {len(spec.grid)}",
                spec.grid[3].span,
            )
        for axis in spec.grid:
            self.check_axis_decl(axis, "grid axis")
            axes[axis.name.id] = axis
        if spec.swizzle is not None:
            self.check_swizzle(spec.swizzle, axes)
        return axes

    def check_swizzle(self, swizzle: m.Swizzle, axes: dict[str, m.Axis]) -> None:
        grid_names = tuple(a.name.id for a in self.spec.grid)
        if len(grid_names) != 2:
            self.errors.error(
                f"swizzle needs a 2D grid; this grid has {len(grid_names)} axes", swizzle.span
            )
        elif tuple(a.id for a in swizzle.axes) != grid_names:
            self.errors.error(
                f"swizzle must name the grid axes in order: 'swizzle {grid_names[0]}, {grid_names[1]}'",
                swizzle.axes[0].span,
            )
        if isinstance(swizzle.group, m.Number) and (
            not swizzle.group.is_int or int(swizzle.group.text) < 1
        ):
            self.errors.error("the swizzle group must be a positive integer", swizzle.group.span)
        if swizzle.aliases:
            for alias, axis in zip(swizzle.aliases, swizzle.axes):
                self.define(alias, "swizzled axis")
                if axis.id in axes:
                    axes[alias.id] = axes[axis.id]
                    self.alias_of[alias.id] = axis.id

    # expressions -----------------------------------------------------------------
    def index_axes(self, tensor_name: m.Name, index, scope: Scope, writing: bool) -> tuple[str, ...]:
        """Check ``tensor[index]`` and return the axes it spans, in index order."""
        tensor = self.spec.tensor(tensor_name.id)
        if tensor is None:
            self.errors.error(f"unknown tensor '{tensor_name.id}'", tensor_name.span)
            return ()
        if writing and tensor.role == "in":
            self.errors.error(f"input tensor '{tensor.name.id}' is written; only 'out' tensors can be stored to", tensor_name.span)
        if not writing and tensor.role == "out":
            self.errors.error(f"output tensor '{tensor.name.id}' is read; only 'in' tensors can be loaded", tensor_name.span)
        if len(index) != len(tensor.dims):
            self.errors.error(
                f"tensor '{tensor.name.id}' has rank {len(tensor.dims)} but is indexed with {len(index)} "
                f"{'index' if len(index) == 1 else 'indices'}",
                tensor_name.span,
            )
            return ()
        result = []
        for position, (item, dim) in enumerate(zip(index, tensor.dims)):
            if isinstance(item, m.Number):
                if not item.is_int:
                    self.errors.error("a constant index must be an integer", item.span)
                elif isinstance(dim, m.Number) and int(item.text) >= int(dim.text):
                    self.errors.error(
                        f"index {item.text} is out of range for dimension {position} of "
                        f"'{tensor.name.id}' (size {dim.text})",
                        item.span,
                    )
                continue
            axis = scope.axes.get(item.id)
            if axis is None:
                self.errors.error(f"unknown axis '{item.id}'", item.span)
                continue
            if not isinstance(dim, m.Name) or dim.id != axis.dim.id:
                dim_text = dim.id if isinstance(dim, m.Name) else dim.text
                self.errors.error(
                    f"axis '{item.id}' tiles '{axis.dim.id}', but dimension {position} of "
                    f"'{tensor.name.id}' is '{dim_text}'",
                    item.span,
                )
            if item.id in result:
                self.errors.error(f"axis '{item.id}' indexes '{tensor.name.id}' twice", item.span)
            result.append(item.id)
        return tuple(result)

    def expr_axes(self, expr: m.Expr, scope: Scope) -> tuple[str, ...]:
        """Check an expression and return the axes of the tile it evaluates to."""
        if isinstance(expr, m.Number):
            return ()
        if isinstance(expr, m.Ref):
            if expr.name.id in scope.locals:
                return scope.locals[expr.name.id]
            if self.spec.tensor(expr.name.id) is not None:
                self.errors.error(
                    f"tensor '{expr.name.id}' must be indexed, e.g. '{expr.name.id}[...]'", expr.span
                )
            else:
                self.errors.error(f"unknown name '{expr.name.id}'", expr.span)
            return ()
        if isinstance(expr, m.Load):
            return self.index_axes(expr.tensor, expr.index, scope, writing=False)
        if isinstance(expr, m.Neg):
            return self.expr_axes(expr.operand, scope)
        if isinstance(expr, m.BinOp):
            left = self.expr_axes(expr.left, scope)
            right = self.expr_axes(expr.right, scope)
            return left + tuple(a for a in right if a not in left)
        if isinstance(expr, m.Call):
            return self.call_axes(expr, scope)
        raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover

    def call_axes(self, call: m.Call, scope: Scope) -> tuple[str, ...]:
        name = call.func.id
        if name not in FUNCTIONS:
            self.errors.error(
                f"unknown function '{name}'; known: {', '.join(sorted(FUNCTIONS))}", call.func.span
            )
            return ()
        operands = [self.expr_axes(arg, scope) for arg in call.args]
        if len(call.args) != FUNCTIONS[name]:
            self.errors.error(
                f"'{name}' takes {FUNCTIONS[name]} arguments, not {len(call.args)}", call.span
            )
            return ()
        return self.dot_axes(call, operands, scope)

    def dot_axes(self, call: m.Call, operands, scope: Scope) -> tuple[str, ...]:
        for key, value in call.kwargs:
            if key.id != "precision":
                self.errors.error(f"unknown argument '{key.id}' to 'dot'; expected 'precision'", key.span)
            elif (value.id if isinstance(value, m.Name) else value.text) not in m.PRECISIONS:
                text = value.id if isinstance(value, m.Name) else value.text
                self.errors.error(
                    f"unknown precision '{text}'; expected one of {', '.join(m.PRECISIONS)}",
                    value.span,
                )
        for arg in call.args:
            if not isinstance(arg, m.Load):
                self.errors.error("'dot' operands must be tensor tiles such as 'a[m, k]'", arg.span)
                return ()
        (a, b) = operands
        if len(a) != 2 or len(b) != 2:
            if a and b:
                self.errors.error("'dot' operands must be 2D tiles", call.span)
            return ()
        if not scope.loop_axes:
            self.errors.error("'dot' must be inside a 'for' loop over the reduced dimension", call.span)
            return ()
        reduced = scope.loop_axes[-1]
        if a[1] != reduced or b[0] != reduced:
            self.errors.error(
                f"'dot' must contract over the loop axis '{reduced}': write dot(x[i, {reduced}], y[{reduced}, j])",
                call.span,
            )
            return ()
        for arg in call.args:
            for position, index in enumerate(arg.index):
                block = self.params.get(scope.axes[index.id].block.id) if isinstance(index, m.Name) and index.id in scope.axes else None
                if block is not None and int(block.default.text) < MIN_DOT_TILE:
                    self.errors.error(
                        f"'dot' tiles need every block size >= {MIN_DOT_TILE}; '{block.name.id}' = {block.default.text}",
                        index.span,
                    )
        return (a[0], b[1])

    # statements ------------------------------------------------------------------
    def check_body(self, body, scope: Scope) -> None:
        for stmt in body:
            if isinstance(stmt, m.Declare):
                self.check_dtype(stmt.dtype)
                for axis in stmt.axes:
                    if axis.id not in scope.axes:
                        self.errors.error(f"unknown axis '{axis.id}'", axis.span)
                if not isinstance(stmt.init, m.Number):
                    self.errors.error("a tile is initialised with a constant, e.g. '= 0'", stmt.init.span)
                self.define(stmt.name, "variable")
                scope.locals[stmt.name.id] = tuple(a.id for a in stmt.axes)
                scope.declared.add(stmt.name.id)
            elif isinstance(stmt, m.Assign):
                axes = self.expr_axes(stmt.value, scope)
                if stmt.name.id not in scope.locals:
                    self.define(stmt.name, "variable")
                scope.locals[stmt.name.id] = axes
            elif isinstance(stmt, m.Accumulate):
                axes = self.expr_axes(stmt.value, scope)
                if stmt.name.id not in scope.declared:
                    self.errors.error(
                        f"'{stmt.name.id}' must be declared before '+=', e.g. '{stmt.name.id}: f32[...] = 0'",
                        stmt.name.span,
                    )
                elif not set(axes) <= set(scope.locals[stmt.name.id]):
                    self.errors.error(
                        f"'{stmt.name.id}' spans {list(scope.locals[stmt.name.id])} but the value spans {list(axes)}",
                        stmt.value.span,
                    )
            elif isinstance(stmt, m.Store):
                self.written.add(stmt.tensor.id)
                target = self.index_axes(stmt.tensor, stmt.index, scope, writing=True)
                axes = self.expr_axes(stmt.value, scope)
                canonical = {self.alias_of.get(a, a) for a in target}
                extra = [a for a in axes if self.alias_of.get(a, a) not in canonical]
                if extra and self.spec.tensor(stmt.tensor.id) is not None and len(target) == len(stmt.index):
                    self.errors.error(
                        f"the value spans axis '{extra[0]}', which the store to '{stmt.tensor.id}' does not index",
                        stmt.value.span,
                    )
            elif isinstance(stmt, m.Loop):
                self.check_axis_decl(stmt.axis, "loop axis")
                inner = Scope(
                    {**scope.axes, stmt.axis.name.id: stmt.axis},
                    dict(scope.locals),
                    set(scope.declared),
                    scope.loop_axes + (stmt.axis.name.id,),
                )
                self.check_body(stmt.body, inner)
                # Tile variables updated in the loop stay visible after it.
                scope.locals.update({k: v for k, v in inner.locals.items() if k in scope.locals})

    def run(self) -> None:
        axes = self.check_declarations()
        self.check_body(self.spec.body, Scope(dict(axes)))
        for tensor in self.spec.outputs:
            if tensor.name.id not in self.written:
                self.errors.error(f"output tensor '{tensor.name.id}' is never written", tensor.name.span)


def check(spec: m.Spec) -> m.Spec:
    """Validate ``spec``; return it unchanged or raise :class:`~tilegen.errors.SpecError`
    listing every problem found (up to :data:`tilegen.errors.MAX_DIAGNOSTICS`)."""
    checker = Checker(spec)
    checker.run()
    checker.errors.raise_if_any(spec.path, spec.source)
    return spec
