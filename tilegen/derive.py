"""The backward of a spec, derived from the forward by reverse-mode differentiation.

``tilegen show --grad specs/rms_norm.tile`` prints it; the build uses it for a kernel whose spec
names no ``backward``. The result is ``.tile`` text, parsed and checked like a hand-written
backward (:mod:`tilegen.check.backward`'s rules: it takes ``d<out>`` for each float output and the
forward's inputs it reads, and returns ``d<in>`` for each float tensor input that reaches an
output), on the forward's grid, blocks and tune configs.

What it does, for a body of assignments and stores over the grid's axes (the row kernels:
elementwise math, reductions over ``whole`` axes and across programs, scans, ``where``):

* **recompute, save the inputs.** The backward reads the forward's inputs (which autograd keeps)
  and recomputes every value it needs, a row's statistics included; nothing else is saved, so a
  forward + backward holds no more than the inputs and the gradients. A value a rule reads (the
  ``y`` of ``exp``'s ``dy * y``, the other factor of a product) that the forward computes inside an
  expression gets a name of its own (``rsqrt1``), so the backward says it once. A value the
  forward stores exactly (layer_norm's ``mu[r] = row_mean``) is read back from that output
  (:meth:`_Deriver.saved_values`), and so is a softmax or log-softmax stored as an output
  (:meth:`_Deriver.normalized`).
* **one rule per operation**, each in its operation's one home: the functions' ``grad`` templates
  in :data:`tilegen.functions.FUNCTIONS` (``exp``: ``{g} * {y}``; ``max`` over an axis: the
  gradient split among the maxima, as torch's ``amax``), the operators' here (``+ - * /``). A
  reduction's gradient is its operand's broadcast (``sum``; ``mean`` divides by the extent); a
  cast passes the gradient through, in float32.
* **the adjoints** of a value used more than once add up (``dxf = ... + ...``); a load's adjoint
  is its tensor's gradient, stored at the load's index, summed over the axes the index lacks: a
  ``whole`` axis inside the program, a grid axis across programs (``dweight[c] = sum(..., dim=r)``,
  the reduction across programs of the language: deterministic). An adjoint a reduction over a
  grid axis needs summed first is a value of its own (``dmean = sum(sum(..., dim=h), dim=b)``).
* **scatters the store says**: beside its read at the grid's axes, a tensor read at a constant
  index or through a gather adds that read's adjoint where the axes meet it (``where(c == 0 & ...,
  ...)``); one read at a shifted index (``x[r, c + 1]``) adds its adjoint moved back along the axis.

A matmul's accumulate-dot loop derives two products (:mod:`tilegen.derive_dot`,
:func:`derive_backwards`). Where neither can, :class:`NoBackward` says why, at the construct: another
loop or an accumulator, a value assigned twice, a tensor read only through a gather or at two
offsets, an operation without a rule (``prod``, ``cumprod``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import cast

from tilegen import model as m
from tilegen.check.indexing import IndexItem
from tilegen.check.state import RESERVED
from tilegen.check.tuning import setting_value
from tilegen.dtypes import BOOL, expr_dtype, is_float
from tilegen.functions import Function, lookup, reduction, spanned_axes
from tilegen.lower.passes import safe_path
from tilegen.spec_text import ATOM_LEVEL, binary, expr_text, index_text, negate, wrap

#: Declarations the backward takes from the forward as written, by a line's first word (with the
#: indented ``config`` lines under ``tune``).
_COPIED = ("dtype", "block", "grid", "swizzle", "tune", "access", "split")


class NoBackward(Exception):
    """The forward has no derived backward: ``reason`` says why, at ``span`` (a construct of the
    forward's spec, or None for the spec as a whole)."""

    def __init__(self, reason: str, span: m.Span | None = None):
        super().__init__(reason)
        self.reason = reason
        self.span = span


@dataclass(frozen=True)
class _Adjoint:
    """An adjoint: float32 spec text and the axes it spans (it may span more than its value, a
    broadcast's axes, which the gradient's store sums over). Along the ``implicit`` ones (of
    ``axes``) its text does not vary, though its value's lanes do (a reduction's operand takes the
    reduction's adjoint in every lane): summed over one, it is multiplied by the extent."""

    text: str
    axes: frozenset[str]
    implicit: frozenset[str] = frozenset()

    def map(self, text: str, *more: tuple[str, ...]) -> _Adjoint:
        """Another adjoint, ``text``, spanning these axes and ``more``'s (which its text now varies along)."""
        real = frozenset().union(*more)
        return _Adjoint(text, self.axes | real, self.implicit - real)


def _total(terms: list[_Adjoint]) -> _Adjoint:
    """The sum of ``terms`` (``a - b`` for a negated one; a term twice: ``2.0 * a``)."""
    counted: dict[str, int] = {}
    for term in terms:
        counted[term.text] = counted.get(term.text, 0) + 1
    first = {term.text: term for term in terms}
    terms = [_Adjoint(text if n == 1 else binary("*", f"{float(n)!r}", text), first[text].axes, first[text].implicit)
             for text, n in counted.items()]
    text = terms[0].text
    for term in terms[1:]:
        if term.text.startswith("-") and negate(term.text) != term.text:
            text = binary("-", text, negate(term.text))
        else:
            text = binary("+", text, term.text)
    real = frozenset().union(*(t.axes - t.implicit for t in terms))
    return _Adjoint(text, frozenset().union(*(t.axes for t in terms)),
                    frozenset().union(*(t.implicit for t in terms)) - real)


@dataclass
class _Value:
    """A named value of the recomputed forward: its defining expression (hoisted parts named)."""

    name: str
    expr: m.Expr


def backward_name(kernel: str) -> str:
    """The name of ``kernel``'s derived backward (``rms_norm_backward``)."""
    return f"{kernel}_backward"


def derive_backwards(spec: m.Spec, kernel: str | None = None) -> tuple[tuple[str, str], ...]:
    """The backward kernels of the checked ``spec`` as (kernel name, ``.tile`` text), in the order
    they run: one (:func:`derive_backward`), or for a matmul's accumulate-dot loop two, ``da`` and
    ``db`` (:mod:`tilegen.derive_dot`); ``kernel`` names the forward (default its own name). Raises
    :class:`NoBackward` as they do."""
    from tilegen.derive_dot import derive_dot_backwards, is_dot_body

    if is_dot_body(spec):
        named = spec if kernel is None else dataclasses.replace(spec, name=m.Name(kernel, spec.name.span))
        return derive_dot_backwards(named)
    name = backward_name(kernel or spec.name.id)
    return ((name, derive_backward(spec, name)),)


def derive_backward(spec: m.Spec, name: str | None = None) -> str:
    """The ``.tile`` text of the backward of the checked ``spec``, kernel ``name`` (default
    :func:`backward_name`). It takes ``d<out>`` for each float output, then the forward's inputs it
    reads; it returns ``d<in>`` for each float tensor input that reaches a float output, in the
    inputs' dtypes, computed in float32. Raises :class:`NoBackward` where the forward has a
    construct without a rule (see the module's docstring)."""
    return _Deriver(spec, name or backward_name(spec.name.id)).text()


class _Deriver:
    """One derivation: the forward's values (hoisted), then the reverse pass, then the text."""

    def __init__(self, spec: m.Spec, name: str):
        # one specialization for the dtypes the rules ask about; its casts and tensors write their
        # dtype variable as the spec does (``T(p)``), so the text serves every binding
        self.spec = m.specialize(spec, spec.bindings()[0])
        self.name = name
        self.axes = {a.name.id: a for a in spec.grid}
        self.local_dtypes: dict[str, str | None] = {}
        self.local_axes: dict[str, tuple[str, ...]] = {}
        self.values: list[_Value] = []
        self.taken = {t.name.id for t in spec.tensors} | set(self.axes) | {p.name.id for p in spec.params}
        self.taken |= {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
        self.taken |= {v.name.id for v in spec.dtype_vars} | {"d" + t.name.id for t in spec.tensors}
        self.value_of: dict[tuple[object, ...], str] = {}  # a named value's expression -> its name
        self.across: set[str] = set()  # tiled grid axes a gradient is summed over across programs
        self.lines: list[str] = []  # the adjoints' lines, in the order the backward computes them
        self.active: set[str] = set()  # locals that depend on a float input
        self.read_outputs: set[str] = set()  # outputs the backward reads back (autograd saves them)
        self.read_back: dict[str, m.Store] = {}  # a value the forward stores exactly -> that store
        self.differentiable = {t.name.id for t in self.spec.inputs if not t.is_scalar and float_tensor(t)}

    # ------------------------------------------------------------------ the forward, hoisted

    def _refuse(self) -> None:
        if self.spec.choices:
            raise NoBackward("a 'choose' line: the chosen function is not known until the launch",
                             self.spec.choices[0].span)
        assigned: dict[str, m.Span] = {}
        for stmt in self.spec.body:
            if isinstance(stmt, m.Loop):
                raise NoBackward(f"a loop ('for {stmt.axis.name.id} over {stmt.axis.dim.id}'): loops are not derived "
                                 f"yet; write the backward by hand ('backward <kernel>')", stmt.span)
            if isinstance(stmt, (m.Declare, m.Accumulate)):
                raise NoBackward(f"'{stmt.name.id}' is an accumulator, which is not derived yet; write the backward "
                                 f"by hand", stmt.span)
            if isinstance(stmt, m.Assign):
                if stmt.name.id in assigned:
                    raise NoBackward(f"'{stmt.name.id}' is assigned twice (line {assigned[stmt.name.id].line} and "
                                     f"here): its gradient would need the value it had at each use", stmt.span)
                assigned[stmt.name.id] = stmt.span
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
        through ``detach`` (whose gradient is zero: torch's detach, JAX's stop_gradient)."""
        if not _floaty(self.dtype(expr)):
            return False
        for sub in m.subexpressions(expr, prune=m.is_detach):
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
        """``expr`` with the parts a rule reads named (each a :class:`_Value` appended); ``top``: the
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
        if m.is_detach(expr):  # no rule reads what is inside
            return expr
        if isinstance(expr, m.Call):
            args = tuple(self.hoist(a, span) for a in expr.args)
            kwargs = tuple((k, v if isinstance(v, m.Ref) else self.hoist(v, span)) for k, v in expr.kwargs)
            call = dataclasses.replace(expr, args=args, kwargs=kwargs)
            function = lookup(expr.func)
            if function is None or function.kind == "cast" or not self.is_active(call):
                return call
            reads = _reads(function)
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
        self.values.append(_Value(name, expr))
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

    # ------------------------------------------------------------------ the reverse pass

    def text(self) -> str:
        self._refuse()
        stores: list[tuple[m.Store, m.Expr]] = []
        self.taken |= {s.name.id for s in self.spec.body if isinstance(s, m.Assign)}  # no hoisted value takes one
        for stmt in self.spec.body:
            if isinstance(stmt, m.Assign):
                value = self.hoist(stmt.value, stmt.span, top=True)
                self.taken.add(stmt.name.id)
                self.define(stmt.name.id, value)
            elif isinstance(stmt, m.Store):  # (_refuse leaves assignments and stores)
                stores.append((stmt, self.hoist(stmt.value, stmt.span)))
        self.adjoints: dict[str, list[_Adjoint]] = {}
        self.gradients: dict[str, list[tuple[tuple[object, ...], _Adjoint, m.Load]]] = {}
        # a float output stored at the grid's axes: its value, which the backward may read back (saved)
        self.saved = {m.expr_key(value): (store, value) for store, value in stores
                      if float_tensor(self.tensor(store.tensor.id))
                      and all(isinstance(i, m.Name) and i.id in self.axes for i in store.index)}
        seeds: list[m.Tensor] = []
        for store, value in stores:
            tensor = self.tensor(store.tensor.id)
            if not float_tensor(tensor) or not self.is_active(value):
                continue
            grad = "d" + tensor.name.id
            index = ", ".join(index_text(i) for i in store.index)
            seeds.append(tensor)
            axes = frozenset(i.id for i in store.index if isinstance(i, m.Name) and i.id in self.axes)
            self.visit(value, _Adjoint(f"f32({grad}[{index}])" if store.index else f"f32({grad})", axes))
        if not seeds:
            raise NoBackward("no float output depends on a float input (other than through 'detach')",
                             stores[0][0].span if stores else None)
        seeds = [t for t in self.spec.outputs if t in seeds]  # in the order the outputs are declared
        lines = self.lines
        for held in reversed(self.values):
            terms = self.adjoints.get(held.name)
            if not terms:
                continue
            own = set(self.local_axes[held.name])
            terms = [self.reduced(t, tuple(own)) for t in terms]
            if len({t.axes - own for t in terms}) > 1:  # broadcast along other grid axes: each summed on its own
                terms = [self.total(t, own, "d" + held.name) if t.axes - own else t for t in terms]
            total = _total(terms)
            adjoint = self.fresh("d" + held.name)
            lines.append(f"{adjoint} = {total.text}")
            self.local_axes[adjoint] = tuple(total.axes)
            self.visit(held.expr, _Adjoint(adjoint, total.axes, total.implicit))
        stores_text = self.store_gradients()
        lines[:] = _live(lines, stores_text)
        self.read_back = self.saved_values()
        used = self.used_values(lines + stores_text)
        self.read_outputs |= {self.read_back[name].tensor.id for name in used if name in self.read_back}
        body = [f"{v.name} = {self.value_text(v)}" for v in self.values if v.name in used]
        statements = body + lines + stores_text
        return self.header(seeds, used, lines + stores_text) + "".join(f"  {line}\n" for line in statements)

    def visit(self, expr: m.Expr, g: _Adjoint) -> None:
        """Add ``g``, the adjoint of ``expr``, to the adjoints of what it reads."""
        if not self.is_active(expr):
            return
        if isinstance(expr, m.Ref) and expr.name.id in self.differentiable:  # a 0-dim input's one element
            self.gradients.setdefault(expr.name.id, []).append((("zero_dim",), g, m.Load(expr.name, (), expr.span)))
        elif isinstance(expr, m.Ref):
            self.adjoints.setdefault(expr.name.id, []).append(g)
        elif isinstance(expr, m.Load):
            self.gradients.setdefault(expr.tensor.id, []).append((m.expr_key(expr), g, expr))
        elif isinstance(expr, m.Neg):
            self.visit(expr.operand, g.map(negate(g.text)))
        elif isinstance(expr, m.BinOp) and self.normalized(expr, g):
            pass
        elif isinstance(expr, m.BinOp):
            left, right = expr_text(expr.left), expr_text(expr.right)
            if expr.op == "+":
                self.visit(expr.left, g)
                self.visit(expr.right, g)
            elif expr.op == "-":
                self.visit(expr.left, g)
                self.visit(expr.right, g.map(negate(g.text)))
            elif expr.op == "*":
                self.visit(expr.left, g.map(binary("*", g.text, right), self.spanned(expr.right)))
                self.visit(expr.right, g.map(binary("*", g.text, left), self.spanned(expr.left)))
            elif expr.op == "/":
                self.visit(expr.left, g.map(binary("/", g.text, right), self.spanned(expr.right)))
                product = binary("/", binary("*", g.text, left), binary("*", right, right))
                self.visit(expr.right, g.map(negate(product), self.spanned(expr)))
        elif isinstance(expr, m.Call):
            self.call(expr, g)

    def normalized(self, expr: m.BinOp, g: _Adjoint) -> bool:
        """Softmax and log-softmax along a ``whole`` axis ``c``, whose adjoints read their result
        ``y`` alone: ``exp(z) / sum(exp(z), dim=c)`` gives ``z`` the adjoint ``y * (g - sum(g * y,
        dim=c))``, ``z - log(sum(exp(z), dim=c))`` gives it ``g - exp(y) * sum(g, dim=c)`` (torch's
        ``_softmax_backward_data`` and ``_log_softmax_backward_data``). Where the forward stores
        ``y`` as an output (at the grid's axes), the backward reads it back, saved by autograd, and
        recomputes neither the exponentials nor their sum. False (nothing visited) where ``expr`` is
        not one of the two."""
        def plain(e: m.Expr) -> m.Expr:  # through the names of hoisted and assigned values
            while isinstance(e, m.Ref) and (found := self.definition(e.name.id)) is not None:
                e = found
            return e

        def exp_of(e: m.Expr) -> m.Expr | None:
            e = plain(e)
            return e.args[0] if isinstance(e, m.Call) and e.func.id == "exp" and len(e.args) == 1 else None

        def summed(e: m.Expr) -> tuple[m.Expr, str] | None:
            e = plain(e)
            if not isinstance(e, m.Call) or reduction(e) is None or e.func.id != "sum" or len(e.args) != 1:
                return None
            axis = e.word("dim")
            if axis is None or axis not in self.axes or self.axes[axis].bounds != "whole":
                return None
            return e.args[0], axis

        same = m.expr_key
        if expr.op == "/" and (total := summed(expr.right)) is not None and (z := exp_of(expr.left)) is not None:
            operand, axis = total
            if same(plain(operand)) != same(plain(expr.left)):
                return False
            form = "{y} * ({g} - sum({g} * {y}, dim={c}))"
        elif expr.op == "-" and isinstance(log := plain(expr.right), m.Call) and log.func.id == "log" \
                and len(log.args) == 1 and (total := summed(log.args[0])) is not None:
            operand, axis = total
            z = expr.left
            inner = exp_of(operand)
            if inner is None or same(plain(inner)) != same(plain(z)):
                return False
            form = "{g} - exp({y}) * sum({g}, dim={c})"
        else:
            return False
        if axis not in g.axes or axis in g.implicit:
            return False
        found = self.saved.get(same(expr))
        if found is not None:
            self.read_outputs.add(found[0].tensor.id)
            y = f"f32({_read(found[0])})"
        else:
            y = expr_text(self.named(expr, "t", expr.span))
        y, gt = wrap(y, ATOM_LEVEL), wrap(g.text, ATOM_LEVEL)
        self.visit(z, g.map(form.format(y=y, g=gt, c=axis), self.spanned(expr)))
        return True

    def total(self, g: _Adjoint, keep: set[str], stem: str) -> _Adjoint:
        """``g`` summed over every axis it spans outside ``keep`` (its value's axes): inline where
        those are ``whole`` axes, else a value of its own (``dsum1 = sum(..., dim=h)``: a reduction
        across programs is a whole value in the language)."""
        text = self.summed(g, keep)
        if all(self.axes[a].bounds == "whole" or a in g.implicit for a in g.axes - keep):
            return _Adjoint(text, frozenset(g.axes & keep), g.implicit & keep)
        name = self.fresh(stem)
        self.lines.append(f"{name} = {text}")
        self.local_axes[name] = tuple(g.axes & keep)
        return _Adjoint(name, frozenset(g.axes & keep), g.implicit & keep)

    def reduced(self, g: _Adjoint, axes: tuple[str, ...]) -> _Adjoint:
        """``g`` summed over the ``whole`` axes it spans that ``axes`` (its value's) do not: a value
        broadcast along an axis inside the program gets the sum of its lanes' adjoints. A grid axis
        stays (the program holds a tile of it): the gradient's store sums it across programs, and a
        reduction over it sums it first (:meth:`total`)."""
        text, kept = g.text, set(g.axes)
        negated = text.startswith("-") and negate(text) != text
        text = negate(text) if negated else text
        summed = False
        for axis in self.spec.grid:
            if axis.name.id in g.axes and axis.name.id not in axes and axis.bounds == "whole":
                if axis.name.id in g.implicit:
                    text = binary("*", text, self.extent(axis))
                else:
                    text = f"sum({text}, dim={axis.name.id})"
                kept, summed = kept - {axis.name.id}, True
        if negated:
            text = negate(text) if summed else g.text
        return _Adjoint(text, frozenset(kept), g.implicit & frozenset(kept))

    def call(self, call: m.Call, g: _Adjoint) -> None:
        """Visit the operands of ``call`` with the adjoints its function's ``grad`` rules give."""
        function = lookup(call.func)
        if function is None:
            raise NoBackward(f"'{call.func.id}' has no gradient rule", call.span)
        if function.kind == "cast":
            self.visit(call.args[0], g)
            return
        names = ["x", *[p for p, _ in function.params]]
        values = dict.fromkeys(names, "") | {n: options[0] for n, options in function.choices.items()}
        operands: dict[str, m.Expr] = {}
        for key, arg in zip(names, call.args, strict=False):
            values[key], operands[key] = expr_text(arg), arg
        for word, value in call.kwargs:
            values[word.id] = value.name.id if isinstance(value, m.Ref) else expr_text(value)
            if not isinstance(value, m.Ref):
                operands[word.id] = value
        for key, default in function.params:
            values[key] = values[key] or (default or "")
        values["g"] = g.text
        values["y"] = self.value_of.get(m.expr_key(call)) or expr_text(call)
        dim = call.word("dim")  # a reduction's or a scan's axis (the checker requires one)
        axis = self.axes[dim] if dim is not None and function.kind in ("reduction", "scan") else None
        if function.kind == "reduction":  # a broadcast's adjoint is summed before it is spread again
            if axis is not None and axis.name.id in g.axes:
                g = self.total(g, set(self.spanned(call)), "d" + function.name)
            values["g"] = g.text
        if axis is not None:
            values["axis"] = axis.name.id
            values["size"] = expr_text(axis.extent) if axis.extent is not None else axis.dim.id
            values["flip"] = "false" if values.get("reverse") == "true" else "true"
        if function.kind == "scan" and axis is not None and (axis.name.id not in g.axes or axis.name.id in g.implicit):
            # a scan's adjoint constant along its axis: its scan the other way is that times a count
            count = (binary("-", self.extent(axis), axis.name.id) if values["flip"] == "true"
                     else binary("+", axis.name.id, "1"))
            self.visit(call.args[0], g.map(binary("*", g.text, count), (axis.name.id,)))
            return
        for key, arg in operands.items():
            if (function.selects and key == "x") or not self.is_active(arg):
                continue
            texts = {k: wrap(v, ATOM_LEVEL) for k, v in values.items()} | {f"{k}_": v for k, v in values.items()}
            text = function.grad_text(key, texts)
            if text is None:
                which = f"its argument '{key}'" if key != "x" else "its operand"
                raise NoBackward(f"'{function.name}' has no gradient rule for {which}", call.span)
            reads = _reads(function, key)
            real: set[str] = set()
            for name, operand in operands.items():
                if name in reads:
                    real |= set(self.spanned(operand))
            if "y" in reads:
                real |= set(self.spanned(call))
            adjoint = g.map(text, tuple(real))
            if function.kind == "reduction" and axis is not None and axis.name.id not in adjoint.axes:
                spread = axis.name.id  # spread along it
                adjoint = _Adjoint(adjoint.text, adjoint.axes | {spread}, adjoint.implicit | {spread})
            self.visit(arg, adjoint)

    # ------------------------------------------------------------------ the gradients' stores

    def store_gradients(self) -> list[str]:
        """The stores of the inputs' gradients. A tensor read at one index: its loads' adjoints added,
        summed over the axes the index lacks (the ``whole`` ones in the program, then the grid's
        across programs). Read also at a constant index (``x[0, c, 0, 0]``) or through a gather
        (``x[r, target[r]]``) beside a read at the grid's axes (``x[r, c]``): each such read's
        adjoint, summed over the axes it does not span, is added where the axes meet it
        (``where(c == target[r], ...)``), a scatter the one store says."""
        lines = []
        for tensor in self.spec.inputs:
            found = self.gradients.get(tensor.name.id)
            if not found:
                continue
            groups: dict[tuple[object, ...], list[tuple[_Adjoint, m.Load]]] = {}
            for key, g, load in found:
                groups.setdefault(key, []).append((g, load))
            main = next((key for key, reads in groups.items()
                         if all(_along(i, self.axes) for i in reads[0][1].index)), None)
            if main is None:
                main = next(iter(groups)) if len(groups) == 1 else None
            if main is None or not all(isinstance(i, m.Number) or _along(i, self.axes)
                                       for i in groups[main][0][1].index):
                loads = [ld for _, _, ld in found]
                how = ("through a gather" if any(isinstance(i, m.Load) for ld in loads for i in ld.index)
                       else "at a shifted index" if any(m.is_offset(i) for ld in loads for i in ld.index)
                       else "at two different indices")
                raise NoBackward(f"'{tensor.name.id}' is read {how}: its gradient is a scatter, which is not "
                                 f"derived yet; write the backward by hand", found[0][2].span)
            load = groups[main][0][1]
            terms = [g for g, _ in groups[main]]
            for key, reads in groups.items():
                if key != main:
                    terms.append(self.scattered(tensor, load, reads))
            index_axes = set(self.spanned(load))
            value = self.stored(terms, index_axes)
            index = ", ".join(index_text(i) for i in load.index)
            lines.append(f"d{tensor.name.id}[{index}] = {value}" if load.index else f"d{tensor.name.id} = {value}")
        return lines

    def stored(self, terms: list[_Adjoint], keep: set[str]) -> str:
        """The value a gradient's store writes: ``terms`` added, each summed over the axes it spans
        outside ``keep``. Where one is summed across programs along a grid axis, the store is that
        one reduction (the language's rule for a store across programs): every term goes inside it,
        one constant along the axis divided by its extent (``sum(dt + dsum / M, dim=r)``)."""
        across = {a for t in terms for a in t.axes - t.implicit - keep if self.axes[a].bounds != "whole"}
        if len(terms) == 1 or not across:
            return _total([_Adjoint(self.summed(t, keep), t.axes & keep) for t in terms]).text
        inside = []
        for term in terms:
            text = self.summed(term, keep | across)
            for axis in self.spec.grid:
                if axis.name.id in across and axis.name.id not in term.axes:
                    text = binary("/", text, self.extent(axis))
            inside.append(_Adjoint(text, frozenset()))
        value = _total(inside).text
        grid = [a for a in self.spec.grid if a.name.id in across]
        self.across |= {a.name.id for a in grid if a.block is not None}
        for axis in reversed(grid):
            value = f"sum({value}, dim={axis.name.id})"
        return value

    def summed(self, adjoint: _Adjoint, keep: set[str]) -> str:
        """``adjoint``'s text summed over the axes it spans outside ``keep``: the ``whole`` ones (in
        the program) innermost, then the grid's (across programs), the last axis first."""
        extra = adjoint.axes - keep
        value = adjoint.text
        for axis in self.spec.grid:  # constant along it: the sum of its lanes is the extent's multiple
            if axis.name.id in extra & adjoint.implicit:
                value = binary("*", value, self.extent(axis))
        extra -= adjoint.implicit
        whole = [a for a in self.spec.grid if a.name.id in extra and a.bounds == "whole"]
        grid = [a for a in self.spec.grid if a.name.id in extra and a.bounds != "whole"]
        self.across |= {a.name.id for a in grid if a.block is not None}
        for axis in whole + list(reversed(grid)):
            value = f"sum({value}, dim={axis.name.id})"
        return value

    @staticmethod
    def extent(axis: m.Axis) -> str:
        """The number of lanes of ``axis`` as spec text (``N``, ``(C / G)``)."""
        return wrap(expr_text(axis.extent), ATOM_LEVEL) if axis.extent is not None else axis.dim.id

    def scattered(self, tensor: m.Tensor, main: m.Load, reads: list[tuple[_Adjoint, m.Load]]) -> _Adjoint:
        """The adjoint of ``reads`` (loads of ``tensor`` at another index than ``main``'s, which is
        all axes) at ``main``'s lanes: summed over the axes the read does not span, kept where each
        axis of ``main`` equals the read's index there (a constant, or a gather's loaded index)."""
        read = reads[0][1]
        conditions, shifts = [], []
        for position, (mine, theirs) in enumerate(zip(main.index, read.index, strict=True)):
            if m.expr_key(theirs) == m.expr_key(mine):
                continue
            if not isinstance(mine, m.Name):  # an offset (main's index is axes and offsets, _along)
                # x[g * CG + c] beside x[g * CG]: the read is where c == 0
                if (isinstance(mine, m.BinOp) and mine.op == "+" and isinstance(mine.right, m.Ref)
                        and m.expr_key(mine.left) == m.expr_key(theirs)):
                    conditions.append(f"{mine.right.name.id} == 0")
                    continue
                raise NoBackward(f"'{tensor.name.id}' is read at two different offsets: its gradient is a scatter, "
                                 f"which is not derived yet; write the backward by hand", read.span)
            offset = _offset(theirs, mine.id)
            if offset is not None:  # x[d + K]: its adjoint at d is x's gradient at d + K
                dim = tensor.dims[position]
                shifts.append((mine.id, offset, dim.id if isinstance(dim, m.Name) else dim.text))
                continue
            if m.is_offset(theirs) or isinstance(theirs, m.Name):
                raise NoBackward(f"'{tensor.name.id}' is read at an index of another axis: its gradient is a "
                                 f"scatter, which is not derived yet; write the backward by hand", read.span)
            conditions.append(f"{mine.id} == {index_text(theirs)}")
        own = set(self.spanned(read))
        terms = [self.total(g, own, f"d{tensor.name.id}_read") for g, _ in reads]
        total = _total(terms).text
        for axis, (op, amount), _ in shifts:  # the adjoint at d - K (d + K for x[d - K])
            back = "-" if op == "+" else "+"
            moved = self.shifted(_parse_expression(total), axis, back, amount, read)
            if not _vanishes(moved):  # outside the row it must be 0, as the forward's read there was
                raise NoBackward(f"'{tensor.name.id}' is read at a shifted index, and its gradient there is not a "
                                 f"product with a value read at the shifted index (0 outside the row); write the "
                                 f"backward by hand", read.span)
            total = expr_text(moved)
        if not conditions:
            return _Adjoint(total, frozenset(own | set(self.spanned(main))))
        mask = " & ".join(conditions)
        return _Adjoint(f"where({mask}, {total}, 0.0)", frozenset(own | set(self.spanned(main))))

    def shifted(self, expr: m.Expr, axis: str, op: str, amount: m.Expr, read: m.Load) -> m.Expr:
        """``expr`` at ``axis op amount`` instead of ``axis``: its loads' indices moved, the values it
        reads along ``axis`` written out (recomputed there), ``axis`` itself moved; what does not vary
        along ``axis`` (a row's statistic, a reduction over it) as it is."""
        if axis not in self.spanned(expr):
            return expr
        span = expr.span

        def moved(item: IndexItem) -> IndexItem:
            if isinstance(item, m.Name) and item.id == axis:
                return m.BinOp(op, m.Ref(item, span), amount, span)
            if isinstance(item, (m.BinOp, m.Neg)) and axis in m.offset_names(item):  # an offset (m.is_offset)
                cancelled = _offset(item, axis)
                if cancelled is not None and cancelled[0] != op and m.expr_key(cancelled[1]) == m.expr_key(amount):
                    return m.Name(axis, span)
                return m.BinOp(op, item, amount, span)
            return item

        if isinstance(expr, m.Load):
            # (an index holds offsets, BinOp and Neg, which the annotation of m.Load.index leaves out)
            index = cast("tuple[m.Name | m.Number | m.Load, ...]", tuple(moved(i) for i in expr.index))
            return dataclasses.replace(expr, index=index)
        if isinstance(expr, m.Ref):
            if expr.name.id == axis:
                return m.BinOp(op, expr, amount, span)
            definition = self.definition(expr.name.id)
            if definition is None:
                raise NoBackward(f"'{read.tensor.id}' is read at a shifted index whose gradient needs "
                                 f"'{expr.name.id}' elsewhere along '{axis}'; write the backward by hand", read.span)
            return self.shifted(definition, axis, op, amount, read)
        if isinstance(expr, m.Neg):
            return dataclasses.replace(expr, operand=self.shifted(expr.operand, axis, op, amount, read))
        if isinstance(expr, m.BinOp):
            return dataclasses.replace(expr, left=self.shifted(expr.left, axis, op, amount, read),
                                       right=self.shifted(expr.right, axis, op, amount, read))
        if isinstance(expr, m.Call):
            if (function := lookup(expr.func)) is not None and function.kind == "scan":
                raise NoBackward(f"'{read.tensor.id}' is read at a shifted index and its gradient scans along "
                                 f"'{axis}'; write the backward by hand", read.span)
            return dataclasses.replace(expr, args=tuple(self.shifted(a, axis, op, amount, read) for a in expr.args))
        return expr

    def definition(self, name: str) -> m.Expr | None:
        """The expression a value of the backward is (a recomputed forward value, or an adjoint
        line that is not a reduction across programs), to be written out elsewhere; None if none."""
        value = next((v for v in self.values if v.name == name), None)
        if value is not None:
            return value.expr
        for line in self.lines:
            target, text = line.split(" = ", 1)
            if target == name:
                expr = _parse_expression(text)
                grid = {a.name.id for a in self.spec.grid if a.bounds != "whole"}
                if any(isinstance(e, m.Call) and reduction(e) is not None and e.word("dim") in grid
                       for e in m.subexpressions(expr)):
                    return None
                return expr
        return None

    def saved_values(self) -> dict[str, m.Store]:
        """The assigned values the forward stores exactly (a float32 row statistic, ``mu[r] =
        row_mean``: of :attr:`saved`, those whose output has the value's dtype and whose index is
        the value's axes): the backward reads them back from the output, saved by autograd,
        instead of recomputing them (layer norm's mean and rstd, two reductions of each row).
        Their adjoints still follow the expressions that computed them. Name -> the store."""
        found: dict[str, m.Store] = {}
        for store, value in self.saved.values():
            if not isinstance(value, m.Ref) or value.name.id not in self.local_axes:
                continue
            exact = self.tensor(store.tensor.id).dtype.id == self.local_dtypes.get(value.name.id)
            index = {i.id for i in store.index if isinstance(i, m.Name)}  # (all of it: see saved)
            if exact and index == set(self.local_axes[value.name.id]):
                found[value.name.id] = store
        return found

    def value_text(self, value: _Value) -> str:
        """The text a value's line of the backward computes it by: its read-back output, if any."""
        store = self.read_back.get(value.name)
        return _read(store) if store is not None else expr_text(value.expr)

    def used_values(self, lines: list[str]) -> set[str]:
        """The values the backward's ``lines`` read, directly or through other values."""
        words = _words(" ".join(lines))
        by_name = {v.name: v for v in self.values}
        used: set[str] = set()
        todo = [w for w in words if w in by_name]
        while todo:
            name = todo.pop()
            if name in used:
                continue
            used.add(name)
            if name in self.read_back:  # read from its output: nothing recomputed
                continue
            todo += [e.name.id for e in m.subexpressions(by_name[name].expr) if isinstance(e, m.Ref)
                     and e.name.id in by_name]
        return used

    def wider_configs(self) -> list[str]:
        """Configs the backward adds to the forward's where a gradient is summed across programs
        along a tiled axis (a weight's, over the rows): that axis's block at 2 and 4 times the
        configs' largest, with their most warps, so that fewer programs each store a partial sum
        (as the hand-written rms_norm_backward's configs do)."""
        if self.spec.tune is None:
            return []
        tune = self.spec.tune
        if self.walk_rows():  # a persistent walk: few partials already
            return self.pipelined_configs(tune)
        lines: list[str] = []
        for axis in self.spec.grid:
            if axis.name.id not in self.across or axis.block is None:  # (the axes in across have a block)
                continue
            block = axis.block.id
            values = [int(v.text) for c in tune.configs if (v := c.get(block)) is not None]
            warps = [int(w.text) for c in tune.configs if (w := c.get("num_warps")) is not None]
            if not values or any(len(c.settings) > 2 for c in tune.configs):
                continue  # the block is not tuned alone (with num_warps): leave the configs as written
            most = max(warps, default=4)
            for factor in (2, 4):
                setting = f"{block} = {max(values) * factor}"
                lines.append(f"    config {setting}" + (f", num_warps = {most}" if warps else "") + "\n")
            lines[-2:] = ["    # more rows a program: fewer partial sums of the gradients summed across programs\n",
                          *lines[-2:]]
        return lines

    def header(self, seeds: list[m.Tensor], used: set[str], lines: list[str]) -> str:
        spec = self.spec
        words = _words(" ".join(lines + [self.value_text(v) for v in self.values if v.name in used]))
        ins = [f"  in  d{t.name.id}: {declared(t)}\n" for t in seeds]
        needed = [t for t in spec.inputs if t.name.id in words]
        sizes = {d.id for t in seeds + needed for d in t.dims if isinstance(d, m.Name)}
        sizes |= {t.name.id for t in needed if t.is_scalar}
        wanted = [a.dim.id for a in spec.grid if a.extent is None and not a.literal]
        wanted += [n for a in spec.grid if a.extent is not None for n in m.offset_names(a.extent)]
        for name in wanted:  # a size (or a scalar the grid is over) that no input taken so far gives
            if name in sizes:
                continue
            extra = next((t for t in spec.inputs if (t.is_scalar and t.name.id == name)
                          or any(isinstance(d, m.Name) and d.id == name for d in t.dims)), None)
            if extra is None:
                raise NoBackward(f"the grid's size '{name}' comes from no input of the backward")
            needed.append(extra)
            sizes |= {d.id for d in extra.dims if isinstance(d, m.Name)} | {extra.name.id}
        ins += [f"  in  {t.name.id}: {declared(t)}\n" for t in spec.inputs if t in needed]
        ins += [f"  in  {t.name.id}: {declared(t)}\n" for t in spec.outputs if t.name.id in self.read_outputs]
        outs = [f"  out d{t.name.id}: {declared(t)}\n" for t in spec.inputs if t.name.id in self.gradients]
        saved = [t.name.id for t in spec.outputs if t.name.id in self.read_outputs]
        source = "its inputs" + (f" and its output{'s' if len(saved) > 1 else ''} {', '.join(saved)}" if saved else "")
        return (f"# The backward of {safe_path(spec.path)}, derived by tilegen (tilegen show --grad): the forward\n"
                f"# recomputed from {source}, then each value's adjoint, in reverse order.\n"
                f"kernel {self.name}\n" + "".join(declarations(spec, ins + outs, self.wider_configs(),
                                                                rewrite=self.persistent_rows)))

    def pipelined_configs(self, tune: m.Tune) -> list[str]:
        """A persistent backward's added configs: the forward's configs (``tune``'s) of its largest row block,
        again with ``num_stages = 2``, so that a program loads its next row tile while it
        computes this one (on the H100 the hand-written norm backwards' best configs were so,
        ``c43ff28:benchmarks/explore/explore_persistent_norm_h100.log``)."""
        block = next(a.block.id for a in self.spec.grid if a.bounds != "whole" and a.block is not None)
        sized = [(c, int(v.text)) for c in tune.configs if (v := c.get(block)) is not None]
        if not sized or any(c.get("num_stages") is not None for c, _ in sized):
            return []
        largest = max(size for _, size in sized)
        lines = [f"    config {', '.join(f'{p.name.id} = {setting_value(p).text}' for p in c.settings)}, "
                 "num_stages = 2\n" for c, size in sized if size == largest]
        return ["    # a persistent program walks several row tiles: the next one's loads pipelined\n", *lines]

    def persistent_rows(self, word: str, line: str) -> str:
        """The grid line, made persistent (``grid  persistent r over M by BM, c over N whole``)
        where a gradient is summed across programs along the grid's one tiled axis beside whole
        ones: each program then walks row tiles and stores one partial of the sum, not one per row
        tile (on the H100, rms_norm's backward went from 46% to 66% of DRAM peak so)."""
        if word != "grid" or not self.walk_rows():
            return line
        return re.sub(r"^(\s*grid)\s+", r"\1  persistent ", line)

    def walk_rows(self) -> bool:
        """Whether the backward's grid is made persistent (:meth:`persistent_rows`): a plain grid
        of one tiled axis beside whole ones, along which a gradient is summed across programs."""
        spec = self.spec
        launched = [a for a in spec.grid if a.bounds != "whole"]
        rows = (len(launched) == 1 and launched[0].block is not None and not launched[0].is_index
                and launched[0].name.id in self.across)
        return rows and not spec.flat and not spec.persistent and spec.swizzle is None


def _read(store: m.Store) -> str:
    """The load of what ``store`` wrote, at its index (``mu[r]``)."""
    return f"{store.tensor.id}[{', '.join(index_text(i) for i in store.index)}]"


def _words(text: str) -> set[str]:
    """The names spec text mentions (values, tensors, functions, axes)."""
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _live(lines: list[str], stores: list[str]) -> list[str]:
    """The adjoint ``lines`` (``name = text``, in order) that the ``stores`` read, directly or
    through later lines: an adjoint every use of which another rule wrote out is dropped."""
    read = _words(" ".join(stores))
    kept = []
    for line in reversed(lines):
        target, text = line.split(" = ", 1)
        if target in read:
            kept.append(line)
            read |= _words(text)
    return kept[::-1]


def _along(item: IndexItem, axes: Container[str]) -> bool:
    """True for an index item that walks the grid: an axis, or an offset over one (``g * CG + c``)."""
    if isinstance(item, m.Name):
        return item.id in axes
    return isinstance(item, (m.BinOp, m.Neg)) and any(n in axes for n in m.offset_names(item))  # (m.is_offset)


def _vanishes(expr: m.Expr) -> bool:
    """True where ``expr`` is 0 wherever a load of it at a shifted index reads outside its tensor
    (which reads 0): a product, quotient or cast with such a load as a factor."""
    if isinstance(expr, m.Load):
        return any(m.is_offset(i) for i in expr.index)
    if isinstance(expr, m.Neg):
        return _vanishes(expr.operand)
    if isinstance(expr, m.BinOp):
        return (expr.op == "*" and (_vanishes(expr.left) or _vanishes(expr.right))) or (
            expr.op == "/" and _vanishes(expr.left))
    if isinstance(expr, m.Call) and (function := lookup(expr.func)) is not None and function.kind == "cast":
        return _vanishes(expr.args[0])
    return False


def _offset(item: IndexItem, axis: str) -> tuple[str, m.Expr] | None:
    """``(op, K)`` of an index item ``axis + K`` or ``axis - K`` (K free of axes), else None."""
    if (isinstance(item, m.BinOp) and item.op in "+-" and isinstance(item.left, m.Ref)
            and item.left.name.id == axis and axis not in m.offset_names(item.right)):
        return item.op, item.right
    return None


def _parse_expression(text: str) -> m.Expr:
    """Spec text of one expression as the model (through the spec parser: a one-line body)."""
    from tilegen.parser import parse

    line = parse(f"kernel e\n  e = {text}\n", "<derived>").body[0]
    if not isinstance(line, m.Assign):  # (`e = ...` parses as one)
        raise ValueError(f"not an expression: {text}")
    return line.value


def _reads(function: Function, operand: str | None = None) -> set[str]:
    """The values ``function``'s gradient rule for ``operand`` (None: any) reads besides ``g``: ``x``,
    ``y``, params' names (a callable rule: ``x`` and every param)."""
    import string

    rules = [function.grad[operand]] if operand is not None else list(function.grad.values())
    found: set[str] = set()
    for rule in rules:
        if callable(rule):
            found |= {"x", *(p for p, _ in function.params)}
        else:
            found |= {f.rstrip("_") for _, f, _, _ in string.Formatter().parse(rule) if f}
    return found - {"g"}


def float_tensor(tensor: m.Tensor) -> bool:
    """True for a tensor of a float dtype (a dtype variable: every dtype it may stand for)."""
    if isinstance(tensor.dtype, m.BoundDtype):
        return all(is_float(o) for o in tensor.dtype.options)
    return is_float(tensor.dtype.id)


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


def declared(tensor: m.Tensor) -> str:
    """``T[M, N]`` as the spec declares it (a scalar's range kept: ``i32 in [4, 4]``)."""
    dims = ", ".join(d.id if isinstance(d, m.Name) else d.text for d in tensor.dims)
    shape = f"[{dims}]" if tensor.dims or tensor.zero_dim else ""
    sample = f" in [{tensor.sample[0].text}, {tensor.sample[1].text}]" if tensor.sample and tensor.is_scalar else ""
    return f"{m.as_written(tensor.dtype)}{shape}{sample}"


def declarations(spec: m.Spec, tensors: list[str], configs: Sequence[str] = (),
                 keep: Callable[[str], bool] = lambda line: True,
                 rewrite: Callable[[str, str], str] = lambda word, line: line) -> list[str]:
    """A backward's declaration lines (each ending in a newline): the forward's dtype variables,
    then ``tensors`` (the backward's ``in``/``out`` lines), then the forward's blocks, grid, swizzle,
    tune with the configs ``keep`` keeps and then ``configs``, access and split tail, each line as
    written or as ``rewrite(first word, line)`` makes it."""
    head: list[str] = []
    rest: list[str] = []
    inside = False
    for line in m.source_lines(spec.source):
        words = line.split()
        if not words:
            continue
        if inside and line.startswith("    "):
            rest += [line + "\n"] if keep(line) else []
            continue
        if inside:
            rest += configs
        inside = False
        if words[0] in _COPIED and line.startswith("  ") and not line.startswith("   "):
            (head if words[0] == "dtype" else rest).append(rewrite(words[0], line) + "\n")
            inside = words[0] == "tune"
    if inside:
        rest += configs
    return head + list(tensors) + rest


__all__ = ["NoBackward", "backward_name", "declarations", "declared", "derive_backward", "derive_backwards",
           "float_tensor"]
