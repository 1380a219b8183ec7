"""Test setup: run every kernel in Triton's CPU interpreter (set before triton is imported).

``TILEGEN_TEST_GPU=1`` leaves the interpreter off, for the tests written for both (the GPU-only
tests of tests/test_ops.py: ``TILEGEN_TEST_GPU=1 python -m pytest -n 0 tests/test_ops.py`` on a
machine with one or two GPUs); the rest of the suite expects the interpreter.
"""

import functools
import os

if os.environ.get("TILEGEN_TEST_GPU") != "1":
    os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def specs_find(name: str):
    """The finder of the specs in ``specs/`` (:func:`tilegen.compiler.beside`): what a spec's
    ``backward`` line names, for tests compiling a spec's text under another path."""
    from tilegen.compiler import beside

    return beside(ROOT / "specs" / "any.tile", "specs/any.tile")(name)


@pytest.fixture(scope="session")
def generated():
    """Load a committed generated module by kernel name: ``generated("copy").copy(x)``."""
    from tilegen.runner import load_module

    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = load_module(ROOT / "generated" / f"{name}.py")
        return cache[name]

    return load


@pytest.fixture
def compiled(tmp_path):
    """Compile a ``.tile`` source and load its module from ``tmp_path``: ``compiled(source).k(x)``
    (a bad spec raises :class:`tilegen.errors.SpecError`; ``name`` names the file and module)."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    def build(source: str, name: str = "k"):
        path = tmp_path / f"{name}.py"
        path.write_text(compile_spec(source, f"{name}.tile").source, encoding="utf-8")
        return load_module(path)

    return build


@functools.cache
def spec_named(kernel: str):
    """The checked :class:`tilegen.model.Spec` of the spec in specs/ whose kernel is ``kernel``
    (``spec_named("rgb2grey")`` is specs/grayscale.tile), for :mod:`tilegen.tolerance`.
    Raises KeyError for a kernel no spec defines."""
    from tilegen.check import check
    from tilegen.parser import parse

    for path in sorted((ROOT / "specs").glob("*.tile")):
        spec = check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}"))
        if spec.name.id == kernel:
            return spec
    raise KeyError(f"no spec in specs/ defines kernel {kernel!r}")


def force_config(monkeypatch, module, index):
    """Make the tuned launchers of ``module`` run ``_CONFIGS[index]`` from their next call
    (``index``: an int, a dict of a config's keywords, or a function of the launcher's name and
    tune key giving one, or None for the usual choice): the module's ``Tuner.forced``, the
    per-module form of TILEGEN_CONFIG, with no choice remembered (``_TUNED``) and no launch kept
    for the fast path (``_FAST``) from before, each replaced until the test ends."""
    tuner = module._tuner
    monkeypatch.setattr(tuner, "forced", index)
    monkeypatch.setattr(tuner, "tuned", {})
    monkeypatch.setattr(module, "_TUNED", tuner.tuned)
    monkeypatch.setattr(tuner, "fast", {})
    monkeypatch.setattr(module, "_FAST", tuner.fast)
