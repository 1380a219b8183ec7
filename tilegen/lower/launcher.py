"""Launcher lowering: a checked spec -> the host function as a :class:`LauncherPlan`.

The launcher checks every input (type, dtype, rank, device, shape: :mod:`tilegen.lower.host_checks`),
binds the size symbols, refuses shapes an unmasked or whole axis cannot cover, allocates the
outputs, passes the kernel's arguments (:mod:`tilegen.lower.arguments`, with the TMA descriptors of
:mod:`tilegen.lower.descriptors`), builds the grid and launches (:mod:`tilegen.lower.launch`); a
call like an earlier one takes its fast path (:mod:`tilegen.lower.fast`). Every error message
names the spec's tensor and dimension. The custom op's fake implementation and the body
``torch.compile`` traces reuse the same checks, sizes and arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.arguments import Arguments, lower_arguments, row_grid
from tilegen.lower.autograd import autograd_apply
from tilegen.lower.checked import default_of
from tilegen.lower.fast import FastPath, lower_fast_path
from tilegen.lower.grid import grid_text
from tilegen.lower.host_checks import bind_sizes, checked_names, derived_sizes, input_checks, inputs_table, shape_checks
from tilegen.lower.launch import finish_step, launch_name, launch_object, launch_ops, traced_launch, tune_key
from tilegen.lower.names import (
    absent_dtype,
    default_text,
    dtype_bindings,
    dtype_options,
    given_name,
    made_outputs,
    plan_name,
    size_symbols,
    torch_dtype,
    tuple_text,
)
from tilegen.lower.names import call_text as _call
from tilegen.lower.plan import (
    Comment,
    HostStage,
    IfBlock,
    KernelPlan,
    LauncherPlan,
    Line,
    Op,
    RowsPlan,
    StagePlan,
    WithBlock,
)

__all__ = ["LauncherRole", "lower_launcher"]


@dataclass(frozen=True)
class LauncherRole:
    """Which launcher of its module a launcher is (:func:`lower_launcher`); the spec's own by default.

    A TMA-descriptor launcher returns ``fallback`` (the call of the spec's pointer launcher)
    where descriptors cannot serve: a GPU before Hopper, a Triton without them, a tensor whose
    rows are not 16-byte aligned or whose last stride is not 1. A block-pointer launcher returns
    it on a Triton without block pointers (3.9 removed them). ``variant`` names such a second
    launcher of the same spec (``"pointers"``): it is part of its tune and compile keys, which
    share the module's caches with the first; ``uses`` names what the first launcher uses
    (for its docstring). With ``rows``, rows longer than ``_WHOLE_LIMIT`` return ``rows.call``,
    the same spec with its whole axis in loops (:mod:`tilegen.lower.rows`), before any output
    is made, and under ``torch.compile`` launch that kernel. With ``stages``, the inputs of
    ``spec`` that they return (:mod:`tilegen.lower.stages`) are not the launcher's: it calls the
    stages' launchers after its checks, in order. ``docstring`` replaces the one it writes.
    ``grad`` is what a call autograd would record does (grad mode on, a float input requiring
    grad): ``"route"`` returns through the module's ``torch.autograd.Function`` over the
    launchers (its keyword arguments passed as positional ones), running the spec's backward
    (:mod:`tilegen.lower.autograd`); ``"refuse"`` raises, naming the kernel (a spec without a
    backward); either way, under torch.compile the launcher's first step hands the call to its
    custom op. None (a second launcher of the spec) checks nothing. ``over``: the inputs the spec's
    backward may write its gradients over (``in place of``); the launcher takes
    ``inplace_backward=False``, passed to the Function. ``fast=False`` (a planned launcher that
    only another's plan reaches: the looped kernel's, whose launch the spec's launcher keeps
    under its own key) leaves out the launcher's own fast path: a direct call takes the full path.
    """

    fallback: str | None = None
    variant: str | None = None
    uses: str = ""
    rows: RowsPlan | None = None
    stages: tuple[StagePlan | HostStage, ...] = ()
    docstring: str | None = None
    grad: str | None = None
    over: tuple[str, ...] = ()
    fast: bool = True


@dataclass(frozen=True)
class _Signature:
    """The launcher's names: its inputs, keywords (name, default), the text of its arguments and of
    its call of itself, its annotated parameters and its return annotation."""

    inputs: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]
    arguments: str
    call: str
    annotated: tuple[str, ...]
    annotation: str


def _signature(spec: m.Spec) -> _Signature:
    """The :class:`_Signature` of the launcher of ``spec``."""
    tuned = set(spec.tuned_params)
    keywords = tuple((p.name.id, default_of(p)) for p in spec.params if p.name.id not in tuned)
    keywords += tuple((c.name.id, f'"{c.options[0].id}"') for c in spec.choices)
    keywords += tuple((v.name.id, "None") for v in spec.chosen_dtype_vars())
    inputs = tuple(t.name.id for t in spec.inputs)
    arguments = ", ".join([*inputs, *(f"{k}={k}" for k, _ in keywords)])
    annotated = [f"{t.name.id}: {python_type(t)}{default_text(t, ' = ')}" for t in spec.inputs]
    kinds = {p.name.id: "int" for p in spec.params} | {c.name.id: "str" for c in spec.choices}
    kinds |= {v.name.id: "torch.dtype | None" for v in spec.chosen_dtype_vars()}
    if keywords:
        annotated += ["*", *(f"{k}: {kinds[k]} = {default}" for k, default in keywords)]
    outputs = len(spec.outputs)
    annotation = "torch.Tensor" if outputs == 1 else f"tuple[{', '.join(['torch.Tensor'] * outputs)}]"
    return _Signature(inputs, keywords, arguments, f"{spec.name.id}({arguments})", tuple(annotated), annotation)


def _differentiable(spec: m.Spec) -> list[str]:
    """The tensor inputs autograd may follow: those of a float dtype (or a dtype variable)."""
    return [t.name.id for t in spec.inputs
            if not t.is_scalar and (isinstance(t.dtype, m.BoundDtype) or t.dtype.id in m.FLOAT_DTYPES)]


def _entry(spec: m.Spec, sig: _Signature, role: LauncherRole) -> list[Op]:
    """The launcher's first steps: ``config=`` runs the config it names (the runtime's
    ``Tuner.forcing``), and the spec's launcher hands a call under torch.compile to its custom op,
    before its fast path, whose key dynamo cannot trace."""
    name = spec.name.id
    forcing = compiling = None
    if _forces(spec, role):
        again = ", ".join([*sig.inputs, *(f"{k}={k}" for k, _ in sig.keywords),
                           *(["inplace=inplace"] if spec.in_place else []),
                           *(["inplace_backward=inplace_backward"] if role.over else [])])
        forcing = f'_tuner.forcing("{name}", config, lambda: {name}({again}))'
    if role.grad is not None:
        compiling = "_is_compiling()" + (" and not inplace" if spec.in_place else "")
    if forcing is not None and compiling is not None:  # one test where both are off (every call but these)
        why = "a config the caller names runs; torch.compile traces the custom op (its fake, its traced launch)"
        return [IfBlock(f"config is not None or {compiling}", why,
                        (Line(f"return {forcing} if config is not None else op({sig.arguments})"),))]
    if forcing is not None:
        return [IfBlock("config is not None", "a config the caller names: this call runs it",
                        (Line(f"return {forcing}"),))]
    if compiling is not None:
        why = "torch.compile traces the custom op: its fake and its traced launch, not this call's"
        return [IfBlock(compiling, why, (Line(f"return op({sig.arguments})"),))]
    return []


def _absent(spec: m.Spec, name: str) -> list[Op]:
    """An optional input the caller left out (None) becomes the runtime's broadcast tensor of its
    value (:func:`tilegen.runtime.absent`), shaped from the sizes and typed from the dtype of the
    inputs the caller gave, so that everything after (fast path, checks, launch) sees a tensor."""
    optional = [t for t in spec.inputs if t.optional]
    if not optional:
        return []
    sizes = dict(bind_sizes(spec, name)[2])
    device = next(t.name.id for t in spec.inputs if not t.is_scalar and not t.optional)
    ops: list[Op] = []
    for t in optional:
        dims = [d.text if isinstance(d, m.Number) else sizes.get(d.id, d.id) for d in t.dims]
        assert t.initial is not None
        made = f"lambda: ({tuple_text(dims)}, {absent_dtype(spec, t)}, {device}.device)"
        ops.append(Line(f"{given_name(t.name.id)} = {t.name.id} is not None"))
        ops.append(IfBlock(f"not {given_name(t.name.id)}", f"left out: every element {t.initial.text}",
                           (Line(f"{t.name.id} = _rt.absent({float(t.initial.text)!r}, {made})"),)))
    return ops


def _packed(spec: m.Spec) -> list[Op]:
    """``in weight: T[O, C, KH, KW] packed [KH, KW, O, C]``: the launcher's first step gives each
    packed input that memory order (:func:`tilegen.runtime.packed`: itself where it has it, else a
    copy), so the fast path, autograd, torch.compile's op and the kernel all see the packed tensor."""
    return [Line(f"{t.name.id} = _rt.packed({t.name.id}, {tuple_text([str(i) for i in t.packed_order])})"
                 f"  # packed [{', '.join(n.id for n in t.packed)}]: this order in memory, else a copy in it")
            for t in spec.inputs if t.packed]


