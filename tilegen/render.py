"""Rendering: a :class:`~tilegen.lower.ModulePlan` -> Python source, through Jinja templates.

Templates live in ``templates/`` (``module.py.j2`` includes one small template per part).
:func:`make_env` is the one Jinja environment, shared by the CLI and the tests: it uses
``StrictUndefined`` so a typo in a template fails loudly instead of rendering nothing.
"""

from __future__ import annotations

import functools

import jinja2

from tilegen.lower import ModulePlan
from tilegen.lower.plan import StagePlan
from tilegen.resources import data_path
from tilegen.tuned import Table


@functools.lru_cache(maxsize=1)
def make_env() -> jinja2.Environment:
    """The Jinja environment for ``templates/`` (strict, trimmed blocks, trailing newline kept)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_path("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env


def render(plan: ModulePlan, shipped: Table | None = None) -> str:
    """The full text of ``generated/<kernel>.py`` for ``plan`` (deterministic for a plan), with
    ``shipped``, the configs tuned ahead of time (:mod:`tilegen.tuned`), where its launchers tune."""
    text = make_env().get_template("module.py.j2").render(plan=plan, shipped=shipped or {})
    # Blank lines never carry indentation; the file ends with exactly one newline.
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(lines).rstrip("\n") + "\n"


def render_stage(stage: StagePlan) -> str:
    """The text of one stage of a module (its kernel, finish kernels and private launcher), as
    :func:`render` writes it: what :func:`tilegen.compiler.borrow_stages` compares."""
    return str(make_env().get_template("stage.py.j2").module.stage(stage))  # type: ignore[attr-defined]
