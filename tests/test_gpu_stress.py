"""Stress: generated kernels interleaved over two GPUs, two streams per GPU and both call paths
(issue "a spec means one thing", item 8). One process that ran four kernels on both GPUs, on
side streams, through the generated function and through ``torch.ops.tilegen.<kernel>``, ended
once in "Failed to create tensor map descriptor: an illegal memory access was encountered" at
attention's rank-4 descriptor; three later runs of similar sequences did not repeat it.

Each round makes every call of kernels {copy, softmax, rms_norm, matmul_fast, attention,
attention_causal, cross_entropy, layer_norm} x devices {cuda:0, cuda:1} x streams {the device's
default stream, a side stream} x paths {the generated function, the custom op}, in an order
shuffled from a fixed seed, without synchronizing between calls; then it synchronizes both
devices and checks every result against its module's ``reference`` under
:mod:`tilegen.tolerance` (the rule ``tilegen demo`` applies on a GPU). The current device stays
cuda:0, so calls on cuda:1's default stream take the launchers' "tensors on another GPU" path,
and calls on a side stream run with its device current (``torch.cuda.stream`` switches it).
Inputs are made on the device's default stream, which a side stream waits for before its call;
every tensor lives until the round's synchronization. A failure (an error raised by a call, by
the synchronization, or a result outside its tolerance) reports every call of the round so far,
in order: CUDA errors surface asynchronously, at a later call than the one that caused them.

    TILEGEN_TEST_GPU=1 python -m pytest tests/test_gpu_stress.py     # 2 rounds (TILEGEN_STRESS_ROUNDS)
    python tests/test_gpu_stress.py --rounds 50                      # loop until a round fails

Script options: ``--rounds N``, ``--seed S`` (each seed shuffles otherwise), ``--kernels a,b``,
``--sync-each-call`` (synchronize after every call, to pin down a failing one) and
``--launch-blocking`` (``CUDA_LAUNCH_BLOCKING=1``: every launch waits, so an error surfaces at its
own call). Exit status 0 when every round passed, 1 at the first failure, 2 without 2 GPUs.
Skipped on a machine with fewer than 2 GPUs and without ``TILEGEN_TEST_GPU=1`` (the rest of the
suite runs in Triton's interpreter; tests/conftest.py).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

#: kernel -> (dtype binding, sizes, scalar inputs). Sizes leave partial tiles; the matmul and the
#: attentions have 16-byte aligned rows, so they run through TMA descriptors (rank 2 and rank 4)
#: on a Hopper GPU; attention_causal runs in bf16, the others in their first dtype. Every dtype
#: variable of a spec must be bound here (test_the_stress_plan_without_a_gpu checks, in CI).
KERNELS: dict[str, tuple[dict[str, str], dict[str, int], dict[str, float]]] = {
    "copy": ({}, {"N": 100_003}, {}),
    "softmax": ({"T": "f32"}, {"M": 37, "N": 1000}, {}),
    "rms_norm": ({"T": "f16"}, {"M": 37, "N": 1000}, {"eps": 1e-5, "offset": 1.0}),
    "layer_norm": ({"T": "f16"}, {"M": 37, "N": 1000}, {"eps": 1e-5}),
    "cross_entropy": ({"T": "bf16", "W": "f32"}, {"M": 37, "V": 5000},
                      {"ignore_index": -100, "label_smoothing": 0.1, "softcap": 30.0, "lse_square_scale": 1e-4}),
    "matmul_fast": ({"T": "f16"}, {"M": 300, "N": 256, "K": 192}, {}),
    "attention": ({"DT": "f16"}, {"B": 2, "H": 3, "S": 200, "T": 136, "D": 64}, {"scale": 0.125}),
    "attention_causal": ({"DT": "bf16"}, {"B": 2, "H": 3, "S": 200, "D": 64}, {"scale": 0.125}),
}
DEVICES = (0, 1)
STREAMS = ("default", "side")
PATHS = ("function", "op")
ROUNDS = int(os.environ.get("TILEGEN_STRESS_ROUNDS", "2"))


@dataclass(frozen=True)
class Call:
    """One launch: a kernel on a device, on its default or side stream, through the generated
    function or the custom op."""

    kernel: str
    device: int
    stream: str
    path: str

    def __str__(self) -> str:
        binding = "".join(f"[{var}={dtype}]" for var, dtype in KERNELS[self.kernel][0].items())
        return f"{self.kernel}{binding} on cuda:{self.device}, {self.stream} stream, {self.path}"


@dataclass
class Kernel:
    """A generated module, its spec specialized to the dtypes it runs in, and its inputs' sizes."""

    module: object
    spec: object
    sizes: dict[str, int]
    scalars: dict[str, float]

    def inputs(self, device: torch.device, seed: int) -> list:
        from tilegen.runner import random_inputs

        inputs = random_inputs(self.spec, self.sizes, str(device), seed=seed)
        inputs.update(self.scalars)
        return list(inputs.values())


