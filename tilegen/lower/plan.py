"""The lowering's output: plain dataclasses of already-formatted strings.

A :class:`ModulePlan` holds everything ``templates/module.py.j2`` places; templates make no
decisions of their own. The kernel body is a list of ops, each naming the template macro
that renders it (``macro``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Comment:
    """``# spec line N: <text>``: names the spec line the next ops come from."""

    text: str
    macro: ClassVar[str] = "comment"


@dataclass(frozen=True)
class Line:
    """One statement of generated code, already formatted."""

    code: str
    macro: ClassVar[str] = "line"


@dataclass(frozen=True)
class ForLoop:
    """``for <var> in <iterable>:`` with a body of ops (``range(0, tl.cdiv(K, BK))``)."""

    var: str
    iterable: str
    body: tuple[Op, ...]
    macro: ClassVar[str] = "for_loop"


@dataclass(frozen=True)
class IfBlock:
    """``if <condition>:  # <why>`` with a body of ops (a constexpr condition: compiled away
    on the GPU when false)."""

    condition: str
    why: str
    body: tuple[Op, ...]
    orelse: tuple[Op, ...] = ()  # the ``else:`` body, if any
    macro: ClassVar[str] = "if_block"


@dataclass(frozen=True)
class WithBlock:
    """``with <context>:  # <why>`` with a body of ops (the launcher's lock and device guard)."""

    context: str
    why: str
    body: tuple[Op, ...]
    macro: ClassVar[str] = "with_block"


@dataclass(frozen=True)
class TryBlock:
    """``try:  # <why>`` with a body of ops, then ``except <errors>:`` and its body (the
    launcher's fast path: inputs that are not tensors fall through to the checks)."""

    why: str
    body: tuple[Op, ...]
    errors: str
    handler: tuple[Op, ...]
    macro: ClassVar[str] = "try_block"


Op = Comment | Line | ForLoop | IfBlock | WithBlock | TryBlock


def code_lines(ops: Iterable[Op]) -> Iterator[str]:
    """The generated lines of the kernel ``ops`` and of the blocks inside them (loop headers,
    conditions): what a name's uses are looked up in."""
    for op in ops:
        if isinstance(op, Line):
            yield op.code
        elif isinstance(op, (ForLoop, IfBlock)):
            yield op.iterable if isinstance(op, ForLoop) else op.condition
            yield from code_lines(op.body)
            yield from code_lines(op.orelse if isinstance(op, IfBlock) else ())


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: its name, whether it is a ``tl.constexpr``, and the Triton type it is
    annotated with, if any (``tl.float64``: Triton takes an unannotated Python float as fp32)."""

    name: str
    constexpr: bool = False
    annotation: str | None = None

    @property
    def text(self) -> str:
        """The parameter as written in the signature (``BM: tl.constexpr``, ``beta2: tl.float64``)."""
        if self.constexpr:
            return f"{self.name}: tl.constexpr"
        return f"{self.name}: {self.annotation}" if self.annotation else self.name


@dataclass(frozen=True)
class TunePlan:
    """``@triton.autotune``: one ``triton.Config(...)`` text per config, the key, the default."""

    configs: tuple[str, ...]
    key: tuple[str, ...]
    default: int  # index of the config an untuned GPU launch runs
    name: str = "_CONFIGS"  # the module-level list the decorator takes
    post_hook: str | None = None  # run after each config's launch while tuning (and timed with it)
    prune: str | None = None  # the autotuner's early_config_prune: only the configs it keeps compile (rows.py)
    # kernel arguments whose values the autotuner restores after timing a config (restore_value):
    # the outputs a scatter-add adds into, so that the timed runs add nothing to the result
    restore: tuple[str, ...] = ()
    interpreted: int = 0  # index of the config Triton's interpreter runs (the default's unless the spec names one)
    # the configs as another list of the module's, given another pre_hook (``_rt.configs_like``): a
    # variant's (its pointer kernel's) where they differ from the spec kernel's in their pre_hook alone
    like: str | None = None


@dataclass(frozen=True)
class ChoicePlan:
    """The ``@triton.jit`` helper behind ``choose``: ``apply_activation(x, ACTIVATION)``.

    ``branches`` pairs each option with the expression it computes from ``x``
    (``none`` has no branch: it returns ``x`` unchanged).
    """

    function: str
    constexpr: str
    branches: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SplitPlan:
    """A split loop (``for k over K by BK split``): what the launcher needs to split it.

    The kernel takes the f32 workspace ``workspace`` of shape [split, *output] and runs the
    loop's part ``tl.program_id(axis)`` of ``tl.num_programs(axis)``; with more than one part
    it stores its partial sum there instead of into ``output``."""

    workspace: str  # the kernel argument (``partials_ptr``)
    output: str  # the output tensor the partial sums are added into
    tiles: tuple[tuple[str, str], ...]  # (dimension, block) of each tiled grid axis
    loop: tuple[str, str]  # (dimension, block) of the split loop
    axis: int  # the grid axis the parts take


@dataclass(frozen=True)
class TailPlan:
    """``split tail``: the kernel computes each output tile in ``function``, a ``@triton.jit``
    function of the tile's coordinates and block sizes, which it calls at its own block shape
    or, for the tiles of the last partial wave, at half or a quarter of it.

    ``descriptors`` are the tensors that get a second TMA descriptor (``<tensor>_tail_desc``)
    with the sub-tiles' block shape; ``carrier`` is the tail descriptor whose block shape tells
    the kernel the split (a constexpr), and ``positions`` where in it the two axes' blocks sit.
    Pointer kernels have neither: they read the split from the grid."""

    tiles: tuple[tuple[str, str], ...]  # (dimension, block) of the two grid axes
    function: KernelPlan
    descriptors: tuple[str, ...] = ()
    carrier: str = ""
    positions: tuple[int, int] = (0, 1)


@dataclass(frozen=True)
class PiecePlan:
    """A block of a flat grid's rows that a config may set to a sum of two powers of two (192 =
    128 + 64): the kernel holds each tile as two row pieces, each a power of two (Triton's tiles
    are), with an accumulator, an ``a`` tile and a store each, sharing each ``b`` tile of the loop.

    ``block`` is the tuned block parameter; ``descriptors`` the tensors tiled along it, which get
    a second TMA descriptor (``<tensor>_piece_desc``) with the second piece's block shape (the
    first descriptor takes the first piece's); ``rows`` the kernel's constexprs of the two
    pieces' rows (the second is 0 for a power of two: one piece)."""

    block: str
    descriptors: tuple[str, ...]
    rows: tuple[str, str]


