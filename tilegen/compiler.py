"""The pipeline in one call: text -> parse -> check -> lower -> render -> module source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tilegen import model as m
from tilegen.check import check
from tilegen.check.backward import Finder, check_backward
from tilegen.lower import lower
from tilegen.parser import parse
from tilegen.render import render


@dataclass(frozen=True)
class GeneratedModule:
    """A compiled spec: the kernel's name (the module is ``<kernel>.py``), its source, and the
    kernels its ``backward`` line names (none: ()), whose modules must sit beside it."""

    kernel: str
    source: str
    backward: tuple[str, ...] = ()


def compile_spec(source: str, path: str = "<spec>", find: Finder | None = None) -> GeneratedModule:
    """Compile one ``.tile`` text to its generated module.

    ``path`` is the display path written in errors and in the generated header. ``find`` finds
    the spec a ``backward`` line names (its kernel name -> (source, display path), or None):
    the build looks beside the spec's file; by default, beside ``path`` taken from the current
    folder. Raises :class:`tilegen.errors.SpecError` listing every problem when the spec is
    invalid.
    """
    spec, backward = _checked(source, path, find)
    plan = lower(spec, backward)
    return GeneratedModule(plan.kernel_name, render(plan), tuple(n.id for n in spec.backward))


def check_spec(source: str, path: str = "<spec>", find: Finder | None = None) -> m.Spec:
    """Validate one ``.tile`` text by every rule :func:`compile_spec` applies, lowering and
    rendering included (so ``tilegen check`` says what ``tilegen build`` says), and return the
    checked :class:`~tilegen.model.Spec`. Raises :class:`tilegen.errors.SpecError` as
    :func:`compile_spec` does."""
    spec, backward = _checked(source, path, find)
    render(lower(spec, backward))
    return spec


def _checked(source: str, path: str, find: Finder | None) -> tuple[m.Spec, tuple[m.Spec, ...]]:
    """The checked spec of ``source`` and the checked backward specs it names (found by ``find``,
    by default beside ``path``)."""
    spec = check(parse(source, path))
    return spec, check_backward(spec, find if find is not None else beside(path, path))


def beside(path: str | os.PathLike, display: str) -> Finder:
    """The :data:`~tilegen.check.backward.Finder` of the spec file at ``path`` (displayed as
    ``display``): a kernel ``name`` is ``<name>.tile`` in the same folder."""
    folder, shown = Path(path).parent, Path(display).parent

    def find(name: str) -> tuple[str, str] | None:
        other = folder / f"{name}.tile"
        if not other.is_file():
            return None
        return other.read_text(encoding="utf-8"), (shown / f"{name}.tile").as_posix()

    return find
