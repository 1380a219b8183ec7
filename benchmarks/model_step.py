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
``STEPS`` after three more; ``tokens_per_s`` the tokens of a step over its median time; ``peak_mib``
the peak of ``torch.cuda.max_memory_allocated`` over the steps; ``vs_eager`` and ``vs_compile``
torch eager's and torch.compile's median step over this column's (above 1: faster than them);
``peak_vs_compile`` this column's peak memory over torch.compile's. Models: the repository's small
one (vocabulary 256), a medium one (width 1024, 4 layers, 8 x 1024 tokens), a Llama-like one
(vocabulary 32000, width 2048, 2 layers, 4 x 2048 tokens) and Llama-3-8B's layer shapes (vocabulary
128256, width 4096, 32 heads of 128, MLP 14336, 6 layers, 2 x 2048 tokens; multi-head attention
where the real model's keys and values have 8 heads). A plot of tokens/s per model and column goes
beside the CSV (``.png``). ``WAYS`` (a fifth argument, a comma list of :data:`WAYS`) runs some columns.

The optimizer is part of a column: torch's columns step ``torch.optim.AdamW`` as torch runs it by
default (``foreach``), ``torch+fused`` with ``fused=True``; tilegen's step ``tilegen.optim.AdamW``
(one kernel a parameter), ``tilegen+foreach`` torch's default, which isolates the model's kernels.
``vs_fused_compile`` is ``torch+fused torch.compile``'s step over the column's.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tilegen from this checkout
import decoder

import tilegen.optim

MODELS = {
    "small": (decoder.Config(vocab=256, dim=384, heads=6, layers=4, hidden=1024, context=256, compute="bfloat16"), 32),
    "medium": (decoder.Config(vocab=256, dim=1024, heads=16, layers=4, hidden=2816, context=1024,
                              compute="bfloat16"), 8),
    "llama_like": (decoder.Config(vocab=32000, dim=2048, heads=16, layers=2, hidden=5632, context=2048,
                                  compute="bfloat16"), 4),
    "llama3_8b": (decoder.Config(vocab=128256, dim=4096, heads=32, layers=6, hidden=14336, context=2048,
                                 compute="bfloat16"), 2),
}


OPTIMIZERS = {
    "torch": lambda params: torch.optim.AdamW(params, lr=1e-4),
    "torch+fused": lambda params: torch.optim.AdamW(params, lr=1e-4, fused=True),
    "tilegen": lambda params: tilegen.optim.AdamW(params, lr=1e-4),
    "tilegen+foreach": lambda params: torch.optim.AdamW(params, lr=1e-4),
}


def _steps(loss_fn, config: decoder.Config, batch: int, steps: int, optimizer_of) -> tuple[float, float, float]:
    """First step, median step (ms) and peak memory (MiB) of training with ``loss_fn(params, idx,
    target)`` on random tokens, ``optimizer_of(parameters)`` stepping."""
    params = decoder.init_params(config, 0, "cuda")
    optimizer = optimizer_of(params.values())
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


WAYS = ("torch eager", "torch torch.compile", "torch reduce-overhead", "torch+fused eager",
        "torch+fused torch.compile", "tilegen eager", "tilegen torch.compile", "tilegen reduce-overhead",
        "tilegen+foreach torch.compile")


def column(model: str, way: str, steps: int) -> tuple[float, float, float]:
    """:func:`_steps` of one column (``way``, one of :data:`WAYS`) of ``model`` in this process."""
    config, batch = MODELS[model]
    tables = decoder.rope_tables(config, "cuda")
    name, mode = way.split(" ", 1)
    ops = decoder.TORCH if name.startswith("torch") else decoder.tilegen_ops()

    def eager(params, idx, target):
        return decoder.loss(ops, params, idx, target, config, tables)

    fn = {"eager": eager, "torch.compile": torch.compile(eager),
          "reduce-overhead": torch.compile(eager, mode="reduce-overhead")}[mode]  # the last: CUDA graphs
    return _steps(fn, config, batch, steps, OPTIMIZERS[name])


def main(out: Path, steps: int, models: list[str], ways: tuple[str, ...] = WAYS) -> None:
    device = torch.cuda.get_device_name()
    print(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}")
    rows = []
    for model in models:
        results = {}
        for way in ways:
            run = subprocess.run([sys.executable, __file__, "--column", model, way, str(steps)],
                                 capture_output=True, text=True)
            if run.returncode != 0:  # a column that fails says why, the others still run
                print(f"{model} {way}: failed: {(run.stderr.strip().splitlines() or ['?'])[-1][:200]}")
                continue
            results[way] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"# {model} {way}: first, step (ms), peak (MiB) {results[way]}", flush=True)
        nan = (float("nan"),) * 3  # a baseline that failed (out of memory): no ratios to it
        base_eager = results.get("torch eager", nan)[1]
        _, base_compile, base_peak = results.get("torch torch.compile", nan)
        base_fused = results.get("torch+fused torch.compile", nan)[1]
        config, batch = MODELS[model]
        for way, (first, step, peak) in results.items():
            row = {"model": model, "way": way, "first_ms": round(first, 1), "step_ms": round(step, 2),
                   "tokens_per_s": round(batch * config.context / step * 1e3), "peak_mib": round(peak),
                   "vs_eager": round(base_eager / step, 2),
                   "vs_compile": round(base_compile / step, 2), "vs_fused_compile": round(base_fused / step, 2),
                   "peak_vs_compile": round(peak / base_peak, 2)}
            print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model_step_{device.replace(' ', '_')}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
    print(f"wrote {plot(path, rows, f'{device}, torch {torch.__version__}, Triton {triton.__version__}')}")


def plot(path: Path, rows: list[dict], where: str) -> Path:
    """Draw ``rows`` (:func:`main`'s; ``tokens_per_s`` and ``vs_compile`` numbers) as grouped bars
    of tokens/s, a group per model and a bar per column, each labelled with its ratio to
    torch.compile, titled with ``where`` (the device and versions); writes ``path`` with the suffix
    ``.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(row["model"] for row in rows))
    figure, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.5), squeeze=False)
    short = {"eager": "eager", "torch.compile": "compile", "reduce-overhead": "CUDA\ngraphs"}
    for ax, model in zip(axes[0], models, strict=True):
        mine = [row for row in rows if row["model"] == model]
        bars = ax.bar(range(len(mine)), [row["tokens_per_s"] / 1e3 for row in mine],
                      color=["tab:gray" if row["way"].startswith("torch") else "tab:blue" for row in mine])
        ax.bar_label(bars, [f"{row['vs_compile']:.2f}x" for row in mine], fontsize=7)
        names = [row["way"].split(" ", 1) for row in mine]
        ax.set_xticks(range(len(mine)), [f"{name}\n{short[mode]}" for name, mode in names], fontsize=7)
        ax.set_title(model, fontsize=10)
        ax.set_ylabel("thousand tokens/s (label: vs torch.compile)", fontsize=8)
    figure.suptitle(f"training step, bf16, AdamW: {where}", fontsize=10)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--column"]:  # one column, in the process main() started for it
        print(json.dumps(column(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results",
             int(sys.argv[2]) if len(sys.argv) > 2 else 20,
             sys.argv[3].split(",") if len(sys.argv) > 3 else list(MODELS),
             tuple(sys.argv[4].split(",")) if len(sys.argv) > 4 else WAYS)
