"""``python -m tilegen ...``: the same CLI as the ``tilegen`` command."""

from tilegen.cli import app

app(prog_name="tilegen")