@dataclass(frozen=True)
class FinishPlan:
    """A store that reduces across programs (:mod:`tilegen.lower.finish`): the workspaces its
    kernel stores the partials in (launcher locals; the kernel takes them as ``<name>_ptr``),
    each float32 of ``programs`` times ``elements``, where ``programs`` is the product over the
    reduced grid axes of their program counts ((dimension, block) each; block None for an index
    axis), and the finish kernel the launcher launches after the spec's, on ``grid``, with
    ``args`` (text of the launcher's locals; ``programs`` is one of them)."""

    output: str
    workspaces: tuple[str, ...]
    programs: tuple[tuple[str, str | None], ...]
    elements: str
    kernel: KernelPlan
    args: tuple[str, ...]
    grid: str

    @property
    def launch_grid(self) -> str:
        """``grid`` with three sizes, as a compiled kernel's launch takes it."""
        assert self.grid.endswith(",)"), "a finish kernel's grid is one axis"
        return f"{self.grid[:-2]}, 1, 1)"

    @property
    def count(self) -> str:
        """The launcher's local holding the number of programs whose partials are merged."""
        return f"{self.output}_programs"

    @property
    def size(self) -> str:
        """The elements of each workspace, as launcher text."""
        return self.count if self.elements == "1" else f"{self.count} * {self.elements}"


