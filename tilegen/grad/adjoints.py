"""The adjoints of expressions: the operators' rules here, the functions' from their ``grad``
templates (:data:`tilegen.functions.FUNCTIONS`), softmax and log-softmax as one rule each, a
broadcast's adjoint summed over the axes its value lacks.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.functions import lookup, reduction
from tilegen.grad.adjoint import Adjoint, read_text
from tilegen.grad.declarations import NoBackward
from tilegen.grad.forward import Forward, reads_of
from tilegen.spec_text import ATOM_LEVEL, binary, expr_text, negate, wrap


class Adjoints(Forward):
    """The reverse pass over expressions: each operation's adjoints, by its rule."""

    def visit(self, expr: m.Expr, g: Adjoint) -> None:
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

    def normalized(self, expr: m.BinOp, g: Adjoint) -> bool:
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
            y = f"f32({read_text(found[0])})"
        else:
            y = expr_text(self.named(expr, "t", expr.span))
        y, gt = wrap(y, ATOM_LEVEL), wrap(g.text, ATOM_LEVEL)
        self.visit(z, g.map(form.format(y=y, g=gt, c=axis), self.spanned(expr)))
        return True

    def total(self, g: Adjoint, keep: set[str], stem: str) -> Adjoint:
        """``g`` summed over every axis it spans outside ``keep`` (its value's axes): inline where
        those are ``whole`` axes, else a value of its own (``dsum1 = sum(..., dim=h)``: a reduction
        across programs is a whole value in the language)."""
        text = self.summed(g, keep)
        if all(self.axes[a].bounds == "whole" or a in g.implicit for a in g.axes - keep):
            return Adjoint(text, frozenset(g.axes & keep), g.implicit & keep)
        name = self.fresh(stem)
        self.lines.append(f"{name} = {text}")
        self.local_axes[name] = tuple(g.axes & keep)
        return Adjoint(name, frozenset(g.axes & keep), g.implicit & keep)

    def reduced(self, g: Adjoint, axes: tuple[str, ...]) -> Adjoint:
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
        return Adjoint(text, frozenset(kept), g.implicit & frozenset(kept))

    def call(self, call: m.Call, g: Adjoint) -> None:
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
            reads = reads_of(function, key)
            real: set[str] = set()
            for name, operand in operands.items():
                if name in reads:
                    real |= set(self.spanned(operand))
            if "y" in reads:
                real |= set(self.spanned(call))
            adjoint = g.map(text, tuple(real))
            if function.kind == "reduction" and axis is not None and axis.name.id not in adjoint.axes:
                spread = axis.name.id  # spread along it
                adjoint = Adjoint(adjoint.text, adjoint.axes | {spread}, adjoint.implicit | {spread})
            self.visit(arg, adjoint)

    def summed(self, adjoint: Adjoint, keep: set[str]) -> str:
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
