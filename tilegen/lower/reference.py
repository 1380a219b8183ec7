"""Reference lowering: a checked spec -> ``reference(*inputs)`` as whole-tensor torch code.

The reference evaluates the spec on whole tensors, with no tiles, masks or program order:
each axis is a full dimension, a ``dot`` loop is one ``torch.matmul`` in the accumulator's
dtype (batched over index axes), activations are torch's own functions. It is the oracle any
spec, a user's too, is checked against.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

from typing_extensions import assert_never

from tilegen import model as m
from tilegen.dtypes import (
    GIVEN,
    INDEX,
    LOGIC,
    NARROW,
    SCALAR_F64,
    WEAK_FLOAT,
    converts_to_f32,
    expr_dtype,
    is_float,
    is_fp8,
    is_int,
    possible_dtypes,
    promote,
)
from tilegen.functions import Function, function_of, spanned_axes
from tilegen.lower.checked import block_of, default_of, tensor_of
from tilegen.lower.names import (
    absent_dtype,
    binop_text,
    chosen_dtypes,
    dtype_bindings,
    given_name,
    index_items,
    initial_text,
    is_offset,
    mentions,
    number_text,
    offset_text,
    parameters,
    swizzled_outputs,
    torch_dtype,
    tuple_text,
)
from tilegen.lower.plan import LauncherPlan, ReferencePlan


def to_dtype(text: str, dtype: str) -> str:
    """``text.to(dtype)``, or ``text`` itself where it is already a whole expression converted to
    ``dtype`` (``(a * b).to(T)``, ``x.to(T)``), so the reference reads without ``.to(T).to(T)``."""
    suffix = f".to({dtype})"
    if text.endswith(suffix):
        depth, head = 0, text[: -len(suffix)]
        for char in head:  # the conversion is of all of head only where head has no operator outside brackets
            depth += char in "([{"
            depth -= char in ")]}"
            if depth == 0 and char in " +-*/%<>=&|~^,":
                break
        else:
            return text
    return f"{text}{suffix}"

class ReferenceExpressions:
    """The torch text of one checked spec's expressions over whole tensors (its loads, gathers,
    arithmetic, functions and reductions), with the state its statements build (:class:`ReferenceLowering`
    writes them)."""

    def __init__(self, spec: m.Spec, launcher: LauncherPlan):
        self.spec = spec
        self.launcher = launcher
        self.aliases: dict[str, str] = {}
        if spec.swizzle is not None and spec.swizzle.aliases:
            self.aliases = {a.id: s.id for a, s in zip(spec.swizzle.aliases, spec.swizzle.axes, strict=True)}
        self.batch = tuple(a.name.id for a in spec.grid if a.is_index)
        self.scalars: set[str] = set()  # the axes of the index loops around the statement (one number each)
        self.locals: dict[str, tuple[str, ...]] = {}
        self.dtypes: dict[str, str] = {}  # declared local -> torch dtype (a dot accumulates in it)
        self.spec_dtypes: dict[str, str | None] = {}  # local -> spec dtype, for tilegen.dtypes
        self.lines: list[str] = []
        self.device = next(t.name.id for t in spec.inputs if not t.is_scalar and not t.optional) + ".device"

    def dim_of(self, axis_name: str) -> str:
        for axis in self.spec.axes():
            if axis.name.id == axis_name:
                return axis.dim.id
        raise KeyError(axis_name)  # pragma: no cover - the checker guarantees it

    def load_axes(self, load: m.Load | m.Store) -> tuple[str, ...]:
        axes, names = set(self.axis_names), list[str]()
        for item in load.index:
            if isinstance(item, m.Name):
                names += [item.id] if item.id not in self.scalars else []
            elif is_offset(item):  # an offset axis spans its axes
                names += [n for n in m.offset_names(item) if n in axes]
        return tuple(dict.fromkeys(self.aliases.get(n, n) for n in names))

    @property
    def axis_names(self) -> tuple[str, ...]:
        """Every axis of the spec (grid and loops) but those of the index loops around the statement,
        which are numbers there (``for kh in torch.arange(K)``)."""
        return tuple(a.name.id for a in self.spec.axes() if a.name.id not in self.scalars)

    def offset(self, item: m.Expr, own: tuple[str, ...]) -> str:
        """An offset axis's index values (``c + N / 2``) over ``own``: each axis its ``arange``."""

        def name(n: str) -> str:
            return self.arange(self.aliases.get(n, n), own) if n in self.axis_names else n

        return offset_text(item, name, lambda start: self.load(start, own))

    @staticmethod
    def align(text: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
        """Permute a tensor over ``axes`` into ``context`` order and add broadcast dims."""
        ordered = tuple(a for a in context if a in axes)
        if ordered != axes:
            text = f"{text}.permute({', '.join(str(axes.index(a)) for a in ordered)})"
        if ordered != context and ordered:
            text += "[" + ", ".join(":" if a in axes else "None" for a in context) + "]"
        return text

    def arange(self, axis: str, context: tuple[str, ...]) -> str:
        """An axis's index values over the whole dimension, aligned to ``context``."""
        return self.align(f"torch.arange({self.dim_of(axis)}, device={self.device})", (axis,), context)

    def load(self, load: m.Load, context: tuple[str, ...]) -> str:
        tensor = self.spec.tensor(load.tensor.id)
        if tensor is not None and tensor.zero_dim:  # a 0-dim input's one element: torch's shape () broadcasts
            return load.tensor.id
        offsets = [i for i in load.index if is_offset(i)]
        if len(offsets) == 1 and not any(isinstance(i, m.Load) for i in load.index):
            axes = [n for n in m.offset_names(offsets[0]) if n in self.axis_names]
            if len(axes) == 1:  # x[:, idx] with idx over the offset's one axis: the axes keep their order
                return self.shifted(load, offsets[0], self.aliases.get(axes[0], axes[0]), context)
        if any(isinstance(i, m.Load) or is_offset(i) for i in load.index):
            return self.gather(load, context)
        tensor = tensor_of(self.spec, load.tensor.id)
        index = [i.text if isinstance(i, m.Number) else self.whole(i, dim) for i, dim in zip(load.index, tensor.dims,
                                                                                          strict=True)]
        text = f"{load.tensor.id}[{', '.join(index)}]" if any(i != ":" for i in index) else load.tensor.id
        return self.align(text, self.load_axes(load), context)

    def whole(self, item: m.Index, dim: m.Name | m.Number) -> str:
        """The slice of a dimension an axis indexes: all of it, or the axis's extent where that is
        shorter (``offsets[b]`` with ``b over B1 - 1``: ``:B1_minus_1``); an index loop's axis, its number."""
        if isinstance(item, m.Name) and item.id in self.scalars:
            return item.id
        if not isinstance(item, m.Name) or item.id not in self.axis_names:
            return ":"
        extent = self.dim_of(self.aliases.get(item.id, item.id))
        return ":" if isinstance(dim, m.Name) and dim.id == extent else f":{extent}"

    def fresh(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``, ... where an earlier line or a local takes it (another
        offset's index)."""
        name, n = base, 1
        while mentions(self.lines, name) or name in self.locals:
            name, n = f"{base}_{n}", n + 1
        return name

    def shifted(self, load: m.Load, item: m.BinOp | m.Neg, axis: str, context: tuple[str, ...]) -> str:
        """``x[r, c + N / 2]``: the dimension of the offset indexed by its values along ``axis``,
        clamped into the dimension, the lanes outside it 0 (as the kernel reads them)."""
        tensor = tensor_of(self.spec, load.tensor.id)
        items = index_items(load)
        position = items.index(item)
        dim = tensor.dims[position]
        bound = dim.text if isinstance(dim, m.Number) else dim.id
        offset = self.offset(item, (axis,))
        name = self.fresh(f"{axis}_index")
        index = [i.text if isinstance(i, m.Number) else f"{name}.clamp(0, {bound} - 1)" if i is item
                 else self.whole(i, d) if isinstance(i, m.Name) else ":"
                 for i, d in zip(items, tensor.dims, strict=True)]
        inside = f"(({name} >= 0) & ({name} < {bound}))"
        self.lines.append(f"{name} = {offset}")
        axes = self.load_axes(load)
        mask = self.align(inside, (axis,), axes)
        return self.align(f"torch.where({mask}, {load.tensor.id}[{', '.join(index)}], 0)", axes, context)

    def gather(self, load: m.Load, context: tuple[str, ...]) -> str:
        """``x[r, idx[r]]`` as advanced indexing: an index tensor per dimension, each over the
        load's axes (an axis is its ``arange``, a gather its loaded index tensor, named on a line of
        its own); a loaded index or an offset is clamped into its dimension and the lanes outside
        it read 0, as the kernel's masked load reads them."""
        own = self.expr_axes(load)
        tensor = tensor_of(self.spec, load.tensor.id)
        index: list[str] = []
        inside: list[str] = []
        for position, item in enumerate(load.index):
            if isinstance(item, m.Number):
                index.append(item.text)
            elif isinstance(item, m.Load) or is_offset(item):
                # clamped into the dimension; the lanes outside it read 0, as the kernel's
                dim = tensor.dims[position]
                bound = dim.text if isinstance(dim, m.Number) else dim.id
                offset = self.load(item, own) if isinstance(item, m.Load) else self.offset(item, own)
                if isinstance(item, m.Load) and not offset.isidentifier():  # named once for its three uses
                    name = self.fresh(f"{load.tensor.id}_{item.tensor.id}")
                    self.lines.append(f"{name} = {offset}")
                    offset = name
                index.append(f"{offset}.clamp(0, {bound} - 1)")
                inside.append(f"({offset} >= 0) & ({offset} < {bound})")
            elif isinstance(item, m.Name) and item.id in self.scalars:
                index.append(item.id)
            else:
                assert isinstance(item, m.Name), f"not an index item: {item}"
                index.append(self.arange(self.aliases.get(item.id, item.id), own))
        text = f"{load.tensor.id}[{', '.join(index)}]"
        if inside:
            text = f"torch.where({' & '.join(inside)}, {text}, 0)"
        return self.align(text, own, context)

    def expr_axes(self, expr: m.Expr) -> tuple[str, ...]:
        """Axes of ``expr`` as a whole tensor (index axes included)."""

        def own(part: m.Expr) -> tuple[str, ...] | None:
            if isinstance(part, m.Load):
                return self.load_axes(part)
            if isinstance(part, m.Ref):
                name = part.name.id
                if name in self.locals:
                    return self.locals[name]
                return (name,) if name in self.axis_names else ()  # index values
            if isinstance(part, m.Number):
                return ()
            if isinstance(part, m.Call) and m.is_dot(part):
                # batch axes, then the first operand's other axis, then the second's
                a, b = (self.expr_axes(arg) for arg in part.args)
                batch = tuple(x for x in self.batch if x in a or x in b)
                shared = [x for x in a if x in b and x not in self.batch]
                return batch + tuple(x for x in (*a, *b) if x not in batch and x not in shared)
            return None

        return spanned_axes(expr, own)

    def dtype_of(self, expr: m.Expr) -> str | None:
        """The spec dtype ``expr`` computes to, see :mod:`tilegen.dtypes`."""

        def local(name: str) -> str | None:
            if name in self.locals:
                return self.spec_dtypes.get(name)
            tensor = self.spec.tensor(name)
            return tensor.dtype.id if tensor is not None else INDEX

        return expr_dtype(expr, self.spec, local)

    def as_float(self, text: str, expr: m.Expr) -> str:
        """``text`` in float32 where the kernel computes ``expr`` in float32 (f16, bf16, ints and
        integer literals, under any binding of the dtype variables, as
        :meth:`tilegen.lower.expressions.Expressions.upcast`)."""
        dtype = self.dtype_of(expr)
        if dtype is None and not self.expr_axes(expr):  # integer literals: float32 math too (2 ** -1 is 0.5)
            return f"({text}).float()"
        if not converts_to_f32(dtype, self.spec):
            return text
        return f"({text}).float()" if isinstance(expr, (m.BinOp, m.Neg)) else f"{text}.float()"

    def value(self, expr: m.Expr, context: tuple[str, ...]) -> str:
        """``expr`` as a tensor argument of a torch function (numbers become tensors)."""
        text = self.expr(expr, context)
        if not self.expr_axes(expr):
            return f"torch.as_tensor({text}, device={self.device})"
        return f"({text})" if isinstance(expr, (m.BinOp, m.Neg)) else text

    def dot(self, call: m.Call, context: tuple[str, ...], acc_dtype: str | None) -> str:
        """``torch.einsum`` of the two operands over their shared tile axis, in the accumulator's
        dtype (float32 for a ``dot`` that feeds no accumulator); index (batch) axes either
        operand has stay in the result (the other operand broadcasts)."""
        axes = [self.expr_axes(arg) for arg in call.args]
        out = self.expr_axes(call)  # the shared tile axis is in both operands, not in the result
        letters = {name: chr(ord("a") + i) for i, name in enumerate(dict.fromkeys((*axes[0], *axes[1])))}
        equation = ",".join("".join(letters[x] for x in a) for a in axes) + "->" + "".join(letters[x] for x in out)
        dtype = acc_dtype or "torch.float32"
        texts = [to_dtype(self.value(arg, own), dtype) for arg, own in zip(call.args, axes, strict=True)]
        return self.align(f'torch.einsum("{equation}", {texts[0]}, {texts[1]})', out, context)

    def call(self, call: m.Call, context: tuple[str, ...], acc_dtype: str | None) -> str:
        name = call.func.id
        if name == GIVEN:  # whether the caller passed that optional input (see absent)
            assert isinstance(call.args[0], m.Ref)
            return f"torch.tensor({given_name(call.args[0].name.id)}, device={self.device})"
        if name == "dot":
            return self.dot(call, context, acc_dtype)
        if any(c.name.id == name for c in self.spec.choices):
            return f"_torch_activation({self.value(call.args[0], context)}, {name})"
        function = function_of(call.func)
        if function.kind == "reduction":
            return self.reduction(call, function, context)
        if function.kind == "scan":
            return self.scan(call, function, context)
        x = self.value(call.args[0], context)
        values = {"x": x}
        for position, (param, default) in enumerate(function.params, start=1):
            given = call.args[position] if position < len(call.args) else call.kwarg(param)
            if given is None:
                assert default is not None, f"{name}() needs '{param}'"
                values[param] = default
            elif param in function.tensors:  # torch takes a tensor there, not a number
                values[param] = self.value(given, context)
            elif param in function.numbers and not self.expr_axes(given) and not isinstance(given, m.Number):
                values[param] = f"float({self.expr(given, context)})"  # a scalar input: torch wants a number
            elif function.kind == "math" and self.expr_axes(given):  # pow's exponent: float32, as the kernel
                values[param] = self.as_float(self.expr(given, context), given)
            else:
                values[param] = self.expr(given, context)
        if function.kind in ("math", "activation"):
            values["x"] = self.as_float(x, call.args[0])
        if function.kind == "elementwise" and (function.selects or function.promotes):
            self.typed_values(call, function, values)  # where, maximum, minimum, clamp: in the spec's dtype
        values["approximate"] = call.word("approximate") or "none"
        return function.torch_text(**values)

    def typed_values(self, call: m.Call, function: Function, values: dict[str, str]) -> None:
        """``values`` (the texts of ``call``'s arguments by name) with each value of another dtype
        than the call's (the spec's rules: ``where(m, x, s)`` of an f16 ``x`` and an f32 ``s`` is
        f32) cast to it, as :meth:`typed` does for arithmetic; a ``where``'s mask stays."""
        target = self.dtype_of(call)
        if not self.fixed(target):
            return
        names = ["x", *(p for p, _ in function.params)][1 if function.selects else 0:]
        for position, name in enumerate(names, start=1 if function.selects else 0):
            given = call.args[position] if position < len(call.args) else call.kwarg(name)
            if given is None:
                continue
            dtype = self.dtype_of(given)
            if self.fixed(dtype):
                values[name] = self.cast(values[name], given, dtype, target)

    def operand(self, call: m.Call, function: Function, context: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """A reduction's or scan's operand: the order of its axes (``context``'s first) and its
        text over them, in float32 where the function widens f16/bf16."""
        own = self.expr_axes(call.args[0])
        inner = tuple(a for a in context if a in own) + tuple(a for a in own if a not in context)
        x = self.value(call.args[0], inner)
        if function.widens and converts_to_f32(self.dtype_of(call.args[0]), self.spec, NARROW):
            x = self.as_float(x, call.args[0])
        return inner, x

    def scan(self, call: m.Call, function: Function, context: tuple[str, ...]) -> str:
        """``torch.cumsum(x, dim=i)`` over the operand's own axes (``context``'s order), aligned
        back; ``reverse=true`` flips before and after (torch has no reverse scan)."""
        dim = call.word("dim")
        assert dim is not None, f"{function.name} without dim="
        inner, x = self.operand(call, function, context)
        reverse = "True" if call.word("reverse") == "true" else "False"
        return self.align(function.torch_text(x=x, axis=str(inner.index(dim)), reverse=reverse), inner, context)

    def reduction(self, call: m.Call, function: Function, context: tuple[str, ...]) -> str:
        """``torch.sum(x, dim=i)`` over the operand's own axes (``context``'s first), aligned back."""
        dim = call.word("dim")
        assert dim is not None, f"{function.name} without dim="
        inner, x = self.operand(call, function, context)
        if function.averages and not is_float(self.dtype_of(call.args[0])):  # a mean of integers
            x = f"{x}.float()"
        text = function.torch_text(x=x, axis=str(inner.index(dim)))
        return self.align(text, tuple(a for a in inner if a != dim), context)

    def expr(self, expr: m.Expr, context: tuple[str, ...], acc_dtype: str | None = None) -> str:
        if isinstance(expr, m.Number):
            return number_text(expr)
        if isinstance(expr, m.Ref):
            name = expr.name.id
            if name in self.locals:
                return self.align(name, self.locals[name], context)
            if self.expr_axes(expr):  # an axis's index values
                return self.arange(name, context)
            return name  # a scalar input or a size symbol
        if isinstance(expr, m.Load):
            return self.load(expr, context)
        if isinstance(expr, m.Neg):
            if isinstance(expr.operand, m.Number):
                return number_text(expr)
            inner = self.expr(expr.operand, context)
            return f"-({inner})" if isinstance(expr.operand, m.BinOp) else f"-{inner}"
        if isinstance(expr, m.BinOp):
            left, right = self.expr(expr.left, context), self.expr(expr.right, context)
            if expr.op == "/" and self.dtype_of(expr.left) in (None, WEAK_FLOAT) and self.expr_axes(expr.right):
                # a number over a tensor: torch computes -0.1 / y as reciprocal(y) * -0.1 (inf past
                # f16's range where the quotient is finite); a 0-d tensor divides, in y's dtype
                left = f"torch.as_tensor({left}, device={self.device})"
            return binop_text(expr, *self.typed(expr, left, right))
        if isinstance(expr, m.Call):
            return self.call(expr, context, acc_dtype)
        raise AssertionError(expr)  # pragma: no cover

    def fixed(self, dtype: str | None) -> TypeGuard[str]:
        """A dtype that is the same under every binding of the spec's dtype variables (the casts
        of :meth:`typed` must not differ between bindings: one reference serves them all)."""
        return dtype in m.DTYPES and possible_dtypes(dtype, self.spec) == (dtype,)

    def typed(self, expr: m.BinOp, left: str, right: str) -> tuple[str, str]:
        """The operands of ``expr`` in the dtype the spec's rules give it (:func:`tilegen.dtypes.promote`)
        where both have a dtype of their own and they differ: torch keeps a 0-d tensor or a number
        weak (``s + x`` of an f32 ``s`` and an f16 ``x`` is f16 there, f32 in the kernel), so the
        side of the other dtype is cast first. Literals, masks and dtypes of a dtype variable's
        options (:meth:`fixed`) stay as they are."""
        if expr.op in LOGIC:
            return left, right
        dl, dr = self.dtype_of(expr.left), self.dtype_of(expr.right)
        if is_fp8(dl, self.spec) or is_fp8(dr, self.spec):  # torch has no fp8 arithmetic: in float32 (f64)
            wide = m.DTYPES["f64" if "f64" in (dl, dr) else "f32"][1]
            if is_fp8(dl, self.spec):
                left = to_dtype(f"({left})" if isinstance(expr.left, (m.BinOp, m.Neg)) else left, wide)
            if is_fp8(dr, self.spec):
                right = to_dtype(f"({right})" if isinstance(expr.right, (m.BinOp, m.Neg)) else right, wide)
            return left, right
        if SCALAR_F64 in (dl, dr):  # a 0-d f64 tensor is weak, as the kernel's f64 scalar, but the kernel
            other = dr if dl == SCALAR_F64 else dl  # computes with f16 or bf16 in float32, with integers in float64
            if not self.fixed(other) or (other not in ("f16", "bf16") and not is_int(other)):
                return left, right
            dl, dr = ((("f64" if is_int(other) else "f32") if d == SCALAR_F64 else d) for d in (dl, dr))
        if dl == dr or not self.fixed(dl) or not self.fixed(dr):
            return left, right
        target = promote(dl, dr, divide=expr.op == "/")
        assert target is not None, "two dtypes promote to one"
        return self.cast(left, expr.left, dl, target), self.cast(right, expr.right, dr, target)

    def cast(self, text: str, expr: m.Expr, dtype: str, target: str) -> str:
        """``text`` (of ``expr``, of ``dtype``) converted to ``target`` where they differ; a
        number becomes a 0-d tensor first."""
        if dtype == target:
            return text
        text = f"({text})" if isinstance(expr, (m.BinOp, m.Neg)) else text
        text = text if self.expr_axes(expr) else f"torch.as_tensor({text})"
        return to_dtype(text, m.DTYPES[target][1])

class ReferenceLowering(ReferenceExpressions):
    """Builds the :class:`ReferencePlan` of one checked spec (use :func:`lower_reference`): its
    statements, in order, over whole tensors."""

    def declare(self, stmt: m.Declare) -> None:
        # In the kernel a tile lives in one program; over whole tensors it spans every
        # index axis (batch) of the grid too.
        axes = self.batch + tuple(a.id for a in stmt.axes)
        shape = tuple_text(self.dim_of(a) for a in axes)
        dtype = torch_dtype(stmt.dtype)
        init = number_text(stmt.init)
        if init in ("0", "0.0"):
            self.lines.append(f"{stmt.name.id} = torch.zeros({shape}, dtype={dtype}, device={self.device})")
        else:
            self.lines.append(f"{stmt.name.id} = torch.full({shape}, {init}, dtype={dtype}, device={self.device})")
        self.locals[stmt.name.id] = axes
        self.dtypes[stmt.name.id] = dtype
        self.spec_dtypes[stmt.name.id] = stmt.dtype.id

    def store(self, stmt: m.Store) -> None:
        spec = self.spec
        tensor = tensor_of(spec, stmt.tensor.id)
        dtype = torch_dtype(tensor.dtype)
        index_axes = tuple(i.id for i in stmt.index if isinstance(i, m.Name) and i.id not in self.scalars)
        if any(a in self.aliases for a in index_axes):
            self.swizzled_store(stmt, tensor, dtype, index_axes)
            return
        offsets = sum(is_offset(i) for i in stmt.index)
        if offsets == 1 and not stmt.atomic:
            self.offset_store(stmt, tensor, dtype)
            return
        if stmt.atomic or offsets or any(isinstance(i, m.Load) for i in stmt.index):  # y[n, p // W, p % W] too
            self.scatter_store(stmt, dtype)
            return
        value = self.expr(stmt.value, index_axes)
        target = ", ".join(i.text if isinstance(i, m.Number) else self.whole(i, d) if isinstance(i, m.Name) and i.id in
                           self.scalars else ":" for i, d in zip(stmt.index, tensor.dims, strict=True))
        if tensor.zero_dim:  # one element in the kernel, torch's shape () here
            target = "()"
        if not self.expr_axes(stmt.value):  # a number (or scalar): fills the whole target
            value = f"torch.as_tensor({value})"
        elif isinstance(stmt.value, (m.BinOp, m.Neg)):
            value = f"({value})"
        value = to_dtype(value, dtype)
        if stmt.guard is not None:  # where the guard fails, the element keeps what it held
            value = f"torch.where({self.expr(stmt.guard, index_axes)}, {value}, {stmt.tensor.id}[{target}])"
        self.lines.append(f"{stmt.tensor.id}[{target}] = {value}")

    def offset_store(self, stmt: m.Store, tensor: m.Tensor, dtype: str) -> None:
        """``y[b, g * CG + c] = value``: the value over the store's axes (the offset's in its
        place), and of it the lanes whose index falls inside the dimension, as the kernel stores
        them, put at their indices."""
        items = index_items(stmt)
        position, item = next((p, i) for p, i in enumerate(items) if is_offset(i))
        own = tuple(dict.fromkeys(n for n in m.offset_names(item) if n in self.axis_names))
        context: list[str] = []
        for i in items:
            context += [i.id] if isinstance(i, m.Name) else list(own) if i is item else []
        dim = tensor.dims[position]
        bound = dim.text if isinstance(dim, m.Number) else dim.id
        name = self.fresh(f"{own[-1] if own else 'offset'}_index")
        inside = f"{name}_inside"
        self.lines.append(f"{name} = torch.as_tensor({self.offset(item, own)}, device={self.device})")
        self.lines.append(f"{inside} = ({name} >= 0) & ({name} < {bound})")
        extents = ", ".join(self.dim_of(a) for a in context)
        if stmt.guard is not None:  # y[offsets[r] + c] = v where c < n: only where the guard holds
            assert set(self.expr_axes(stmt.guard)) <= set(own), "the checker keeps an offset store's guard on its axes"
            guard = f"torch.as_tensor({self.expr(stmt.guard, own)}, device={self.device})"
            shape = ", ".join(self.dim_of(a) for a in own)
            self.lines.append(f"{inside} = {inside} & torch.broadcast_to({guard}, ({shape},))")
        value = f"torch.as_tensor({self.expr(stmt.value, tuple(context))}, device={self.device})"
        before = sum(isinstance(i, m.Name) for i in items[:position])
        picked = ", ".join([":"] * before + [inside])
        target = ", ".join(i.text if isinstance(i, m.Number) else f"{name}[{inside}]" if i is item else ":"
                           for i in items)
        value = f"torch.broadcast_to({value}, ({extents},))[{picked}]"
        self.lines.append(f"{stmt.tensor.id}[{target}] = {to_dtype(value, dtype)}")

    def scatter_store(self, stmt: m.Store, dtype: str) -> None:
        """``y[idx[t], c] += value`` (or ``=``), ``dx[n, S * o + k - P] += value``: an index tensor
        per dimension over the store's axes (an axis its ``arange``, a loaded index its tensor, an
        offset its values), the lanes whose index falls outside its dimension dropped, as the
        kernel's mask drops them, and ``index_put_`` of the value at the rest (``accumulate=True``
        for ``+=``: repeated indices, a window's overlaps, add up)."""
        tensor = tensor_of(self.spec, stmt.tensor.id)
        own: list[str] = []
        for item in stmt.index:
            if is_offset(item):
                own += [n for n in m.offset_names(item) if n in self.axis_names]
                continue
            own += self.expr_axes(item) if isinstance(item, m.Load) else [item.id] if isinstance(item, m.Name) else []
        context = tuple(dict.fromkeys(self.aliases.get(a, a) for a in own))
        name = self.fresh(f"{stmt.tensor.id}_index")
        index: list[str] = []
        inside: list[str] = []
        for position, item in enumerate(stmt.index):
            if isinstance(item, m.Number):
                index.append(f"torch.as_tensor({item.text}, device={self.device})")
            elif isinstance(item, m.Load) or is_offset(item):
                dim = tensor.dims[position]
                bound = dim.text if isinstance(dim, m.Number) else dim.id
                inside.append(f"({name}[{position}] >= 0) & ({name}[{position}] < {bound})")
                index.append(self.load(item, context) if isinstance(item, m.Load) else
                             f"torch.as_tensor({self.offset(item, context)}, device={self.device})")
            else:
                assert isinstance(item, m.Name), f"not an index item: {item}"
                index.append(self.arange(self.aliases.get(item.id, item.id), context))
        self.lines.append(f"{name} = torch.broadcast_tensors({', '.join(index)})")
        value = self.expr(stmt.value, context)
        if not self.expr_axes(stmt.value):
            value = f"torch.as_tensor({value}, device={self.device})"
        values = self.fresh(f"{stmt.tensor.id}_values")
        self.lines.append(f"{values} = torch.broadcast_to({value}, {name}[0].shape)")
        if stmt.guard is not None:  # only the lanes where the guard holds
            inside.append(f"torch.broadcast_to({self.expr(stmt.guard, context)}, {name}[0].shape)")
        if inside:  # indices outside their dimension write nothing
            keep = f"{name}_inside"
            self.lines.append(f"{keep} = {' & '.join(inside)}")
            self.lines.append(f"{name}, {values} = tuple(i[{keep}] for i in {name}), {values}[{keep}]")
        if stmt.update in ("max", "min"):  # the flat offsets of the elements, each reduced with its lanes
            flat = f"sum(i * s for i, s in zip({name}, {stmt.tensor.id}.stride())).reshape(-1)"
            self.lines.append(f"{stmt.tensor.id}.view(-1).scatter_reduce_(0, {flat}, "
                              f"{to_dtype(values, dtype)}.reshape(-1), 'a{stmt.update}')")
            return
        target = self.spec.tensor(stmt.tensor.id)
        if self.spec.deterministic is not None and target is not None and target.dtype.id in ("f16", "bf16", "f32"):
            # deterministic: summed in float32, in the tokens' order (the CPU's index_put_ adds in
            # order), and rounded to the output's dtype once, as the kernel's run sums are
            wide = self.fresh(f"{stmt.tensor.id}_sum")
            self.lines += [f"{wide} = {stmt.tensor.id}.float()",
                           f"{wide}.index_put_({name}, {values}.float(), accumulate=True)",
                           f"{stmt.tensor.id}.copy_({wide})"]
            return
        accumulate = ", accumulate=True" if stmt.atomic else ""
        self.lines.append(f"{stmt.tensor.id}.index_put_({name}, {to_dtype(values, dtype)}{accumulate})")

    def swizzled_store(self, stmt: m.Store, tensor: m.Tensor, dtype: str, index_axes: tuple[str, ...]) -> None:
        """A store through ``as`` aliases: scatter each element to where its tile is sent."""
        spec = self.spec
        context = tuple(self.aliases.get(a, a) for a in index_axes)
        value = self.expr(stmt.value, context)
        if isinstance(stmt.value, (m.BinOp, m.Neg)):
            value = f"({value})"
        self.lines.append(f"{stmt.tensor.id}_value = {to_dtype(value, dtype)}")
        m_ax, n_ax = spec.grid[0], spec.grid[1]
        assert spec.swizzle is not None, "aliases without a swizzle"
        self.lines.append(
            f"rows, cols = _swizzled_positions({m_ax.dim.id}, {n_ax.dim.id}, {block_of(m_ax)}, "
            f"{block_of(n_ax)}, {spec.swizzle.group_text}, {stmt.tensor.id}_value.device)"
        )
        self.lines.append(f"keep = (rows < {m_ax.dim.id}) & (cols < {n_ax.dim.id})")
        self.lines.append(f"{stmt.tensor.id}[rows[keep], cols[keep]] = {stmt.tensor.id}_value[keep]")

    def walk(self, body: Iterable[m.Stmt]) -> None:
        for stmt in body:
            match stmt:
                case m.Declare():
                    self.declare(stmt)
                case m.Assign():
                    name = stmt.name.id
                    axes = self.locals.get(name) or self.expr_axes(stmt.value)
                    value = self.expr(stmt.value, axes)
                    if name in self.locals and set(self.expr_axes(stmt.value)) != set(axes):  # keeps its shape
                        value = f"({value}).expand({', '.join(self.dim_of(a) for a in axes)})"
                    self.lines.append(f"{name} = {value}")
                    self.spec_dtypes.setdefault(name, self.dtype_of(stmt.value))
                    self.locals[name] = axes
                case m.Accumulate():
                    context = self.locals[stmt.name.id]
                    value = self.expr(stmt.value, context, self.dtypes.get(stmt.name.id))
                    self.lines.append(f"{stmt.name.id} += {value}")
                case m.Loop() if stmt.axis.is_index:  # a Python loop, each step's index one number
                    start, name = len(self.lines), stmt.axis.name.id
                    self.scalars.add(name)
                    self.walk(stmt.body)
                    self.scalars.discard(name)
                    steps = [f"    {line}" for line in self.lines[start:]] or ["    pass"]
                    loop = f"for {name} in torch.arange({stmt.axis.dim.id}, device={self.device}):"
                    self.lines[start:] = [loop, *steps]
                case m.Loop():  # over tiles: the body once, over the whole dimension
                    self.walk(stmt.body)
                case m.Store():
                    self.store(stmt)
                case _:
                    assert_never(stmt)

    def absent(self, tensor: m.Tensor) -> str:
        """The line filling optional input ``tensor`` where the caller left it out (None): every
        element its declared number, in the dtype the launcher gives it; ``_<name>_given`` keeps
        whether it was passed, for ``given(<name>)``."""
        assert tensor.initial is not None
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        shape = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        value = number_text(tensor.initial)
        filled = f"torch.full({shape}, {value}, dtype={absent_dtype(self.spec, tensor)}, device={self.device})"
        name = tensor.name.id
        return f"{given_name(name)}, {name} = {name} is not None, {filled} if {name} is None else {name}"

    def plan(self) -> ReferencePlan:
        spec = self.spec
        bound = dtype_bindings(spec, "{name}.dtype")
        chosen = {v.name.id: line for v, line in zip(spec.chosen_dtype_vars(), chosen_dtypes(spec, spec.name.id),
                                                     strict=True)}
        bindings = [chosen[var.name.id].code if var.name.id in chosen else f"{var.name.id} = {bound[var.name.id]}"
                    for var in spec.dtype_vars]
        for tensor in spec.inputs:  # a float scalar is a float32 (or f64) number, as in the kernel: 0-d
            if tensor.is_scalar and is_float(tensor.dtype.id):  # (s / 0.0 is inf, not ZeroDivisionError)
                name = tensor.name.id
                self.lines.append(
                    f"{name} = torch.as_tensor({name}, dtype={torch_dtype(tensor.dtype)}, device={self.device})")
        for name, shape_text, dtype in self.launcher.outputs:
            make = "zeros" if name in swizzled_outputs(spec) else "empty"  # as the launcher makes them
            made = f"torch.{make}({shape_text}, dtype={dtype}, device={self.device})"
            tensor = tensor_of(spec, name)
            if tensor.initial is not None:  # out counts: i32[B] = 0
                made = initial_text(tensor, shape_text.strip("()").rstrip(","), self.device)
            self.lines.append(f"{name} = {made}")
        self.walk(spec.body)
        # a dtype variable where the reference names it (a float32 loss of T inputs need not)
        kept: list[str] = []  # (G = ...(T, ...) keeps T's binding, the line before it)
        for binding in reversed(bindings):
            if mentions([*self.lines, *kept], binding.split(" = ")[0]):
                kept.insert(0, binding)
        self.lines[:0] = kept
        self.lines[:0] = [self.absent(t) for t in spec.inputs if t.optional]  # before T = weight.dtype
        keywords = tuple((p.name.id, default_of(p)) for p in spec.params) if self.aliases else ()
        keywords += tuple((c.name.id, f'"{c.options[0].id}"') for c in spec.choices)
        keywords += tuple((v.name.id, "None") for v in spec.chosen_dtype_vars())
        return ReferencePlan(
            inputs=parameters(spec),
            keywords=keywords,
            sizes=tuple((k, v) for k, v in self.launcher.sizes if mentions(self.lines, k)),
            lines=tuple(self.lines),
            returns=self.launcher.returns,
            uses_swizzle=bool(self.aliases),
            uses_choice=bool(spec.choices),
        )


def lower_reference(spec: m.Spec, launcher: LauncherPlan) -> ReferencePlan:
    """``reference(*inputs)`` of a checked spec (same inputs and outputs as its launcher)."""
    return ReferenceLowering(spec, launcher).plan()