@dataclass(frozen=True)
class KernelPlan:
    """The ``@triton.jit`` function: name, argument groups (one line each) and body ops."""

    name: str
    param_groups: tuple[tuple[KernelParam, ...], ...]
    body: tuple[Op, ...]
    docstring: str
    tune: TunePlan | None
    helpers: tuple[str, ...]  # the runtime's @triton.jit helpers the kernel calls (tilegen.functions.HELPERS)
    choices: tuple[ChoicePlan, ...]
    bf16_dot: bool  # a dot has bf16 operands: the interpreter needs them upcast (see kernel.py)
    int64: bool  # the kernel takes INT64_OFFSETS (64-bit offsets for tensors of 2**31+ elements)
    descriptors: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (tensor, block shape) of each TMA descriptor
    whole_blocks: tuple[tuple[str, str], ...] = ()  # (dimension, constexpr) of each 'whole' axis's tile
    transposed: tuple[tuple[str, str], ...] = ()  # (2D input, constexpr): its descriptor spans its transpose
    split: SplitPlan | None = None  # the split loop, if any
    sign_flags: tuple[tuple[str, str], ...] = ()  # (float scalar input, constexpr: it is >= 0), see scaled.py
    given_flags: tuple[tuple[str, str], ...] = ()  # (optional input, constexpr: the caller gave it)
    tail: TailPlan | None = None  # ``split tail``: the tile function and the tail descriptors
    pieces: PiecePlan | None = None  # a block of the rows that may be two power-of-two pieces
    finishes: tuple[FinishPlan, ...] = ()  # the stores that reduce across programs, each finished by a kernel
    folded: bool = False  # the kernel takes FOLDED_GRID (its grid's programs all along program id 0, see grid.py)
    # (a count's extent, constexpr: its per-program histogram's bins, 0: atomics per lane), see Statements.count
    histograms: tuple[tuple[str, str], ...] = ()
    # outputs whose TMA store may hold more than _rt.SUBTILE_BYTES: stored in halves where its
    # descriptor's block is half the tile's columns (``_descriptor_blocks`` halves it, see
    # runtime.epilogue_subtile)
    subtiled: tuple[str, ...] = ()
    # the constexprs of the 'whole' axes' tiles some dot contracts over: at least 16 (see whole_tile)
    contracted: tuple[str, ...] = ()

    def whole_tile(self, dim: str, block: str, concrete: bool = True) -> str:
        """The launcher's line binding ``block``, the tile of the 'whole' axis over ``dim``: the
        extent rounded up to a power of two (with ``concrete``, of ``int(dim)``: a symbolic size
        under torch.compile), and at least 16 where a dot contracts over it (``tl.dot`` takes no K
        under 16 on the GPU; the axis's mask zeroes the lanes past the extent)."""
        extent = f"int({dim})" if concrete else dim
        tile = f"1 << ({extent} - 1).bit_length()"
        return f"{block} = {f'max(16, {tile})' if block in self.contracted else tile}"

    @property
    def runtime_launched(self) -> bool:
        """Whether the runtime's ``Launch`` launches the kernel with the arguments a launcher passes it
        (:func:`tilegen.lower.launch.launch_object`): all but a split loop's, finish kernels', a split
        tail's and row pieces', which the launcher writes out (finish kernels: :attr:`plan_launched`)."""
        return self.plan_launched and not self.finishes

    @property
    def plan_launched(self) -> bool:
        """Whether the runtime's ``Launch`` can launch the kernel over a launcher's plan of a call
        (``_rt.Planned``): :attr:`runtime_launched`'s, and a kernel with finish kernels too, whose
        workspaces the plan gives as functions of the config (``_rt.Finish``)."""
        return self.split is None and self.tail is None and self.pieces is None


@dataclass(frozen=True)
class LauncherPlan:
    """The host launcher: signature, docstring and body ops (the same op kinds as the kernel)."""

    name: str
    inputs: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]  # (keyword argument, default as Python text)
    signature: str  # the parameters with type annotations (the custom op's schema comes from them)
    own_signature: str  # the launcher's: ``signature``, and ``inplace`` where an output may be written over an input
    plan_signature: str  # its plan's (``_<name>_plan``): ``signature``, and ``inplace``
    in_place: bool  # an output may be written over an input (``in place of``): the op calls a wrapper making it new
    annotation: str  # the return annotation: torch.Tensor, or a tuple of them
    call: str  # the launcher called with its own arguments (in the device guard; the op's fake calls)
    sizes: tuple[tuple[str, str], ...]  # (size symbol, expression binding it), for the reference
    outputs: tuple[tuple[str, str, str], ...]  # (name, shape expression, torch dtype)
    body: tuple[Op, ...]
    tuned: bool
    num_sms: bool  # the module needs _num_sms (a persistent grid or ``split tail``)
    descriptors: bool  # the module needs _has_tma (and, tuned, _descriptor_blocks)
    block_pointers: bool  # the module needs _BLOCK_POINTERS
    blocks: bool  # some block size is a launcher keyword (the module needs _bad_block)
    returns: str
    docstring: str
    fake: tuple[Op, ...]  # the op's fake implementation: the checks, then empty outputs
    traced: tuple[Op, ...] | None  # the op's body under torch.compile (wrap_triton launch); None: opaque
    op_traced: str  # what the op registration gets for ``traced``: a function name, an expression, or None
    checked: tuple[Op, ...] = ()  # ``_<name>_checked``'s body: checks the launcher, fake and traced body share
    launch: str = ""  # the module's runtime Launch of the kernel (``_<name>_launch = _rt.Launch(...)``); "": none
    plan: tuple[Op, ...] = ()  # ``_<name>_plan``'s body: the runtime's Launch runs the full path, fake and traced body
    own_fake: bool = False  # with a plan, the op's fake is ``_<name>_fake`` all the same (launcher.own_fake)
    table: str = ""  # the module's runtime Inputs of the launcher (``_<name>_inputs = _rt.Inputs(...)``): its checks


