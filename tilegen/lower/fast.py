"""A launcher's fast path (issue 34), lowered.

Every launcher opens with a key of what its launch depends on: its name; each input's shape,
strides, dtype, device and pointer alignment (``data_ptr() & 15``); each scalar's type and value
(but the value of a float the kernel only takes as an argument, which the fast path passes
again: :func:`free_scalars`); its keywords; the current device. A call that launched keeps,
under that key in its module's ``_FAST`` (``_rt.keep_launch``), everything it computed from the
key; a later call with the same key makes its outputs and launches as that call did, without the
checks, which inputs with the same key pass again. Anything else takes the full path, whose checks raise:

```
try:  # a call like an earlier one that launched (see _rt.keep_launch) launches as it did
    fast = _FAST.get(fast_key := ("softmax", x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15,
                                  _current_device()))
except (AttributeError, TypeError, RuntimeError):
    fast_key = fast = None
if fast is not None and not (_grad_enabled() and (x.requires_grad)):
    launch, grid, device_index, device, args, _y_shape = fast
    y = torch.empty(*_y_shape, device=device, dtype=torch.float32)
    launch(grid, device_index, x, y, *args)
    return y
return _softmax_launch.run(softmax, fast_key, x)  # the full path: the runtime's, over the module's plan
```

(the runtime's Launch keeps the launch under fast_key; a launcher that calls its Launch itself passes
it fast_key, and one that writes its launch out, :func:`tilegen.lower.launch.launch_ops`, ends with
``_keep_launch(_FAST, fast_key, (launch, grid, device_index, device, (M, N, ...), (M, N)), _tuner)``.)

What is kept after ``(launch, grid, device_index, device, args`` (the kernel's arguments after its
pointers): each output's shape; each finish kernel's workspace sizes and ``(launch, grid,
args)``; the TMA descriptors' templates (``_rt.descriptor_templates``; ``_rt.rebased`` makes them
again on the next call's tensors); a split loop's parts and the size of its workspace (the fast
path makes the workspace and, for more than one part, adds the partial sums up after the launch).
A launcher's stages run first on the fast path too, each through its own launcher. Not kept: a
near tie's trial config; a launcher taking TMA descriptors and finish kernels has no fast path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.finish import launch_args
from tilegen.lower.names import chosen_dtypes, dtype_bindings, given_name, made_outputs, tuple_text
from tilegen.lower.plan import FinishPlan, HostStage, IfBlock, KernelPlan, Line, Op, StagePlan, TryBlock


@dataclass(frozen=True)
class FastPath:
    """A launcher's fast path: ``ops`` open the launcher (the key of the call; for a key seen
    before, the outputs made and the kept launch run again); the rest says what the full path's
    launch keeps (:meth:`keep`): ``entry``, the text of the kernel's arguments after its pointers
    and each output's shape, then the finish kernels' workspaces and launches, the TMA
    ``descriptors`` (made on ``arrays``) and a ``split`` loop's parts and workspace size."""

    ops: tuple[Op, ...]
    entry: str
    finishes: tuple[FinishPlan, ...]
    descriptors: tuple[str, ...]
    arrays: tuple[str, ...]
    split: bool
    tuned: bool
    shapes: tuple[str, ...] = ()  # each output's shape (but a 0-dim one's), as text: what the fast path makes again

    def keep(self, launcher: str, index: str) -> list[Op]:
        """The full path's line keeping its launch, ``launcher`` on device ``index`` (``"None"``:
        under the interpreter, whose finish kernels are JIT functions) for the fast path."""
        if index == "None":
            finishes = [f"(_rt.interpreted({f.kernel.name}), {f.grid}, {tuple_text(launch_args(f)[1])})"
                        for f in self.finishes]
        else:
            finishes = [f"({f.output}_finish, {f.output}_finish_grid, {tuple_text(launch_args(f)[1])})"
                        for f in self.finishes]
        kept = [self.entry, *(f.size for f in self.finishes for _ in f.workspaces), *finishes]
        if self.descriptors:
            kept.append(f"_rt.descriptor_templates({tuple_text(self.descriptors)}, {tuple_text(self.arrays)})")
        if self.split:
            kept += ["parts", "partials.numel()"]
        tuner = ", _tuner" if self.tuned else ""
        return [Line(f"_keep_launch(_FAST, fast_key, ({launcher}, grid, {index}, device, {', '.join(kept)}){tuner})")]


