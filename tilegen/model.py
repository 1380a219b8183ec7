"""The spec model: what a ``.tile`` file says, as frozen dataclasses with source spans.

The parser builds these from the Lark tree; the checker validates them; lowering reads them.
Nothing here knows about Triton. Every node keeps the :class:`Span` it came from so later
stages can report ``file:line:col`` errors and name spec lines in generated comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

#: Spec dtype name -> (triton dtype, torch dtype). Also the set of dtypes the language knows.
DTYPES: dict[str, tuple[str, str]] = {
    "f16": ("tl.float16", "torch.float16"),
    "bf16": ("tl.bfloat16", "torch.bfloat16"),
    "f32": ("tl.float32", "torch.float32"),
    "f64": ("tl.float64", "torch.float64"),
    "i8": ("tl.int8", "torch.int8"),
    "i16": ("tl.int16", "torch.int16"),
    "i32": ("tl.int32", "torch.int32"),
    "i64": ("tl.int64", "torch.int64"),
    "u8": ("tl.uint8", "torch.uint8"),
}

FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})

#: ``dot(..., precision=...)`` values, as Triton's ``input_precision`` spells them.
PRECISIONS = ("ieee", "tf32", "tf32x3")


@dataclass(frozen=True)
class Span:
    """Where a node is in the spec: 1-based line and column of its start and end."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Name:
    """An identifier as written, with its span."""

    id: str
    span: Span


@dataclass(frozen=True)
class Number:
    """A numeric literal as written (``text`` is kept for exact reproduction)."""

    text: str
    span: Span

    @property
    def is_int(self) -> bool:
        """True for literals without a point or exponent (``3``, not ``3.0`` or ``1e3``)."""
        return self.text.isdigit()


# ------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Tensor:
    """``in a: f16[M, K]``: a kernel argument with role, dtype and shape.

    ``dims`` holds a :class:`Name` for a symbolic extent (``M``) or a :class:`Number` for a
    literal one (``3`` in ``u8[3, H, W]``).
    """

    role: str  # "in" | "out"
    name: Name
    dtype: Name
    dims: tuple[Name | Number, ...]
    span: Span


@dataclass(frozen=True)
class Param:
    """``BM = 64``: a compile-time parameter (block size or group size) and its default."""

    name: Name
    default: Number
    span: Span


@dataclass(frozen=True)
class Axis:
    """``m over M by BM [unmasked]``: tiles of dimension ``dim`` in steps of block ``block``.

    Used for grid axes (one program per tile) and loop axes (one iteration per tile).
    ``masked`` is False when the spec says ``unmasked``: no bounds mask is generated and the
    launcher requires the extent to be a multiple of the block.
    """

    name: Name
    dim: Name
    block: Name
    masked: bool
    span: Span


@dataclass(frozen=True)
class Swizzle:
    """``swizzle m, n group G [as sm, sn]``: grouped program ordering on a 2D grid.

    ``group`` is a literal (:class:`Number`) or an overridable :class:`Param`. Without ``as``
    the axes ``m, n`` themselves are remapped; with it the remapped tiles get the new names
    ``aliases`` and ``m, n`` keep the program's own position (the lecture's swizzle demo).
    """

    axes: tuple[Name, Name]
    group: Number | Param
    aliases: tuple[Name, Name] | None
    span: Span


# ------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Ref:
    """A local tile variable used in an expression (``acc``)."""

    name: Name
    span: Span


@dataclass(frozen=True)
class Load:
    """``x[0, h, w]``: a tile of tensor ``tensor``; each index is an axis name or an integer."""

    tensor: Name
    index: tuple[Name | Number, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    """``left op right`` with ``op`` one of ``+ - * /``."""

    op: str
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True)
class Neg:
    """``-operand``."""

    operand: Expr
    span: Span


@dataclass(frozen=True)
class Call:
    """``func(args..., key=value)``, e.g. ``dot(a[m, k], b[k, n], precision=ieee)``."""

    func: Name
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[Name, Name | Number], ...]
    span: Span


Expr = Union[Number, Ref, Load, BinOp, Neg, Call]

# ------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Declare:
    """``acc: f32[m, n] = 0``: a tile variable over the given axes, filled with a constant."""

    name: Name
    dtype: Name
    axes: tuple[Name, ...]
    init: Expr
    span: Span


@dataclass(frozen=True)
class Assign:
    """``t = expr``: a local tile variable."""

    name: Name
    value: Expr
    span: Span


@dataclass(frozen=True)
class Accumulate:
    """``acc += expr``: in-place update of a declared tile variable."""

    name: Name
    value: Expr
    span: Span


@dataclass(frozen=True)
class Store:
    """``c[m, n] = expr``: write a tile of an output tensor (cast to its dtype)."""

    tensor: Name
    index: tuple[Name | Number, ...]
    value: Expr
    span: Span


@dataclass(frozen=True)
class Loop:
    """``for k over K by BK [unmasked]`` with an indented body: a loop over tiles of ``K``."""

    axis: Axis
    body: tuple[Stmt, ...]
    span: Span


Stmt = Union[Declare, Assign, Accumulate, Store, Loop]


@dataclass(frozen=True)
class Spec:
    """One ``kernel``: its name, declarations and body, with the text it was parsed from.

    ``path`` is the display path used in errors and generated headers (relative, never a
    machine path); ``source`` the full spec text.
    """

    name: Name
    tensors: tuple[Tensor, ...]
    params: tuple[Param, ...]
    grid: tuple[Axis, ...]
    swizzle: Swizzle | None
    body: tuple[Stmt, ...]
    path: str
    source: str

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors with role ``in``, in declaration order (the launcher's arguments)."""
        return tuple(t for t in self.tensors if t.role == "in")

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """Tensors with role ``out``, in declaration order (what the launcher returns)."""
        return tuple(t for t in self.tensors if t.role == "out")

    def axes(self) -> tuple[Axis, ...]:
        """Every axis: the grid's, then each loop's in body order (nested loops included)."""
        found = list(self.grid)

        def walk(body) -> None:
            for stmt in body:
                if isinstance(stmt, Loop):
                    found.append(stmt.axis)
                    walk(stmt.body)

        walk(self.body)
        return tuple(found)

    def tensor(self, name: str) -> Tensor | None:
        """The tensor called ``name``, or None."""
        return next((t for t in self.tensors if t.name.id == name), None)
