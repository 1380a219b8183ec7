"""tilegen's kernels as torch functions: the committed build of ``specs/`` (``generated/``).

``kernel("rms_norm")`` is the launcher of ``generated/rms_norm.py``: a torch function with the
spec's inputs and outputs, differentiable where the spec has a backward, a custom op under
``torch.compile`` (docs/torch.md). Each module is imported once per process, so its tuning cache
and compiled launches persist across calls. A wheel ships the build inside the package
(``tilegen/generated``); a checkout or an editable install reads the top-level ``generated/``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tilegen.resources import data_path
from tilegen.runner import load_module


@functools.cache
def module(name: str) -> ModuleType:
    """The generated module of spec ``name`` from the committed build, imported once per process.

    Raises FileNotFoundError when the build has no ``<name>.py`` (a spec that does not exist)."""
    path = data_path("generated", f"{name}.py")
    if not path.is_file():
        raise FileNotFoundError(f"tilegen's build has no kernel {name!r} (no {path})")
    loaded = sys.modules.get(f"tilegen_generated_{name}")  # the same file, loaded by load_module already
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
        return loaded
    return load_module(path)


#: The launchers :func:`kernel` has found, by name: a dict lookup, which torch.compile traces
#: without a graph break (finding a module reads the file system, which it cannot trace)
_LAUNCHERS: dict[str, Callable[..., Any]] = {}


def kernel(name: str) -> Callable[..., Any]:
    """The launcher of spec ``name`` (``generated/<name>.py``'s function ``<name>``). Call it once
    before ``torch.compile`` traces a function that calls it (``tilegen.patch`` does), so the
    trace finds it in the cache.

    Raises FileNotFoundError as :func:`module` does."""
    launcher = _LAUNCHERS.get(name)
    if launcher is None:
        launcher = _LAUNCHERS[name] = getattr(module(name), name)
    return launcher
