"""Where the grammar and templates live, installed or in a checkout.

A wheel ships ``grammars/`` and ``templates/`` inside the package (``tilegen/grammars``,
``tilegen/templates``); an editable install or a checkout uses the top-level folders.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_path(folder: str, *parts: str) -> Path:
    """Path of ``folder/parts...`` (``folder`` is ``grammars`` or ``templates``).

    Raises FileNotFoundError when neither the packaged nor the checkout copy exists.
    """
    for root in (_PACKAGE / folder, _PACKAGE.parent / folder):
        if root.is_dir():
            return root.joinpath(*parts)
    raise FileNotFoundError(f"tilegen data folder {folder!r} not found next to {_PACKAGE}")
