"""Semantic checks: a parsed :class:`~tilegen.model.Spec` is either valid or every problem in it
is reported at once as a :class:`~tilegen.errors.SpecError` with ``file:line:col``.

The rules here are what lowering relies on: names are defined once and are safe identifiers,
tensors are indexed with their rank and with axes over the dimension they index, block sizes
are powers of two, ``dot`` contracts over the enclosing loop's axis, outputs are written and
inputs are not.
"""

from __future__ import annotations

import builtins
import keyword
from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.carried import check_carried
from tilegen.dtypes import BOOL, COMPARISONS, DTYPE_LIMITS, INDEX, LOGIC, expr_dtype, integer_value, is_int
from tilegen.errors import Collector
from tilegen.functions import CASTS, CHOICE_OPTIONS, FUNCTIONS, lookup

#: Words of the language itself; a spec cannot use them as names.
KEYWORDS = frozenset(
    {"kernel", "in", "out", "block", "grid", "over", "by", "unmasked", "wrapped", "whole", "flat", "persistent"}
    | {"swizzle", "group", "as", "for", "tune", "key", "config", "default", "choose", "from", "access", "dtype"}
    | {"split"}
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
    | {"device", "launch", "int64", "config", "tune_key", "json", "functools", "TensorDescriptor"}
    | {"key", "config_index", "device_index", "op", "threading", "wrap_triton"}
    | {"name"}  # torch.ops.tilegen.name is the op namespace's own attribute
    | {"NUM_SMS", "INT64_OFFSETS"}  # launcher locals, module imports, kernel constexprs
    | {"partials", "parts"}  # a split loop's launcher locals
    | {"TAIL_M", "TAIL_N", "tail_m", "tail_n"}  # split tail's kernel constexprs and launcher locals
    | set(dir(builtins))  # the launchers call isinstance, type, abs, min, ValueError, ...
)

#: Name shapes the generated kernel uses for its own arguments (``x_ptr``, ``stride_x_n``).
GENERATED_PREFIXES = ("_", "apply_", "stride_")
GENERATED_SUFFIXES = ("_ptr", "_desc", "_strides")

