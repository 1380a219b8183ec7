"""Kernel lowering: a checked spec -> the ``@triton.jit`` function as a :class:`KernelPlan`.

Every name, offset, mask and pointer expression is decided here or in the parts this module
assembles, which share one :class:`~tilegen.lower.state.KernelState`:

* :mod:`tilegen.lower.grid`: program ids -> tile offsets and masks (swizzle, flat grids,
  persistent programs, 64-bit offsets);
* :mod:`tilegen.lower.pieces`: a block of rows held as two power-of-two pieces;
* :mod:`tilegen.lower.access`: pointers, block pointers, descriptors, gathers, loads;
* :mod:`tilegen.lower.expressions`: arithmetic, functions, reductions, dots;
* :mod:`tilegen.lower.statements` and :mod:`tilegen.lower.loops`: statements, stores, loops;
* :mod:`tilegen.lower.tail`: ``split tail``'s tile function and its dispatch.

This module makes the signature (:func:`kernel_params`), the autotune configs and choices, and
puts the pieces together (:func:`lower_kernel`). Generated names follow the seeds (``pid_m``,
``offs_m``, ``mask_m``, ``a_ptrs``, ``acc``, the tutorial's ``num_pid_in_group``/``group_id``/
``first_pid_m``); each one is checked against the spec's own names so nothing a user writes can
be shadowed.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.functions import HELPERS, function_of
from tilegen.lower.access import Access
from tilegen.lower.checked import block_of
from tilegen.lower.expressions import Expressions
from tilegen.lower.finish import across_stores, lower_finish, partials_name
from tilegen.lower.grid import grid_ops
from tilegen.lower.names import dtype_bindings, mentions, size_symbols, stride_name, whole_dims
from tilegen.lower.ordered import OrderedWalk
from tilegen.lower.pieces import pieces_setup
from tilegen.lower.plan import (
    ChoicePlan,
    ForLoop,
    IfBlock,
    KernelParam,
    KernelPlan,
    Line,
    Op,
    SplitPlan,
    TunePlan,
    code_lines,
)
from tilegen.lower.ranges import ProgramExit, program_exit
from tilegen.lower.state import (
    FOLD_FLAG,
    INT64_FLAG,
    LOOP_STAGES,
    TAIL_FLAGS,
    AxisInfo,
    KernelState,
    pipelines_tiles,
)
from tilegen.lower.statements import Statements
from tilegen.lower.tail import tail_split

__all__ = ["FOLD_FLAG", "INT64_FLAG", "LOOP_STAGES", "TAIL_FLAGS", "AxisInfo", "KernelState", "config_text",
           "kernel_params", "lower_kernel"]


def config_text(spec: m.Spec, config: m.Config) -> str:
    """``triton.Config({...}, num_warps=4, num_stages=3)`` for one config; tuned parameters a
    config leaves out take their default, so every config sets every tuned parameter."""
    meta: list[str] = []
    for name in spec.tuned_params:
        value = config.get(name) or next(p.default for p in spec.params if p.name.id == name)
        assert value is not None, f"no config sets {name}, which has no default"
        meta.append(f'"{name}": {value.text}')
    if pipelines_tiles(spec):  # the tile loop's depth: the config's num_stages, or none given
        stages = config.get("num_stages")
        meta.append(f'"{LOOP_STAGES}": {stages.text if stages is not None else None}')
    options = [f"{o}={v.text}" for o in m.LAUNCH_OPTIONS if (v := config.get(o)) is not None]
    if spec.access_style == "descriptor":  # the descriptors' block shapes follow the config
        options.append("pre_hook=_descriptor_blocks")
    return ", ".join(["triton.Config({" + ", ".join(meta) + "}", *options]) + ")"


def kernel_params(state: KernelState) -> tuple[tuple[KernelParam, ...], ...]:
    """The kernel's parameters in groups (pointers or descriptors, sizes, scalars, each tensor's
    strides, constexprs), empty groups left out. Records in ``state`` the column-major flags of
    a descriptor kernel's 2D inputs and the split loop's :class:`~tilegen.lower.plan.SplitPlan`
    (its f32 workspace is a pointer parameter), and takes every parameter's name."""
    spec = state.spec
    whole = whole_dims(spec)
    descriptors = spec.access_style == "descriptor"  # shape and strides live in the descriptor
    pointers = tuple(KernelParam(f"{t.name.id}_desc" if descriptors else f"{t.name.id}_ptr") for t in spec.arrays)
    sizes = tuple(KernelParam(d) for d in size_symbols(spec))
    # an f64 scalar is annotated: Triton passes an unannotated Python float as fp32
    scalars = tuple(KernelParam(t.name.id, annotation="tl.float64" if t.dtype.id == "f64" else None)
                    for t in spec.inputs if t.is_scalar)
    strides = () if descriptors else tuple(
        tuple(KernelParam(stride_name(t, i)) for i in range(len(t.dims))) for t in spec.arrays
    )
    consts = tuple(KernelParam(p.name.id, True) for p in spec.params)
    consts += tuple(KernelParam(state.whole_blocks[d], True) for d in whole)
    consts += tuple(KernelParam(c.constexpr, True) for c in spec.choices)
    if descriptors:  # a 2D input read in 2D tiles may come column-major (b = w.t()): the launcher says which
        index_axes = {a.name.id for a in spec.grid if a.is_index}
        accesses = [a for stmt in m.statements(spec.body) for a in m.accesses(stmt)]
        for t in spec.inputs:
            indexes = [a.index for a in accesses if a.tensor.id == t.name.id]
            tiles_only = all(isinstance(i, m.Name) and i.id not in index_axes for index in indexes for i in index)
            if len(t.dims) == 2 and tiles_only:
                state.transposed[t.name.id] = state.fresh(f"{t.name.id.upper()}_T")
        consts += tuple(KernelParam(flag, True) for flag in state.transposed.values())
    if spec.persistent or spec.split_tail:
        consts += (KernelParam("NUM_SMS", True),)
    if pipelines_tiles(spec):
        consts += (KernelParam(LOOP_STAGES, True),)
    loop = next((s for s in spec.body if isinstance(s, m.Loop) and s.split), None)
    if loop is not None:  # the f32 workspace of the partial sums goes after the tensors
        workspace = state.fresh("partials_ptr")
        pointers += (KernelParam(workspace),)
        store = next(s for s in spec.body if isinstance(s, m.Store))
        tiled = [a for a in spec.grid if a.bounds != "whole"]
        state.split = SplitPlan(
            workspace,
            store.tensor.id,
            tuple((a.dim.id, block_of(a)) for a in tiled),
            (loop.axis.dim.id, block_of(loop.axis)),
            1 if spec.flat else len(tiled),
        )
    for found in across_stores(spec):  # the f32 workspaces of reductions across programs, after the tensors
        state.across[id(found.store)] = found
        pointers += tuple(KernelParam(f"{partials_name(found, i)}_ptr") for i in range(len(found.partials)))
    groups = (pointers, sizes, scalars, *strides, consts)
    for group in groups:
        state.taken |= {p.name for p in group}
    return tuple(g for g in groups if g)