class StressFailure(AssertionError):
    """A round failed; the message lists its calls up to the failure."""


@dataclass
class Stress:
    """The kernels, one side stream per device, and the log of the round being run."""

    kernels: dict[str, Kernel]
    side: dict[int, torch.cuda.Stream] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def fail(self, round_index: int, rounds: int, seed: int, what: str) -> StressFailure:
        calls = "\n".join(f"  {i + 1:3d}. {line}" for i, line in enumerate(self.log))
        return StressFailure(
            f"round {round_index + 1} of {rounds} (seed {seed}; the rounds before it passed): {what}\n"
            f"the calls of this round so far, in order (CUDA errors surface at a later call than "
            f"their cause):\n{calls}"
        )


def _module(kernel: str):
    """The committed generated module of ``kernel``, shared with tests/conftest.py's loader."""
    from tilegen.runner import load_module

    return sys.modules.get(f"tilegen_generated_{kernel}") or load_module(ROOT / "generated" / f"{kernel}.py")


def _kernels(names) -> dict[str, Kernel]:
    from tilegen import model as m
    from tilegen.check import check
    from tilegen.parser import parse

    kernels = {}
    for name in names:
        binding, sizes, scalars = KERNELS[name]
        path = ROOT / "specs" / f"{name}.tile"
        spec = m.specialize(check(parse(path.read_text(encoding="utf-8"), f"specs/{name}.tile")), binding)
        kernels[name] = Kernel(_module(name), spec, sizes, scalars)
    return kernels


def round_calls(kernels) -> list[Call]:
    """Every call of a round, unshuffled: each kernel of ``kernels`` x device x stream x path."""
    return [Call(*c) for c in itertools.product(kernels, DEVICES, STREAMS, PATHS)]


def round_order(calls: list[Call], seed: int, round_index: int) -> list[Call]:
    """``calls`` in the order round ``round_index`` of a run of ``seed`` makes them."""
    order = list(calls)
    random.Random(seed + round_index).shuffle(order)
    return order


def call_inputs(kernel: Kernel, call: Call, round_seed: int, index: int, device=None) -> list:
    """The arguments of ``call``, the round's ``index``-th call (0-based) in a round of seed
    ``round_seed``: on the call's GPU, or on ``device`` where given (the same values; the plan's
    check without a GPU makes them on the CPU). Raises what :func:`tilegen.runner.random_inputs`
    raises (KeyError for a size or dtype variable the kernel's entry in KERNELS leaves unbound)."""
    return kernel.inputs(device or torch.device("cuda", call.device), round_seed * 100_003 + index)


def launcher(kernel: Kernel, call: Call):
    """What ``call`` launches: the module's custom op or its generated function."""
    return kernel.module.op if call.path == "op" else getattr(kernel.module, call.kernel)


def _synchronize() -> None:
    for device in DEVICES:
        torch.cuda.synchronize(device)


def run_round(stress: Stress, calls: list[Call], seed: int, sync_each_call: bool):
    """Launch ``calls`` in order without synchronizing (unless ``sync_each_call``), then
    synchronize and check each result. Raises whatever a call or the synchronization raises, or
    AssertionError naming the first result outside its tolerance; ``stress.log`` holds the calls."""
    from tilegen import tolerance

    launched = []
    for index, call in enumerate(calls):
        stress.log.append(str(call))
        kernel = stress.kernels[call.kernel]
        device = torch.device("cuda", call.device)
        args = call_inputs(kernel, call, seed, index)  # made on the device's default stream
        launch = launcher(kernel, call)
        if call.stream == "side":
            side = stress.side[call.device]
            side.wait_stream(torch.cuda.default_stream(device))
            with torch.cuda.stream(side):
                outputs = launch(*args)
        else:
            outputs = launch(*args)
        launched.append((call, args, outputs))
        if sync_each_call:
            _synchronize()
    stress.log.append("synchronize cuda:0 and cuda:1")
    _synchronize()
    assert torch.cuda.current_device() == 0, f"a call left cuda:{torch.cuda.current_device()} current"
    for index, (call, args, outputs) in enumerate(launched):
        kernel = stress.kernels[call.kernel]
        for output in outputs if isinstance(outputs, tuple) else (outputs,):
            where = output.device
            assert where == torch.device("cuda", call.device), f"call {index + 1} ({call}): output on {where}"
        expected = kernel.module.reference(*args)
        result = tolerance.compare(kernel.spec, args, outputs, expected, kernel.module.reference)
        assert result.passed, f"call {index + 1} ({call}) is outside its tolerance: {result.detail}"


def stress(rounds: int, seed: int, kernels=tuple(KERNELS), sync_each_call: bool = False, report=None) -> None:
    """Run ``rounds`` rounds of every call (see the module docstring), each shuffled by
    ``random.Random(seed + round)``. Raises :class:`StressFailure` at the first failure;
    ``report(line)`` hears one line per round passed."""
    state = Stress(_kernels(kernels))
    state.side = {device: torch.cuda.Stream(device=device) for device in DEVICES}
    calls = round_calls(kernels)
    with torch.cuda.device(0):  # cuda:0 current throughout (restored after)
        _rounds(state, calls, rounds, seed, sync_each_call, report)