def _forces(spec: m.Spec, role: LauncherRole) -> bool:
    """Whether the launcher takes ``config=``: the spec's own launcher of a tuned spec."""
    return spec.tune is not None and role.variant is None and not spec.name.id.startswith("_")


def _autograd(spec: m.Spec, sig: _Signature, role: LauncherRole) -> list[Op]:
    """A call autograd would record (grad mode on, a float input requiring grad): ``"route"``
    returns through the module's Function over the launchers (its keywords passed as positional
    arguments); ``"refuse"`` raises, naming the kernel (a spec without a backward)."""
    differentiable = _differentiable(spec)
    if role.grad is None or not differentiable:
        return []
    name = spec.name.id
    # the route comes before the checks (the Function's call of the launcher makes them): any input
    needs = " or ".join(f'getattr({x}, "requires_grad", False)' for x in differentiable)
    switch = ["inplace_backward"] if role.over else []
    # an optional input left out goes in as None: the backward's kernels then leave it out too
    inputs = [f"{t.name.id} if {given_name(t.name.id)} else None" if t.optional else t.name.id for t in spec.inputs]
    eager = f"{autograd_apply(name)}({', '.join([*inputs, *(k for k, _ in sig.keywords), *switch])})"
    action = Line(f'_rt.no_backward("{name}")') if role.grad != "route" else Line(f"return {eager}")
    why = ("autograd records this call: through a Function whose backward is the spec's"
           if role.grad == "route" else "autograd would record this call, and the spec has no backward")
    return [IfBlock(f"_grad_enabled() and ({needs})", why, (action,))]


