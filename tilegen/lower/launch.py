"""A launcher's launch, lowered: the grid, the kernel's arguments as text, and the call of the
module's runtime ``Launch`` (:func:`launch_object`, :func:`runtime_launch`: it tunes, launches in the
interpreter or compiles and launches directly, and keeps the launch for the fast path; a planned
launcher's finish kernels too, from the steps its plan gives, :func:`finish_step`), or, for a
kernel with a split loop, a split tail or row pieces, or finish kernels a launcher that is not
planned launches, those steps written out (the tuning of a tuned kernel, the interpreter's JIT
call and the compiled kernel's direct launch with its specialization key, the workspaces and
launches of finish kernels and a split loop's sum); and the launch ``torch.compile`` traces
(``Launch.traced``, ``wrap_triton``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.descriptors import make_descriptors, piece_descriptors, set_blocks, smallest_block, tail_descriptors
from tilegen.lower.fast import FastPath, partials_line, sum_parts
from tilegen.lower.finish import launch_args
from tilegen.lower.grid import cdiv, grid_text
from tilegen.lower.kernel import FOLD_FLAG, INT64_FLAG, LOOP_STAGES
from tilegen.lower.names import call_text as _call
from tilegen.lower.names import given_name, plan_name, tuple_text
from tilegen.lower.plan import Comment, FinishPlan, IfBlock, KernelPlan, Line, Op, WithBlock


@dataclass(frozen=True)
class LaunchArgs:
    """The kernel's arguments as launcher text.

    ``groups`` and ``meta`` are the JIT call's positional groups and constexpr keywords;
    ``constexprs`` the constexpr values in signature order (the compiled kernel's launcher takes
    every argument by position); ``pointers`` and ``ints`` what Triton specializes on.
    """

    groups: tuple[tuple[str, ...], ...]
    meta: tuple[str, ...]
    constexprs: tuple[str, ...]
    pointers: tuple[str, ...]
    ints: tuple[str, ...]


def constexpr_values(spec: m.Spec, kernel: KernelPlan) -> tuple[str, ...]:
    """The value of every constexpr parameter, in the kernel's signature order: tuned ones from
    the remembered ``config``, choices from their keyword, INT64_OFFSETS from ``int64``, FOLDED_GRID
    from ``folded``."""
    tuned = set(spec.tuned_params)
    choices = {c.constexpr: c.name.id for c in spec.choices}
    choices |= {flag: given_name(tensor) for tensor, flag in kernel.given_flags}
    values: list[str] = []
    for group in kernel.param_groups:
        for param in group:
            if not param.constexpr:
                continue
            if param.name in tuned or param.name == LOOP_STAGES:
                values.append(f'config["{param.name}"]')
            elif param.name == INT64_FLAG:
                values.append("int64")
            elif param.name == FOLD_FLAG:
                values.append("folded")
            else:
                values.append(choices.get(param.name, param.name))
    return tuple(values)


def specialization_key(spec: m.Spec, launch: LaunchArgs, variant: str | None = None, tail_desc: bool = False) -> str:
    """The compiled-kernel cache key: what Triton's JIT specializes a kernel on (the current
    device, the pointers' 16-byte alignment, ``_int_class`` of every integer, the constexpr
    values), plus the tune config; one group of terms per line."""
    first = ["device_index"] + (["config_index"] if spec.tune is not None else [])
    first += [f'"{variant}"'] if variant else []  # a second launcher of the spec shares _COMPILED
    first += [v.name.id for v in spec.dtype_vars]  # the dtypes the kernel is specialized for
    lines = [", ".join(first)]
    if launch.pointers:
        lines.append(", ".join(f"{p}.data_ptr() % 16" for p in launch.pointers))
    if launch.ints:
        lines.append(f"*map(_int_class, {tuple_text(launch.ints)})")
    constexprs = [c for c in launch.constexprs if not c.startswith("config[")]
    if constexprs:
        lines.append(", ".join(constexprs))
    if tail_desc:  # the split of the last wave, which the kernel reads from its tail descriptors
        lines.append("tail_m, tail_n")
    return "\n".join(["key = ("] + [f"    {line}," for line in lines] + [")"])


def tune_key(spec: m.Spec, kernel: KernelPlan, variant: str | None = None) -> str:
    """A tuned launcher's tune key: the device, the variant's word, the spec's tune key, each operand
    layout's flag and each dtype variable (each layout and dtype tunes on its own)."""
    assert spec.tune is not None, "tune_key of an untuned spec"
    flags = [flag for _, flag in kernel.transposed]
    dtypes = [v.name.id for v in spec.dtype_vars]
    return tuple_text(
        ["device", *([f'"{variant}"'] if variant else []), *(spec.tune.key_text(k.id) for k in spec.tune.key),
         *flags, *dtypes]
    )


