"""Run every maintained benchmark, each in a fresh process, into one output folder (GPU only).

``python benchmarks/run_all.py OUT_DIR`` runs the benchmarks below in order. Each writes its CSVs
(and plots) into ``OUT_DIR``, and its output is saved as ``OUT_DIR/<name>.log``; a failed one is
reported and the rest still run (exit status 1 if any failed). ``--only`` and ``--skip`` pick
benchmarks by name, ``--list`` prints the commands without running anything (no GPU needed).
``OUT_DIR`` must be new or empty: several scripts append to their CSVs, so a second run into the
same folder would mix two runs' rows. docs/performance.md says what each table shows and which
of its tables each benchmark regenerates. CI does not run it: it needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@dataclass(frozen=True)
class Benchmark:
    """One maintained benchmark: ``steps`` maps the output folder to the argument lists it runs,
    each with this interpreter (``python <args>``), from the repository root; evaluated just
    before it runs, so a step may name a file an earlier step wrote."""

    name: str
    what: str
    steps: Callable[[Path], list[list[str]]]


def _script(name: str, *args: str | Path | int) -> list[str]:
    """The arguments that run ``benchmarks/<name>.py`` (a path from the repository root)."""
    assert (BENCH / f"{name}.py").is_file(), name
    return [f"benchmarks/{name}.py", *map(str, args)]


def _sweep_plots(out: Path) -> list[list[str]]:
    """The sweep's CSV is named after the device (``matmul_sweep_<device>.csv``), known once it ran."""
    found = sorted(out.glob("matmul_sweep_*.csv")) if out.is_dir() else [out / "matmul_sweep_<device>.csv"]
    return [_script("matmul_sweep", "--plot", csv) for csv in found]