def _refused(spec: m.Spec, role: LauncherRole) -> tuple[int, ...]:
    """The positions of the inputs autograd may follow, where the spec has no backward (a call
    autograd would record is refused, after the checks); none otherwise."""
    differentiable = _differentiable(spec)
    if role.grad != "refuse":
        return ()
    return tuple(i for i, t in enumerate(spec.inputs) if t.name.id in differentiable)


def _bound(spec: m.Spec) -> tuple[str, ...]:
    """What the checks bind that the launch reads: the device, the dtype variables read from an
    input, the scalars (as checked), the size symbols, the dtype variables the caller chooses
    and the derived sizes."""
    chosen = [v.name.id for v in spec.chosen_dtype_vars()]
    sizes = [size for size, _ in derived_sizes(spec, spec.name.id)[1]]
    return tuple(dict.fromkeys([*checked_names(spec), *chosen, *sizes]))


def _dims(tensor: m.Tensor) -> list[str]:
    """A tensor's dimensions as launcher text: sizes and literals."""
    return [] if tensor.zero_dim else [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]


def _empty(spec: m.Spec) -> str:
    """The condition of an output with no element: nothing to compute, no launch."""
    extents = {d.id for t in spec.outputs for d in t.dims if not isinstance(d, m.Number)}
    order = (*size_symbols(spec), *(t.name.id for t in spec.inputs if t.is_scalar))  # g over G: G a scalar
    return " or ".join(f"{d} == 0" for d in sorted(extents, key=order.index)) or "False"


