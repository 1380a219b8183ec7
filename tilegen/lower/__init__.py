"""Lowering: a checked :class:`~tilegen.model.Spec` -> a :class:`ModulePlan` of plain strings.

Lowering decides every name, offset, mask, pointer expression and launcher check; the Jinja
templates only place what it computed. One module per part of the generated file:

* :mod:`tilegen.lower.passes`: the spec-to-spec rewrites, in the order they run;
* :mod:`tilegen.lower.kernel`: the ``@triton.jit`` kernel as a list of ops (signature, grid
  mapping, loops, statements), plus its autotune configs and helpers (with ``split tail``, the
  body is a tile function the kernel calls at whole- and sub-tile block shapes); its parts
  share one :class:`~tilegen.lower.state.KernelState`: :mod:`~tilegen.lower.grid`,
  :mod:`~tilegen.lower.pieces`, :mod:`~tilegen.lower.access` (offsets, masks, pointers, gathers,
  loads), :mod:`~tilegen.lower.expressions` (arithmetic, masks, functions, reductions),
  :mod:`~tilegen.lower.statements`, :mod:`~tilegen.lower.loops` and :mod:`~tilegen.lower.tail`;
* :mod:`tilegen.lower.names`: the text helpers all three share (names, broadcasts, literals);
* :mod:`tilegen.lower.launcher`: the host function, from :mod:`~tilegen.lower.host_checks` (input and size
  checks), :mod:`~tilegen.lower.arguments` and :mod:`~tilegen.lower.descriptors` (the kernel's arguments),
  :mod:`~tilegen.lower.launch` (grid, tuning, launch) and :mod:`~tilegen.lower.fast` (the fast path);
* :mod:`tilegen.lower.reference`: the same spec as whole-tensor torch statements;
* :mod:`tilegen.lower.plan`: the dataclasses they return.

A spec whose tiles move through TMA descriptors or block pointers is lowered a second time with
plain pointers (:class:`~tilegen.lower.plan.FallbackPlan`): its launcher returns through that
kernel where the hardware, the Triton version or the tensors' layout rules the first one out. A
block-pointer spec is lowered a third time, with descriptors, where the checker accepts it so:
on a Triton without block pointers (3.9 removed them) its launcher returns through that one,
which returns through the pointer kernel where TMA cannot serve.
"""

from __future__ import annotations

import dataclasses
import hashlib

from tilegen import __version__
from tilegen import model as m
from tilegen.check import check  # the checker's rules for descriptors (_descriptors_serve), not repeated here
from tilegen.errors import Collector, SpecError
from tilegen.lower.autograd import backward_overwrites, lower_autograd
from tilegen.lower.descriptors import lower_descriptor_blocks
from tilegen.lower.kernel import lower_kernel
from tilegen.lower.launcher import LauncherRole, lower_launcher, planned_launch
from tilegen.lower.names import printable
from tilegen.lower.ordered import ordered_spec
from tilegen.lower.passes import access_variant, kernel_spec, kernels_spec, module_spec
from tilegen.lower.plan import FallbackPlan, HostStage, KernelPlan, LauncherPlan, ModulePlan, RowsPlan, StagePlan
from tilegen.lower.reference import lower_reference
from tilegen.lower.rows import lower_rows, whole_pruned
from tilegen.lower.stages import Staging, stage_specs
from tilegen.resources import runtime_build
from tilegen.row_loops import loop_rows
from tilegen.spec_text import safe_path

__all__ = ["ModulePlan", "lower", "safe_path", "spec_hash"]


