"""KernelBench level 1's problems as benchmarks/kernelbench_problems.py maps them: the table names
all 100, and each problem a spec runs gives the problem's own torch expression (not the spec's
generated reference) at small odd sizes, inputs of both signs, at two configs or block sizes."""

from __future__ import annotations

import functools
import inspect
import re
import subprocess
import sys

import pytest
import torch

from benchmarks.kernelbench_problems import NOT_YET, RUNS, SUITE
from tests.conftest import ROOT


def test_the_table_maps_each_of_the_100_problems_once():
    assert [row[0] for row in SUITE] == list(range(1, 101))
    assert all(row[1].startswith(f"{row[0]}_") for row in SUITE)
    assert sorted([*RUNS, *NOT_YET]) == list(range(1, 101)), "each number in RUNS or NOT_YET, once"
    for number, run in RUNS.items():
        assert (ROOT / "specs" / f"{run.kernel}.tile").exists(), (number, run.kernel)
        assert (ROOT / "generated" / f"{run.kernel}.py").exists(), (number, run.kernel)
    assert all(NOT_YET.values())


def _refusals(path) -> list[str]:
    """``line:col: message`` of each error ``tilegen check`` reports for ``path``."""
    result = subprocess.run([sys.executable, "-m", "tilegen", "check", path.name], cwd=path.parent,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    return re.findall(rf"^{re.escape(path.name)}:(\d+:\d+): error: (.*)$", result.stdout + result.stderr, re.M)


def test_the_refusals_the_table_quotes_are_the_checkers():
    for path in sorted((ROOT / "benchmarks" / "kernelbench_refused").glob("*.tile")):
        quoted = [reason for reason in NOT_YET.values() if path.name in reason]
        assert quoted, f"no reason quotes {path.name}"
        for place, message in _refusals(path):
            assert all(f"{place}: {message}" in reason for reason in quoted), (path.name, place, message)


def _settings(module, kernel: str) -> list[dict]:
    """Two ways to run ``kernel``: two tune configs (the first and the last), or its default blocks
    and blocks of 16, or (no blocks at all) one setting."""
    parameters = inspect.signature(getattr(module, kernel)).parameters
    if "config" in parameters:
        return [{"config": 0}, {"config": len(module._CONFIGS) - 1}]
    blocks = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY and name.isupper()
              and name != "GROUP_SIZE_M"]
    return [{}, dict.fromkeys(blocks, 16)] if blocks else [{}]


def _grown(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Other small sizes for a kernel without blocks: each size but the first two larger, odd."""
    return tuple(s if i < 2 else s + 2 for i, s in enumerate(sizes))


def _cases():
    for number, run in RUNS.items():
        yield pytest.param(number, 0, id=f"{number}-{run.kernel}-a")
        yield pytest.param(number, 1, id=f"{number}-{run.kernel}-b")


@pytest.mark.parametrize(("number", "which"), list(_cases()))
def test_the_spec_computes_the_problems_expression(number, which, generated):
    run = RUNS[number]
    module = generated(run.kernel)
    settings = _settings(module, run.kernel)
    sizes = run.small
    if which >= len(settings):  # no blocks to vary: other sizes
        settings, sizes = [{}], _grown(run.small)
        which = 0
    torch.manual_seed(number)
    inputs = run.make(sizes, lambda shape, device: torch.randn(shape, device=device), "cpu")
    launcher = functools.partial(getattr(module, run.kernel), **settings[which])
    got = run.launch(launcher, *inputs)
    want = run.forward(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    else:
        assert torch.equal(got, want)
