"""Lowering: a checked :class:`~tilegen.model.Spec` -> a :class:`ModulePlan` of plain strings.

Lowering decides every name, offset, mask, pointer expression and launcher check; the Jinja
templates only place what it computed. The plan has three parts, one per function of the
generated module:

* :class:`KernelPlan`: the ``@triton.jit`` kernel as a list of ops, each rendered by the
  template macro its ``macro`` names (``templates/kernel.py.j2``);
* :class:`LauncherPlan`: argument checks, size bindings, output allocation, grid and launch;
* :class:`ReferencePlan`: the same spec as whole-tensor torch statements.

Generated kernel names follow the seeds (``pid_m``, ``offs_m``, ``mask_m``, ``a_ptrs``,
``stride_a_m``, ``acc``); every generated name is checked against the spec's own names.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import ClassVar, Union

from tilegen import __version__
from tilegen import model as m

# ------------------------------------------------------------------------------ kernel ops


@dataclass(frozen=True)
class Comment:
    """``# spec line N: <text>``: names the spec line the next ops come from."""

    text: str
    macro: ClassVar[str] = "comment"


@dataclass(frozen=True)
class Line:
    """One statement of generated code, already formatted."""

    code: str
    macro: ClassVar[str] = "line"


@dataclass(frozen=True)
class ForLoop:
    """``for <var> in range(<stop>):`` with a body of ops."""

    var: str
    stop: str
    body: tuple
    macro: ClassVar[str] = "for_loop"


Op = Union[Comment, Line, ForLoop]


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: its name and whether it is a ``tl.constexpr``."""

    name: str
    constexpr: bool = False

    @property
    def text(self) -> str:
        """The parameter as written in the signature (``BM: tl.constexpr``)."""
        return f"{self.name}: tl.constexpr" if self.constexpr else self.name


@dataclass(frozen=True)
class KernelPlan:
    """The ``@triton.jit`` function: name, argument groups (one line each) and body ops."""

    name: str
    param_groups: tuple[tuple[KernelParam, ...], ...]
    body: tuple[Op, ...]
    docstring: str


@dataclass(frozen=True)
class TensorCheck:
    """Launcher check of one input tensor: name, torch dtype, rank and spec dtype."""

    name: str
    torch_dtype: str
    rank: int
    dtype: str


@dataclass(frozen=True)
class LauncherPlan:
    """The host launcher: every line it runs, in order, precomputed."""

    name: str
    kernel: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]  # (constexpr name, default)
    block_names: tuple[str, ...]
    tensor_checks: tuple[TensorCheck, ...]
    sizes: tuple[tuple[str, str], ...]  # (size symbol, expression binding it)
    shape_checks: tuple[tuple[str, str], ...]  # (condition that is an error, message)
    outputs: tuple[tuple[str, str, str], ...]  # (name, shape expression, torch dtype)
    grid: str
    call_args: tuple[tuple[str, ...], ...]  # one line of the launch call each
    returns: str
    docstring: str


@dataclass(frozen=True)
class ReferencePlan:
    """``reference(*inputs)``: size bindings and whole-tensor torch statements."""

    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, str], ...]
    lines: tuple[str, ...]
    returns: str
    uses_swizzle: bool


@dataclass(frozen=True)
class ModulePlan:
    """Everything ``templates/module.py.j2`` needs to write ``generated/<kernel>.py``."""

    kernel_name: str
    spec_path: str
    spec_hash: str
    version: str
    spec_text: tuple[str, ...]
    kernel: KernelPlan
    launcher: LauncherPlan
    reference: ReferencePlan


# ------------------------------------------------------------------------------ helpers


def spec_hash(source: str) -> str:
    """First 16 hex digits of the SHA-256 of the spec text (identifies the spec in headers)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def _printable(text: str, strip: bool = True) -> str:
    """Text safe inside a one-line ``#`` comment: no control or line-separator characters."""
    text = "".join(c if c.isprintable() else "?" for c in text.expandtabs(4)).rstrip()
    return text.strip() if strip else text


def broadcast(var: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
    """Index ``var`` (1-D over ``axes[0]``) so it broadcasts in a tile over ``context``.

    ``broadcast("offs_m", ("m",), ("m", "n"))`` is ``offs_m[:, None]``.
    """
    if len(context) <= 1:
        return var
    position = context.index(axes[0])
    return var + "[" + ", ".join(":" if i == position else "None" for i in range(len(context))) + "]"


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def binop_text(expr: m.BinOp, left: str, right: str) -> str:
    """``left op right`` with parentheses only where precedence needs them (the same text
    for Triton and torch, so both evaluate in the spec's order)."""
    prec = _PRECEDENCE[expr.op]
    if isinstance(expr.left, m.BinOp) and _PRECEDENCE[expr.left.op] < prec:
        left = f"({left})"
    if isinstance(expr.right, m.BinOp) and _PRECEDENCE[expr.right.op] <= prec:
        right = f"({right})"
    return f"{left} {expr.op} {right}"


@dataclass
class _AxisInfo:
    """What the kernel calls an axis: its offsets, mask (or None), bound and block."""

    offs: str
    mask: str | None
    dim: str
    block: str


@dataclass
class _Lowering:
    spec: m.Spec
    taken: set[str] = field(default_factory=set)
    axes: dict[str, _AxisInfo] = field(default_factory=dict)
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dtypes: dict[str, str | None] = field(default_factory=dict)  # local -> spec dtype if known
    masks: dict[str, str] = field(default_factory=dict)  # combined mask expression -> variable
    canonical: dict[str, str] = field(default_factory=dict)  # swizzled alias -> its grid axis

    def dtype_of(self, expr: m.Expr) -> str | None:
        """The spec dtype of ``expr`` when it is certain (a load, a typed local), else None."""
        if isinstance(expr, m.Load):
            return self.spec.tensor(expr.tensor.id).dtype.id
        if isinstance(expr, m.Ref):
            return self.dtypes.get(expr.name.id)
        return None

    def __post_init__(self) -> None:
        spec = self.spec
        # Tensor names stay free: the kernel calls their pointers ``<name>_ptr`` and the first
        # tile loaded from a tensor takes the tensor's own name, as the seeds do (``a = tl.load``).
        self.taken |= {f"{t.name.id}_ptr" for t in spec.tensors} | {p.name.id for p in spec.params}
        self.taken |= {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}

    # names -----------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A generated name starting with ``base`` that clashes with nothing else."""
        name, n = base, 1
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    def stride(self, tensor: m.Tensor, position: int) -> str:
        return f"stride_{tensor.name.id}_{_dim_label(tensor, position)}"

    def comment(self, span: m.Span) -> Comment:
        line = self.spec.source.splitlines()[span.line - 1]
        return Comment(f"{self.spec.path}:{span.line}: {_printable(line)}")

    # kernel ----------------------------------------------------------------------
    def kernel_params(self) -> tuple[tuple[KernelParam, ...], ...]:
        spec = self.spec
        pointers = tuple(KernelParam(f"{t.name.id}_ptr") for t in spec.tensors)
        sizes = tuple(KernelParam(d) for d in size_symbols(spec))
        strides = tuple(
            tuple(KernelParam(self.stride(t, i)) for i in range(len(t.dims))) for t in spec.tensors
        )
        consts = tuple(KernelParam(p.name.id, True) for p in spec.params)
        groups = (pointers, sizes, *strides, consts)
        for group in groups:
            self.taken |= {p.name for p in group}
        return tuple(g for g in groups if g)

    def grid_ops(self) -> list[Op]:
        spec = self.spec
        ops: list[Op] = [self.comment(spec.grid[0].span)]
        pids = {}
        for number, axis in enumerate(spec.grid):
            pids[axis.name.id] = self.fresh(f"pid_{axis.name.id}")
            ops.append(Line(f"{pids[axis.name.id]} = tl.program_id({number})"))
        swizzle = spec.swizzle
        aliases: dict[str, str] = {}
        if swizzle is not None:
            ops.append(self.comment(swizzle.span))
            first, second = (a.id for a in swizzle.axes)
            group = swizzle.group.text if isinstance(swizzle.group, m.Number) else swizzle.group.name.id
            targets = (first, second)
            if swizzle.aliases:
                targets = tuple(a.id for a in swizzle.aliases)
                for alias, axis in zip(targets, (first, second)):
                    aliases[alias] = axis
                    self.canonical[alias] = axis
                    pids[alias] = self.fresh(f"pid_{alias}")
            ops.append(
                Line(
                    f"{pids[targets[0]]}, {pids[targets[1]]} = tl.swizzle2d("
                    f"{pids[first]}, {pids[second]}, tl.num_programs(0), tl.num_programs(1), {group})"
                )
            )
        grid_axes = {a.name.id: a for a in spec.grid}
        for name, pid in pids.items():
            axis = grid_axes[aliases.get(name, name)]
            offs = self.fresh(f"offs_{name}")
            ops.append(Line(f"{offs} = {pid} * {axis.block.id} + tl.arange(0, {axis.block.id})"))
            mask = None
            if axis.masked:
                mask = self.fresh(f"mask_{name}")
                ops.append(Line(f"{mask} = {offs} < {axis.dim.id}"))
            self.axes[name] = _AxisInfo(offs, mask, axis.dim.id, axis.block.id)
        return ops

    def pointer_expr(self, load_or_store, context: tuple[str, ...], ops: list[Op] | None = None) -> tuple[str, str | None]:
        """Pointer and mask expressions of ``tensor[index]`` as a tile over ``context``.

        With ``ops`` given, a mask combined from several axes is emitted there once (as
        ``mask_hw``) and reused by every later access over the same axes.
        """
        tensor = self.spec.tensor(load_or_store.tensor.id)
        label = "".join(context)
        # A swizzled alias occupies its grid axis's place in the tile.
        context = tuple(self.canonical.get(a, a) for a in context)
        terms, masks = [], []
        for position, item in enumerate(load_or_store.index):
            stride = self.stride(tensor, position)
            if isinstance(item, m.Number):
                if item.text != "0":
                    terms.append(f"{item.text} * {stride}")
                continue
            info = self.axes[item.id]
            slot = (self.canonical.get(item.id, item.id),)
            terms.append(f"{broadcast(info.offs, slot, context)} * {stride}")
            if info.mask is not None:
                masks.append(broadcast(info.mask, slot, context))
        ptr = f"{tensor.name.id}_ptr + " + " + ".join(terms) if terms else f"{tensor.name.id}_ptr"
        mask = " & ".join(masks) if masks else None
        if ops is not None and len(masks) > 1:
            if mask not in self.masks:
                self.masks[mask] = self.fresh("mask_" + label)
                ops.append(Line(f"{self.masks[mask]} = {mask}"))
            mask = self.masks[mask]
        return ptr, mask

    def expr(self, expr: m.Expr, context: tuple[str, ...], ops: list[Op], other: str | None = None) -> str:
        """Emit loads into ``ops`` and return the Triton expression for ``expr``."""
        if isinstance(expr, m.Number):
            return expr.text
        if isinstance(expr, m.Ref):
            return broadcast_tile(expr.name.id, self.locals[expr.name.id], context)
        if isinstance(expr, m.Load):
            consts = [i.text for i in expr.index if isinstance(i, m.Number)]
            var = self.fresh("_".join([expr.tensor.id, *consts]))
            ptr, mask = self.pointer_expr(expr, context, ops)
            args = f"{ptr}, mask={mask}" if mask else ptr
            if mask and other is not None:
                args += f", other={other}"
            ops.append(Line(f"{var} = tl.load({args})"))
            return var
        if isinstance(expr, m.Neg):
            inner = self.expr(expr.operand, context, ops, other)
            if isinstance(expr.operand, m.BinOp):
                inner = f"({inner})"
            return f"-{inner}"
        if isinstance(expr, m.BinOp):
            left = self.expr(expr.left, context, ops, other)
            return binop_text(expr, left, self.expr(expr.right, context, ops, other))
        raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover

    def dot_loop(self, loop: m.Loop) -> list[Op]:
        """A loop over tiles of the reduced dimension: pointers made once, advanced per step."""
        axis = loop.axis
        k = axis.name.id
        ops: list[Op] = [self.comment(loop.span)]
        offs = self.fresh(f"offs_{k}")
        ops.append(Line(f"{offs} = tl.arange(0, {axis.block.id})"))
        step = self.fresh(k)
        mask_k = self.fresh(f"mask_{k}") if axis.masked else None
        self.axes[k] = _AxisInfo(offs, mask_k, axis.dim.id, axis.block.id)
        pointers: list[tuple[str, str]] = []  # (pointer variable, advance expression)
        body: list[Op] = []
        if mask_k:
            body.append(Line(f"{mask_k} = {offs} < {axis.dim.id} - {step} * {axis.block.id}"))
        for stmt in loop.body:
            body.append(self.comment(stmt.span))
            if not isinstance(stmt, m.Accumulate) or not isinstance(stmt.value, m.Call):
                body.extend(self.statement(stmt))
                continue
            call = stmt.value
            tiles = []
            for operand in call.args:
                tensor = self.spec.tensor(operand.tensor.id)
                context = tuple(i.id for i in operand.index if isinstance(i, m.Name))
                ptr, mask = self.pointer_expr(operand, context)
                var = self.fresh(f"{tensor.name.id}_ptrs")
                ops.append(Line(f"{var} = {ptr}"))
                position = next(p for p, i in enumerate(operand.index) if isinstance(i, m.Name) and i.id == k)
                pointers.append((var, f"{axis.block.id} * {self.stride(tensor, position)}"))
                tile = self.fresh(tensor.name.id)
                load = f"{tile} = tl.load({var}, mask={mask}, other=0.0)" if mask else f"{tile} = tl.load({var})"
                body.append(Line(load))
                tiles.append(tile)
            precision = dict((key.id, value) for key, value in call.kwargs).get("precision")
            extra = f', input_precision="{precision.id}"' if precision is not None else ""
            body.append(Line(f"{stmt.name.id} += tl.dot({tiles[0]}, {tiles[1]}{extra})"))
        for var, advance in pointers:
            body.append(Line(f"{var} += {advance}"))
        ops.append(ForLoop(step, f"tl.cdiv({axis.dim.id}, {axis.block.id})", tuple(body)))
        return ops

    def statement(self, stmt: m.Stmt) -> list[Op]:
        ops: list[Op] = []
        if isinstance(stmt, m.Declare):
            axes = tuple(a.id for a in stmt.axes)
            shape = "(" + ", ".join(self.axes[a].block for a in axes) + ("," if len(axes) == 1 else "") + ")"
            dtype = m.DTYPES[stmt.dtype.id][0]
            value = stmt.init.text
            if float(value) == 0:
                ops.append(Line(f"{stmt.name.id} = tl.zeros({shape}, dtype={dtype})"))
            else:
                ops.append(Line(f"{stmt.name.id} = tl.full({shape}, {value}, dtype={dtype})"))
            self.locals[stmt.name.id] = axes
            self.dtypes[stmt.name.id] = stmt.dtype.id
            self.taken.add(stmt.name.id)
        elif isinstance(stmt, (m.Assign, m.Accumulate)):
            context = self.locals.get(stmt.name.id) or _expr_axes(stmt.value, self.locals)
            value = self.expr(stmt.value, context, ops)
            operator = "+=" if isinstance(stmt, m.Accumulate) else "="
            ops.append(Line(f"{stmt.name.id} {operator} {value}"))
            self.locals.setdefault(stmt.name.id, context)
            self.dtypes.setdefault(stmt.name.id, self.dtype_of(stmt.value))
            self.taken.add(stmt.name.id)
        elif isinstance(stmt, m.Store):
            tensor = self.spec.tensor(stmt.tensor.id)
            context = tuple(i.id for i in stmt.index if isinstance(i, m.Name))
            value = self.expr(stmt.value, context, ops)
            if self.dtype_of(stmt.value) != tensor.dtype.id:
                if isinstance(stmt.value, (m.BinOp, m.Neg)):
                    value = f"({value})"
                value = f"{value}.to({m.DTYPES[tensor.dtype.id][0]})"
            ptr, mask = self.pointer_expr(stmt, context, ops)
            if len(context) > 1:
                ptrs = self.fresh(f"{tensor.name.id}_ptrs")
                ops.append(Line(f"{ptrs} = {ptr}"))
                ptr = ptrs
            ops.append(Line(f"tl.store({ptr}, {value}, mask={mask})" if mask else f"tl.store({ptr}, {value})"))
        elif isinstance(stmt, m.Loop):
            ops.extend(self.dot_loop(stmt))
        return ops

    def kernel(self) -> KernelPlan:
        params = self.kernel_params()
        body: list[Op] = self.grid_ops()
        for stmt in self.spec.body:
            if not isinstance(stmt, m.Loop):
                body.append(self.comment(stmt.span))
            body.extend(self.statement(stmt))
        name = f"{self.spec.name.id}_kernel"
        doc = f"Triton kernel generated from {self.spec.path}; launch it through {self.spec.name.id}()."
        return KernelPlan(name, params, tuple(body), doc)


def _dim_label(tensor: m.Tensor, position: int) -> str:
    """``m`` for dimension ``M`` when it is unique in the tensor, else the position."""
    dim = tensor.dims[position]
    names = [d.id for d in tensor.dims if isinstance(d, m.Name)]
    if isinstance(dim, m.Name) and names.count(dim.id) == 1:
        return dim.id.lower()
    return str(position)


def _expr_axes(expr: m.Expr, locals_: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    if isinstance(expr, m.Load):
        return tuple(i.id for i in expr.index if isinstance(i, m.Name))
    if isinstance(expr, m.Ref):
        return locals_.get(expr.name.id, ())
    if isinstance(expr, m.Neg):
        return _expr_axes(expr.operand, locals_)
    if isinstance(expr, m.BinOp):
        left = _expr_axes(expr.left, locals_)
        return left + tuple(a for a in _expr_axes(expr.right, locals_) if a not in left)
    if isinstance(expr, m.Call):
        a, b = (_expr_axes(arg, locals_) for arg in expr.args)
        return (a[0], b[1])
    return ()


def broadcast_tile(var: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
    """Index a tile over ``axes`` (a subsequence of ``context``) so it broadcasts over ``context``."""
    if axes == context or not axes:
        return var
    return var + "[" + ", ".join(":" if a in axes else "None" for a in context) + "]"


def size_symbols(spec: m.Spec) -> tuple[str, ...]:
    """Symbolic dimensions in order of first appearance (the kernel's size arguments)."""
    seen: list[str] = []
    for tensor in spec.tensors:
        for dim in tensor.dims:
            if isinstance(dim, m.Name) and dim.id not in seen:
                seen.append(dim.id)
    return tuple(seen)


# ------------------------------------------------------------------------------ launcher


def _launcher(spec: m.Spec, kernel: KernelPlan) -> LauncherPlan:
    name = spec.name.id
    inputs = tuple(t.name.id for t in spec.inputs)
    checks = tuple(
        TensorCheck(t.name.id, m.DTYPES[t.dtype.id][1], len(t.dims), t.dtype.id) for t in spec.inputs
    )
    sizes: list[tuple[str, str]] = []
    shape_checks: list[tuple[str, str]] = []
    bound: dict[str, str] = {}
    for tensor in spec.inputs:
        for position, dim in enumerate(tensor.dims):
            shape = f"{tensor.name.id}.shape[{position}]"
            where = f"{name}: {tensor.name.id} dimension {position}"
            if isinstance(dim, m.Number):
                shape_checks.append(
                    (f"{shape} != {dim.text}", f"f\"{where} must be {dim.text}, got {{{shape}}}\"")
                )
            elif dim.id in bound:
                shape_checks.append(
                    (
                        f"{shape} != {dim.id}",
                        f"f\"{where} ({dim.id}) is {{{shape}}}, but {bound[dim.id]} gives {dim.id} = {{{dim.id}}}\"",
                    )
                )
            else:
                sizes.append((dim.id, shape))
                bound[dim.id] = f"{tensor.name.id} dimension {position}"
    # Constant indices into symbolic dimensions need that dimension to be large enough.
    for tensor, position, const in _constant_indices(spec):
        dim = tensor.dims[position]
        if isinstance(dim, m.Name) and dim.id in bound:
            shape_checks.append(
                (
                    f"{dim.id} <= {const}",
                    f"f\"{name}: {tensor.name.id} dimension {position} ({dim.id}) must be > {const}, got {{{dim.id}}}\"",
                )
            )
    for axis in spec.axes():
        if not axis.masked:
            shape_checks.append(
                (
                    f"{axis.dim.id} % {axis.block.id}",
                    f"f\"{name}: '{axis.name.id} over {axis.dim.id} by {axis.block.id}' is unmasked, so "
                    f"{axis.dim.id} = {{{axis.dim.id}}} must be a multiple of {axis.block.id} = {{{axis.block.id}}}\"",
                )
            )
    outputs = []
    for tensor in spec.outputs:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        outputs.append((tensor.name.id, shape, m.DTYPES[tensor.dtype.id][1]))
    grid = ", ".join(f"triton.cdiv({a.dim.id}, {a.block.id})" for a in spec.grid)
    call_args = [tuple(t.name.id for t in spec.tensors), size_symbols(spec)]
    call_args += [tuple(f"{t.name.id}.stride({i})" for i in range(len(t.dims))) for t in spec.tensors]
    call_args.append(tuple(f"{p.name.id}={p.name.id}" for p in spec.params))
    returns = ", ".join(t.name.id for t in spec.outputs)
    block_names = tuple(
        dict.fromkeys(a.block.id for a in spec.axes())
    )
    doc = _launcher_doc(spec)
    return LauncherPlan(
        name=name,
        kernel=kernel.name,
        inputs=inputs,
        params=tuple((p.name.id, p.default.text) for p in spec.params),
        block_names=block_names,
        tensor_checks=checks,
        sizes=tuple(sizes),
        shape_checks=tuple(shape_checks),
        outputs=tuple(outputs),
        grid=f"({grid},)" if len(spec.grid) == 1 else f"({grid})",
        call_args=tuple(group for group in call_args if group),
        returns=returns,
        docstring=doc,
    )


def _launcher_doc(spec: m.Spec) -> str:
    def describe(t: m.Tensor) -> str:
        dims = ", ".join(d.text if isinstance(d, m.Number) else d.id for d in t.dims)
        return f"{t.name.id}: {t.dtype.id}[{dims}]"

    lines = [f"Run the kernel of {spec.path} and return its output{'s' if len(spec.outputs) > 1 else ''}."]
    lines.append("")
    lines.append("Inputs: " + "; ".join(describe(t) for t in spec.inputs) + " (any strides).")
    lines.append("Returns: " + "; ".join(describe(t) for t in spec.outputs) + " (new, contiguous).")
    if spec.params:
        lines.append(
            "Keyword overrides: "
            + ", ".join(f"{p.name.id}={p.default.text}" for p in spec.params)
            + "."
        )
    lines.append("Raises TypeError or ValueError naming the tensor and dimension on bad input.")
    return "\n".join(lines)


def _constant_indices(spec: m.Spec):
    found = []

    def visit_index(tensor_name, index):
        tensor = spec.tensor(tensor_name.id)
        for position, item in enumerate(index):
            if isinstance(item, m.Number):
                found.append((tensor, position, int(item.text)))

    def visit(expr):
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

    def walk(body):
        for stmt in body:
            if isinstance(stmt, m.Loop):
                walk(stmt.body)
            elif isinstance(stmt, m.Store):
                visit_index(stmt.tensor, stmt.index)
                visit(stmt.value)
            elif isinstance(stmt, (m.Assign, m.Accumulate)):
                visit(stmt.value)

    walk(spec.body)
    unique = {}
    for tensor, position, const in found:
        key = (tensor.name.id, position)
        unique[key] = (tensor, position, max(const, unique.get(key, (None, None, -1))[2]))
    return list(unique.values())


# ------------------------------------------------------------------------------ reference


def _reference(spec: m.Spec, launcher: LauncherPlan) -> ReferencePlan:
    swizzle = spec.swizzle
    aliases = {}
    if swizzle is not None and swizzle.aliases:
        aliases = {a.id: s.id for a, s in zip(swizzle.aliases, swizzle.axes)}
    locals_: dict[str, tuple[str, ...]] = {}
    dtypes: dict[str, str] = {}
    lines: list[str] = []

    def torch_load(load: m.Load, context: tuple[str, ...]) -> str:
        index = [i.text if isinstance(i, m.Number) else ":" for i in load.index]
        axes = tuple(aliases.get(i.id, i.id) for i in load.index if isinstance(i, m.Name))
        text = f"{load.tensor.id}[{', '.join(index)}]" if any(i != ":" for i in index) else load.tensor.id
        return align(text, axes, context)

    def align(text: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
        ordered = tuple(a for a in context if a in axes)
        if ordered != axes:
            text = f"{text}.permute({', '.join(str(axes.index(a)) for a in ordered)})"
        if ordered != context and ordered:
            text += "[" + ", ".join(":" if a in axes else "None" for a in context) + "]"
        return text

    def rexpr(expr: m.Expr, context: tuple[str, ...], acc_dtype: str | None = None) -> str:
        if isinstance(expr, m.Number):
            return expr.text
        if isinstance(expr, m.Ref):
            return align(expr.name.id, locals_[expr.name.id], context)
        if isinstance(expr, m.Load):
            return torch_load(expr, context)
        if isinstance(expr, m.Neg):
            inner = rexpr(expr.operand, context)
            return f"-({inner})" if isinstance(expr.operand, m.BinOp) else f"-{inner}"
        if isinstance(expr, m.BinOp):
            return binop_text(expr, rexpr(expr.left, context), rexpr(expr.right, context))
        if isinstance(expr, m.Call):  # dot: a full matmul in the accumulator's dtype
            a, b = (torch_load(arg, tuple(i.id for i in arg.index if isinstance(i, m.Name))) for arg in expr.args)
            dtype = acc_dtype or "torch.float32"
            return f"torch.matmul({a}.to({dtype}), {b}.to({dtype}))"
        raise AssertionError(expr)  # pragma: no cover


    def walk(body):
        for stmt in body:
            if isinstance(stmt, m.Declare):
                axes = tuple(a.id for a in stmt.axes)
                shape = ", ".join(_axis_dim(spec, a) for a in axes)
                dtype = m.DTYPES[stmt.dtype.id][1]
                device = spec.inputs[0].name.id + ".device"
                shape = f"({shape},)" if len(axes) == 1 else f"({shape})"
                if float(stmt.init.text) == 0:
                    lines.append(f"{stmt.name.id} = torch.zeros({shape}, dtype={dtype}, device={device})")
                else:
                    lines.append(f"{stmt.name.id} = torch.full({shape}, {stmt.init.text}, dtype={dtype}, device={device})")
                locals_[stmt.name.id] = axes
                dtypes[stmt.name.id] = dtype
            elif isinstance(stmt, m.Assign):
                axes = _expr_axes(stmt.value, locals_)
                lines.append(f"{stmt.name.id} = {rexpr(stmt.value, axes)}")
                locals_[stmt.name.id] = axes
            elif isinstance(stmt, m.Accumulate):
                context = locals_[stmt.name.id]
                lines.append(f"{stmt.name.id} += {rexpr(stmt.value, context, dtypes.get(stmt.name.id))}")
            elif isinstance(stmt, m.Loop):
                walk(stmt.body)
            elif isinstance(stmt, m.Store):
                tensor = spec.tensor(stmt.tensor.id)
                dtype = m.DTYPES[tensor.dtype.id][1]
                index_axes = tuple(i.id for i in stmt.index if isinstance(i, m.Name))
                if any(a in aliases for a in index_axes):
                    context = tuple(aliases.get(a, a) for a in index_axes)
                    value = rexpr(stmt.value, context)
                    if isinstance(stmt.value, (m.BinOp, m.Neg)):
                        value = f"({value})"
                    lines.append(f"{stmt.tensor.id}_value = {value}.to({dtype})")
                    m_ax, n_ax = (spec.grid[0], spec.grid[1])
                    group = swizzle.group.text if isinstance(swizzle.group, m.Number) else swizzle.group.name.id
                    lines.append(
                        f"rows, cols = _swizzled_positions({m_ax.dim.id}, {n_ax.dim.id}, {m_ax.block.id}, "
                        f"{n_ax.block.id}, {group}, {stmt.tensor.id}_value.device)"
                    )
                    lines.append(f"keep = (rows < {m_ax.dim.id}) & (cols < {n_ax.dim.id})")
                    lines.append(f"{stmt.tensor.id}[rows[keep], cols[keep]] = {stmt.tensor.id}_value[keep]")
                else:
                    value = rexpr(stmt.value, index_axes)
                    target = ", ".join(i.text if isinstance(i, m.Number) else ":" for i in stmt.index)
                    if isinstance(stmt.value, m.Number):
                        value = f"torch.tensor({value})"
                    elif isinstance(stmt.value, (m.BinOp, m.Neg)):
                        value = f"({value})"
                    lines.append(f"{stmt.tensor.id}[{target}] = {value}.to({dtype})")

    for name, shape_text, dtype in launcher.outputs:
        lines.append(f"{name} = torch.empty({shape_text}, dtype={dtype}, device={spec.inputs[0].name.id}.device)")
    walk(spec.body)
    params = tuple((p.name.id, p.default.text) for p in spec.params) if aliases else ()
    return ReferencePlan(
        inputs=launcher.inputs,
        params=params,
        sizes=tuple((k, v) for k, v in launcher.sizes if _mentions(lines, k)),
        lines=tuple(lines),
        returns=launcher.returns,
        uses_swizzle=bool(aliases),
    )


def _mentions(lines: list[str], name: str) -> bool:
    """True when ``name`` appears as a whole word in any of ``lines``."""
    return any(re.search(rf"\b{re.escape(name)}\b", line) for line in lines)


def _axis_dim(spec: m.Spec, axis_name: str) -> str:
    for axis in spec.axes():
        if axis.name.id == axis_name:
            return axis.dim.id
    raise KeyError(axis_name)  # pragma: no cover - the checker guarantees it


# ------------------------------------------------------------------------------ entry point


def lower(spec: m.Spec) -> ModulePlan:
    """Turn a checked spec into the :class:`ModulePlan` the templates render.

    The spec must have passed :func:`tilegen.check.check`; lowering does not re-validate.
    """
    kernel = _Lowering(spec).kernel()
    launcher = _launcher(spec, kernel)
    reference = _reference(spec, launcher)
    return ModulePlan(
        kernel_name=spec.name.id,
        spec_path=spec.path,
        spec_hash=spec_hash(spec.source),
        version=__version__,
        spec_text=tuple(_printable(line, strip=False) for line in spec.source.splitlines()),
        kernel=kernel,
        launcher=launcher,
        reference=reference,
    )