@dataclass(frozen=True)
class HookPlan:
    """A module-level function of ``nargs`` (an autotune hook, ``_descriptor_blocks``): its
    docstring (lines after the first unindented) and its body ops."""

    docstring: str
    body: tuple[Op, ...]


@dataclass(frozen=True)
class ReferencePlan:
    """``reference(*inputs)``: size bindings and whole-tensor torch statements."""

    inputs: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, str], ...]
    lines: tuple[str, ...]
    returns: str
    uses_swizzle: bool
    uses_choice: bool


@dataclass(frozen=True)
class ModulePlan:
    """Everything ``templates/module.py.j2`` needs to write ``generated/<kernel>.py``."""

    kernel_name: str
    spec_path: str
    spec_hash: str
    version: str
    spec_text: tuple[str, ...]  # the spec's lines, echoed in the header of a derived spec's module (no file holds them)
    kernel: KernelPlan
    launcher: LauncherPlan
    reference: ReferencePlan
    fallbacks: tuple[FallbackPlan, ...] = ()  # the launcher returns through the first; each through the next
    dtype_vars: tuple[str, ...] = ()  # the spec's dtype variables (T), bound by the launcher
    rows: RowsPlan | None = None  # a whole axis whose long rows run a looped kernel (tilegen.lower.rows)
    runtime_build: str = ""  # the build of tilegen's runtime the module loads (tilegen.resources.runtime_build)
    descriptor_blocks: HookPlan | None = None  # the descriptor kernel's autotune pre_hook, where it is tuned
    stages: tuple[StagePlan, ...] = ()  # kernels the launcher runs first: values every program uses (stages.py)
    autograd: AutogradPlan | None = None  # the backward registered with torch.autograd (autograd.py)

    @property
    def helpers(self) -> tuple[str, ...]:
        """The runtime's ``@triton.jit`` helpers the module's kernels call (the spec's, its fallbacks'
        and its stages'), once each: the module binds them to their names."""
        kernels = (self.kernel, *(f.kernel for f in self.fallbacks), *(s.kernel for s in self.stages))
        return tuple(dict.fromkeys(h for k in kernels for h in k.helpers))

    @property
    def runtime_names(self) -> tuple[tuple[str, str], ...]:
        """(module name, runtime attribute) of each runtime function or constant the module binds
        to a name of its own: what its launchers and kernels use on every call (a global name
        costs less than an attribute of ``_rt``), and what tests replace on the module."""
        kernels = (self.kernel, *(f.kernel for f in self.fallbacks), *(s.kernel for s in self.stages))
        descriptor = self.descriptor_kernel if self.descriptor_blocks is not None else None
        launchers = (self.launcher, *(f.launcher for f in self.fallbacks), *(s.launcher for s in self.stages))
        written = not all(launcher.launch for launcher in launchers)  # a launch the launcher writes out
        names = [*([("_INTERPRET", "INTERPRET"), ("_int_class", "int_class")] if written else []),
                 ("_current_device", "current_device"), *([("_keep_launch", "keep_launch")] if written else []),
                 ("_is_compiling", "is_compiling"), ("_grad_enabled", "grad_enabled")]
        wanted = [
            (any(k.bf16_dot for k in kernels), "_dot_operand", "dot_operand"),
            (self.launcher.block_pointers, "_BLOCK_POINTERS", "BLOCK_POINTERS"),
            (self.launcher.num_sms or self.kernel.split is not None, "_num_sms", "num_sms"),
            (self.kernel.tail is not None, "_tail_split", "tail_split"),
            (self.uses_descriptors, "TensorDescriptor", "TensorDescriptor"),
            (self.uses_descriptors, "_has_tma", "has_tma"),
            (self.uses_descriptors, "_rebased", "rebased"),
            (descriptor is not None and descriptor.pieces is not None, "_pieces", "pieces"),
            (descriptor is not None and bool(descriptor.subtiled), "_epilogue_subtile", "epilogue_subtile"),
            (self.kernel.split is not None, "_no_partials", "no_partials"),
            (self.kernel.split is not None, "_sum_partials", "sum_partials"),
        ]
        bound = ((name, attribute) for used, name, attribute in wanted if used)
        return (*names, *bound, *((h, h) for h in self.helpers))

    @property
    def descriptor_kernel(self) -> KernelPlan | None:
        """The kernel (main or fallback) that takes TMA descriptors, if any: the module's
        ``_descriptor_blocks`` pre_hook serves its configs."""
        kernels = (self.kernel, *(f.kernel for f in self.fallbacks))
        return next((k for k in kernels if k.descriptors), None)

    @property
    def uses_descriptors(self) -> bool:
        """Some launcher of the module makes TMA descriptors (it needs ``TensorDescriptor``)."""
        return self.launcher.descriptors or any(f.launcher.descriptors for f in self.fallbacks)


