"""The spec model: what a ``.tile`` file says, as frozen dataclasses with source spans.

The parser builds these from the Lark tree; the checker validates them; lowering reads them.
Nothing here knows about Triton. Every node keeps the :class:`Span` it came from so later
stages can report ``file:line:col`` errors and name spec lines in generated comments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TypeGuard, cast

from typing_extensions import assert_never

#: Spec dtype name -> (triton dtype, torch dtype). Also the set of dtypes the language knows.
DTYPES: dict[str, tuple[str, str]] = {
    "f16": ("tl.float16", "torch.float16"),
    "bf16": ("tl.bfloat16", "torch.bfloat16"),
    "f32": ("tl.float32", "torch.float32"),
    "f64": ("tl.float64", "torch.float64"),
    "f8e4m3": ("tl.float8e4nv", "torch.float8_e4m3fn"),
    "f8e5m2": ("tl.float8e5", "torch.float8_e5m2"),
    "i8": ("tl.int8", "torch.int8"),
    "i16": ("tl.int16", "torch.int16"),
    "i32": ("tl.int32", "torch.int32"),
    "i64": ("tl.int64", "torch.int64"),
    "u8": ("tl.uint8", "torch.uint8"),
    "bool": ("tl.int1", "torch.bool"),  # a mask: comparisons give one, where() and any/all take one
}

FLOAT_DTYPES = frozenset({"f8e4m3", "f8e5m2", "f16", "bf16", "f32", "f64"})

#: Bytes per element of each dtype.
DTYPE_BYTES = {"f8e4m3": 1, "f8e5m2": 1, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
               "u8": 1, "bool": 1}

#: ``dot(..., precision=...)`` values, as Triton's ``input_precision`` spells them.
PRECISIONS = ("ieee", "tf32", "tf32x3")

#: Memory-access styles (``access ...``): pointer tiles, ``tl.make_block_ptr``/``tl.advance``,
#: or tensor descriptors (``tl.make_tensor_descriptor``: TMA on Hopper).
ACCESS_STYLES = ("pointers", "block_ptr", "descriptor")

#: ``config`` settings that are launch options rather than block parameters.
LAUNCH_OPTIONS = ("num_warps", "num_stages")


def source_lines(text: str) -> list[str]:
    """The lines of a spec as the parser numbers them: split at ``\\n`` only (``str.splitlines``
    also splits at ``\\x0c``, ``\\x85``, ``\\u2028``, ..., which would shift line numbers)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


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
class BoundDtype(Name):
    """A dtype written as a dtype variable (``a: T[M, K]`` with ``dtype T in f16, bf16``), in one
    specialization of the spec (:func:`specialize`): ``id`` is the dtype ``T`` stands for there,
    ``var`` the variable's name and ``options`` every dtype it may stand for. Checking and the
    promotion rules read ``id``; lowering writes ``var``, so that every specialization lowers to
    the same text (one kernel, which Triton specializes per dtype)."""

    var: str = ""
    options: tuple[str, ...] = ()


def as_written(dtype: Name) -> str:
    """A dtype as the spec writes it: the dtype variable (``T``) of a :class:`BoundDtype`, else
    the dtype's name (``f16``)."""
    return dtype.var if isinstance(dtype, BoundDtype) else dtype.id


@dataclass(frozen=True)
class Number:
    """A numeric literal as written (``text`` is kept for exact reproduction)."""

    text: str
    span: Span

    @property
    def is_int(self) -> bool:
        """True for literals without a point or exponent (``3``, not ``3.0`` or ``1e3``)."""
        return self.text.isdigit()

    @property
    def value(self) -> float:
        """The literal's value (``inf`` is ``math.inf``)."""
        return float(self.text)  # float() reads "inf" too


