"""``tilegen demo`` and ``tilegen run`` print no Python or NumPy warnings: the interpreter's
floating-point RuntimeWarnings and the tuned launchers' "cannot time autotune configs" notice
are caught around the kernel runs, and one note under the table says which tuned specs ran
their default config. Launchers called directly keep warning.
"""

import shutil
import warnings

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tilegen import runner
from tilegen.build import build, check_file, find_specs
from tilegen.cli import app

#: A tuned spec (the notice) and the tanh-GELU epilogue (exp overflows in NumPy).
SPECS = ("softmax.tile", "softmax_backward.tile", "matmul_epilogue.tile")
NOTE = "note: the Triton interpreter cannot time autotune configs, so each tuned spec ran its default config"


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


def test_launchers_called_directly_still_warn(two_specs, tmp_path):
    """Outside the demo a library user still hears that the interpreter ran the default config."""
    build([two_specs], tmp_path / "gen")
    spec = check_file(find_specs([two_specs / "softmax.tile"])[0])
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


def test_demo_output_is_quiet_and_notes_the_default_configs(two_specs, tmp_path):
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        result = CliRunner().invoke(
            app,
            ["demo", str(two_specs), "-o", str(tmp_path / "gen"), "--out-dir", str(tmp_path / "o"), "--programs", "2"],
        )
    assert result.exit_code == 0, result.output
    assert escaped == [], [str(w.message) for w in escaped]
    assert "Warning" not in result.output and "warnings.warn" not in result.output
    assert result.output.count("PASS") == 3
    notes = [line for line in result.output.splitlines() if line.startswith("note:")]
    assert notes == [f"{NOTE} (softmax, softmax_backward)"]


def test_run_output_is_quiet_and_notes_the_default_config(tmp_path):
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["run", str(ROOT / "specs" / "matmul_epilogue.tile"), "--programs", "2"])
        tuned = CliRunner().invoke(app, ["run", str(ROOT / "specs" / "softmax.tile"), "--programs", "2"])
    assert escaped == []
    assert result.exit_code == 0 and "Warning" not in result.output and "note:" not in result.output
    assert tuned.exit_code == 0 and "Warning" not in tuned.output
    assert f"{NOTE} (softmax)" in tuned.output