def tune_plan(state: KernelState) -> TunePlan | None:
    """The autotune configs of a tuned spec (None where it has no ``tune``), keyed also on the
    operands' layout flags; a split loop's configs are timed with their partial sums added."""
    spec = state.spec
    if spec.tune is None:
        return None
    configs = tuple(config_text(spec, c) for c in spec.tune.configs)
    default = spec.tune.configs.index(spec.default_config())
    interpreted = spec.tune.configs.index(spec.interpreter_config())
    # each operand layout tunes on its own: a transposed tile may want another config
    key = (*(k.id for k in spec.tune.key), *state.transposed.values())
    hook = "_sum_partials_hook" if state.split is not None else None  # a split config is timed with its sum
    added = dict.fromkeys(f"{s.tensor.id}_ptr" for s in m.statements(spec.body) if isinstance(s, m.Store) and s.atomic)
    assert not (hook and added), "the checker refuses atomic stores beside a split loop"
    return TunePlan(configs, key, default, post_hook=hook, restore=tuple(added), interpreted=interpreted)


def choice_plans(spec: m.Spec) -> tuple[ChoicePlan, ...]:
    """Each ``choose`` line's ``apply_<name>`` function: a branch per option but ``none``, which
    calls the option's helper with the defaults of its parameters
    (:attr:`~tilegen.functions.Function.params`: ``leaky_relu(x, 0.01)``, ``relu(x)``)."""
    plans: list[ChoicePlan] = []
    for choice in spec.choices:
        branches: list[tuple[str, str]] = []
        for option in choice.options:
            if option.id == "none":
                continue
            params = function_of(option.id).params
            defaults = [default for _, default in params if default is not None]
            assert len(defaults) == len(params), f"{option.id} has a parameter without a default"
            branches.append((option.id, f"{option.id}({', '.join(['x', *defaults])})"))
        plans.append(ChoicePlan(f"apply_{choice.name.id}", choice.constexpr, tuple(branches)))
    return tuple(plans)


