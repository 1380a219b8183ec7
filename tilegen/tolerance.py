"""How far a kernel's output may be from its reference: tolerances that follow the computation.

One rule, used by ``tilegen run``, ``tilegen demo`` (through :mod:`tilegen.runner`) and the
tests. For each element of a float output, with ``ref`` the module's ``reference`` (plain torch
in the spec's dtypes) and everything evaluated in float64::

    |out - ref| <= atol + rtol * |ref| + 2 * g * S

* ``atol, rtol`` (:data:`BASE`, by output dtype): the output's own rounding and the few
  roundings of elementwise math (``exp``, ``gelu``, a division), which do not grow with size.
* ``g`` (:func:`growth`): the relative error bound of the spec's accumulations. For a ``dot``
  over a dimension of extent ``K`` and for ``sum``/``mean`` over one of extent ``K``, every
  term of the sum carries at most ``K`` roundings of the accumulator (unit roundoff ``u``:
  2**-24 for float32; 2**-14 for an fp8 ``dot``, whose products Hopper's tensor cores sum in a
  narrower accumulator) and, for a float32 ``dot`` in ``tf32`` precision, the rounding of both
  operands to tf32 (2**-11 each); an operand cast from a computed value to f16 or bf16
  (attention's ``DT(p)``) counts that dtype's rounding alike, since the kernel's value and the
  reference's, a few float32 units apart, may round to neighbours. Higham's bound (*Accuracy and Stability of Numerical
  Algorithms*, 2002, eq. 3.5) is ``|fl(sum) - sum| <= gamma_K * sum|terms|`` with
  ``gamma_K = K*u / (1 - K*u)``, whatever the order of summation; ``g`` is the smaller of that
  and its probabilistic form (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019, Theorem 2.4:
  ``exp(lambda * sqrt(K) * u + K*u**2 / (1 - u)) - 1``, which holds with probability at least
  ``1 - 2*exp(-lambda**2 * (1 - u)**2 / 2)`` per term when rounding errors are independent and
  of mean zero, as round-to-nearest gives on random data). :data:`LAMBDA` = 10 makes that
  ``1 - 4e-22``: even over 10**18 (term, element) pairs, the chance that rounding alone fails
  a comparison stays below 1e-3. Successive accumulations (attention's two dots and
  its sum) add their bounds (first order). Exact accumulations (integers, ``max``, ``min``)
  add nothing.
* ``S``: the magnitude of the summed terms, ``max(|ref(x)|, |ref(|x|)|)``: the reference
  evaluated once more on the inputs' absolute values. For a ``dot`` stored through a linear
  epilogue (a matmul, its batched and lower-triangular forms) ``ref(|A|, |B|) = |A| @ |B|``,
  exactly Higham's ``sum|a_k b_k|``; for nonlinear epilogues and normalisations it is the
  same computation's scale. Where it is not finite (``exp`` of ``|x|`` overflowing), ``|ref|``.
* ``2``: the reference rounds too, in its own order (torch's float32 matmul or sum), so the
  kernel's bound counts once for each side.

Integer outputs must be equal, or at most 1 apart where the stored value is float math (a
rounding step, as in rgb2grey). NaN never passes, except against a NaN of the reference at the
same place where the caller asks so (``equal_nan``, as ``torch.testing.assert_close`` has it:
``tilegen run`` and ``demo`` do, as ``log`` of a negative input is NaN on both sides); equal
infinities pass.

Why this catches bugs: at ``K = 1297`` in float32 with standard normal inputs, ``g`` is about
2.2e-5 and ``S`` about 0.64 * K = 830, so ``2 * g * S`` is about 0.036 while the entries of
``A @ B`` are about sqrt(K) = 36: an entry 1% off (0.36) or a dropped term of K (about 0.6 on
average) fails, while the float32 reorderings a GPU makes (observed 4.0e-4 on an H100) pass
with a margin of about 90. Relative to the entries the bound grows as ``K`` (``g`` as
``sqrt(K)``, ``S`` as ``K``, entries as ``sqrt(K)``), so smaller errors are caught at smaller
``K`` only: operands silently rounded to f16 or tf32 fail at ``K = 64`` but sit at the bound at
``K = 1297``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from tilegen import model as m
from tilegen.dtypes import INDEX, expr_dtype, is_float, is_fp8
from tilegen.functions import reduction, scan, spanned_axes
from tilegen.sizes import solve_derived

if TYPE_CHECKING:  # torch is imported where it is used: ``tilegen check`` runs without it
    import torch

    #: A launcher's positional argument: a tensor, or a number passed by value.
    Argument: TypeAlias = torch.Tensor | int | float
    #: What a launcher or its reference returns: the output tensor, or a tuple of them (one per output).
    Outputs: TypeAlias = torch.Tensor | tuple[torch.Tensor, ...]
    #: A module's ``reference``: the launcher's arguments -> the expected outputs.
    Reference: TypeAlias = Callable[..., Outputs]

#: (atol, rtol) by output dtype: the output's rounding and elementwise math, independent of size.
BASE: dict[str, tuple[float, float]] = {
    "f16": (1e-2, 1e-2),
    "bf16": (5e-2, 2e-2),
    "f32": (1e-4, 1e-4),
    "f64": (1e-10, 1e-10),
}

#: Unit roundoff (half the machine epsilon) of each float format; ``tf32`` is the format
#: ``dot(..., precision=tf32)`` rounds float32 operands to (10 stored mantissa bits), and
#: ``tf32x3`` its three-pass split, which keeps about 21 bits of each operand.
UNIT_ROUNDOFF: dict[str, float] = {
    "f16": 2.0**-11,
    "bf16": 2.0**-8,
    "tf32": 2.0**-11,
    "tf32x3": 2.0**-21,
    "f32": 2.0**-24,
    "f64": 2.0**-53,
    # fp8 products summed by Hopper's tensor cores, which keep about 14 bits of the float32
    # accumulator (DeepSeek-V3 technical report, 2024, section 3.3.2) unless the kernel promotes
    # the partial sums (Triton's fp8 dot on sm90 does not: torch._scaled_mm's use_fast_accum)
    "fp8_dot": 2.0**-14,
}

#: Confidence parameter of the probabilistic bound (see the module docstring).
LAMBDA = 10.0

@dataclass(frozen=True)
class Accumulation:
    """One sum in a spec: a ``dot`` contracting, or a ``sum``/``mean`` reducing, the dimension
    ``dim`` (a size symbol or a literal extent); each term is rounded ``dim`` times in a format
    of unit roundoff ``unit``, after ``operand_unit`` rounding of each of its two factors (0
    when the products are exact, as for f16/bf16 operands in a float32 accumulator)."""

    kind: str  # "dot" or a rounding reduction's or scan's name ("sum", "mean", "prod", "cumsum")
    dim: str
    unit: float
    operand_unit: float = 0.0


def gamma(terms: int, unit: float, operand_unit: float = 0.0, lam: float = LAMBDA) -> float:
    """Relative error bound of a sum of ``terms`` products (or values): the smaller of the
    deterministic ``prod(1 + u_i) - 1`` and the probabilistic ``exp(lam * sqrt(sum u_i**2) +
    sum u_i**2 / (1 - u_i)) - 1`` (Hoeffding's inequality, as in Higham and Mary's Theorem 2.4,
    with ``terms`` roundings of ``unit`` and two of ``operand_unit``). A pure number; 0 for
    ``terms`` <= 0."""
    if terms <= 0:
        return 0.0
    units = [(terms, unit), (2, operand_unit)]
    deterministic = math.exp(sum(n * math.log1p(u) for n, u in units)) - 1
    squares = sum(n * u * u for n, u in units)
    probabilistic = math.exp(lam * math.sqrt(squares) + sum(n * u * u / (1 - u) for n, u in units)) - 1
    return min(deterministic, probabilistic)


class _Walk:
    """Axes and dtypes of a spec's locals, statement by statement (what the checker infers)."""

    def __init__(self, spec: m.Spec):
        self.spec = spec
        self.axes = {a.name.id: a for a in spec.axes()}
        self.local_axes: dict[str, tuple[str, ...]] = {}
        self.local_dtypes: dict[str, str | None] = {}

    def dtype(self, expr: m.Expr) -> str | None:
        def local(name: str) -> str | None:
            if name in self.local_dtypes:
                return self.local_dtypes[name]
            tensor = self.spec.tensor(name)
            return tensor.dtype.id if tensor is not None else INDEX

        return expr_dtype(expr, self.spec, local)

    def tile_axes(self, expr: m.Expr) -> tuple[str, ...]:
        """The tile axes ``expr`` spans; index (batch) axes, scalars within a program, are left
        out, so a ``dot``'s operands share exactly the axis it contracts."""

        def tile(name: str) -> bool:
            axis = self.axes.get(name)
            return axis is not None and not axis.is_index

        def own(part: m.Expr) -> tuple[str, ...] | None:
            if isinstance(part, m.Load):  # plain axes and those in offsets (``ends[e - 1] + m``)
                names = [n for i in part.index
                         for n in ([i.id] if isinstance(i, m.Name) else m.offset_names(i) if m.is_offset(i) else [])]
                return tuple(dict.fromkeys(n for n in names if tile(n)))
            if isinstance(part, m.Ref):
                name = part.name.id
                return self.local_axes.get(name, (name,) if tile(name) else ())
            if isinstance(part, m.Number):
                return ()
            if m.is_dot(part) and len(part.args) == 2:  # the axes the operands do not share
                a, b = (self.tile_axes(arg) for arg in part.args)
                return tuple(x for x in (*a, *b) if not (x in a and x in b))
            return None

        return spanned_axes(expr, own)

    def rounded_operand(self, arg: m.Expr) -> str | None:
        """``f16`` or ``bf16`` where ``arg`` casts a computed value (not a load) to it (``DT(p)``
        with ``DT`` bound to bf16), else None."""
        names = set(m.DTYPES) | {v.name.id for v in self.spec.dtype_vars}
        if not isinstance(arg, m.Call) or arg.func.id not in names or not arg.args or isinstance(arg.args[0], m.Load):
            return None
        narrow = self.dtype(arg)
        return narrow if narrow in ("f16", "bf16") else None

    def accumulation(self, call: m.Call) -> Accumulation | None:
        """The sum ``call`` makes, or None (exact, or not a sum)."""
        if m.is_dot(call) and len(call.args) == 2:
            a, b = (self.tile_axes(arg) for arg in call.args)
            shared = [x for x in a if x in b]
            operands = self.dtype(call.args[0])
            if len(shared) != 1 or not is_float(operands):
                return None  # integer dots accumulate exactly (i8 -> i32)
            unit = UNIT_ROUNDOFF["f64" if operands == "f64" else "fp8_dot" if is_fp8(operands, self.spec) else "f32"]
            operand_unit = 0.0
            if operands == "f32":
                precision = call.word("precision") or "tf32"  # Triton's default for float32 dots
                operand_unit = UNIT_ROUNDOFF[precision] if precision in ("tf32", "tf32x3") else 0.0
            for arg in call.args:  # a computed operand rounded to f16/bf16 (attention's DT(p)): the kernel's
                narrow = self.rounded_operand(arg)  # value and the reference's may round to neighbours
                if narrow is not None:
                    operand_unit = max(operand_unit, UNIT_ROUNDOFF[narrow])
            return Accumulation("dot", self.axes[shared[0]].dim.id, unit, operand_unit)
        if (function := reduction(call) or scan(call)) is not None and function.rounds:
            dtype = self.dtype(call)
            axis = self.axes.get(call.word("dim") or "")
            if axis is None or not is_float(dtype):
                return None
            return Accumulation(call.func.id, axis.dim.id, UNIT_ROUNDOFF[dtype])
        return None


