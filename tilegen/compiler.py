"""The pipeline in one call: text -> parse -> check -> lower -> render -> module source."""

from __future__ import annotations

from dataclasses import dataclass

from tilegen import model as m
from tilegen.check import check
from tilegen.lower import lower
from tilegen.parser import parse
from tilegen.render import render


@dataclass(frozen=True)
class GeneratedModule:
    """A compiled spec: the kernel's name (the module is ``<kernel>.py``) and its source."""

    kernel: str
    source: str


def compile_spec(source: str, path: str = "<spec>") -> GeneratedModule:
    """Compile one ``.tile`` text to its generated module.

    ``path`` is the display path written in errors and in the generated header. Raises
    :class:`tilegen.errors.SpecError` listing every problem when the spec is invalid.
    """
    plan = lower(check(parse(source, path)))
    return GeneratedModule(plan.kernel_name, render(plan))


def check_spec(source: str, path: str = "<spec>") -> m.Spec:
    """Validate one ``.tile`` text by every rule :func:`compile_spec` applies, lowering and
    rendering included (so ``tilegen check`` says what ``tilegen build`` says), and return the
    checked :class:`~tilegen.model.Spec`. Raises :class:`tilegen.errors.SpecError` as
    :func:`compile_spec` does."""
    spec = check(parse(source, path))
    render(lower(spec))
    return spec
