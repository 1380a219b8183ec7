"""An AdamW step over a model's parameters on the GPU: ``tilegen.optim.AdamW`` against
``torch.optim.AdamW`` as torch runs it by default (``foreach``), with ``fused=True``, with
``foreach=False`` (its single-tensor loop) and compiled (``torch.compile(optimizer.step)``), all in
one process.

``python benchmarks/optimizer.py [OUT_DIR] [STEPS] [MODELS]`` (default ``benchmarks/results``, 20,
``medium,llama_like,llama3_8b``: benchmarks/model_step.py's models) writes
``optimizer_<device>.csv`` and prints it. The parameters are the model's (``decoder.init_params``,
float32), the gradients random and set once. Per optimizer: ``first_ms``, its first step (states
made; tilegen's kernel compiled or read from Triton's cache; torch.compile's compile);
``step_ms``, the median wall time of a synchronized step over ``STEPS`` after three more;
``host_ms``, the median time ``step()`` takes to return without synchronizing (what a host-bound
training loop pays); ``gb_per_s``, the 28 bytes per parameter an update must move (read the
parameter, its gradient and two moving averages, write three of them) over ``step_ms``;
``vs_foreach`` and ``vs_fused``, the default's and ``fused=True``'s step over this one's (above 1:
faster); ``max_diff``, the largest difference from ``foreach=False``'s parameters after the steps
(the same gradients, so the same updates to a few float32 units).
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tilegen from this checkout
import decoder
from model_step import MODELS

import tilegen.optim

WAYS = {
    "torch foreach (default)": lambda params: torch.optim.AdamW(params, lr=1e-4),
    "torch fused=True": lambda params: torch.optim.AdamW(params, lr=1e-4, fused=True),
    "torch foreach=False": lambda params: torch.optim.AdamW(params, lr=1e-4, foreach=False),
    "torch.compile(step)": lambda params: torch.optim.AdamW(params, lr=1e-4),
    "tilegen": lambda params: tilegen.optim.AdamW(params, lr=1e-4),
}


def run(way: str, params: list[torch.Tensor], start: list[torch.Tensor], steps: int) -> tuple[float, ...]:
    """First step, median step and median host time (ms) of ``way`` over ``params`` (reset to
    ``start`` first, gradients kept)."""
    with torch.no_grad():
        for p, s in zip(params, start, strict=True):
            p.copy_(s)
    optimizer = WAYS[way](params)
    step = torch.compile(optimizer.step) if way == "torch.compile(step)" else optimizer.step
    walls, hosts = [], []
    for _ in range(steps + 4):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        step()
        issued = time.perf_counter()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - begin) * 1e3)
        hosts.append((issued - begin) * 1e3)
    del optimizer, step
    torch.cuda.empty_cache()
    return walls[0], statistics.median(walls[4:]), statistics.median(hosts[4:])


def main(out: Path, steps: int, models: list[str]) -> None:
    device = torch.cuda.get_device_name()
    print(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}")
    rows = []
    for model in models:
        config, _ = MODELS[model]
        params = [p.requires_grad_() for p in decoder.init_params(config, 0, "cuda").values()]
        start = [p.detach().clone() for p in params]
        generator = torch.Generator(device="cuda").manual_seed(0)
        for p in params:
            p.grad = torch.randn(p.shape, device="cuda", generator=generator) * 1e-2
        count = sum(p.numel() for p in params)
        results, finals = {}, {}  # finals: the parameters after the reference's steps and tilegen's
        for way in WAYS:
            results[way] = run(way, params, start, steps)
            if way in ("torch foreach=False", "tilegen"):
                finals[way] = [p.detach().clone() for p in params]
        del start
        diff = max((a - b).abs().max().item() for a, b in zip(finals["tilegen"], finals["torch foreach=False"],
                                                              strict=True))
        for way, (first, step, host) in results.items():
            row = {"model": model, "parameters": count, "tensors": len(params), "way": way,
                   "first_ms": round(first, 1), "step_ms": round(step, 3), "host_ms": round(host, 3),
                   "gb_per_s": round(28 * count / step / 1e6), "vs_foreach": round(
                       results["torch foreach (default)"][1] / step, 2),
                   "vs_fused": round(results["torch fused=True"][1] / step, 2),
                   "max_diff": diff if way == "tilegen" else ""}
            print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
        del params, finals
        torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"optimizer_{device.replace(' ', '_')}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results",
         int(sys.argv[2]) if len(sys.argv) > 2 else 20,
         sys.argv[3].split(",") if len(sys.argv) > 3 else ["medium", "llama_like", "llama3_8b"])
