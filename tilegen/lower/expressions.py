"""Expressions in the kernel: numbers, locals, index values, arithmetic and masks, and the
calls of :mod:`tilegen.functions` (math in float32, helpers, reductions over one axis).

:class:`Expressions` holds the :class:`~tilegen.lower.state.KernelState` it reads (``spec``,
``axes``, ``locals``, ``dtypes``, ``canonical``, ``scaled``, ``known_conditions``) and extends
(``helpers``, names), and emits the loads an expression needs through an
:class:`~tilegen.lower.access.Access`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeGuard

from tilegen import model as m
from tilegen.dtypes import (
    BOOL,
    COMPARISONS,
    DTYPE_LIMITS,
    FP8,
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
from tilegen.functions import (
    HELPERS,
    MAX_MULTIPLIED_EXPONENT,
    Function,
    folded,
    function_of,
    literal_value,
    lookup,
    spanned_axes,
)
from tilegen.lower.access import Access
from tilegen.lower.checked import tensor_of
from tilegen.lower.names import BF16_DOT_OPERAND, binop_text, broadcast, broadcast_tile, number_text, tuple_text
from tilegen.lower.names import triton_dtype as triton_dtype_text
from tilegen.lower.pieces import local_name
from tilegen.lower.plan import IfBlock, Line, Op
from tilegen.lower.state import KernelState


def constant_text(value: int | float) -> str:
    """A folded number as Triton text (``float("inf")``, ``float("nan")``, ``0.1``, ``2``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


def triton_dtype(left: str, right: str, op: str) -> str | None:
    """The dtype Triton computes ``left op right`` of two tiles in (its own promotion rules, which
    differ from the spec's: f16 with bf16 is f16, u8 with i8 is u8, and a division of f16 or bf16
    is float32), or None where Triton refuses (``/`` of integers of both signednesses) or where an
    operand is fp8 (converted to the spec's dtype first)."""
    divide = op == "/"
    pair = {left, right}
    if pair & set(FP8):  # Triton's fp8 arithmetic is not torch's (which has none): convert first
        return None
    if "f64" in pair:
        return "f64"
    if divide and (is_float(left) or is_float(right)):
        return "f32"
    for dtype in ("f32", "f16"):
        if dtype in pair:
            return dtype
    if "bf16" in pair:
        return "bf16" if pair == {"bf16"} else "f32"
    if divide:
        return None if "u8" in pair and len(pair) > 1 else "f32"
    if "u8" in pair and len(pair) > 1:  # C's rule: the unsigned operand wins where it is as wide
        signed = right if left == "u8" else left
        return "u8" if signed == "i8" else signed
    return max(pair, key=lambda d: int(d[1:]))



#: The dtypes a conversion to or from bf16 takes through float32: Triton's interpreter converts
#: bf16's bits there (see :meth:`Expressions.in_f32`).
_THROUGH_F32 = (*(d for d in m.DTYPES if is_int(d)), BOOL, "f64")

class ExpressionTypes:
    """What the Triton text of spec expressions rests on: their dtypes (as written and as the
    kernel computes them), their tile axes, and the conversions between dtypes (:class:`Expressions`
    writes the text)."""

    def __init__(self, state: KernelState, access: Access):
        self.state = state
        self.access = access

    def dtype_of(self, expr: m.Expr) -> str | None:
        """The spec dtype ``expr`` computes to (None for a literal), see :mod:`tilegen.dtypes`."""
        state = self.state

        def local(name: str) -> str | None:
            if name in state.locals:
                return state.dtypes.get(name)
            tensor = state.spec.tensor(name)
            return tensor.dtype.id if tensor is not None else INDEX  # an axis or a size

        return expr_dtype(expr, state.spec, local)

    def possible_dtypes(self, expr: m.Expr) -> tuple[str | None, ...]:
        """Every dtype ``expr`` may compute to over the spec's specializations
        (:func:`tilegen.dtypes.possible_dtypes`)."""
        return possible_dtypes(self.dtype_of(expr), self.state.spec)

    def expr_axes(self, expr: m.Expr) -> tuple[str, ...]:
        """The tile axes ``expr`` spans in the kernel (index axes are scalars, not tile axes)."""
        state = self.state

        def own(part: m.Expr) -> tuple[str, ...] | None:
            if isinstance(part, m.Load):
                return self.access.tile_axes(part.index)
            if isinstance(part, m.Ref):
                name = part.name.id
                if name in state.locals:
                    return state.locals[name]
                return (name,) if name in state.axes and not state.axes[name].scalar else ()  # index values
            if isinstance(part, m.Number):
                return ()
            if isinstance(part, m.Call) and m.is_dot(part):  # the first operand's other axis, then the second's
                a, b = (self.expr_axes(arg) for arg in part.args)
                return tuple(x for x in a if x not in b) + tuple(x for x in b if x not in a)
            return None

        return spanned_axes(expr, own)

    def converts(self, expr: m.Expr, narrow: tuple[str, ...] | None = None) -> bool:
        """:func:`tilegen.dtypes.converts_to_f32` of ``expr``'s dtype over every binding of the
        spec's dtype variables, but a cast to a dtype written out (``f32(p)``, not ``T(p)``) has
        that dtype under every binding: ``f32(dy)`` in a spec with ``dtype T in f32, f16`` is no
        f16 tile, and is not converted again (``dy.to(tl.float32).to(tl.float32)``)."""
        spec = self.state.spec
        if isinstance(expr, m.Call) and expr.func.id in m.DTYPES and not isinstance(expr.func, m.BoundDtype):
            spec = dataclasses.replace(spec, dtype_vars=())
        return converts_to_f32(self.dtype_of(expr), spec, narrow)

    def upcast(self, text: str, expr: m.Expr, compound: bool = True) -> str:
        """``text`` (the Triton text of ``expr``) in float32 when ``expr`` is f16, bf16 or an
        integer, under any binding of the spec's dtype variables: math computes in float32, as
        torch does (a no-op for the f32 binding, so one kernel serves every binding)."""
        if not self.converts(expr):
            return text
        if compound and isinstance(expr, (m.BinOp, m.Neg)):
            return f"({text}).to(tl.float32)"
        return f"{text}.to(tl.float32)"

    def fixed(self, dtype: str | None) -> TypeGuard[str]:
        """A dtype that is the same under every binding of the spec's dtype variables (a cast the
        kernel writes must not differ between bindings: one kernel serves them all)."""
        return dtype in m.DTYPES and dtype != BOOL and possible_dtypes(dtype, self.state.spec) == (dtype,)

    def written(self, expr: m.Expr) -> str | None:
        """The Triton text of ``expr``'s dtype, the same under every binding of the spec's dtype
        variables: ``tl.bfloat16``, or the variable's name (``T``) for a tile typed with one; None
        for a literal, a mask, and where the parts' dtypes are not one (``T`` with ``f32``)."""
        dtype = self.dtype_of(expr)
        if dtype in (None, WEAK_FLOAT, BOOL):
            return None
        if self.fixed(dtype):
            return m.DTYPES[dtype][0]
        spec, state = self.state.spec, self.state
        if isinstance(expr, m.Load):
            return triton_dtype_text(tensor_of(spec, expr.tensor.id).dtype)
        if isinstance(expr, m.Ref):
            if expr.name.id in state.locals:
                return state.written.get(local_name(state, expr.name.id), state.written.get(expr.name.id))
            tensor = spec.tensor(expr.name.id)
            return triton_dtype_text(tensor.dtype) if tensor is not None else None
        if isinstance(expr, m.Neg):
            return self.written(expr.operand)
        if isinstance(expr, m.BinOp):
            return None if expr.op in LOGIC or expr.op in COMPARISONS else self.joint(expr.left, expr.right)
        if isinstance(expr, m.Call):
            function = lookup(expr.func)
            if function is None:
                return None
            if function.kind == "cast":
                return triton_dtype_text(expr.func)
            if function.kind == "math" and set(self.possible_dtypes(expr.args[0])) <= {"f32", "f64"}:
                return self.written(expr.args[0])  # math keeps f32 and f64
            if function.kind == "elementwise" or function.name in ("max", "min"):
                return self.joint(*(expr.args[1:] if function.selects else expr.args))
        return None

    def joint(self, *exprs: m.Expr) -> str | None:
        """:meth:`written` of values that compute together (``a + b``, ``maximum(a, b)``): their
        one dtype text where literals (and integers, where a float is among them) aside they share
        it, else None."""
        typed = [e for e in exprs if self.dtype_of(e) not in (None, WEAK_FLOAT)]
        if any(self.dtype_of(e) != SCALAR_F64 for e in typed):  # an f64 scalar takes the other's dtype
            typed = [e for e in typed if self.dtype_of(e) != SCALAR_F64]
        floats = [e for e in typed if is_float(self.dtype_of(e))]
        texts = {self.written(e) for e in floats or typed}
        return texts.pop() if len(texts) == 1 else None

    def rounds_bf16(self, written: str | None) -> TypeGuard[str]:
        """Whether a value of the dtype text ``written`` (:meth:`written`) may be bf16: then the
        kernel computes on it in float32 and rounds each result back (:meth:`in_f32`)."""
        if written == m.DTYPES["bf16"][0]:
            return True
        spec = self.state.spec
        return written in {v.name.id for v in spec.dtype_vars} and "bf16" in spec.options_of(written)

    def in_f32(self, text: str, expr: m.Expr, target: str) -> tuple[str, bool]:
        """``text`` (of ``expr``) as a float32 operand of an operation whose result is the possibly
        bf16 dtype ``target`` (:meth:`rounds_bf16`), and whether the text is now one term.

        Triton's interpreter keeps bf16 as uint16 bit patterns and computes on the bits
        (triton-lang/triton#4972), so bf16 operations compute in float32, each result rounded back
        to bf16 as torch's are (for ``+ - * /`` bit-identical to bf16 arithmetic: float32 has more
        than twice bf16's precision, so rounding twice is innocuous). A literal is left as it is
        (Triton computes it with the float32 tile in float32), a float32 tile is not converted
        again, and an integer is rounded to ``target`` first (through float32, as torch's
        conversion of an integer to bf16 goes)."""
        dtype = self.dtype_of(expr)
        if dtype in (None, WEAK_FLOAT) or self.written(expr) == "tl.float32":
            return text, False
        rounded = isinstance(expr, (m.BinOp, m.Neg)) and self.rounds_bf16(self.written(expr))
        if isinstance(expr, (m.BinOp, m.Neg)) and not rounded:
            text = f"({text})"
        if is_int(dtype) or dtype == BOOL:
            return f"{text}.to(tl.float32).to({target}).to(tl.float32)", True
        return f"{text}.to(tl.float32)", True

    def converted(self, text: str, expr: m.Expr, target: str | None) -> str:
        """``text`` (of ``expr``) in the spec dtype ``target``: a tile of another fixed dtype is cast
        (``.to(tl.int16)``; bf16 to or from an integer or f64 through float32, as
        :meth:`casts_through_f32` says why), a negative integer literal meeting u8 wraps as torch's
        does (``-1``: ``255``), an f64 scalar value rounded to a float32 ``target``
        (``where(m, beta, x)`` of an f32 ``x``, see :meth:`weak_scalar`); anything else is left to
        Triton."""
        dtype = self.dtype_of(expr)
        value = literal_value(expr)
        if dtype is None and target == "u8" and value is not None and value < 0:
            return str(int(value) % 256)
        if dtype == SCALAR_F64 and self.fixed(target) and is_float(target) and target != "f64":
            text = f"({text})" if isinstance(expr, (m.BinOp, m.Neg)) else text
            return f"{text}.to({m.DTYPES[target][0]})"
        if not self.fixed(dtype) or dtype == target or not self.fixed(target):
            return text
        text = f"({text})" if isinstance(expr, (m.BinOp, m.Neg)) else text
        if "bf16" in (dtype, target) and (dtype in _THROUGH_F32 or target in _THROUGH_F32):  # see in_f32
            text = f"{text}.to(tl.float32)"
        return f"{text}.to({m.DTYPES[target][0]})"

    def weak_scalar(self, text: str, expr: m.Expr, other: m.Expr, other_text: str) -> str:
        """``text`` (of ``expr``) rounded to float32, or to the dtype of ``other`` (its text
        ``other_text``) where that is f32 or f64 under every binding (``T`` of ``dtype T in f32,
        f64``, or ``(other).dtype`` where no name says it), where ``expr`` is an f64 scalar value
        (:data:`tilegen.dtypes.SCALAR_F64`) and ``other`` a value of another float dtype: the
        scalar reaches the kernel as float64, which Triton would promote the other operand to,
        where torch rounds a Python number to an f32 tensor's dtype."""
        theirs = self.dtype_of(other)
        if self.dtype_of(expr) != SCALAR_F64 or not is_float(theirs) or theirs == SCALAR_F64:
            return text
        written = self.written(other)
        if written == "tl.float64":  # f64 under every binding: Triton computes in it
            return text
        if not set(self.possible_dtypes(other)) <= {"f32", "f64"}:
            written = "tl.float32"
        elif written is None:
            written = f"({other_text}).dtype"
        text = f"({text})" if isinstance(expr, (m.BinOp, m.Neg)) else text
        return f"{text}.to({written})"

    def f64_math(self, function: Function, values: dict[str, str], arg: m.Expr) -> str:
        """The Triton text of ``function`` (one with an ``f64_triton`` form) of ``arg``: the f64 form
        for an f64 tile or scalar, the float32 form for the rest, and where ``arg`` may be either
        (``T`` of ``dtype T in f32, f64``) the one Triton picks at compile time by its dtype."""
        possible = set(self.possible_dtypes(arg))
        if possible <= {"f64", SCALAR_F64}:
            return function.f64_triton.format(**values)
        if "f64" not in possible:
            return function.triton_text(**values)
        x = values["x"]
        return (f"({function.f64_triton.format(**values)} if ({x}).dtype == tl.float64 "
                f"else {function.triton_text(**values)})")

    def typed(self, expr: m.BinOp, left: str, right: str) -> str:
        """``left op right`` (the texts of ``expr``'s operands) computed in the dtype the spec's rules
        give it (:func:`tilegen.dtypes.promote`, torch's), where Triton's rules (:func:`triton_dtype`)
        differ: the operands cast to it (``u8`` with ``i8`` in i16, f16 with bf16 in f32, ``/`` of
        integers of both signednesses in float32), a division of f16 or bf16 (float32 in Triton)
        rounded to it, a negative literal meeting u8 wrapped; an f64 scalar meeting a value of another
        float dtype rounded first (:meth:`weak_scalar`)."""
        left, right = (self.weak_scalar(left, expr.left, expr.right, right),
                       self.weak_scalar(right, expr.right, expr.left, left))
        dl, dr = self.dtype_of(expr.left), self.dtype_of(expr.right)
        target = promote(dl, dr, divide=expr.op == "/")
        written = m.DTYPES[target][0] if self.fixed(target) else self.joint(expr.left, expr.right)
        if expr.op not in LOGIC and self.rounds_bf16(written):
            (left, one_left), (right, one_right) = (self.in_f32(left, expr.left, written),
                                                    self.in_f32(right, expr.right, written))
            atom = m.Ref(m.Name("_", expr.span), expr.span)  # a term: never parenthesized
            text = binop_text(dataclasses.replace(expr, left=atom if one_left else expr.left,
                                                  right=atom if one_right else expr.right), left, right)
            return text if expr.op in COMPARISONS else f"({text}).to({written})"
        if expr.op in LOGIC or not self.fixed(target):
            return binop_text(expr, left, right)
        rounds = expr.op == "/" and target in NARROW  # Triton divides f16 and bf16 in float32
        cast = self.fixed(dl) and self.fixed(dr) and not rounds and triton_dtype(dl, dr, expr.op) != target
        # fp8 (or F of f8e4m3, f8e5m2) beside a literal or a dtype variable: in float32 (f64) too,
        # where Triton would make the literal fp8 (no builder on the GPU) or compute in fp8
        if is_fp8(dl, self.state.spec) and not cast:
            left = f"{left}.to({m.DTYPES[target][0]})"
        if is_fp8(dr, self.state.spec) and not cast:
            right = f"{right}.to({m.DTYPES[target][0]})"
        if cast or dl is None:
            left = self.converted(left, expr.left, target)
        if cast or dr is None:
            right = self.converted(right, expr.right, target)
        text = binop_text(expr, left, right)
        return f"({text}).to({m.DTYPES[target][0]})" if rounds else text

def divides_test(expr: m.BinOp) -> bool:
    """``i % s == 0`` (or ``!= 0``): whether ``s`` divides ``i``, the same for Python's remainder and
    Triton's (C's), which differ only in the sign of one that is not 0."""
    return (expr.op in ("==", "!=") and isinstance(expr.left, m.BinOp) and expr.left.op == "%"
            and isinstance(expr.right, m.Number) and expr.right.text == "0")


def online_exponent(state: KernelState, arg: m.Expr) -> m.Expr | None:
    """``x - m_new`` as ``x - m_new_or_0`` where ``m_new`` is a running extremum whose guarded
    copy this loop range has made (:meth:`tilegen.lower.loops.Loops.online_extrema`); else None."""
    if not (isinstance(arg, m.BinOp) and arg.op == "-" and isinstance(arg.right, m.Ref)):
        return None
    _, safe = state.online.get(arg.right.name.id, (None, ""))
    if not safe:
        return None
    return dataclasses.replace(arg, right=m.Ref(m.Name(safe, arg.right.span), arg.right.span))


class Expressions(ExpressionTypes):
    """The Triton text of spec expressions, in the shape of a statement's tile (its context:
    the tile axes, in order, of the value being computed)."""

    def call(self, call: m.Call, context: tuple[str, ...], ops: list[Op]) -> str:
        """A function of :mod:`tilegen.functions`: math in float32, a helper, or a reduction."""
        state = self.state
        name = call.func.id
        if name == GIVEN:  # the kernel's constexpr: the caller passed that optional input
            assert isinstance(call.args[0], m.Ref)
            return state.given_flags[call.args[0].name.id]
        choice = next((c for c in state.spec.choices if c.name.id == name), None)
        if choice is not None:
            arg = self.expr(call.args[0], context, ops)
            for option in choice.options:
                if option.id != "none":
                    state.helpers.add(option.id)
            return f"apply_{name}({arg}, {choice.constexpr})"
        function = function_of(call.func)
        if (known := self.known_branch(call)) is not None:
            return self.expr(known, context, ops)
        if name in ("exp", "exp2") and (guarded := online_exponent(self.state, call.args[0])) is not None:
            call = dataclasses.replace(call, args=(guarded, *call.args[1:]))
        if function.kind == "reduction":
            return self.reduction(call, function, context, ops)
        if function.kind == "scan":
            return self.scan(call, function, context, ops)
        if function.kind == "dot":
            return self.dot(call, context, ops)
        if function.promotes and self.dtype_of(call) in (None, WEAK_FLOAT) and (value := folded(call)) is not None:
            return constant_text(value)  # clamp(0.1, 0, 2): a literal, which takes its context's dtype
        x = self.expr(call.args[0], context, ops)
        first = self.dtype_of(call.args[0])
        if first in (None, WEAK_FLOAT) and not (function.promotes or function.selects):
            # a function of literals (exp(2), gelu(2.0), f16(0.1), abs(-1)): a 0-d tile of the
            # dtype it computes in (math float32, a cast its own, elementwise f32 or i32)
            if function.kind == "cast":
                return f"tl.full([], {x}, {triton_dtype_text(call.func)})"
            computed = self.dtype_of(call)
            assert computed is not None, f"{name}() of literals computes in no dtype"
            x = f"tl.full([], {x}, {m.DTYPES[computed][0]})"
        values = {"x": x}
        for position, (param, default) in enumerate(function.params, start=1):
            given = call.args[position] if position < len(call.args) else call.kwarg(param)
            if given is None:
                assert default is not None, f"{name}() needs '{param}'"
                values[param] = default
            elif function.selects and isinstance(given, m.Load) and self.expr_axes(call.args[0]):
                # where(l < n, values[...], 0): the kept tile is loaded only where the mask holds
                guard = x if position == 1 else f"~({x})"
                values[param] = self.access.load(given, context, ops, guard=guard)
            else:
                values[param] = self.expr(given, context, ops)
            if param in function.numbers and is_int(first) and function.kind == "elementwise":
                # hardtanh(i, -2, 0.5) keeps the integer dtype: its bounds too, truncated as torch's (0.5: 0)
                if given is None:
                    values[param] = str(int(float(values[param])))
                elif (value := folded(given)) is not None:
                    values[param] = str(int(value))
                else:
                    values[param] = self.converted(values[param], given, first)
        # abs, relu, maximum, clamp, ... of bf16: in float32, rounded back (see in_f32)
        rounds = function.kind == "elementwise" and not function.selects and name != "detach"
        written = self.written(call) if rounds else None
        if rounds and self.rounds_bf16(written):
            values["x"] = self.in_f32(x, call.args[0], written)[0]
            for position, (param, _) in enumerate(function.params, start=1):
                given = call.args[position] if position < len(call.args) else call.kwarg(param)
                if given is not None:
                    values[param] = self.in_f32(values[param], given, written)[0]
        elif function.promotes or function.selects:  # maximum, minimum, clamp, where: in the call's dtype
            target = self.dtype_of(call)
            names = ["x", *(p for p, _ in function.params)]
            for position, param in enumerate(names[1 if function.selects else 0:], start=1 if function.selects else 0):
                given = call.args[position] if position < len(call.args) else call.kwarg(param)
                if given is not None:
                    values[param] = self.converted(values[param], given, target)
        if function.kind == "math":
            values["x"] = self.upcast(x, call.args[0])
            if name == "pow":
                return self.power(call, values, ops)
            if function.f64_triton and "f64" in {"f64" if d == SCALAR_F64 else d
                                                 for d in self.possible_dtypes(call.args[0])}:
                return self.f64_math(function, values, call.args[0])
        if function.kind == "cast" and isinstance(call.args[0], (m.BinOp, m.Neg)):
            values["x"] = f"({x})"
        if function.kind == "cast" and self.casts_through_f32(call):  # see in_f32
            values["x"] = f"{values['x']}.to(tl.float32)"
        state.helpers.update(function.helpers)
        if function.kind == "activation" or name in HELPERS:
            if name == "gelu" and call.word("approximate") == "tanh":
                name = "gelu_tanh"
            state.helpers.add(name)
            text = f"{name}({', '.join(values[p] for p in ['x', *(p for p, _ in function.params)])})"
        elif function.selects and self.branches_at_runtime(call):
            return f"({values['input']} if {x} else {values['other']})"
        else:
            text = function.triton_text(**values)
        return f"{text}.to({written})" if rounds and self.rounds_bf16(written) else text

    def branches_at_runtime(self, call: m.Call) -> bool:
        """Whether the ``where`` ``call`` lowers to a conditional expression, ``(a if cond else
        b)``, which Triton compiles to a branch (``scf.if``) so a program computes only the branch
        it takes: where ``cond`` is one value for the whole program (a scalar input's test,
        cross-entropy's ``softcap == 0``; no tile axis), both branches are tiles over the same
        axes, and one of them costs (a math function or activation, a division). ``tl.where``
        computes both branches everywhere, which made an option that is off cost as much as on."""
        if len(call.args) != 3 or self.expr_axes(call.args[0]):
            return False
        branches = call.args[1:]
        axes = [set(self.expr_axes(b)) for b in branches]
        if not axes[0] or axes[0] != axes[1] or any(self.dtype_of(b) != self.dtype_of(call) for b in branches):
            return False

        def costly(part: m.Expr) -> bool:
            if isinstance(part, m.BinOp) and part.op == "/":
                return True
            if not isinstance(part, m.Call) or any(c.name.id == part.func.id for c in self.state.spec.choices):
                return False
            function = function_of(part.func)
            return function is not None and function.kind in ("math", "activation")

        return any(costly(part) for branch in branches for part in m.subexpressions(branch))

    def casts_through_f32(self, call: m.Call) -> bool:
        """Whether the cast ``call`` converts through float32: bf16 to or from an integer or f64
        (Triton's interpreter converts bf16's bits there, see :meth:`in_f32`). Exact from bf16;
        to bf16 it rounds twice as torch's conversion does (an integer or f64 to float32, then
        to bf16)."""
        source, target = self.dtype_of(call.args[0]), call.func.id
        if source in (None, WEAK_FLOAT):
            return False
        if self.rounds_bf16(triton_dtype_text(call.func)):
            return all(d in _THROUGH_F32 for d in self.possible_dtypes(call.args[0]))
        return self.rounds_bf16(self.written(call.args[0])) and target in _THROUGH_F32

    def known_branch(self, call: m.Call) -> m.Expr | None:
        """The branch ``where(cond, x, y)`` takes in a loop range where ``cond`` is known to hold
        everywhere (or nowhere), see :mod:`tilegen.lower.ranges`; None when it is not known, or
        when the branch alone would have another shape or dtype than the ``where``, or when
        ``call`` is not a ``where`` (:attr:`~tilegen.functions.Function.selects`)."""
        function = lookup(call.func)
        if function is None or not function.selects:
            return None
        truth = self.state.known_conditions.get(m.expr_key(call.args[0]))
        if truth is None:
            return None
        branch = call.args[1] if truth else call.args[2]
        if set(self.expr_axes(branch)) != set(self.expr_axes(call)) or self.dtype_of(branch) != self.dtype_of(call):
            return None
        return branch

    def power(self, call: m.Call, values: dict[str, str], ops: list[Op]) -> str:
        """``pow(x, p)`` (``x ** p``) as torch.pow computes it, for every sign of ``x``.

        An integral literal exponent (``3``, ``3.0``, ``-2``; its value, not its text, decides)
        up to :data:`~tilegen.functions.MAX_MULTIPLIED_EXPONENT` multiplies, by squaring, and a
        negative one takes the reciprocal: ``pow(-2.0, 3.0)`` is ``-8``. Any other exponent (a
        fraction, a larger integer, a scalar input, a tile) calls the ``power`` helper, which
        applies torch's rules at run time (NaN for a finite negative ``x`` and a fraction)."""
        state = self.state
        exponent = call.args[1] if len(call.args) > 1 else call.kwarg("exponent")
        assert exponent is not None, "pow without an exponent"
        x, value = values["x"], folded(exponent)  # 0.5 - 0 is 0.5 here too, as the reference's Python number
        if value in (0.5, -0.5):  # torch's own special cases: sqrt and rsqrt (NaN at -inf, unlike C's pow)
            sqrt = function_of("sqrt")
            root = self.f64_math(sqrt, {"x": x}, call.args[0])
            return root if value > 0 else f"(1.0 / {root})"
        if value is None or math.isnan(value) or not float(value).is_integer() or abs(value) > MAX_MULTIPLIED_EXPONENT:
            state.helpers.add("power")
            return f"power({x}, {values['exponent']})"
        count = int(abs(value))
        if count == 0:
            return f"(tl.zeros_like({x}) + 1.0)"  # 1 for every x, NaN and inf included (torch.pow)
        if count > 1 and not x.isidentifier():  # named once, not computed once per factor
            base = state.fresh("pow_base")
            ops.append(Line(f"{base} = {x}"))
            x = base
        if count <= 4:
            product = " * ".join([x] * count)
        else:  # by squaring: x ** 10 = x ** 8 * x ** 2
            factors, square, bit = [], x, 1
            while bit <= count:
                if count & bit:
                    factors.append(square)
                if bit * 2 <= count:
                    name = state.fresh("pow_sq")
                    ops.append(Line(f"{name} = {square} * {square}"))
                    square = name
                bit *= 2
            product = " * ".join(factors)
        if value < 0:
            return f"(1.0 / ({product}))"
        return product if product.isidentifier() else f"({product})"  # (x + y) ** 1 * 2 keeps its parentheses

    def operand_axes(
        self, operand: m.Expr, context: tuple[str, ...], dim: str | None = None
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(``context`` in canonical names, the order the tile of ``operand`` takes) for a reduction
        over ``dim`` (None: a scan) of ``operand``. The operand's own axes' order (a load's is its
        index's, so the tensor's contiguous last dimension stays the tile's last) where the result
        keeps ``context``'s order, else ``context``'s axes first, then the rest. (A tile whose
        contiguous axis came first, ``[n, k]`` reduced over ``k``, miscompiled in Triton 3.6 on the
        H100 where rows are not 16-byte aligned: wrong sums at ``BK <= 16, BN >= 128``,
        c43ff28:benchmarks/explore/dbg_sum_dim1_unaligned.py.)"""
        canonical = tuple(self.state.canonical.get(a, a) for a in context)
        own = self.expr_axes(operand)
        kept = [a for a in own if a != dim]
        if kept == [a for a in canonical if a in kept]:  # the result needs no transposing
            return canonical, own
        return canonical, tuple(a for a in canonical if a in own) + tuple(a for a in own if a not in canonical)

    def widened(self, x: str, operand: m.Expr, function: Function) -> str:
        """``x`` (the text of ``operand``) in float32 where ``function`` accumulates f16/bf16 so, and
        an integer operand of a mean (float32, as the reference's ``mean(x.float())``: Triton sums u8
        in uint32, which it will not divide by a signed size)."""
        if (function.widens and self.converts(operand, NARROW)) or (
                function.averages and is_int(self.dtype_of(operand))):
            return self.upcast(x, operand)
        return x

    def padded(self, x: str, operand: m.Expr, function: Function, dim: str, inner: tuple[str, ...]) -> str:
        """``x`` (``operand``'s tile over ``inner``) with the lanes past the end of ``dim`` set to
        ``function``'s identity. An integer tile takes an integer (its dtype's lowest or highest
        value for -inf or inf): a float would make the whole tile float, inexact past 2**24."""
        mask = self.lane_mask(dim)
        if mask is None:
            return x
        identity, value = function.identity_text, function.identity  # identity_text raises where it has none
        assert value is not None
        dtype = self.dtype_of(operand)
        limits = DTYPE_LIMITS.get(dtype) if dtype is not None else None
        if dtype == BOOL:  # a mask (any, all): False or True as an integer
            identity = str(int(value))
        elif isinstance(limits, tuple):
            identity = str(limits[0] if value < 0 else limits[1]) if math.isinf(value) else str(int(value))
        return f"tl.where({broadcast(mask, dim, inner)}, {x}, {identity})"

    def scan(self, call: m.Call, function: Function, context: tuple[str, ...], ops: list[Op]) -> str:
        """``cumsum(x, dim=c)``: the operand as a tile over its own axes (ordered by
        :meth:`operand_axes`), lanes past the end of ``c`` replaced by the scan's identity (so a
        scan from the end, ``reverse=true``, starts at the last element), scanned along ``c`` into
        a new variable (``tl.cumsum``/``tl.cumprod``; f16/bf16 in float32), broadcast to ``context``."""
        state = self.state
        dim = call.word("dim")
        assert dim is not None, f"{function.name} without dim="
        operand = call.args[0]
        canonical, inner = self.operand_axes(operand, context)
        x = self.padded(self.widened(self.expr(operand, inner, ops), operand, function), operand, function, dim, inner)
        result = state.fresh(f"{function.name}_{dim}")
        reverse = "True" if call.word("reverse") == "true" else "False"
        ops.append(Line(f"{result} = {function.triton_text(x=x, axis=str(inner.index(dim)), reverse=reverse)}"))
        return broadcast_tile(result, inner, canonical)

    def reduction(self, call: m.Call, function: Function, context: tuple[str, ...], ops: list[Op]) -> str:
        """``sum(x, dim=c)``: the operand as a tile over its own axes (ordered by
        :meth:`operand_axes`), lanes past the end of ``c`` replaced by the reduction's identity
        (:attr:`~tilegen.functions.Function.identity`), reduced over ``c`` into a new variable,
        broadcast back to ``context``."""
        state = self.state
        dim = call.word("dim")
        assert dim is not None, f"{function.name} without dim="
        operand = call.args[0]
        canonical, inner = self.operand_axes(operand, context, dim)
        scaled = state.scaled.get(operand.name.id) if isinstance(operand, m.Ref) else None
        result = state.fresh(f"{function.name}_{dim}")

        def reduce(name: str, x: str) -> str:
            chosen = function_of(name)
            x = self.padded(x, operand, chosen, dim, inner)
            state.helpers.update(chosen.helpers)
            return chosen.triton_text(x=x, axis=str(inner.index(dim)), size=state.axes[dim].dim)

        if scaled is not None and function.mirror is not None:  # max(x * c) = max(x) * c for c >= 0
            raw, factor, sign = scaled
            own = self.expr_axes(operand)  # what raw spans
            if inner != own:
                raw = f"tl.permute({raw}, {tuple_text(str(own.index(a)) for a in inner)})"
            other = function.mirror
            nonneg, negative = (function.name, other) if sign.sign > 0 else (other, function.name)
            if sign.scalar is None:
                ops.append(Line(f"{result} = {reduce(nonneg, raw)} * {factor}"))
            else:
                why = f"{sign.scalar} >= 0: {function.name}(x * c) = {nonneg}(x) * c, else {negative}(x) * c"
                branches = [(Line(f"{result} = {reduce(name, raw)} * {factor}"),) for name in (nonneg, negative)]
                ops.append(IfBlock(state.sign_flags[sign.scalar], why, *branches))
            return broadcast_tile(result, tuple(a for a in inner if a != dim), canonical)
        x = self.widened(self.expr(operand, inner, ops), operand, function)
        text = reduce(function.name, x)
        start = state.axes[dim].start
        if function.picks is not None and start != "0":  # an index along the dimension, not the tile
            text = f"{text} + {start}"
        ops.append(Line(f"{result} = {text}"))
        return broadcast_tile(result, tuple(a for a in inner if a != dim), canonical)

    def offsets(self, axis: str) -> str:
        """The index values of ``axis``'s tile: its offsets (made inline where block pointers or
        descriptors left the axis without them)."""
        info = self.state.axes[axis]
        return info.offs or f"({info.start} + tl.arange(0, {info.tile}))"

    def lane_mask(self, axis: str) -> str | None:
        """Which lanes of ``axis``'s tile lie inside its dimension (None: all of them). Block
        pointers pad with zeros, which is not every reduction's identity, so their masked axes
        get the comparison too."""
        info = self.state.axes[axis]
        if info.mask == "checked":
            return f"({self.offsets(axis)} < {info.dim})"
        return info.mask

    def dot(self, call: m.Call, context: tuple[str, ...], ops: list[Op]) -> str:
        """``dot(a, b)`` of any two 2D tiles sharing one axis ``k``: ``a`` as an ``[i, k]`` tile and
        ``b`` as a ``[k, j]`` tile (a load builds its pointers in that order, so a transposed
        operand costs no copy; a local is permuted), lanes past the end of ``k`` zeroed, then
        ``tl.dot``. The result spans ``(i, j)``, broadcast (or transposed) into ``context``."""
        state = self.state
        a_axes, b_axes = (self.expr_axes(arg) for arg in call.args)
        k = next(x for x in a_axes if x in b_axes)
        i, j = next(x for x in a_axes if x != k), next(x for x in b_axes if x != k)
        if k in state.axes:  # a whole axis's tile of it is at least MIN_DOT_TILE (see KernelPlan.whole_tile)
            state.contracted.add(state.axes[k].dim)
        operands = []
        for arg, own in ((call.args[0], (i, k)), (call.args[1], (k, j))):
            kept = _kept_else_zero(arg)
            if kept is not None and isinstance(arg, m.Call) and self.known_branch(arg) is kept[1]:
                arg, kept = kept[1], None  # the condition holds in every lane of this range: a plain load
            if isinstance(arg, m.Load):  # padding lanes of k must add nothing: loaded as zeros
                text = self.access.load(arg, own, ops, fill="0.0")
            elif kept is not None and self.access.takes_guard(kept[1], own, ops, "0.0"):
                # where(divides, x[..], 0): x loaded as zeros where the condition fails, as past k's end
                text = self.access.load(kept[1], own, ops, fill="0.0", guard=self.expr(kept[0], own, ops))
            else:
                text = self.expr(arg, own, ops)
                if (mask := self.lane_mask(k)) is not None:  # a computed tile: its padding lanes of k zeroed
                    text = f"tl.where({broadcast(mask, k, own)}, {text}, 0.0)"
            if "bf16" in self.possible_dtypes(arg):  # see BF16_DOT_FLAG: the interpreter upcasts it
                state.bf16_dot, text = True, f"{BF16_DOT_OPERAND}({text})"
            operands.append(text)
        precision = call.word("precision")
        extra = f', input_precision="{precision}"' if precision is not None else ""
        text = f"tl.dot({operands[0]}, {operands[1]}{extra})"
        canonical = tuple(state.canonical.get(a, a) for a in context)
        ordered = tuple(a for a in canonical if a in (i, j))
        if ordered == (j, i):
            text = f"tl.trans({text})"
        return broadcast_tile(text, ordered, canonical)

    def expr(self, expr: m.Expr, context: tuple[str, ...], ops: list[Op]) -> str:
        """Emit loads into ``ops`` and return the Triton expression for ``expr``."""
        state = self.state
        if isinstance(expr, m.Number):
            return number_text(expr)
        if isinstance(expr, m.Ref):
            name = expr.name.id
            canonical = tuple(state.canonical.get(a, a) for a in context)  # an alias is its axis
            if name in state.locals:
                axes = state.locals[name]
                name = local_name(state, name)  # its second row piece's name there (tilegen.lower.pieces)
                ordered = tuple(a for a in canonical if a in axes)
                if name in state.scaled:  # kept unscaled for a max (see scaled.py): the factor applied here
                    raw, factor, _ = state.scaled[name]
                    name = f"({raw} * {factor})"
                if ordered != axes:  # a tile over (m, n) used as (n, m)
                    name = f"tl.permute({name}, {tuple_text(str(axes.index(a)) for a in ordered)})"
                return broadcast_tile(name, ordered, canonical)
            if name in state.axes:  # an axis's index values: its offsets (a program id for an index axis)
                info = state.axes[name]
                if info.scalar:
                    return info.offs
                return broadcast(self.offsets(name), state.canonical.get(name, name), canonical)
            return name  # a scalar input or a size symbol
        if isinstance(expr, m.Load):
            return self.access.load(expr, context, ops)
        if isinstance(expr, m.Neg):
            if isinstance(expr.operand, m.Number):
                return number_text(expr)
            inner = self.expr(expr.operand, context, ops)
            if self.rounds_bf16(written := self.written(expr.operand)):  # see in_f32
                return f"(-{self.in_f32(inner, expr.operand, written)[0]}).to({written})"
            return f"-({inner})" if isinstance(expr.operand, m.BinOp) else f"-{inner}"
        if isinstance(expr, m.BinOp):
            if divides_test(expr):  # i % s == 0: C's remainder is 0 where Python's is, no helper needed
                assert isinstance(expr.left, m.BinOp)
                rest = m.BinOp("%", expr.left.left, expr.left.right, expr.left.span)
                plain = binop_text(rest, self.expr(rest.left, context, ops), self.expr(rest.right, context, ops))
                return f"({plain}) {expr.op} 0"
            left, right = self.expr(expr.left, context, ops), self.expr(expr.right, context, ops)
            if expr.op in LOGIC and bool(self.expr_axes(expr.left)) != bool(self.expr_axes(expr.right)):
                # a mask over no tile axis (s > 1) with a tile's: a select on the scalar. Triton's
                # interpreter broadcasts a scalar comparison with its operands' dtype, where & and |
                # of a float fail; on the GPU the select is as cheap
                (scalar, tile) = (left, right) if not self.expr_axes(expr.left) else (right, left)
                return f"tl.where({scalar}, {tile}, False)" if expr.op == "&" else f"tl.where({scalar}, True, {tile})"
            if expr.op in m.FLOOR_OPERATORS:  # integers, rounded down as Python's (Triton's round toward 0)
                return self.access.floor(expr, *(f"({t})" if isinstance(e, (m.BinOp, m.Neg)) else t
                                                 for t, e in ((left, expr.left), (right, expr.right))))
            return self.typed(expr, left, right)
        if isinstance(expr, m.Call):
            return self.call(expr, context, ops)
        raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover


def _kept_else_zero(expr: m.Expr) -> tuple[m.Expr, m.Load] | None:
    """``(condition, load)`` of ``where(condition, load, 0)``, a tile kept where a condition holds
    and 0 elsewhere; else None."""
    if (isinstance(expr, m.Call) and expr.func.id == "where" and len(expr.args) == 3
            and isinstance(expr.args[1], m.Load) and isinstance(expr.args[2], m.Number)
            and float(expr.args[2].text) == 0.0):
        return expr.args[0], expr.args[1]
    return None