def accumulations(spec: m.Spec) -> tuple[Accumulation, ...]:
    """Every rounding sum in ``spec``'s body, in order (a ``dot`` or ``sum`` inside a loop once)."""
    walk = _Walk(spec)
    found: list[Accumulation] = []
    def sums(value: m.Expr) -> None:
        for part in m.subexpressions(value):
            if isinstance(part, m.Call):
                accumulation = walk.accumulation(part)
                if accumulation is not None:
                    found.append(accumulation)

    for stmt in m.statements(spec.body):
        for value in m.values(stmt):
            sums(value)
        match stmt:
            case m.Declare():
                walk.local_axes[stmt.name.id] = tuple(a.id for a in stmt.axes)
                walk.local_dtypes[stmt.name.id] = stmt.dtype.id
            case m.Assign():
                walk.local_axes[stmt.name.id] = walk.tile_axes(stmt.value)
                walk.local_dtypes[stmt.name.id] = walk.dtype(stmt.value)
            case _:  # any other statement defines no local (an update's is declared)
                pass
    return tuple(found)


def float_stores(spec: m.Spec) -> frozenset[str]:
    """Outputs some store writes from float math (an integer output of float math may be one
    rounding step, 1, away from its reference)."""
    walk = _Walk(spec)
    found = set()
    for stmt in m.statements(spec.body):
        match stmt:
            case m.Declare():
                walk.local_dtypes[stmt.name.id] = stmt.dtype.id
            case m.Assign():
                walk.local_dtypes[stmt.name.id] = walk.dtype(stmt.value)
            case m.Store():
                if is_float(walk.dtype(stmt.value)):
                    found.add(stmt.tensor.id)
            case _:  # any other statement defines no local and stores no float value
                pass
    return frozenset(found)


