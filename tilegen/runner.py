"""Running generated kernels: random (or image) inputs, launch, compare with ``reference``.

Used by ``tilegen run`` and ``tilegen demo``. The GPU is used when torch sees one; otherwise
Triton's CPU interpreter (``TRITON_INTERPRET=1``), which must be chosen before triton is
imported, so this module imports triton only through the generated modules it loads.

Inputs are random: standard normal floats, or drawn from the range an input's declaration gives
(``in x: f32[M, N] in [0.01, 10]``, :func:`sample`). Outputs are compared under
:mod:`tilegen.tolerance` (tolerances that grow with the length of the spec's sums), NaN where the
reference has NaN counting as equal. In the interpreter, a row that fails and computes on bf16
values is SKIP, not FAIL (:data:`BF16_INTERPRETER_BUG`). Kernel runs here are quiet: the
warnings a launcher gives in the interpreter (NumPy's floating-point RuntimeWarnings, the notice
that a tuned launcher runs its default config) are caught and summed up in :class:`RunResult`;
called directly, launchers still warn.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import shutil
import sys
import warnings
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from tilegen import model as m
from tilegen import tolerance
from tilegen.dtypes import COMPARISONS, INDEX, expr_dtype, integer_value, promote
from tilegen.sizes import round_to_multiples, scalar_sizes, size_names, solve_derived

if TYPE_CHECKING:  # torch is imported where it is used (see select_device)
    import torch

    from tilegen.tolerance import Argument, Outputs, Reference

#: What a tuned launcher says (once per process) when the interpreter cannot time its configs;
#: the demo says it once for all instead (:attr:`RunResult.default_config`).
INTERPRETER_TUNING_NOTICE = "cannot time autotune configs"

#: Why a row that computes in bf16 and fails in the interpreter is SKIP, not FAIL: the interpreter
#: holds bf16 values as their uint16 bit patterns, and its arithmetic, comparisons and
#: ``maximum`` on them work on the bits (a bf16 ``x * 2`` is off by units, ``-x`` by 1e4); loads,
#: stores, conversions and ``dot`` (the generated modules upcast its operands) are right.
BF16_INTERPRETER_BUG = "bf16 elementwise math is wrong in Triton's interpreter (triton-lang/triton#4972)"


def select_device() -> str:
    """``"cuda"`` when a GPU is visible, else ``"cpu"`` with the Triton interpreter switched on.

    Must run before anything imports triton (the interpreter is chosen at import time).
    """
    import torch

    if torch.cuda.is_available() and not interpreted():
        return "cuda"
    if "triton" in sys.modules and not interpreted():
        raise RuntimeError("triton was imported before the interpreter could be selected")
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def interpreted() -> bool:
    """True where kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def load_module(path: str | os.PathLike[str]) -> ModuleType:
    """Import a generated module from ``path`` (a ``str`` or ``Path`` to its ``.py`` file) under the
    private name ``tilegen_generated_<stem>`` (Triton needs the file, so no in-memory import).

    Raises FileNotFoundError if ``path`` does not exist."""
    path = Path(path)
    name = f"tilegen_generated_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file's: a SourceFileLoader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # no half-imported module left behind
        raise
    return module


def is_image_spec(spec: m.Spec) -> bool:
    """True for a spec whose one input is a ``u8[3, H, W]`` image (grayscale-like)."""
    if len(spec.inputs) != 1:
        return False
    tensor = spec.inputs[0]
    first = tensor.dims[0]
    return tensor.dtype.id == "u8" and len(tensor.dims) == 3 and isinstance(first, m.Number) and first.text == "3"