def launch_name(name: str) -> str:
    """The name of launcher ``name``'s :class:`tilegen.runtime.Launch` in its module."""
    return f"_{name.lstrip('_')}_launch"


def launch_object(spec: m.Spec, kernel: KernelPlan, name: str, launch: LaunchArgs, planned: bool = False,
                  refused: tuple[int, ...] = ()) -> str:
    """The module's :class:`tilegen.runtime.Launch` of launcher ``name`` (``spec`` with its stages'
    values), which launches ``kernel``: the fast path passes its first group of arguments (the
    tensors, or their descriptors) itself; a tuned TMA kernel's configs set the descriptors'
    block shapes (``_descriptor_blocks``), and with dtype variables each tune starts afresh. A
    ``planned`` launcher's full path is the launch's (``plan``: the module's plan of a call), which
    refuses a call autograd would record where the inputs at positions ``refused`` require grad;
    its kernel's finish kernels are the launch's too (``finishes``: their names)."""
    tuned = spec.tune is not None
    arguments = ["globals()", f'"{kernel.name}"', f'"{name}"', f"pointers={len(launch.groups[0])}"]
    arguments += ["tuned=True"] if tuned else []
    arguments += ["blocks=True"] if tuned and kernel.descriptors else []
    arguments += ["retune=True"] if tuned and kernel.descriptors and spec.dtype_vars else []
    arguments += [f"plan={plan_name(name)}"] if planned else []
    arguments += [f"refuse={tuple_text(map(str, refused))}"] if refused else []
    finishes = tuple_text(f'"{f.kernel.name}"' for f in kernel.finishes)  # its finish kernels, run after it
    arguments += [f"finishes={finishes}"] if kernel.finishes else []
    return f"{launch_name(name)} = _rt.Launch({', '.join(arguments)})"


def runtime_launch(spec: m.Spec, kernel: KernelPlan, name: str, launch: LaunchArgs, call: str,
                   variant: str | None, fast: FastPath | None) -> list[Op]:
    """The launch through the module's :class:`tilegen.runtime.Launch` (:func:`launch_object`): the
    fast-path key it keeps the launch under, the device, the grid as a function of the constexprs,
    the kernel's positional arguments and constexprs, what the fast path makes again (the outputs'
    shapes); a tuned kernel's tune key and ``call`` (this launcher's call of itself, which settles
    the autotuner's near ties; an in-place call's tune runs it first, on new outputs); a TMA
    kernel's tensors (its descriptors are kept as templates on them)."""
    arguments = tuple_text([a for group in launch.groups for a in group])
    kept = tuple_text(fast.shapes) if fast is not None else "()"
    keywords: list[str] = []
    if spec.tune is not None:
        keywords += [f"tune_key={tune_key(spec, kernel, variant)}", f"again=lambda: {call}"]
        keywords += [f"first=(lambda: {call}) if inplace else None"] if spec.in_place else []
    if kernel.descriptors and fast is not None:
        keywords.append(f"arrays={tuple_text(t.name.id for t in spec.arrays)}")
    groups = (("fast_key" if fast is not None else "None", "device", f"lambda meta: {grid_text(spec, 'meta')}"),
              (arguments,), (f"dict({', '.join(launch.meta)})", kept), tuple(keywords))
    return [Line(_call(launch_name(name), groups)), Line(f"return {', '.join(t.name.id for t in spec.outputs)}")]