def _nothing(spec: m.Spec) -> IfBlock:
    """An output with no element: nothing to compute, no launch."""
    returns = ", ".join(t.name.id for t in spec.outputs)
    return IfBlock(_empty(spec), "nothing to compute: no launch", (Line(f"return {returns}"),))


def _passed(spec: m.Spec, sig: _Signature, inplace: bool = False) -> str:
    """The launcher's arguments as it passes them on after filling in the optional inputs left out:
    those go in as None again (the plan fills them in, and tells the kernel they were left out);
    with ``inplace``, its ``inplace`` switch too."""
    given = [f"{t.name.id} if {given_name(t.name.id)} else None" if t.optional else t.name.id for t in spec.inputs]
    return ", ".join([*given, *(f"{k}={k}" for k, _ in sig.keywords), *(["inplace=inplace"] if inplace else [])])


def planned_launch(spec: m.Spec, kernel: KernelPlan, role: LauncherRole) -> bool:
    """Whether the launcher's full path, its op's fake implementation and its traced body are the
    runtime's (``Launch.run``, ``Launch.fake``, ``Launch.traced_call``) over the module's plan of a
    call (:func:`_plan`): a kernel the runtime launches (finish kernels included), reading
    through pointers or (the spec's own launcher, without finish kernels) through TMA
    descriptors, its plan returning its pointer kernel's where they cannot serve. The
    launcher's stages run in its plan (:func:`_plan`). A descriptor or staged launcher's op keeps
    its own fake implementation (:func:`own_fake`)."""
    descriptors = spec.access_style == "descriptor" and role.variant is None and not kernel.finishes
    return (kernel.plan_launched
            and (spec.access_style not in ("descriptor", "block_ptr") or descriptors))


def own_fake(spec: m.Spec, role: LauncherRole) -> bool:
    """Whether a planned launcher's op has a fake implementation of its own (``_<kernel>_fake``),
    not its plan's outputs: the plan of a TMA descriptor launcher reads the tensors' addresses
    (fake tensors have none), a staged launcher's launches its stages' kernels."""
    return spec.access_style == "descriptor" or bool(role.stages)


def _plan(spec: m.Spec, kernel: KernelPlan, role: LauncherRole, checks: list[Op], args: Arguments,
          fast: FastPath, staged: list[Op]) -> tuple[Op, ...]:
    """The body of the module's plan of a call of a planned launcher (:func:`planned_launch`): its checks,
    the looped launcher's plan for rows too long for one tile, new outputs, the kernel's arguments,
    and what the runtime's ``Launch`` needs of them (``_rt.Planned``): the launch, the device, the
    outputs, whether they are empty, the grid, the arguments, the constexprs, the outputs' shapes
    (what the fast path makes again), the tune key and each finish kernel's step (``_rt.Finish``:
    the kernel's arguments leave out its workspaces, which the runtime makes for the config it
    runs). A keyword may be a symbolic int under torch.compile, and a whole axis's extent a
    symbolic size: int() makes them constants. ``staged``: the calls of the launcher's stages,
    after the outputs (none where they are empty: the plan returns them, with nothing to launch)."""
    rows = role.rows
    route: list[Op] = []
    if rows is not None:
        why = f"rows too long for one tile: {rows.launcher}() loops over them"
        route = [IfBlock(f"{rows.dim} > _WHOLE_LIMIT", why,
                         (Line(f"return {plan_name(rows.launcher)}({_passed(spec, _signature(spec))})"),))]
    name = spec.name.id
    # over their inputs with inplace=True (marked overwritten by the runtime, when it launches)
    outputs = made_outputs(spec, lambda t: ", ".join(_dims(t)) or "()", mark=False)
    whole = [Line(kernel.whole_tile(dim, block)) for dim, block in kernel.whole_blocks]
    launch = args.launch
    key = tune_key(spec, kernel, role.variant) if spec.tune is not None else "None"
    made = {w for finish in kernel.finishes for w in finish.workspaces}  # the runtime's, for the config it runs
    # a descriptor launcher's tensors, and its pointer kernel's (one fast path launches either)
    gives_arrays = spec.access_style == "descriptor" or (role.variant == "pointers" and not role.fast)
    groups = (
        (launch_name(name), "device", tuple_text(t.name.id for t in spec.outputs), _empty(spec),
         f"lambda meta: {grid_text(spec, 'meta')}"),
        (tuple_text([a for group in launch.groups for a in group if a not in made]),),
        (f"dict({', '.join(launch.meta)})", tuple_text(fast.shapes), key),
        (tuple_text(finish_step(spec, finish) for finish in kernel.finishes),) if kernel.finishes else (),
        (f"arrays={tuple_text(t.name.id for t in spec.arrays)}",) if gives_arrays else (),
        (f"overwritten={tuple_text(t.in_place_of.id for t in spec.in_place if t.in_place_of)} if inplace else ()",)
        if spec.in_place else (),
    )
    tuned = set(spec.tuned_params)
    concrete = [Line(f"{p.name.id} = _rt.concrete({p.name.id})") for p in spec.params if p.name.id not in tuned]
    if staged:  # nothing to compute: no stage runs
        empty = (launch_name(name), "device", tuple_text(t.name.id for t in spec.outputs), "True", "None", "()",
                 "{}", "()", "None")
        nothing = IfBlock(_empty(spec), "nothing to compute: no launch", (Line(_call("return _rt.Planned", (empty,))),))
        staged = [nothing, *staged]
    return (*concrete, *_absent(spec, name), *checks, *route, *outputs, *whole, *staged, *args.setup,
            *args.flags[args.whole:], Line(_call("return _rt.Planned", groups)))