def lower_fast_path(
    spec: m.Spec,
    kernel: KernelPlan,
    keywords: tuple[tuple[str, str], ...],
    pointers: tuple[str, ...],
    args: tuple[str, ...],
    differentiable: list[str],
    stages: tuple[StagePlan | HostStage, ...] = (),
) -> FastPath | None:
    """The fast path of the launcher of ``spec`` (whose inputs are the launcher's: without its
    stages' values) launching ``kernel`` with ``pointers`` (its first arguments: tensors,
    descriptors, workspaces) and then ``args`` (the rest, constexprs included), taking
    ``keywords``; None for a kernel taking TMA descriptors and finish kernels. A call autograd
    would record (grad mode on, one of the ``differentiable`` inputs requiring grad: given for a
    spec without a backward, which refuses it after the checks) takes the full path; a spec with a
    backward routes such a call to its Function before the fast path. ``stages`` run first, each
    through its own launcher. On the H100 a softmax call at 8 x 512 costs 16.7 us on the host
    through it against 21.5 without, in one process (Triton's launch of the compiled kernel alone
    is 5.4 us, torch.empty 2.2)."""
    descriptors = tuple(a for a in pointers if a.endswith("_desc"))
    if descriptors and kernel.finishes:
        return None
    free = free_scalars(spec, kernel, args)
    terms = [f'"{spec.name.id}"']  # one group of terms per line
    for t in spec.inputs:
        x = t.name.id
        if x in free:  # a float's value is an argument the launch passes again: not part of the key
            terms.append(f"type({x}), {x} if type({x}) is not float else None")
            continue
        terms.append(f"{x}, type({x})" if t.is_scalar else
                     f"{x}.shape, {x}.stride(), {x}.dtype, {x}.device, {x}.data_ptr() & 15"
                     + (f", {given_name(x)}" if t.optional else ""))
    if keywords:
        terms.append(", ".join(k for k, _ in keywords))
    if spec.in_place:
        terms.append("inplace")
    terms.append("_current_device()")
    key = f"fast = _FAST.get(fast_key := ({', '.join(terms)}))"  # one line where short, else a group of terms a line
    if len(key) > 120:  # (the line within about 130 characters, indented)
        key = "\n".join(["fast = _FAST.get(fast_key := ("] + [f"    {term}," for term in terms] + ["))"])
    shaped = [t for t in spec.outputs if not t.zero_dim]
    kept = [f"_{t.name.id}_shape" for t in shaped]
    kept += [f"_{w}_size" for f in kernel.finishes for w in f.workspaces]
    kept += [f"_{f.output}_finish" for f in kernel.finishes]
    kept += ["descriptors"] if descriptors else []
    kept += ["parts", "_partials_size"] if kernel.split is not None else []  # a split loop's parts, its workspace
    body: list[Op] = [Line(f"launch, grid, device_index, device, args{''.join(', ' + n for n in kept)} = fast")]
    sources = dtype_bindings(spec)
    chosen = {v.name.id: v.options[0].id for v in spec.chosen_dtype_vars()}
    read = [t.dtype.var for t in spec.outputs if isinstance(t.dtype, m.BoundDtype)]
    read += [first for first in chosen.values() if first in sources]  # G in T, f32: T, its default, first
    for var in dict.fromkeys(read):
        if var not in chosen:
            body.append(Line(f"{var} = {sources[var]}.dtype"))
    body += chosen_dtypes(spec, spec.name.id, checked=False)
    body += made_outputs(spec, lambda t: "()" if t.zero_dim else f"*_{t.name.id}_shape")
    for finish in kernel.finishes:
        body += [Line(f"{w} = torch.empty(_{w}_size, device=device, dtype=torch.float32)") for w in finish.workspaces]
    body += [Line(f"{', '.join(stage.values)} = {stage.call}") for stage in stages]
    if kernel.split is not None:  # a workspace of partial sums where the loop runs in parts
        body.append(partials_line("_partials_size"))
    passed = ", ".join(pointers)
    if descriptors:  # the kept descriptors' shapes, strides and blocks on this call's tensors
        rest = [a for a in pointers if not a.endswith("_desc")]
        arrays = tuple_text(t.name.id for t in spec.arrays)
        passed = ", ".join([f"*_rebased(descriptors, {arrays})", *rest])
    body.append(Line(f"launch(grid, device_index, {passed}, {passed_args(free)})"))
    if kernel.split is not None:
        body.append(sum_parts(kernel))
    for finish in kernel.finishes:  # each merges its workspaces' partials into its output
        body += [Line(f"finish, finish_grid, finish_args = _{finish.output}_finish"),
                 Line(f"finish(finish_grid, device_index, {', '.join(launch_args(finish)[0])}, *finish_args)")]
    body.append(Line(f"return {', '.join(t.name.id for t in spec.outputs)}"))
    grad = " or ".join(f"{x}.requires_grad" for x in differentiable)
    condition = f"fast is not None and not (_grad_enabled() and ({grad}))" if grad else "fast is not None"
    ops = (
        TryBlock(
            "a call like an earlier one that launched (see _rt.keep_launch) launches as it did",
            (Line(key),),
            "(AttributeError, TypeError, RuntimeError)",
            (Line("fast_key = fast = None  # not tensors (or without storage), or a scalar not hashable: "
                  "the checks say why"),),
        ),
        IfBlock(condition, "", tuple(body)),
    )
    outputs = [tuple_text([d.text if isinstance(d, m.Number) else d.id for d in t.dims]) for t in shaped]
    return FastPath(ops, ", ".join([tuple_text(args), *outputs]), kernel.finishes, descriptors,
                    tuple(t.name.id for t in spec.arrays), kernel.split is not None, spec.tune is not None,
                    tuple(outputs))