def random_inputs(spec: m.Spec, sizes: dict[str, int], device: str, seed: int = 0) -> dict[str, Argument]:
    """One random tensor per input of ``spec``, shaped by ``sizes`` (symbol -> extent).

    An input declared with a range (``in x: f32[M, N] in [0.01, 10]``) is drawn uniformly from
    that closed range: floats in float64, rounded to the dtype and kept inside the range;
    integers uniform over the range's integers (see :func:`sample`). Otherwise floats are
    standard normal, ``u8`` uniform in [0, 256), an integer tensor a gather indexes by uniform in
    [0, extent of the gathered dimension), the offsets of jagged rows (``values[offsets[b] + l]``)
    sorted from 0 to the extent they start rows in (:func:`jagged_offsets`), other integers in
    [-100, 100), and scalars are drawn from their range, else their default, else 0.5 (float) or 3
    (integer). ``spec`` must be specialized (:func:`tilegen.model.specialize`) where it has dtype
    variables. Raises KeyError naming a size symbol missing from ``sizes``, and ValueError for a
    float range that holds no value of the dtype.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    ranges, starts = gather_ranges(spec), loaded_starts(spec)
    inputs: dict[str, Argument] = {}
    for tensor in spec.inputs:
        if tensor.is_scalar:  # a number passed by value
            if tensor.name.id in sizes:  # an integer scalar used as a size (g over G, c over C / G)
                inputs[tensor.name.id] = sizes[tensor.name.id]
            elif tensor.sample is not None:
                inputs[tensor.name.id] = sample(tensor, (), generator).item()
            elif tensor.default is not None:  # in ignore_index: i64 = -100
                inputs[tensor.name.id] = tensor.default
            else:
                inputs[tensor.name.id] = 0.5 if tensor.dtype.id in m.FLOAT_DTYPES else 3
            continue
        shape: list[int] = []
        for dim in tensor.dims:
            if isinstance(dim, m.Number):
                shape.append(int(dim.text))
            elif dim.id in sizes:
                shape.append(sizes[dim.id])
            else:
                raise KeyError(f"no size given for '{dim.id}' (use --size {dim.id}=VALUE)")
        dtype = torch_dtype(tensor.dtype.id)
        if tensor.sample is not None:
            value = sample(tensor, shape, generator)
        elif tensor.dtype.id in m.FLOAT_DTYPES:
            value = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)
        elif tensor.dtype.id == "bool":  # a mask: True or False, equally likely
            value = torch.rand(shape, generator=generator) < 0.5
        elif tensor.dtype.id == "u8":
            value = torch.randint(0, 256, shape, generator=generator, dtype=dtype)
        elif tensor.name.id in starts:  # offsets of jagged rows: sorted, from 0 to the dimension they start in
            value = draw_offsets(starts[tensor.name.id], sizes, shape, generator).to(dtype)
        elif tensor.name.id in ranges:  # gather indices: valid positions of the gathered dimension
            dim = ranges[tensor.name.id]
            extent = int(dim.text) if isinstance(dim, m.Number) else sizes[dim.id]
            value = torch.randint(0, max(extent, 1), shape, generator=generator, dtype=dtype)
        else:
            value = torch.randint(-100, 100, shape, generator=generator, dtype=dtype)
        inputs[tensor.name.id] = value.to(device)
    return inputs


def sample(tensor: m.Tensor, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` (on the CPU, in ``tensor``'s dtype, which must be bound) drawn
    uniformly from ``tensor.sample``, the closed range ``[low, high]`` of its declaration.

    Integers: each integer of the range equally likely. Floats: ``low * (1 - U) + high * U`` with
    ``U`` uniform in [0, 1), computed in float64, then rounded to the dtype and clamped to the
    dtype's values inside the range (0.01 is not an f16: its f16 neighbours inside [0.01, 10]
    are the bounds). Raises ValueError when no value of the dtype lies in the range."""
    import torch

    assert tensor.sample is not None  # a declaration with a range: the callers' condition
    low, high = tensor.sample
    dtype = torch_dtype(tensor.dtype.id)
    if not dtype.is_floating_point:
        first, last = integer_value(low), integer_value(high)
        assert first is not None and last is not None  # the checker's: an integer dtype's range is of integers
        if last < torch.iinfo(dtype).max:
            return torch.randint(first, last + 1, shape, generator=generator, dtype=dtype)
        # high + 1 does not fit the dtype: draw [first - 1, last) and shift up
        if first > torch.iinfo(dtype).min:
            return torch.randint(first - 1, last, shape, generator=generator, dtype=dtype) + 1
        return torch.randint(first, last, shape, generator=generator, dtype=dtype)  # the full range: all but max
    floor, ceiling = _inside(low.value, dtype, up=True), _inside(high.value, dtype, up=False)
    if floor > ceiling:
        raise ValueError(
            f"no {tensor.dtype.id} value lies in the range [{low.text}, {high.text}] of '{tensor.name.id}'"
        )
    unit = torch.rand(shape, generator=generator, dtype=torch.float64)
    value = (low.value * (1 - unit) + high.value * unit).to(dtype)  # no overflow at float64's ends
    return value.clamp(floor, ceiling)