def _routes(spec: m.Spec, role: LauncherRole) -> tuple[list[Op], list[Op], list[Op]]:
    """What runs elsewhere: rows too long for one tile (the looped kernel, before the outputs are
    made); a Triton without block pointers (the pointer launcher); the stages' values."""
    rows = role.rows
    route: list[Op] = []
    if rows is not None:
        why = f"rows too long for one tile: {rows.launcher}() loops over them"
        route = [IfBlock(f"{rows.dim} > _WHOLE_LIMIT", why, (Line(f"return {rows.call}"),))]
    without: list[Op] = []
    if spec.access_style == "block_ptr":
        without.append(IfBlock("not _BLOCK_POINTERS", "a Triton without block pointers",
                               (Line(f"return {role.fallback}"),)))
    staged: list[Op] = []
    for stage in role.stages:
        if isinstance(stage, HostStage):
            staged.append(Comment("deterministic: the tokens sorted by their index, which the kernel walks in order"))
        elif not staged:
            staged.append(Comment("values every program uses: kernels of their own compute them first"))
        staged.append(Line(f"{', '.join(stage.values)} = {stage.call}"))
    return route, without, staged


def _traced(spec: m.Spec, kernel: KernelPlan, role: LauncherRole, sig: _Signature, args: Arguments,
            checks: list[Op]) -> tuple[Op, ...] | None:
    """The body torch.compile traces on the GPU: the launcher's ``checks`` (binding its sizes), new
    outputs, then the launch through ``wrap_triton`` with the launcher's arguments. None where
    torch cannot trace the launch: a TMA descriptor's, a split loop's sum, a finish kernel, stages
    (the parts and programs depend on the config the autotuner picks)."""
    if spec.access_style == "descriptor" or kernel.split is not None or kernel.finishes or role.stages:
        return None
    rows = role.rows
    return (
        *_constant(spec),
        *checks,
        *made_outputs(spec, lambda t: ", ".join(_dims(t)) or "()", inplace=False),
        _nothing(spec),
        *([IfBlock(f"{rows.dim} > _WHOLE_LIMIT", f"rows too long for one tile: {rows.launcher}()'s kernel",
                   rows.traced)] if rows is not None else []),
        *args.setup,
        # under torch.compile a whole axis's extent is a symbolic size: int() makes it a constant
        *(Line(kernel.whole_tile(dim, block)) for dim, block in kernel.whole_blocks),
        *args.flags[args.whole:],
        *traced_launch(spec, kernel, args.launch),
    )


