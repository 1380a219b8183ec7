"""The pipeline in one call: text -> parse -> check -> lower -> render -> module source.

A spec whose ``backward`` line names no backward gets one derived (:mod:`tilegen.grad`) where
its operations all have rules: the derived spec is checked by the rules a hand-written backward
meets (:mod:`tilegen.check.backward`) and compiled beside the forward's module; where it cannot be
derived, the module says why (:attr:`GeneratedModule.note`) and the kernel refuses inputs that
require grad, as before.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tilegen import model as m
from tilegen.check import check
from tilegen.check.backward import Finder, check_backward, check_deterministic_backward
from tilegen.errors import SpecError
from tilegen.grad import NoBackward, derive_backwards
from tilegen.lower import ModulePlan, lower
from tilegen.lower.plan import StagePlan
from tilegen.parser import parse
from tilegen.render import render, render_stage
from tilegen.tuned import Table


@dataclass(frozen=True)
class GeneratedModule:
    """A compiled spec: the kernel's name (the module is ``<kernel>.py``), its source, and the
    kernels its ``backward`` line names (none: ()), whose modules must sit beside it."""

    kernel: str
    source: str
    backward: tuple[str, ...] = ()
    derived: tuple[GeneratedModule, ...] = ()  # the modules of the derived backward, written beside this one
    note: str | None = None  # why the kernel has no backward (no backward line, and none derived)
    spec_text: str | None = None  # a derived backward's: the spec text it was compiled from


@dataclass(frozen=True)
class _Checked:
    spec: m.Spec
    backward: tuple[m.Spec, ...]
    derived: tuple[GeneratedModule, ...] = ()  # the derived backward's modules (with their spec texts)
    note: str | None = None
    deterministic: tuple[m.Spec, ...] = ()  # the ``backward deterministic`` line's specs
    plan: ModulePlan | None = None  # the spec's own plan where checking it lowered it already


def derived_path(path: str, kernel: str | None = None) -> str:
    """The display path of the backward derived from the spec at ``path`` (one ``kernel`` of it,
    where it is several)."""
    return f"{path}, derived backward" + (f" {kernel}" if kernel else "")


def compile_spec(source: str, path: str = "<spec>", find: Finder | None = None,
                 derive: bool = True, tables: Callable[[str], Table] | None = None) -> GeneratedModule:
    """Compile one ``.tile`` text to its generated module.

    ``path`` is the display path written in errors and in the generated header. ``find`` finds
    the spec a ``backward`` line names (its kernel name -> (source, display path), or None):
    the build looks beside the spec's file; by default, beside ``path`` taken from the current
    folder. With ``derive`` (the default), a spec without a ``backward`` line gets its derived
    backward, compiled too (``derived``), or the reason it has none (``note``). ``tables`` gives
    a kernel's configs tuned ahead of time (:mod:`tilegen.tuned`; by default none), embedded in
    its module and in a derived backward's. Raises :class:`tilegen.errors.SpecError` listing
    every problem when the spec is invalid (:class:`~tilegen.tuned.TableError` for a table).
    """
    tables = tables or _no_tables
    checked = _checked(source, path, find, derive, tables)
    plan = checked.plan or lower(checked.spec, checked.backward, checked.deterministic)
    named = (*checked.spec.backward, *checked.spec.deterministic_backward)
    written = tuple(n.id for n in named) if not checked.derived else ()  # specs beside this one
    return GeneratedModule(plan.kernel_name, render(plan, tables(plan.kernel_name)), written, checked.derived,
                           checked.note)


def check_spec(source: str, path: str = "<spec>", find: Finder | None = None) -> m.Spec:
    """Validate one ``.tile`` text by every rule :func:`compile_spec` applies, lowering and
    rendering included (so ``tilegen check`` says what ``tilegen build`` says), and return the
    checked :class:`~tilegen.model.Spec`. Raises :class:`tilegen.errors.SpecError` as
    :func:`compile_spec` does."""
    checked = _checked(source, path, find, derive=True)
    # a derived backward: lowered and rendered where derived
    render(checked.plan or lower(checked.spec, checked.backward, checked.deterministic))
    return checked.spec


def borrow_stages(plan: ModulePlan, forward: ModulePlan) -> ModulePlan:
    """``plan`` (a derived backward's) with each stage that is one of ``forward``'s stages, the
    same kernels and launcher but for their names (a group norm's statistics, recomputed for its
    backward), calling the forward module's launcher of it (:attr:`StagePlan.borrowed`) instead
    of holding its kernels again: the backward module loads the forward's beside it
    (``_rt.sibling``), as the forward's autograd formula loads the backward's."""
    theirs = {_stage_code(stage): stage.launcher.name for stage in forward.stages}
    stages = []
    for stage in plan.stages:
        same = theirs.get(_stage_code(stage))
        stages.append(dataclasses.replace(stage, borrowed=(forward.kernel_name, same)) if same else stage)
    return dataclasses.replace(plan, stages=tuple(stages))


def _stage_code(stage: StagePlan) -> str:
    """The code of ``stage`` as rendered, its launcher's name (its kernels' prefix) replaced by one
    placeholder, without comments and docstrings: two stages that compute the same thing the same
    way have the same code, however their specs wrote the lines (``mean(d, dim=(c, h, w))`` or
    nested means)."""
    tree = ast.parse(render_stage(stage).replace(stage.launcher.name, "_stage"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            del body[0]
    return ast.unparse(tree)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def _no_tables(kernel: str) -> Table:
    """No configs tuned ahead of time, for any kernel."""
    return {}


def _checked(source: str, path: str, find: Finder | None, derive: bool,
             tables: Callable[[str], Table] = _no_tables) -> _Checked:
    """The checked spec of ``source`` and the checked backward specs it names (found by ``find``,
    by default beside ``path``), or where it names none and ``derive``, its derived one (its
    modules carrying ``tables``' configs tuned ahead of time)."""
    spec = check(parse(source, path))
    find = find if find is not None else beside(path, path)
    backward = check_backward(spec, find)
    deterministic = check_deterministic_backward(spec, find)
    if backward or not derive:
        return _Checked(spec, backward, deterministic=deterministic)
    if "_backward" in spec.name.id:
        return _Checked(spec, (), note="no backward: a backward spec's own backward (a second derivative) is "
                                       "not derived")
    try:
        kernels = derive_backwards(spec)
    except NoBackward as reason:
        where = f" (line {reason.span.line})" if reason.span is not None else ""
        return _Checked(spec, (), note=f"no backward: {reason.reason}{where}")
    except Exception as bug:
        return _Checked(spec, (), note=f"no backward: deriving it failed ({type(bug).__name__}: {bug}); a tilegen bug")
    taken = [name for name, _ in kernels if find(name) is not None]
    if taken:
        return _Checked(spec, (), note=f"no backward line, and a spec '{taken[0]}.tile' beside it that it does not "
                                       f"name")
    derived = {name: (text, derived_path(path, name if len(kernels) > 1 else None)) for name, text in kernels}
    named = dataclasses.replace(spec, backward=tuple(m.Name(name, spec.name.span) for name in derived))
    try:
        backward = check_backward(named, derived.get)
        plans = [lower(kernel, ()) for kernel in backward]
        forward = None
        if any(plan.stages for plan in plans):  # values the forward computes in stages, recomputed
            forward = lower(named, backward)  # the forward module's plan, which compile_spec then renders
            plans = [borrow_stages(plan, forward) for plan in plans]
        modules = tuple(GeneratedModule(plan.kernel_name, render(plan, tables(plan.kernel_name)),
                                        spec_text=derived[plan.kernel_name][0])
                        for plan in plans)
    except SpecError as error:  # a rule that wrote what the language cannot say: no backward, and why
        first = error.diagnostics[0].message if error.diagnostics else str(error)
        return _Checked(spec, (), note=f"no backward: the derived one does not build ({first})")
    return _Checked(named, backward, modules, plan=forward)


def beside(path: str | os.PathLike[str], display: str) -> Finder:
    """The :data:`~tilegen.check.backward.Finder` of the spec file at ``path`` (displayed as
    ``display``): a kernel ``name`` is ``<name>.tile`` in the same folder."""
    folder, shown = Path(path).parent, Path(display).parent

    def find(name: str) -> tuple[str, str] | None:
        other = folder / f"{name}.tile"
        if not other.is_file():
            return None
        return other.read_text(encoding="utf-8"), (shown / f"{name}.tile").as_posix()

    return find
