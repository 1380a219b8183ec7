"""KernelBench level 1 problems written as specs, on the GPU against torch at the suite's
``get_inputs`` shapes (and smaller, odd ones): every problem benchmarks/kernelbench_problems.py maps
to a spec (all 100: matmuls 1-18, activations 19-32 and 88, norms 33-40, poolings 41-46,
reductions 47-53, convolutions 50, 54-56, 59, 60, 62, 63, 66, 67, 76, 80, 82-87 (depthwise, 86
depthwise-separable) and 87, transposed convolutions 57, 58, 61, 64, 65, 68-75, 77-79 and 81 (72,
73 and 75 grouped), scans 89-93, losses 94-96 and 98-100, attention 97), each timed against its own
torch expression (KernelBench's ``forward``) on inputs made as the suite's ``get_inputs`` makes
them (``torch.rand``), the module's parameters included; and two problems the suite has since
replaced: the product over the middle dimension of 128 x 4096 x 4095 (former 50, ``torch.randn``)
and the cosine similarity loss (former 97, 128 x 4096).

``python benchmarks/kernelbench_l1.py OUT_DIR [--suite] [--case-seconds=S] [KERNEL | NUMBER ...]``
(every case when none is named; a number names a problem; ``--suite``: only the suite's own
``get_inputs`` shapes) prints one line per case and appends it to ``OUT_DIR/kernelbench_l1.csv`` as
it goes (a header with the device, torch and Triton versions first when the file is new); a case
that raises, or runs past ``S`` seconds (default :data:`CASE_SECONDS`; checked between Python steps,
so a compile in progress finishes first), is reported on stderr and the run goes on. Per case: the
tilegen function and torch's expression, each timed eager (launches back to back,
``triton.testing.do_bench``, L2 flushed, median of 5 interleaved rounds) and in a CUDA graph
(``do_bench_cudagraph``); the copy roof (``copy_`` of the input's bytes, eager); tilegen's first
call in this process (autotuning and compiling included), its max error against torch, whether it
passes the suite's check (``within_tolerance``: ``torch.allclose`` at atol = rtol = 1e-2) and, where
torch counts them (matmuls, convolutions), the FLOPs and each side's TFLOP/s. Ratios are torch's
time over tilegen's (above 1: tilegen faster).
``python benchmarks/kernelbench_l1.py --plot CSV`` draws a CSV's eager and graphed ratios as bars
beside it; it needs matplotlib, not a GPU.
"""

import contextlib
import csv
import os
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.testing
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-kernelbench-")

from benchmarks.kernelbench_problems import RUNS, Run, problem  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
#: KernelBench's tolerance for fp32 problems: atol = rtol = 1e-2 (its ``torch.allclose`` check).
TOLERANCE = 1e-2

#: The seconds one case may take (its first call's tuning and compiling included) before the run
#: moves on to the next: one slow case must not take a device call's whole time.
CASE_SECONDS = 240


