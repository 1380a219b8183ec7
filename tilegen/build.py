"""Building: find specs, compile each, and write ``<out>/<kernel>.py`` atomically.

A build never leaves a partial module: each file is written to a temporary file in the
output folder and renamed over the old one. Unchanged modules are not rewritten (same bytes,
same mtime). Specs that fail keep their previous module untouched; the others still build.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tilegen import model as m
from tilegen.compiler import GeneratedModule, check_spec, compile_spec
from tilegen.errors import SpecError


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


@dataclass(frozen=True)
class BuildResult:
    """What happened to one spec: its module path and status, or the error that stopped it."""

    spec: SpecFile
    module: Path | None
    status: str  # "written" | "unchanged" | "stale" | "current" | "error"
    error: SpecError | None = None


def find_specs(paths: list[str | os.PathLike]) -> list[SpecFile]:
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
        return compile_spec(source, spec.display)
    except SpecError as error:
        raise error.at(spec.given) from None


def check_file(spec: SpecFile) -> m.Spec:
    """Validate one spec file by every rule a build applies (:func:`tilegen.compiler.check_spec`:
    nothing is written); the model's ``path`` is ``spec.display``. Raises SpecError reported at
    ``spec.given`` for an invalid spec."""
    source = spec.path.read_text(encoding="utf-8")
    try:
        return check_spec(source, spec.display)
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


def build(paths: list[str | os.PathLike], out_dir: Path, check_only: bool = False) -> list[BuildResult]:
    """Compile every spec under ``paths`` into ``out_dir/<kernel>.py``.

    With ``check_only`` nothing is written; each module is reported ``current`` or ``stale``.
    Every spec is attempted; failures are returned with status ``error`` and leave the
    existing module as it was.
    """
    results = []
    for spec in find_specs(paths):
        try:
            generated = compile_file(spec)
        except SpecError as err:
            results.append(BuildResult(spec, None, "error", err))
            continue
        module = out_dir / f"{generated.kernel}.py"
        text = generated.source
        if check_only:
            current = module.is_file() and module.read_text(encoding="utf-8") == text
            results.append(BuildResult(spec, module, "current" if current else "stale"))
        else:
            written = write_atomic(module, text)
            results.append(BuildResult(spec, module, "written" if written else "unchanged"))
    return results
