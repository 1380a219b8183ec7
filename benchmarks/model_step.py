"""A training step of benchmarks/decoder.py's model on the GPU, torch's ops and tilegen's kernels
each eager, under torch.compile and under its ``mode="reduce-overhead"`` (CUDA graphs), each
column in a fresh process (so no column's compiled graphs or caches weigh on the next's host time).

``python benchmarks/model_step.py [OUT_DIR] [STEPS] [MODELS]`` (default ``benchmarks/results``,
20, every model; ``MODELS`` a comma list such as ``small``) writes ``model_step_<device>.csv`` and
prints it. A step is the loss's forward, its backward and
an AdamW update, from float32 parameters computing in bfloat16 (``decoder.Config.compute``),
synchronized, wall clock: what a training loop sees. ``first_ms`` is the first step in the
column's process (torch.compile's compile, tilegen's compiling and tuning of new shapes, from
Triton's and tilegen's caches on disk as earlier columns left them); ``step_ms`` the median of the
``STEPS`` after three more; ``peak_mib`` the peak of ``torch.cuda.max_memory_allocated`` over the
steps; ``vs_eager`` and ``vs_compile`` torch eager's and torch.compile's median step over this
column's (above 1: faster than them). Models: the repository's small one (vocabulary 256), a
medium one (width 1024, 4 layers, 8 x 1024 tokens) and a Llama-like one (vocabulary 32000, width
2048, 2 layers, 4 x 2048 tokens).
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decoder

MODELS = {
    "small": (decoder.Config(vocab=256, dim=384, heads=6, layers=4, hidden=1024, context=256, compute="bfloat16"), 32),
    "medium": (decoder.Config(vocab=256, dim=1024, heads=16, layers=4, hidden=2816, context=1024,
                              compute="bfloat16"), 8),
    "llama_like": (decoder.Config(vocab=32000, dim=2048, heads=16, layers=2, hidden=5632, context=2048,
                                  compute="bfloat16"), 4),
}


def _steps(loss_fn, config: decoder.Config, batch: int, steps: int) -> tuple[float, float, float]:
    """First step, median step (ms) and peak memory (MiB) of training with ``loss_fn(params, idx,
    target)`` on random tokens."""
    params = decoder.init_params(config, 0, "cuda")
    optimizer = torch.optim.AdamW(params.values(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(0)
    idx = torch.randint(0, config.vocab, (batch, config.context), device="cuda", generator=generator)
    target = torch.randint(0, config.vocab, (batch, config.context), device="cuda", generator=generator)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps + 4):
        start = time.perf_counter()
        value = loss_fn(params, idx, target)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    peak = torch.cuda.max_memory_allocated() / 2**20
    del params, optimizer
    torch.cuda.empty_cache()
    return times[0], statistics.median(times[4:]), peak


WAYS = ("torch eager", "torch torch.compile", "torch reduce-overhead",
        "tilegen eager", "tilegen torch.compile", "tilegen reduce-overhead")


def column(model: str, way: str, steps: int) -> tuple[float, float, float]:
    """:func:`_steps` of one column (``way``, one of :data:`WAYS`) of ``model`` in this process."""
    config, batch = MODELS[model]
    tables = decoder.rope_tables(config, "cuda")
    name, mode = way.split(" ", 1)
    ops = decoder.TORCH if name == "torch" else decoder.tilegen_ops()

    def eager(params, idx, target):
        return decoder.loss(ops, params, idx, target, config, tables)

    fn = {"eager": eager, "torch.compile": torch.compile(eager),
          "reduce-overhead": torch.compile(eager, mode="reduce-overhead")}[mode]  # the last: CUDA graphs
    return _steps(fn, config, batch, steps)


def main(out: Path, steps: int, models: list[str]) -> None:
    device = torch.cuda.get_device_name()
    print(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}")
    rows = []
    for model in models:
        results = {}
        for way in WAYS:
            run = subprocess.run([sys.executable, __file__, "--column", model, way, str(steps)],
                                 capture_output=True, text=True)
            if run.returncode != 0:  # a column that fails says why, the others still run
                print(f"{model} {way}: failed: {(run.stderr.strip().splitlines() or ['?'])[-1][:200]}")
                continue
            results[way] = json.loads(run.stdout.strip().splitlines()[-1])
        base_eager, base_compile = results["torch eager"][1], results["torch torch.compile"][1]
        for way, (first, step, peak) in results.items():
            row = {"model": model, "way": way, "first_ms": round(first, 1), "step_ms": round(step, 2),
                   "peak_mib": round(peak), "vs_eager": round(base_eager / step, 2),
                   "vs_compile": round(base_compile / step, 2)}
            print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model_step_{device.replace(' ', '_')}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--column"]:  # one column, in the process main() started for it
        print(json.dumps(column(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results",
             int(sys.argv[2]) if len(sys.argv) > 2 else 20,
             sys.argv[3].split(",") if len(sys.argv) > 3 else list(MODELS))
