"""What dtype an expression computes to: the spec's promotion rules, shared by the checker
(a comparison is a mask, not a number; a gather index is an integer) and both lowerings
(where to compute in float32, where a store casts).

The rules follow torch and Triton where they agree: a literal number takes the other
operand's dtype (``0.5 * x`` stays f16); floats win over integers; the wider float wins and
f16 with bf16 gives f32; two integer dtypes give torch's (the wider; u8 with i8 is i16);
``/`` of integers is a float division; math and activations compute
f16/bf16 in float32 and return float32; ``sum``/``mean`` accumulate f16/bf16 in float32;
comparisons, ``&`` and ``|`` give ``"bool"`` (a mask). ``None`` stands for an integer
literal and ``"float"`` for a float literal: both take their context's dtype (a float literal
makes an integer tile float32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from tilegen import model as m
from tilegen.functions import lookup

#: The dtype of comparisons, ``&`` and ``|``: masks, for ``where`` and other masks.
BOOL = "bool"

#: The dtype of a float literal (``0.5``): it takes the other operand's float dtype.
WEAK_FLOAT = "float"

#: The dtype of an f64 scalar input and of arithmetic of such scalars with numbers, integers and
#: each other: float64, but weak where it meets a tile or value of another float dtype, as a
#: Python number meets a torch tensor: with f32 (or f16, bf16) it computes as an f32 scalar would
#: (rounded to float32 first), with f64 in float64.
SCALAR_F64 = "f64 scalar"

#: The dtype of an axis's index values (``m`` in ``where(n <= m, ...)``) and of a size symbol.
INDEX = "i32"

COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC = ("&", "|")

#: The values each dtype holds (for input ranges, ``in [low, high]``): integers from, to; the
#: largest finite float.
DTYPE_LIMITS: dict[str, tuple[int, int] | float] = {
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 255),
    "f8e4m3": 448.0,
    "f8e5m2": 57344.0,
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f32": 3.4028234663852886e38,
    "f64": 1.7976931348623157e308,
}

#: The 8-bit floats (OCP FP8: e4m3 with no infinities, as torch's float8_e4m3fn, and e5m2): tensors
#: to load and store and ``dot`` operands; arithmetic on them computes in float32.
FP8 = ("f8e4m3", "f8e5m2")

#: The 16-bit floats, which sums accumulate in float32 (as torch does), and the 8-bit ones.
NARROW = ("f16", "bf16", *FP8)

_FLOAT_RANK = {"f8e4m3": 0, "f8e5m2": 0, "f16": 1, "bf16": 1, "f32": 2, "f64": 3}
_INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
#: What promote takes: the dtypes, the literals' markers and None (an integer literal)
_PROMOTED = frozenset([*_FLOAT_RANK, *_INT_BITS, "u8", "bool", WEAK_FLOAT, SCALAR_F64, None])


def integer_value(number: m.Number) -> int | None:
    """The integer a literal stands for (``3``, ``-3``, ``1e3``), or None (``0.5``); exact for
    integer literals of any size."""
    text = number.text.removeprefix("-")
    if text.isdigit():
        value = int(text)
    else:
        as_float = float(text)
        if not as_float.is_integer():
            return None
        value = int(as_float)
    return -value if number.text.startswith("-") else value


def is_float(dtype: str | None) -> TypeGuard[str]:
    """True for f16, bf16, f32 and f64 (an f64 scalar's :data:`SCALAR_F64` too)."""
    return dtype in _FLOAT_RANK or dtype == SCALAR_F64


def is_int(dtype: str | None) -> bool:
    """True for the integer dtypes (i8 ... i64, u8); not bool, a mask."""
    return dtype is not None and dtype in m.DTYPES and not is_float(dtype) and dtype != BOOL


def promote(left: str | None, right: str | None, *, divide: bool = False) -> str | None:
    """The dtype of arithmetic on ``left`` and ``right`` (``None``: an integer literal,
    ``"float"``: a float literal). Arithmetic on an fp8 operand computes in float32 (torch has
    no fp8 arithmetic; Triton converts). A name that is no dtype (a spec's typo, which the checker
    reports at its declaration) gives None: nothing is known of the result."""
    if any(d not in _PROMOTED for d in (left, right)):
        return None
    if left in FP8 or right in FP8:
        other = right if left in FP8 else left
        return "f64" if other == "f64" else "f32"
    if SCALAR_F64 in (left, right):  # float64 with numbers, integers and f64; as an f32 scalar with other floats
        other = right if left == SCALAR_F64 else left
        if other in (None, WEAK_FLOAT, SCALAR_F64) or is_int(other):
            return SCALAR_F64
        return "f64" if other == "f64" else promote("f32", other, divide=divide)
    if WEAK_FLOAT in (left, right):
        other = right if left == WEAK_FLOAT else left
        if other is None:
            return WEAK_FLOAT
        return other if is_float(other) or other == WEAK_FLOAT else "f32"
    if left is None or right is None:
        known = left if right is None else right
        return "f32" if divide and is_int(known) else known
    if is_float(left) and is_float(right):
        if left == right:
            return left
        rank = max(_FLOAT_RANK[left], _FLOAT_RANK[right])
        return "f32" if rank == 1 else {2: "f32", 3: "f64"}[rank]
    if is_float(left) or is_float(right):
        return left if is_float(left) else right
    if divide:
        return "f32"
    if left == right:
        return left
    if "u8" in (left, right):  # torch's: u8 with a signed dtype is that dtype, with i8 i16 (holding both)
        signed = right if left == "u8" else left
        return "i16" if signed == "i8" else signed
    return max(left, right, key=lambda d: _INT_BITS[d])


def is_fp8(dtype: str | None, spec: m.Spec) -> bool:
    """True where ``dtype`` is fp8 under every binding of ``spec``'s dtype variables (``F`` of
    ``dtype F in f8e4m3, f8e5m2`` too): arithmetic converts such an operand to float32 first."""
    return dtype is not None and all(d in FP8 for d in possible_dtypes(dtype, spec))


def math_dtype(dtype: str | None) -> str:
    """What math computes in: f64 stays f64 (an f64 scalar's too), everything else is float32."""
    return dtype if dtype in ("f64", SCALAR_F64) else "f32"


def computes_in_f32(dtype: str | None) -> bool:
    """True where math on a tile of ``dtype`` first converts it to float32: f16, bf16, integers."""
    return dtype in NARROW or is_int(dtype)


def possible_dtypes(dtype: str | None, spec: m.Spec) -> tuple[str | None, ...]:
    """Every dtype that ``dtype`` may stand for over ``spec``'s specializations: all of a dtype
    variable's options where ``dtype`` is one of them (a superset: a fixed f32 tensor in a spec
    with ``dtype T in f16, f32`` counts as possibly f16 too), else ``dtype`` alone."""
    for var in spec.dtype_vars:
        options = spec.dtype_options(var.name)
        if dtype in options:
            return options
    return (dtype,)


def converts_to_f32(dtype: str | None, spec: m.Spec, narrow: tuple[str, ...] | None = None) -> bool:
    """Whether a tile of ``dtype`` is converted to float32 before math (``narrow`` None: f16,
    bf16 and integers, :func:`computes_in_f32`) or before a sum (``narrow=("f16", "bf16")``).

    Both lowerings decide on every dtype the tile may have over the spec's dtype variables
    (:func:`possible_dtypes`), not on the bound one, so that every binding gives one kernel:
    ``.to(tl.float32)`` of an f32 tile and ``.float()`` of an f32 tensor cost nothing. An f64
    tile is never converted (f64 math stays f64), so a variable over f64 and a narrow dtype gives
    two kernels, which :func:`tilegen.lower.lower` refuses."""
    if dtype == "f64":
        return False
    test = computes_in_f32 if narrow is None else narrow.__contains__
    return any(test(d) for d in possible_dtypes(dtype, spec))


#: ``given(weight)``: True where the caller passed optional input ``weight`` (``in weight: T[N] =
#: 1``), a constant of each compiled kernel (its ``HAS_WEIGHT``): a spec's own switch between the
#: work an input needs and what its number gives at once (a sum of its elements, say).
GIVEN = "given"


def expr_dtype(expr: m.Expr, spec: m.Spec, local: Callable[[str], str | None]) -> str | None:
    """The dtype ``expr`` (of ``spec``'s body) computes to.

    A load has its tensor's dtype; ``local(name)`` gives the dtype of a name that is not a tensor
    load: a local tile variable, a scalar input, an axis or a size symbol (``INDEX``), or None
    when unknown. A literal number gives None (it takes its context's dtype).
    """
    if isinstance(expr, m.Number):
        return None if expr.is_int else WEAK_FLOAT
    if isinstance(expr, m.Ref):
        dtype = local(expr.name.id)
        tensor = spec.tensor(expr.name.id) if dtype == "f64" else None
        return SCALAR_F64 if tensor is not None and tensor.is_scalar else dtype
    if isinstance(expr, m.Load):
        tensor = spec.tensor(expr.tensor.id)
        return tensor.dtype.id if tensor is not None else None
    if isinstance(expr, m.Neg):
        return expr_dtype(expr.operand, spec, local)
    if isinstance(expr, m.BinOp):
        if expr.op in COMPARISONS or expr.op in LOGIC:
            return BOOL
        left, right = expr_dtype(expr.left, spec, local), expr_dtype(expr.right, spec, local)
        return promote(left, right, divide=expr.op == "/")
    if isinstance(expr, m.Call):
        if expr.func.id == GIVEN:  # given(weight): whether the caller passed that optional input
            return BOOL
        function = lookup(expr.func.id)
        if function is None:  # a ``choose`` activation: computes in float32
            return "f32"
        first = expr_dtype(expr.args[0], spec, local) if expr.args else None
        if function.kind == "cast":
            return function.name
        if function.kind == "dot":
            return "i32" if first == "i8" else "f32"
        if function.kind in ("math", "activation"):
            return math_dtype(first)
        if function.kind == "random":
            return "f32"
        if function.kind in ("reduction", "scan"):
            if function.result is not None:
                return function.result
            if function.widens and first in ("f16", "bf16"):
                return "f32"
            if function.averages and not is_float(first):
                return "f32"
            return first
        if function.selects:  # where: a tile, so literals alone have a dtype (tl.where(m, 0.5, 1.0) is f32)
            values = [expr_dtype(a, spec, local) for a in expr.args[1:3]]
            if len(values) != 2:
                return None
            result = promote(*values)
            return "f32" if result == WEAK_FLOAT else "i32" if result is None else result
        if first in (None, WEAK_FLOAT) and not function.promotes and not m.is_detach(expr):
            # abs(-2.0): a tile, as where's literals (detach(2.0) is 2.0 itself)
            return "f32" if first == WEAK_FLOAT else "i32"
        result = first
        if function.promotes:  # maximum, minimum, clamp: every argument's, by position or keyword
            params = {p for p, _ in function.params}
            for arg in (*expr.args[1:], *(value for key, value in expr.kwargs if key.id in params)):
                result = promote(result, expr_dtype(arg, spec, local))
        return result
    raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover
