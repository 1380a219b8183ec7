"""What the checker's parts share: the reserved names, the rules of block sizes, the names in
scope at one point of the body (:class:`Scope`), and the state of one run over a spec
(:class:`CheckState`), which every part receives and which collects their diagnostics.
"""

from __future__ import annotations

import builtins
import keyword
from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.errors import Collector
from tilegen.functions import CASTS, FUNCTIONS
from tilegen.spec_text import extent_text

#: Words of the language itself; a spec cannot use them as names.
KEYWORDS = frozenset(
    {"kernel", "in", "out", "block", "grid", "over", "by", "unmasked", "wrapped", "whole", "flat", "persistent"}
    | {"swizzle", "group", "as", "for", "tune", "key", "config", "default", "choose", "from", "access", "dtype"}
    | {"split", "backward", "place", "of", "packed"}
)

#: Names a spec may not use: Python and language keywords, and names the generated module
#: defines at module level (imports, helpers, functions) or uses as launch options.
RESERVED = frozenset(
    set(keyword.kwlist)
    | set(keyword.softkwlist)
    | KEYWORDS
    | set(FUNCTIONS)
    | set(CASTS)
    | set(m.LAUNCH_OPTIONS)
    | {"tl", "triton", "torch", "os", "warnings", "grid", "reference", "kernel", "meta", "math", "self", "none"}
    | {"device", "launch", "int64", "folded", "config", "tune_key", "json", "functools", "TensorDescriptor"}
    | {"key", "config_index", "device_index", "op", "threading", "wrap_triton"}
    | {"name"}  # torch.ops.tilegen.name is the op namespace's own attribute
    | {"NUM_SMS", "INT64_OFFSETS", "FOLDED_GRID", "LOOP_STAGES"}  # launcher locals, module imports, kernel constexprs
    | {"partials", "parts"}  # a split loop's launcher locals
    | {"sys", "importlib"}  # the generated module loads its runtime by path
    | {"TAIL_M", "TAIL_N", "tail_m", "tail_n"}  # split tail's kernel constexprs and launcher locals
    | set(dir(builtins))  # the launchers call isinstance, type, abs, min, ValueError, ...
)

#: Name shapes the generated kernel uses for its own arguments (``x_ptr``, ``stride_x_n``).
GENERATED_PREFIXES = ("_", "apply_", "stride_")
GENERATED_SUFFIXES = ("_ptr", "_desc", "_strides")

#: Triton's ``tl.dot`` needs every tile dimension to be at least this large.
MIN_DOT_TILE = 16

#: The most elements a TMA descriptor's block (its "box") takes along one dimension (CUDA's
#: ``cuTensorMapEncodeTiled``: every ``boxDim`` is at most 256).
MAX_TMA_BOX = 256


def is_power_of_two(value: int) -> bool:
    """True for 1, 2, 4, 8, ... (``tl.arange`` extents must be powers of two)."""
    return value >= 1 and value & (value - 1) == 0


def is_two_pieces(value: int) -> bool:
    """True for a sum of two different powers of two (192 = 128 + 64, 320 = 256 + 64) whose
    smaller one is at least :data:`MIN_DOT_TILE`: a block that the kernel holds as two
    power-of-two pieces (see :func:`tilegen.check.schedule.check_pieces`)."""
    low = value & -value
    return value > 0 and is_power_of_two(value - low) and low >= MIN_DOT_TILE


def block_text(axis: m.Axis) -> str:
    """What tiles ``axis``, as a message names it: its block parameter (``BM``), else ``all of N``
    (a whole axis; or one written without its block, which its declaration's check reports)."""
    return f"all of {extent_text(axis)}" if axis.block is None else axis.block.id


@dataclass
class Scope:
    """What names mean at one point of the body: axes in scope and local tile variables."""

    axes: dict[str, m.Axis]
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> axes
    declared: set[str] = field(default_factory=set)  # names made with ``name: dtype[...]``
    loop_axes: tuple[str, ...] = ()
    dtypes: dict[str, str | None] = field(default_factory=dict)  # local name -> its dtype (None: a literal's)


@dataclass
class CheckState:
    """One run of the checker over one spec: the spec, the diagnostics collected so far, and
    what the rules learn on the way and later rules read (names defined, outputs written,
    swizzle aliases, loop axes, blocks of two pieces, descriptor block shapes)."""

    spec: m.Spec
    errors: Collector = field(default_factory=Collector)
    dims: set[str] = field(init=False)  # the size symbols: the tensors' shapes, derived ones, integer scalars
    tensor_dims: set[str] = field(init=False)  # the size symbols of the tensors' shapes
    params: dict[str, m.Param] = field(init=False)  # block parameter name -> its declaration
    written: set[str] = field(default_factory=set)  # tensors stored to
    names: dict[str, m.Span] = field(default_factory=dict)  # every name defined -> where
    alias_of: dict[str, str] = field(default_factory=dict)  # swizzled axis name -> the grid axis it remaps
    loop_axes: dict[str, m.Axis] = field(default_factory=dict)  # loop axis name -> its first loop
    # (value span, block) of block values refused as past a TMA box, once each
    boxes: set[tuple[m.Span, str]] = field(default_factory=set)
    pieced: dict[str, list[m.Number]] = field(default_factory=dict)  # block parameter -> its values of two pieces
    descriptor_blocks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tensor -> its first access's blocks
    across: set[int] = field(default_factory=set)  # ids of the reductions across programs accepted (programs.py)

    def __post_init__(self) -> None:
        scalars = {t.name.id for t in self.spec.inputs if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES}
        self.dims = {d.id for t in self.spec.tensors for d in t.dims if isinstance(d, m.Name)}
        self.tensor_dims = self.dims - scalars  # sizes the inputs' shapes give
        # sizes the launcher computes (c over C / G) and integer scalar inputs (g over G, out y: f32[B, G])
        self.dims |= {name for name, _ in self.spec.derived} | scalars
        self.params = {p.name.id: p for p in self.spec.params}

    def define(self, name: m.Name, what: str) -> None:
        """Record a new name; report reserved names, names of the generated code's shapes
        (:data:`GENERATED_PREFIXES`, :data:`GENERATED_SUFFIXES`, ``<kernel>_kernel``) and
        duplicate names."""
        ident = name.id
        generated = (
            ident.startswith(GENERATED_PREFIXES)
            or ident.endswith(GENERATED_SUFFIXES)
            or ident == f"{self.spec.name.id}_kernel"
        )
        if ident in RESERVED or generated:
            why = (
                " (names starting with _, apply_ or stride_, ending in _ptr, _desc or _strides, and the "
                "kernel's own <name>_kernel are kept for generated code)"
                if generated and ident not in RESERVED
                else ""
            )
            self.errors.error(f"{what} name '{ident}' is reserved{why}; choose another name", name.span)
        elif ident in self.names:
            first = self.names[ident]
            self.errors.error(
                f"duplicate name '{ident}' (first defined at line {first.line})", name.span
            )
        else:
            self.names[ident] = name.span

    def param_values(self, name: str) -> list[m.Number]:
        """Every value parameter ``name`` can take: its default and each config's setting."""
        param = self.params.get(name)
        values = [param.default] if param is not None and param.default is not None else []
        if self.spec.tune is not None:
            values += [v for c in self.spec.tune.configs if (v := c.get(name)) is not None]
        return [v for v in values if v.is_int]
