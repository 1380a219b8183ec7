"""``matmul_fast`` against cuBLAS over the shapes users have, on the GPU (issue 12).

``python benchmarks/matmul_sweep.py OUT_DIR [square|llm|thin ...]`` (default: all three parts;
``square:f16``, ``square:bt`` or ``square:bf16`` runs one of the square sweeps, ``square:f16@512-2048``
its sizes from 512 to 2048 alone, so that a sweep cut off by a time limit can go on in another call)
appends to ``OUT_DIR/matmul_sweep_<device>.csv`` (a new file starts with a ``#`` line naming the
device, torch and Triton), one row per case, and prints each row:

* ``square``: M = N = K = 256, 384, ..., 4096 (31 sizes) in f16 with row-major operands, again
  with a column-major ``b`` (``b = w.t()``, an ``nn.Linear`` weight), and in bf16;
* ``llm``: M in {16, 128, 1024, 8192} x (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336),
  (128256, 4096)} (Llama-3 8B's projections and its vocabulary), f16, ``b`` column-major
  (``x @ w.t()``, as ``nn.Linear`` computes);
* ``thin``: odd K (rows not 16-byte aligned: the pointer kernel), a large K with few output
  tiles, and GEMV (M = 1, and N = 1).

Kernel time in CUDA graphs (``triton.testing.do_bench_cudagraph``: no host launch cost on
either side), the launcher and ``torch.matmul`` (cuBLAS) on the same tensors in the same run,
each after a first call (the launcher's autotuning). ``ratio`` is tilegen's speed over cuBLAS's
(cuBLAS time / tilegen time); ``ratio eager`` the same of eager calls (``triton.testing.do_bench``:
launches back to back, L2 flushed; where a kernel is shorter than the host's cost of a call, the
host's cost; the median of 5 rounds in which the two take turns: ``tilegen.bench.interleaved``;
rows before 2026-11-27 took the mean of one do_bench each); ``max error`` is against ``torch.matmul`` in f32 of the same
inputs; ``TB/s`` is the bytes of a, b and c over tilegen's time (for the memory-bound cases);
``config`` is the config the launcher tuned to (``pointers`` where TMA could not serve).
``python benchmarks/matmul_sweep.py --plot CSV`` draws ``matmul_sweep_<device>.png`` beside it
(no GPU needed).
"""

from __future__ import annotations

import csv
import functools
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIELDS = ["part", "case", "dtype", "a", "b", "M", "N", "K", "tilegen ms", "cuBLAS ms", "ratio", "tilegen TFLOP/s",
          "cuBLAS TFLOP/s", "TB/s", "max error", "config", "tilegen eager ms", "cuBLAS eager ms", "ratio eager"]


def _picked(launcher) -> str:
    """The config the launcher's module tuned last (its tuner's ``tuned`` cache, newest entry), as text."""
    module = launcher.__globals__
    key, index = list(module["_tuner"].tuned.items())[-1]
    config = module["_CONFIGS"][index]  # both launchers remember an index in _CONFIGS
    blocks = " ".join(f"{name}={value}" for name, value in config.kwargs.items())
    return f"{'pointers ' if 'pointers' in key else ''}{blocks} w{config.num_warps} s{config.num_stages}"


def measure(launcher, part: str, case: str, m: int, n: int, k: int, dtype, b_col: bool = False) -> dict:
    """One row: ``launcher(a, b)`` and ``torch.matmul(a, b)`` timed in CUDA graphs."""
    import torch
    from matmul_layouts import operand

    from tilegen import bench

    a = operand(m, k, False, dtype)
    b = operand(k, n, b_col, dtype)
    c = launcher(a, b)  # tunes on the first call for these sizes
    config = _picked(launcher)
    expected = a.float() @ b.float()
    error = float((c.float() - expected).abs().max()) if c.numel() else 0.0
    torch.cuda.synchronize()
    # graphed (do_bench_cudagraph), and eager, what a user without graphs sees: launches back to back
    # (the host's cost shows where the kernel is shorter than it), L2 flushed between calls (Triton's
    # do_bench), the median of 5 rounds in which tilegen and cuBLAS take turns
    eager, graph = bench.interleaved({"tilegen": lambda: launcher(a, b), "cuBLAS": lambda: torch.matmul(a, b)})
    ours, cublas, ours_eager, cublas_eager = graph["tilegen"], graph["cuBLAS"], eager["tilegen"], eager["cuBLAS"]
    flops = 2 * m * n * k
    size = a.element_size()
    row = {
        "part": part, "case": case, "dtype": str(dtype).removeprefix("torch."),
        "a": "row-major", "b": "column-major" if b_col else "row-major", "M": m, "N": n, "K": k,
        "tilegen ms": round(ours, 5), "cuBLAS ms": round(cublas, 5), "ratio": round(cublas / ours, 3),
        "tilegen TFLOP/s": round(flops / ours * 1e-9, 1), "cuBLAS TFLOP/s": round(flops / cublas * 1e-9, 1),
        "TB/s": round((m * k + k * n + m * n) * size / ours * 1e-9, 3), "max error": round(error, 4),
        "config": config,
        "tilegen eager ms": round(ours_eager, 5), "cuBLAS eager ms": round(cublas_eager, 5),
        "ratio eager": round(cublas_eager / ours_eager, 3),
    }
    print(row, flush=True)
    return row