def _constant(spec: m.Spec) -> tuple[Op, ...]:
    """Under torch.compile a keyword may arrive as a symbolic int; it is a constexpr: make it one."""
    tuned = set(spec.tuned_params)
    return tuple(Line(f"{p.name.id} = int({p.name.id})") for p in spec.params if p.name.id not in tuned)


def lower_launcher(spec: m.Spec, kernel: KernelPlan, role: LauncherRole = LauncherRole()) -> LauncherPlan:
    """The host launcher of a checked spec whose kernel is ``kernel``, with the two functions its
    PyTorch custom op needs (the fake implementation and, for pointer kernels, the body
    ``torch.compile`` traces).

    ``role`` says which launcher of the module it is (:class:`LauncherRole`).

    Every check is an inline condition on the fast path; only a failing check calls a helper of
    the runtime (``_rt.bad_input`` and friends) to build its message. A tuned launcher remembers the config
    the autotuner picked for each key and then launches the compiled kernel directly. Tensors on
    a GPU other than the current one run under ``torch.cuda.device`` of theirs; tuning and
    compiling hold the module's lock, so concurrent first calls tune and compile once.
    """
    values = {v for stage in role.stages for v in stage.values}
    full, spec = spec, dataclasses.replace(spec, tensors=tuple(t for t in spec.tensors if t.name.id not in values))
    name = spec.name.id
    sig = _signature(spec)
    first = next(t.name.id for t in spec.inputs if not t.is_scalar)
    head = input_checks(spec, name)
    device_guard = IfBlock(
        f"{first}.is_cuda and device.index != torch.cuda.current_device()",
        "tensors on another GPU: run there, on its current stream",
        (WithBlock("torch.cuda.device(device)", "", (Line(f"return {sig.call}"),)),),
    )
    middle, _, _ = shape_checks(spec, name, role.rows)
    shared = role.grad is not None  # the spec's own launcher: its op's fake and traced body check alike
    planned = planned_launch(spec, kernel, role)
    checks = [*head, *middle]
    checked: tuple[Op, ...] = ()
    separate = planned and own_fake(spec, role)  # the plan and its own fake implementation check
    if shared and middle and (not planned or separate):
        bound = ", ".join(_bound(spec))
        checked = (*head, *middle, Line(f"return {bound}"))
        head, middle = [Line(f"{bound}{',' if len(_bound(spec)) == 1 else ''} = _{name}_checked({sig.arguments})")], []
        checks = [*head, *middle] if separate else checks
    # sizes as separate arguments: torch parses them about 2 us faster than a shape tuple
    made = made_outputs(spec, lambda t: ", ".join(_dims(t)) or "()")  # over their inputs with inplace=True
    made_new = made_outputs(spec, lambda t: ", ".join(_dims(t)) or "()", inplace=False)  # the op's fake: new
    returns = ", ".join(t.name.id for t in spec.outputs)
    fallback = role.fallback  # a planned descriptor launcher returns its pointer kernel's plan
    if planned and fallback is not None:
        fallback = f"{plan_name(fallback.split('(')[0])}({_passed(spec, sig)})"
    args = lower_arguments(spec, full, kernel, fallback, planned)
    launch = args.launch
    # autograd's route goes before the fast path and the checks (the launcher its Function calls
    # takes them: once a call), so the fast path need not ask; a spec without a backward refuses
    # after the checks (a bad input's error comes first), and its fast path leaves such calls alone
    routed = role.grad == "route"
    fast_path = lower_fast_path(spec, kernel, sig.keywords, launch.groups[0],
                                tuple(a for group in launch.groups[1:] for a in group) + launch.constexprs,
                                _differentiable(spec) if role.grad == "refuse" else [], role.stages)
    route, without, staged = _routes(spec, role)
    grad = _autograd(spec, sig, role)
    absent = _absent(spec, name)
    body = [*_packed(spec), *_entry(spec, sig, role), *absent, *(grad if routed else ()),
            *(fast_path.ops if fast_path else ()), *head,
            *(() if routed else grad), device_guard, *middle, *route, *made, _nothing(spec), *without, *staged,
            *args.flags[:args.whole], *args.setup, *args.flags[args.whole:]]
    body += launch_ops(full, kernel, name, launch, sig.call, role.variant, fast_path)
    traced = _traced(spec, kernel, role, sig, args, [*absent, *head, *middle])
    plan: tuple[Op, ...] = ()
    if planned:  # the full path, the fake and the traced body: the runtime's, over the module's plan
        assert fast_path is not None, "a planned launcher without its fast path"
        plan = _plan(spec, kernel, role, checks, args, fast_path, staged)
        fast_ops = fast_path.ops if role.fast else ()
        key = "fast_key" if role.fast else "None"
        body = [*_packed(spec), *_entry(spec, sig, role), *absent, *(grad if routed else ()), *fast_ops,
                Line(f"return {launch_name(name)}.run({name}, {key}, {_passed(spec, sig, bool(spec.in_place))})")]
        traced = None
    switches = [*(["inplace: bool = False"] if spec.in_place else []),
                *(["inplace_backward: bool = False"] if role.over else []),
                *(["config: int | dict | None = None"] if _forces(spec, role) else [])]
    tuned = set(spec.tuned_params)
    return LauncherPlan(
        name=name,
        inputs=sig.inputs,
        keywords=sig.keywords,
        signature=", ".join(sig.annotated),
        own_signature=_switched(sig, switches),
        # the op's schema's switches too (its fake and traced body take them): inplace_backward is the Function's
        plan_signature=_switched(sig, [s for s in switches if not s.startswith("config")]),
        in_place=bool(spec.in_place),
        annotation=sig.annotation,
        call=sig.call,
        sizes=tuple(_sizes(spec, name)),
        outputs=tuple((t.name.id, tuple_text(_dims(t)), torch_dtype(t.dtype)) for t in spec.outputs),
        body=tuple(body),
        tuned=spec.tune is not None,
        num_sms=(spec.persistent and not row_grid(spec, kernel)) or bool(spec.split_tail),
        descriptors=spec.access_style == "descriptor",
        own_fake=planned and own_fake(spec, role),
        block_pointers=spec.access_style == "block_ptr",
        blocks=any(a.block is not None and a.block.id not in tuned for a in spec.axes()),
        returns=returns,
        docstring=role.docstring or launcher_docstring(spec, role.variant, role.uses, role.over, role.fast),
        fake=(*_constant(spec), *absent, *head, *middle, *made_new, Line(f"return {returns}")),
        traced=traced,
        # without block pointers the op runs the pointer launcher, opaque to torch.compile
        checked=checked,
        launch=launch_object(full, kernel, name, launch, planned, _refused(spec, role) if planned else ())
        if kernel.runtime_launched or planned else "",
        plan=plan,
        table=inputs_table(spec, name, role.rows),
        op_traced="None" if traced is None or planned else (
            f"_{name}_traced if _BLOCK_POINTERS else None" if spec.access_style == "block_ptr" else f"_{name}_traced"
        ),
    )