# ------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Tensor:
    """``in a: f16[M, K]``: a kernel argument with role, dtype and shape.

    ``dims`` holds a :class:`Name` for a symbolic extent (``M``) or a :class:`Number` for a
    literal one (``3`` in ``u8[3, H, W]``). ``sample`` is the closed range ``[low, high]`` of
    ``in x: f32[N] in [0.01, 10]``: ``tilegen run``, ``demo`` and ``bench`` draw the input from it
    (:func:`tilegen.runner.random_inputs`); the generated module does not read it. Its numbers'
    ``text`` may start with ``-`` (``in [-1, 1]``), so read them through ``value``, not ``is_int``.
    """

    role: str  # "in" | "out"
    name: Name
    dtype: Name
    dims: tuple[Name | Number, ...]
    span: Span
    sample: tuple[Number, Number] | None = None
    zero_dim: bool = False  # ``loss: f32[]``, a 0-dim tensor: parsed, refused by the checker for now
    # ``out dx: f32[M, N] in place of x``: the input this output may be written over (the
    # launcher's ``inplace=True``; :mod:`tilegen.check.in_place` proves it safe)
    in_place_of: Name | None = None
    # ``out counts: i32[B] = 0``: the number the launcher fills the output with before the kernel
    # runs (an output scatter-added into, ``counts[x[i]] += 1``, starts at it); None: not filled.
    # ``in ignore_index: i64 = -100``: a scalar input's default (the launcher's, the reference's)
    # ``in weight: f32[V] = 1``: an optional tensor input, each element of it this number where absent
    initial: Number | None = None
    # ``out y: f32[B1 - 1, D]``: each dimension written as an expression of sizes, as (the size
    # symbol ``dims`` holds in its place, :func:`derived_name`; the expression)
    extents: tuple[tuple[str, Expr], ...] = ()
    # ``in weight: T[O, C, KH, KW] packed [KH, KW, O, C]``: the memory order the launcher copies the
    # input into (outermost first; :func:`tilegen.runtime.packed`), each dimension named by its size;
    # () where the input is taken in whatever strides it has
    packed: tuple[Name, ...] = ()
    packed_span: Span | None = None

    @property
    def packed_order(self) -> tuple[int, ...]:
        """``packed [KH, KW, O, C]`` of ``T[O, C, KH, KW]`` as the dimensions' positions in that
        order, ``(2, 3, 0, 1)`` (a checked spec names each dimension once); () when not packed."""
        names = [d.id if isinstance(d, Name) else None for d in self.dims]
        return tuple(names.index(n.id) for n in self.packed)

    @property
    def is_scalar(self) -> bool:
        """True for ``in alpha: f32`` (no shape): a number passed by value, not a tensor."""
        return not self.dims and not self.zero_dim

    @property
    def optional(self) -> bool:
        """``in weight: f32[V] = 1``: a tensor input the caller may leave out (None, the launcher's
        default); absent, every element reads as ``initial``."""
        return self.role == "in" and self.initial is not None and not self.is_scalar

    @property
    def default(self) -> float | int | None:
        """A scalar input's default as the launcher takes it (``in ignore_index: i64 = -100``:
        ``-100``; a float for a float dtype), else None."""
        if self.role != "in" or self.initial is None or not self.is_scalar:
            return None
        value = float(self.initial.text)
        return value if self.dtype.id in FLOAT_DTYPES else int(value)


@dataclass(frozen=True)
class DtypeVar:
    """``dtype T in f16, bf16``: a dtype variable. Tensors, tiles and casts may be typed ``T``;
    the launcher takes ``T`` from the dtype of the first input typed ``T`` and requires the other
    ``T`` inputs to match it; outputs typed ``T`` are made in it.

    Where no input is typed with it (``dtype G in T, f32`` with ``out db: G[K, N]``), the caller
    chooses it: a launcher keyword ``G`` (a torch dtype; None, the default, is the first option).
    An option may then name an earlier variable (``T``), standing for whatever that one is."""

    name: Name
    options: tuple[Name, ...]
    span: Span


@dataclass(frozen=True)
class Param:
    """``BM = 64``: a compile-time parameter (block size or group size) and its default.

    ``default`` is None for ``block BM`` in a tuned spec, where every config sets it.
    """

    name: Name
    default: Number | None
    span: Span


@dataclass(frozen=True)
class Axis:
    """``m over M by BM [unmasked | wrapped]``, ``i over N whole`` or ``b over B``.

    Used for grid axes (one program per tile) and loop axes (one iteration per tile).
    ``bounds`` says how tiles that pass the end of ``dim`` are handled:

    * ``"masked"`` (default): loads and stores are masked;
    * ``"unmasked"``: no mask; the launcher requires ``dim`` to be a multiple of ``block``;
    * ``"wrapped"``: loads wrap around with ``% dim`` (the Intel guide's matmul), stores are
      masked;
    * ``"whole"``: no ``block``: one tile covers the whole extent (one program along it, the
      Intel guide's add_kernel, tutorial 02's softmax row); the tile is the extent rounded up to
      a power of two, masked;
    * ``"index"``: no ``block``: one program per index, a scalar offset (a batch axis).

    ``chunk``: a whole grid axis walked in tiles (``k over D1 by BK whole``): each program still
    covers all of ``dim`` (its reductions see the whole row), in a loop over tiles of ``chunk``
    (:mod:`tilegen.row_loops` writes the loops); ``block`` stays None.
    """

    name: Name
    dim: Name
    block: Name | None
    bounds: str
    span: Span
    extent: Expr | None = None  # ``c over C / G``: the extent as written; ``dim`` names it (derived_name)
    chunk: Name | None = None

    @property
    def masked(self) -> bool:
        """True when tiles of this axis carry a bounds mask (masked and wrapped axes)."""
        return self.bounds in ("masked", "wrapped")

    @property
    def is_index(self) -> bool:
        """True for ``b over B`` (no block): a scalar index, not a tile."""
        return self.bounds == "index"

    @property
    def literal(self) -> bool:
        """True for an axis over a literal extent (``k over 4``): ``dim`` is the number's text,
        as a tensor's literal dimension (``x: f32[N, 4]``) is, and no size symbol."""
        return self.dim.id[:1].isdigit()


@dataclass(frozen=True)
class Swizzle:
    """``swizzle m, n group G [as sm, sn]``: grouped program ordering on a 2D grid.

    ``group`` is a literal (:class:`Number`), a new overridable :class:`Param` (``group G = 8``)
    or the :class:`Name` of a declared one (``group G``, e.g. a tuned parameter). Without ``as``
    the axes ``m, n`` themselves are remapped; with it the remapped tiles get the new names
    ``aliases`` and ``m, n`` keep the program's own position (the lecture's swizzle demo).
    """

    axes: tuple[Name, Name]
    group: Number | Param | Name
    aliases: tuple[Name, Name] | None
    span: Span

    @property
    def group_text(self) -> str:
        """The group size as the kernel writes it: a literal or a parameter name."""
        if isinstance(self.group, Number):
            return self.group.text
        return self.group.name.id if isinstance(self.group, Param) else self.group.id


