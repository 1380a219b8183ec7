"""tilegen's runtime: what every generated module calls, written once.

``tilegen build`` copies this file into its output folder as ``_tilegen_runtime.py`` (with
:data:`BUILD` set to this file's sha256), and each generated module loads that copy, found beside
its own file, once per process; so a generated module needs only torch and Triton. It imports
nothing of tilegen but itself: no lark, jinja or typer.

What it holds: a kernel's launch as a generated launcher asks for it (:class:`Launch`: the config,
the launch, the compile cache, the launch kept for the fast path), the direct launch of a compiled
kernel (:func:`launcher`, :func:`compile_launch`), the
helpers that word a failed input check (:func:`bad_input` and friends), the autotuning
(:class:`Tuner`: the tuned-config cache in the process and on disk, the effort levels of
TILEGEN_TUNE (:func:`effort`), forced configs (``config=``, TILEGEN_CONFIG), :func:`autotune`, the
timing of configs in CUDA graphs and the settling of near ties), the pruning of configs whose whole-row
tile would not fit (:func:`whole_fits`), the split loop's sum of partial sums
(:func:`sum_partials`), ``split tail``'s wave arithmetic (:func:`tail_split`), and the
registration of a launcher as a PyTorch custom op (:func:`register_op`). What one spec needs
(its name, spec hash, configs) is passed as arguments, or held by an instance per module.
"""

import concurrent.futures
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import math
import os
import statistics
import sys
import threading
import types
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, TypeAlias, TypeVar, cast

import torch
import triton
import triton.language as tl
from torch.autograd.graph import increment_version
from triton.runtime.errors import OutOfResources

if TYPE_CHECKING:  # torch's private modules, for the checker only
    from torch._library.custom_ops import CustomOpDef
    from torch._ops import OpOverloadPacket

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # a Triton without host-side tensor descriptors: the pointer kernels run
    TensorDescriptor = None

#: The sha256 (16 hex digits) of tilegen/runtime.py that ``tilegen build`` wrote this copy from;
#: None in tilegen's own copy (see :func:`require`).
BUILD: str | None
BUILD = None

#: True where kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1`` when imported).
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

#: The compile options every GPU compile of a generated kernel names (the autotuner's and
#: ``warmup``'s): fused multiply-adds, Triton's default up to 3.9, which warns that 3.10 turns
#: it off. Named, the kernels compile the same on every Triton and the warning does not show.
#: (The interpreter runs no compiler; ``torch.compile`` compiles with Inductor's options.)
COMPILE_OPTIONS = {"enable_fp_fusion": True}

#: Triton 3.9 removed block pointers (tl.make_block_ptr raises, tl.advance is gone): there a
#: block-pointer launcher runs the same spec through TMA descriptors, or pointers where TMA cannot serve.
BLOCK_POINTERS = hasattr(tl, "advance")

#: Triton's interpreter multiplies the raw bits of bf16 tiles in tl.dot (triton-lang/triton#11584):
#: under it a kernel upcasts bf16 dot operands to f32 (exact). False on the GPU, compiled away.
_INTERPRETER_BF16_DOT = tl.constexpr(INTERPRET)

_T = TypeVar("_T")

#: Triton ships no type information: its objects are typed by what they are, as Any.
#: A ``triton.Config`` (an autotune config: ``kwargs``, ``num_warps``, ``all_kwargs()``, ...).
TritonConfig = Any
#: A JITFunction (``@triton.jit``), or an Autotuner (``@triton.autotune``) around one.
TritonKernel = Any

#: A launch's grid: the programs along each of its 3 axes.
Grid = tuple[int, int, int]

#: An autotuned launch's grid: a function of the config's keywords (``lambda meta: ...``).
GridFunction = Callable[[dict[str, Any]], tuple[int, ...]]

#: A launch's grid as :class:`Launch` takes it: a function of the constexprs (a config's among them).
LaunchGrid = Callable[[dict[str, Any]], Grid]

#: A module's fast-path table (``_FAST``, :func:`keep_launch`): fast-path key -> what a launch
#: computed: ``(launch, grid, device_index, device, args, ...)``.
FastTable = dict[Hashable, tuple[object, ...]]

#: What a fast path keeps of one TMA descriptor (:func:`descriptor_templates`): the index of its
#: base among the launch's tensors, and its other fields.
DescriptorTemplate = tuple[int, dict[str, Any]]

#: A config as a user names it (``config=``, TILEGEN_CONFIG, :attr:`Tuner.forced`): an index in
#: the spec's configs, or keywords that a config must have.
ConfigName = int | Mapping[str, object]

#: The effort levels of TILEGEN_TUNE (:func:`effort`).
Effort = Literal["none", "quick", "full"]

if TYPE_CHECKING:
    #: A tuned launcher's tune key: ``(device, *sizes)``, the sizes being what the launcher keys on
    #: (sizes, rounded sizes, dtypes, a variant's word). (A string: Python reads ``*`` there from 3.11.)
    TuneKey: TypeAlias = "tuple[torch.device, *tuple[Hashable, ...]]"
    #: :attr:`Tuner.forced`: a config, or a function of the launcher's name and the tune key giving one or None.
    Forced: TypeAlias = "ConfigName | Callable[[str, TuneKey], ConfigName | None]"


class DirectLaunch(Protocol):
    """``launch(grid, device_index, *args)``: a kernel run over ``grid`` on the current stream of
    device ``device_index`` (None under the interpreter), with every kernel argument in ``args``
    (constexprs included): :func:`launcher`, :func:`interpreted`."""

    def __call__(self, grid: Grid, device_index: int | None, /, *args: Any) -> None: ...


class _RecordingLaunch(DirectLaunch, Protocol):
    """:func:`launcher`'s launch of a compiled kernel, which says what its first launch found."""

    c_launch_layout: str | None


def require(build: str) -> types.ModuleType:
    """This module, if it is the runtime of ``build`` (the 16 hex digits a generated module was
    built with): ``tilegen build``'s copy of that build, or tilegen's own copy of the same source.
    Raises ImportError otherwise (a runtime copy older or newer than the module)."""
    mine = BUILD or source_hash()
    if mine != build:
        raise ImportError(
            f"{__file__} is tilegen's runtime {mine}, but the module loading it was built with runtime {build}: "
            "run `tilegen build` to write both again"
        )
    return sys.modules[__name__]


@functools.cache
def source_hash() -> str:
    """The sha256 (16 hex digits) of this file's bytes: the build of tilegen's own copy."""
    with open(__file__, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def launcher(compiled: Any) -> DirectLaunch:
    """``launch(grid, device_index, *args)``: runs ``compiled`` (Triton's CompiledKernel) over
    ``grid`` (3 sizes) on the device's current stream, with every kernel argument in ``args``
    (constexprs included). It does what the runner ``compiled[grid](*args)`` of Triton's
    fused-softmax tutorial does, with the handles looked up once, and calls the kernel's launcher
    directly as PyTorch Inductor does; while a launch hook is installed (a profiler such as
    Proton), it launches through that runner, which builds the hook's metadata.

    Below that, Triton's launcher (``compiled.run``, a Python ``CudaLauncher``) makes each call's
    scratch buffers (none for most kernels) and then calls its C ``launch``, whose argument order
    changes between Triton releases. The first launch goes through ``compiled.run`` and records
    the arguments it gives its C ``launch`` (:func:`_recorded_c_launch`); where they are those of a
    layout known here (Triton 3.6's or 3.9's, every argument equal to the one this launch would
    pass), every later launch calls that C ``launch`` directly, skipping ``CudaLauncher``'s Python
    (a median 0.68 us a launch on the H100's host,
    ``c43ff28:benchmarks/explore/explore_launch_floor_direct_h100.log``). Where they are not (another
    Triton, a kernel that needs scratch memory, GPU sanitizer instrumentation), launches stay on
    ``compiled.run``."""
    compiled._init_handles()
    try:
        run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
        current_stream = triton.runtime.driver.active.get_current_stream
        hooks = triton.knobs.runtime.launch_enter_hook
        hooks.calls  # noqa: B018 (an AttributeError on a Triton without the hook chain)
    except AttributeError:  # an older Triton (no knobs.runtime hook chain): its runner
        return lambda grid, device_index, *args: compiled[grid](*args)
    # Triton's C launch (read before a recording swaps it) and what each call passes it unchanged
    c_launch: Any = getattr(run, "launch", None)
    coop, pdl = getattr(run, "launch_cooperative_grid", None), getattr(run, "launch_pdl", None)
    annotations, signature = getattr(run, "arg_annotations", None), getattr(run, "kernel_signature", None)
    layout: str | None = None  # the C launch's argument order once the first launch found it; "run" where none fits

    def launch(grid: Grid, device_index: int | None, *args: Any) -> None:
        nonlocal layout
        if hooks.calls:  # a HookChain: the hooks installed now
            compiled[grid](*args)
        elif layout == "3.6":  # the orders of the first launch's check below
            c_launch(grid[0], grid[1], grid[2], current_stream(device_index), function, coop, pdl,
                     None, None, metadata, None, None, None, *args)
        elif layout == "3.9":
            c_launch(grid[0], grid[1], grid[2], current_stream(device_index), function, coop, pdl,
                     metadata, None, None, None, None, None, annotations, signature, args)
        elif layout == "run":
            run(grid[0], grid[1], grid[2], current_stream(device_index), function, metadata, None, None, None, *args)
        else:  # the first launch: through run, recording what it gives its C launch
            stream = current_stream(device_index)
            with COMPILE_LOCK:
                recorded = _recorded_c_launch(
                    run, lambda: run(grid[0], grid[1], grid[2], stream, function, metadata, None, None, None, *args))
            head = (grid[0], grid[1], grid[2], stream, function, coop, pdl)
            orders = {
                "3.6": (*head, None, None, metadata, None, None, None, *args),
                "3.9": (*head, metadata, None, None, None, None, None, annotations, signature, args),
            }
            layout = recording.c_launch_layout = next(
                (name for name, order in orders.items() if recorded is not None and _same(recorded, order)), "run")

    recording = cast(_RecordingLaunch, launch)  # the function, with the attribute set here
    recording.c_launch_layout = None  # what the first launch found: "3.6", "3.9" or "run"
    return recording


def _recorded_c_launch(run: Any, call: Callable[[], object]) -> tuple[object, ...] | None:
    """The arguments ``run`` (Triton's CudaLauncher) gave its C ``launch`` during ``call()`` (which
    launches once, through ``run``); None where it has no ``launch`` that can be replaced for the
    call, or did not call it once."""
    inner = getattr(run, "launch", None)
    if inner is None:
        call()
        return None
    seen: list[tuple[object, ...]] = []

    def record(*args: object) -> object:
        seen.append(args)
        return inner(*args)

    try:
        run.launch = record
    except (AttributeError, TypeError):  # a launcher whose attributes are fixed: launch as it is
        call()
        return None
    try:
        call()
    finally:
        run.launch = inner
    return seen[0] if len(seen) == 1 else None


def _same(a: object, b: object) -> bool:
    """True where ``a`` and ``b`` are the same object, equal numbers of one type, or tuples of such."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is tuple and type(b) is tuple:  # (b's type is a's)
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) in (int, float, bool, str, bytes) and a == b


#: Held while a kernel compiles for a new specialization (reentrant): threads calling first at once compile once.
COMPILE_LOCK = threading.RLock()


def compile_launch(compiled: dict[Hashable, DirectLaunch], key: Hashable, kernel: TritonKernel, grid: Grid, /,
                   *args: Any, **meta: Any) -> DirectLaunch:
    """The launch for ``key`` in ``compiled`` (a module's dict: specialization key -> launch,
    see :func:`launcher`), made there on a new key: ``kernel`` (a JITFunction) compiled by
    Triton's ``warmup`` for ``kernel[grid](*args, **meta)`` with :data:`COMPILE_OPTIONS` (or
    loaded from Triton's cache). A thread that finds it made meanwhile takes that one. A
    launcher calls it where ``compiled.get(key)`` has none: a plain dict's ``get`` is the
    fastest lookup on the launch's path."""
    with COMPILE_LOCK:
        launch = compiled.get(key)
        if launch is None:  # not compiled by another thread meanwhile
            launch = compiled[key] = launcher(kernel.warmup(*args, grid=grid, **meta, **COMPILE_OPTIONS))
        return launch


#: The index of the current CUDA device (``torch.cuda.current_device()`` without its lazy-init
#: check: 0.2 us a call against 0.5 on the H100's host); None where torch has no CUDA.
current_device = torch._C._cuda_getDevice if torch.cuda.is_available() else (lambda: None)

#: torch.compiler.is_compiling and torch.is_grad_enabled, which every launcher asks first (bound in
#: its module: a global costs less than torch's attributes; dynamo knows them by identity, not name).
is_compiling = torch.compiler.is_compiling
grad_enabled = torch.is_grad_enabled

#: One-element tensors of the optional inputs left out, by (value, dtype, device): see :func:`absent`.
_ABSENT: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}


def absent(value: float, made: Callable[[], tuple[tuple[int, ...], torch.dtype, torch.device]]) -> torch.Tensor | None:
    """The tensor a launcher passes for an optional input the caller left out (``in weight: f32[V]
    = 1``): every element ``value``, one element broadcast (stride 0) to the shape, dtype and
    device ``made()`` reads from the inputs the caller gave; the kernel reads it as any tensor.
    The element is made once per (value, dtype, device), outside torch.compile's tracing and fake
    tensors. None where ``made()`` fails (an input that is not a tensor of its rank: its check
    names it)."""
    try:
        shape, dtype, device = made()
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    if is_compiling() or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None:
        return torch.full((), value, dtype=dtype, device=device).expand(shape)  # a fake one, or traced: not kept
    key = (value, dtype, device)
    one = _ABSENT.get(key)
    if one is None:
        one = _ABSENT[key] = torch.full((), value, dtype=dtype, device=device)
    return one.expand(shape)


def packed(tensor: object, order: tuple[int, ...]) -> object:
    """``in weight: T[O, C, KH, KW] packed [KH, KW, O, C]``: ``tensor`` with the same shape and
    values, laid out in memory in ``order`` (its dimensions' positions, outermost first; the last
    one contiguous): ``tensor`` itself where it is already (one ``permute`` and ``is_contiguous``),
    else a copy (``permute(order).contiguous()`` viewed back in the shape's order). The copy is a
    torch op, so autograd carries a gradient through it to ``tensor`` and torch.compile traces it.
    Anything else (not a tensor, another rank, None) comes back as it is: the launcher's checks
    name it. Why: a ``dot`` operand whose reduction axis is contiguous loads in wide, coalesced
    rows, and Hopper's TF32 wgmma takes its operands in that order; a convolution weight's
    channels are strided (``[O, C, KH, KW]``), and its copy in ``[KH, KW, O, C]``, small beside
    the input, is made once a call."""
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != len(order):
        return tensor
    view = tensor.permute(order)
    if view.is_contiguous():
        return tensor
    inverse = [0] * len(order)  # plain list steps (no sorted(key=)): torch.compile traces them
    for position, dim in enumerate(order):
        inverse[dim] = position
    return view.contiguous().permute(inverse)


#: The most launches a module's fast path keeps (see :func:`keep_launch`); past it the table starts afresh.
FAST_LIMIT = 1024