class CaseTimeout(Exception):
    """A case ran past its time (:func:`time_limit`)."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise CaseTimeout in this (the main) thread once ``seconds`` have passed inside the block:
    SIGALRM, whose handler runs at the next Python step (a compile or a kernel launched runs on)."""
    def expire(signum, frame):
        raise CaseTimeout(f"past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Case:
    """One problem on the GPU: the kernel (``generated/<kernel>.py``), the problem's torch
    expression, its inputs at each of ``sizes`` and how the kernel's launcher takes them."""

    problem: str
    kernel: str
    reference: Callable[..., torch.Tensor]
    make: Callable[[tuple[int, ...]], tuple]
    sizes: tuple[tuple[int, ...], ...]
    launch: Callable[..., torch.Tensor] = lambda f, *xs: f(*xs)


def _rand(shape, device="cuda"):
    return torch.rand(shape, device=device)


def _from_table(number: int, run: Run) -> Case:
    return Case(problem(number)[1], run.kernel, run.forward, lambda sizes: run.make(sizes, _rand, "cuda"),
                (run.sizes, *run.more), run.launch)


def _pair(shape):  # the former problem 97's inputs, as MSE's: torch.rand scaled by a random scale, torch.rand
    return _rand(shape) * torch.rand((), device="cuda"), _rand(shape)


#: Every problem the table maps, in its order, then the two former problems.
CASES: list[Case] = [
    *(_from_table(number, run) for number, run in RUNS.items()),
    Case("50_Product_reduction (former)", "prod_reduction", lambda x: torch.prod(x, dim=1),
         lambda shape: (torch.randn(shape, device="cuda"),), ((128, 4096, 4095), (16, 1000, 777))),
    Case("97_CosineSimilarityLoss (former)", "cosine_similarity_loss",
         lambda p, t: torch.mean(1 - torch.nn.functional.cosine_similarity(p, t, dim=1)), _pair,
         ((128, 4096), (4096, 4096), (1000, 777))),
]


def interleaved(functions: dict, bench) -> dict:
    """Median ms of each function over ROUNDS rounds in which they take turns."""
    times = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name, fn in functions.items():
            times[name].append(bench(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def first_call(kernel: str, inputs: tuple, launch: Callable = lambda f, *xs: f(*xs)):
    """The generated function of ``kernel`` (called through ``launch``), its result on ``inputs``
    and the seconds that first call took in this process (tuning and compiling included)."""
    function = getattr(load_module(ROOT / "generated" / f"{kernel}.py"), kernel)

    def ours(*xs):
        return launch(function, *xs)

    torch.cuda.synchronize()
    start = time.perf_counter()
    result = ours(*inputs)
    torch.cuda.synchronize()
    return ours, result, time.perf_counter() - start


def flops(reference: Callable, xs: tuple) -> int:
    """The floating-point operations torch counts for ``reference(*xs)`` (its matmuls and
    convolutions; 0 for elementwise work and reductions), by ``FlopCounterMode`` on meta copies."""
    meta = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in xs)
    with FlopCounterMode(display=False) as counter:
        reference(*meta)
    return counter.get_total_flops()


def case(which: Case, xs: tuple) -> dict:
    kernel, reference = which.kernel, which.reference
    ours, y, first = first_call(kernel, xs, which.launch)
    want = reference(*xs)
    error = (y.double() - want.double()).abs().nan_to_num(0.0).max().item()
    # the suite's check: torch.allclose(y, want, atol=1e-2, rtol=1e-2), NaN where torch has NaN
    right = torch.isclose(y.float(), want.float(), rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True).all().item()
    tensors = [x for x in xs if isinstance(x, torch.Tensor)]  # not a scalar input (eps)
    outs = [torch.empty_like(x) for x in tensors]

    def copy():
        for out, x in zip(outs, tensors, strict=True):
            out.copy_(x)

    eager = interleaved({"tilegen": lambda: ours(*xs), "torch": lambda: reference(*xs), "copy": copy},
                        lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100))
    graph = interleaved({"tilegen": lambda: ours(*xs), "torch": lambda: reference(*xs)},
                        lambda fn: triton.testing.do_bench_cudagraph(fn, rep=100))
    read = sum(x.numel() * x.element_size() for x in tensors)
    count = flops(reference, xs)
    moved = read + y.numel() * y.element_size()  # read the inputs once, write y once
    return {
        "problem": which.problem, "kernel": kernel, "shape": "x".join(map(str, xs[0].shape)), "dtype": "f32",
        "tilegen_ms": eager["tilegen"], "torch_ms": eager["torch"], "ratio_eager": eager["torch"] / eager["tilegen"],
        "tilegen_graph_ms": graph["tilegen"], "torch_graph_ms": graph["torch"],
        "ratio_graph": graph["torch"] / graph["tilegen"],
        "tilegen_TBps": moved / eager["tilegen"] / 1e9,
        "copy_TBps": 2 * read / eager["copy"] / 1e9,
        "first_call_s": first, "max_error": error, "GFLOP": count / 1e9,
        "tilegen_TFLOPs": count / eager["tilegen"] / 1e9, "torch_TFLOPs": count / eager["torch"] / 1e9,
        "within_tolerance": right,
    }


def append_rows(path: Path, note: str, rows) -> None:
    """Append each row (a dict) of ``rows`` to the CSV at ``path`` as it comes, and print it; a
    new file starts with the device, torch and Triton versions and ``note``."""
    new = not path.exists()
    with open(path, "a", newline="") as f:
        if new:
            f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
            f.write(f"# {note}\n")
        writer = None
        for row in rows:
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                if new:
                    writer.writeheader()
            writer.writerow(row)
            f.flush()
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            torch.cuda.empty_cache()


def main(out: Path, names: list[str], suite: bool = False, case_seconds: int = CASE_SECONDS) -> None:
    """Every case of CASES (those of a kernel or a problem number in ``names``, where given), at
    each of its sizes (``suite``: the first, the suite's own, only), each within ``case_seconds``."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    def rows():
        for which in CASES:
            if names and which.kernel not in names and which.problem.split("_")[0] not in names:
                continue
            for sizes in which.sizes[:1] if suite else which.sizes:
                try:
                    with time_limit(case_seconds):
                        row = case(which, which.make(sizes))
                except CaseTimeout as error:
                    print(f"TIMED OUT {which.problem} ({which.kernel}) at {sizes}: {error}", file=sys.stderr)
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    continue
                except Exception:  # one case that fails (out of memory, a compile error) ends no run
                    print(f"FAILED {which.problem} ({which.kernel}) at {sizes}:", file=sys.stderr)
                    traceback.print_exc()
                    torch.cuda.empty_cache()
                    continue
                yield row

    note = ("ratio = torch ms / tilegen ms (eager: do_bench, L2 flushed; graph: do_bench_cudagraph); "
            "TB/s = (bytes of the inputs + bytes of y) / eager time; copy_TBps = copy_ of the inputs' bytes")
    append_rows(out / "kernelbench_l1.csv", note, rows())

def plot(path: Path) -> Path:
    """Bars of torch ms / tilegen ms per case, eager and graphed, with 1.0 marked; ``<csv>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    labels = [f"{r['kernel']}\n{r['shape']}" for r in rows]
    figure, axes = plt.subplots(figsize=(max(14, 0.35 * len(rows)), 6))  # room for each label
    positions = range(len(rows))
    axes.bar([p - 0.2 for p in positions], [float(r["ratio_eager"]) for r in rows], 0.4, label="eager")
    axes.bar([p + 0.2 for p in positions], [float(r["ratio_graph"]) for r in rows], 0.4, label="CUDA graph")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(list(positions), labels, rotation=60, ha="right", fontsize=7)
    axes.set_ylabel("torch ms / tilegen ms")
    axes.set_title(f"KernelBench level 1 specs vs torch ({lines[0][2:]})", fontsize=10)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--plot":
        print(plot(Path(sys.argv[2])))
    else:
        arguments = sys.argv[2:]
        limit = [int(a.split("=", 1)[1]) for a in arguments if a.startswith("--case-seconds=")]
        names = [a for a in arguments if a != "--suite" and not a.startswith("--case-seconds=")]
        main(Path(sys.argv[1]), names, "--suite" in arguments, limit[-1] if limit else CASE_SECONDS)