def _inside(bound: float, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """The ``dtype`` value nearest ``bound`` on the range's side of it: the least value >= ``bound``
    (``up``) or the greatest <= it, as a 0-dimensional tensor."""
    import torch

    value = torch.tensor(bound, dtype=torch.float64).to(dtype)
    toward = torch.tensor(math.inf if up else -math.inf, dtype=dtype)
    if (value.double() < bound) if up else (value.double() > bound):
        value = torch.nextafter(value, toward)
    return value


def gather_ranges(spec: m.Spec) -> dict[str, m.Name | m.Number]:
    """Index tensor -> the dimension it gathers along (``target`` -> ``V`` for ``logits[r, target[r]]``)."""
    ranges: dict[str, m.Name | m.Number] = {}
    for stmt in m.statements(spec.body):
        for access in m.accesses(stmt):
            tensor = spec.tensor(access.tensor.id)
            for position, item in enumerate(access.index):
                if isinstance(item, m.Load):
                    assert tensor is not None  # the checker's: a load or store names a tensor
                    ranges[item.tensor.id] = tensor.dims[position]
    return ranges


def loaded_starts(spec: m.Spec) -> dict[str, tuple[m.Name | m.Number, tuple[str, ...]]]:
    """Integer tensor -> the dimension its values start rows in and the sizes of the axes added to
    them (``offsets`` -> ``(T, ("L",))`` for ``values[offsets[b] + l, d]`` with ``l over L``):
    jagged rows' offsets, and what bounds a row's length."""
    extents = {a.name.id: a.dim.id for a in spec.axes()}
    starts: dict[str, tuple[m.Name | m.Number, tuple[str, ...]]] = {}
    for stmt in m.statements(spec.body):
        for access in m.accesses(stmt):
            tensor = spec.tensor(access.tensor.id)
            for position, item in enumerate(access.index):
                if m.is_offset(item) and tensor is not None:
                    added = tuple(extents[r.name.id] for r in m.subexpressions(item)
                                  if isinstance(r, m.Ref) and r.name.id in extents)
                    for part in m.subexpressions(item):
                        if isinstance(part, m.Load):
                            starts[part.tensor.id] = (tensor.dims[position], added)
    return starts


def draw_offsets(start: tuple[m.Name | m.Number, tuple[str, ...]], sizes: dict[str, int], shape: Sequence[int],
                 generator: torch.Generator) -> torch.Tensor:
    """Offsets of jagged rows of ``shape`` (int64, on the CPU) for one entry of :func:`loaded_starts`
    at ``sizes``: from 0 to the rows' dimension, each row within the axes added to its start and
    none empty where the rows allow (a mean of none is NaN). Raises KeyError for a size missing."""
    dim, axes = start
    extent = int(dim.text) if isinstance(dim, m.Number) else sizes[dim.id]
    longest = min((sizes[a] for a in axes if a in sizes), default=extent)
    return jagged_offsets(extent, math.prod(shape) - 1, longest, generator, shortest=1).reshape(tuple(shape))


def jagged_offsets(total: int, rows: int, longest: int, generator: torch.Generator, shortest: int = 0
                   ) -> torch.Tensor:
    """``rows + 1`` sorted offsets from 0 to ``total`` (an int64 tensor on the CPU): ``rows`` rows of
    random lengths, each at most ``longest`` where ``rows * longest`` covers ``total`` (else as even as
    they go) and at least ``shortest`` where ``total`` allows (empty ones among them by default).
    Raises ValueError for ``rows`` < 0, or ``rows`` = 0 with ``total`` > 0."""
    import torch

    if rows < 0 or (rows == 0 and total > 0):
        raise ValueError(f"{rows} rows cannot hold {total} elements")
    if rows == 0:
        return torch.zeros(1, dtype=torch.int64)
    longest = max(longest, -(-total // rows))
    least = min(shortest, total // rows)
    lengths = torch.full((rows,), total // rows, dtype=torch.int64)
    lengths[: total % rows] += 1
    for _ in range(2 * rows):  # random moves of rows from one to another, each kept within longest
        i, j = torch.randint(0, rows, (2,), generator=generator).tolist()
        room = min(int(lengths[i]) - least, longest - int(lengths[j]))
        if i != j and room > 0:
            moved = int(torch.randint(0, room + 1, (), generator=generator))
            lengths[i] -= moved
            lengths[j] += moved
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def load_image(path: Path, device: str) -> torch.Tensor:
    """Read an RGB image as a contiguous ``uint8 [3, H, W]`` tensor (Pillow decodes it)."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(path) as image:
        array = np.asarray(image.convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous().to(device)


def save_grey(tensor: torch.Tensor, path: Path) -> None:
    """Write a ``uint8 [H, W]`` tensor as a greyscale PNG."""
    from PIL import Image

    Image.fromarray(tensor.cpu().numpy()).save(path)  # uint8 [H, W] -> mode "L"


def sample_photo() -> Path:
    """A real photograph shipped with matplotlib (Grace Hopper, 512x600 JPEG)."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"


@dataclass(frozen=True)
class RunResult:
    """One kernel run: what ran, on which device, and how far it was from ``reference``.

    ``max_error`` is the largest ``|out - ref|`` (output units; NaN when nothing was compared;
    NaN where the reference has NaN counts as equal), ``passed`` whether every element is within
    :mod:`tilegen.tolerance`'s bound. ``note`` is a line for the user (a file written, the worst
    element of a failed run); ``default_config`` is True when a tuned spec ran its default config
    because the interpreter cannot time configs; ``warnings`` holds the text of any other warning
    the run gave (one line each). ``skipped`` says why a run that did not pass is no verdict
    (:data:`BF16_INTERPRETER_BUG`): its :attr:`status` is SKIP, not FAIL. ``tolerance`` is the
    error allowed at the element of ``max_error`` (NaN when nothing was compared).
    """

    kernel: str
    shape: str
    device: str
    max_error: float
    passed: bool
    note: str = ""
    default_config: bool = False
    warnings: tuple[str, ...] = ()
    skipped: str = ""
    tolerance: float = math.nan

    @property
    def status(self) -> Literal["PASS", "SKIP", "FAIL"]:
        """``"PASS"``, ``"SKIP"`` (failed where the run is known to be wrong) or ``"FAIL"``."""
        if self.passed:
            return "PASS"
        return "SKIP" if self.skipped else "FAIL"


@contextlib.contextmanager
def quiet(caught: list[str]) -> Iterator[None]:
    """Run kernels without printing warnings: NumPy floating-point errors (overflow in the
    interpreter's ``exp``, which gives inf as a GPU does) are ignored, the interpreter's tuning
    notice dropped, and the message of any other warning appended to ``caught``."""
    try:
        import numpy as np

        errstate: contextlib.AbstractContextManager[object] = np.errstate(all="ignore")
    except ImportError:  # pragma: no cover - the interpreter needs NumPy; a GPU run may not
        errstate = contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as records, errstate:
        warnings.simplefilter("always")
        yield
    for record in records:
        text = f"{record.category.__name__}: {record.message}"
        if INTERPRETER_TUNING_NOTICE not in str(record.message) and text not in caught:
            caught.append(text)


def compare(outputs: Outputs, expected: Outputs, spec: m.Spec, args: Sequence[Argument] = (),
            reference: Reference | None = None) -> tuple[float, bool]:
    """Max absolute error over all outputs and whether every element is within the tolerance
    of :mod:`tilegen.tolerance` (``args``: the launcher's positional arguments, whose shapes
    give the lengths of the sums; ``reference``: the module's reference, evaluated once more
    on ``|args|`` for their size), NaN where the reference has NaN counting as equal (see
    :func:`comparison`). Raises KeyError when ``args`` lack a summed size."""
    result = comparison(outputs, expected, spec, args, reference)
    return result.max_error, result.passed


def comparison(outputs: Outputs, expected: Outputs, spec: m.Spec, args: Sequence[Argument] = (),
               reference: Reference | None = None) -> tolerance.Comparison:
    """:func:`compare` with the worst element (``detail``): :func:`tilegen.tolerance.compare`
    with ``equal_nan``, so NaN where the reference has NaN at the same place is equal (``log``
    of a negative input is NaN on both sides), as equal infinities are; a NaN on one side only
    fails, and ``detail`` says so."""
    return tolerance.compare(spec, args, outputs, expected, reference, equal_nan=True)


def bf16_arithmetic(spec: m.Spec) -> m.Span | None:
    """Where the kernel of ``spec`` (specialized: dtype variables bound) first computes on bf16
    values, by the language's promotion rules (:mod:`tilegen.dtypes`): arithmetic or a
    comparison with a bf16 operand that stays bf16 (math functions, ``sum`` and ``mean`` compute
    in float32; casts, loads, stores and ``dot`` do not count), a negation, ``maximum`` or
    ``minimum`` of bf16, or ``t += ...`` on a bf16 tile; None where it does not."""
    dtypes: dict[str, str | None] = {}

    def local(name: str) -> str | None:
        if name in dtypes:
            return dtypes[name]
        tensor = spec.tensor(name)
        return tensor.dtype.id if tensor is not None else INDEX

    def dtype(expr: m.Expr) -> str | None:
        return expr_dtype(expr, spec, local)

    def computed(value: m.Expr) -> m.Span | None:  # where ``value`` computes on bf16 itself
        for expr in m.subexpressions(value):
            if isinstance(expr, m.BinOp):
                left, right = dtype(expr.left), dtype(expr.right)
                if "bf16" in (left, right) and (
                    expr.op in COMPARISONS or promote(left, right, divide=expr.op == "/") == "bf16"
                ):
                    return expr.span
            elif isinstance(expr, m.Neg) and dtype(expr.operand) == "bf16":
                return expr.span
            elif isinstance(expr, m.Call) and expr.func.id in ("maximum", "minimum") and dtype(expr) == "bf16":
                return expr.span
        return None

    for stmt in m.statements(spec.body):
        for value in m.values(stmt):
            if (span := computed(value)) is not None:
                return span
        match stmt:
            case m.Declare():
                dtypes[stmt.name.id] = stmt.dtype.id
            case m.Assign():
                dtypes[stmt.name.id] = dtype(stmt.value)
            case m.Accumulate():
                if promote(local(stmt.name.id), dtype(stmt.value)) == "bf16":
                    return stmt.span
            case _:  # any other statement defines no local
                pass
    return None


def _quote(spec: m.Spec, span: m.Span) -> str:
    """The spec's text at ``span`` (its first line), for messages."""
    lines = m.source_lines(spec.source)
    if not 1 <= span.line <= len(lines):
        return "?"
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    return line[span.column - 1 : end].strip()


def run_module(
    module: ModuleType,
    spec: m.Spec,
    sizes: dict[str, int],
    device: str,
    image: Path | None = None,
    out_dir: Path | None = None,
) -> list[RunResult]:
    """Launch ``module``'s kernel on random inputs (or ``image``) and compare with its reference
    under :mod:`tilegen.tolerance`, printing no warnings (see :func:`quiet`): one
    :class:`RunResult` per binding of the spec's dtype variables (``matmul_fast[T=bf16]``), one
    for a spec without them.

    For an image spec the grey result is written as ``<stem>_grey.png`` next to the image
    (copied into ``out_dir`` first when given). Raises KeyError for a missing size.
    """
    return [
        _run_binding(module, m.specialize(spec, binding), binding, sizes, device, image, out_dir)
        for binding in spec.bindings()
    ]


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of the spec's dtype name ``dtype`` (``"bf16"``: ``torch.bfloat16``)."""
    import torch

    found: torch.dtype = getattr(torch, m.DTYPES[dtype][1].split(".")[1])
    return found


def chosen_keywords(spec: m.Spec, binding: dict[str, str]) -> dict[str, object]:
    """The launcher's (and reference's) keywords for ``binding``'s dtypes of the variables the
    caller chooses (``dtype G in T, f32``): ``{"G": torch.float32}``; empty for a spec without."""
    return {v.name.id: torch_dtype(binding[v.name.id]) for v in spec.chosen_dtype_vars() if v.name.id in binding}


def _run_binding(module: ModuleType, spec: m.Spec, binding: dict[str, str], sizes: dict[str, int], device: str,
                 image: Path | None, out_dir: Path | None) -> RunResult:
    """:func:`run_module` for one binding of the dtype variables (``spec`` specialized to it)."""
    launcher = getattr(module, spec.name.id)
    default_config = spec.tune is not None and interpreted()
    note = ""
    inputs: dict[str, Argument]
    if image is not None and is_image_spec(spec):
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            copy = out_dir / image.name
            if copy.resolve() != image.resolve():
                shutil.copyfile(image, copy)
            image = copy
        inputs = {spec.inputs[0].name.id: load_image(image, device)}
    else:
        inputs = random_inputs(spec, sizes, device)
    args = tuple(inputs.values())
    keywords = chosen_keywords(spec, binding)
    reference = functools.partial(module.reference, **keywords)
    caught: list[str] = []
    with quiet(caught):
        outputs = launcher(*args, **keywords)
        expected = reference(*args)
        result = comparison(outputs, expected, spec, args, reference)
    if image is not None and is_image_spec(spec):
        grey = image.with_name(f"{image.stem}_grey.png")
        save_grey(outputs, grey)
        note = f"wrote {grey}"
    shape = ", ".join("x".join(str(s) for s in t.shape) for t in args if hasattr(t, "shape"))
    kernel = spec.name.id
    if binding:
        kernel += "[" + ", ".join(f"{var}={dtype}" for var, dtype in binding.items()) + "]"
    skipped = ""
    if not result.passed:
        where = bf16_arithmetic(spec) if interpreted() else None  # a GPU's FAIL stays FAIL
        if where is not None:  # a wrong interpreter, not (known to be) a wrong kernel
            skipped = BF16_INTERPRETER_BUG
            line = (
                f"{kernel}: SKIP: {BF16_INTERPRETER_BUG}, and the kernel computes '{_quote(spec, where)}' "
                f"({spec.path}:{where.line}) in bf16; here {result.detail}. A GPU run checks this row."
            )
        else:
            line = f"{kernel}: FAIL: {result.detail}"
        note = f"{note}\n{line}" if note else line
    return RunResult(
        kernel, shape, device, result.max_error, result.passed, note, default_config, tuple(caught), skipped,
        result.tolerance,
    )


@contextlib.contextmanager
def tune_effort(level: str) -> Iterator[None]:
    """Run the block with TILEGEN_TUNE set to ``level`` (see the runtime's ``effort``), then as it was."""
    saved = os.environ.get("TILEGEN_TUNE")
    os.environ["TILEGEN_TUNE"] = level
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TILEGEN_TUNE"]
        else:
            os.environ["TILEGEN_TUNE"] = saved


@dataclass(frozen=True)
class TuneResult:
    """One tune key a :func:`tune_module` call filled: the launcher's label (``matmul_fast[T=bf16]``),
    the key as the on-disk cache writes it (device name and sizes), the config's index in the
    module's ``_CONFIGS`` and keywords, and whether the cache held it before (then nothing was timed)."""

    kernel: str
    key: str
    index: int
    config: dict[str, object]
    cached: bool


def tune_module(module: ModuleType, spec: m.Spec, sizes: dict[str, int], device: str,
                dtypes: dict[str, str] | None = None) -> list[TuneResult]:
    """Call ``module``'s launcher on random inputs (:func:`random_inputs`) at ``sizes``, with
    TILEGEN_TUNE=full, once per binding of the spec's dtype variables (those matching ``dtypes``,
    variable -> dtype, where given): on a GPU each new tune key compiles and times every config
    and caches the fastest on disk, where later processes' ``quick`` tuning finds it. Returns one
    :class:`TuneResult` per key tuned or found cached. Raises ValueError for a spec without tune
    configs or ``dtypes`` no binding has, KeyError for a missing size."""
    tuner = getattr(module, "_tuner", None)
    if tuner is None:
        raise ValueError(f"{spec.name.id} has no tune configs: there is nothing to tune")
    bindings = [b for b in spec.bindings() if all(b.get(var) == dtype for var, dtype in (dtypes or {}).items())]
    if not bindings:
        given = ", ".join(f"{var}={dtype}" for var, dtype in (dtypes or {}).items())
        known = "; ".join(", ".join(f"{v}={d}" for v, d in b.items()) for b in spec.bindings() if b) or "none"
        raise ValueError(f"{spec.name.id} has no dtype binding {given} (its bindings: {known})")
    launcher = getattr(module, spec.name.id)
    results: list[TuneResult] = []
    with tune_effort("full"):
        for binding in bindings:
            bound = m.specialize(spec, binding)
            kernel = spec.name.id + ("[" + ", ".join(f"{v}={d}" for v, d in binding.items()) + "]" if binding else "")
            args = tuple(random_inputs(bound, sizes, device).values())
            cached, before = tuner.load(), dict(tuner.tuned)
            with quiet([]):
                launcher(*args, **chosen_keywords(spec, binding))
            if device == "cuda":
                import torch

                torch.cuda.synchronize()
            for key, index in tuner.tuned.items():
                if key not in before:
                    disk_key = tuner.disk_key(key)
                    results.append(TuneResult(kernel, disk_key, index, tuner.configs[index].all_kwargs(),
                                              disk_key in cached))
    return results


def shipped_entries(spec: m.Spec, tuned: list[TuneResult], arch: str) -> dict[str, dict[str, int]]:
    """``tuned``'s choices as a table shipped beside ``spec`` (:mod:`tilegen.tuned`) keys them:
    the GPU's architecture ``arch`` (``"sm_90"``, :func:`tilegen.runtime.device_arch`) in place
    of its name, each config by the keywords ``spec``'s configs write."""
    written = {s.name.id for config in (spec.tune.configs if spec.tune else ()) for s in config.settings}
    return {f"{arch}|{result.key.partition('|')[2]}":
            {k: v for k, v in result.config.items() if k in written and isinstance(v, int)} for result in tuned}


#: The most elements :func:`default_sizes` gives one tensor (256 MiB of float32): a 5-d pooling
#: input at 40 tiles a dimension would take tens of GiB.
MAX_TENSOR_ELEMENTS = 1 << 26


#: The most tile steps (programs times the steps of their loops) :func:`default_sizes` gives a
#: run in Triton's interpreter, which takes about a millisecond a step: a 3d convolution's 27
#: window taps times its channel tiles in every program would take minutes at 5 tiles a symbol.
INTERPRETER_STEPS = 2_000


def default_sizes(spec: m.Spec, programs: int, given: dict[str, int] | None = None,
                  max_steps: int | None = None) -> dict[str, int]:
    """:func:`sizes_at` ``programs`` tiles a symbol, halved until no tensor of ``spec`` holds more
    than :data:`MAX_TENSOR_ELEMENTS` elements and the kernel takes at most ``max_steps`` tile steps
    (default: :data:`INTERPRETER_STEPS` under ``TRITON_INTERPRET=1``, else no limit); at one tile
    and still over it, index extents of 2 instead of 3 (a convolution's window taps)."""
    if max_steps is None and os.environ.get("TRITON_INTERPRET") == "1":
        max_steps = INTERPRETER_STEPS

    def over(sizes: dict[str, int]) -> bool:
        return max(_elements(t, sizes) for t in spec.tensors) > MAX_TENSOR_ELEMENTS or (
            max_steps is not None and tile_steps(spec, sizes) > max_steps)

    sizes = sizes_at(spec, programs, given)
    while programs > 1 and over(sizes):
        programs //= 2
        sizes = sizes_at(spec, programs, given)
    if over(sizes):
        sizes = sizes_at(spec, programs, given, index=2)
    return sizes


def interpreter_blocks(spec: m.Spec) -> dict[str, int]:
    """The block sizes ``spec``'s launcher runs in Triton's interpreter unless given others: its
    parameters' defaults, with its interpreter config's settings (``num_warps`` and ``num_stages``
    among them) in their place (:meth:`tilegen.model.Spec.interpreter_config`)."""
    blocks = {p.name.id: int(p.default.text) for p in spec.params if p.default is not None}
    config = spec.interpreter_config()
    for setting in config.settings if config is not None else ():
        assert setting.default is not None  # a config's setting has its value
        blocks[setting.name.id] = int(setting.default.text)
    return blocks


def tile_steps(spec: m.Spec, sizes: dict[str, int], blocks: dict[str, int] | None = None) -> int:
    """About how many tile steps ``spec``'s kernel takes at ``sizes`` with ``blocks`` (default:
    :func:`interpreter_blocks`; a block not given counts as 1): its programs times the steps of
    its body, one without loops, else the steps of its loops one after another, each its tiles
    times the steps of its own body. An index axis (no block) steps once per index."""
    if blocks is None:
        blocks = interpreter_blocks(spec)

    def steps(axis: m.Axis) -> int:
        extent = int(axis.dim.id) if axis.literal else sizes.get(axis.dim.id, 1)
        if axis.bounds == "whole":
            return 1
        block = blocks.get(axis.block.id, 1) if axis.block is not None else 1
        return -(-extent // block)

    def body_steps(body: tuple[m.Stmt, ...]) -> int:
        return sum(steps(s.axis) * body_steps(s.body) for s in body if isinstance(s, m.Loop)) or 1

    return math.prod(steps(a) for a in spec.grid) * body_steps(spec.body)


def _elements(tensor: m.Tensor, sizes: dict[str, int]) -> int:
    """How many elements ``tensor`` holds at ``sizes`` (a dimension not sized there counts as 1)."""
    return math.prod(sizes.get(d.id, 1) if isinstance(d, m.Name) else int(d.text) for d in tensor.dims)


def sizes_at(spec: m.Spec, programs: int, given: dict[str, int] | None = None, index: int = 3) -> dict[str, int]:
    """A size for every symbol of ``spec``: ``given`` where stated, else ``programs`` tiles of
    the largest block over it (defaults, or any tune config's value), plus a partial tile when
    every axis over it is masked (so tails are exercised and unmasked launchers accept the
    size). A ``whole`` extent is 3 short of a power of two (a masked tail), 61 where a ``dot``
    operand spans it (a head dimension); an index (batch) extent is ``index``. Where the grid holds several
    whole axes, or blocks of other axes beside one, a whole extent is smaller, so that one
    program's tile stays within 2**17 elements (a rope's [H, D] tiles, a [C, BW] tile)."""
    given = dict(given or {})
    blocks = interpreter_blocks(spec)
    largest = dict(blocks)  # unmasked axes must divide by every config's block
    for config in spec.tune.configs if spec.tune is not None else ():
        for setting in config.settings:
            assert setting.default is not None  # a config's setting has its value
            largest[setting.name.id] = max(largest.get(setting.name.id, 1), int(setting.default.text))
    axes = spec.axes()
    by_name = {a.name.id: a for a in axes}
    dot_dims = {
        by_name[i.id].dim.id
        for stmt in m.statements(spec.body) for value in m.values(stmt)
        for call in m.subexpressions(value) if m.is_dot(call)
        for operand in call.args for load in m.subexpressions(operand) if isinstance(load, m.Load)
        for i in load.index if isinstance(i, m.Name) and i.id in by_name
    }
    wholes = [a for a in spec.grid if a.bounds == "whole"]
    beside = math.prod(blocks.get(a.block.id, 1) for a in spec.grid if a.block is not None)
    bits = max(programs, 1).bit_length() + 7  # of one whole extent, alone in its tile
    if len(wholes) > 1 or beside > 1:  # the tile's 2**17 elements shared by its whole axes
        bits = max(3, min(bits, 17 - (beside.bit_length() - 1)) // max(len(wholes), 1))
    sizes = scalar_sizes(spec, given)
    for dim in size_names(spec):
        if dim.id in sizes:
            continue
        over = [a for a in axes if a.dim.id == dim.id]
        named = {dim.id}
        if not over:  # H of an output's H_out = (H + 2 * P - K) / S + 1: sized as the axes over H_out are
            over = derived_over(spec, dim.id)
            named |= derived_names(spec, dim.id)
        # KW of q over C * KH * KW (a window's), W of p over D_out * H_out * W_out: a later factor of
        # a product an axis runs over is small, so that the product is about one factor's size
        if any(later_factor(a, name) for a in over for name in named):
            sizes[dim.id] = given.get(dim.id, index)
            continue
        if any(a.bounds == "whole" for a in over):  # a dot's operand tile stays small (a head dim)
            extent = 61 if dim.id in dot_dims else (1 << bits) - 3
            sizes[dim.id] = given.get(dim.id, extent)
            continue
        if over and all(a.is_index for a in over):
            sizes[dim.id] = given.get(dim.id, index)
            continue
        step = max(
            (
                (largest if a.bounds == "unmasked" else blocks).get(a.block.id, 1)
                for a in over
                if a.block is not None
            ),
            default=16,
        )
        tail = step // 2 + 1 if all(a.masked for a in over) else 0
        if spec.access_style == "descriptor":  # TMA rows must be 16-byte aligned
            tail = 16 if step > 16 else 0
        sizes[dim.id] = given.get(dim.id, step * programs + tail)
    sizes = round_to_multiples(spec, sizes, given)  # rope's D / 2 in an index: D even
    return fit_jagged_rows(spec, solve_derived(spec, sizes, given), given)


def derived_names(spec: m.Spec, dim: str) -> set[str]:
    """The sizes derived from ``dim`` (``H_out`` for ``H``), and from those (``H_out_times_W_out``)."""
    names = {dim}
    for _ in spec.derived:  # each pass reaches one derived size further
        names |= {name for name, extent in spec.derived if names & set(m.offset_names(extent))}
    return names - {dim}


def derived_over(spec: m.Spec, dim: str) -> list[m.Axis]:
    """The axes over extents derived from ``dim`` (``oh over H_out`` for ``H``), or from a size
    derived from it (``p over H_out * W_out``)."""
    names = derived_names(spec, dim)
    return [a for a in spec.axes() if a.dim.id in names]


def later_factor(axis: m.Axis, dim: str) -> bool:
    """Whether ``dim`` is a factor, not the first, of the product ``axis`` runs over (``KH`` and
    ``KW`` of ``q over C * KH * KW``): a window's extent, kept small, the first factor tiled."""
    def factors(e: m.Expr) -> list[m.Expr]:
        return [*factors(e.left), *factors(e.right)] if isinstance(e, m.BinOp) and e.op == "*" else [e]

    found = factors(axis.extent) if axis.extent is not None else []
    return any(isinstance(f, m.Ref) and f.name.id == dim for f in found[1:])


def fit_jagged_rows(spec: m.Spec, sizes: dict[str, int], given: Container[str] = ()) -> dict[str, int]:
    """``sizes`` with the dimension jagged rows lie in (``T`` of ``values[offsets[b] + l, d]``) made
    at least as long as the rows the offsets make, so that no row need be empty, where no axis and
    nothing ``given`` sizes that dimension (a single offset, which makes no row, becomes two); and
    the bound of a row's length (``L`` of ``l over L``), unless given, at least the dimension over
    the rows, so that the rows :func:`draw_offsets` draws fit in it."""
    for name, (dim, added) in loaded_starts(spec).items():
        offsets = spec.tensor(name)
        assert offsets is not None, "a loaded start names an input"
        rows = math.prod(sizes.get(d.id, 1) if isinstance(d, m.Name) else int(d.text) for d in offsets.dims) - 1
        first = offsets.dims[0]
        if rows < 1 and len(offsets.dims) == 1 and isinstance(first, m.Name) and first.id not in given:
            sizes[first.id], rows = 2, 1  # one offset makes no row: two make one
        if isinstance(dim, m.Name) and dim.id not in given and not any(a.dim.id == dim.id for a in spec.axes()):
            sizes[dim.id] = max(sizes[dim.id], rows)
        total = sizes[dim.id] if isinstance(dim, m.Name) else int(dim.text)
        for bound in added[:1]:  # the bound of a row's length (L of l over L) holds the longest row
            if bound not in given and rows > 0:
                sizes[bound] = max(sizes[bound], -(-total // rows))
    return sizes