@dataclass(frozen=True)
class Config:
    """``[default | interpreter] config BM = 128, BN = 64, num_warps = 4``: one autotune configuration.

    ``default``: the config an untuned GPU launch runs (:meth:`Spec.default_config`);
    ``interpreter``: the one Triton's interpreter runs (:meth:`Spec.interpreter_config`)."""

    settings: tuple[Param, ...]
    default: bool
    span: Span
    interpreter: bool = False

    def get(self, name: str) -> Number | None:
        """The value this config gives ``name``, or None."""
        return next((p.default for p in self.settings if p.name.id == name), None)


@dataclass(frozen=True)
class Tune:
    """``tune key M, N, K`` with its configs: ``@triton.autotune(configs=..., key=...)``.

    ``rounded`` names the key sizes written ``next_power_of_2(M)``: the launcher keys its tuned
    configs on ``triton.next_power_of_2(M)``, so sizes that round to one power share a config.
    """

    key: tuple[Name, ...]
    configs: tuple[Config, ...]
    span: Span
    rounded: frozenset[str] = frozenset()

    def key_text(self, name: str) -> str:
        """How key size ``name`` enters the launcher's tune key (a Python expression)."""
        return f"triton.next_power_of_2({name})" if name in self.rounded else name

    @property
    def key_as_written(self) -> str:
        """The key as the spec writes it: ``next_power_of_2(M), N, K``."""
        return ", ".join(f"next_power_of_2({k.id})" if k.id in self.rounded else k.id for k in self.key)


@dataclass(frozen=True)
class Choice:
    """``choose activation from none, leaky_relu``: a function chosen at launch.

    The launcher takes ``activation="leaky_relu"``; the kernel gets it as the constexpr
    ``ACTIVATION`` (Triton tutorial 03). ``none`` is the identity.
    """

    name: Name
    options: tuple[Name, ...]
    span: Span

    @property
    def constexpr(self) -> str:
        """The kernel's constexpr parameter name (``ACTIVATION``)."""
        return self.name.id.upper()


# ------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Ref:
    """A local tile variable used in an expression (``acc``)."""

    name: Name
    span: Span


@dataclass(frozen=True)
class Load:
    """``x[0, h, w]``: a tile of tensor ``tensor``; each index is an axis name, an integer, a
    gather: a :class:`Load` of an integer tensor (``logits[r, target[r]]``), or an offset axis:
    arithmetic of one axis with sizes and integers (``x[r, c + N / 2]``, :func:`is_offset`), whose
    lanes outside the tensor read 0."""

    tensor: Name
    index: tuple[Index, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    """``left op right``: arithmetic (``+ - * /``; ``//`` and ``%`` of integers), a comparison (``< <= > >= == !=``) or
    logic on masks (``& |``)."""

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
    """``func(args..., key=value)``, e.g. ``dot(a[m, k], b[k, n], precision=ieee)`` or
    ``sum(x[r, c], dim=c)``. A keyword's value is an expression; a bare word (``ieee``, an
    axis) is a :class:`Ref`, read with :meth:`word`."""

    func: Name
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[Name, Expr], ...]
    span: Span

    def kwarg(self, key: str) -> Expr | None:
        """The value given for keyword ``key``, or None."""
        return next((value for name, value in self.kwargs if name.id == key), None)

    def word(self, key: str) -> str | None:
        """The bare word given for keyword ``key`` (``ieee`` in ``precision=ieee``), or None."""
        value = self.kwarg(key)
        return value.name.id if isinstance(value, Ref) else None


Expr = Number | Ref | Load | BinOp | Neg | Call

#: One item of a tensor index as parsed (``x[r, 0, target[r], c + N / 2]``): an axis (a bare
#: name is a :class:`Name`, not a :class:`Ref`), a constant, a gather or an offset axis (the
#: arithmetic as written, :func:`is_offset`). The grammar takes any arithmetic, so a call may
#: appear too; the checker refuses what it cannot index with.
Index = Name | Number | Load | BinOp | Neg | Call

# ------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Declare:
    """``acc: f32[m, n] = 0``: a tile variable over the given axes, filled with a constant;
    ``s: f32[] = 0`` (no axes) is one number per program."""

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
    """``c[m, n] = expr``: write a tile of an output tensor (cast to its dtype). With ``update``
    ``"add"``, ``y[idx[t], c] += expr``, a scatter-add: each lane adds its value into its element by
    an atomic add (``tl.atomic_add``), so lanes and programs that meet at one element (a repeated
    index, a grid axis the index leaves out) all add up, in an order the hardware picks. The checker
    takes f32, f64, i32 and i64 outputs only (an atomic add into f16 or bf16 would round at every
    add). With ``"max"`` or ``"min"`` (``first[idx[t]] min= t``) each lane keeps the larger or
    smaller of its value and the element's (``tl.atomic_max`` / ``tl.atomic_min``), on i32 and i64
    outputs: the result is the same whatever the order."""

    tensor: Name
    index: tuple[Index, ...]
    value: Expr
    span: Span
    # "" a plain store; "add", "max", "min": an atomic update (``+=``, ``max=``, ``min=``)
    update: str = ""
    # ``y[offsets[r] + c] = v where c < n``: the mask of the lanes the store writes (None: every
    # lane inside the tensor)
    guard: Expr | None = None

    @property
    def atomic(self) -> bool:
        """Whether lanes and programs meeting at one element combine (``+=``, ``max=``, ``min=``),
        where a plain store's would race."""
        return bool(self.update)


