"""Data-parallel training through tilegen's kernels with torch's own engine
(benchmarks/train_ddp.py: DistributedDataParallel, gloo on the CPU under the interpreter, NCCL on
GPUs): two processes, each on half of every batch, train step for step as one process on the
whole batch."""

import csv
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "train_ddp.py"


def _losses(path):
    with open(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(line for line in f if not line.startswith("#"))]


def _run(out, world, env, *options):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
    command = [*(launcher if world > 1 else [sys.executable]), str(SCRIPT), str(out), *options]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def test_two_processes_train_as_one_in_the_interpreter(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    options = ("--steps", "2", "--batch", "2", "--size", "tiny")
    _run(tmp_path, 2, env, *options)
    _run(tmp_path, 1, env, *options)
    two, one = _losses(tmp_path / "train_ddp_tilegen_2gpu.csv"), _losses(tmp_path / "train_ddp_tilegen_1gpu.csv")
    assert len(two) == len(one) == 2
    assert two == pytest.approx(one, abs=1e-5)  # the second step: after the all-reduced gradients' update


@pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or torch.cuda.device_count() < 2,
                    reason="a test of two GPUs: TILEGEN_TEST_GPU=1 on a machine with two")
def test_two_gpus_train_as_one():
    """The small model in bfloat16 for 30 steps: the curves agree within bf16's rounding (each
    process's matmuls are over half the rows, so their sums round differently)."""
    out = ROOT / "benchmarks" / "results"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    options = ("--steps", "30", "--batch", "32", "--size", "small")
    _run(out, 2, env, *options)
    _run(out, 1, env, *options)
    two, one = _losses(out / "train_ddp_tilegen_2gpu.csv"), _losses(out / "train_ddp_tilegen_1gpu.csv")
    assert two == pytest.approx(one, rel=2e-2)
    assert two[-1] < two[0] - 1.0  # it learns
