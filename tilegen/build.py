"""Building: find specs, compile each, and write ``<out>/<kernel>.py`` atomically.

A build never leaves a partial module: each file is written to a temporary file in the
output folder and renamed over the old one. Unchanged modules are not rewritten (same bytes,
same mtime). Specs that fail keep their previous module untouched; the others still build.
Beside the modules a build writes ``<out>/_tilegen_runtime.py``, the runtime they all load
(:mod:`tilegen.runtime`), once.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tilegen import __version__
from tilegen import model as m
from tilegen.compiler import GeneratedModule, beside, check_spec, compile_spec, derived_path
from tilegen.errors import SpecError
from tilegen.resources import RUNTIME_MODULE, runtime_module
from tilegen.tuned import TableError, tables_beside


@dataclass(frozen=True)
class SpecFile:
    """A spec on disk: its real ``path``, the ``display`` path written into generated modules,
    and the ``given`` path that errors and messages name.

    ``display`` is ``<folder name>/<file name>`` (``specs/copy.tile``) whatever path found the
    spec, so builds are the same bytes on every machine. ``given`` is the path as the user typed
    it (``bad.tile``, ``../specs/bad.tile``, an absolute path), or for a spec found in a typed
    folder that folder joined with the spec's path below it (``specs/`` -> ``specs/copy.tile``),
    so ``given:line:col`` opens in an editor or a CI problem matcher from the user's folder.
    """

    path: Path
    display: str
    given: str


#: What a build did with one module: wrote it, found it unchanged, found it stale or current
#: (``--check``), or could not build it.
BuildStatus = Literal["written", "unchanged", "stale", "current", "error"]


@dataclass(frozen=True)
class BuildResult:
    """What happened to one spec: its module path and status, or the error that stopped it."""

    spec: SpecFile
    module: Path | None
    status: BuildStatus
    error: SpecError | None = None
    note: str | None = None  # a kernel's: why it has no backward (no backward line, none derived)
    derived: str | None = None  # a derived backward's: its spec text (the module's own reference runs it)

    @property
    def is_runtime(self) -> bool:
        """True for the result of ``_tilegen_runtime.py`` (its ``spec`` is tilegen/runtime.py)."""
        return self.spec == RUNTIME_SOURCE


#: The "spec" of the runtime copy: tilegen's own runtime.py, named the same on every machine.
RUNTIME_SOURCE = SpecFile(Path(__file__).resolve().with_name("runtime.py"), "tilegen/runtime.py", "tilegen/runtime.py")


def find_specs(paths: Sequence[str | os.PathLike[str]]) -> list[SpecFile]:
    """Expand files and folders into ``.tile`` specs, sorted, each with its display and given
    paths (see :class:`SpecFile`).

    A folder contributes every ``*.tile`` below it: displayed as ``<folder name>/<relative
    path>``, given as the folder as typed joined with the relative path. A file is displayed as
    ``<parent folder name>/<file name>`` and given as typed. Pass the command-line strings
    themselves (a :class:`~pathlib.Path` drops a leading ``./`` and doubled slashes). Raises
    FileNotFoundError for a path that does not exist.
    """
    found: list[SpecFile] = []
    for typed in paths:
        typed = os.fspath(typed)
        path = Path(typed)
        if path.is_dir():
            root = path.resolve()
            for spec in sorted(root.rglob("*.tile")):
                below = spec.relative_to(root).as_posix()
                found.append(SpecFile(spec, f"{root.name}/{below}", os.path.join(typed, below)))
        elif path.is_file():
            real = path.resolve()
            found.append(SpecFile(real, f"{real.parent.name}/{real.name}", typed))
        else:
            raise FileNotFoundError(f"no such spec file or folder: {typed}")
    return found


def compile_file(spec: SpecFile) -> GeneratedModule:
    """Compile one spec file; the module names ``spec.display``. Raises SpecError reported at
    ``spec.given`` (``given:line:col: error: ...``) for an invalid spec."""
    source = spec.path.read_text(encoding="utf-8")
    try:
        tables = tables_beside(spec.path, spec.given)
        return compile_spec(source, spec.display, beside(spec.path, spec.display), tables=tables)
    except TableError:  # reported at the table's path
        raise
    except SpecError as error:
        raise error.at(spec.given) from None


def check_file(spec: SpecFile) -> m.Spec:
    """Validate one spec file by every rule a build applies (:func:`tilegen.compiler.check_spec`:
    nothing is written); the model's ``path`` is ``spec.display``. Raises SpecError reported at
    ``spec.given`` for an invalid spec."""
    source = spec.path.read_text(encoding="utf-8")
    try:
        return check_spec(source, spec.display, beside(spec.path, spec.display))
    except SpecError as error:
        raise error.at(spec.given) from None


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` via a temporary file and rename; False if already equal."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def build(paths: Sequence[str | os.PathLike[str]], out_dir: Path, check_only: bool = False) -> list[BuildResult]:
    """Compile every spec under ``paths`` into ``out_dir/<kernel>.py``, and write the runtime
    they load, ``out_dir/_tilegen_runtime.py``, where at least one spec compiled (its result is
    last, :attr:`BuildResult.is_runtime`).

    With ``check_only`` nothing is written; each file is reported ``current`` or ``stale``.
    Every spec is attempted; failures are returned with status ``error`` and leave the
    existing module as it was. A spec whose ``backward`` line names another builds that one
    too (its module must sit beside this one), where the paths did not already name it; one
    without a ``backward`` line gets its derived backward's module beside it, or a result whose
    ``note`` says why it has none.
    """
    results: list[BuildResult] = []
    specs = find_specs(paths)
    queued = {spec.path for spec in specs}
    for spec in specs:  # grows: a spec's backward, where a file alone was named, is built beside it
        try:
            generated = compile_file(spec)
        except SpecError as err:
            results.append(BuildResult(spec, None, "error", err))
            continue
        result = _write(spec, out_dir / f"{generated.kernel}.py", generated.source, check_only)
        results.append(dataclasses.replace(result, note=generated.note))
        for kernel in generated.derived:  # its derived backward, beside it
            several = kernel.kernel if len(generated.derived) > 1 else None
            derived = SpecFile(spec.path, derived_path(spec.display, several), derived_path(spec.given, several))
            result = _write(derived, out_dir / f"{kernel.kernel}.py", kernel.source, check_only)
            results.append(dataclasses.replace(result, derived=kernel.spec_text))
        for backward in _backward_files(spec, generated.backward):
            if backward.path not in queued:
                queued.add(backward.path)
                specs.append(backward)
    if any(result.error is None for result in results):
        results.append(_write(RUNTIME_SOURCE, out_dir / RUNTIME_MODULE, runtime_module(__version__), check_only))
    return results


def _backward_files(spec: SpecFile, backward: tuple[str, ...]) -> list[SpecFile]:
    """The spec files of ``backward``, the kernels ``spec``'s ``backward`` line names (it compiled,
    so the files are there), given beside ``spec.given``."""
    paths = [spec.path.parent / f"{name}.tile" for name in backward]
    return [SpecFile(path, f"{path.parent.name}/{path.name}", os.path.join(os.path.dirname(spec.given), path.name))
            for path in paths]


def _write(spec: SpecFile, module: Path, text: str, check_only: bool) -> BuildResult:
    """Write ``text`` to ``module`` (``written``/``unchanged``), or with ``check_only`` compare
    it (``current``/``stale``)."""
    if check_only:
        current = module.is_file() and module.read_text(encoding="utf-8") == text
        return BuildResult(spec, module, "current" if current else "stale")
    written = write_atomic(module, text)
    return BuildResult(spec, module, "written" if written else "unchanged")