@dataclass(frozen=True)
class FallbackPlan:
    """A TMA-descriptor or block-pointer spec lowered once more, through pointers (or, for block
    pointers, through descriptors first): the kernel and the private launcher that the main
    launcher returns through when descriptors (or block pointers) cannot serve."""

    kernel: KernelPlan
    launcher: LauncherPlan


@dataclass(frozen=True)
class AutogradPlan:
    """The autograd formula of a spec with a backward (:mod:`tilegen.lower.autograd`): the module's
    ``<apply> = _rt.autograd(<arguments>)`` (``templates/autograd.py.j2``)."""

    apply: str  # the name the launcher calls for an eager call autograd records (``_softmax_apply``)
    arguments: tuple[str, ...]  # the runtime's autograd() arguments, as Python text, one a line


@dataclass(frozen=True)
class StagePlan:
    """A kernel the spec's launcher runs before its own (:mod:`tilegen.lower.stages`): it computes
    values reduced across programs, which the later kernels load. ``launcher`` is its private
    launcher (it returns ``values``, the tensors holding them, as the spec's launcher names them)."""

    kernel: KernelPlan
    launcher: LauncherPlan
    values: tuple[str, ...]
    #: (module, launcher): the forward's own stage, which a derived backward's recomputation is (the
    #: same kernel, :func:`tilegen.compiler.borrow_stages`): the module calls that launcher instead
    #: of holding the kernel again; () for a stage of its own
    borrowed: tuple[str, str] | tuple[()] = ()

    @property
    def call(self) -> str:
        """The launcher's call of the stage (it returns ``values``)."""
        return self.launcher.call

    @property
    def borrowed_call(self) -> str:
        """The call of the forward module's launcher of the same stage, with this one's arguments."""
        assert self.borrowed, "a stage of its own"
        module, launcher = self.borrowed
        return self.launcher.call.replace(f"{self.launcher.name}(", f'_rt.sibling(__file__, "{module}").{launcher}(', 1)


@dataclass(frozen=True)
class HostStage:
    """Values the spec's launcher computes with torch before its kernel, after its checks: ``call``
    (``_rt.sorted_runs(idx)``, a deterministic kernel's sorted tokens, :mod:`tilegen.lower.ordered`)
    returns ``values``, inputs of the kernel that are not the launcher's."""

    values: tuple[str, ...]
    call: str


@dataclass(frozen=True)
class RowsPlan:
    """A ``whole`` axis whose rows may be too long for one tile (:mod:`tilegen.lower.rows`): the
    launcher returns ``call`` (the looped kernel's launcher, one of the module's fallbacks) where
    the axis's extent ``dim`` passes ``_WHOLE_LIMIT``, a module constant: ``limit`` unless the
    environment variable ``TILEGEN_WHOLE_LIMIT`` sets it, never past ``hard_limit`` (Triton's
    largest tile). ``traced`` is the looped kernel's launch as ``torch.compile`` traces it."""

    dim: str
    limit: int
    hard_limit: int
    call: str
    traced: tuple[Op, ...]
    launcher: str  # the looped launcher's name