def extents(spec: m.Spec, args: Sequence[Argument], outputs: Sequence[torch.Tensor] = ()) -> dict[str, int]:
    """Size symbol -> extent, read off the shapes of the launcher's positional ``args`` (in
    the order of ``spec.inputs``; scalars skipped) and then of ``outputs`` (``spec.outputs``)."""
    sizes: dict[str, int] = {}
    for tensors, values in ((spec.inputs, args), (spec.outputs, outputs)):
        for tensor, value in zip(tensors, values, strict=False):  # ``outputs`` may be left out
            shape = getattr(value, "shape", None)
            if tensor.is_scalar or shape is None or len(shape) != len(tensor.dims):
                continue
            for dim, extent in zip(tensor.dims, shape, strict=True):
                if isinstance(dim, m.Name):
                    sizes.setdefault(dim.id, int(extent))
    for tensor, value in zip(spec.inputs, args, strict=False):  # an integer scalar a size is made of
        if tensor.is_scalar and isinstance(value, int):
            sizes.setdefault(tensor.name.id, value)
    if all(n in sizes for _, extent in spec.derived for n in m.offset_names(extent)):
        sizes = solve_derived(spec, dict(sizes), given=sizes)
    return sizes


def growth(spec: m.Spec, sizes: dict[str, int]) -> float:
    """``g``: the sum of :func:`gamma` over the spec's :func:`accumulations`, each over the
    extent of its dimension in ``sizes`` (a relative error, a pure number; 0 when nothing
    rounds in a sum). Raises KeyError naming a summed size symbol missing from ``sizes``."""
    total = 0.0
    for accumulation in accumulations(spec):
        dim = accumulation.dim
        if dim.isdigit():
            extent = int(dim)
        elif dim in sizes:
            extent = sizes[dim]
        else:
            raise KeyError(f"no extent for '{dim}', which {accumulation.kind} sums over")
        total += gamma(extent, accumulation.unit, accumulation.operand_unit)
    return total