def free_scalars(spec: m.Spec, kernel: KernelPlan, args: tuple[str, ...]) -> dict[str, int]:
    """The float scalar inputs whose value the launch only passes on, each with its index in the
    kept arguments (``args``, texts, after the pointers): a kernel argument of its own among the
    first, single ones, in no other argument of the kernel or of a finish kernel, no sign flag
    derived from it (:mod:`tilegen.lower.scaled`). The fast path's key holds their type, not their
    value, and the fast path passes the call's values: an optimizer's learning rate or step
    changing each call still launches through the fast path (Triton does not specialize on floats)."""
    floats = {t.name.id for t in spec.inputs
              if t.is_scalar and isinstance(t.dtype, m.Name) and t.dtype.id in ("f16", "bf16", "f32", "f64")}
    floats -= {scalar for scalar, _ in kernel.sign_flags}
    others = [text for text in args if text not in floats]  # a value made from one is kept as it was
    others += [text for finish in kernel.finishes for text in launch_args(finish)[1]]
    floats -= {word for text in others for word in floats if re.search(rf"\b{word}\b", text)}
    free: dict[str, int] = {}
    for index, text in enumerate(args):
        if text.startswith("*") or "," in text:  # more than one argument: later indices are unknown
            break
        if text in floats:
            free[text] = index
    return free


def passed_args(free: dict[str, int]) -> str:
    """The kept arguments as the fast path passes them: ``*args``, with the ``free`` scalars
    (:func:`free_scalars`) the call's, as floats (the full path's check makes an int one)."""
    parts, start = [], 0
    for name, index in sorted(free.items(), key=lambda item: item[1]):
        if index > start:
            parts.append(f"*args[{start}:{index}]")
        parts.append(f"float({name})")
        start = index + 1
    parts.append(f"*args[{start}:]" if start else "*args")
    return ", ".join(parts)


def partials_line(size: str) -> Line:
    """The split loop's f32 workspace of ``size`` elements (text) where the loop runs in parts, an
    empty one (``_no_partials``) where it runs in one."""
    return Line(f"partials = torch.empty({size}, device=device, dtype=torch.float32) if parts > 1 "
                "else _no_partials(device)")


def sum_parts(kernel: KernelPlan) -> IfBlock:
    """The partial sums added up into the output, where the loop ran in parts."""
    assert kernel.split is not None, "a kernel without a split loop"
    return IfBlock(
        "parts > 1",
        "partial sums over parts of the loop: added up",
        (Line(f"_sum_partials(partials, {kernel.split.output}, parts)"),),
    )
