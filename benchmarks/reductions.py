"""Issue 10's performance table: softmax, layer norm, RMS norm and cross-entropy specs on the GPU.

``python benchmarks/reductions.py OUT_DIR`` prints one line per case and writes
``OUT_DIR/reductions.csv`` (kernel, dtype, M, N, implementation, ms, TB/s, ratio to torch,
ratio to the hand-written tutorial kernel, then the same ms, TB/s and ratios in a CUDA graph)
with the device, torch and Triton versions in its ``#`` header lines, and
``OUT_DIR/reductions.png``.

Every implementation is timed two ways (``tilegen.bench.interleaved``): eager, the median of 5
rounds of ``triton.testing.do_bench`` (launches back to back, L2 flushed before every call) in
which tilegen, torch and the hand-written kernel take turns, so clock drift reaches all alike;
and replayed in a CUDA graph, ``triton.testing.do_bench_cudagraph`` (the kernels alone, no host
launch cost, L2 not flushed; ``nan`` where a call cannot be captured). ``ms``, ``TB_per_s`` and
``tilegen_over_*`` are eager; ``graph_ms``, ``TB_per_s_graph`` and ``tilegen_over_*_graph``
graphed. The plot draws the eager bandwidth. Bandwidth is bytes read plus bytes written over the
time: x read once and y written once (the norms also read their weights; layer norm writes each
row's mean and 1/std; the cross-entropy reads logits and targets and writes one loss per row).

Roofs timed beside them: ``copy_`` of x (the same bytes read and written as softmax and the
norms), and ``x.sum()`` of the logits (a plain read of them). Baselines: ``torch.softmax``,
``F.layer_norm``, ``F.rms_norm``, ``F.cross_entropy`` (``reduction="none"``); Triton tutorial
02's fused softmax and tutorial 05's layer norm forward, hand-written in ``tests/reference/``.
"""

import csv
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-reductions-")

from tests.reference import layer_norm as ref_layer_norm  # noqa: E402
from tests.reference import softmax as ref_softmax  # noqa: E402
from tilegen.bench import interleaved  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
M = 4096
NS = [1024, 4096, 8192, 16384, 32768]
VOCABS = [32000, 128256]
gen = {n: load_module(ROOT / "generated" / f"{n}.py") for n in ["softmax", "layer_norm", "rms_norm", "cross_entropy"]}


