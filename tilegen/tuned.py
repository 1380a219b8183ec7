"""Configs tuned ahead of time, shipped beside a spec: ``<kernel>.tuned.json``.

A table maps ``"<arch>|<sizes>"`` (``sm_90|4096,4096,4096,torch.float16``: the GPU architecture
as :func:`tilegen.runtime.device_arch` names it, then the launcher's tune key as the on-disk
cache writes it) to the keywords of the config full tuning chose there, as the spec writes them
(``{"BM": 128, "BN": 256, "BK": 64, "num_stages": 3, "num_warps": 8}``). ``tilegen tune --save``
writes it; ``tilegen build`` embeds it in the generated module, where the default ``quick``
tuning effort takes the entry of the nearest sizes when this machine has tuned none itself
(:meth:`tilegen.runtime.Tuner.nearest`). An entry whose config the spec no longer has is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tilegen.errors import Diagnostic, SpecError
from tilegen.model import Span

#: A table: ``"<arch>|<sizes>"`` -> config keywords.
Table = dict[str, dict[str, int]]

#: The file name suffix of a table beside its spec.
SUFFIX = ".tuned.json"


class TableError(SpecError):
    """A ``.tuned.json`` table that is not a table (reported at the table's own path)."""


def table_path(folder: Path, kernel: str) -> Path:
    """The table of ``kernel`` in the spec folder ``folder``: ``<folder>/<kernel>.tuned.json``."""
    return folder / f"{kernel}{SUFFIX}"


def _error(message: str, path: str, text: str, line: int = 1, column: int = 1) -> TableError:
    return TableError([Diagnostic(message, Span(line, column, line, column + 1))], path, text)


def load_table(path: Path, shown: str) -> Table:
    """The table in the file ``path`` (``shown`` in errors): {} where there is no file. Raises
    :class:`TableError` (``shown:line:col: error: ...``) for text that is not JSON, or JSON that is
    not an object of ``"arch|sizes"`` keys each giving an object of integer keywords."""
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _error(f"not JSON: {error.msg}", shown, text, error.lineno, error.colno) from None
    if not isinstance(data, dict):
        raise _error("a table of tuned configs is a JSON object: \"<arch>|<sizes>\" -> config keywords", shown, text)
    for key, config in data.items():
        if "|" not in key:
            problem = f"key {key!r} is not \"<arch>|<sizes>\""
        elif not isinstance(config, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                     for v in config.values()):
            problem = f"the config of {key!r} is not an object of integer keywords"
        else:
            continue
        line = next((n + 1 for n, written in enumerate(text.splitlines()) if json.dumps(key) in written), 1)
        raise _error(problem, shown, text, line)
    return data


def tables_beside(path: Path, given: str) -> Callable[[str], Table]:
    """The table lookup of the spec file at ``path`` (typed as ``given``): a kernel's table is
    ``<kernel>.tuned.json`` in the same folder (:func:`load_table`; raises what it raises)."""
    folder, shown = path.parent, Path(given).parent

    def find(kernel: str) -> Table:
        return load_table(table_path(folder, kernel), (shown / f"{kernel}{SUFFIX}").as_posix())

    return find


def save_entries(path: Path, entries: Table) -> None:
    """Add ``entries`` to the table in ``path`` (created where missing; an entry of the same key
    is replaced), written with sorted keys, one entry per line. Raises :class:`TableError` where
    the file holds no table."""
    table = {**load_table(path, str(path)), **entries}
    lines = [f"  {json.dumps(key)}: {json.dumps(table[key], sort_keys=True)}" for key in sorted(table)]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