def _as_tuple(value: Outputs) -> tuple[torch.Tensor, ...]:
    return value if isinstance(value, tuple) else (value,)


def _absolute(value: Argument) -> Argument:
    """``|value|`` for a float tensor or a float; anything else (indices, ints) as it is."""
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        if value.element_size() == 1:  # fp8: CUDA has no abs of it; exact through float32
            return value.float().abs().to(value.dtype)
        return value.abs()
    if isinstance(value, float):
        return abs(value)
    return value


def allowed_errors(
    spec: m.Spec,
    args: Sequence[Argument],
    expected: Outputs,
    reference: Reference | None = None,
) -> tuple[torch.Tensor, ...]:
    """The largest ``|out - ref|`` allowed at each element of each output (float64 tensors
    shaped like ``expected``, on its device), by the rule of this module.

    ``args`` are the launcher's positional arguments (``spec.inputs`` order), ``expected`` the
    reference's output(s) for them, ``reference`` the function that made it (called once more
    on ``|args|`` for the magnitude ``S`` when the spec rounds in a sum; ``None`` uses
    ``|expected|``). Raises KeyError when a summed size cannot be read off the shapes.
    """
    import torch

    spec = bind_to(spec, args)
    expected = _as_tuple(expected)
    g = growth(spec, extents(spec, args, expected))
    magnitudes: tuple[torch.Tensor | None, ...] = (None,) * len(expected)
    if g > 0 and reference is not None:
        magnitudes = _as_tuple(reference(*(_absolute(a) for a in args)))
    floats = float_stores(spec)
    bounds = []
    for tensor, ref, magnitude in zip(spec.outputs, expected, magnitudes, strict=False):
        ref = ref.double()
        if tensor.dtype.id not in BASE:  # an integer output
            bounds.append(torch.full_like(ref, 1.0 if tensor.name.id in floats else 0.0))
            continue
        atol, rtol = BASE[tensor.dtype.id]
        bound = atol + rtol * ref.abs()
        if g > 0:
            scale = ref.abs()
            if magnitude is not None and magnitude.shape == ref.shape:
                size = magnitude.double().abs()
                scale = torch.where(torch.isfinite(size), torch.maximum(size, scale), scale)
            bound = bound + 2 * g * scale
        bounds.append(bound)
    return tuple(bounds)