def _rounds(state: Stress, calls: list[Call], rounds: int, seed: int, sync_each_call: bool, report) -> None:
    for round_index in range(rounds):
        order = round_order(calls, seed, round_index)
        state.log = []
        start = time.perf_counter()
        try:
            run_round(state, order, seed + round_index, sync_each_call)
        except Exception as error:  # any error: report the round's calls with it
            what = f"{type(error).__name__}: {error}"
            raise state.fail(round_index, rounds, seed, what) from error
        if report is not None:
            report(f"round {round_index + 1}/{rounds}: {len(order)} calls passed ({time.perf_counter() - start:.1f} s)")


def _two_gpus() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


def test_kernels_interleaved_over_devices_streams_and_paths():
    # checked here, not in a skipif mark, so that importing this file starts no CUDA (the script's
    # --launch-blocking must come first)
    if os.environ.get("TILEGEN_TEST_GPU") != "1" or not _two_gpus():
        pytest.skip("needs TILEGEN_TEST_GPU=1 and 2 GPUs")
    assert os.environ.get("TRITON_INTERPRET") != "1"
    stress(ROUNDS, seed=0, report=print)


def test_the_stress_plan_without_a_gpu():
    """A round makes each kernel x device x stream x path call once; every kernel has a spec,
    a committed module and sizes for every size symbol; every call of the first round is built as
    the GPU test builds it (its kernel's dtype variables bound, its inputs made from the same
    seed, on the CPU here) and accepted by its op's fake implementation on its GPU, which checks
    the inputs as the launcher does and gives outputs on that GPU; nothing launches. A failure
    lists the round's calls."""
    from tests.conftest import fake_call
    from tilegen.runner import default_sizes

    calls = round_calls(KERNELS)
    assert len(calls) == len(set(calls)) == 8 * 2 * 2 * 2
    kernels = _kernels(KERNELS)
    for name, kernel in kernels.items():
        assert default_sizes(kernel.spec, 1, kernel.sizes) == kernel.sizes, name
        assert {t.name.id for t in kernel.spec.inputs if t.is_scalar} == set(kernel.scalars), name
        variables = {v.name.id for v in kernel.spec.dtype_vars}
        assert set(KERNELS[name][0]) == variables, f"{name}: bind every dtype variable"
    order = round_order(calls, 0, 0)
    assert sorted(order, key=str) == sorted(calls, key=str) and order != calls
    for index, call in enumerate(order):
        kernel = kernels[call.kernel]
        args = call_inputs(kernel, call, 0, index, device="cpu")
        assert callable(launcher(kernel, call)), call
        outputs = fake_call(kernel.module, args, f"cuda:{call.device}")
        assert {o.device for o in outputs} == {torch.device("cuda", call.device)}, call
    state = Stress({}, log=[str(Call("attention", 1, "side", "op")), "synchronize cuda:0 and cuda:1"])
    message = str(state.fail(1, 3, 7, "RuntimeError: boom"))
    assert message.startswith("round 2 of 3 (seed 7; the rounds before it passed): RuntimeError: boom\n")
    assert message.endswith("    1. attention[DT=f16] on cuda:1, side stream, op\n    2. synchronize cuda:0 and cuda:1")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Interleave tilegen kernels over cuda:0 and cuda:1, their default and side streams, and "
        "the generated function and custom op, round after round; check every result against its "
        "reference; at a failure print the round's calls so far."
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated subset of " + ", ".join(KERNELS))
    parser.add_argument("--sync-each-call", action="store_true", help="synchronize both GPUs after every call")
    parser.add_argument("--launch-blocking", action="store_true", help="CUDA_LAUNCH_BLOCKING=1, set before CUDA starts")
    args = parser.parse_args(argv)
    if args.launch_blocking:
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    # tune in this process, on whichever GPU runs a kernel first (tunes on disk would skip that):
    # a tune on the other GPU than the process's first CUDA-graph capture once ran its kernel on
    # the wrong device (the runtime's graph_timing)
    os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-stress-"))
    kernels = tuple(k for k in args.kernels.split(",") if k)
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernels {unknown}; choose from {', '.join(KERNELS)}")
    if os.environ.get("TRITON_INTERPRET") == "1" or not _two_gpus():
        print("needs 2 GPUs (and TRITON_INTERPRET unset)", file=sys.stderr)
        return 2
    print(f"{len(kernels) * 8} calls per round, {args.rounds} rounds, seed {args.seed}", flush=True)
    start = time.perf_counter()
    try:
        stress(args.rounds, args.seed, kernels, args.sync_each_call, report=lambda line: print(line, flush=True))
    except StressFailure as failure:
        print(f"FAILED after {time.perf_counter() - start:.1f} s\n{failure}", file=sys.stderr)
        return 1
    print(f"all {args.rounds} rounds passed in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