def spec_hash(source: str) -> str:
    """First 16 hex digits of the SHA-256 of the spec text (identifies the spec in headers)."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def lower(spec: m.Spec, backward: tuple[m.Spec, ...] = (), deterministic: tuple[m.Spec, ...] = ()) -> ModulePlan:
    """Turn a checked spec into the :class:`ModulePlan` the templates render.

    The spec must have passed :func:`tilegen.check.check`; lowering does not re-validate. A spec
    with dtype variables is lowered once per binding (:func:`tilegen.model.specialize`); each
    writes the variable, not its dtype, so all must give one plan: one kernel, which Triton
    compiles for each dtype it is called with. Raises :class:`~tilegen.errors.SpecError` (at the
    ``dtype`` line) where they differ, e.g. a dtype that needs other math than the rest.
    ``backward``: the checked specs that ``spec``'s ``backward`` line names
    (:func:`tilegen.check.backward.check_backward`), registered as its autograd formula;
    ``deterministic``: those of its ``backward deterministic`` line, run instead under torch's
    deterministic algorithms.
    """
    spec = module_spec(spec)  # the passes of tilegen.lower.passes, stage 'module'
    bindings = spec.bindings()
    # not a pass: one spec for each binding, each lowered (tilegen.lower.passes says why)
    plans = [_lower(m.specialize(spec, binding), backward, deterministic) for binding in bindings]
    for binding, plan in zip(bindings[1:], plans[1:], strict=True):
        if plan != plans[0]:
            var = next(v for v in spec.dtype_vars if binding[v.name.id] != bindings[0][v.name.id])
            errors = Collector()
            errors.error(
                f"'{var.name.id}' = {binding[var.name.id]} needs another kernel than {var.name.id} = "
                f"{bindings[0][var.name.id]} (tilegen writes one kernel for every dtype of a variable); "
                "leave it out of the list, or write a spec for it",
                var.span,
            )
            errors.raise_if_any(spec.path, spec.source)
    return plans[0]


def _variant(
    spec: m.Spec, access: str | None, variant: str, configs: str, fallback: str | None, uses: str, fast: bool = True
) -> FallbackPlan:
    """``spec`` lowered again as ``_<kernel>_<variant>`` with another access style (None:
    pointers; :func:`~tilegen.lower.passes.access_variant`), its autotune configs named
    ``configs``; its launcher returns ``fallback``. ``fast=False``: its launcher has no fast path
    (the spec's launcher reaches it through its plan, keeping the launch under its own key)."""
    other = access_variant(spec, access, variant)  # another kernel's spec: not a pass (tilegen.lower.passes)
    kernel = lower_kernel(kernel_spec(other))
    if kernel.tune is not None:  # its own configs (a descriptor kernel's with their pre_hook)
        kernel = dataclasses.replace(kernel, tune=dataclasses.replace(kernel.tune, name=configs))
    return FallbackPlan(kernel, lower_launcher(other, kernel, LauncherRole(fallback, variant, uses, fast=fast)))


def _configs_like(fallback: FallbackPlan, kernel: KernelPlan) -> FallbackPlan:
    """``fallback`` whose configs, where they are ``kernel``'s but for their ``pre_hook`` (a pointer
    kernel's configs beside a descriptor kernel's, or the other way round), are written as
    ``kernel``'s list with the pre_hook they take (``_rt.configs_like``)."""
    mine, theirs = fallback.kernel.tune, kernel.tune
    if mine is None or theirs is None:
        return fallback
    hook = ", pre_hook=_descriptor_blocks"
    if [c.replace(hook, "") for c in mine.configs] != [c.replace(hook, "") for c in theirs.configs]:
        return fallback
    like = f"_rt.configs_like({theirs.name}, {'_descriptor_blocks' if hook in mine.configs[0] else 'None'})"
    return dataclasses.replace(fallback, kernel=dataclasses.replace(fallback.kernel,
                                                                    tune=dataclasses.replace(mine, like=like)))


def _descriptors_serve(spec: m.Spec) -> bool:
    """Whether the checker accepts ``spec`` with ``access descriptor`` instead of its own."""
    assert spec.access is not None, "a spec of the default access style"
    try:
        check(dataclasses.replace(spec, access=dataclasses.replace(spec.access, id="descriptor")))
    except SpecError:
        return False
    return True


def _lower(spec: m.Spec, backward: tuple[m.Spec, ...] = (), deterministic: tuple[m.Spec, ...] = ()) -> ModulePlan:
    """:func:`lower` of a spec whose dtype variables are bound (or that has none). The kernels are
    lowered from it after the ``kernels`` passes (:func:`~tilegen.lower.passes.kernels_spec`:
    without ``detach``), the reference from it as written."""
    grad = "route" if backward else "refuse"
    over = backward_overwrites(spec, backward)  # inputs its backward may write over: inplace_backward=True
    written, spec = spec, kernels_spec(spec)  # the passes of tilegen.lower.passes, stage 'kernels'
    # the module's other kernels' specs (not passes: each is another kernel's spec, tilegen.lower.passes)
    if spec.deterministic is not None:  # the kernel walks the tokens sorted by their index
        ordered = ordered_spec(spec)  # not a pass: it adds the launcher's sorted tokens as inputs
        assert ordered.ordered is not None, "ordered_spec sets how the kernel walks"
        kernel = lower_kernel(kernel_spec(ordered))
        walk = ordered.ordered
        host = HostStage((walk.order, walk.run_end), f"_rt.sorted_runs({walk.key})")
        launcher = lower_launcher(ordered, kernel, LauncherRole(stages=(host,), grad=grad, over=over))
        return _module(spec, kernel, launcher, backward=backward, written=written, deterministic=deterministic)
    staging = stage_specs(spec)  # values reduced across programs that every program uses
    if staging is not None:
        return _staged(spec, staging, backward, grad, written, over, deterministic)
    if any(a.chunk is not None for a in spec.grid):  # k over D1 by BK whole: the kernel loops over D1
        looped = loop_rows(spec)  # not a pass: it also gives what the launcher routes on (tilegen.lower.passes)
        assert looped is not None, "the checker takes a whole axis in chunks only where its rows loop"
        kernel = lower_kernel(kernel_spec(looped.spec))
        launcher = lower_launcher(looped.spec, kernel, LauncherRole(grad=grad, over=over))
        return _module(spec, kernel, launcher, backward=backward, written=written, deterministic=deterministic)
    kernel = lower_kernel(kernel_spec(spec))
    fallbacks: list[FallbackPlan] = []
    if spec.access_style in ("descriptor", "block_ptr"):  # what they cannot serve runs through pointers
        if spec.access_style == "block_ptr" and _descriptors_serve(spec):  # block pointers, else TMA, else pointers
            pointers = _variant(spec, None, "pointers", "_POINTER_CONFIGS", None, "TMA descriptors")
            fallbacks = [
                _variant(spec, "descriptor", "descriptors", "_DESCRIPTOR_CONFIGS", pointers.launcher.call,
                         "block pointers"),
                pointers,
            ]
        else:
            uses = "TMA descriptors" if spec.access_style == "descriptor" else "block pointers"
            planned = planned_launch(spec, kernel, LauncherRole(grad=grad, over=over))  # through its plan
            fallbacks = [_variant(spec, None, "pointers", "_POINTER_CONFIGS", None, uses, fast=not planned)]
    fallbacks = [_configs_like(f, kernel) for f in fallbacks]
    fallback = fallbacks[0].launcher.call if fallbacks else None
    role = LauncherRole(fallback, grad=grad, over=over)
    # rows too long for one tile: a second kernel that loops over them, reached through this launcher's plan
    rows = lower_rows(spec, fast=not planned_launch(spec, kernel, role))
    if rows is not None:
        fallbacks.append(rows.fallback)
        role = dataclasses.replace(role, rows=rows.plan)
    kernel = whole_pruned(spec, kernel)  # its autotuner prunes the configs whose tile would not fit
    launcher = lower_launcher(spec, kernel, role)
    return _module(spec, kernel, launcher, fallbacks=tuple(fallbacks), rows=rows.plan if rows is not None else None,
                   backward=backward, written=written, deterministic=deterministic)


def _staged(spec: m.Spec, staging: Staging, backward: tuple[m.Spec, ...], grad: str, written: m.Spec,
            over: tuple[str, ...] = (), deterministic: tuple[m.Spec, ...] = ()) -> ModulePlan:
    """:func:`_lower` of a spec split into launches (:mod:`tilegen.lower.stages`): each stage's
    kernel and private launcher, then the spec's kernel and its launcher, which calls them."""
    stages = []
    for stage, values in zip(staging.stages, staging.values, strict=True):
        kernel = whole_pruned(stage, lower_kernel(kernel_spec(stage)))
        variant = stage.name.id.removeprefix(f"_{spec.name.id}_")
        if kernel.tune is not None:  # the spec's configs, under a name of their own
            named = dataclasses.replace(kernel.tune, name=f"_{variant.upper()}_CONFIGS")
            kernel = dataclasses.replace(kernel, tune=named)
        stores = [s for s in stage.body if isinstance(s, m.Store) and s.tensor.id in values]
        names = ", ".join(next(a.name.id for a in spec.body if isinstance(a, m.Assign) and a.value is s.value)
                          for s in stores)
        doc = (f"Computes {names} (into {', '.join(values)}), which every program of {spec.name.id}_kernel loads:\n"
               f"each reduces across programs, so none of them could. Called by {spec.name.id}(), after its checks.")
        private = lower_launcher(stage, kernel, LauncherRole(variant=variant, docstring=doc))
        stages.append(StagePlan(kernel, private, values))
    kernel = whole_pruned(staging.main, lower_kernel(kernel_spec(staging.main)))
    launcher = lower_launcher(staging.main, kernel, LauncherRole(stages=tuple(stages), grad=grad, over=over))
    return _module(spec, kernel, launcher, stages=tuple(stages), backward=backward, written=written,
                   deterministic=deterministic)


def _module(
    spec: m.Spec,
    kernel: KernelPlan,
    launcher: LauncherPlan,
    fallbacks: tuple[FallbackPlan, ...] = (),
    rows: RowsPlan | None = None,
    stages: tuple[StagePlan, ...] = (),
    backward: tuple[m.Spec, ...] = (),
    written: m.Spec | None = None,
    deterministic: tuple[m.Spec, ...] = (),
) -> ModulePlan:
    """The :class:`ModulePlan` of ``spec`` with its kernels and launchers lowered (and its
    autograd formula where ``backward`` holds its backward's specs); its torch reference is
    lowered from ``written`` (the spec with its ``detach`` calls), else from ``spec``."""
    reference = lower_reference(written or spec, launcher)
    described = next((k for k in (kernel, *(f.kernel for f in fallbacks)) if k.descriptors), None)
    blocks = lower_descriptor_blocks(described) if described is not None and spec.tune is not None else None
    return ModulePlan(
        kernel_name=spec.name.id,
        spec_path=spec.path,
        spec_hash=spec_hash(spec.source),
        version=__version__,
        spec_text=tuple(printable(line, strip=False) for line in m.source_lines(spec.source.rstrip("\n"))),
        kernel=kernel,
        launcher=launcher,
        reference=reference,
        fallbacks=tuple(fallbacks),
        dtype_vars=tuple(v.name.id for v in spec.dtype_vars),
        rows=rows,
        runtime_build=runtime_build(),
        descriptor_blocks=blocks,
        stages=stages,
        autograd=lower_autograd(spec, backward, tuple(k for k, _ in launcher.keywords), deterministic)
        if backward else None,
    )