def tune_ops(spec: m.Spec, kernel: KernelPlan, name: str, launch: LaunchArgs, call: str,
             variant: str | None = None) -> list[Op]:
    """A tuned launcher's config (``config``, its keywords): the one remembered for this call's tune
    key (device, the spec's tune key, operand layouts, dtypes), else, once per key under the tuner's
    lock, the autotuner's (``_rt.autotune``; or the one in tilegen's cache on disk), whose near ties
    are settled by timing ``call`` (this launcher's call of itself) at each (``_tuner.settle_ties``). The
    call that tuned returns its outputs (those of ``call`` again where finish kernels merged the
    partials of another config)."""
    assert spec.tune is not None, "tune_ops of an untuned spec"
    returns = ", ".join(t.name.id for t in spec.outputs)
    jit = kernel.name
    ops: list[Op] = []
    dtypes = [v.name.id for v in spec.dtype_vars]
    # Triton's autotuner keys its own cache on tensor dtypes, which a descriptor does not
    # show: a dtype variable's other dtypes must not take a config tuned for the first
    retune = [Line(f"{jit}.cache.clear()  # tilegen's tune key tells the dtypes apart; Triton's cannot")] if (
        dtypes and kernel.descriptors) else []
    key = tune_key(spec, kernel, variant)
    tune_launch: list[Op] = [Line(f"grid = lambda meta: {grid_text(spec, 'meta')}")]
    summed: list[Op] = []
    if kernel.split is not None:  # a workspace for the config that splits the most; the best one's sum
        assert kernel.tune is not None, "a tuned spec's kernel without its configs"
        tune_launch = [
            Line(f"parts = max(_split_grid({split_args(spec, kernel, 'config.kwargs')})[1] "
                 f"for config in {kernel.tune.name})  # the most parts any config runs"),
            workspace(kernel),
            Line(f"grid = lambda meta: _split_grid({split_args(spec, kernel, 'meta')})[0]"),
        ]
        summed = [
            Line(f"config = {jit}.best_config.kwargs"),
            Line(f"_, parts = _split_grid({split_args(spec, kernel, 'config')})"),
            sum_parts(kernel),
        ]
    if kernel.tail is not None and kernel.descriptors:  # each config's split: the pre_hook sets their blocks
        tune_launch = [*make_descriptors(spec, kernel, tail=True), *tune_launch]
    if kernel.pieces is not None:  # each config's second row piece: the pre_hook sets their blocks
        tune_launch = [*make_descriptors(spec, kernel, piece=True), *tune_launch]
    tune_launch += workspaces(spec, kernel, smallest=True)
    tune_launch.append(Line(_call("_rt.autotune", ((jit, "grid"), *launch.groups, launch.meta))))
    ops += [
        Line(f"tune_key = {key}"),
        Line("config_index = _tuner.tuned.get(tune_key)"),
        *([IfBlock("config_index is None and inplace",
                   "tuned with new outputs first: the trials must not read what they overwrote",
                   (Line(call), Line("config_index = _tuner.tuned.get(tune_key)")))]
          if spec.in_place else []),
        IfBlock(
            "config_index is None",
            "first call with these sizes on this device (one thread at a time)",
            (
                WithBlock(
                    "_tuner.lock",
                    "",
                    (
                        Line(f'config_index = _tuner.tuned_index("{name}", tune_key)'),
                        IfBlock(
                            "config_index is None",
                            "tune, and remember the choice on disk",
                            (
                                *retune,
                                *tune_launch,
                                *summed,
                                Line(f"_tuner.remember(tune_key, _tuner.settle_ties(tune_key, {jit}, lambda: {call}))"),
                                # the partials of the config picked (the last run's may be another's)
                                Line(f"return {call if kernel.finishes else returns}"),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Line("config = _CONFIGS[config_index].kwargs"),
    ]
    return ops


def launch_ops(spec: m.Spec, kernel: KernelPlan, name: str, launch: LaunchArgs, call: str,
               variant: str | None = None, fast: FastPath | None = None) -> list[Op]:
    """The launch. Under the interpreter: Triton's JIT call. On the GPU: the compiled kernel for
    this specialization, made once by ``_rt.compile_launch`` (Triton's ``warmup``: its compile and
    cache) and launched by the runtime's ``launcher`` (the fused-softmax tutorial's
    ``compiled[grid](*args)`` without its per-call lookups), which skips the JIT's per-call
    binding and cache lookup. A tuned kernel runs the autotuner on the first call per device and
    sizes (``_rt.autotune``; or takes the config from tilegen's cache on disk), settles the
    autotuner's near ties by timing ``call`` (this launcher's call of itself) at each
    (``_tuner.settle_ties``), and after that its remembered config is one more part of the key. With
    ``fast`` (:mod:`tilegen.lower.fast`), the launch is kept for the launcher's fast path."""
    if kernel.runtime_launched:
        return runtime_launch(spec, kernel, name, launch, call, variant, fast)
    returns = ", ".join(t.name.id for t in spec.outputs)
    jit = kernel.name
    ops: list[Op] = []
    if spec.tune is not None:
        ops += tune_ops(spec, kernel, name, launch, call, variant)
        jit = f"{kernel.name}.fn"
    if kernel.pieces is not None:
        ops += piece_descriptors(spec, kernel)
    if kernel.descriptors and spec.tune is not None:
        ops.append(set_blocks(spec, kernel))
    if kernel.descriptors and kernel.tail is not None:
        ops += tail_descriptors(spec, kernel)
    summed = finished(kernel)
    if kernel.split is None:
        ops.append(Line(f"grid = {grid_text(spec, 'config')}"))
    else:  # the loop's parts, and their workspace
        ops += [Line(f"grid, parts = _split_grid({split_args(spec, kernel, 'config')})"), workspace(kernel)]
        summed = [sum_parts(kernel)]
    ops += workspaces(spec, kernel)
    config = (("**config",) if spec.tune is not None else ())
    keep = fast.keep if fast is not None else (lambda launcher, index: [])  # the launch kept for the fast path

    ops.append(
        IfBlock(
            "_INTERPRET",
            "Triton's interpreter runs the kernel on the CPU",
            (
                Line(_call(f"{jit}[grid]", (*launch.groups, (*launch.meta, *config)))),
                *summed,
                *keep(f"_rt.interpreted({jit})", "None"),
                Line(f"return {returns}"),
            ),
        )
    )
    tail_desc = kernel.tail is not None and bool(kernel.tail.carrier)
    options = ("**_CONFIGS[config_index].all_kwargs()",) if spec.tune is not None else ()
    ops += [
        Comment("the compiled kernel for Triton's specialization of these arguments (compiled on a new one)"),
        Line("device_index = device.index"),
        Line(specialization_key(spec, launch, variant, tail_desc)),
        Line(_call("launch = _COMPILED.get(key) or _rt.compile_launch",
                   (("_COMPILED", "key", jit, "grid"), *launch.groups, (*launch.meta, *options)))),
        Line(_call("launch", (("grid", "device_index"), *launch.groups, launch.constexprs))),
        *(finished_compiled(kernel) if kernel.finishes else summed),
        *keep("launch", "device_index"),
        Line(f"return {returns}"),
    ]
    return ops


def split_args(spec: m.Spec, kernel: KernelPlan, config: str) -> str:
    """What ``_split_grid`` takes: the sizes and block sizes, tuned block sizes read from the dict
    named ``config``, the device, and on a plain grid ``folded`` (its tiles along program id 0 alone)."""
    tuned = set(spec.tuned_params)
    assert kernel.split is not None, "a kernel without a split loop"
    dims = (*kernel.split.tiles, kernel.split.loop)
    blocks = [f'{config}["{b}"]' if b in tuned else b for _, b in dims]
    return ", ".join([*(d for d, _ in dims), *blocks, "device", *(["folded"] if kernel.folded else [])])


def workspaces(spec: m.Spec, kernel: KernelPlan, smallest: bool = False) -> list[Op]:
    """The f32 workspaces of the partials of each reduction across programs: one row per
    program along the reduced axes (counted with ``config``'s blocks, or with ``smallest``, the
    least block of any config: room for every config the autotuner runs)."""
    ops: list[Op] = []
    for finish in kernel.finishes:
        along = ", ".join(d for d, _ in finish.programs)
        walking = "walking" if spec.persistent else "along"  # a persistent program walks its tiles
        count = program_count(spec, finish, "config", smallest)
        ops.append(Line(f"{finish.count} = {count}  # programs {walking} {along}"))
        for name in finish.workspaces:
            ops.append(Line(f"{name} = torch.empty({finish.size}, device=device, dtype=torch.float32)"))
    return ops


def program_count(spec: m.Spec, finish: FinishPlan, config: str, smallest: bool = False, sms: bool = True) -> str:
    """The number of programs whose partials ``finish`` merges, as launcher text: the product of
    the program counts along its reduced axes, tuned blocks read from the dict named ``config``
    (with ``smallest``, each the least of any config's); a persistent grid's at most one per SM
    (without ``sms``, the product alone: a bound that needs no ``NUM_SMS``)."""
    tuned = set(spec.tuned_params)
    counts: list[str] = []
    for dim, block in finish.programs:
        if block is not None and block in tuned:
            block = smallest_block(spec, block) if smallest else f'{config}["{block}"]'
        counts.append(dim if block is None else f"({cdiv(dim, block)})")
    return f"min(NUM_SMS, {' * '.join(counts)})" if spec.persistent and sms else " * ".join(counts)


def finish_step(spec: m.Spec, finish: FinishPlan) -> str:
    """``finish`` as a planned launcher's plan gives it to the runtime (``_rt.Finish``): its output,
    its workspaces' number and elements per program, the programs as a function of the constexprs,
    the finish kernel's grid and its arguments after its pointers as a function of the programs."""
    pointers, rest, _, _ = launch_args(finish)
    assert pointers == [*finish.workspaces, finish.output], "a finish kernel takes its workspaces, then its output"
    return (f"_rt.Finish({finish.output}, {len(finish.workspaces)}, {finish.elements}, "
            f"lambda meta: {program_count(spec, finish, 'meta')}, {finish.launch_grid}, "
            f"lambda {finish.count}: {tuple_text(rest)})")


def finished(kernel: KernelPlan) -> list[Op]:
    """The finish kernels' launches through Triton's JIT (the interpreter's): each merges its
    workspaces' partials into its output."""
    return [Line(f"{f.kernel.name}[{f.grid}]({', '.join(f.args)})") for f in kernel.finishes]


def finished_compiled(kernel: KernelPlan) -> list[Op]:
    """The finish kernels' launches on the GPU: each compiled once per specialization (as the
    spec's kernel is: ``_rt.compile_launch``) and launched directly, without the JIT's per-call
    binding (about 15 us a call)."""
    ops: list[Op] = []
    for finish in kernel.finishes:
        name = f"{finish.output}_finish"
        pointers, rest, ints, constexprs = launch_args(finish)
        key = ", ".join([f'"{finish.kernel.name}"', "device_index", *(f"{p}.dtype" for p in pointers),
                         f"*map(_int_class, {tuple_text(ints)})", *constexprs])  # the pointers' dtypes: Triton's too
        ops += [
            Line(f"{name}_grid = {finish.launch_grid}  # the launch takes three sizes"),
            Line(f"{name}_key = ({key})"),
            Line(f"{name} = _COMPILED.get({name}_key) or _rt.compile_launch(_COMPILED, {name}_key, "
                 f"{finish.kernel.name}, {name}_grid, {', '.join(finish.args)})"),
            Line(f"{name}({name}_grid, device_index, {', '.join([*pointers, *rest])})"),
        ]
    return ops


def workspace(kernel: KernelPlan) -> Line:
    """The f32 workspace of the partial sums: ``parts`` times the output (an empty one for one part)."""
    assert kernel.split is not None, "a kernel without a split loop"
    return partials_line(f"parts * {' * '.join(d for d, _ in kernel.split.tiles)}")


def traced_launch(spec: m.Spec, kernel: KernelPlan, launch: LaunchArgs) -> list[Op]:
    """The launch as ``torch.compile`` traces it: ``wrap_triton(kernel)[grid](...)``, Triton's
    own call (a tuned kernel through its autotuner, whose configs Inductor then times)."""
    returns = ", ".join(t.name.id for t in spec.outputs)
    grid = f"lambda meta: {grid_text(spec, 'meta')}" if spec.tune is not None else grid_text(spec)
    arguments = tuple_text([a for group in launch.groups for a in group])
    return [
        Line(f"{launch_name(spec.name.id)}.traced({grid}, {arguments}, dict({', '.join(launch.meta)}))"),
        Line(f"return {returns}"),
    ]