BENCHMARKS = [
    Benchmark("demo", "every spec against its torch reference on the GPU (tilegen demo)",
              lambda out: [["-m", "tilegen", "demo", "specs", "-o", str(out / "generated"),
                            "--out-dir", str(out / "demo_out")]]),
    Benchmark("gpu_parity", "generated seed kernels equal to hand-written ones; tail and attention parity",
              lambda out: [["-m", "tilegen", "build", "tests/specs", "-o", str(out / "test_specs")],
                           _script("gpu_parity", out / "test_specs")]),
    Benchmark("targets", "generated vs hand-written kernels, matmul vs cuBLAS, launch cost, copy, tuning",
              lambda out: [_script("targets", out)]),
    Benchmark("studies", "lecture 14's and Triton tutorial 03's sweeps",
              lambda out: [_script("studies", out),
                           _script("plot", *(out / f"{n}.csv" for n in ("lecture14_sizes", "lecture14_blocks",
                                                                         "tutorial03")))]),
    Benchmark("reductions", "softmax, layer norm, RMS norm, cross-entropy vs torch and the tutorials",
              lambda out: [_script("reductions", out)]),
    Benchmark("long_rows", "rows longer than one tile vs torch",
              lambda out: [_script("long_rows", "--csv", out / "long_rows.csv")]),
    Benchmark("attention", "attention vs SDPA (flash, cuDNN) and Triton tutorial 06",
              lambda out: [_script("attention", out)]),
    Benchmark("matmul_layouts", "matmul_fast on every operand layout and dtype vs cuBLAS",
              lambda out: [_script("matmul_layouts", out)]),
    Benchmark("matmul_sweep", "matmul_fast vs cuBLAS: square sizes, LLM shapes, thin shapes",
              lambda out: [_script("matmul_sweep", out), *_sweep_plots(out)]),
    Benchmark("kernelbench_l1", "KernelBench level 1 problems written as specs vs torch",
              lambda out: [_script("kernelbench_l1", out),
                           _script("kernelbench_l1", "--plot", out / "kernelbench_l1.csv")]),
    Benchmark("liger_ops", "Liger-Kernel's forward ops vs torch eager and torch.compile",
              lambda out: [_script("liger_ops", out)]),
    Benchmark("optimizer", "AdamW over a model's parameters: tilegen.optim.AdamW vs torch's foreach, fused, compiled",
              lambda out: [_script("optimizer", out)]),
    Benchmark("backward", "training steps (forward + backward) vs torch; matmul's backward products vs cuBLAS",
              lambda out: [_script("backward", out), _script("backward", out, "products"),
                           _script("backward", "plot", out / "backward.csv")]),
    Benchmark("derived", "derived backwards vs hand-written ones and torch",
              lambda out: [_script("derived", out)]),
    Benchmark("ops", "custom ops: eager, CUDA graph replay, torch.compile; a compiled attention block",
              lambda out: [_script("ops", out)]),
    Benchmark("launch_overhead", "host microseconds per call of every spec vs the torch op",
              lambda out: [_script("launch_overhead", out)]),
    Benchmark("tune_effort", "the default quick tuning effort against full tuning, matmul_fast at 8 shapes",
              lambda out: [_script("tune_effort", out)]),
    Benchmark("matmul_fp8", "the fp8 GEMM with row-wise scales vs torch._scaled_mm and the f16 cuBLAS GEMM",
              lambda out: [_script("matmul_fp8", out)]),
    Benchmark("indexing", "scatter-adds (embedding backward, bincount, scatter_add) and jagged rows vs torch",
              lambda out: [_script("indexing", out)]),
    Benchmark("model_step", "the decoder's training step: torch eager, torch.compile, tilegen eager and compiled",
              lambda out: [_script("model_step", out)]),
    Benchmark("train_decoder", "a small decoder trained on tilegen kernels beside torch (float32, bfloat16)",
              lambda out: [_script("train_decoder", out), _script("train_decoder", out, 300, "bfloat16")]),
    Benchmark("patch_step", "a Hugging Face Llama of Llama-3-8B's layers, patched by tilegen.patch and not",
              lambda out: [_script("patch_step", out)]),
    Benchmark("train_ddp", "the decoder trained data-parallel on two GPUs (DDP under torchrun) and on one",
              lambda out: [["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            *_script("train_ddp", out)], _script("train_ddp", out)]),
]
NAMES = [b.name for b in BENCHMARKS]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``OUT_DIR [--only NAME ...] [--skip NAME ...] [--list] [--timeout S]``."""
    parser = argparse.ArgumentParser(
        description="Run every maintained benchmark (GPU only), each in a fresh process, into OUT_DIR.",
        epilog="benchmarks: " + ", ".join(NAMES),
    )
    parser.add_argument("out_dir", type=Path, nargs="?", help="a new or empty folder for the CSVs, plots and logs")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", help="run these benchmarks alone")
    parser.add_argument("--skip", nargs="+", choices=NAMES, metavar="NAME", default=[], help="leave these out")
    parser.add_argument("--list", action="store_true", help="print each benchmark's commands and exit (no GPU)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds allowed to each command")
    args = parser.parse_args(argv)
    if args.out_dir is None:
        if not args.list:
            parser.error("OUT_DIR is required (except with --list)")
        args.out_dir = Path("OUT_DIR")
    return args


def chosen(args: argparse.Namespace) -> list[Benchmark]:
    """The benchmarks ``--only`` and ``--skip`` leave, in the order of ``BENCHMARKS``."""
    return [b for b in BENCHMARKS if (not args.only or b.name in args.only) and b.name not in args.skip]


def run(benchmark: Benchmark, out: Path, timeout: float | None) -> bool:
    """Run ``benchmark``'s steps in order, its output both printed and saved to ``out/<name>.log``;
    False (and the rest of its steps skipped) at the first step that fails or runs past ``timeout``."""
    with open(out / f"{benchmark.name}.log", "w", encoding="utf-8") as log:
        for step in benchmark.steps(out):
            command = [sys.executable, *step]
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            start = time.perf_counter()
            with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1) as process:
                timer = threading.Timer(timeout, process.kill) if timeout is not None else None
                if timer is not None:
                    timer.start()
                assert process.stdout is not None
                for line in process.stdout:
                    sys.stdout.write(line)
                    log.write(line)
                code = process.wait()
                if timer is not None:
                    timer.cancel()
            seconds = time.perf_counter() - start
            log.write(f"# exit status {code} after {seconds:.0f} s\n")
            if code != 0:
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks; 0 if every one passed, 1 otherwise (2 for a bad command line)."""
    args = parse_args(argv)
    benchmarks = chosen(args)
    if args.list:
        for b in benchmarks:
            print(f"{b.name}: {b.what}")
            for step in b.steps(args.out_dir):
                print("    python " + " ".join(step))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("run_all: no CUDA GPU here; the benchmarks time GPU kernels (--list prints them)", file=sys.stderr)
        return 1
    out: Path = args.out_dir
    if out.exists() and any(out.iterdir()):
        print(f"run_all: {out} is not empty (several benchmarks append to their CSVs): give a new folder",
              file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for b in benchmarks:
        print(f"== {b.name}: {b.what}", flush=True)
        if not run(b, out.resolve(), args.timeout):
            failed.append(b.name)
    passed = len(benchmarks) - len(failed)
    print(f"{passed} of {len(benchmarks)} benchmarks ran" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