def geomean(values: list[float]) -> float:
    """Geometric mean of the finite values (nan where there is none)."""
    finite = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(map(math.log, finite)) / len(finite)) if finite else math.nan


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    torch.manual_seed(0)
    cases = []
    for n in NS:
        x = torch.randn(M, n, device="cuda")
        y32 = torch.empty_like(x)
        cases.append(("softmax", "f32", M, n, 2 * M * n * 4, {
            "copy": lambda x=x, y=y32: y.copy_(x),
            "tilegen": lambda x=x: gen["softmax"].softmax(x),
            "torch": lambda x=x: torch.softmax(x, dim=-1),
            "tutorial": lambda x=x: ref_softmax.softmax(x),
        }))
        xh = torch.randn(M, n, device="cuda", dtype=torch.float16)
        w, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
        y16 = torch.empty_like(xh)
        cases.append(("layer_norm", "f16", M, n, 2 * M * n * 2 + 2 * n * 2 + 2 * M * 4, {
            "copy": lambda x=xh, y=y16: y.copy_(x),
            "tilegen": lambda x=xh, w=w, b=b: gen["layer_norm"].layer_norm(x, w, b, 1e-5),
            "torch": lambda x=xh, w=w, b=b: F.layer_norm(x, (x.shape[1],), w, b, 1e-5),
            "tutorial": lambda x=xh, w=w, b=b: ref_layer_norm.layer_norm(x, w, b, 1e-5),
        }))
        cases.append(("rms_norm", "f16", M, n, 2 * M * n * 2 + n * 2, {
            "tilegen": lambda x=xh, w=w: gen["rms_norm"].rms_norm(x, w, 1e-6),
            "torch": lambda x=xh, w=w: F.rms_norm(x, (x.shape[1],), w, 1e-6),
        }))
    for v in VOCABS:
        logits = torch.randn(M, v, device="cuda")
        target = torch.randint(0, v, (M,), device="cuda")
        cases.append(("cross_entropy", "f32", M, v, M * v * 4 + M * 8 + M * 4, {
            "read": lambda x=logits: x.sum(),
            "tilegen": lambda x=logits, t=target: gen["cross_entropy"].cross_entropy(x, t)[0],
            "torch": lambda x=logits, t=target: F.cross_entropy(x, t, reduction="none"),
        }))
    for kernel, dtype, m, n, nbytes, functions in cases:
        for impl, fn in functions.items():  # compile, tune, and check nothing fails before timing
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            if impl == "tilegen":
                print(f"{kernel:14s} {dtype} {m}x{n:<7d} first call (compile and tune): "
                      f"{time.perf_counter() - start:.2f} s", flush=True)
        ms, graph = interleaved(functions, rounds=ROUNDS, warmup=25, rep=100)
        for impl, t in ms.items():
            g = graph[impl]
            tbps, tbps_graph = nbytes / (t * 1e-3) / 1e12, nbytes / (g * 1e-3) / 1e12
            vs_torch = ms["torch"] / t if impl == "tilegen" else ""
            vs_tutorial = ms["tutorial"] / t if impl == "tilegen" and "tutorial" in ms else ""
            vs_torch_graph = graph["torch"] / g if impl == "tilegen" else ""
            vs_tutorial_graph = graph["tutorial"] / g if impl == "tilegen" and "tutorial" in graph else ""
            rows.append((kernel, dtype, m, n, impl, f"{t:.5f}", f"{tbps:.3f}",
                         f"{vs_torch:.3f}" if vs_torch else "", f"{vs_tutorial:.3f}" if vs_tutorial else "",
                         f"{g:.5f}", f"{tbps_graph:.3f}",
                         f"{vs_torch_graph:.3f}" if vs_torch_graph else "",
                         f"{vs_tutorial_graph:.3f}" if vs_tutorial_graph else ""))
            extra = f"  x{vs_torch:.3f} torch" if vs_torch else ""
            extra += f"  x{vs_tutorial:.3f} tutorial" if vs_tutorial else ""
            extra_graph = f"  x{vs_torch_graph:.3f} torch" if vs_torch_graph else ""
            extra_graph += f"  x{vs_tutorial_graph:.3f} tutorial" if vs_tutorial_graph else ""
            print(f"{kernel:14s} {dtype} {m}x{n:<7d} {impl:9s} eager {t:8.4f} ms {tbps:6.3f} TB/s{extra} | "
                  f"graph {g:8.4f} ms {tbps_graph:6.3f} TB/s{extra_graph}", flush=True)
    header = [f"# device: {torch.cuda.get_device_name()}", f"# torch {torch.__version__}, triton {triton.__version__}",
              f"# M = {M}; ms, TB_per_s, tilegen_over_*: eager, median of {ROUNDS} interleaved rounds of "
              "triton.testing.do_bench (L2 flushed)",
              "# graph_ms, TB_per_s_graph, tilegen_over_*_graph: replayed in a CUDA graph, "
              "triton.testing.do_bench_cudagraph (nan where capture failed)"]
    with open(out / "reductions.csv", "w", newline="") as handle:
        handle.write("\n".join(header) + "\n")
        writer = csv.writer(handle)
        writer.writerow(
            ["kernel", "dtype", "M", "N", "impl", "ms", "TB_per_s", "tilegen_over_torch", "tilegen_over_tutorial",
             "graph_ms", "TB_per_s_graph", "tilegen_over_torch_graph", "tilegen_over_tutorial_graph"]
        )
        writer.writerows(rows)
    for kernel in ["softmax", "layer_norm", "rms_norm", "cross_entropy"]:
        ratios = [float(r[7]) for r in rows if r[0] == kernel and r[7]]
        ratios_graph = [float(r[11]) for r in rows if r[0] == kernel and r[11]]
        lost = sum(not math.isfinite(r) for r in ratios_graph)
        missing = f" ({lost} of {len(ratios_graph)} not captured)" if lost else ""
        print(f"{kernel}: geomean tilegen/torch eager {geomean(ratios):.3f}, "
              f"graph {geomean(ratios_graph):.3f}{missing}")
    plot(rows, out / "reductions.png")


def plot(rows, path: Path) -> None:
    """Eager bandwidth against row length, one panel per kernel, one line per implementation; ``rows``
    as in the CSV (the graphed columns after ``tilegen_over_tutorial`` are not read)."""
    from benchmarks.plot import plot_panels

    panels = []
    for kernel in ["softmax", "layer_norm", "rms_norm", "cross_entropy"]:
        dtype = next(r[1] for r in rows if r[0] == kernel)
        series = {impl: [(int(r[3]), float(r[6])) for r in rows if r[0] == kernel and r[4] == impl]
                  for impl in ["tilegen", "torch", "tutorial", "copy", "read"]}
        panels.append((f"{kernel} ({dtype}, M = {M})", "N (V for cross_entropy)", "TB/s", series))
    plot_panels(path, f"tilegen reductions on {torch.cuda.get_device_name()}", panels)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results")