def keep_launch(fast: FastTable, key: Hashable | None, entry: tuple[object, ...], tuner: "Tuner | None" = None) -> None:
    """Keep ``entry`` in ``fast`` (a module's ``_FAST``: fast-path key -> launch) under ``key``:
    what a launcher's fast path needs to launch again for a call whose key is ``key`` (the
    launcher's name; each input's shape, strides, dtype, device and pointer alignment; scalars
    and their types; keywords; the current device), that is, everything the launch computed
    from those: ``(launch, grid, device_index, device, args, *output shapes, ...)``, ``args`` the
    kernel's arguments after its pointers, then each finish kernel's workspace sizes and
    ``(launch, grid, args)``, TMA descriptors' templates (:func:`descriptor_templates`), a split
    loop's empty workspace (:mod:`tilegen.lower.fast` writes both ends). It holds
    no tensor of the call. A key of None (an unhashable input) keeps nothing;
    nor does a call of ``tuner``'s near-tie settling (its config is a trial), nor any while a
    call's ``config=`` runs (:meth:`Tuner.forcing`). The table is
    cleared when full (:data:`FAST_LIMIT`) and when ``tuner`` remembers a new config."""
    if key is None or (tuner is not None and (tuner.forcings or getattr(tuner.trial, "pick", None) is not None)):
        return
    if len(fast) >= FAST_LIMIT:
        fast.clear()
    fast[key] = entry


#: TensorDescriptor keeps its fields in slots (no ``__dict__`` to copy): :func:`rebased` constructs.
_DESCRIPTOR_SLOTS = hasattr(TensorDescriptor, "__slots__")


def descriptor_templates(descriptors: Sequence[Any | None],
                         tensors: Sequence[torch.Tensor]) -> tuple[DescriptorTemplate | None, ...] | None:
    """What a fast path keeps of a launch's TMA ``descriptors`` (TensorDescriptors or None) to make
    them again on another call's ``tensors`` (:func:`rebased`): for each, None, or the index in
    ``tensors`` of its base and its other fields (shape, strides, block shape, ...). None where
    the launch took ``tensors`` themselves (a descriptor launcher's call that ran its pointer kernel)."""
    if len(descriptors) == len(tensors) and all(d is t for d, t in zip(descriptors, tensors, strict=True)):
        return None
    templates: list[DescriptorTemplate | None] = []
    for descriptor in descriptors:
        if descriptor is None:
            templates.append(None)
            continue
        index = next(i for i, tensor in enumerate(tensors) if tensor is descriptor.base)
        fields = {f.name: getattr(descriptor, f.name) for f in dataclasses.fields(descriptor) if f.name != "base"}
        templates.append((index, fields))
    return tuple(templates)


def rebased(templates: Iterable[DescriptorTemplate | None] | None,
            tensors: Sequence[torch.Tensor]) -> Sequence[Any | None]:
    """The descriptors of ``templates`` (:func:`descriptor_templates`) on ``tensors``: copies of
    the kept fields with this call's base, made without TensorDescriptor's per-call checks
    (about 2.5 us each on the host), which the kept call passed with the same sizes,
    strides, dtypes and alignment; for None (a pointer kernel's launch), ``tensors``."""
    if templates is None:
        return tensors
    made: list[Any | None] = []
    for template in templates:
        if template is None:
            made.append(None)
            continue
        index, fields = template
        if _DESCRIPTOR_SLOTS:  # a Triton whose descriptors have no __dict__: made (and checked) again
            made.append(TensorDescriptor(tensors[index], **fields))
            continue
        descriptor = object.__new__(TensorDescriptor)
        descriptor.__dict__.update(fields)
        descriptor.base = tensors[index]
        made.append(descriptor)
    return made


def interpreted(kernel: TritonKernel) -> DirectLaunch:
    """``launch(grid, device_index, *args)`` for Triton's interpreter: ``kernel[grid](*args)``
    (a JITFunction; every argument by position, constexprs included), what a fast path keeps
    in place of a compiled launch (:func:`keep_launch`)."""
    return lambda grid, device_index, *args: kernel[grid](*args)


def int_class(value: int) -> bool | tuple[int]:
    """What Triton's JIT specializes an integer argument on: for 1 < value < 2**31 whether it is
    divisible by 16; otherwise the value itself (1 becomes a constexpr, larger values 64-bit)."""
    return value % 16 == 0 if 1 < value < 2**31 else (value,)


def _specialized(arg: object) -> Hashable:
    """What Triton's JIT specializes one positional kernel argument on, for :class:`Launch`'s
    compile key: a tensor's dtype and 16-byte alignment, an int's :func:`int_class`, a TMA
    descriptor's dtype, block shape, shape and strides; otherwise its type's name (a float, a bool, None)."""
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16
    if type(arg) is int:
        return int_class(arg)
    if TensorDescriptor is not None and isinstance(arg, TensorDescriptor):
        return (arg.base.dtype, tuple(arg.block_shape), tuple(map(int_class, arg.shape)),
                tuple(map(int_class, arg.strides)))
    return type(arg).__name__


class Finish(NamedTuple):
    """A store of a planned call that reduces across programs (:class:`Planned`): the kernel stores
    each program's float32 partials in ``workspaces`` new tensors of ``programs(meta)`` times
    ``elements`` elements each (``meta``: the constexprs with the config's, on which the number
    of programs depends), which it takes as its last pointers; then a finish kernel (the
    :class:`Launch`'s, in the order it names them) merges them into ``output`` over ``grid``,
    taking the workspaces and the output, then ``args(programs)``: its other arguments, its
    constexprs last."""

    output: torch.Tensor
    workspaces: int
    elements: int
    programs: Callable[[dict[str, Any]], int]
    grid: Grid
    args: Callable[[int], tuple[Any, ...]]


class Planned(NamedTuple):
    """A call of a launcher as its module's plan makes it (``_<name>_plan``, after the checks of its
    inputs) for :meth:`Launch.run`, :meth:`Launch.fake` and :meth:`Launch.traced_call`: the
    :class:`Launch` of the kernel that computes it (the launcher's own, or the one it routes to),
    the device, the new outputs, whether they are empty (nothing to launch), the grid (a function of
    the constexprs), the kernel's positional arguments and its constexprs (a tuned kernel's config
    adds its own), the outputs' shapes (what the fast path makes again), the tune key (None:
    an untuned kernel) and the stores that reduce across programs, each merged by a finish kernel
    (:class:`Finish`; the arguments leave out their workspaces, which the launch makes). A TMA
    descriptor launcher's plan gives its tensors (``arrays``, inputs then outputs), on which the
    launch keeps its descriptors as templates (:func:`descriptor_templates`); so does the plan of
    its pointer kernel, which it returns where descriptors cannot serve, so that one fast path
    launches either. An in-place call's plan (``inplace=True``: outputs written over inputs) names
    the inputs it writes over (``overwritten``), marked so as it launches (:func:`overwritten`)."""

    launch: "Launch"
    device: torch.device
    outputs: tuple[torch.Tensor, ...]
    empty: bool
    grid: "LaunchGrid"
    args: tuple[Any, ...]
    meta: dict[str, Any]
    kept: tuple[object, ...]
    tune_key: "TuneKey | None"
    finishes: tuple[Finish, ...] = ()
    arrays: tuple[torch.Tensor, ...] = ()
    overwritten: tuple[torch.Tensor, ...] = ()



def configs_like(configs: Sequence[TritonConfig], pre_hook: Callable[[dict[str, Any]], object] | None
                 ) -> list[TritonConfig]:
    """Copies of ``configs`` (``triton.Config``) with ``pre_hook`` instead of theirs: a TMA
    descriptor kernel's configs for its pointer kernel (no descriptor blocks to set), or a block
    pointer kernel's for its descriptor kernel."""
    made = []
    for config in configs:
        copied = copy.copy(config)
        copied.pre_hook = pre_hook
        made.append(copied)
    return made


def workspaces(device: torch.device, finishes: Iterable[Finish], counts: Iterable[int]) -> tuple[torch.Tensor, ...]:
    """The float32 workspaces of ``finishes`` (:class:`Finish`) on ``device``, for ``counts``
    programs each: ``count * elements`` elements a workspace, in order."""
    return tuple(torch.empty(count * finish.elements, device=device, dtype=torch.float32)
                 for finish, count in zip(finishes, counts, strict=True) for _ in range(finish.workspaces))