@dataclass(frozen=True)
class Loop:
    """``for k over K by BK [unmasked] [split]`` with an indented body: a loop over tiles of
    ``K``. ``split``: the launcher may run each output tile's loop in several programs, each
    over a part of ``K`` (split-K), and add up their partial sums. ``reverse``: the tiles run
    from the last to the first (no spec writes it: a long row's scan from the end,
    :mod:`tilegen.row_loops`)."""

    axis: Axis
    body: tuple[Stmt, ...]
    span: Span
    split: bool = False
    reverse: bool = False


#: The statements of the language: a closed union. Code that does something per kind of statement
#: ``match``\es on it and ends in ``case _: assert_never(stmt)``, so that mypy names every such
#: place a new kind of statement misses (docs/language.md, "Adding a statement"). What holds for
#: every statement (walking a body, rebuilding it, the expressions a statement holds) is written
#: once, below: :func:`statements`, :func:`map_body`, :func:`values`, :func:`map_values`.
Stmt = Declare | Assign | Accumulate | Store | Loop


@dataclass(frozen=True)
class Ordered:
    """How the kernel of a ``deterministic`` spec walks its tokens (:mod:`tilegen.lower.ordered`):
    the grid axis ``axis`` (``t``) runs over positions of the tokens sorted stably by the index
    input ``key`` (``idx``, loaded as ``idx[t]`` by every ``+=`` store); the inputs ``order`` (the
    token at each sorted position) and ``run_end`` (at the first position of a run of equal
    indices, the position past its end; elsewhere the position itself), i64 [N] both, which the
    launcher computes (``_rt.sorted_runs``)."""

    axis: str
    key: str
    order: str
    run_end: str


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
    flat: bool = False
    # one program per SM looping over the tiles: of a flat grid (``flat`` too), or, with whole axes,
    # of the one tiled axis (the rows: ``grid persistent r over M by BM, c over N whole``)
    persistent: bool = False
    tune: Tune | None = None
    choices: tuple[Choice, ...] = ()
    access: Name | None = None
    dtype_vars: tuple[DtypeVar, ...] = ()
    # ``split tail`` (the span of each such line; the checker allows one): on a flat grid, the
    # tiles of the last partial wave run as 2 or 4 sub-tiles each
    split_tail: tuple[Span, ...] = ()
    # ``backward softmax_backward``: the kernels (specs of those names beside this one, run in
    # order) computing this kernel's gradients, which the generated module registers with
    # torch.autograd; () where the spec names none
    backward: tuple[Name, ...] = ()
    # ``backward deterministic k``: the kernels run instead of ``backward``'s where torch's
    # deterministic algorithms are on (``torch.use_deterministic_algorithms(True)``)
    deterministic_backward: tuple[Name, ...] = ()
    # ``deterministic`` (its line): the ``+=`` stores add in the order of their tokens
    deterministic: Span | None = None
    # the kernel of a deterministic spec (set by :func:`tilegen.lower.ordered.ordered_spec`, not by
    # the parser): its programs walk the tokens sorted by their index
    ordered: Ordered | None = None

    @property
    def access_style(self) -> str:
        """``"pointers"`` (default) or ``"block_ptr"``."""
        return self.access.id if self.access is not None else "pointers"

    @property
    def walks_rows(self) -> bool:
        """A persistent grid over one tiled axis beside whole ones (``grid persistent r over M by
        BM, c over N whole``): each program walks row tiles, NUM_SMS apart."""
        return self.persistent and not self.flat

    @property
    def in_place(self) -> tuple[Tensor, ...]:
        """The outputs the launcher may write over an input (``out dx: f32[N] in place of x``)."""
        return tuple(t for t in self.outputs if t.in_place_of is not None)

    @property
    def tuned_params(self) -> tuple[str, ...]:
        """Parameters set by the tune configs (not launcher keywords), in declaration order."""
        if self.tune is None:
            return ()
        named = {p.name.id for c in self.tune.configs for p in c.settings}
        return tuple(p.name.id for p in self.params if p.name.id in named)

    def default_config(self) -> Config | None:
        """The config a GPU launch runs untuned (``TILEGEN_TUNE=none``, or ``quick`` with nothing
        tuned for its sizes): the one marked ``default``, else the first; None without ``tune``."""
        if self.tune is None:
            return None
        return next((c for c in self.tune.configs if c.default), self.tune.configs[0])

    def interpreter_config(self) -> Config | None:
        """The config Triton's interpreter runs unless one is forced: the one marked
        ``interpreter`` (small tiles keep the interpreter quick and its loops several tiles
        long), else :meth:`default_config`; None without ``tune``."""
        if self.tune is None:
            return None
        return next((c for c in self.tune.configs if c.interpreter), None) or self.default_config()

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors with role ``in``, in declaration order (the launcher's arguments)."""
        return tuple(t for t in self.tensors if t.role == "in")

    @property
    def arrays(self) -> tuple[Tensor, ...]:
        """Tensors with a shape (scalars excluded): the kernel's pointer arguments."""
        return tuple(t for t in self.tensors if not t.is_scalar)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """Tensors with role ``out``, in declaration order (what the launcher returns)."""
        return tuple(t for t in self.tensors if t.role == "out")

    def axes(self) -> tuple[Axis, ...]:
        """Every axis: the grid's, then each loop's in body order (nested loops included)."""
        return self.grid + tuple(s.axis for s in statements(self.body) if isinstance(s, Loop))

    @property
    def derived(self) -> tuple[tuple[str, Expr], ...]:
        """The derived sizes: (its name, the expression of sizes, integer scalar inputs and
        integers it is) of each axis over one (``c over C / G whole``), then of each tensor
        dimension written as one (``out y: f32[B1 - 1, D]``), once each, in order."""
        found = {a.dim.id: a.extent for a in self.axes() if a.extent is not None}
        for tensor in self.tensors:  # out y: f32[B1 - 1, D]
            found.update((name, extent) for name, extent in tensor.extents if name not in found)
        ordered: dict[str, Expr] = {}  # each after the derived sizes it reads (p over H_out * W_out)
        while len(ordered) < len(found):
            ready = [(n, e) for n, e in found.items() if n not in ordered and all(
                r.name.id in ordered or r.name.id not in found or r.name.id == n
                for r in subexpressions(e) if isinstance(r, Ref))]
            ordered.update(ready or [next((n, e) for n, e in found.items() if n not in ordered)])
        return tuple(ordered.items())

    def tensor(self, name: str) -> Tensor | None:
        """The tensor called ``name``, or None."""
        return next((t for t in self.tensors if t.name.id == name), None)

    def dtype_options(self, dtype: Name) -> tuple[str, ...]:
        """Every dtype a tensor declared ``dtype`` may be, before specialization: a dtype
        variable's options (``T`` of ``dtype T in f16, bf16``; an option naming an earlier
        variable stands for each of that one's), or the dtype itself."""
        return self.options_of(dtype.id)

    def options_of(self, dtype: str) -> tuple[str, ...]:
        """:meth:`dtype_options` of a dtype written ``dtype`` (a variable's name, or a dtype)."""
        var = next((v for v in self.dtype_vars if v.name.id == dtype), None)
        if var is None:
            return (dtype,)
        earlier = {v.name.id for v in self.dtype_vars[:self.dtype_vars.index(var)]}
        options = (self.options_of(o.id) if o.id in earlier else (o.id,) for o in var.options)
        return tuple(dict.fromkeys(d for found in options for d in found))

    def chosen_dtype_vars(self) -> tuple[DtypeVar, ...]:
        """The dtype variables the caller chooses (a launcher keyword each): those no input
        tensor is typed with (``dtype G in T, f32`` beside ``out db: G[K, N]``)."""
        typed = {as_written(t.dtype) for t in self.inputs if not t.is_scalar}
        return tuple(v for v in self.dtype_vars if v.name.id not in typed)

    def bindings(self) -> list[dict[str, str]]:
        """Every assignment of the dtype variables to one of their dtypes, in declaration order
        (``[{}]`` for a spec without dtype variables); an option naming an earlier variable is
        that one's dtype in the same assignment (``G in T, f32``: G is T's dtype or f32)."""
        found: list[dict[str, str]] = [{}]
        for var in self.dtype_vars:
            found = [binding | {var.name.id: dtype} for binding in found
                     for dtype in dict.fromkeys(binding.get(o.id, o.id) for o in var.options)]
        return found


def specialize(spec: Spec, binding: dict[str, str]) -> Spec:
    """``spec`` with each dtype variable in ``binding`` replaced by its dtype, as a
    :class:`BoundDtype` (which remembers the variable): in tensor and tile declarations and in
    casts (``T(p)``). Names that are not dtype variables are left alone."""
    variables = {v.name.id: spec.dtype_options(v.name) for v in spec.dtype_vars}

    def bind(name: Name) -> Name:
        if name.id not in binding or isinstance(name, BoundDtype):
            return name
        return BoundDtype(binding[name.id], name.span, name.id, variables[name.id])

    def bound(e: Expr) -> Expr | None:  # a cast to a dtype variable (``T(p)``), its arguments mapped too
        if isinstance(e, Call) and bind(e.func) is not e.func:
            return map_expr(dataclasses.replace(e, func=bind(e.func)), bound)
        return None

    def stmt(s: Stmt) -> Stmt:
        if isinstance(s, Declare):  # a tile's dtype
            s = dataclasses.replace(s, dtype=bind(s.dtype))
        return map_values(s, lambda e: map_expr(e, bound))

    tensors = tuple(dataclasses.replace(t, dtype=bind(t.dtype)) for t in spec.tensors)
    return dataclasses.replace(spec, tensors=tensors, body=map_body(spec.body, stmt))


# ------------------------------------------------------------------------- walking the tree


_OPERATOR_WORDS = {"+": "plus", "-": "minus", "*": "times", "/": "over", "//": "over", "%": "mod"}


#: The longest name :func:`derived_name` spells out; a longer extent is named after its first size.
SPELLED_OUT = 20


def derived_name(extent: Expr) -> str:
    """The size symbol of a derived extent, as the generated code names it: ``C / G`` is
    ``C_over_G``, ``D / 2`` is ``D_over_2``, ``N - 1`` is ``N_minus_1``; an extent whose name would
    pass :data:`SPELLED_OUT` characters is, where it is a product of sizes, their names joined
    (``C * KD * KH * KW`` is ``C_KD_KH_KW``, ``D_out * H_out * W_out`` ``D_out_H_out_W_out``), else
    its first size's, ``_out`` added (a pooling's ``(H + 2 * P - K) / S + 1`` is ``H_out``, as
    torch's docs name it)."""
    name = _spelled(extent)
    if len(name) <= SPELLED_OUT:
        return name
    factors = _factors(extent)
    if factors:
        return "_".join(factors)
    first = next((e.name.id for e in subexpressions(extent) if isinstance(e, Ref)), "size")
    return f"{first}_out"


def _factors(extent: Expr) -> list[str]:
    """The size names of a product of sizes (``C * KD * KH``: C, KD, KH), else []."""
    if isinstance(extent, BinOp) and extent.op == "*":
        left, right = _factors(extent.left), _factors(extent.right)
        return left + right if left and right else []
    return [extent.name.id] if isinstance(extent, Ref) else []


def _spelled(extent: Expr) -> str:
    """A derived extent's name with every operator spelled out (``C_over_G``, ``minimum_N_32``)."""
    if isinstance(extent, BinOp):
        return f"{_spelled(extent.left)}_{_OPERATOR_WORDS[extent.op]}_{_spelled(extent.right)}"
    if isinstance(extent, Neg):
        return f"minus_{_spelled(extent.operand)}"
    if isinstance(extent, Ref):
        return extent.name.id
    if isinstance(extent, Call):  # minimum(N, 32): minimum_N_32
        return "_".join([extent.func.id, *(_spelled(a) for a in extent.args)])
    return extent.text if isinstance(extent, Number) else "size"


#: The calls an extent may hold, as the launcher's Python writes them (``minimum(A, B)`` is
#: ``min(A, B)``): a pooling's ``ceil_mode`` extent drops a last window that starts in the padding.
EXTENT_CALLS = {"minimum": "min", "maximum": "max"}


def is_extent_call(expr: Expr) -> TypeGuard[Call]:
    """True for ``minimum(a, b)`` or ``maximum(a, b)`` in an extent (:data:`EXTENT_CALLS`)."""
    return isinstance(expr, Call) and expr.func.id in EXTENT_CALLS and len(expr.args) == 2 and not expr.kwargs


#: The operators of index arithmetic: ``/`` of sizes rounds down (a shape formula); ``//`` and
#: ``%`` round down as Python's, and may take a tile axis (``q // KW``, ``q % KW``).
INDEX_OPERATORS = ("+", "-", "*", "/", "//", "%")

#: The integer operators, Python's: the quotient rounded down and the remainder of the divisor's sign.
FLOOR_OPERATORS = ("//", "%")


def nonnegative(expr: Expr, unsigned: Collection[str]) -> bool:
    """True where integer arithmetic ``expr`` cannot be negative: integers and the names in
    ``unsigned`` (axes, sizes) under ``+ * / // %``; a difference, a negation, a loaded number, a
    local or a scalar input may be."""
    if isinstance(expr, Number):
        return expr.is_int
    if isinstance(expr, Ref):
        return expr.name.id in unsigned
    if isinstance(expr, BinOp):
        return expr.op in ("+", "*", "/", "//", "%") and nonnegative(expr.left, unsigned) and nonnegative(
            expr.right, unsigned)
    return False


def is_offset(item: Index | Expr) -> TypeGuard[BinOp | Neg]:
    """True for an index item that is arithmetic (``c + N / 2``): an offset axis."""
    return isinstance(item, (BinOp, Neg))


def offset_names(item: Expr) -> list[str]:
    """The names an offset index item refers to (axes, sizes, scalar inputs), in order, those a
    loaded start is read at included (``b`` of ``offsets[b] + l``)."""
    names: list[str] = []
    for e in subexpressions(item):
        if isinstance(e, Ref):
            names.append(e.name.id)
        elif isinstance(e, Load):
            for i in e.index:
                names += [i.id] if isinstance(i, Name) else offset_names(i) if is_offset(i) else []
    return names


def index_locals(spec: Spec) -> Spec:
    """``spec`` with each index item that names a local of index arithmetic replaced by its value:
    ``h = stride * oh + kh - padding``, then ``x[n, c, h, w]`` reads ``x[n, c, stride * oh + kh -
    padding, ...]`` (an offset index, checked as one; a name inside an offset too: ``kh = q // KW %
    KH`` in ``x[n, c, oh + kh, ...]``), and dropped where no value reads it then. Such a local is
    assigned once, to ``+ - * / // %`` and negation of names and integers (the checker says which
    names an index takes); any other name in an index is left for the checker (an axis, or an
    error)."""
    assigned: dict[str, list[Assign | None]] = {}  # local -> its assignments (None: a declaration or update)
    for stmt in statements(spec.body):
        if isinstance(stmt, (Assign, Accumulate, Declare)):
            assigned.setdefault(stmt.name.id, []).append(stmt if isinstance(stmt, Assign) else None)
    found: dict[str, Expr] = {}

    def arithmetic(e: Expr) -> bool:
        parts = list(subexpressions(e))
        return (all(isinstance(p, (Ref, BinOp, Neg)) or (isinstance(p, Number) and p.is_int) for p in parts)
                and all(p.op in INDEX_OPERATORS for p in parts if isinstance(p, BinOp)))

    def inlined(e: Expr) -> Expr | None:  # a local of index arithmetic inside another's value
        return found[e.name.id] if isinstance(e, Ref) and e.name.id in found else None

    for name, stmts in assigned.items():
        first = stmts[0]
        if len(stmts) == 1 and first is not None and arithmetic(first.value):
            found[name] = first.value
    for name in list(found):
        found[name] = map_expr(found[name], inlined)
    if not found:
        return spec

    indexed: set[str] = set()  # the locals an index took in

    def item(i: Index) -> Index:
        if isinstance(i, Name) and i.id in found:
            indexed.add(i.id)
            return cast(Index, found[i.id])
        if isinstance(i, Load):
            return dataclasses.replace(i, index=tuple(item(j) for j in i.index))
        if is_offset(i):  # x[n, c, sh * oh + dh * kh - ph, ...] with kh = q // KW % KH
            indexed.update(e.name.id for e in subexpressions(i) if isinstance(e, Ref) and e.name.id in found)
            return cast(Index, map_expr(i, inlined))
        return i

    def load(e: Expr) -> Expr | None:
        if isinstance(e, Load):
            return dataclasses.replace(e, index=tuple(item(j) for j in e.index))
        return None

    def rewritten(s: Stmt) -> Stmt:
        s = map_values(s, lambda e: map_expr(e, load))
        return dataclasses.replace(s, index=tuple(item(j) for j in s.index)) if isinstance(s, Store) else s

    body = map_body(spec.body, rewritten)
    read = {e.name.id for stmt in statements(body) for value in values(stmt) for e in subexpressions(value)
            if isinstance(e, Ref)}

    def live(stmts: tuple[Stmt, ...]) -> tuple[Stmt, ...]:  # a local read only by indices: inlined there, gone
        kept = (dataclasses.replace(s, body=live(s.body)) if isinstance(s, Loop) else s for s in stmts
                if not (isinstance(s, Assign) and s.name.id in indexed and s.name.id not in read))
        return tuple(kept)

    return dataclasses.replace(spec, body=live(body))


def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    """Every statement of ``body`` in order, nested loop bodies included (after their loop): the
    one walk over statements."""
    for stmt in body:
        yield stmt
        match stmt:
            case Loop():
                yield from statements(stmt.body)
            case Declare() | Assign() | Accumulate() | Store():
                pass
            case _:
                assert_never(stmt)


def map_body(body: tuple[Stmt, ...], fn: Callable[[Stmt], Stmt]) -> tuple[Stmt, ...]:
    """``body`` rebuilt: each statement through ``fn``, a loop's body mapped first (``fn`` sees
    the loop with its new body): the one rewrite of statements."""

    def one(stmt: Stmt) -> Stmt:
        match stmt:
            case Loop():
                return fn(dataclasses.replace(stmt, body=map_body(stmt.body, fn)))
            case Declare() | Assign() | Accumulate() | Store():
                return fn(stmt)
            case _:
                assert_never(stmt)

    return tuple(one(stmt) for stmt in body)


def values(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions one statement computes: a declaration's fill, an assignment's, update's or
    store's value, a store's guard (not a store's index, nor a loop's body: a loop computes none
    itself)."""
    match stmt:
        case Declare():
            return (stmt.init,)
        case Assign() | Accumulate():
            return (stmt.value,)
        case Store():
            return (stmt.value,) if stmt.guard is None else (stmt.value, stmt.guard)
        case Loop():
            return ()
        case _:
            assert_never(stmt)


def local_name(stmt: Stmt) -> str | None:
    """The local variable one statement writes: a declaration's, an assignment's or an update's;
    None for a store (it writes a tensor) and a loop."""
    match stmt:
        case Declare() | Assign() | Accumulate():
            return stmt.name.id
        case Store() | Loop():
            return None
        case _:
            assert_never(stmt)


def map_values(stmt: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """``stmt`` with each expression :func:`values` gives replaced by ``fn`` of it."""
    match stmt:
        case Declare():
            return dataclasses.replace(stmt, init=fn(stmt.init))
        case Assign() | Accumulate():
            return dataclasses.replace(stmt, value=fn(stmt.value))
        case Store():
            guard = None if stmt.guard is None else fn(stmt.guard)
            return dataclasses.replace(stmt, value=fn(stmt.value), guard=guard)
        case Loop():
            return stmt
        case _:
            assert_never(stmt)


def subexpressions(expr: Expr, prune: Callable[[Expr], bool] | None = None) -> Iterator[Expr]:
    """``expr`` and every expression inside it, depth first; with ``prune`` (a predicate), not
    the expressions inside one for which it holds (it is yielded itself)."""
    yield expr
    if prune is not None and prune(expr):
        return
    if isinstance(expr, Load):
        for item in expr.index:
            if isinstance(item, Load):  # a gather's index tile
                yield from subexpressions(item, prune)
    elif isinstance(expr, BinOp):
        yield from subexpressions(expr.left, prune)
        yield from subexpressions(expr.right, prune)
    elif isinstance(expr, Neg):
        yield from subexpressions(expr.operand, prune)
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from subexpressions(arg, prune)
        for _, value in expr.kwargs:
            if not isinstance(value, Ref):  # a bare word is a choice or an axis, not a value
                yield from subexpressions(value, prune)


def map_expr(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """``expr`` rebuilt outermost first: where ``fn`` gives an expression, it replaces the part (and
    is not looked inside: ``fn`` may map its insides itself); where it gives None, the part is kept
    with its insides mapped, the ones :func:`subexpressions` walks (a gather's index tile, not an
    offset index's arithmetic; a keyword's value, not a bare word): the one rewrite of expressions."""
    found = fn(expr)
    if found is not None:
        return found
    if isinstance(expr, Load):
        # (a gather's index tile, mapped, is an index item: ``fn`` keeps an index an index)
        index = cast("tuple[Index, ...]", tuple(map_expr(i, fn) if isinstance(i, Load) else i for i in expr.index))
        return dataclasses.replace(expr, index=index)
    if isinstance(expr, BinOp):
        return dataclasses.replace(expr, left=map_expr(expr.left, fn), right=map_expr(expr.right, fn))
    if isinstance(expr, Neg):
        return dataclasses.replace(expr, operand=map_expr(expr.operand, fn))
    if isinstance(expr, Call):
        args = tuple(map_expr(a, fn) for a in expr.args)
        kwargs = tuple((k, v if isinstance(v, Ref) else map_expr(v, fn)) for k, v in expr.kwargs)
        return dataclasses.replace(expr, args=args, kwargs=kwargs)
    return expr


def accesses(stmt: Stmt) -> Iterator[Store | Load]:
    """The store target and the loads of one statement's value (a loop's body is not included;
    a declaration's fill is a constant)."""
    match stmt:
        case Store():
            yield stmt
            yield from (e for e in subexpressions(stmt.value) if isinstance(e, Load))
        case Assign() | Accumulate():
            yield from (e for e in subexpressions(stmt.value) if isinstance(e, Load))
        case Declare() | Loop():
            pass
        case _:
            assert_never(stmt)


def tensors_read(body: tuple[Stmt, ...]) -> set[str]:
    """The tensors ``body`` loads from anywhere: in its values and store guards, in a gather's or
    scatter's index tile, in an offset index's arithmetic (``values[offsets[b] + l, d]``)."""
    found: set[str] = set()

    def visit(expr: Expr) -> None:
        for sub in subexpressions(expr):
            if isinstance(sub, Load):
                found.add(sub.tensor.id)
                for item in sub.index:
                    if not isinstance(item, Name | Number | Load):  # an offset index (its loads: not walked above)
                        visit(item)

    for stmt in statements(body):
        for value in values(stmt):
            visit(value)
        if isinstance(stmt, Store):
            for item in stmt.index:
                if not isinstance(item, Name | Number):
                    visit(item)
    return found


def expr_key(expr: Expr | Name) -> tuple[object, ...]:
    """A hashable form of an expression without its source spans: two occurrences of
    ``n <= m`` in a spec have the same key."""
    if isinstance(expr, Name):
        return ("name", expr.id)
    if isinstance(expr, Number):
        return ("number", expr.text)
    if isinstance(expr, Ref):
        return ("ref", expr.name.id)
    if isinstance(expr, Load):
        return ("load", expr.tensor.id, tuple(expr_key(i) for i in expr.index))
    if isinstance(expr, BinOp):
        return ("binop", expr.op, expr_key(expr.left), expr_key(expr.right))
    if isinstance(expr, Neg):
        return ("neg", expr_key(expr.operand))
    return (
        "call",
        expr.func.id,
        tuple(expr_key(a) for a in expr.args),
        tuple((k.id, expr_key(v)) for k, v in expr.kwargs),
    )


def is_dot(expr: Expr) -> TypeGuard[Call]:
    """True for a ``dot(...)`` call."""
    return isinstance(expr, Call) and expr.func.id == "dot"


def is_detach(expr: Expr) -> TypeGuard[Call]:
    """True for a ``detach(...)`` call: nothing inside it has a gradient."""
    return isinstance(expr, Call) and expr.func.id == "detach"


def is_dot_loop(stmt: Stmt) -> bool:
    """True for a ``for`` loop whose body is only ``acc += dot(x[.., k], y[k, ..])`` lines over
    tensor tiles that both index the loop's axis ``k``: a matmul's K loop, lowered with pointers
    made once and advanced each step. Any other loop (``dot`` of computed tiles among other
    statements, attention's inner loop) is a loop over tiles."""
    if not isinstance(stmt, Loop) or not stmt.body or stmt.axis.is_index:
        return False
    k = stmt.axis.name.id
    return all(
        isinstance(s, Accumulate)
        and is_dot(s.value)
        and len(s.value.args) == 2
        and all(isinstance(a, Load) and any(isinstance(i, Name) and i.id == k for i in a.index) for a in s.value.args)
        for s in stmt.body
    )