def bind_to(spec: m.Spec, args: Sequence[Argument]) -> m.Spec:
    """``spec`` specialized to the dtypes of ``args`` (the launcher's positional arguments): each
    dtype variable takes the dtype of the first input typed with it, as the launcher reads it.
    A spec without dtype variables, or already specialized, is returned as it is."""
    unbound = {v.name.id for v in spec.dtype_vars}
    if not unbound or any(isinstance(t.dtype, m.BoundDtype) for t in spec.tensors):
        return spec
    names = {torch_name: name for name, (_, torch_name) in m.DTYPES.items()}
    binding: dict[str, str] = {}
    for tensor, arg in zip(spec.inputs, args, strict=False):
        if tensor.dtype.id in unbound and tensor.dtype.id not in binding and hasattr(arg, "dtype"):
            binding[tensor.dtype.id] = names[str(arg.dtype)]
    return m.specialize(spec, binding)


@dataclass(frozen=True)
class Comparison:
    """A kernel's outputs against its reference: ``max_error``, the largest ``|out - ref|``
    over all outputs (in the outputs' units; inf for a NaN on one side, or for a shape or dtype
    mismatch; 0 for NaN on both sides under ``equal_nan``);
    ``ratio``, the largest ``|out - ref| / allowed`` (a pure number; <= 1 passes); ``passed``;
    ``detail``, the element with that ratio (or the mismatch), for messages; ``tolerance``, the
    error allowed at the element of ``max_error`` (NaN where nothing was compared)."""

    max_error: float
    ratio: float
    passed: bool
    detail: str = ""
    tolerance: float = math.nan