#: Operand dtypes ``tl.dot`` takes, and the accumulator dtypes each may add into.
DOT_ACCUMULATORS = {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32",), "i8": ("i32",)}

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
    power-of-two pieces (see :meth:`Checker.check_pieces`)."""
    low = value & -value
    return value > 0 and is_power_of_two(value - low) and low >= MIN_DOT_TILE


@dataclass
class Scope:
    """What names mean at one point of the body: axes in scope and local tile variables."""

    axes: dict[str, m.Axis]
    locals: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> axes
    declared: set[str] = field(default_factory=set)  # names made with ``name: dtype[...]``
    loop_axes: tuple[str, ...] = ()
    dtypes: dict[str, str] = field(default_factory=dict)  # declared name -> its dtype


class Checker:
    """Runs every rule over one spec, collecting diagnostics in ``self.errors``."""

    def __init__(self, spec: m.Spec):
        self.spec = spec
        self.errors = Collector()
        self.dims: set[str] = {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
        self.params = {p.name.id: p for p in spec.params}
        self.written: set[str] = set()
        self.names: dict[str, m.Span] = {}
        self.alias_of: dict[str, str] = {}  # swizzled axis name -> the grid axis it remaps
        self.loop_axes: dict[str, m.Axis] = {}  # loop axis name -> its first loop
        self.boxes: set = set()  # (value span, block) of block values refused as past a TMA box, once each
        self.pieced: dict[str, list[m.Number]] = {}  # block parameter -> its values of two pieces (check_pieces)
        self.descriptor_blocks: dict[str, tuple[str, ...]] = {}  # tensor -> the block shape of its first access

    # helpers ---------------------------------------------------------------------
    def define(self, name: m.Name, what: str) -> None:
        """Record a new name; report reserved, dunder and duplicate names."""
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

    def check_dtype(self, dtype: m.Name) -> None:
        if dtype.id not in m.DTYPES:
            known = ", ".join(m.DTYPES)
            self.errors.error(f"unknown dtype '{dtype.id}'; expected one of {known}", dtype.span)

    def check_sample(self, tensor: m.Tensor) -> None:
        """``in x: f32[N] in [low, high]``, the range ``tilegen run`` draws an input from: an input's,
        not empty, of values of the tensor's dtype (integers for an integer dtype)."""
        low, high = tensor.sample
        name, dtype = tensor.name.id, tensor.dtype.id
        if tensor.role != "in":
            self.errors.error(
                f"'{name}' is an output; a range (`in [low, high]`) says how `tilegen run` draws an input, "
                "so only 'in' declarations take one",
                low.span,
            )
            return
        limits = DTYPE_LIMITS.get(dtype)
        if limits is None:
            return  # not a dtype: check_dtype says so
        for bound in (low, high):
            if isinstance(limits, tuple):
                value = integer_value(bound)
                if value is None:
                    self.errors.error(f"'{name}' is {dtype}: its range takes integers, not {bound.text}", bound.span)
                    return
                if not limits[0] <= value <= limits[1]:
                    self.errors.error(
                        f"'{name}' is {dtype}, which holds {limits[0]} to {limits[1]}: {bound.text} is outside",
                        bound.span,
                    )
                    return
            elif not abs(bound.value) <= limits:
                self.errors.error(
                    f"'{name}' is {dtype}, whose largest value is {limits:.6g}: {bound.text} is outside", bound.span
                )
                return
        exact = (integer_value(low), integer_value(high))
        if exact[0] > exact[1] if None not in exact else low.value > high.value:
            message = f"the range [{low.text}, {high.text}] is empty: {low.text} is above {high.text}"
            self.errors.error(message, low.span)

    def check_dtype_var(self, var: m.DtypeVar) -> None:
        """``dtype T in f16, bf16``: a new name standing for two or more distinct float dtypes,
        which the launcher can read off an input tensor."""
        self.define(var.name, "dtype variable")
        seen: set[str] = set()
        for option in var.options:
            if option.id not in m.FLOAT_DTYPES:
                floats = ", ".join(d for d in m.DTYPES if d in m.FLOAT_DTYPES)
                self.errors.error(
                    f"dtype variable '{var.name.id}' may stand for float dtypes ({floats}), not '{option.id}'",
                    option.span,
                )
            elif option.id in seen:
                self.errors.error(f"'{option.id}' is listed twice for dtype variable '{var.name.id}'", option.span)
            seen.add(option.id)
        if len(var.options) < 2:
            self.errors.error(
                f"dtype variable '{var.name.id}' needs two or more dtypes; for one, write it in place of "
                f"'{var.name.id}'",
                var.span,
            )
        typed = [
            t for t in self.spec.inputs
            if not t.is_scalar and isinstance(t.dtype, m.BoundDtype) and t.dtype.var == var.name.id
        ]
        if not typed:
            self.errors.error(
                f"no input tensor is typed '{var.name.id}'; the launcher takes '{var.name.id}' from an input's "
                f"dtype (in a: {var.name.id}[...])",
                var.name.span,
            )

    def param_values(self, name: str) -> list[m.Number]:
        """Every value parameter ``name`` can take: its default and each config's setting."""
        param = self.params.get(name)
        values = [param.default] if param is not None and param.default is not None else []
        if self.spec.tune is not None:
            values += [v for c in self.spec.tune.configs if (v := c.get(name)) is not None]
        return [v for v in values if v.is_int]

    def check_axis_decl(self, axis: m.Axis, what: str, scope: Scope | None = None) -> None:
        earlier = self.loop_axes.get(axis.name.id)
        if what == "loop axis" and earlier is not None and scope is not None and axis.name.id not in scope.axes:
            # a later loop may take an ended loop's axis name, over the same dimension
            if earlier.dim.id != axis.dim.id:
                self.errors.error(
                    f"loop axis '{axis.name.id}' was over '{earlier.dim.id}' (line {earlier.span.line}); "
                    f"a later loop may reuse the name only over the same dimension",
                    axis.dim.span,
                )
        else:
            self.define(axis.name, what)
        if what == "loop axis":
            self.loop_axes.setdefault(axis.name.id, axis)
        if axis.dim.id not in self.dims:
            self.errors.error(
                f"{what} '{axis.name.id}' is over '{axis.dim.id}', which is not a dimension of any tensor",
                axis.dim.span,
            )
        if what == "loop axis" and axis.block is None:
            self.errors.error(
                f"a loop axis needs a block: 'for {axis.name.id} over {axis.dim.id} by B'", axis.span
            )
            return
        if axis.block is None:
            return
        if axis.bounds == "wrapped" and what == "loop axis":
            self.errors.error("only grid axes can be 'wrapped'; a loop's tail is masked", axis.span)
        param = self.params.get(axis.block.id)
        if param is None:
            self.errors.error(
                f"unknown block size '{axis.block.id}'; declare it with 'block {axis.block.id} = ...'",
                axis.block.span,
            )
            return
        rows = self.spec.flat and what == "grid axis" and axis is self.spec.grid[0]
        for value in self.param_values(param.name.id):
            if is_power_of_two(int(value.text)):
                continue
            if rows and is_two_pieces(int(value.text)):  # see check_pieces
                self.pieced.setdefault(param.name.id, []).append(value)
                continue
            self.errors.error(
                f"block size '{param.name.id}' = {value.text} is not a power of two"
                + (f" or a sum of two each {MIN_DOT_TILE} or more (192 = 128 + 64)" if rows else ""),
                value.span,
            )

    # declarations ----------------------------------------------------------------
    def check_declarations(self) -> dict[str, m.Axis]:
        spec = self.spec
        # The kernel name lives at module level (``<name>``, ``<name>_kernel``), apart from the
        # kernel's own names, so it only has to avoid reserved and private names.
        # A kernel may share a language word's name (kernel swizzle), not a Python keyword's.
        name = spec.name.id
        if name in RESERVED - KEYWORDS or keyword.iskeyword(name) or name.startswith(("_", "apply_")):
            self.errors.error(f"kernel name '{spec.name.id}' is reserved; choose another name", spec.name.span)
        for var in spec.dtype_vars:
            self.check_dtype_var(var)
        for tensor in spec.tensors:
            self.define(tensor.name, "tensor")
            self.check_dtype(tensor.dtype)
            if tensor.zero_dim:
                self.errors.error(
                    f"'{tensor.name.id}: {tensor.dtype.id}[]' is a 0-dim tensor, which the language does not have "
                    f"yet (it comes with reductions across programs); until then declare '{tensor.name.id}: "
                    f"{tensor.dtype.id}[1]' and store '{tensor.name.id}[0]'",
                    tensor.span,
                )
            elif tensor.is_scalar and tensor.role == "out":
                self.errors.error(
                    f"output '{tensor.name.id}' needs a shape; only inputs can be scalars", tensor.name.span
                )
            if tensor.is_scalar and tensor.dtype.id in ("f16", "bf16", "f64"):
                # Triton passes a Python float to a kernel as fp32, whatever the spec says
                self.errors.error(
                    f"scalar '{tensor.name.id}' is {tensor.dtype.id}, but a kernel takes a Python number as f32; "
                    "declare it f32",
                    tensor.dtype.span,
                )
            for dim in tensor.dims:
                if isinstance(dim, m.Number) and (not dim.is_int or int(dim.text) < 1):
                    self.errors.error("a literal dimension must be a positive integer", dim.span)
            if tensor.sample is not None:
                self.check_sample(tensor)
        for dim in sorted(self.dims):
            span = next(d.span for t in spec.tensors for d in t.dims if isinstance(d, m.Name) and d.id == dim)
            self.define(m.Name(dim, span), "dimension")
        for param in spec.params:
            self.define(param.name, "parameter")
            if param.default is None:
                if spec.tune is None:
                    self.errors.error(
                        f"'{param.name.id}' needs a value: 'block {param.name.id} = 64' (only tuned specs "
                        "may leave block sizes to their configs)",
                        param.name.span,
                    )
            elif not param.default.is_int or int(param.default.text) < 1:
                self.errors.error(
                    f"'{param.name.id}' must be a positive integer, not {param.default.text}",
                    param.default.span,
                )
        if not spec.outputs:
            self.errors.error("the kernel has no 'out' tensor", spec.name.span)
        if not any(not t.is_scalar for t in spec.inputs):
            self.errors.error(
                "the kernel has no 'in' tensor with a shape; outputs are made on the inputs' device",
                spec.name.span,
            )
        axes: dict[str, m.Axis] = {}
        launched = [a for a in spec.grid if a.bounds != "whole"]  # a whole axis takes no program id
        if len(launched) > 3:
            self.errors.error(
                f"a grid has at most 3 axes besides whole ones (Triton's program_id 0..2), not {len(launched)}",
                launched[3].span,
            )
        if spec.flat and (len(spec.grid) != 2 or any(a.block is None for a in spec.grid)):
            kind = "persistent" if spec.persistent else "flat"
            self.errors.error(
                f"a {kind} grid flattens two tiled axes: 'grid {kind} m over M by BM, n over N by BN'",
                spec.grid[0].span,
            )
        for axis in spec.grid:
            self.check_axis_decl(axis, "grid axis")
            axes[axis.name.id] = axis
        if spec.swizzle is not None:
            self.check_swizzle(spec.swizzle, axes)
        if spec.tune is not None:
            self.check_tune(spec.tune)
        for choice in spec.choices:
            self.check_choice(choice)
        if spec.access is not None:
            if spec.access.id not in m.ACCESS_STYLES:
                self.errors.error(
                    f"unknown access style '{spec.access.id}'; expected one of {', '.join(m.ACCESS_STYLES)}",
                    spec.access.span,
                )
            elif spec.access.id in ("block_ptr", "descriptor"):
                what = "block pointers" if spec.access.id == "block_ptr" else "tensor descriptors"
                for axis in spec.grid:
                    if axis.bounds == "wrapped":
                        self.errors.error(
                            f"{what} cannot wrap offsets; use 'access pointers' or drop 'wrapped'",
                            axis.span,
                        )
                if spec.access.id == "descriptor":
                    for tensor in spec.tensors:
                        if len(tensor.dims) > 5:
                            self.errors.error(
                                f"tensor descriptors (TMA) address at most 5 dimensions; '{tensor.name.id}' has "
                                f"{len(tensor.dims)}: use 'access pointers'",
                                tensor.name.span,
                            )
        return axes

    def check_tune(self, tune: m.Tune) -> None:
        sizes = {d.id for t in self.spec.tensors for d in t.dims if isinstance(d, m.Name)}
        for position, key in enumerate(tune.key):
            if any(earlier.id == key.id for earlier in tune.key[:position]):
                self.errors.error(f"'{key.id}' is in the autotune key twice", key.span)
            elif key.id not in sizes:
                self.errors.error(
                    f"autotune key '{key.id}' is not a size; use dimensions such as {', '.join(sorted(sizes))}",
                    key.span,
                )
        defaults = [c for c in tune.configs if c.default]
        for extra in defaults[1:]:
            if extra.span == defaults[0].span:  # one line: 'default config BM in [...]'
                self.errors.error("the default config gives one value per setting, not a list", extra.span)
                break
            self.errors.error("only one config can be the default", extra.span)
        written: dict[frozenset, m.Config] = {}
        for config in tune.configs:
            values = frozenset((s.name.id, s.default.text) for s in config.settings)
            first = written.setdefault(values, config)
            if first is not config and not (config.default and first.default):
                again = "again on its line" if first.span == config.span else f"as on line {first.span.line}"
                shown = ", ".join(f"{s.name.id} = {s.default.text}" for s in config.settings)
                self.errors.error(f"config {shown} is listed twice ({again}); each config is timed once", config.span)
        for config in tune.configs:
            seen: set[str] = set()
            for setting in config.settings:
                name = setting.name.id
                if name in seen:
                    self.errors.error(f"'{name}' is set twice in this config", setting.name.span)
                seen.add(name)
                if name not in self.params and name not in m.LAUNCH_OPTIONS:
                    self.errors.error(
                        f"config sets '{name}', which is not a block parameter or one of "
                        f"{', '.join(m.LAUNCH_OPTIONS)}",
                        setting.name.span,
                    )
                value = setting.default
                if not value.is_int or int(value.text) < 1:
                    self.errors.error(f"'{name}' must be a positive integer, not {value.text}", value.span)
                elif name == "num_warps" and not is_power_of_two(int(value.text)):
                    self.errors.error(f"num_warps = {value.text} is not a power of two", value.span)
            for param in self.spec.params:
                if param.default is None and param.name.id not in seen:
                    self.errors.error(
                        f"this config leaves '{param.name.id}' unset, and it has no default", config.span
                    )

    def check_choice(self, choice: m.Choice) -> None:
        self.define(choice.name, "choice")
        # The kernel's constexpr ACTIVATION for 'choose activation' must not clash either.
        self.define(m.Name(choice.constexpr, choice.name.span), "choice constexpr")
        seen: set[str] = set()
        for option in choice.options:
            if option.id not in CHOICE_OPTIONS:
                self.errors.error(
                    f"'{option.id}' cannot be chosen; options are {', '.join(CHOICE_OPTIONS)}", option.span
                )
            elif option.id in seen:
                self.errors.error(f"option '{option.id}' is listed twice", option.span)
            seen.add(option.id)

    def check_swizzle(self, swizzle: m.Swizzle, axes: dict[str, m.Axis]) -> None:
        grid_names = tuple(a.name.id for a in self.spec.grid)
        if len(grid_names) != 2:
            self.errors.error(
                f"swizzle needs a 2D grid; this grid has {len(grid_names)} axes", swizzle.span
            )
        elif tuple(a.id for a in swizzle.axes) != grid_names:
            self.errors.error(
                f"swizzle must name the grid axes in order: 'swizzle {grid_names[0]}, {grid_names[1]}'",
                swizzle.axes[0].span,
            )
        if isinstance(swizzle.group, m.Number) and (
            not swizzle.group.is_int or int(swizzle.group.text) < 1
        ):
            self.errors.error("the swizzle group must be a positive integer", swizzle.group.span)
        if isinstance(swizzle.group, m.Name) and swizzle.group.id not in self.params:
            self.errors.error(
                f"unknown parameter '{swizzle.group.id}'; declare it or write 'group {swizzle.group.id} = 8'",
                swizzle.group.span,
            )
        if self.spec.flat and swizzle.aliases:
            self.errors.error("'as' aliases need a 2D grid, not a flat one", swizzle.aliases[0].span)
        if swizzle.aliases:
            for alias, axis in zip(swizzle.aliases, swizzle.axes, strict=True):
                self.define(alias, "swizzled axis")
                if axis.id in axes:
                    axes[alias.id] = axes[axis.id]
                    self.alias_of[alias.id] = axis.id

    # expressions -----------------------------------------------------------------
    def index_axes(self, tensor_name: m.Name, index, scope: Scope, writing: bool) -> tuple[str, ...]:
        """Check ``tensor[index]`` and return the axes it spans, in index order."""
        tensor = self.spec.tensor(tensor_name.id)
        if tensor is None:
            self.errors.error(f"unknown tensor '{tensor_name.id}'", tensor_name.span)
            return ()
        if writing and tensor.role == "in":
            self.errors.error(
                f"input tensor '{tensor.name.id}' is written; only 'out' tensors can be stored to", tensor_name.span
            )
        if not writing and tensor.role == "out":
            self.errors.error(
                f"output tensor '{tensor.name.id}' is read; only 'in' tensors can be loaded", tensor_name.span
            )
        if tensor.is_scalar:
            self.errors.error(f"'{tensor.name.id}' is a scalar; use it without an index", tensor_name.span)
            return ()
        if len(index) != len(tensor.dims):
            self.errors.error(
                f"tensor '{tensor.name.id}' has rank {len(tensor.dims)} but is indexed with {len(index)} "
                f"{'index' if len(index) == 1 else 'indices'}",
                tensor_name.span,
            )
            return ()
        result = []
        for position, (item, dim) in enumerate(zip(index, tensor.dims, strict=True)):
            if isinstance(item, m.Load):
                result += [a for a in self.gather_axes(tensor, item, scope, writing) if a not in result]
                continue
            if isinstance(item, m.Number):
                if not item.is_int:
                    self.errors.error("a constant index must be an integer", item.span)
                elif isinstance(dim, m.Number) and dim.is_int and int(item.text) >= int(dim.text):
                    self.errors.error(
                        f"index {item.text} is out of range for dimension {position} of "
                        f"'{tensor.name.id}' (size {dim.text})",
                        item.span,
                    )
                continue
            axis = scope.axes.get(item.id)
            if axis is None:
                self.errors.error(f"unknown axis '{item.id}'", item.span)
                continue
            if item.id in self.alias_of and not writing:
                self.errors.error(
                    f"swizzled axis '{item.id}' can only index the tensor a statement stores to; "
                    f"load with '{self.alias_of[item.id]}'",
                    item.span,
                )
            if not isinstance(dim, m.Name) or dim.id != axis.dim.id:
                dim_text = dim.id if isinstance(dim, m.Name) else dim.text
                self.errors.error(
                    f"axis '{item.id}' tiles '{axis.dim.id}', but dimension {position} of "
                    f"'{tensor.name.id}' is '{dim_text}'",
                    item.span,
                )
            if item.id in result:
                self.errors.error(f"axis '{item.id}' indexes '{tensor.name.id}' twice", item.span)
            if not axis.is_index:  # an index axis is a scalar offset, not a tile dimension
                result.append(item.id)
        known = all(not isinstance(i, m.Name) or i.id in scope.axes for i in index)  # else: reported above
        if self.spec.access_style == "descriptor" and known and not any(isinstance(i, m.Load) for i in index):
            self.check_descriptor_block(tensor, index, scope, tensor_name.span)
        return tuple(result)

    def check_descriptor_block(self, tensor: m.Tensor, index, scope: Scope, span: m.Span) -> None:
        """A TMA descriptor has one block shape (index axes and constants are blocks of 1), and
        its rows are at least 16 bytes: every access of a tensor takes tiles of one shape, and
        its last index is a tile axis."""
        blocks = []
        for item in index:
            axis = scope.axes.get(item.id) if isinstance(item, m.Name) else None
            if axis is None or axis.is_index:
                blocks.append("1")
            else:
                blocks.append(f"all of {axis.dim.id}" if axis.bounds == "whole" else axis.block.id)
        name = tensor.name.id
        if all(b == "1" for b in blocks):
            self.errors.error(
                f"'{name}[...]' is one element; tensor descriptors move tiles: index a tile axis or use "
                "'access pointers'",
                span,
            )
        elif blocks[-1] == "1":
            self.errors.error(
                f"the last index of '{name}' is not a tile axis: a tensor descriptor moves rows of 16 bytes or "
                "more (TMA); index the last dimension with a tile axis or use 'access pointers'",
                span,
            )
        for block in blocks:  # tuned or default values past a TMA box (a row piece's first piece)
            for value in self.param_values(block) if block in self.params else ():
                rows = int(value.text)
                rows -= rows & -rows if is_two_pieces(rows) else 0
                if rows > MAX_TMA_BOX and (value.span, block) not in self.boxes:
                    self.boxes.add((value.span, block))
                    self.errors.error(
                        f"block size '{block}' = {value.text} moves {rows} elements along a dimension of a tensor "
                        f"descriptor; TMA moves at most {MAX_TMA_BOX} (use a smaller block or 'access pointers')",
                        value.span,
                    )
        first = self.descriptor_blocks.setdefault(name, tuple(blocks))
        if first != tuple(blocks):
            self.errors.error(
                f"'{name}' is accessed in blocks of [{', '.join(first)}] and of [{', '.join(blocks)}]: a tensor "
                "descriptor has one block shape; use one or 'access pointers'",
                span,
            )

    def gather_axes(self, tensor: m.Tensor, index: m.Load, scope: Scope, writing: bool) -> tuple[str, ...]:
        """Check a gather ``tensor[.., idx[..], ..]`` and return the axes of its index tile."""
        if writing:
            self.errors.error("a store cannot scatter through a loaded index; index it with axes", index.span)
        if self.spec.access_style != "pointers":
            self.errors.error(
                f"a gather needs 'access pointers'; {self.spec.access_style} cannot index by a loaded tile",
                index.span,
            )
        axes = self.index_axes(index.tensor, index.index, scope, writing=False)
        source = self.spec.tensor(index.tensor.id)
        if source is not None and not source.is_scalar and not is_int(source.dtype.id):
            self.errors.error(
                f"a gather index must be an integer tensor; '{source.name.id}' is {source.dtype.id}", index.span
            )
        return axes

    def dtype(self, expr: m.Expr, scope: Scope) -> str | None:
        """The dtype ``expr`` computes to (None for a literal), see :mod:`tilegen.dtypes`."""

        def local(name: str) -> str | None:
            if name in scope.locals:
                return scope.dtypes.get(name)
            tensor = self.spec.tensor(name)
            if tensor is not None:
                return tensor.dtype.id
            return INDEX if name in scope.axes or name in self.dims else None

        return expr_dtype(expr, self.spec, local)

    def expr_axes(self, expr: m.Expr, scope: Scope) -> tuple[str, ...]:
        """Check an expression and return the axes of the tile it evaluates to."""
        if isinstance(expr, m.Number):
            return ()
        if isinstance(expr, m.Ref):
            name = expr.name.id
            if name in scope.locals:
                return scope.locals[name]
            if name in scope.axes:  # an axis's index values
                return () if scope.axes[name].is_index else (name,)
            if name in self.dims:  # a size symbol's value
                return ()
            tensor = self.spec.tensor(name)
            if tensor is not None and tensor.is_scalar:
                return ()
            if tensor is not None:
                self.errors.error(f"tensor '{name}' must be indexed, e.g. '{name}[...]'", expr.span)
            elif name in self.params:
                self.errors.error(f"'{name}' is a block size, which has no value in the body", expr.span)
            else:
                self.errors.error(f"unknown name '{name}'", expr.span)
            return ()
        if isinstance(expr, m.Load):
            return self.index_axes(expr.tensor, expr.index, scope, writing=False)
        if isinstance(expr, m.Neg):
            if self.dtype(expr.operand, scope) == BOOL:
                self.errors.error("a comparison is a mask, not a number; negate a number", expr.span)
            return self.expr_axes(expr.operand, scope)
        if isinstance(expr, m.BinOp):
            left = self.expr_axes(expr.left, scope)
            right = self.expr_axes(expr.right, scope)
            self.check_operands(expr, scope)
            return left + tuple(a for a in right if a not in left)
        if isinstance(expr, m.Call):
            return self.call_axes(expr, scope)
        raise AssertionError(f"unhandled expression {expr!r}")  # pragma: no cover

    def check_operands(self, expr: m.BinOp, scope: Scope) -> None:
        """Masks (comparisons, ``&``, ``|``) combine with ``&``/``|`` and feed ``where``; numbers
        do arithmetic and comparisons."""
        for side in (expr.left, expr.right):
            is_mask = self.dtype(side, scope) == BOOL
            if expr.op in LOGIC and not is_mask:
                self.errors.error(
                    f"'{expr.op}' combines masks (comparisons such as 'n <= m'), not numbers", side.span
                )
            elif expr.op not in LOGIC and is_mask:
                what = "compared" if expr.op in COMPARISONS else "used as a number"
                self.errors.error(
                    f"a comparison is a mask and cannot be {what}; use where(mask, a, b) to pick numbers",
                    side.span,
                )

    def call_axes(self, call: m.Call, scope: Scope) -> tuple[str, ...]:
        name = call.func.id
        choice = next((c for c in self.spec.choices if c.name.id == name), None)
        function = lookup(name)
        if choice is None and function is None:
            known = sorted([*FUNCTIONS, *CASTS, *(c.name.id for c in self.spec.choices)])
            self.errors.error(f"unknown function '{name}'; known: {', '.join(known)}", call.func.span)
            return ()
        operands = [self.expr_axes(arg, scope) for arg in call.args]
        params = [p for p, _ in function.params] if function is not None else []
        given_axes = dict(zip(params, operands[1:], strict=False))  # each parameter's value's axes; counts may differ
        for key, value in call.kwargs:
            if key.id in params:  # a number given by keyword; words (dim=c, precision=ieee) are not values
                operands.append(self.expr_axes(value, scope))
                given_axes.setdefault(key.id, operands[-1])
        if choice is not None:
            if len(call.args) != 1 or call.kwargs:
                self.errors.error(
                    f"'{name}' (a choice) takes 1 argument, not {len(call.args) + len(call.kwargs)}", call.span
                )
            return operands[0] if operands else ()
        if function.kind == "dot":
            if len(call.args) != 2:
                self.errors.error(f"'dot' takes 2 arguments, not {len(call.args)}", call.span)
                return ()
            self.check_keywords(call, function, ())
            return self.dot_axes(call, operands[:2], scope)
        if function.kind == "reduction":
            return self.reduction_axes(call, operands, scope)
        count = len(call.args)
        if not function.min_args <= count <= function.max_args:
            wanted = (
                str(function.min_args)
                if function.min_args == function.max_args
                else f"{function.min_args} to {function.max_args}"
            )
            self.errors.error(f"'{name}' takes {wanted} arguments, not {count}", call.span)
            return ()
        self.check_keywords(call, function, params[: count - 1])
        given = set(params[: count - 1]) | {k.id for k, _ in call.kwargs}
        missing = [p for p, default in function.params if default is None and p not in given]
        if missing:
            self.errors.error(f"'{name}' needs its argument '{missing[0]}'", call.span)
        if function.one_of and not given & set(function.one_of):
            either = " or ".join(f"'{p}'" for p in function.one_of)
            self.errors.error(f"'{name}' needs {either} (or both), e.g. {name}(x, {function.one_of[0]}=0)", call.span)
        for position, param in enumerate(params, start=1):
            given = call.args[position] if position < count else call.kwarg(param)
            if param in function.numbers and given is not None and given_axes.get(param):
                self.errors.error(
                    f"the {param} of '{name}' must be a number (a constant or a scalar input), e.g. "
                    f"{name}(x, {dict(function.params)[param]})",
                    given.span,
                )
        if function.selects and call.args and self.dtype(call.args[0], scope) != BOOL:
            self.errors.error(
                f"the first argument of '{name}' is a mask, e.g. where(n <= m, acc, 0)", call.args[0].span
            )
        elif not function.selects:
            for arg in call.args:
                if self.dtype(arg, scope) == BOOL:
                    self.errors.error(f"'{name}' takes numbers, not a mask; use where(mask, a, b)", arg.span)
        result: tuple[str, ...] = ()
        for axes in operands:
            result += tuple(a for a in axes if a not in result)
        return result

    def check_keywords(self, call: m.Call, function, positional: list[str]) -> None:
        """Keywords name a parameter not given by position, or a choice with a known word."""
        params = [p for p, _ in function.params]
        for key, value in call.kwargs:
            if key.id in function.choices:
                word = call.word(key.id)
                if word not in function.choices[key.id]:
                    self.errors.error(
                        f"unknown {key.id} '{word or 'value'}'; expected one of {', '.join(function.choices[key.id])}",
                        value.span,
                    )
            elif key.id in params and key.id not in positional:
                continue
            else:
                expected = [*function.choices, *(p for p in params if p not in positional)]
                why = f"expected {', '.join(repr(k) for k in expected)}" if expected else "it takes none"
                self.errors.error(f"unknown argument '{key.id}' to '{function.name}'; {why}", key.span)

    def reduction_axes(self, call: m.Call, operands, scope: Scope) -> tuple[str, ...]:
        """``sum(x, dim=c)``: ``c`` is a tile axis of ``x`` that one program covers (a whole
        axis or the current tile of a loop axis); the result spans ``x``'s other axes."""
        name = call.func.id
        if len(call.args) != 1:
            self.errors.error(f"'{name}' takes 1 argument and dim=, not {len(call.args)} arguments", call.span)
            return ()
        operand_dtype = self.dtype(call.args[0], scope)
        if operand_dtype == BOOL:
            self.errors.error(f"'{name}' takes numbers, not a mask; use where(mask, 1, 0)", call.args[0].span)
        elif lookup(name).floats and is_int(operand_dtype):
            self.errors.error(f"'{name}' takes a float tile; cast it first, e.g. {name}(f32(x), dim=c)",
                              call.args[0].span)
        value, word = call.kwarg("dim"), call.word("dim")
        for key, _ in call.kwargs:
            if key.id != "dim":
                self.errors.error(f"unknown argument '{key.id}' to '{name}'; expected 'dim'", key.span)
        if value is None:
            self.errors.error(f"'{name}' needs the axis it reduces: {name}(x, dim=<axis>)", call.span)
            return operands[0]
        if word is None or word not in scope.axes or scope.axes[word].is_index:
            what = f"'{word}' is not a tile axis in scope" if word else "not an expression"
            self.errors.error(f"dim= names a tile axis of the operand; {what}", value.span)
            return operands[0]
        dim = value.name
        axis = scope.axes[dim.id]
        if dim.id not in operands[0]:
            spans = ", ".join(operands[0]) or "no axis"
            self.errors.error(
                f"'{name}' reduces over '{dim.id}', but its operand spans {spans}", dim.span
            )
            return operands[0]
        if dim.id not in scope.loop_axes and axis.bounds != "whole":
            self.errors.error(
                f"'{dim.id}' is a grid axis tiled by {axis.block.id}, so one program sees one tile of "
                f"{axis.dim.id}, not all of it; reduce over a 'whole' axis or a 'for' loop's axis",
                dim.span,
            )
        return tuple(a for a in operands[0] if a != dim.id)

    def dot_axes(self, call: m.Call, operands, scope: Scope) -> tuple[str, ...]:
        """``dot(a, b)``: two 2D tiles sharing exactly one axis, which the product contracts
        (``dot(q[m, d], k[n, d])`` is over ``d``, the second operand read transposed); the result
        spans the first operand's other axis, then the second's."""
        dtypes = [self.dtype(arg, scope) for arg in call.args]
        names = [
            f"'{arg.tensor.id}'" if isinstance(arg, m.Load) else f"'{arg.name.id}'" if isinstance(arg, m.Ref) else which
            for arg, which in zip(call.args, ("the first", "the second"), strict=True)
        ]
        for arg, dtype, name in zip(call.args, dtypes, names, strict=True):
            if dtype not in DOT_ACCUMULATORS and dtype in m.DTYPES:
                self.errors.error(
                    f"'dot' does not take {dtype} tiles ({name}); operands are one of {', '.join(DOT_ACCUMULATORS)}"
                    + ("" if isinstance(arg, m.Load) else ": cast it, e.g. f16(p)"),
                    arg.span,
                )
        if dtypes[0] != dtypes[1] and all(d in DOT_ACCUMULATORS for d in dtypes):
            self.errors.error(
                f"'dot' operands must have one dtype; {names[0]} is {dtypes[0]}, {names[1]} is {dtypes[1]} "
                f"(cast one, e.g. {dtypes[0]}(...))",
                call.span,
            )
        (a, b) = operands
        if len(a) != 2 or len(b) != 2:
            if a and b:
                self.errors.error("'dot' operands must be 2D tiles", call.span)
            return ()
        shared = [x for x in a if x in b]
        if len(shared) != 1:
            self.errors.error(
                f"'dot' contracts over the one axis its operands share; they span {', '.join(a)} and "
                f"{', '.join(b)}",
                call.span,
            )
            return ()
        for name in (*a, *b):
            axis = scope.axes.get(name)
            if axis is None or axis.block is None:
                continue
            for value in self.param_values(axis.block.id):
                if int(value.text) < MIN_DOT_TILE:
                    self.errors.error(
                        f"'dot' tiles need every block size >= {MIN_DOT_TILE}; '{axis.block.id}' = {value.text}",
                        call.span,
                    )
                    break
        return (next(x for x in a if x not in shared), next(x for x in b if x not in shared))

    # statements ------------------------------------------------------------------
    def check_body(self, body, scope: Scope) -> None:
        for stmt in body:
            if isinstance(stmt, m.Declare):
                self.check_dtype(stmt.dtype)
                for axis in stmt.axes:
                    if axis.id not in scope.axes:
                        self.errors.error(f"unknown axis '{axis.id}'", axis.span)
                    elif scope.axes[axis.id].is_index:
                        self.errors.error(
                            f"'{axis.id}' is an index axis (no block), not a tile dimension", axis.span
                        )
                init = stmt.init.operand if isinstance(stmt.init, m.Neg) else stmt.init
                if not isinstance(init, m.Number):
                    self.errors.error("a tile is initialised with a constant, e.g. '= 0' or '= -inf'", stmt.init.span)
                self.define(stmt.name, "variable")
                scope.locals[stmt.name.id] = tuple(a.id for a in stmt.axes)
                scope.declared.add(stmt.name.id)
                scope.dtypes[stmt.name.id] = stmt.dtype.id
            elif isinstance(stmt, m.Assign):
                axes = self.expr_axes(stmt.value, scope)
                dtype = self.dtype(stmt.value, scope)
                name = stmt.name.id
                if name not in scope.locals:
                    self.define(stmt.name, "variable")
                    scope.locals[name] = axes
                    scope.dtypes[name] = dtype
                elif not set(axes) <= set(scope.locals[name]):
                    # a variable keeps its shape (a loop carries it from step to step)
                    self.errors.error(
                        f"'{name}' spans {list(scope.locals[name])}, but the new value spans {list(axes)}; "
                        "use a new name",
                        stmt.value.span,
                    )
            elif isinstance(stmt, m.Accumulate):
                axes = self.expr_axes(stmt.value, scope)
                if stmt.name.id not in scope.declared:
                    self.errors.error(
                        f"'{stmt.name.id}' must be declared before '+=', e.g. '{stmt.name.id}: f32[...] = 0'",
                        stmt.name.span,
                    )
                elif not set(axes) <= set(scope.locals[stmt.name.id]):
                    self.errors.error(
                        f"'{stmt.name.id}' spans {list(scope.locals[stmt.name.id])} but the value spans {list(axes)}",
                        stmt.value.span,
                    )
                elif m.is_dot(stmt.value) and len(stmt.value.args) == 2:
                    operand = self.dtype(stmt.value.args[0], scope)
                    allowed = DOT_ACCUMULATORS.get(operand, ())
                    acc = scope.dtypes.get(stmt.name.id)
                    if allowed and acc not in allowed:
                        self.errors.error(
                            f"'{stmt.name.id}' is {acc}, but 'dot' of {operand} tiles accumulates in "
                            f"{' or '.join(allowed)}",
                            stmt.name.span,
                        )
            elif isinstance(stmt, m.Store):
                self.written.add(stmt.tensor.id)
                target = self.index_axes(stmt.tensor, stmt.index, scope, writing=True)
                axes = self.expr_axes(stmt.value, scope)
                canonical = {self.alias_of.get(a, a) for a in target}
                extra = [a for a in axes if self.alias_of.get(a, a) not in canonical]
                if extra and self.spec.tensor(stmt.tensor.id) is not None and len(target) == len(stmt.index):
                    self.errors.error(
                        f"the value spans axis '{extra[0]}', which the store to '{stmt.tensor.id}' does not index",
                        stmt.value.span,
                    )
            elif isinstance(stmt, m.Loop):
                self.check_axis_decl(stmt.axis, "loop axis", scope)
                inner = Scope(
                    {**scope.axes, stmt.axis.name.id: stmt.axis},
                    dict(scope.locals),
                    set(scope.declared),
                    (*scope.loop_axes, stmt.axis.name.id),
                    dict(scope.dtypes),
                )
                self.check_body(stmt.body, inner)
                # Tile variables updated in the loop stay visible after it.
                scope.locals.update({k: v for k, v in inner.locals.items() if k in scope.locals})

    def check_split(self) -> None:
        """``for k over K by BK split``: the launcher may run the loop of each output tile in
        several programs (split-K) and add up their f32 partial sums, so the program must be
        exactly "sum over k, then store the sum": f32 accumulators set to 0 before the loop, a
        loop of ``acc += dot(..)`` lines, and after it one store of an accumulator (or of its
        cast to the output's dtype) into a 2D output indexed by the grid's two tiled axes in the
        grid's order. Raises nothing: problems go to ``self.errors``."""
        spec = self.spec
        top = [s for s in spec.body if isinstance(s, m.Loop) and s.split]
        nested = [s for s in m.statements(spec.body) if isinstance(s, m.Loop) and s.split and s not in top]
        for loop in nested:
            self.errors.error("'split' needs a loop of the kernel's body, not one inside another loop", loop.span)
        if not top:
            return
        loop = top[0]
        if len(top) > 1:
            self.errors.error("'split' can be given to one loop only", top[1].span)
        if not m.is_dot_loop(loop):
            self.errors.error(
                "'split' needs a loop of `acc += dot(x[.., k], y[k, ..])` lines only (a matmul's K loop)", loop.span
            )
            return
        launched = [a for a in spec.grid if a.bounds != "whole"]
        if spec.persistent or len(launched) != 2 or any(a.is_index for a in launched):
            self.errors.error(
                "'split' needs a grid of two tiled axes (flat or not, not persistent): the split parts take "
                "another grid axis",
                loop.span,
            )
        if spec.access_style == "block_ptr":
            self.errors.error("'split' needs access pointers or descriptor, not block_ptr", loop.span)
        accumulators = {s.name.id for s in loop.body}
        before, after = spec.body[: spec.body.index(loop)], spec.body[spec.body.index(loop) + 1 :]
        for stmt in before:
            if isinstance(stmt, m.Declare) and stmt.name.id in accumulators:
                if stmt.dtype.id != "f32" or not isinstance(stmt.init, m.Number) or stmt.init.value != 0:
                    self.errors.error(
                        f"a split loop's accumulator '{stmt.name.id}' must start as f32 zeros "
                        f"(`{stmt.name.id}: f32[..] = 0`): its partial sums are added up in f32",
                        stmt.span,
                    )
            else:
                self.errors.error(
                    "before a split loop the body can only declare its accumulators: each part of K runs it", stmt.span
                )
        grid_axes = [a.name.id for a in launched]
        stores = [s for s in after if isinstance(s, m.Store)]
        for stmt in after:
            value = stmt.value if isinstance(stmt, m.Store) else None
            tensor = spec.tensor(stmt.tensor.id) if isinstance(stmt, m.Store) else None
            if isinstance(value, m.Call) and len(value.args) == 1:  # a cast of the accumulator to the output's dtype
                function = lookup(value.func)
                own = None if tensor is None else m.as_written(tensor.dtype)
                if function is not None and function.kind == "cast" and m.as_written(value.func) == own:
                    value = value.args[0]
            plain = (
                isinstance(value, m.Ref)
                and value.name.id in accumulators
                and tensor is not None
                and tensor.role == "out"
                and [self.alias_of.get(i.id, i.id) if isinstance(i, m.Name) else None for i in stmt.index] == grid_axes
                and len(tensor.dims) == 2
            )
            if not plain or len(stores) > 1:
                self.errors.error(
                    "after a split loop the body can only store the accumulator as it is (`c[m, n] = acc`, or a "
                    "cast of it to the output's dtype) into one 2D output indexed by the grid's axes in the grid's "
                    f"order ({', '.join(grid_axes)}): the launcher adds up the partial sums into that output",
                    stmt.span,
                )
                break

    def check_split_tail(self) -> None:
        """``split tail``: one line, on a flat grid that is not persistent, whose two axes have
        blocks of their own (each is halved on its own), and a store of a tile over both axes
        (the tiles split are output tiles). Raises nothing: problems go to ``self.errors``."""
        spec = self.spec
        if not spec.split_tail:
            return
        span = spec.split_tail[0]
        for extra in spec.split_tail[1:]:
            self.errors.error("'split tail' is given twice", extra)
        if not spec.flat or spec.persistent:
            self.errors.error(
                "'split tail' needs a flat grid that is not persistent ('grid flat m over M by BM, n over N by BN'): "
                "it splits the tiles of the last wave of a one-program-per-tile launch",
                span,
            )
            return
        first, second = spec.grid
        if first.block.id == second.block.id:
            self.errors.error(
                f"'split tail' halves each grid axis's block on its own: the axes need different block "
                f"parameters, not both {first.block.id}",
                span,
            )
        tensors = {t.name.id: t for t in spec.tensors}
        for name, tensor in tensors.items():  # x's sub-tile descriptor is x_tail_desc, also x_tail's own
            if spec.access_style == "descriptor" and name.endswith("_tail") and name[: -len("_tail")] in tensors:
                self.errors.error(
                    f"with 'split tail' the descriptor of {name[: -len('_tail')]}'s sub-tiles is named {name}_desc, "
                    f"as is {name}'s own: rename '{name}'",
                    tensor.name.span,
                )
        names = {first.name.id, second.name.id}
        stores = [s for s in m.statements(spec.body) if isinstance(s, m.Store)]
        if not any(names <= {i.id for i in s.index if isinstance(i, m.Name)} for s in stores):
            self.errors.error(
                f"'split tail' splits output tiles: the body must store a tile over both grid axes "
                f"({first.name.id}, {second.name.id})",
                span,
            )

    def check_pieces(self) -> None:
        """A block of the rows of a flat grid's output that is a sum of two powers of two (192 =
        128 + 64) where Triton's tiles are powers of two: the kernel holds each tile as two
        row pieces, each its own accumulator, ``a`` tile and store, sharing each ``b`` tile of the
        loop (:meth:`tilegen.lower.kernel.KernelLowering.pieces_setup`). This needs TMA
        descriptors (a descriptor per piece), tune configs (the pieces' descriptors take their
        block shapes per config), and a body of tile declarations, dot loops whose first operand
        holds the rows, and stores of a local over them. Raises nothing: problems go to
        ``self.errors``, at the block value."""
        spec = self.spec
        names = {t.name.id for t in spec.tensors}
        for tensor in spec.tensors if self.pieced and spec.access_style == "descriptor" else ():
            name = tensor.name.id  # x's second piece's descriptor is x_piece_desc, also x_piece's own
            if name.endswith("_piece") and name[: -len("_piece")] in names:
                self.errors.error(
                    f"with row pieces the descriptor of {name[: -len('_piece')]}'s second piece is named "
                    f"{name}_desc, as is {name}'s own: rename '{name}'",
                    tensor.name.span,
                )
        for param, values in self.pieced.items():
            rows = spec.grid[0].name.id
            why = None
            if spec.access_style != "descriptor" or spec.tune is None:
                why = "'access descriptor' and tune configs (a tensor descriptor for each piece, set per config)"
            if why is None and spec.grid[0].bounds != "masked":
                why = f"masked rows (the launcher checks an unmasked '{spec.grid[0].dim.id}' against one block)"
            for stmt in spec.body:
                if why is not None:
                    break
                if isinstance(stmt, (m.Assign, m.Accumulate)) or (isinstance(stmt, m.Loop) and not m.is_dot_loop(stmt)):
                    why = "a body of tile declarations, loops of dots ('acc += dot(a[m, k], b[k, n])') and stores"
                elif isinstance(stmt, m.Loop) and any(
                    isinstance(i, m.Name) and i.id == rows for s in stmt.body for i in s.value.args[1].index
                ):
                    why = f"'{rows}' in the first operand of each dot (its rows)"
                elif isinstance(stmt, m.Store) and not isinstance(stmt.value, m.Ref):
                    over = any(isinstance(i, m.Name) and i.id == rows for i in stmt.index)
                    if over:
                        why = f"stores of a local over '{rows}' ('c[m, n] = acc')"
            chosen = spec.default_config()
            value = chosen.get(param) or self.params[param].default if chosen is not None else None
            if why is None and value is not None and is_two_pieces(int(value.text)):
                self.errors.error(
                    f"the default config sets '{param}' = {value.text}: the default config runs in Triton's "
                    "interpreter and through pointers where TMA cannot serve, whose tiles are powers of two; "
                    "make the default a power of two",
                    value.span,
                )
            if why is None:
                continue
            for value in values:
                self.errors.error(
                    f"block size '{param}' = {value.text} is not a power of two: a block of a sum of two (held as two "
                    f"pieces) needs {why}",
                    value.span,
                )

    def run(self) -> None:
        axes = self.check_declarations()
        self.check_body(self.spec.body, Scope(dict(axes)))
        if not self.errors.diagnostics:  # these rules assume an otherwise valid body
            check_carried(self.spec, self.errors)
            self.check_split()
            self.check_split_tail()
            self.check_pieces()
        for tensor in self.spec.outputs:
            if tensor.name.id not in self.written:
                self.errors.error(f"output tensor '{tensor.name.id}' is never written", tensor.name.span)


def check(spec: m.Spec) -> m.Spec:
    """Validate ``spec``; return it unchanged or raise :class:`~tilegen.errors.SpecError`
    listing every problem found (up to :data:`tilegen.errors.MAX_DIAGNOSTICS`).

    A spec with dtype variables is checked once per binding (:func:`tilegen.model.specialize`);
    a problem that only some bindings have says which (``with T = f32``)."""
    bindings = spec.bindings()
    found: dict[tuple[str, m.Span], list[str]] = {}
    for binding in bindings:
        checker = Checker(m.specialize(spec, binding))
        checker.run()
        where = ", ".join(f"{var} = {dtype}" for var, dtype in binding.items())
        for diagnostic in checker.errors.diagnostics:
            seen = found.setdefault((diagnostic.message, diagnostic.span), [])
            if where not in seen:
                seen.append(where)
    errors = Collector()
    for (message, span), where in found.items():
        if len(where) < len(bindings):
            message = f"{message} (with {'; '.join(where)})"
        errors.error(message, span)
    errors.raise_if_any(spec.path, spec.source)
    return spec