class Launch:
    """One kernel's launch as a generated launcher asks for it once its checks passed: the config
    (remembered, forced or tuned), the grid, the launch (Triton's JIT call under the interpreter;
    on the GPU the compiled kernel of this specialization, compiled once: :func:`compile_launch`),
    and the launch kept for the launcher's fast path (:func:`keep_launch`). A generated module
    makes one per launcher, whose body then says only what is its own: checks, outputs, the
    kernel's arguments, the grid, the tune key.

    ``module`` is the generated module's namespace (its ``globals()``), where the launch finds,
    when it runs, the kernel named ``kernel`` (a ``@triton.jit`` function, or with ``tuned`` its
    ``triton.autotune``'d wrapper) and the module's tables: ``_FAST`` (fast-path key -> kept
    launch), ``_COMPILED`` (specialization key -> :func:`launcher`), and for a tuned kernel its
    ``_tuner`` (:class:`Tuner`) and ``_CONFIGS``: what replaces one of them on the module, or one of
    the tuner's attributes (a test, a benchmark), replaces it for the launch too. ``name`` is the launcher's
    (its compile keys, its tune messages). ``pointers``: how many of the kernel's first arguments
    a fast-path call passes itself (its tensors, or the TMA descriptors made on them, then the
    workspaces of its finish kernels); the arguments after them are kept. ``blocks``: the module's
    ``_descriptor_blocks`` sets the TMA descriptors' block shapes from the config's blocks; ``retune``:
    the autotuner's own cache is cleared before a tune (it keys on tensor dtypes, which descriptors
    do not show). ``plan``: the module's plan of a call (:class:`Planned`), where the launcher's full
    path (:meth:`run`), its op's fake implementation (:meth:`fake`) and the body torch.compile traces
    (:meth:`traced_call`) are the runtime's; ``refuse``: the positions of the inputs autograd may
    follow, where a call autograd would record is refused (the spec has no backward); ``finishes``:
    the module's finish kernels (``@triton.jit`` functions, by name), which merge the partials of
    the plan's :class:`Finish` steps, in that order, after the kernel. The kernel's
    constexpr parameters follow all the others (every generated kernel's do): the compiled launch
    takes them last, by position. Raises AssertionError where they do not.
    """

    def __init__(self, module: dict[str, Any], kernel: str, name: str, *, pointers: int, tuned: bool = False,
                 blocks: bool = False, retune: bool = False, plan: Callable[..., Planned] | None = None,
                 refuse: tuple[int, ...] = (), finishes: tuple[str, ...] = ()) -> None:
        self.module = module
        self.plan = plan
        self.refuse = refuse
        self.kernel = kernel
        self.name = name
        self.pointers = pointers
        self.tuned = tuned
        self.blocks = blocks
        self.retune = retune
        # each finish kernel's own launch (untuned; its arguments all passed, its pointers first)
        self.finishes = tuple(Launch(module, finish, finish, pointers=0) for finish in finishes)
        jit = module[kernel].fn if tuned else module[kernel]
        # the Python function's parameters (a JITFunction's, or the interpreter's InterpretedFunction's)
        params = inspect.signature(jit.fn).parameters.values()
        constexpr = [p.annotation is tl.constexpr or "constexpr" in str(p.annotation) for p in params]
        self.arg_names: tuple[str, ...] = tuple(p.name for p in params)
        #: the constexpr parameters' names, in signature order (after every other parameter)
        self.constexprs: tuple[str, ...] = tuple(p.name for p, c in zip(params, constexpr, strict=True) if c)
        assert all(constexpr[len(constexpr) - len(self.constexprs):]), f"{name}: a constexpr before another parameter"

    def config_index(self, tune_key: "TuneKey", grid: "LaunchGrid", args: tuple[Any, ...], meta: dict[str, Any],
                     again: Callable[[], object], first: Callable[[], object] | None,
                     finishes: tuple[Finish, ...] = (), device: torch.device | None = None) -> int | None:
        """The index in ``_CONFIGS`` of the config to run for ``tune_key``: remembered (:attr:`Tuner.tuned`),
        else (once per key, under the tuner's lock) :meth:`Tuner.tuned_index`'s.
        Where that is None, the autotuner runs every config on ``args`` (:func:`autotune`) and its
        choice, its near ties settled by timing ``again`` (the launcher's call of itself:
        :meth:`Tuner.settle_ties`), is remembered; then None: the autotuner's launch computed the
        call's outputs (without ``finishes``: it runs the kernel alone, on workspaces on ``device``
        with room for the most programs any config runs). ``first`` (an in-place call's): the call
        on new outputs, run before a tune, whose trials must not read what they overwrote."""
        module = self.module
        tuner: Tuner = module["_tuner"]
        index: int | None = tuner.tuned.get(tune_key)
        if index is None and first is not None:
            first()
            index = tuner.tuned.get(tune_key)
        if index is not None:
            return index
        with tuner.lock:  # first call with these sizes on this device (one thread at a time)
            index = tuner.tuned_index(self.name, tune_key)
            if index is None:  # tune, and remember the choice on disk
                autotuner = module[self.kernel]
                if self.retune:
                    autotuner.cache.clear()
                if finishes:  # room for every config's partials
                    assert device is not None, f"{self.name}: workspaces without their device"
                    most = [max(f.programs({**meta, **config.kwargs}) for config in autotuner.configs)
                            for f in finishes]
                    args = self.with_workspaces(args, workspaces(device, finishes, most))
                autotune(autotuner, grid, *args, **meta)
                tuner.remember(tune_key, tuner.settle_ties(tune_key, autotuner, again))
            return index

    def with_workspaces(self, args: tuple[Any, ...], made: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        """``args`` (the plan's: without workspaces) with the workspaces ``made`` in place: the last
        of the kernel's :attr:`pointers`."""
        at = self.pointers - len(made)
        return (*args[:at], *made, *args[at:])

    def __call__(self, fast_key: Hashable | None, device: torch.device, grid: "LaunchGrid", args: tuple[Any, ...],
                 meta: dict[str, Any], kept: tuple[object, ...] = (), *, tune_key: "TuneKey | None" = None,
                 again: Callable[[], object] | None = None, first: Callable[[], object] | None = None,
                 arrays: tuple[torch.Tensor, ...] = (), finishes: tuple[Finish, ...] = ()) -> bool:
        """Launch the kernel on ``device`` over ``grid(constexprs)`` with the positional ``args``
        (every argument but the constexprs, in signature order) and the constexprs ``meta`` (a
        tuned kernel's config adds its own), and keep the launch under ``fast_key``:
        ``(launch, grid, device_index, device, args after the pointers and the constexprs, *kept)``,
        ``kept`` being what the fast path makes again (the outputs' shapes), then, for TMA
        descriptors, their templates on ``arrays`` (:func:`descriptor_templates`). With
        ``finishes`` (:class:`Finish`, one per finish kernel of the launch), the kernel's workspaces
        are made for this config's programs and passed after ``args``' pointers, and each finish
        kernel runs after the kernel (launched as the kernel is: :meth:`launched`); the launch
        keeps, after the outputs' shapes, each workspace's size, then each finish's ``(launch,
        grid, arguments after its pointers)``. A tuned kernel's config is :meth:`config_index`'s for
        ``tune_key`` (``again``, ``first``: see there); a call that tuned keeps nothing and returns
        False: the autotuner ran the kernel (alone, where it has finishes: ``again`` computes the
        call). Where the spec's default config, chosen untuned, needs more resources than the GPU
        has, the launch runs its interpreter config instead (:meth:`fallback`). True where it launched."""
        given, bare = meta, args  # the call's own, for a fallback's launch again
        module = self.module
        jit = module[self.kernel]
        index: int | None = None
        tuner: Tuner | None = None
        if self.tuned:
            assert tune_key is not None and again is not None, f"{self.name}: a tuned launch without its tune key"
            tuner = module["_tuner"]
            index = tuner.tuned.get(tune_key)
            if index is None:
                index = self.config_index(tune_key, grid, args, meta, again, first, finishes, device)
                if index is None:  # the autotuner ran the call
                    return False
            jit = jit.fn
            meta = {**meta, **module["_CONFIGS"][index].kwargs}
        if self.blocks:  # the descriptors' block shapes, from this config's blocks
            module["_descriptor_blocks"]({**dict(zip(self.arg_names, args, strict=False)), **meta})
        counts = [finish.programs(meta) for finish in finishes]
        made = workspaces(device, finishes, counts) if finishes else ()
        if made:
            args = self.with_workspaces(args, made)
        programs = grid(meta)
        try:
            launch, device_index = self.launched(jit, device, programs, args, meta, index)
        except OutOfResources:
            if tune_key is None or not self.fallback(tune_key, index):
                raise
            return self(fast_key, device, grid, bare, given, kept, tune_key=tune_key, again=again,
                        first=first, arrays=arrays, finishes=finishes)
        finished: list[tuple[DirectLaunch, Grid, tuple[Any, ...]]] = []  # each finish's launch, grid, arguments
        start = 0
        for finish, count, merging in zip(finishes, counts, self.finishes, strict=True):
            finished.append(merging.merge(device, finish, made[start:start + finish.workspaces], count))
            start += finish.workspaces
        if arrays:
            kept = (*kept, descriptor_templates(args[:self.pointers], arrays))
        if finishes:  # each workspace's size, then each finish's launch
            kept = (*kept, *(workspace.numel() for workspace in made), *finished)
        constexprs = tuple([meta[name] for name in self.constexprs])
        keep_launch(module["_FAST"], fast_key,
                    (launch, programs, device_index, device, (*args[self.pointers:], *constexprs), *kept), tuner)
        return True

    def launched(self, jit: TritonKernel, device: torch.device, programs: Grid, args: tuple[Any, ...],
                 meta: dict[str, Any], index: int | None) -> tuple[DirectLaunch, int | None]:
        """Launch ``jit`` over ``programs`` with ``args`` (every argument but the constexprs) and the
        constexprs ``meta``, on ``device``, running config ``index`` of ``_CONFIGS`` (None: untuned):
        under the interpreter Triton's JIT call; on the GPU the compiled kernel of this
        specialization, compiled once with the config's options (:func:`compile_launch`), launched
        directly. Returns the launch and the device's index (None under the interpreter): what
        a fast path calls again. Raises Triton's OutOfResources where the kernel does not fit."""
        constexprs = tuple([meta[name] for name in self.constexprs])
        if INTERPRET:  # Triton's interpreter runs the kernel on the CPU
            jit[programs](*args, **meta)
            return interpreted(jit), None
        # the compiled kernel for Triton's specialization of these arguments (compiled on a new one)
        device_index = device.index
        compiled = self.module["_COMPILED"]
        # what Triton specializes each argument on (an int's int_class written out: most are ints)
        terms = [(a % 16 == 0 if 1 < a < 2**31 else (a,)) if type(a) is int else _specialized(a) for a in args]
        key = (self.name, device_index, index, *terms, *constexprs)
        found = compiled.get(key)
        if found is None:  # a new specialization: compiled with the config's options
            options = self.module["_CONFIGS"][index].all_kwargs() if index is not None else {}
            found = compile_launch(compiled, key, jit, programs, *args, **{**meta, **options})
        found(programs, device_index, *args, *constexprs)
        return found, device_index

    def merge(self, device: torch.device, finish: Finish, made: tuple[torch.Tensor, ...],
              count: int) -> tuple[DirectLaunch, Grid, tuple[Any, ...]]:
        """Launch this finish kernel (a :class:`Launch` of the ``finishes`` of another) for ``finish``
        on ``device``: it merges the partials ``count`` programs stored in the workspaces ``made``
        into the finish's output (:meth:`launched`). Returns what the fast path keeps of it: the
        launch, its grid and its arguments after its pointers."""
        rest = finish.args(count)
        split = len(rest) - len(self.constexprs)
        meta = dict(zip(self.constexprs, rest[split:], strict=True))
        launch, _ = self.launched(self.module[self.kernel], device, finish.grid, (*made, finish.output, *rest[:split]),
                                  meta, None)
        return launch, finish.grid, rest

    def fallback(self, tune_key: "TuneKey", index: int | None) -> bool:
        """Run the interpreter config for ``tune_key`` from now on, and say so in a warning, where
        ``index`` is the default config, chosen untuned (not forced) and too big for this GPU (its
        shared memory, say: an f32 tile of a long head dimension); True where it does. The
        interpreter config is the spec's smallest; a spec without one has nothing to fall back on."""
        tuner: Tuner = self.module["_tuner"]
        forced = getattr(tuner.trial, "force", None) is not None or tuner.forced is not None or forced_config()
        if index != tuner.default or index == tuner.interpreted or forced:
            return False
        warnings.warn(
            f"{self.name}: the spec's default config needs more resources than this GPU has at sizes "
            f"{tuple(tune_key[1:])}; running its interpreter config (TILEGEN_TUNE=full finds the fastest that fits)",
            stacklevel=_caller_level(),
        )
        tuner.tuned[tune_key] = tuner.interpreted
        return True

    def traced(self, grid: GridFunction | Grid, args: tuple[Any, ...], meta: dict[str, Any]) -> None:
        """The launch as ``torch.compile`` traces it (the body of a ``torch.library.triton_op``):
        ``wrap_triton(kernel)[grid](*args, **meta)``, Triton's own call, a tuned kernel through its
        autotuner (whose configs Inductor then times, over ``grid``, a function of them); an
        untuned kernel's grid, where a function, is called on ``meta``."""
        programs = grid(meta) if callable(grid) and not self.tuned else grid
        torch.library.wrap_triton(self.module[self.kernel])[programs](*args, **meta)

    def run(self, launcher: Callable[..., Any], fast_key: Hashable | None, /, *args: Any, **kwargs: Any) -> Any:
        """The full path of the call ``launcher(*args, **kwargs)``, whose fast path found no launch
        kept under ``fast_key``: a call whose first tensor is on a GPU other than the current one
        runs there (the call again, under ``torch.cuda.device``: its checks name a tensor on
        another device); then the module's :attr:`plan` of it (the checks, the outputs, the
        kernel's arguments, its stages run); a call autograd would record refused where the spec
        has no backward (:attr:`refuse`); the inputs an in-place call writes over are marked so;
        then the launch the plan names (:meth:`__call__`), keeping it under ``fast_key``, unless
        the outputs are empty. Returns the outputs: where finish kernels merge partials and the
        call tuned (the autotuner ran the kernel alone), those of the call again, on the config
        the tune chose."""
        assert self.plan is not None, f"{self.name}: run without the module's plan"
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if tensor is not None and tensor.is_cuda and tensor.device.index != torch.cuda.current_device():
            with torch.cuda.device(tensor.device):  # run there, on its current stream (the plan too: its stages)
                return launcher(*args, **kwargs)
        planned = self.plan(*args, **kwargs)
        if self.refuse and grad_enabled() and any(getattr(args[i], "requires_grad", False) for i in self.refuse):
            no_backward(self.name)
        device = planned.device
        if planned.overwritten:
            overwritten(*planned.overwritten)
        if not planned.empty:
            # an in-place call's tune runs the call on new outputs first: the trials must not read what they overwrote
            first = (lambda: launcher(*args, **{**kwargs, "inplace": False})) if planned.overwritten else None
            launched = planned.launch(fast_key, device, planned.grid, planned.args, planned.meta, planned.kept,
                                      tune_key=planned.tune_key, again=lambda: launcher(*args, **kwargs),
                                      first=first, arrays=planned.arrays, finishes=planned.finishes)
            if not launched and planned.finishes:  # tuned: the partials are merged on the config chosen
                return launcher(*args, **kwargs)
        outputs = planned.outputs
        return outputs[0] if len(outputs) == 1 else outputs

    def fake(self, *args: Any, **kwargs: Any) -> Any:
        """The outputs of the launcher's call, allocated and not computed, after the same checks
        (:attr:`plan`): its custom op's fake implementation, with which torch.compile propagates
        shapes and dtypes."""
        assert self.plan is not None, f"{self.name}: fake without the module's plan"
        outputs = self.plan(*args, **kwargs).outputs
        return outputs[0] if len(outputs) == 1 else outputs

    def traced_call(self, *args: Any, **kwargs: Any) -> Any:
        """The launcher's call as torch.compile traces it on the GPU (the body of its
        ``torch.library.triton_op``): the plan's new outputs, then its kernel launched through
        ``wrap_triton`` (:meth:`traced`), so that Inductor sees the Triton kernel."""
        assert self.plan is not None, f"{self.name}: traced without the module's plan"
        planned = self.plan(*args, **kwargs)
        if not planned.empty:
            planned.launch.traced(planned.grid, planned.args, planned.meta)
        outputs = planned.outputs
        return outputs[0] if len(outputs) == 1 else outputs


def bad_input(launcher: str, name: str, tensor: object, dtype: torch.dtype | tuple[torch.dtype, ...], rank: int,
              like: str | None = None) -> NoReturn:
    """Raise the TypeError/ValueError saying how ``tensor`` fails to be a ``dtype`` tensor of
    ``rank`` for the launcher named ``launcher`` (``dtype``: a torch dtype, or a tuple of the
    dtypes it may have; ``like``: the input whose dtype it must match, if any)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{launcher}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    if isinstance(dtype, tuple) and tensor.dtype not in dtype:
        raise TypeError(f"{launcher}: {name} must have dtype {' or '.join(map(str, dtype))}, got {tensor.dtype}")
    if not isinstance(dtype, tuple) and tensor.dtype != dtype:
        like = "" if like is None else f" like {like}"
        raise TypeError(f"{launcher}: {name} must have dtype {dtype}{like}, got {tensor.dtype}")
    raise ValueError(f"{launcher}: {name} must have rank {rank}, got shape {tuple(tensor.shape)}")


def bad_device(launcher: str, **tensors: torch.Tensor) -> NoReturn:
    """Raise the ValueError for ``tensors`` (name -> tensor) on several devices, or on the CPU
    outside the interpreter."""
    devices = {tensor.device for tensor in tensors.values()}
    if len(devices) != 1:
        where = ", ".join(f"{name} on {tensor.device}" for name, tensor in tensors.items())
        raise ValueError(f"{launcher}: inputs must be on one device, got {where}")
    raise ValueError(f"{launcher}: inputs are on the CPU; move them to the GPU or set TRITON_INTERPRET=1")


def no_backward(launcher: str) -> NoReturn:
    """Raise the RuntimeError for a call of ``launcher`` that autograd would record (grad mode on
    and an input that requires grad) where its spec names no backward and none could be derived:
    its outputs would be cut from the graph (no ``grad_fn``) if it ran."""
    raise RuntimeError(
        f"{launcher}: an input requires grad, but the spec has no backward and none could be derived "
        f"(`tilegen show --grad` on the spec says why), so the output would have no grad_fn; write "
        f"'{launcher}_backward.tile' and 'backward {launcher}_backward' in the spec, or call it on detached "
        "inputs or under torch.no_grad()"
    )


def bad_block(launcher: str, name: str, value: object) -> NoReturn:
    """Raise the ValueError for a block size ``name`` = ``value`` that is not a positive power of two."""
    raise ValueError(f"{launcher}: block size {name} must be a power of two, got {value!r}")


def chosen_dtype(launcher: str, name: str, value: object, options: tuple[torch.dtype, ...]) -> torch.dtype:
    """The dtype the caller chose for dtype variable ``name`` (``dtype G in T, f32``, a keyword of
    ``launcher``): ``options[0]`` where ``value`` is None, else ``value`` where it is one of
    ``options`` (the variable's options, one named after another variable being that one's dtype
    in this call). Raises ValueError naming ``name`` and the options otherwise."""
    if value is None:
        return options[0]
    if value not in options:
        allowed = " or ".join(dict.fromkeys(str(o) for o in options))
        raise ValueError(f"{launcher}: {name} must be {allowed} here, got {value!r}")
    return value


def check_scalar(launcher: str, name: str, value: object,
                 kind: type[int] | type[float]) -> int | float | torch.SymInt | torch.SymFloat:
    """Return ``value`` as ``kind`` (float or int); raise TypeError naming ``name`` otherwise.
    Under torch.compile a number may be symbolic (torch.SymInt, torch.SymFloat): kept as it is."""
    allowed = (int, float, torch.SymInt, torch.SymFloat) if kind is float else (int, torch.SymInt)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise TypeError(f"{launcher}: {name} must be a Python {kind.__name__}, got {type(value).__name__}")
    return value if isinstance(value, (torch.SymInt, torch.SymFloat)) else kind(value)


def concrete(value: _T) -> _T:
    """``value``, an int where torch.compile passes a launcher's keyword as a symbolic one
    (torch.SymInt): the kernel takes it as a constexpr."""
    return int(value) if isinstance(value, torch.SymInt) else value  # type: ignore[return-value]


#: The elements of Triton's largest tile.
LARGEST_TILE = 1 << 20

#: One input of a launcher as :class:`Inputs` checks it: ``(name, float)`` or ``(name, int)`` for a
#: scalar; for a tensor ``(name, dtype, dims)``: ``dtype`` a tuple of the dtypes it may have (its
#: dtype then binds the dtype variable), the name of the input whose dtype it must have, or a torch
#: dtype; ``dims`` its dimensions, size names and numbers apart by spaces (``"M N"``, ``"B 3"``; ``""``: 0-dim).
InputSpec: TypeAlias = ("tuple[str, type[int] | type[float]] | "
                         "tuple[str, tuple[torch.dtype, ...] | str | torch.dtype, str]")


class Inputs:
    """The checks a launcher makes of its inputs, from what its spec declares of them
    (:data:`InputSpec`, in the order the checks run: the inputs the caller must give first):
    each tensor's type, dtype and rank, each scalar's type, one device for all (a GPU's, or any
    under the interpreter); then each tensor's dimensions, binding the spec's size names from the
    first input that has them and checking the others against them; then that the extent of each
    ``whole`` axis, ``(axis, size, limit)``, fits one tile (``limit``: Triton's largest tile over
    the other axes' largest blocks). Calling it with the
    launcher's name and the inputs (in that order) returns ``(device, *dtypes, *scalars,
    *sizes)``: the dtype of each input that binds a dtype variable, each scalar as its type,
    each size as first bound; or raises the TypeError or ValueError naming the input and dimension
    (:func:`bad_input`, :func:`bad_device`, :func:`check_scalar`)."""

    def __init__(self, *inputs: InputSpec, whole: tuple[tuple[str, str, int], ...] = ()) -> None:
        self.inputs = inputs
        self.whole = whole
        #: per input: (name, dtype or scalar type, rank, dims as size names and numbers; None for a scalar)
        self.checks: list[tuple[str, Any, int, tuple[str | int, ...] | None]] = []
        for spec in inputs:
            if len(spec) == 2:
                self.checks.append((spec[0], spec[1], 0, None))
                continue
            dims = tuple(int(d) if d.isdigit() else d for d in spec[2].split())
            self.checks.append((spec[0], spec[1], len(dims), dims))
        #: the tensors' positions among the inputs
        self.tensors = [i for i, check in enumerate(self.checks) if check[3] is not None]

    def __call__(self, launcher: str, *values: Any) -> tuple[Any, ...]:
        scalars: list[Any] = []
        dtypes: dict[str, torch.dtype] = {}  # input name -> its dtype, for the inputs that bind one
        for (name, dtype, rank, dims), value in zip(self.checks, values, strict=True):
            if dims is None:
                scalars.append(check_scalar(launcher, name, value, dtype))
            elif type(dtype) is tuple:
                if not isinstance(value, torch.Tensor) or value.dtype not in dtype or value.dim() != rank:
                    bad_input(launcher, name, value, dtype, rank)
                dtypes[name] = value.dtype
            elif type(dtype) is str:
                if not isinstance(value, torch.Tensor) or value.dtype != dtypes[dtype] or value.dim() != rank:
                    bad_input(launcher, name, value, dtypes[dtype], rank, dtype)
            elif not isinstance(value, torch.Tensor) or value.dtype != dtype or value.dim() != rank:
                bad_input(launcher, name, value, dtype, rank)
        first, *others = [values[i] for i in self.tensors]
        device = first.device
        if any(other.device != device for other in others) or (not first.is_cuda and not INTERPRET):
            bad_device(launcher, **{self.checks[i][0]: values[i] for i in self.tensors})
        sizes: dict[str, Any] = {}
        where: dict[str, str] = {}
        for i in self.tensors:
            name, _, _, dims = self.checks[i]
            for index, (dim, size) in enumerate(zip(dims, values[i].shape, strict=True)):  # type: ignore[arg-type]
                if isinstance(dim, int):
                    if size != dim:
                        raise ValueError(f"{launcher}: {name} dimension {index} must be {dim}, got {size}")
                elif dim not in sizes:
                    sizes[dim], where[dim] = size, f"{name} dimension {index}"
                elif size != sizes[dim]:
                    raise ValueError(f"{launcher}: {name} dimension {index} ({dim}) is {size}, "
                                     f"but {where[dim]} gives {dim} = {sizes[dim]}")
        for axis, dim, limit in self.whole:
            if sizes[dim] > limit:
                raise ValueError(f"{launcher}: '{axis} over {dim} whole' makes one tile of all of {dim}, so {dim} "
                                 f"({where[dim]}) must be <= {limit} (Triton's largest tile holds {LARGEST_TILE} "
                                 f"elements), got {sizes[dim]}")
        return (device, *dtypes.values(), *scalars, *sizes.values())


#: The most bins a count's histogram per program holds (:func:`histogram_bins`).
HISTOGRAM_BINS = 1024


def histogram_bins(extent: int) -> int:
    """The bins of a count's histogram per program (``counts[x[i]] += 1`` into ``extent``
    elements): the power of two, at least 32 (a warp's lanes, ``tl.histogram``'s least), above
    ``extent`` (the last bin past it takes the lanes outside it), where that is at most
    :data:`HISTOGRAM_BINS`; 0 for more, where one atomic add per lane, over many addresses, costs
    less than a histogram that large in every program."""
    bins = max(32, 1 << int(extent).bit_length())
    return bins if bins <= HISTOGRAM_BINS else 0


def wide_offsets(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> bool:
    """Whether a kernel's offsets need 64 bits (its ``INT64_OFFSETS``): an input spans 2**31
    elements or more (its shape and strides), or an output (new, contiguous) holds more."""
    for tensor in inputs:
        if sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True)) >= 2**31:
            return True
    return any(tensor.numel() > 2**31 for tensor in outputs)


#: The most programs a launch may have along program ids 1 and 2 (CUDA's grid y and z; id 0, x,
#: takes 2**31 - 1). A launcher whose grid has more there sets its kernel's ``FOLDED_GRID`` and
#: launches every program along id 0 (:func:`fold_grid`). Triton's interpreter has no such
#: limit: a test lowers this one to run folded launches there.
MAX_GRID_YZ = 65535


def fold_grid(grid: Grid, folded: bool) -> Grid:
    """The launch grid ``grid``, or where ``folded`` (the kernel's ``FOLDED_GRID``) all of its
    programs along program id 0: ``(x * y * z, 1, 1)``."""
    return (grid[0] * grid[1] * grid[2], 1, 1) if folded else grid


@functools.cache
def num_sms(device: torch.device) -> int:
    """The SMs of ``device`` (4 in the interpreter): the programs a persistent kernel launches, the
    programs a split loop fills, the programs of one wave. A call planned for a GPU on a machine
    without CUDA (fake tensors of a GPU device: a plan checked, never launched) also gets 4."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def row_programs(device: torch.device, row_tile: int) -> int:
    """The programs of a persistent row grid (``grid persistent r over M by BM, c over N whole``)
    whose row tile holds ``row_tile`` elements (the whole axes' blocks, powers of two): one per SM
    (:func:`num_sms`) from 2048 elements up, 2048 // ``row_tile`` per SM below that, at most 4.
    A program over narrow rows holds few registers and waits on each row's loads in turn, so
    several on one SM hide each other's latency, as Triton's tutorial 02 sizes its grid by the
    SM's occupancy; from 2048 elements on, one program per SM keeps the fewest partials and was
    the fastest for the norm backwards (1, 2, 4 and 8 per SM timed, every config at each)."""
    return num_sms(device) * max(1, min(4, 2048 // row_tile))


@functools.cache
def has_tma(device: torch.device) -> bool:
    """Whether kernels on ``device`` can use TMA tensor descriptors: a Triton that has them, and
    a GPU of compute capability 9.0 (Hopper) or newer; Triton's interpreter emulates them."""
    if TensorDescriptor is None:
        return False
    return device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 9


def pieces(block: int) -> tuple[int, int]:
    """(rows of the first piece, rows of the second) of a block of rows that a kernel holds as
    two power-of-two pieces where it is a sum of two (192 -> (128, 64), 320 -> (256, 64)); a power
    of two is one piece: (block, block), the second unused."""
    second = block & -block
    return (block, block) if second == block else (block - second, second)


#: The most bytes of an output tile that one TMA store stages in shared memory: a larger tile
#: (a float32 128 x 256, 128 KiB, beside the loop's 144 KiB of operand stages) is stored in two
#: halves of its columns, each staged alone (:func:`epilogue_subtile`: halved once), as Triton's
#: persistent-matmul tutorial (09) stores its ``EPILOGUE_SUBTILE`` halves.
SUBTILE_BYTES = 65536


def epilogue_subtile(descriptor: "TensorDescriptor | None") -> None:
    """Halve the last block dimension of the output ``descriptor`` (a TensorDescriptor, or None
    where the launch has none) where its block holds more than :data:`SUBTILE_BYTES`: the kernel,
    seeing a block narrower than its tile, stores the tile in two halves of its columns. Called
    by a module's ``_descriptor_blocks`` after it set the config's block shapes; without it a
    float32 output of the largest tiles runs out of shared memory (the configs fail to compile)."""
    if descriptor is None:
        return
    block, size = list(descriptor.block_shape), descriptor.base.element_size()
    # halves of an even width whose rows stay 16 bytes or more (TMA's least box row)
    if math.prod(block) * size > SUBTILE_BYTES and block[-1] % 2 == 0 and block[-1] // 2 * size >= 16:
        descriptor.block_shape = [*block[:-1], block[-1] // 2]


def tail_split(size_m: int, size_n: int, block_m: int, block_n: int, sms: int) -> tuple[int, int, int]:
    """(programs, TAIL_M, TAIL_N) of ``split tail`` for sizes ``size_m``, ``size_n`` (the two grid
    axes), blocks ``block_m``, ``block_n`` and ``sms`` SMs: the output tiles beyond the last whole
    wave (tiles % sms, where there are more tiles than SMs) each run as TAIL_M x TAIL_N sub-tiles,
    a program each, so that the last wave fills the GPU instead of leaving it partly idle (wave
    quantization). 2 x 2 quarters where they fit one round of programs (4 sub-tiles per tail tile
    <= sms), else 2 halves of the longer side where they do, else whole tiles; no sub-tile block
    below 16; whole tiles where ``block_m`` is not a power of two (a tile in two row pieces, see
    :func:`pieces`). c43ff28:benchmarks/explore/explore_tail_rule_h100.log measured this rule against a
    fixed 2 x 2 split on the H100."""
    tiles = ((size_m + block_m - 1) // block_m) * ((size_n + block_n - 1) // block_n)
    if block_m & (block_m - 1):  # a tile in two row pieces (see pieces): whole tiles
        return tiles, 1, 1
    tail = tiles % sms if tiles > sms else 0
    if tail and 4 * tail <= sms and min(block_m, block_n) >= 32:
        return tiles + 3 * tail, 2, 2
    if tail and 2 * tail <= sms and max(block_m, block_n) >= 32:
        return (tiles + tail, 2, 1) if block_m >= block_n else (tiles + tail, 1, 2)
    return tiles, 1, 1


# Triton reads a kernel's parameter annotations as the kernel's types: its kernels' parameters have no Python types
@triton.jit
def _dot_operand(x):  # type: ignore[no-untyped-def]
    """``x`` as a tl.dot operand: itself on the GPU; upcast to f32 under the interpreter."""
    if _INTERPRETER_BF16_DOT:
        x = x.to(tl.float32)
    return x


#: The public name of :func:`_dot_operand`. Its ``def`` keeps the name that generated kernels call it by
#: (``_dot_operand``, bound in their module): torch.compile's Inductor copies a called ``@triton.jit``
#: function's source, under its ``def`` name, into the code it compiles.
dot_operand = _dot_operand


# ---------------------------------------------------------------------------------------------
# The @triton.jit helpers kernels call (tilegen.functions.HELPERS names them): activations, the
# combine functions of reductions, torch's amax/amin/argmax/argmin and pow. A module binds those its
# kernels call to the same names (``amax = _rt.amax``): Triton calls a @triton.jit global of the
# kernel's module, compiled or interpreted, and Inductor copies a called function's source under its
# ``def`` name. Triton reads their parameters' annotations as types: they have no Python ones.

#: True under Triton's interpreter: a constexpr, so a helper's branch on it compiles away on the GPU.
_INTERPRETED = tl.constexpr(INTERPRET)


@triton.jit
def multiply(x, y):  # type: ignore[no-untyped-def]
    """The combine function of prod's tl.reduce: the product of two partials."""
    return x * y


@triton.jit
def maximum_nan(x, y):  # type: ignore[no-untyped-def]
    """The combine function of amax: NaN wins."""
    return tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def minimum_nan(x, y):  # type: ignore[no-untyped-def]
    """The combine function of amin: NaN wins."""
    return tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL)


@triton.jit  # type: ignore[untyped-decorator]
def amax(x, axis: tl.constexpr):  # type: ignore[no-untyped-def]
    """torch.amax along axis: NaN where the row holds one (tl.max drops it), in x's dtype."""
    if _INTERPRETED:  # one call of maximum_nan per element there: numpy's reductions instead
        wide = x
        if x.dtype == tl.bfloat16:  # compared in float32 (exact): the interpreter keeps bf16 as bits
            wide = x.to(tl.float32)
        found = tl.max(wide, axis)
        if x.dtype.is_floating():
            found = tl.where(tl.max((wide != wide).to(tl.int8), axis) > 0, float("nan"), found)
        return found.to(x.dtype)
    return tl.reduce(x, axis, maximum_nan)


@triton.jit  # type: ignore[untyped-decorator]
def amin(x, axis: tl.constexpr):  # type: ignore[no-untyped-def]
    """torch.amin along axis: NaN where the row holds one (tl.min drops it), in x's dtype."""
    if _INTERPRETED:  # one call of minimum_nan per element there: numpy's reductions instead
        wide = x
        if x.dtype == tl.bfloat16:  # compared in float32 (exact): the interpreter keeps bf16 as bits
            wide = x.to(tl.float32)
        found = tl.min(wide, axis)
        if x.dtype.is_floating():
            found = tl.where(tl.max((wide != wide).to(tl.int8), axis) > 0, float("nan"), found)
        return found.to(x.dtype)
    return tl.reduce(x, axis, minimum_nan)


@triton.jit  # type: ignore[untyped-decorator]
def first_argmax(x, axis: tl.constexpr):  # type: ignore[no-untyped-def]
    """torch.argmax along axis: the first index of the largest value, or of the first NaN (torch's NaN is largest)."""
    if x.dtype == tl.bfloat16:  # exact; Triton's interpreter orders bf16 wrongly in tl.argmax
        x = x.to(tl.float32)
    nan = (x != x).to(tl.int32)
    found = tl.argmax(tl.where(nan > 0, 0, x), axis, tie_break_left=True)  # NaN lanes: the next line's
    return tl.where(tl.max(nan, axis) > 0, tl.argmax(nan, axis, tie_break_left=True), found).to(tl.int64)


@triton.jit  # type: ignore[untyped-decorator]
def first_argmin(x, axis: tl.constexpr):  # type: ignore[no-untyped-def]
    """torch.argmin along axis: the first index of the smallest value, or of the first NaN (torch's NaN wins)."""
    if x.dtype == tl.bfloat16:  # exact; Triton's interpreter orders bf16 wrongly in tl.argmin
        x = x.to(tl.float32)
    nan = (x != x).to(tl.int32)
    found = tl.argmin(tl.where(nan > 0, 0, x), axis, tie_break_left=True)  # NaN lanes: the next line's
    return tl.where(tl.max(nan, axis) > 0, tl.argmax(nan, axis, tie_break_left=True), found).to(tl.int64)


@triton.jit
def relu(x):  # type: ignore[no-untyped-def]
    """torch.relu: NaN stays NaN."""
    return tl.where(x < 0, 0, x)


@triton.jit
def leaky_relu(x, slope):  # type: ignore[no-untyped-def]
    return tl.where(x >= 0, x, slope * x)


@triton.jit
def gelu(x):  # type: ignore[no-untyped-def]
    """GELU, erf form: x * Phi(x) (Hendrycks and Gimpel, 2016)."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def gelu_tanh(x):  # type: ignore[no-untyped-def]
    """GELU, tanh approximation; tanh(u) is written 2 * sigmoid(2u) - 1."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))


if INTERPRET:  # Triton's interpreter runs no libdevice (extern) function

    @triton.jit
    def tanh(x):  # type: ignore[no-untyped-def]
        """tanh(x) in float32 to about one ulp: below |x| = 0.625, x + x^3 * P(x^2) (the polynomial
        of Cephes' tanhf, Moshier), else 1 - 2 / (exp(2|x|) + 1) with x's sign (2 * sigmoid(2x) - 1
        would cancel near 0: 2e-6 relative at 0.05). float64: 2 * sigmoid(2x) - 1."""
        if x.dtype != tl.float64:
            x = x.to(tl.float32)
            a = tl.abs(x)
            z = x * x
            p = (((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
            small = (p - 3.33332819422e-1) * z * x + x
            big = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)
            y = tl.where(a < 0.625, small, tl.where(x < 0, -big, big))
        else:
            y = 2.0 * tl.sigmoid(2.0 * x) - 1.0
        return y

else:
    from triton.language.extra import libdevice

    @triton.jit
    def tanh(x):  # type: ignore[no-untyped-def]
        """tanh(x): libdevice's (CUDA's tanhf, tanh for float64), to about two ulps."""
        if x.dtype != tl.float64:
            x = x.to(tl.float32)
        return libdevice.tanh(x)


@triton.jit
def sigmoid(x):  # type: ignore[no-untyped-def]
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return tl.sigmoid(x)


@triton.jit
def silu(x):  # type: ignore[no-untyped-def]
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return x * tl.sigmoid(x)


@triton.jit
def elu(x, alpha):  # type: ignore[no-untyped-def]
    """torch.nn.functional.elu (NaN stays NaN: it fails x <= 0)."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return tl.where(x <= 0, alpha * (tl.exp(tl.minimum(x, 0.0)) - 1.0), x)


@triton.jit
def selu(x):  # type: ignore[no-untyped-def]
    """torch.nn.functional.selu (Klambauer et al., 2017): its scale and alpha."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return 1.0507009873554805 * tl.where(x <= 0, 1.6732632423543772 * (tl.exp(tl.minimum(x, 0.0)) - 1.0), x)


@triton.jit
def softplus(x, beta, threshold):  # type: ignore[no-untyped-def]
    """torch.nn.functional.softplus: linear above the threshold (NaN stays NaN: it fails the test)."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return tl.where(x * beta <= threshold, tl.log(1.0 + tl.exp(tl.minimum(x * beta, threshold))) / beta, x)


@triton.jit
def softsign(x):  # type: ignore[no-untyped-def]
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return x / (1.0 + tl.abs(x))


@triton.jit
def hardsigmoid(x):  # type: ignore[no-untyped-def]
    """torch.nn.functional.hardsigmoid: NaN stays NaN."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return tl.minimum(tl.maximum(x / 6.0 + 0.5, 0.0, propagate_nan=tl.PropagateNan.ALL), 1.0,
                      propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def hardswish(x):  # type: ignore[no-untyped-def]
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0


@triton.jit
def power(x, p):  # type: ignore[no-untyped-def]
    """torch.pow (C's pow) for any exponent, x float32 or f64: |x| ** p, negated for a negative x and an odd
    integral p, NaN for a finite negative x and a non-integral p; 1 where p == 0, x == 1, or x == -1 and p is
    infinite."""
    p = tl.zeros_like(x) + p
    x = x + tl.zeros_like(p)
    magnitude = tl.exp2(p * tl.log2(tl.abs(x)))
    integral = tl.floor(p) == p
    odd = integral & (tl.floor(0.5 * p) != 0.5 * p)
    signs = integral | (x == float("-inf"))
    signed = tl.where(x < 0, tl.where(signs, tl.where(odd, -magnitude, magnitude), float("nan")), magnitude)
    return tl.where((p == 0) | (x == 1) | ((x == -1) & (tl.abs(p) == float("inf"))), 1.0, signed)


@triton.jit
def mish(x):  # type: ignore[no-untyped-def]
    """x * tanh(softplus(x)) (Misra, 2019)."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    sp = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    return x * tanh(sp)


@triton.jit  # type: ignore[untyped-decorator]
def torch_rounding(x, mode: tl.constexpr):  # type: ignore[no-untyped-def]
    """torch.floor, torch.ceil, torch.trunc or torch.round (``mode`` "floor", "ceil", "trunc",
    "round") in x's dtype; an integer is its own. f16/bf16 go through float32 (exactly). trunc goes
    toward 0 (-0.5 gives -0.0); round to the nearest integer, a tie to the even one, with x's sign:
    from tl.floor alone, exact at every magnitude (the fraction |x| - floor(|x|) is exact, and an
    odd floor is one that halving does not keep). NaN and inf stay."""
    if not x.dtype.is_floating():
        return x
    w = x
    if x.dtype != tl.float64:
        w = x.to(tl.float32)
    if mode == "floor":
        w = tl.floor(w)
    elif mode == "ceil":
        w = tl.ceil(w)
    elif mode == "trunc":
        w = tl.where(w < 0, tl.ceil(w), tl.floor(w))
    else:
        t = tl.abs(w)
        f = tl.floor(t)
        d = t - f
        odd = (f - 2.0 * tl.floor(0.5 * f)) == 1.0
        r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
        w = tl.where(r == 0, w * 0.0, tl.where(w < 0, -r, r))
    return w.to(x.dtype)


@triton.jit
def torch_sign(x):  # type: ignore[no-untyped-def]
    """torch.sign in x's dtype: 1, -1 or 0 (0 for 0, -0.0 and NaN, as torch's)."""
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


if INTERPRET:  # numpy's float % is C's fmod, exact

    @triton.jit
    def _float_fmod(a, b):  # type: ignore[no-untyped-def]
        """C's fmod of float32 or float64 tiles, exact."""
        return a % b

else:  # Triton's float % on the GPU is a - trunc(a / b) * b, wrong once the quotient is large

    @triton.jit
    def _float_fmod(a, b):  # type: ignore[no-untyped-def]
        """C's fmod of float32 or float64 tiles, exact: libdevice's (CUDA's fmodf, fmod)."""
        return libdevice.fmod(a, b)


@triton.jit
def torch_fmod(x, y):  # type: ignore[no-untyped-def]
    """torch.fmod (C's fmod): x - trunc(x / y) * y, exactly, with the sign of x; floats through
    float32 (f64 in f64), integers as C's %."""
    x, y = tl.where(True, x, y), tl.where(True, y, x)  # tiles of one shape (either may be a number)
    if x.dtype.is_floating():
        if x.dtype != tl.float64:  # f16/bf16 through float32, exactly
            out = _float_fmod(x.to(tl.float32), y.to(tl.float32)).to(x.dtype)
        else:
            out = _float_fmod(x, y)
    else:
        out = x % y
    return out


@triton.jit
def torch_remainder(x, y):  # type: ignore[no-untyped-def]
    """torch.remainder (Python's %): x - floor(x / y) * y, with the sign of y; as torch computes it,
    C's fmod moved by y where it is not 0 and its sign is not y's."""
    x, y = tl.where(True, x, y), tl.where(True, y, x)  # tiles of one shape (either may be a number)
    if x.dtype.is_floating():
        if x.dtype != tl.float64:  # f16/bf16 through float32
            b = y.to(tl.float32)
            mod = _float_fmod(x.to(tl.float32), b)
        else:
            b = y
            mod = _float_fmod(x, y)
        out = tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod).to(x.dtype)
    else:
        mod = x % y
        out = tl.where((mod != 0) & ((y < 0) != (mod < 0)), mod + y, mod)
    return out


@triton.jit
def floor_divide(x, y):  # type: ignore[no-untyped-def]
    """Python's (and torch.floor_divide's) // of integers: the quotient rounded down; C's quotient,
    which Triton computes (rounded toward 0), less 1 where the remainder is not 0 and its sign is
    not y's."""
    x, y = tl.where(True, x, y), tl.where(True, y, x)  # tiles of one shape (either may be a number)
    mod = x % y
    return tl.where((mod != 0) & ((y < 0) != (mod < 0)), x // y - 1, x // y)


@triton.jit  # type: ignore[untyped-decorator]
def _philox_values(r0, r1, r2, r3, NORMAL: tl.constexpr):  # type: ignore[no-untyped-def]
    """Four Philox words as four uniform float32 numbers in [0, 1) (Triton's uint_to_uniform_float),
    or, NORMAL, as four normal ones: Box-Muller of the pairs (0, 1) and (2, 3), cos then sin."""
    u0 = tl.uint_to_uniform_float(r0)
    u1 = tl.uint_to_uniform_float(r1)
    u2 = tl.uint_to_uniform_float(r2)
    u3 = tl.uint_to_uniform_float(r3)
    if NORMAL:
        u0, u1 = tl.pair_uniform_to_normal(u0, u1)
        u2, u3 = tl.pair_uniform_to_normal(u2, u3)
    return u0, u1, u2, u3


@triton.jit  # type: ignore[untyped-decorator]
def _philox_each(seed, offset, NORMAL: tl.constexpr):  # type: ignore[no-untyped-def]
    """tile_rand / tile_randn one Philox evaluation per element: value ``offset & 3`` of counter ``offset >> 2``."""
    r0, r1, r2, r3 = tl.randint4x(seed, offset >> 2)
    v0, v1, v2, v3 = _philox_values(r0, r1, r2, r3, NORMAL)
    lane = offset & 3
    return tl.where(lane == 0, v0, tl.where(lane == 1, v1, tl.where(lane == 2, v2, v3)))


@triton.jit  # type: ignore[untyped-decorator]
def _philox_draw(seed, offset, NORMAL: tl.constexpr):  # type: ignore[no-untyped-def]
    """The numbers of tile_rand (NORMAL: tile_randn) at each element of the integer tile ``offset``.
    Where each run of four elements (in the tile's order) holds four consecutive offsets from a
    multiple of 4, as a row of a tile over a contiguous axis does, one Philox evaluation serves the
    four (the four words of Triton's randint4x); elsewhere each element evaluates its own."""
    if offset.numel % 4 == 0:
        groups = tl.reshape(offset, (offset.numel // 4, 2, 2))
        even, odd = tl.split(groups)
        o0, o2 = tl.split(even)
        o1, o3 = tl.split(odd)
        runs = ((o0 & 3) == 0) & (o1 == o0 + 1) & (o2 == o0 + 2) & (o3 == o0 + 3)
        if tl.min(runs.to(tl.int32)) == 1:
            r0, r1, r2, r3 = tl.randint4x(seed, o0 >> 2)
            v0, v1, v2, v3 = _philox_values(r0, r1, r2, r3, NORMAL)
            values = tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), offset.shape)
        else:
            values = _philox_each(seed, offset, NORMAL)
    else:
        values = _philox_each(seed, offset, NORMAL)
    return values


@triton.jit
def tile_rand(seed, offset):  # type: ignore[no-untyped-def]
    """rand(seed, offset): a uniform float32 in [0, 1) per element of the integer tile ``offset``
    (0 to 2**63 - 1): value ``offset & 3`` of Philox-4x32-10 (Salmon et al., SC 2011; Triton's
    ``tl.randint4x``) at counter ``offset >> 2`` and key ``seed``, so four consecutive offsets share
    one evaluation. The same number at every block size; :func:`philox_rand` computes it in torch."""
    return _philox_draw(seed, offset, False)


@triton.jit
def tile_randn(seed, offset):  # type: ignore[no-untyped-def]
    """randn(seed, offset): a standard normal float32 per element of ``offset``: Box-Muller of the
    uniforms of tile_rand's Philox evaluation, pairs (0, 1) and (2, 3), lane ``offset & 3``."""
    return _philox_draw(seed, offset, True)


# ---------------------------------------------------------------------------------------------
# rand and randn in torch: Triton's Philox (triton.language.random), for the torch reference.

_MASK32 = 0xFFFFFFFF


def _umul32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32 bits of ``a * b`` for a 32-bit constant ``a`` and a tensor ``b`` of 32-bit
    values held in int64 (the product would overflow int64: ``b`` is split in 16-bit halves)."""
    low = a * (b & 0xFFFF)
    middle = a * (b >> 16) + (low >> 16)
    return middle >> 16, ((middle & 0xFFFF) << 16) | (low & 0xFFFF)


def _philox(seed: int, counter: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four 32-bit words of Philox-4x32-10 at counter (counter, 0, 0, 0) (its low and high
    words first) and key ``seed`` (its low and high words), as int64 tensors: Triton's ``randint4x``."""
    counter = counter.to(torch.int64)
    c0, c1 = counter & _MASK32, (counter >> 32) & _MASK32
    c2 = c3 = torch.zeros_like(c0)
    k0, k1 = int(seed) & _MASK32, (int(seed) >> 32) & _MASK32
    for _ in range(10):
        hi_b, lo_b = _umul32(0xCD9E8D57, c2)
        hi_a, lo_a = _umul32(0xD2511F53, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + 0x9E3779B9) & _MASK32, (k1 + 0xBB67AE85) & _MASK32
    return c0, c1, c2, c3


def _uniform(word: torch.Tensor) -> torch.Tensor:
    """A 32-bit word (int64 holding 0 to 2**32 - 1) as Triton's uniform float32 in [0, 1):
    read as int32, negatives complemented, times 4.6566127342e-10 in float32."""
    signed = torch.where(word >= 2**31, word - 2**32, word)
    signed = torch.where(signed < 0, -signed - 1, signed)
    return signed.to(torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32, device=word.device)


def _lane(values: tuple[torch.Tensor, ...], offset: torch.Tensor) -> torch.Tensor:
    """``values[offset & 3]`` element by element."""
    lane = offset & 3
    low, high = torch.where(lane == 0, values[0], values[1]), torch.where(lane == 2, values[2], values[3])
    return torch.where(lane < 2, low, high)


def philox_rand(seed: int | torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``rand(seed, offset)`` (the kernels' ``tile_rand``) computed by torch, bit for bit: a uniform
    float32 in [0, 1) per element of the integer tensor ``offset`` (0 to 2**63 - 1), word
    ``offset & 3`` of Philox-4x32-10 at counter ``offset >> 2``."""
    offset = torch.as_tensor(offset).to(torch.int64)
    return _lane(tuple(_uniform(word) for word in _philox(int(seed), offset >> 2)), offset)


def philox_randn(seed: int | torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``randn(seed, offset)`` (``tile_randn``) computed by torch: Box-Muller of the uniforms of
    Philox's words (0, 1) (cos, sin) and (2, 3), lane ``offset & 3``, in float32 (its log, sqrt, cos
    and sin are torch's, a few units in the last place from the GPU's)."""
    offset = torch.as_tensor(offset).to(torch.int64)
    u = [_uniform(word) for word in _philox(int(seed), offset >> 2)]
    two_pi = torch.tensor(6.283185307179586, dtype=torch.float32, device=offset.device)
    normals = []
    for first, second in ((u[0], u[1]), (u[2], u[3])):
        radius = torch.sqrt(-2.0 * torch.log(torch.clamp(first, min=1.0e-7)))
        normals += [radius * torch.cos(two_pi * second), radius * torch.sin(two_pi * second)]
    return _lane(tuple(normals), offset)


# ---------------------------------------------------------------------------------------------
# A split loop (``for k over K by BK split``): the sum of its partial sums.

_COMPILED: dict[Hashable, DirectLaunch] = {}  # the runtime's own kernels (the sum of partial sums): key -> launch


@functools.cache
def no_partials(device: torch.device) -> torch.Tensor:
    """The workspace a loop run in one part is given: an empty f32 tensor, made once per device
    (the kernel never touches it)."""
    return torch.empty(0, device=device, dtype=torch.float32)


# (untyped parameters and decorator: see _dot_operand)
@triton.jit  # type: ignore[untyped-decorator]
def _sum_partials_kernel(partials_ptr, out_ptr, size, parts, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """out[i] = the sum over p < parts of partials[p * size + i], in f32, stored in out's dtype:
    the partial sums of a split loop added up (one program per BLOCK elements)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for p in range(parts):
        total += tl.load(partials_ptr + p * size + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, total.to(out_ptr.dtype.element_ty), mask=mask)


def sum_partials(partials: torch.Tensor, out: torch.Tensor, parts: int) -> None:
    """Add the ``parts`` f32 partial sums in ``partials`` (flat, [parts, *out.shape]) into ``out``
    (new, contiguous, any float dtype): one launch of _sum_partials_kernel."""
    size = out.numel()
    grid = ((size + 1023) // 1024, 1, 1)
    if INTERPRET:
        _sum_partials_kernel[grid](partials, out, size, parts, BLOCK=1024)
        return
    device_index = out.device.index
    key = (device_index, out.dtype, int_class(size), int_class(parts))
    launch = _COMPILED.get(key) or compile_launch(_COMPILED, key, _sum_partials_kernel, grid, partials, out, size,
                                                  parts, BLOCK=1024)
    launch(grid, device_index, partials, out, size, parts, 1024)


# ---------------------------------------------------------------------------------------------
# Rows too long for one tile (``c over N whole``): the limit and the autotuner's pruning.

#: The most elements of a tile each thread holds in a config worth compiling: 64 of its registers
#: per tile, so that a kernel's few live tiles fit (16 warps leave each thread 128 of the H100's);
#: a config past it spills to memory and compiles for minutes.
THREAD_ELEMENTS = 64


def sorted_runs(index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``deterministic`` kernel's walk (tilegen.lower.ordered): for the integer tensor ``index``
    [N], ``order`` (int64 [N], the token at each position of ``index`` sorted stably, so equal
    indices keep their tokens' order) and ``run_end`` (int64 [N]: at the first position of each
    run of equal sorted indices, the position past the run's end; at every other position, the
    position itself). Torch ops only, on ``index``'s device: no host synchronization."""
    keys, order = torch.sort(index, stable=True)
    positions = torch.arange(keys.numel(), device=keys.device)
    heads = torch.ones_like(keys, dtype=torch.bool)
    heads[1:] = keys[1:] != keys[:-1]  # where a run starts
    return order, torch.where(heads, torch.searchsorted(keys, keys, right=True), positions)


def whole_limit(limit: int, hard_limit: int) -> int:
    """The longest row a kernel holds in one tile: ``limit``, unless the environment variable
    TILEGEN_WHOLE_LIMIT sets it, never past ``hard_limit`` (Triton's largest tile). Longer rows
    run the looped kernel; TILEGEN_WHOLE_LIMIT=1 runs it for every row longer than one element."""
    return min(int(os.environ.get("TILEGEN_WHOLE_LIMIT") or limit), hard_limit)


def whole_fits(block: str, rows: Sequence[str]) -> Callable[..., list[TritonConfig]]:
    """The autotuner's ``early_config_prune`` for a kernel whose tile is ``block`` (a constexpr)
    wide and ``rows`` (block parameters) high: the configs in which each thread holds at most
    THREAD_ELEMENTS elements of it, or else the one in which it holds the fewest. The autotuner
    times only these, and :func:`autotune` compiles only these. (A Triton that does not pass the
    call's keywords to the prune keeps every config.)"""

    def fits(configs: list[TritonConfig], named_args: dict[str, Any], **kwargs: Any) -> list[TritonConfig]:
        if block not in kwargs:
            return configs

        def per_thread(config: TritonConfig) -> float:
            meta = {**named_args, **kwargs, **config.kwargs}
            tile: int = meta[block]
            for name in rows:
                tile *= meta[name]
            warps: int = config.num_warps
            return tile / (32 * warps)

        kept = [config for config in configs if per_thread(config) <= THREAD_ELEMENTS]
        return kept or [min(configs, key=per_thread)]

    return fits


# ---------------------------------------------------------------------------------------------
# Autotuning: the first call per device and sizes tunes; the choice is kept in the process and on disk.

#: Near ties of a tune: the configs the autotuner timed within NEAR_TIE (a fraction) of its
#: fastest, at most NEAR_TIE_CONFIGS of them, timed again in NEAR_TIE_ROUNDS interleaved rounds.
NEAR_TIE = 0.05
NEAR_TIE_CONFIGS = 4
NEAR_TIE_ROUNDS = 5


#: The effort levels of TILEGEN_TUNE (:func:`effort`), least first.
EFFORTS: tuple[Effort, ...] = ("none", "quick", "full")


def effort() -> Effort:
    """How hard a tuned launcher works for a config on its first call at new sizes: the
    environment variable TILEGEN_TUNE, read at each such call, ``"quick"`` where it is unset.
    ``"none"``: the spec's default config. ``"quick"``: the config tuned for these sizes on this
    GPU (the cache on disk), else the one tuned for the nearest sizes, else the default; no
    timing. ``"full"``: the cached config, else every config compiled and timed (:func:`autotune`,
    :meth:`Tuner.settle_ties`) and the fastest cached. Raises ValueError for another value."""
    value = (os.environ.get("TILEGEN_TUNE") or "quick").strip().lower()
    if value not in EFFORTS:
        raise ValueError(f"TILEGEN_TUNE={value!r}: use none, quick (the default) or full")
    return value


def parse_config(text: str) -> int | dict[str, int]:
    """A config as TILEGEN_CONFIG writes it: ``"2"`` -> 2 (an index in the spec's configs), or
    ``"BM=64,num_warps=8"`` -> ``{"BM": 64, "num_warps": 8}`` (keywords a config must have;
    integers). Raises ValueError for other text."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    config: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not value.lstrip("-").isdigit():
            raise ValueError(f"TILEGEN_CONFIG={text!r}: write a config index (2) or its keywords (BM=64,num_warps=8)")
        config[name] = int(value)
    return config


def forced_config() -> int | dict[str, int] | None:
    """The config TILEGEN_CONFIG forces on every tuned launcher (:func:`parse_config`), or None."""
    text = os.environ.get("TILEGEN_CONFIG", "").strip()
    return parse_config(text) if text else None


def _notify_interpreter() -> None:
    """Say once per process (whichever copy of this runtime asks first) that the interpreter runs
    each tuned launcher's interpreter config (its default, where the spec names none), and how to
    run another."""
    if getattr(torch.ops.tilegen, "_interpreter_told", False):
        return
    _keep_shared("_interpreter_told", True)
    warnings.warn(
        "the Triton interpreter cannot time autotune configs: each tuned launcher runs its spec's interpreter "
        "config, else its default config (TILEGEN_TUNE is not used); run another with config=N (or a dict of "
        "its keywords) on a call, or TILEGEN_CONFIG=N (or BM=64,num_warps=4) for every launcher",
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The ``stacklevel`` of a warning issued by this runtime's caller (:func:`_notify_interpreter`)
    that names the line calling the launcher: the first frame outside this runtime and the
    generated modules (those that bind it as ``_rt``)."""
    me = sys.modules[__name__]
    frame: types.FrameType | None = sys._getframe(2)  # the warning's issuer's caller
    level = 2
    while frame is not None and (frame.f_globals.get("__name__") == __name__ or frame.f_globals.get("_rt") is me):
        frame, level = frame.f_back, level + 1
    return level


def cache_dir() -> str:
    """tilegen's cache folder: $TILEGEN_CACHE_DIR, else ~/.cache/tilegen."""
    return os.environ.get("TILEGEN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilegen")


@functools.cache
def device_name(device: torch.device) -> str:
    """The name the on-disk cache knows ``device`` (a torch.device) by: the GPU's, or its type."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def device_arch(device: torch.device) -> str:
    """The architecture a table of configs tuned ahead of time names ``device`` (a torch.device) by:
    ``"sm_90"`` for a GPU of compute capability 9.0 (H100 and H200 alike), else its type."""
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


#: dtypes whose tuned configs stand in for each other's (the same bytes per element, so the same
#: tiles fit and the same pipelining pays), as a tune key writes them
_ALIKE_DTYPES = frozenset({"torch.float16", "torch.bfloat16"})

#: what a stand-in dtype adds to a key's distance: as much as one size twice as large, so that a
#: key's own dtype wins at sizes up to that much farther
ALIKE_DTYPE_DISTANCE = 1.0

#: what a flag of another value adds to a key's distance (a matmul's column-major operand, ``A_T``
#: or ``B_T``, against a row-major one): as much as one size twice as large. The spec's configs
#: all run in either layout, and the same tiles fill the GPU's waves in both, so a config tuned
#: for the other layout at these sizes beats the default by far (matmul_fast's shipped table holds
#: row-major weights; an ``nn.Linear`` weight's transpose is column-major, and its default's
#: 32 x 32 tiles are several times slower at a model's sizes)
FLAG_DISTANCE = 1.0
_FLAGS = frozenset({"True", "False"})


def _size_distance(wanted: Sequence[str], cached: Sequence[str]) -> float | None:
    """How far the sizes of a cached key (``cached``: its parts after the device, as text) lie
    from ``wanted`` (the same for the sizes asked): the sum over differing parts of
    ``|log2(a / b)|``, plus :data:`ALIKE_DTYPE_DISTANCE` for a dtype of the same size (f16 for
    bf16) and :data:`FLAG_DISTANCE` for a flag of the other value (a layout); None where they
    differ otherwise (another number of parts, another dtype or variant, a size of 0)."""
    if len(wanted) != len(cached):
        return None
    distance = 0.0
    for a, b in zip(wanted, cached, strict=True):
        if a == b:
            continue
        if a in _ALIKE_DTYPES and b in _ALIKE_DTYPES:
            distance += ALIKE_DTYPE_DISTANCE
            continue
        if a in _FLAGS and b in _FLAGS:
            distance += FLAG_DISTANCE
            continue
        if not (a.isdigit() and b.isdigit()) or int(a) == 0 or int(b) == 0:
            return None
        distance += abs(math.log2(int(a) / int(b)))
    return distance


class Tuner:
    """The tuned configs of one module's launchers, whose configs are ``configs`` (the module's
    ``_CONFIGS``, a list of ``triton.Config``; a fallback kernel's configs are among them): the
    index of the config to run for each tune key ``(device, *sizes)``, in this process
    (``tuned``) and on disk, in ``path`` (``<cache_dir()>/<name>-<spec_hash>.json``: a spec
    edited is tuned afresh). How a key gets its config: :meth:`tuned_index` (the effort levels of
    :func:`effort`, a forced config). Untuned (``TILEGEN_TUNE=none``, or ``quick`` with nothing
    cached or shipped for the sizes) a GPU runs config ``default``. Under the interpreter, which
    cannot time configs, every key runs config ``interpreted`` (``default`` unless the spec names
    an ``interpreter config``) unless one is forced. ``forced`` forces one on this module's
    launchers (an index, a dict of keywords, or a function of the launcher's name and the tune
    key giving one or None); where None, TILEGEN_CONFIG's (:func:`forced_config`).
    ``trial.pick`` (per thread) is the near tie :meth:`settle_ties` times; ``trial.force`` the
    config a call's ``config=`` runs (:meth:`forcing`). ``lock`` (reentrant) is held while the
    module's launchers tune: threads calling first with the same sizes at once tune once.
    ``fast`` is the module's fast-path table (:func:`keep_launch`), cleared whenever a config is
    remembered. ``shipped`` holds configs tuned ahead of time and shipped with the spec (its
    ``<kernel>.tuned.json``, written by ``tilegen tune --save``): ``"<arch>|<sizes>"``
    (:func:`device_arch`) -> a config's keywords as the spec writes them; ``quick`` falls back
    on them after this device's own cache (:meth:`nearest`)."""

    def __init__(self, name: str, spec_hash: str, configs: list[TritonConfig], default: int = 0,
                 fast: FastTable | None = None, shipped: dict[str, dict[str, int]] | None = None,
                 interpreted: int | None = None) -> None:
        self.configs = configs
        self.interpreted = default if interpreted is None else interpreted
        self.shipped: dict[str, dict[str, int]] = shipped or {}
        self.fast: FastTable = {} if fast is None else fast  # the module's fast-path launches: cleared on a new config
        self.default = default
        self.interpret = INTERPRET
        self.path = os.path.join(cache_dir(), f"{name}-{spec_hash}.json")
        # (device, *sizes) -> index in configs of the config to run (None: none of them), in this process
        self.tuned: dict[TuneKey, int | None] = {}
        self.trial = threading.local()  # .pick = (tune_key, index): settle_ties's; .force = index: a config= call's
        self.forced: Forced | None = None  # a config forced on every launcher of the module (see the class)
        self.forcings = 0  # calls running a config= config now: no launch is kept for the fast path meanwhile
        self.disk: dict[str, dict[str, object]] | None = None  # the on-disk cache as this process first read it
        self.lock = threading.RLock()

    def load(self) -> dict[str, dict[str, object]]:
        """Configs tuned by earlier processes (the file ``path``): "<device>|<sizes>" -> config keywords."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                cached: dict[str, dict[str, object]] = json.load(handle)
                return cached
        except (OSError, ValueError):
            return {}

    def before(self) -> dict[str, dict[str, object]]:
        """The on-disk cache as this process first needs it: read once, on the first sizes the
        process has not tuned (its own choices are in ``tuned``); ``disk = None`` reads it again."""
        if self.disk is None:
            self.disk = self.load()
        return self.disk

    @staticmethod
    def disk_key(tune_key: "TuneKey") -> str:
        """The on-disk cache key of ``tune_key`` = (device, *sizes): the device's name and the sizes."""
        device, *sizes = tune_key
        return f"{device_name(device)}|{','.join(map(str, sizes))}"

    def config_index(self, kwargs: Mapping[str, object] | None) -> int | None:
        """The index in ``configs`` of the config with these keywords (None if no config has them)."""
        return next((i for i, config in enumerate(self.configs) if config.all_kwargs() == kwargs), None)

    def named(self, launcher: str, config: object) -> int:
        """The index in ``configs`` of ``config`` as a user names it: an index, or a dict of
        keywords (``{"BM": 64, "num_warps": 8}``) that the first config having all of them
        matches. Raises ValueError naming ``launcher`` and listing the configs where none is
        that config, TypeError for another type."""
        count = len(self.configs)
        if isinstance(config, int) and not isinstance(config, bool):
            if 0 <= config < count:
                return config
            raise ValueError(f"{launcher}: no config {config}: its spec has {count} configs, 0 to {count - 1}")
        if isinstance(config, dict):
            index = self.matching(config)
            if index is not None:
                return index
            listed = "; ".join(f"{i}: {c.all_kwargs()}" for i, c in enumerate(self.configs))
            raise ValueError(f"{launcher}: no config has {config}; its configs are {listed}")
        raise TypeError(f"{launcher}: config must be an index or a dict of a config's keywords, "
                        f"got {type(config).__name__}")

    def nearest(self, tune_key: "TuneKey") -> int | None:
        """The index of the config tuned for the sizes nearest ``tune_key``'s
        (:func:`_size_distance`; the same variant, the same dtypes or f16 for bf16 and back,
        the same layouts or, an octave farther, the others), or None: among those
        cached on disk for this device, else among those shipped for its architecture
        (``shipped``, matched by the keywords the table gives)."""
        device, *sizes = tune_key
        wanted = [str(size) for size in sizes]
        tables: list[tuple[str, Mapping[str, Mapping[str, object]], Callable[[Any], int | None]]] = [
            (f"{device_name(device)}|", self.before(), self.config_index),
            (f"{device_arch(device)}|", self.shipped, self.matching),
        ]
        for prefix, table, index_of in tables:
            best: tuple[float, int] | None = None
            for key, kwargs in sorted(table.items()):
                if not key.startswith(prefix):
                    continue
                distance = _size_distance(wanted, key[len(prefix):].split(","))
                if distance is None:
                    continue
                index = index_of(kwargs)
                if index is not None and (best is None or distance < best[0]):
                    best = (distance, index)
            if best is not None:
                return best[1]
        return None

    def matching(self, kwargs: Mapping[str, object]) -> int | None:
        """The index in ``configs`` of the first config having all of ``kwargs`` (a shipped
        table's keywords or a user's ``config=``: the spec's own, as any Triton writes them), or None."""
        return next((i for i, config in enumerate(self.configs)
                     if all(name in (given := config.all_kwargs()) and given[name] == value
                            for name, value in kwargs.items())), None)

    def tuned_index(self, launcher: str, tune_key: "TuneKey") -> int | None:
        """The config to run for ``tune_key`` = (device, *sizes), as an index in ``configs``, or
        None: tune now. While settle_ties times a near tie on this thread, that config (other
        threads wait for the module's lock); in a call's ``config=`` (:meth:`forcing`), that one.
        Else, kept in ``tuned``: a config forced (``forced``, TILEGEN_CONFIG); under the
        interpreter, which cannot time configs, ``interpreted`` (said once per process);
        otherwise by :func:`effort`: ``none`` the default; ``quick`` the config cached on disk
        for these sizes, else the one cached for the nearest sizes (:meth:`nearest`), else the
        default; ``full`` the cached one, else None."""
        trial: tuple[TuneKey, int] | None = getattr(self.trial, "pick", None)
        if trial is not None and trial[0] == tune_key:
            return trial[1]
        force: int | None = getattr(self.trial, "force", None)
        if force is not None:
            return force
        if tune_key in self.tuned:  # tuned by another thread while this one waited for the lock
            return self.tuned[tune_key]
        forced = self.forced if self.forced is not None else forced_config()
        if callable(forced):
            forced = forced(launcher, tune_key)
        level = effort()
        index: int | None
        if forced is not None:
            index = self.named(launcher, forced)
        elif self.interpret:
            _notify_interpreter()
            index = self.interpreted
        elif level == "none":
            index = self.default
        else:
            index = self.config_index(self.before().get(self.disk_key(tune_key)))
            if index is None and level == "quick":
                index = self.nearest(tune_key)
                index = self.default if index is None else index
        if index is not None:
            self.tuned[tune_key] = index
        return index

    def forcing(self, launcher: str, config: object, call: Callable[[], _T]) -> _T:
        """``call()`` (the launcher ``launcher`` called again without ``config=``) running
        ``config`` (:meth:`named`: an index or a dict of keywords): with the module's lock held,
        its tuned choices and fast-path launches set aside (so that the call finds neither and
        asks :meth:`tuned_index`, which gives ``config`` on this thread) and put back after;
        no launch of it is kept. Raises what :meth:`named` raises for a config the spec lacks."""
        index = self.named(launcher, config)
        with self.lock:
            tuned, fast = dict(self.tuned), dict(self.fast)
            self.tuned.clear()
            self.fast.clear()
            self.trial.force = index
            self.forcings += 1
            try:
                return call()
            finally:
                self.forcings -= 1
                self.trial.force = None
                self.tuned.clear()
                self.tuned.update(tuned)
                self.fast.clear()
                self.fast.update(fast)

    def remember(self, tune_key: "TuneKey", config: TritonConfig) -> None:
        """Keep the autotuner's choice ``config`` for ``tune_key`` in this process and in the
        on-disk cache (keyed by the spec's hash through the file name), written atomically."""
        self.tuned[tune_key] = self.config_index(config.all_kwargs())
        self.fast.clear()  # launches kept before ran another config (or a near tie's)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            cached = {**self.load(), self.disk_key(tune_key): config.all_kwargs()}
            temporary = f"{self.path}.{os.getpid()}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(cached, handle, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
        except OSError:  # a read-only home: tune again next process
            pass

    def settle_ties(self, tune_key: "TuneKey", autotuner: TritonKernel, call: Callable[[], object]) -> TritonConfig:
        """The config to keep for ``tune_key`` once ``autotuner`` (Triton's) has timed each config
        once: its pick, unless another config it timed within NEAR_TIE of the pick runs faster
        when they are timed again side by side. One timing of a config scatters by a few percent
        from run to run (the GPU's clock, other work), as much as the best configs of a spec
        differ, so the autotuner's pick among near ties is a draw. Each near tie (at most
        NEAR_TIE_CONFIGS, fastest first) runs ``call`` (the launcher on the inputs being tuned
        for, set to that config through ``trial`` on this thread while others wait for the lock)
        in NEAR_TIE_ROUNDS interleaved rounds of CUDA-graph replays (Triton's event timing where
        a graph cannot be captured); the lowest median wins. Times the whole launch: a split
        loop's sum kernel and a split tail's sub-tiles too. Where timing fails otherwise it warns
        and keeps the pick: the call being tuned has its output already."""
        # time_config's quantiles (median first) of each config Triton timed for this key
        timings: dict[TritonConfig, float] = {
            config: timing[0] for config, timing in (getattr(autotuner, "configs_timings", None) or {}).items()}
        autotuner.configs_timings = {}  # read once: a later tune that times nothing must not see these
        best = autotuner.best_config
        if best not in timings:  # one config, or a key Triton had tuned before: nothing was timed now
            return best
        ties = sorted((c for c, t in timings.items() if t <= timings[best] * (1 + NEAR_TIE)), key=timings.__getitem__)
        near = [i for i in (self.config_index(config.all_kwargs()) for config in ties[:NEAR_TIE_CONFIGS])
                if i is not None]
        if len(near) < 2:
            return best
        rounds: dict[int, list[float]] = {index: [] for index in near}
        try:
            for _ in range(NEAR_TIE_ROUNDS):
                for index in near:
                    self.trial.pick = (tune_key, index)
                    try:
                        rounds[index].append(graph_timing(call, rep=20))
                    except RuntimeError:
                        rounds[index].append(triton.testing.do_bench(call))
        except Exception as error:  # any failure: the autotuner's pick stays
            warnings.warn(f"timing the autotuner's near ties failed ({type(error).__name__}: {error}); "
                          f"keeping its pick {best.all_kwargs()}", stacklevel=3)
            return best
        finally:
            self.trial.pick = None
        return self.configs[min(near, key=lambda index: statistics.median(rounds[index]))]


def autotune(autotuner: TritonKernel, grid: GridFunction, /, *args: Any, **meta: Any) -> object:
    """``autotuner[grid](*args, **meta)`` (a ``triton.autotune``'d kernel over ``grid``, a
    function of the config's keywords) with :data:`COMPILE_OPTIONS`: Triton's autotuner times
    each config and runs the fastest, after :func:`compile_configs` has compiled them all at once."""
    meta.update(COMPILE_OPTIONS)
    compile_configs(autotuner, grid, args, meta)
    return autotuner[grid](*args, **meta)


def compile_configs(autotuner: TritonKernel, grid: GridFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Compile each config of ``autotuner`` for the call ``autotuner[grid](*args, **kwargs)``, on a
    thread per CPU core (at most one per config), before the autotuner times them: it compiles a
    config only when it first runs it, one after another. Only the configs its
    ``early_config_prune`` keeps (:func:`whole_fits`) compile. Each config's ``pre_hook`` runs
    first (it sets the block shapes of the tensor descriptors, which the compiled kernel is
    specialized on), then ``warmup`` (Triton's compile without a launch) hands the compile to
    Triton's AsyncCompileMode, which waits for all of them on leaving. A config that fails to
    compile is left to the autotuner, which compiles it again and reports it as it would have; a
    Triton without AsyncCompileMode compiles as before."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    nargs = dict(zip(autotuner.arg_names, args, strict=False))
    configs = autotuner.configs
    prune = getattr(autotuner, "early_config_prune", None)
    if prune is not None:  # the configs it times: no other compiles
        configs = prune(configs, nargs, **kwargs)
    workers = min(len(configs), os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for config in configs:
            meta = {**kwargs, **config.all_kwargs()}
            if config.pre_hook is not None:
                config.pre_hook({**nargs, **meta})
            autotuner.fn.warmup(*args, grid=grid, **meta)


CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}  # device index -> the stream graph_timing captures on there


def graph_timing(call: Callable[[], object], **kwargs: Any) -> Any:
    """``triton.testing.do_bench_cudagraph(call, **kwargs)`` on the current GPU. torch.cuda.graph
    captures on one stream per process, made on the device current at the process's first capture
    (``torch.cuda.graph.default_capture_stream``), and do_bench_cudagraph passes no stream of its
    own: once a tune on cuda:0 had captured, a tune on cuda:1 captured on cuda:0's stream, which
    made cuda:0 current and launched cuda:1's kernel there ("cannot be accessed from Triton", an
    illegal memory access). So the capture stream is one of the current device's while timing."""
    graph = torch.cuda.graph
    saved = getattr(graph, "default_capture_stream", None)
    if saved is None or saved.device.index == (device := torch.cuda.current_device()):
        return triton.testing.do_bench_cudagraph(call, **kwargs)
    stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # torch.cuda.Stream.__new__ is unannotated
    graph.default_capture_stream = CAPTURE_STREAMS.setdefault(device, stream)
    try:
        return triton.testing.do_bench_cudagraph(call, **kwargs)
    finally:
        graph.default_capture_stream = saved


def time_config(kernel_call: Callable[[], object], quantiles: Sequence[float] | None) -> Any:
    """The autotuner's timing of one config (its ``do_bench``): milliseconds per call of
    ``kernel_call`` at ``quantiles``, replayed in a CUDA graph (``triton.testing.do_bench_cudagraph``),
    so that the host's launch cost, which for a kernel of a few microseconds is as long as the
    kernel, does not hide the differences between configs. The graph replays after 25 ms of calls
    (Triton's own warmup), so that each config is timed at the clocks the GPU runs at under load.
    Where a graph cannot be captured (a RuntimeError), Triton's default timing between events."""
    try:
        triton.testing.do_bench(kernel_call, warmup=25, rep=1)  # the warmup
        return graph_timing(kernel_call, rep=20, quantiles=quantiles)
    except RuntimeError:
        return triton.testing.do_bench(kernel_call, quantiles=quantiles)


# ---------------------------------------------------------------------------------------------
# The PyTorch custom op torch.ops.tilegen.<name>.


SIBLINGS: dict[tuple[str, str], types.ModuleType] = {}  # (file, name) of a sibling() call -> the module it loaded


def _keep_shared(name: str, value: _T) -> _T:
    """Keep ``value`` as ``torch.ops.tilegen.<name>`` and return it: state of this process that
    every copy of this runtime shares (modules built in different folders may load different
    copies), as the ops themselves are."""
    setattr(torch.ops.tilegen, name, value)
    return value


def _shared(name: str, make: Callable[[], _T]) -> _T:
    """The state kept as ``torch.ops.tilegen.<name>`` (:func:`_keep_shared`), ``make()`` on first use."""
    state: _T | None = getattr(torch.ops.tilegen, name, None)
    return _keep_shared(name, make()) if state is None else state


def _beside() -> dict[str, dict[str, None]]:
    """A backward's kernel name -> the folders of the modules that registered it, in the order
    they did (:func:`register_backward`; a dict as an ordered set), one dict per process: kept on
    ``torch.ops.tilegen``, as the ops' owners are, since modules built in different folders may
    load different copies of this runtime."""
    return _shared("_beside", dict)


def sibling(file: str, name: str) -> types.ModuleType:
    """The generated module ``<name>.py`` beside ``file`` (a generated module's ``__file__``): the
    module of a spec's backward, imported on first use (once per process; a module already
    imported from that path is reused, so its custom op is registered once). Where it is not
    beside ``file``, the folder of another module of the same spec that names it
    (:func:`register_backward`: the op's formula is the first module's, which may have been built
    alone into a folder of its own). Every backward calls it: after the first, one dict lookup."""
    module = SIBLINGS.get((file, name))
    if module is None:
        folders = dict.fromkeys([os.path.dirname(os.path.abspath(file)), *_beside().get(name, {})])
        paths = [os.path.join(folder, f"{name}.py") for folder in folders]
        loaded = {os.path.abspath(getattr(m, "__file__", None) or ""): m for m in list(sys.modules.values())}
        path = next((p for p in paths if p in loaded or os.path.isfile(p)), None)
        if path is None:
            raise ImportError(f"{name}.py is not beside {os.path.basename(file)}: build {name}.tile into the same "
                              "folder (tilegen build the specs' folder)")
        module = loaded.get(path)
        if module is None:
            spec = importlib.util.spec_from_file_location(f"tilegen_generated_{name}", path)
            assert spec is not None and spec.loader is not None  # a .py file's: a SourceFileLoader
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        SIBLINGS[file, name] = module
    return module


def autograd_apply(function: type[torch.autograd.Function]) -> Callable[..., Any]:
    """``function.apply`` (a ``torch.autograd.Function`` with a ``setup_context``) for a launcher's
    eager calls, without the signature binding torch's ``apply`` does on every call to fill in
    ``forward``'s defaults (``inspect.signature``; the generated forwards have none): the C++
    ``apply`` itself, unless functorch transforms (``torch.func``) are active, which need torch's."""
    # torch._C._FunctionBase.apply for ``function`` (torch's stub of _FunctionBase leaves apply out)
    apply = super(torch.autograd.Function, function).apply  # type: ignore[misc]
    active = torch._C._are_functorch_transforms_active

    def run(*args: Any) -> Any:
        return function.apply(*args) if active() else apply(*args)  # type: ignore[no-untyped-call]  # torch's apply

    return run


def register_backward(op: "OpOverloadPacket", backward: Callable[..., Any], setup_context: Callable[..., Any],
                      file: str | None = None, names: Iterable[str] = ()) -> "OpOverloadPacket":
    """Register ``backward`` and ``setup_context`` as the autograd formula of ``op`` (a
    ``torch.ops.tilegen`` op, :func:`register_op`; ``torch.library.register_autograd``), once per
    op in a process: importing the same module again keeps the first. ``file`` (the module's) and
    ``names`` (its backward's kernels) record where those kernels' modules lie, for :func:`sibling`."""
    if file is not None:
        for name in names:
            _beside().setdefault(name, {})[os.path.dirname(os.path.abspath(file))] = None
    done: set[str] = _shared("_autograd", set)
    name = op._qualified_op_name
    if name not in done:
        torch.library.register_autograd(name, backward, setup_context=setup_context)
        done.add(name)
    return op


#: One kernel of a spec's backward, as :func:`autograd` runs it: its name (its module ``<name>.py``
#: lies beside the forward's), the names of its arguments (the forward's saved inputs, outputs and
#: scalars, the outputs' gradients ``d<out>``, an earlier kernel's results), the names of its results,
#: and whether it writes over a forward input on an eager call with ``inplace_backward=True``.
BackwardStep: TypeAlias = tuple[str, tuple[str, ...], tuple[str, ...], bool]


def autograd(op: "OpOverloadPacket", launcher: Callable[..., Any], file: str, inputs: Sequence[str],
             outputs: Sequence[str], backward: Sequence[BackwardStep], saved: Sequence[str] = (),
             scalars: Sequence[str] = (), keywords: Sequence[str] = (), over: Sequence[str] = (),
             unread: Sequence[str] = (), optional: Sequence[str] = (),
             deterministic: Sequence[BackwardStep] = (), shapes: Sequence[str] = ()) -> Callable[..., Any]:
    """The autograd formula of a spec with a backward, from what its module declares: registered on
    ``op`` (:func:`register_backward`), and returned as the apply (:func:`autograd_apply`) of a
    ``torch.autograd.Function`` over ``launcher`` that the launcher calls for an eager call autograd
    records (the launchers themselves, without the custom ops' dispatch; torch.compile goes
    through the op, whose formula is the same).

    ``inputs`` and ``outputs`` name the spec's inputs (tensors and scalars, the op's positional
    arguments) and outputs; ``keywords`` the launcher's keyword arguments (the op's last inputs,
    without gradient). ``setup_context`` saves the tensors named in ``saved`` and the ``scalars`` (as
    attributes of ``ctx``); ``backward`` runs the ``backward`` kernels in order, each on the values
    its arguments name, through its custom op (which torch.compile traces), or its launcher where
    the call was eager; it returns a gradient per input: ``d<input>`` where a kernel computed it,
    else None. ``over``: the inputs the backward may write its gradients over; the Function takes
    ``inplace_backward`` last, and a kernel whose step says so gets ``inplace=True`` where it was set
    and every such input is one autograd computed (:func:`overwritable`). ``unread``: the outputs'
    gradients no kernel reads, where they read one other: the eager Function has autograd make no
    zeros for them, and returns no gradients where that one took no part in what was differentiated.
    ``optional``: the optional inputs (``in weight: T[N] = 1``); one the call left out (None) gets
    no gradient, and the backward's kernels get None for it too. ``deterministic``: the kernels run
    instead of ``backward``'s where ``torch.are_deterministic_algorithms_enabled()`` (a spec's
    ``backward deterministic`` line). ``shapes``: the saved tensors the backward's kernels take for
    their shape, dtype and device alone; a :func:`stand_in` of each is saved, not the tensor.
    """
    named, made = tuple(inputs), tuple(outputs)
    grads_in = tuple(f"d{n}" for n in made)
    switch = len(named) + len(keywords)  # where the Function's inplace_backward is
    positions = [named.index(x) for x in over]

    # where each saved tensor and scalar is in (the inputs, the outputs): found once, not per call
    places = {n: (0, i) for i, n in enumerate(named)} | {n: (1, i) for i, n in enumerate(made)}
    saved_at, scalars_at = [places[n] for n in saved], [(n, places[n][1]) for n in scalars]
    stand_ins = [saved.index(n) for n in shapes]
    optional_at = [(n, named.index(n)) for n in optional]
    single = len(made) == 1

    # torch passes setup_context its arguments by these names
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: object = None) -> None:
        args = inputs
        both = (args, (output,) if single else output)
        kept = [both[side][i] for side, i in saved_at]
        for at in stand_ins:
            kept[at] = stand_in(kept[at])
        ctx.save_for_backward(*kept)
        for n, i in scalars_at:  # the scalars are inputs
            setattr(ctx, n, args[i])
        if over:
            ctx.inplace = len(args) > switch and bool(args[switch]) and all(overwritable(args[i]) for i in positions)
        if optional_at:
            ctx.left_out = frozenset(n for n, i in optional_at if args[i] is None)

    # the backward's values as slots of a list, each kernel's arguments and results as slot numbers:
    # worked out once here, so that a call fills a list instead of building dicts
    Plan: TypeAlias = tuple[list[tuple[str, list[int], list[int], bool]], list[int | None], int]

    def slots_of(steps: Sequence[BackwardStep]) -> Plan:
        slot = {n: i for i, n in enumerate((*saved, *scalars, *grads_in))}
        plan, made = [], set()
        for name, arguments, results, in_place in steps:
            taken = [slot[a] for a in arguments]
            made.update(at := [slot.setdefault(r, len(slot)) for r in results])
            plan.append((name, taken, at, in_place))
        # where each input's gradient lands (a kernel's result), if anywhere; how many slots in all
        return plan, [slot[f"d{n}"] if slot.get(f"d{n}") in made else None for n in named], len(slot)

    plans = {False: slots_of(backward), True: slots_of(deterministic)}
    given = len(saved) + len(scalars) + len(grads_in)  # the slots a call fills before the kernels run

    def formula(ctx: Any, *grads: Any, eager: bool = False) -> Any:
        plan, found_at, size = plans[bool(deterministic) and torch.are_deterministic_algorithms_enabled()]
        values: list[Any] = [*ctx.saved_tensors, *[getattr(ctx, n) for n in scalars], *grads]
        values += [None] * (size - given)  # the kernels' results
        for name, arguments, results, in_place in plan:
            module = sibling(file, name)
            passed = [values[a] for a in arguments]
            if not eager:
                got = module.op(*passed)
            elif in_place:
                got = getattr(module, name)(*passed, inplace=ctx.inplace)
            else:
                got = getattr(module, name)(*passed)
            if len(results) == 1:
                values[results[0]] = got
            else:
                for at, value in zip(results, got, strict=True):
                    values[at] = value
        left_out = getattr(ctx, "left_out", ())
        found = tuple(None if at is None or n in left_out else values[at]
                      for n, at in zip(named, found_at, strict=True))
        return found if len(found) > 1 else found[0]

    register_backward(op, formula, setup_context, file, (step[0] for step in (*backward, *deterministic)))
    names = (*keywords, *(("inplace_backward",) if over else ()))
    count = len(named)

    def forward(*args: Any) -> Any:  # the launcher's keywords, passed last by position
        return launcher(*args[:count], **dict(zip(names, args[count:], strict=True)))

    read = next((i for i, g in enumerate(grads_in) if g not in unread), 0)

    def eager_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        if unread:  # autograd makes no zeros for the gradients the backward does not read
            ctx.set_materialize_grads(False)
        setup_context(ctx, inputs, output)

    def eager_backward(ctx: Any, *grads: Any) -> Any:
        if unread and grads[read] is None:  # the one output read took no part in what was differentiated
            return (None,) * (count + len(names))
        found = formula(ctx, *grads, eager=True)
        if not names:
            return found
        return (*(found if count > 1 else (found,)), *(None,) * len(names))  # no gradient for the keywords

    title = "".join(part.capitalize() for part in getattr(launcher, "__name__", "kernel").split("_"))
    function = type(f"_{title}Autograd", (torch.autograd.Function,), {
        "__doc__": f"{getattr(launcher, '__name__', 'the launcher')}() as autograd records an eager call.",
        "forward": staticmethod(forward if names else launcher),  # without keywords: the launcher itself
        "setup_context": staticmethod(eager_setup),
        "backward": staticmethod(eager_backward),
    })
    return autograd_apply(function)


def stand_in(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """A tensor with ``tensor``'s shape, dtype and device over one element (every stride 0), for a
    backward that reads no element of it (:func:`autograd`'s ``shapes``): saving it in place of
    ``tensor`` lets ``tensor`` be freed before the backward (embedding's table: its size in bytes
    for the whole step). None stays None (an optional input left out)."""
    return None if tensor is None else tensor.new_empty(()).expand(tensor.shape)


def overwritten(*tensors: torch.Tensor) -> None:
    """Count a write over ``tensors`` (a launcher's ``inplace=True``) in their autograd version
    counters, as a torch in-place op does: a copy autograd saved before is then refused when read
    ("modified by an inplace operation") instead of handing its backward the overwritten values.
    Tensors made under ``torch.inference_mode`` have no counter; they are left as they are."""
    increment_version(tensors)


def overwritable(tensor: torch.Tensor) -> bool:
    """True where a backward may write a gradient over ``tensor`` (``inplace_backward=True``): a
    value autograd computed (not a leaf, whose values are a parameter's or an input's), nor a view
    of a leaf."""
    base = tensor._base
    return tensor.grad_fn is not None and (base is None or base.grad_fn is not None)


def register_op(name: str, spec_hash: str, launcher: Callable[..., Any], fake: "Callable[..., Any] | Launch",
                traced: Callable[..., Any] | None = None) -> "OpOverloadPacket":
    """Register ``launcher`` as the PyTorch custom op ``torch.ops.tilegen.<name>`` and return it
    (an OpOverloadPacket; the schema comes from the launcher's annotations; no autograd formula).

    On the GPU, a kernel launched through pointers becomes a ``torch.library.triton_op``:
    torch.compile traces ``traced`` and Inductor sees the Triton kernel; eager calls run
    ``launcher``. Under the interpreter (torch cannot trace an interpreted kernel), for a kernel
    taking TMA descriptors, and for a block-pointer kernel on a Triton without block pointers
    (``traced`` is None in both) the op is an opaque ``torch.library.custom_op``
    run by ``launcher``, with ``fake`` as its fake implementation. When a module of another spec
    registered ``name`` earlier in this process, the op is ``<name>_<spec_hash>`` (with a
    warning); importing the same spec again returns the op registered first. ``fake`` may be the
    launcher's :class:`Launch` over its module's plan: then its :meth:`Launch.fake` and
    :meth:`Launch.traced_call` are the fake implementation and the traced body.
    """
    if isinstance(fake, Launch):  # finish kernels: opaque (their workspaces depend on the config the tune chooses)
        launch = fake
        fake, traced = launch.fake, None if launch.finishes else _signed(launch.traced_call, launcher)
    namespace = torch.ops.tilegen
    owners: dict[str, str] = _shared("_spec_hashes", dict)  # op name -> spec hash, in this process
    if owners.get(name, spec_hash) != spec_hash:
        warnings.warn(
            f"torch.ops.tilegen.{name} is the op of another spec imported earlier; this module's op is "
            f"torch.ops.tilegen.{name}_{spec_hash} (its module attribute `op`)",
            stacklevel=3,
        )
        name = f"{name}_{spec_hash}"
    if name not in owners:
        custom: CustomOpDef
        if traced is None or INTERPRET:
            custom = torch.library.custom_op(f"tilegen::{name}", launcher, mutates_args=(),
                                             schema=_op_schema(launcher))
            custom.register_fake(fake)
        else:
            # torch annotates triton_op as returning a Callable; what it returns is custom_op's CustomOpDef
            custom = cast("CustomOpDef", torch.library.triton_op(f"tilegen::{name}", traced, mutates_args=()))
            custom.register_kernel("cuda", launcher)
        _eager_shortcut(name, custom, launcher)
        owners[name] = spec_hash
    op: OpOverloadPacket = getattr(namespace, name)
    return op


def _signed(function: Callable[..., _T], launcher: Callable[..., Any]) -> Callable[..., _T]:
    """``function`` (which takes what ``launcher`` takes) under ``launcher``'s signature without its
    ``config=`` (a tuned launcher's, :meth:`Tuner.forcing`: the op runs the config the tuning
    chooses): what torch reads an op's schema from (``infer_schema``, ``triton_op``)."""
    signature = inspect.signature(launcher)
    kept = [p for p in signature.parameters.values() if p.name != "config"]

    @functools.wraps(function)
    def signed(*args: Any, **kwargs: Any) -> _T:
        return function(*args, **kwargs)

    # inspect.signature reads a function's __signature__, which typeshed's FunctionType does not declare
    signed.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    signed.__name__ = getattr(launcher, "__name__", "launcher")
    return signed


def _op_schema(launcher: Callable[..., Any]) -> str:
    """The op schema of ``launcher``'s signature without its ``config=`` (:func:`_signed`)."""

    def prototype(*args: Any, **kwargs: Any) -> NoReturn:  # the signature's stand-in: never called
        raise NotImplementedError

    return torch.library.infer_schema(_signed(prototype, launcher), mutates_args=())


#: The library of the ops' eager shortcuts (:func:`_eager_shortcut`), kept for the process.
_SHORTCUTS: list[torch.library.Library] = []


def _eager_shortcut(name: str, custom: "CustomOpDef", launcher: Callable[..., Any]) -> None:
    """Make an eager call of ``torch.ops.tilegen.<name>`` on plain tensors that autograd does not
    record run ``launcher`` straight from the op's Autograd dispatch key: 2-14 us over the
    launcher on the H100 (median 6.5 over every spec), where torch's custom-op path (its Python
    autograd kernel, a redispatch, the backend wrapper's checks) cost 13-20 us. Every other call
    (an input requiring grad in grad mode, a tensor subclass such as torch.compile's fake and
    functional tensors, an active dispatch mode or functorch transform) takes torch's own
    autograd kernel of ``custom`` (its CustomOpDef), which runs the registered formula. Where
    torch's private pieces this needs are missing (another torch), the op keeps torch's path."""
    try:
        from torch._library.autograd import make_autograd_impl

        torchs = make_autograd_impl(custom._opoverload, custom)
        depth, transforms = torch._C._len_torch_dispatch_stack, torch._C._are_functorch_transforms_active
    except (ImportError, AttributeError):
        return
    plain = (torch.Tensor, torch.nn.Parameter)

    def kernel(keyset: "torch._C.DispatchKeySet", *args: Any, **kwargs: Any) -> Any:
        if depth() or transforms():
            return torchs(keyset, *args, **kwargs)
        grad = torch.is_grad_enabled()
        for arg in args:
            if isinstance(arg, torch.Tensor) and (type(arg) not in plain or (grad and arg.requires_grad)):
                return torchs(keyset, *args, **kwargs)
        return launcher(*args, **kwargs)

    # torch.library.Library and its impl are unannotated
    library = torch.library.Library("tilegen", "FRAGMENT")  # type: ignore[no-untyped-call]
    with warnings.catch_warnings():  # torch warns that the kernel custom_op registered is overridden: it is
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        try:
            library.impl(name, kernel, "Autograd", with_keyset=True, allow_override=True)  # type: ignore[no-untyped-call]
        except TypeError:  # a torch without allow_override (before 2.12), which refuses a second Python
            # kernel for a key unless its record of the first (torch.library._impls) lets it
            getattr(torch.library, "_impls", set()).discard(f"tilegen/{name}/Autograd")
            try:
                library.impl(name, kernel, "Autograd", with_keyset=True)  # type: ignore[no-untyped-call]
            except RuntimeError:  # refused all the same: torch's path stays
                return
    _SHORTCUTS.append(library)