def compare(
    spec: m.Spec,
    args: Sequence[Argument],
    outputs: Outputs,
    expected: Outputs,
    reference: Reference | None = None,
    *,
    equal_nan: bool = False,
) -> Comparison:
    """Compare ``outputs`` with ``expected`` under :func:`allowed_errors` (see there for the
    arguments). Shapes and dtypes must match exactly; NaN fails, unless ``equal_nan`` and the
    reference is NaN at the same place (a NaN on one side only always fails, and ``detail`` says
    so); equal values (infinities included) pass."""
    import torch

    outputs, expected = _as_tuple(outputs), _as_tuple(expected)
    if len(outputs) != len(expected):
        return Comparison(math.inf, math.inf, False, f"{len(outputs)} outputs, {len(expected)} expected")
    for tensor, out, ref in zip(spec.outputs, outputs, expected, strict=False):
        if out.shape != ref.shape or out.dtype != ref.dtype:
            detail = f"{tensor.name.id}: {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {ref.dtype}"
            return Comparison(math.inf, math.inf, False, detail)
    bounds = allowed_errors(spec, args, expected, reference)
    worst, ratio, detail, allowed = 0.0, 0.0, "", math.nan
    for tensor, out, ref, bound in zip(spec.outputs, outputs, expected, bounds, strict=False):
        if out.numel() == 0:
            continue
        shape = tuple(out.shape)
        out, ref, bound = out.double().flatten(), ref.double().flatten(), bound.flatten()
        same = out == ref  # equal values pass, equal infinities included
        if equal_nan:
            same = same | (out.isnan() & ref.isnan())
        # a NaN on either side, or an infinity the other side does not match, fails outright
        broken = ~same & ~(torch.isfinite(out) & torch.isfinite(ref))
        diff = torch.where(same, torch.zeros_like(out), (out - ref).abs())
        diff = torch.where(broken, torch.full_like(diff, math.inf), diff)
        share = torch.where(same, torch.zeros_like(diff), diff / bound)
        share = torch.where(broken, torch.full_like(share, math.inf), share)
        index, largest = int(share.argmax()), int(diff.argmax())
        if math.isnan(allowed) or diff[largest].item() > worst:
            worst, allowed = diff[largest].item(), bound[largest].item()
        if share[index].item() > ratio:
            ratio = share[index].item()
            where = ", ".join(map(str, _unravel(index, shape)))
            detail = f"{tensor.name.id}[{where}] = {out[index].item():.6g}, reference {ref[index].item():.6g}: "
            out_nan, ref_nan = math.isnan(out[index].item()), math.isnan(ref[index].item())
            if out_nan != ref_nan:
                detail += "NaN on one side only"
            elif out_nan:
                detail += "NaN on both sides, which fails unless NaN is taken as equal to NaN (equal_nan)"
            else:
                detail += f"|error| {diff[index].item():.3g}, allowed {bound[index].item():.3g}"
    return Comparison(worst, ratio, ratio <= 1.0, detail, allowed)


def _unravel(index: int, shape: Iterable[int]) -> list[int]:
    where = []
    for extent in reversed(tuple(shape)):
        where.append(index % extent)
        index //= extent
    return where[::-1]


def assert_close(
    spec: m.Spec,
    args: Sequence[Argument],
    outputs: Outputs,
    expected: Outputs,
    reference: Reference | None = None,
    *,
    equal_nan: bool = False,
) -> Comparison:
    """:func:`compare`, raising AssertionError (naming the worst element) unless it passes."""
    result = compare(spec, args, outputs, expected, reference, equal_nan=equal_nan)
    if not result.passed:
        raise AssertionError(f"{spec.name.id} is outside its tolerance (tilegen.tolerance): {result.detail}")
    return result