def square(launcher, which: str = "f16 bt bf16", low: int = 256, high: int = 4096) -> list[dict]:
    """The square sweeps named in ``which``: ``f16``, ``bt`` (f16, ``b`` column-major), ``bf16``;
    sizes from ``low`` to ``high``, both included, of the sweep's 256, 384, ..., 4096."""
    import torch

    rows = []
    for name, case, dtype, b_col in (("f16", "square f16", torch.float16, False),
                                     ("bt", "square f16, b column-major", torch.float16, True),
                                     ("bf16", "square bf16", torch.bfloat16, False)):
        if name not in which.split():
            continue
        for size in range(256, 4096 + 1, 128):
            if not low <= size <= high:
                continue
            rows.append(measure(launcher, "square", case, size, size, size, dtype, b_col))
    return rows


def llm(launcher) -> list[dict]:
    import torch

    rows = []
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)):
        for m in (16, 128, 1024, 8192):
            rows.append(measure(launcher, "llm", f"LLM N={n} K={k}", m, n, k, torch.float16, b_col=True))
    return rows


def thin(launcher) -> list[dict]:
    import torch

    rows = []
    for m, n, k in ((1024, 1024, 1023), (4096, 4096, 4095), (4096, 4096, 83), (2048, 2048, 2047)):
        rows.append(measure(launcher, "thin", "odd K (pointer kernel)", m, n, k, torch.float16))
    for m, n, k in ((256, 256, 65536), (128, 128, 131072), (512, 512, 51200)):
        rows.append(measure(launcher, "thin", "large K, few tiles", m, n, k, torch.float16))
    for m, n, k in ((1, 4096, 4096), (1, 14336, 4096), (4096, 1, 4096), (1, 8192, 8192)):
        rows.append(measure(launcher, "thin", "GEMV", m, n, k, torch.float16))
    return rows


def plot(path: Path) -> Path:
    """Ratio to cuBLAS against size for each square case of ``path`` (the CSV this script writes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path, newline="", encoding="utf-8") as handle:
        lines = list(handle)
    device = next((line[1:].split(",")[0].strip() for line in lines if line.startswith("#")), "")
    rows = [r for r in csv.DictReader(line for line in lines if not line.startswith("#")) if r["part"] == "square"]
    figure, axes = plt.subplots(figsize=(13, 4.8))
    for index, case in enumerate(dict.fromkeys(r["case"] for r in rows)):
        # graphed (solid) and, where the CSV has it, eager (dashed, the same colour)
        for column, style, way in (("ratio", "-", "graphs"), ("ratio eager", "--", "eager")):
            points = [(int(r["M"]), float(r[column])) for r in rows if r["case"] == case and r.get(column)]
            if not points:
                continue
            ratios = [p[1] for p in points]
            geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            axes.plot(*zip(*points, strict=True), linestyle=style, color=f"C{index}", marker="o", markersize=3,
                      label=f"{case}, {way} ({points[0][0]}..{points[-1][0]}: geomean {geomean:.3f})")
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.axhline(0.9, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("M = N = K")
    axes.set_ylabel("speed / cuBLAS")
    axes.set_title(f"matmul_fast vs cuBLAS, square sizes step 128: CUDA graphs (solid), eager do_bench (dashed)"
                   f"{chr(10) + device if device else ''}", fontsize=10)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=120)
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["--plot"]:
        print(plot(Path(argv[1])))
        return
    import torch

    from tilegen.runner import load_module

    out_dir = Path(argv[0]) if argv else ROOT / "benchmarks" / "results"
    parts = argv[1:] or ["square", "llm", "thin"]
    launcher = load_module(ROOT / "generated" / "matmul_fast.py").matmul_fast
    device = torch.cuda.get_device_name().replace(" ", "_")
    about = f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {__import__('triton').__version__}"
    print(about, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"matmul_sweep_{device}.csv"
    new = not path.exists()
    if not new:
        with open(path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(line for line in handle if not line.startswith("#")), [])
        if header != FIELDS:  # a file of an earlier version of this script: no eager columns
            raise SystemExit(f"{path} has other columns ({len(header)}, this script writes {len(FIELDS)}): "
                             "write into another OUT_DIR")
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        if new:
            handle.write(about + "\n")
            writer.writeheader()
        for part in parts:
            part, _, sizes = part.partition("@")  # square:f16@512-2048: those sizes alone
            name, _, which = part.partition(":")  # square:f16 (or bt, bf16) runs one square sweep
            sweep = {"square": square, "llm": llm, "thin": thin}[name]
            if sizes:  # the square sweeps alone take sizes
                low, _, high = sizes.partition("-")
                sweep = functools.partial(square, low=int(low), high=int(high or low))
            for row in sweep(launcher, which) if which else sweep(launcher):
                writer.writerow(row)
                handle.flush()
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
