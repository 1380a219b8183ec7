"""The forward as the backward recomputes it: what the derivation refuses, and the forward's values
hoisted (the parts a gradient rule reads named, each a :class:`~tilegen.grad.adjoint.Value`).
"""

from __future__ import annotations

import dataclasses
import string

from tilegen import model as m
from tilegen.check.state import RESERVED
from tilegen.dtypes import BOOL, expr_dtype, is_float
from tilegen.functions import Function, lookup, reduction, spanned_axes, stops_gradient
from tilegen.grad.adjoint import Adjoint, Value
from tilegen.grad.declarations import NoBackward, float_tensor
from tilegen.parser import parse
from tilegen.spec_text import expr_text


class Forward:
    """One derivation's state and its first part: the forward's refusals (:meth:`refuse`), its values
    hoisted and named (:meth:`hoist`), the dtypes and axes of what it computes."""

    def __init__(self, spec: m.Spec, name: str):
        # one specialization for the dtypes the rules ask about; its casts and tensors write their
        # dtype variable as the spec does (``T(p)``), so the text serves every binding
        self.spec = m.specialize(spec, spec.bindings()[0])
        self.name = name
        self.axes = {a.name.id: a for a in spec.grid}
        self.local_dtypes: dict[str, str | None] = {}
        self.local_axes: dict[str, tuple[str, ...]] = {}
        self.values: list[Value] = []
        self.taken = {t.name.id for t in spec.tensors} | set(self.axes) | {p.name.id for p in spec.params}
        self.taken |= {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
        self.taken |= {v.name.id for v in spec.dtype_vars} | {"d" + t.name.id for t in spec.tensors}
        self.value_of: dict[tuple[object, ...], str] = {}  # a named value's expression -> its name
        self.across: set[str] = set()  # tiled grid axes a gradient is summed over across programs
        self.scatters: set[str] = set()  # inputs read through a gather: their gradients are scatter-added
        self.lines: list[str] = []  # the adjoints' lines, in the order the backward computes them
        self.active: set[str] = set()  # locals that depend on a float input
        self.read_outputs: set[str] = set()  # outputs the backward reads back (autograd saves them)
        self.read_back: dict[str, m.Store] = {}  # a value the forward stores exactly -> that store
        self.differentiable = {t.name.id for t in self.spec.inputs if not t.is_scalar and float_tensor(t)}
        self.adjoints: dict[str, list[Adjoint]] = {}  # a value's name -> the adjoints of its uses
        # a tensor's name -> (its load's key, the load's adjoint, the load), one for each load
        self.gradients: dict[str, list[tuple[tuple[object, ...], Adjoint, m.Load]]] = {}
        # a float output stored at the grid's axes: its value's key -> (the store, the value)
        self.saved: dict[tuple[object, ...], tuple[m.Store, m.Expr]] = {}

    def refuse(self) -> None:
        if self.spec.choices:
            raise NoBackward("a 'choose' line: the chosen function is not known until the launch",
                             self.spec.choices[0].span)
        assigned: dict[str, m.Span] = {}
        for stmt in self.spec.body:
            match stmt:
                case m.Loop():
                    raise NoBackward(f"a loop ('for {stmt.axis.name.id} over {stmt.axis.dim.id}'): loops are not "
                                     f"derived yet; write the backward by hand ('backward <kernel>')", stmt.span)
                case m.Declare() | m.Accumulate():
                    raise NoBackward(f"'{stmt.name.id}' is an accumulator, which is not derived yet; write the "
                                     f"backward by hand", stmt.span)
                case m.Assign():
                    if stmt.name.id in assigned:
                        raise NoBackward(f"'{stmt.name.id}' is assigned twice (line {assigned[stmt.name.id].line} "
                                         f"and here): its gradient would need the value it had at each use", stmt.span)
                    assigned[stmt.name.id] = stmt.span
                case m.Store():
                    pass  # below, once every assignment is known good
                case _:  # any other statement: no rule derives it yet
                    raise NoBackward(f"line {stmt.span.line} is not derived yet; write the backward by hand", stmt.span)
        for stmt in m.statements(self.spec.body):  # jagged rows: the derivation cannot tell them apart
            for access in m.accesses(stmt):
                starts = [i for i in access.index if m.is_offset(i) and any(
                    isinstance(p, m.Load) for p in m.subexpressions(i))]
                if starts:
                    raise NoBackward(f"'{access.tensor.id}' is read or written at a start loaded from data "
                                     f"({expr_text(starts[0])}): a row past its end is another's, which the "
                                     "derivation cannot tell apart; write the backward by hand", access.span)
                if isinstance(stmt, m.Store) and stmt.guard is not None:
                    raise NoBackward(f"the store to '{stmt.tensor.id}' is guarded ('where'): not derived yet; write "
                                     "the backward by hand", stmt.span)
        stored: dict[str, m.Span] = {}
        for stmt in self.spec.body:
            if isinstance(stmt, m.Store):
                if stmt.tensor.id in stored:
                    raise NoBackward(f"output '{stmt.tensor.id}' is stored twice", stmt.span)
                stored[stmt.tensor.id] = stmt.span
        for tensor in self.spec.in_place:
            if (source := tensor.in_place_of) is not None:  # (every one of spec.in_place has one)
                raise NoBackward(f"'{tensor.name.id}' may be written in place of '{source.id}', "
                                 "whose values a backward would read", source.span)
        if not self.differentiable:
            raise NoBackward("no float tensor input: nothing has a gradient")
        names = {t.name.id: t for t in self.spec.tensors}
        for tensor in self.spec.tensors:
            if tensor.role == "out" or tensor.name.id in self.differentiable:
                other = names.get("d" + tensor.name.id)
                if other is not None:
                    raise NoBackward(f"the gradient of '{tensor.name.id}' would be 'd{tensor.name.id}', which names "
                                     f"another tensor of this kernel", other.span)
        if not any(float_tensor(t) for t in self.spec.outputs):
            raise NoBackward("no float output: nothing to take the gradient of")

    def dtype(self, expr: m.Expr) -> str | None:
        return expr_dtype(expr, self.spec, self._local_dtype)

    def tensor(self, name: str) -> m.Tensor:
        """The tensor ``name`` of the checked spec (one a statement stores or loads). Raises KeyError
        for a name no tensor has."""
        tensor = self.spec.tensor(name)
        if tensor is None:
            raise KeyError(name)
        return tensor

    def _local_dtype(self, name: str) -> str | None:
        if name in self.local_dtypes:
            return self.local_dtypes[name]
        tensor = self.spec.tensor(name)
        if tensor is not None:
            return tensor.dtype.id
        return "i32"  # an axis or a size

    def is_active(self, expr: m.Expr) -> bool:
        """True where ``expr`` is a float value that depends on a float tensor input other than
        through ``detach`` (whose gradient is zero: torch's detach, JAX's stop_gradient) or a
        piecewise constant function (``floor``, ``sign``: :func:`~tilegen.functions.stops_gradient`)."""
        if not _floaty(self.dtype(expr)):
            return False
        for sub in m.subexpressions(expr, prune=stops_gradient):
            if isinstance(sub, m.Load) and sub.tensor.id in self.differentiable:
                return True
            if isinstance(sub, m.Ref) and (sub.name.id in self.active or sub.name.id in self.differentiable):
                return True  # a local that depends on an input, or a 0-dim input (read by its name)
        return False

    def fresh(self, stem: str) -> str:
        """A name no value of the spec has: ``stem``, else ``stem1``, ``stem2``, ..."""
        candidates = [stem, *(f"{stem}{i}" for i in range(1, 1000))]
        found = next(c for c in candidates if c not in self.taken and c not in RESERVED)
        self.taken.add(found)
        return found

    def hoist(self, expr: m.Expr, span: m.Span, top: bool = False) -> m.Expr:
        """``expr`` with the parts a rule reads named (each a :class:`Value` appended); ``top``: the
        whole value of an assignment, which its own name holds."""
        if isinstance(expr, m.Neg):
            return dataclasses.replace(expr, operand=self.hoist(expr.operand, span))
        if isinstance(expr, m.BinOp):
            left, right = self.hoist(expr.left, span), self.hoist(expr.right, span)
            active_left, active_right = self.is_active(left), self.is_active(right)
            if expr.op == "*":  # each factor's adjoint reads the other
                left = self.named(left, "t", span) if active_right else left
                right = self.named(right, "t", span) if active_left else right
            elif expr.op == "/":  # the dividend's adjoint reads the divisor; the divisor's both
                left = self.named(left, "t", span) if active_right else left
                right = self.named(right, "t", span) if active_left or active_right else right
            return dataclasses.replace(expr, left=left, right=right)
        if stops_gradient(expr):  # no rule reads what is inside
            return expr
        if isinstance(expr, m.Call):
            args = tuple(self.hoist(a, span) for a in expr.args)
            kwargs = tuple((k, v if isinstance(v, m.Ref) else self.hoist(v, span)) for k, v in expr.kwargs)
            call = dataclasses.replace(expr, args=args, kwargs=kwargs)
            function = lookup(expr.func)
            if function is None or function.kind == "cast" or not self.is_active(call):
                return call
            reads = reads_of(function)
            names = ["x", *[p for p, _ in function.params]]
            read = list(call.args)
            for i, arg in enumerate(read):
                if i < len(names) and names[i] in reads and not function.selects:
                    read[i] = self.named(arg, "t", span)
            call = dataclasses.replace(call, args=tuple(read))
            if "y" in reads and not top:
                return self.named(call, "t", span)
            return call
        return expr

    def named(self, expr: m.Expr, stem: str, span: m.Span) -> m.Expr:
        """``expr`` itself where a rule may repeat it (a name, a number, a load, a cast of one), else a
        reference to a new value holding it."""
        if _simple(expr):
            return expr
        if isinstance(expr, m.Call) and (function := lookup(expr.func)) is not None and function.kind != "cast":
            stem = m.as_written(expr.func)
        name = self.fresh(stem)
        self.define(name, expr)
        return m.Ref(m.Name(name, span), span)

    def define(self, name: str, expr: m.Expr) -> None:
        self.local_dtypes[name] = self.dtype(expr)
        self.local_axes[name] = self.spanned(expr)
        if self.is_active(expr):
            self.active.add(name)
        self.values.append(Value(name, expr))
        self.value_of.setdefault(m.expr_key(expr), name)

    def spanned(self, expr: m.Expr) -> tuple[str, ...]:
        """The grid axes ``expr`` varies along, an index axis (``b over B``, one per program) included:
        an adjoint summed over an axis sums across programs along an index axis too."""
        def own(e: m.Expr) -> tuple[str, ...] | None:
            if isinstance(e, m.Load):
                found: list[str] = []
                for item in e.index:
                    if isinstance(item, m.Name) and item.id in self.axes:
                        found.append(item.id)
                    elif m.is_offset(item):
                        found += [n for n in m.offset_names(item) if n in self.axes]
                return tuple(dict.fromkeys(found))
            if isinstance(e, m.Ref):
                if e.name.id in self.local_axes:
                    return self.local_axes[e.name.id]
                return (e.name.id,) if e.name.id in self.axes else ()
            return () if isinstance(e, m.Number) else None

        return spanned_axes(expr, own)

    def definition(self, name: str) -> m.Expr | None:
        """The expression a value of the backward is (a recomputed forward value, or an adjoint
        line that is not a reduction across programs), to be written out elsewhere; None if none."""
        value = next((v for v in self.values if v.name == name), None)
        if value is not None:
            return value.expr
        for line in self.lines:
            target, text = line.split(" = ", 1)
            if target == name:
                expr = parse_expression(text)
                grid = {a.name.id for a in self.spec.grid if a.bounds != "whole"}
                if any(isinstance(e, m.Call) and reduction(e) is not None and e.word("dim") in grid
                       for e in m.subexpressions(expr)):
                    return None
                return expr
        return None


def parse_expression(text: str) -> m.Expr:
    """Spec text of one expression as the model (through the spec parser: a one-line body)."""
    line = parse(f"kernel e\n  e = {text}\n", "<derived>").body[0]
    if not isinstance(line, m.Assign):  # (`e = ...` parses as one)
        raise ValueError(f"not an expression: {text}")
    return line.value


def reads_of(function: Function, operand: str | None = None) -> set[str]:
    """The values ``function``'s gradient rule for ``operand`` (None: any) reads besides ``g``: ``x``,
    ``y``, params' names (a callable rule: ``x`` and every param)."""
    rules = [function.grad[operand]] if operand is not None else list(function.grad.values())
    found: set[str] = set()
    for rule in rules:
        if callable(rule):
            found |= {"x", *(p for p, _ in function.params)}
        else:
            found |= {f.rstrip("_") for _, f, _, _ in string.Formatter().parse(rule) if f}
    return found - {"g"}


def _floaty(dtype: str | None) -> bool:
    return dtype is not None and dtype != BOOL and (is_float(dtype) or dtype == "float")


def _simple(expr: m.Expr) -> bool:
    """A value a rule may write twice: a name, a number, a load, a cast or negation of one."""
    if isinstance(expr, (m.Ref, m.Number, m.Load)):
        return True
    if isinstance(expr, m.Neg):
        return _simple(expr.operand)
    if isinstance(expr, m.Call) and (function := lookup(expr.func)) is not None and function.kind == "cast":
        return _simple(expr.args[0])
    return False
