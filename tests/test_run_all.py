"""benchmarks/run_all.py, the one command that runs every maintained benchmark: its command line
works without a GPU, it names every benchmark script there is, and it refuses to time on a CPU."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# Modules the benchmarks import, and scripts another benchmark runs: not benchmarks of their own.
HELPERS = {"run_all", "decoder", "plot", "tail_parity", "attention_parity", "kernelbench_problems"}


@pytest.fixture(scope="module")
def run_all():
    spec = importlib.util.spec_from_file_location("benchmarks_run_all", ROOT / "benchmarks" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_list_names_every_benchmark_script_and_each_exists(run_all, capsys):
    assert run_all.main(["--list"]) == 0
    listed = capsys.readouterr().out
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    for name in sorted(scripts - HELPERS):
        assert f"benchmarks/{name}.py" in listed, f"run_all does not run benchmarks/{name}.py"
    for line in listed.splitlines():
        for word in line.split():
            if word.startswith("benchmarks/") and word.endswith(".py"):
                assert (ROOT / word).is_file(), word


def test_only_and_skip_pick_benchmarks_in_order(run_all):
    args = run_all.parse_args(["out", "--only", "ops", "targets", "attention", "--skip", "attention"])
    assert [b.name for b in run_all.chosen(args)] == ["targets", "ops"]


def test_help_and_bad_names_exit_as_argparse_does(run_all, capsys):
    with pytest.raises(SystemExit) as help_exit:
        run_all.parse_args(["--help"])
    assert help_exit.value.code == 0 and "--only" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        run_all.parse_args(["out", "--only", "no_such_benchmark"])
    assert bad.value.code == 2
    with pytest.raises(SystemExit) as missing:
        run_all.parse_args([])
    assert missing.value.code == 2 and "OUT_DIR is required" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_refuses_to_run_without_a_gpu_and_writes_nothing(run_all, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_all.main([str(out)]) == 1
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not out.exists()


def test_refuses_a_folder_that_holds_files(run_all, tmp_path, capsys, monkeypatch):
    """Several benchmarks append to their CSVs: a second run into one folder would mix two runs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (tmp_path / "targets.csv").write_text("old run\n")
    assert run_all.main([str(tmp_path)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["targets.csv"]


def test_a_failing_step_is_logged_and_stops_its_benchmark(run_all, tmp_path):
    """A step that exits non-zero ends its benchmark (later steps skipped) with its status logged."""
    fail = run_all.Benchmark("fails", "a step that fails", lambda out: [["-c", "print('ran'); raise SystemExit(3)"],
                                                                      ["-c", "print('second step')"]])
    assert run_all.run(fail, tmp_path, timeout=60) is False
    log = (tmp_path / "fails.log").read_text()
    assert "ran" in log and "exit status 3" in log and "second step" not in log
    assert sys.executable in log
