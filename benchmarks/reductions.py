"""Issue 10's performance table: softmax, layer norm, RMS norm and cross-entropy specs on the GPU.

``python benchmarks/reductions.py OUT_DIR`` prints one line per case and writes
``OUT_DIR/reductions.csv`` (kernel, dtype, M, N, implementation, ms, TB/s, ratio to torch,
ratio to the hand-written tutorial kernel) with the device, torch and Triton versions in its
``#`` header lines, and ``OUT_DIR/reductions.png``.

Each time is the median of 5 rounds of ``triton.testing.do_bench`` (L2 flushed before every
call) in which tilegen, torch and the hand-written kernel take turns, so clock drift reaches
all alike. Bandwidth is bytes read plus bytes written over the time: x read once and y written
once (the norms also read their weights; layer norm writes each row's mean and 1/std; the
cross-entropy reads logits and targets and writes one loss per row).

Roofs timed beside them: ``copy_`` of x (the same bytes read and written as softmax and the
norms), and ``x.sum()`` of the logits (a plain read of them). Baselines: ``torch.softmax``,
``F.layer_norm``, ``F.rms_norm``, ``F.cross_entropy`` (``reduction="none"``); Triton tutorial
02's fused softmax and tutorial 05's layer norm forward, hand-written in ``tests/reference/``.
"""

import csv
import math
import os
import statistics
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
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
M = 4096
NS = [1024, 4096, 8192, 16384, 32768]
VOCABS = [32000, 128256]
gen = {n: load_module(ROOT / "generated" / f"{n}.py") for n in ["softmax", "layer_norm", "rms_norm", "cross_entropy"]}


def interleaved(functions: dict) -> dict:
    """Median ms of each function over ROUNDS rounds in which they take turns."""
    times = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name, fn in functions.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100))
    return {name: statistics.median(t) for name, t in times.items()}


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
            "tilegen": lambda x=logits, t=target: gen["cross_entropy"].cross_entropy(x, t),
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
        ms = interleaved(functions)
        for impl, t in ms.items():
            tbps = nbytes / (t * 1e-3) / 1e12
            vs_torch = ms["torch"] / t if impl == "tilegen" else ""
            vs_tutorial = ms["tutorial"] / t if impl == "tilegen" and "tutorial" in ms else ""
            rows.append((kernel, dtype, m, n, impl, f"{t:.5f}", f"{tbps:.3f}",
                         f"{vs_torch:.3f}" if vs_torch else "", f"{vs_tutorial:.3f}" if vs_tutorial else ""))
            extra = f"  x{vs_torch:.3f} torch" if vs_torch else ""
            extra += f"  x{vs_tutorial:.3f} tutorial" if vs_tutorial else ""
            print(f"{kernel:14s} {dtype} {m}x{n:<7d} {impl:9s} {t:8.4f} ms {tbps:6.3f} TB/s{extra}", flush=True)
    header = [f"# device: {torch.cuda.get_device_name()}", f"# torch {torch.__version__}, triton {triton.__version__}",
              f"# M = {M}; median of {ROUNDS} interleaved rounds of triton.testing.do_bench (L2 flushed)"]
    with open(out / "reductions.csv", "w", newline="") as handle:
        handle.write("\n".join(header) + "\n")
        writer = csv.writer(handle)
        writer.writerow(
            ["kernel", "dtype", "M", "N", "impl", "ms", "TB_per_s", "tilegen_over_torch", "tilegen_over_tutorial"]
        )
        writer.writerows(rows)
    for kernel in ["softmax", "layer_norm", "rms_norm", "cross_entropy"]:
        ratios = [float(r[7]) for r in rows if r[0] == kernel and r[7]]
        print(f"{kernel}: geomean tilegen/torch {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
    plot(rows, out / "reductions.png")


def plot(rows, path: Path) -> None:
    """Bandwidth against row length, one panel per kernel, one line per implementation."""
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