def _switched(sig: _Signature, switches: list[str]) -> str:
    """The annotated parameters of ``sig`` and then the keyword-only ``switches``."""
    return ", ".join([*sig.annotated, *([] if sig.keywords or not switches else ["*"]), *switches])


def _sizes(spec: m.Spec, name: str) -> list[tuple[str, str]]:
    """Each size symbol with the launcher text that gives it (an input's ``shape[i]``, a derived
    size's expression): what the reference binds."""
    return [*bind_sizes(spec, name)[2], *derived_sizes(spec, name)[1]]


def launcher_docstring(spec: m.Spec, variant: str | None = None, uses: str = "", over: tuple[str, ...] = (),
                       fast: bool = True) -> str:
    if variant is not None:
        name = spec.name.id.removeprefix("_").removesuffix(f"_{variant}")
        configs = ", with the same tune configs" if spec.tune is not None else ""
        called = f"{name}()'s plan returns this one's" if not fast else f"Called by {name}()"
        return (f"{name}() where its {uses} cannot serve: the kernel of {spec.path} through {variant}{configs}.\n"
                f"{called}, after its checks.")

    def describe(t: m.Tensor) -> str:
        dtype = m.as_written(t.dtype)
        if t.is_scalar:
            default = default_text(t, ", default ").removeprefix(", ")
            return f"{t.name.id}: {dtype} (a number{', ' + default if default else ''})"
        dims = "" if t.zero_dim else ", ".join(d.text if isinstance(d, m.Number) else d.id for d in t.dims)
        left_out = f" (optional: left out, every element is {t.initial.text})" if t.optional and t.initial else ""
        packed = (f" (copied into memory order [{', '.join(n.id for n in t.packed)}] unless it has it)"
                  if t.packed else "")
        return f"{t.name.id}: {dtype}[{dims}]{left_out}{packed}"

    plural = "s" if len(spec.outputs) > 1 else ""
    lines = [f"Run the kernel of {spec.path} and return its output{plural}.", ""]
    layout = (
        "tensors may have any strides: TMA descriptors on Hopper or newer for a unit last stride and "
        "16-byte aligned rows, pointers otherwise"
        if spec.access_style == "descriptor"
        else "tensors may have any strides"
    )
    lines.append("Inputs: " + "; ".join(describe(t) for t in spec.inputs) + f" ({layout}).")
    lines.append("Returns: " + "; ".join(describe(t) for t in spec.outputs) + " (new, contiguous).")
    for t in spec.in_place:
        if (written_over := t.in_place_of) is None:
            continue
        lines.append(f"With inplace=True, {t.name.id} is written over {written_over.id} and returned: "
                     f"{written_over.id}'s storage, its strides, its values overwritten (the custom op "
                     "always makes a new tensor).")
    chosen = spec.chosen_dtype_vars()
    for var, source in dtype_bindings(spec).items():
        if var in {v.name.id for v in chosen}:  # (its source is an output)
            continue
        options = " or ".join(next(dtype_options(t.dtype) for t in spec.inputs if t.name.id == source))
        lines.append(f"Dtypes: {var} is {options}, the dtype of {source}; one kernel, compiled for each.")
    for v in chosen:
        options = ", ".join(o.id for o in v.options)
        lines.append(f"Dtypes: {v.name.id}, of the outputs typed with it, is the caller's: keyword {v.name.id}= one of "
                     f"{options} (a torch dtype; None, the default, is {v.options[0].id}).")
    overrides = [f"{p.name.id}={default_of(p)}" for p in spec.params if p.name.id not in spec.tuned_params]
    overrides += [
        f"{c.name.id}=\"{c.options[0].id}\" (one of {', '.join(o.id for o in c.options)})" for c in spec.choices
    ]
    if overrides:
        lines.append("Keyword arguments: " + ", ".join(overrides) + ".")
    if over:
        names = " and ".join(over)
        lines.append(f"With inplace_backward=True, the backward writes the gradient of {names} over {names} "
                     "(flash-attn's inplace_backward: no second tensor of that size) where autograd computed it "
                     "(not a leaf, nor a view of one); its values are then gone, and a copy autograd saved of it "
                     "elsewhere is refused when its backward reads it.")
    if spec.tune is not None:
        lines.append(
            f"Tuned: {', '.join(spec.tuned_params) or 'the launch options'} come from {len(spec.tune.configs)} "
            f"autotune configs keyed on {spec.tune.key_as_written}, chosen as TILEGEN_TUNE says (none, quick "
            "or full); config= (an index, or a dict of a config's keywords) runs that one; untuned, a GPU runs "
            f"config {spec.tune.configs.index(spec.default_config())} and the Triton interpreter config "
            f"{spec.tune.configs.index(spec.interpreter_config())}, unless one is forced."
        )
    lines.append("Raises TypeError or ValueError naming the tensor and dimension on bad input.")
    return "\n".join(lines)


def python_type(t: m.Tensor) -> str:
    """The Python type of an input: a tensor, or a Python number for a scalar."""
    if not t.is_scalar:
        return "torch.Tensor | None" if t.optional else "torch.Tensor"
    return "float" if t.dtype.id in m.FLOAT_DTYPES else "int"
