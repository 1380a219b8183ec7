"""``tilegen demo`` and ``tilegen run`` print no Python or NumPy warnings: the interpreter's
floating-point RuntimeWarnings and the tuned launchers' "cannot time autotune configs" notice
are caught around the kernel runs, and one short note under the table says that tuned specs ran
their default config. Launchers called directly keep warning (once per process). The demo's table
shows full kernel names and each row's tolerance, and its last line counts the rows.
"""

import io
import re
import shutil
import warnings

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tilegen import model as m
from tilegen import runner
from tilegen.build import build, check_file, find_specs
from tilegen.cli import INTERPRETER_NOTE, app

#: A tuned spec (the notice) and the tanh-GELU epilogue (exp overflows in NumPy).
SPECS = ("softmax.tile", "softmax_backward.tile", "matmul_epilogue.tile")


@pytest.fixture
def two_specs(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in SPECS:
        shutil.copy(ROOT / "specs" / name, folder / name)
    return folder


def test_run_module_lets_no_warning_escape(two_specs, tmp_path):
    """The function the demo and ``tilegen run`` use, with every warning made an error."""
    build([two_specs], tmp_path / "gen")
    device = runner.select_device()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for spec_file in find_specs([two_specs]):
            spec = check_file(spec_file)
            module = runner.load_module(tmp_path / "gen" / f"{spec.name.id}.py")
            for result in runner.run_module(module, spec, runner.default_sizes(spec, 2), device):
                assert result.passed and result.warnings == ()
                assert result.default_config == (spec.tune is not None)


def test_launchers_called_directly_still_warn(two_specs, tmp_path, monkeypatch):
    """Outside the demo a library user still hears that the interpreter ran the default config."""
    import torch

    monkeypatch.setattr(torch.ops.tilegen, "_interpreter_told", False, raising=False)  # a process not told yet
    build([two_specs], tmp_path / "gen")
    spec = m.specialize(check_file(find_specs([two_specs / "softmax.tile"])[0]), {"T": "f32"})
    module = runner.load_module(tmp_path / "gen" / "softmax.py")
    inputs = runner.random_inputs(spec, runner.default_sizes(spec, 2), "cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.softmax(*inputs.values())
    assert any(runner.INTERPRETER_TUNING_NOTICE in str(w.message) for w in caught)


def test_quiet_reports_unexpected_warnings_in_one_line():
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        with runner.quiet(caught):
            import numpy as np

            np.exp(np.float32(1000.0))  # overflow: ignored, as the interpreter's exp is
            warnings.warn("softmax: the Triton interpreter cannot time autotune configs; ...", stacklevel=1)
            warnings.warn("something else", DeprecationWarning, stacklevel=1)
            warnings.warn("something else", DeprecationWarning, stacklevel=1)
    assert escaped == []
    assert caught == ["DeprecationWarning: something else"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_demo_output_is_quiet_and_notes_the_default_configs(two_specs, tmp_path, jobs):
    """In this process (``-j 1``) and in two worker processes alike: the same rows, notes and last line."""
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        result = CliRunner().invoke(
            app,
            ["demo", str(two_specs), "-o", str(tmp_path / "gen"), "--out-dir", str(tmp_path / "o"), "--programs", "2",
             "--jobs", jobs],
        )
    assert result.exit_code == 0, result.output
    assert escaped == [], [str(w.message) for w in escaped]
    assert "Warning" not in result.output and "warnings.warn" not in result.output
    assert result.output.count("PASS") == 7  # softmax and its backward in each of their three dtypes
    notes = [line for line in result.output.splitlines() if line.startswith("note:")]
    assert notes == [INTERPRETER_NOTE] and len(INTERPRETER_NOTE) < 120
    assert re.fullmatch(r"7 passed, 0 failed in \d+ s", result.output.splitlines()[-1]), result.output
    header = next(line for line in result.output.splitlines() if "max error" in line)
    assert header.index("tolerance") > header.index("max error")
    rows = [line for line in result.output.splitlines() if "PASS" in line]
    assert sorted(row.split("│")[1].strip() for row in rows) == ["matmul_epilogue"] + [
        f"{kernel}[T={dtype}]" for kernel in ("softmax", "softmax_backward") for dtype in ("bf16", "f16", "f32")]


def test_demo_table_keeps_long_kernel_names_whole(two_specs, tmp_path):
    """Three attention_backward_* rows once read "attention_backward_dk..." alike: names are never cut."""
    from tilegen.cli import _results_table
    from tilegen.runner import RunResult

    names = ["attention_causal_backward_dkdv[DT=bf16]", "attention_causal_backward_dq[DT=bf16]"]
    rows = [RunResult(name, "2x3x45x61, " * 6, "cpu", 0.001, True, tolerance=0.01) for name in names]
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(_results_table(rows))
    text = console.export_text()
    assert all(name in text for name in names), text
    assert "0.01" in text and "0.001" in text


def test_run_output_is_quiet_and_notes_the_default_config(tmp_path):
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["run", str(ROOT / "specs" / "matmul_epilogue.tile"), "--programs", "2"])
        tuned = CliRunner().invoke(app, ["run", str(ROOT / "specs" / "softmax.tile"), "--programs", "2"])
    assert escaped == []
    assert result.exit_code == 0 and "Warning" not in result.output and "note:" not in result.output
    assert tuned.exit_code == 0 and "Warning" not in tuned.output
    assert INTERPRETER_NOTE in tuned.output


def test_demo_table_is_whole_at_80_columns(monkeypatch):
    """Printed to a file or pipe (rich's 80 columns) the table keeps every column readable: the
    shape column was squeezed to nothing and "PASS" cut to "PA…" in a committed log."""
    from rich.console import Console

    from tilegen import cli
    from tilegen.runner import RunResult

    names = ["attention_causal_backward_dkdv[DT=bf16]", "rms_norm_backward[T=f16]"]
    rows = [RunResult(name, "x: 2x3x45x61", "cuda", 0.000244, True, tolerance=0.0505) for name in names]
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(cli, "out", console)
    cli._print_table(cli._results_table(rows))
    text = console.export_text()
    assert "…" not in text, text
    for cell in ("PASS", "cuda", "x: 2x3x45x61", "0.000244", "0.0505", "max error", "tolerance", "device"):
        assert cell in text, (cell, text)