def _after_descriptors(
    params: tuple[tuple[KernelParam, ...], ...], names: tuple[str, ...]
) -> tuple[tuple[KernelParam, ...], ...]:
    """``params`` with parameters ``names`` inserted in the first group after its last descriptor."""
    first = params[0]
    last = max(i for i, p in enumerate(first) if p.name.endswith("_desc")) + 1
    extra = tuple(KernelParam(name) for name in names)
    return ((*first[:last], *extra, *first[last:]), *params[1:])


def _exit_op(state: KernelState, early: ProgramExit) -> IfBlock:
    """``if pid_m * BM >= n_b: return``: a program every one of whose lanes fails its stores' guard."""
    start, comparison = state.axes[early.axis].start, ">=" if early.op == "<" else ">"
    why = f"every store is guarded by {early.axis} {early.op} {early.end}, false in all this program's lanes"
    return IfBlock(f"{start} {comparison} {early.end}", why, (Line("return"),))


def lower_kernel(spec: m.Spec) -> KernelPlan:
    """The ``@triton.jit`` kernel of a checked spec, as the kernel passes of
    :mod:`tilegen.lower.passes` left it (:func:`~tilegen.lower.passes.kernel_spec`: its exponentials
    of logits in base 2): the signature, the grid mapping, the body's ops, its autotune configs,
    helpers and choices, and what the launcher must know (descriptor blocks, flags, split, tail).

    The spec must have passed :func:`tilegen.check.check`; nothing is re-validated here.
    """
    state = KernelState(spec)
    access = Access(state)
    statements = Statements(state, access, Expressions(state, access))
    params = kernel_params(state)
    setup, tile = grid_ops(state)
    tile += pieces_setup(state)
    if state.pieces is not None:  # the pieces' descriptors follow the descriptors
        params = _after_descriptors(params, tuple(f"{t}_piece_desc" for t in state.pieces.descriptors))
    if state.spec.ordered is not None:  # deterministic: the body runs at each step of a walk over sorted tokens
        state.walk = OrderedWalk(state)
    early = program_exit(state.spec) if state.walk is None else None
    if early is not None and early.after < 0:
        tile.append(_exit_op(state, early))
    first = len(tile)
    for position, stmt in enumerate(state.spec.body):
        if not isinstance(stmt, m.Loop):
            tile.append(state.comment(stmt.span))
        tile.extend(statements.statement(stmt))
        if early is not None and position == early.after:
            tile.append(_exit_op(state, early))
    if state.walk is not None:
        tile[first:] = state.walk.wrap(tile[first:])
    # a float argument arrives as fp32 from Triton's JIT but as fp64 from torch.compile, which
    # passes a symbolic float in double: fix its type, so loop-carried tiles keep theirs; an f64
    # one (typed, so fp64 either way) is a Python float in Triton's interpreter, which tl.cast would
    # round through fp32 and tl.full makes an fp64 value as it is
    prelude: list[Op] = [
        Line(f"{t.name.id} = tl.full([], {t.name.id}, tl.float64)" if t.dtype.id == "f64" else
             f"{t.name.id} = tl.cast({t.name.id}, {m.DTYPES[t.dtype.id][0]})")
        for t in state.spec.inputs if t.is_scalar and t.dtype.id in m.FLOAT_DTYPES
    ]
    # a dtype variable is the dtype of the first input typed with it
    pointer = "{name}_desc.dtype" if state.spec.access_style == "descriptor" else "{name}_ptr.dtype.element_ty"
    bound = dtype_bindings(state.spec, pointer)
    for var in state.spec.dtype_vars:  # where the kernel names it (a store into a workspace need not)
        if mentions(code_lines(tile), var.name.id):
            prelude += [state.comment(var.span), Line(f"{var.name.id} = {bound[var.name.id]}")]
    # constexprs the launcher sets, after the spec's own: scalar inputs' signs, optional inputs
    # given, then 64-bit offsets and a folded grid
    flags = (*state.sign_flags.values(), *state.given_flags.values(), *(f for _, f in state.histograms.values()),
             *([INT64_FLAG] if state.int64 else []),
             *([FOLD_FLAG] if state.folded else []))
    if flags:
        constexprs = tuple(KernelParam(flag, True) for flag in flags)
        if params and params[-1][0].constexpr:
            params = (*params[:-1], (*params[-1], *constexprs))
        else:
            params = (*params, constexprs)
    tail = None
    if state.spec.split_tail:  # the body is the tile function's; the kernel picks the tile and calls it
        tail, dispatch = tail_split(state, params, prelude + tile)
        body = setup + dispatch
        if tail.descriptors:  # the tail descriptors follow the descriptors
            params = _after_descriptors(params, tuple(f"{t}_tail_desc" for t in tail.descriptors))
    elif state.spec.persistent:  # each program loops over tiles, NUM_SMS apart (tutorial 09)
        stages = f"num_stages={LOOP_STAGES}, " if pipelines_tiles(state.spec) else ""
        loop = f"tl.range({state.pid}, {state.num_tiles}, NUM_SMS, {stages}flatten=True)"
        body = [*prelude, *setup, *state.carried, ForLoop(state.tile_id, loop, tuple(tile)), *state.after_tiles]
    else:
        body = [*prelude, *setup, *tile]
    name = f"{state.spec.name.id}_kernel"
    doc = f"Triton kernel generated from {state.spec.path}; launch it through {state.spec.name.id}()."
    helpers = tuple(h for h in HELPERS if h in state.helpers)
    descriptors = tuple((t.name.id, state.descriptor_blocks.get(t.name.id, ())) for t in state.spec.arrays)
    return KernelPlan(
        name, params, tuple(body), doc, tune_plan(state), helpers, choice_plans(state.spec), state.bf16_dot,
        state.int64,
        descriptors if state.spec.access_style == "descriptor" else (),
        tuple(state.whole_blocks.items()),
        tuple(state.transposed.items()),
        state.split,
        tuple(state.sign_flags.items()),
        tuple(state.given_flags.items()),
        tail,
        state.pieces,
        tuple(lower_finish(state.spec, found, lower_kernel) for found in state.across.values()),
        state.folded,
        tuple(state.histograms.values()),
        tuple(t.name.id for t in state.spec.arrays if t.name.id in state.subtiled),
        tuple(block for dim, block in state.whole_blocks.items() if dim in state.contracted),
    )

