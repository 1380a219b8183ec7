"""`tilegen bench` on a machine without a GPU, and the sweep/FLOP bookkeeping it relies on."""

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tilegen.bench import flop_count, is_plain_matmul, parse_sweep
from tilegen.check import check
from tilegen.cli import app
from tilegen.parser import parse


def spec(name):
    path = ROOT / "specs" / f"{name}.tile"
    return check(parse(path.read_text(), f"specs/{name}.tile"))


def test_parse_sweep_shares_values_and_zips_columns():
    assert parse_sweep(["M=N=K=128:384:128", "B=2"]) == [
        {"M": 128, "N": 128, "K": 128, "B": 2},
        {"M": 256, "N": 256, "K": 256, "B": 2},
        {"M": 384, "N": 384, "K": 384, "B": 2},
    ]
    assert parse_sweep(["N=16,1024"]) == [{"N": 16}, {"N": 1024}]


@pytest.mark.parametrize("bad", ["M", "M=", "M=a,b", "M=1:4", "1M=4", "M=1,2|N=1,2,3"])
def test_parse_sweep_refuses_bad_text(bad):
    with pytest.raises(ValueError):
        parse_sweep(bad.split("|"))


def test_flops_count_every_dot_and_batch():
    assert flop_count(spec("matmul_tutorial"), {"M": 2, "N": 3, "K": 5}) == 2 * 2 * 3 * 5
    assert flop_count(spec("matmul_batched"), {"B": 4, "M": 2, "N": 3, "K": 5}) == 2 * 4 * 2 * 3 * 5
    assert flop_count(spec("copy"), {"N": 100}) == 0


def test_plain_matmuls_are_timed_against_torch_matmul():
    assert is_plain_matmul(spec("matmul_naive")) and is_plain_matmul(spec("matmul_batched"))
    assert not is_plain_matmul(spec("matmul_tutorial"))  # fused activation
    assert not is_plain_matmul(spec("matmul_epilogue")) and not is_plain_matmul(spec("copy"))


def test_bench_without_gpu_says_so_and_exits_1():
    result = CliRunner().invoke(app, ["bench", str(ROOT / "specs" / "copy.tile")])
    assert result.exit_code == 1
    assert "tilegen bench needs a CUDA GPU" in result.output
    assert "Traceback" not in result.output
