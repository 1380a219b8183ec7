"""``tilegen --help`` and each command's help wrap at the terminal's width, never inside a
sentence where the next word would have fit (a docstring's hard line break)."""

import itertools
import re

import pytest
from typer.testing import CliRunner

from tilegen.cli import app

COMMANDS = ("build", "check", "show", "run", "tune", "demo", "bench")


def _text_runs(line: str):
    """(start, end, right edge) of each run of text on ``line``: inside a panel (``│ ... │``) the
    cells' text and the panel's inner edge; outside one the line's text and None."""
    if "│" in line:
        left, right = line.index("│"), line.rindex("│")
        inner = line[left + 1 : right]
        return [(left + 1 + m.start(), left + 1 + m.end(), right - 1) for m in re.finditer(r"\S+(?: \S+)*", inner)]
    return [(m.start(), m.end(), None) for m in re.finditer(r"\S+(?: \S+)*", line)]


def hard_breaks(output: str, columns: int) -> list[str]:
    """The lines of ``output`` after which a cell's or paragraph's text goes on at the same column
    on the next line although the next line's first word would have fit: a break inside a sentence."""
    found = []
    lines = output.splitlines()
    for line, following in itertools.pairwise(lines):
        starts = {start: (end, edge) for start, end, edge in _text_runs(line)}
        for position, (start, _, _) in enumerate(_text_runs(following)):
            if position > 0 or start not in starts:  # text before it on its line: another row of a table
                continue
            end, line_edge = starts[start]
            if end != max(e for _, e, _ in _text_runs(line)):  # not the last cell of the line
                continue
            word = following[start:].split()[0]
            if word.startswith("["):  # typer's "[default: x]" or "[required]": a column of rich's of its own
                continue
            limit = (line_edge if line_edge is not None else columns - 1)
            if end + 1 + len(word) <= limit:
                found.append(f"{line.rstrip()!r} / {word!r}")
    return found


@pytest.mark.parametrize("columns", [60, 100, 200])
@pytest.mark.parametrize("command", [(), *((c,) for c in COMMANDS)])
def test_help_breaks_lines_only_where_the_terminal_is_full(command, columns):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= columns
    assert hard_breaks(result.output, columns) == []


def test_the_check_finds_a_hard_break():
    """The checker itself: a paragraph broken after two words, in a panel and outside one."""
    panel = ("│ build  Compile specs into OUTPUT/<kernel>.py, a folder │\n"
             "│        a spec                                          │\n"
             "│        without a backward                              │")
    assert hard_breaks(panel, 60) == [f"{panel.splitlines()[1]!r} / 'without'"]
    assert hard_breaks(" Compile specs\n into a folder\n", 60) == ["' Compile specs' / 'into'"]
