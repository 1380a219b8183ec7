"""Scans and the product reduction on the GPU against torch: KernelBench level 1's cumsum (89),
cumprod (90) and reverse cumsum (91) at their ``get_inputs`` shape (32768 x 32768 float32,
``torch.rand``), smaller and odd shapes, and the product over the middle dimension that was
level 1's problem 50 (128 x 4096 x 4095, ``torch.randn``) before the suite replaced it.

``python benchmarks/scans.py OUT_DIR [KERNEL ...]`` (every kernel when none is named) prints one
line per case and writes ``OUT_DIR/scans.csv``
with the device, torch and Triton versions in its ``#`` header lines. Per case: the tilegen
function and torch's expression (KernelBench's own ``forward``), each timed eager (launches back
to back, ``triton.testing.do_bench``, L2 flushed, median of 5 interleaved rounds) and in a CUDA
graph (``do_bench_cudagraph``); the copy roof (``y.copy_(x)`` of the same bytes read and
written, eager); tilegen's first call in this process (autotuning and compiling included) and
its max error against torch. Ratios are torch's time over tilegen's (above 1: tilegen faster).
``python benchmarks/scans.py --plot CSV`` draws a CSV's eager and graphed ratios as bars beside it
(``scans_h100.png``); it needs matplotlib, not a GPU.
"""

import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-scans-")

from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
ROWS = [(32768, 32768), (4096, 4097), (4096, 1000), (1000, 777)]
PRODUCTS = [(128, 4096, 4095), (16, 1000, 777)]
TORCH = {
    "row_cumsum": lambda x: torch.cumsum(x, dim=1),
    "row_cumsum_reverse": lambda x: torch.cumsum(x.flip(1), dim=1).flip(1),
    "row_cumprod": lambda x: torch.cumprod(x, dim=1),
    "prod_reduction": lambda x: torch.prod(x, dim=1),
}
PROBLEM = {"row_cumsum": "89_cumsum", "row_cumsum_reverse": "91_cumsum_reverse", "row_cumprod": "90_cumprod",
           "prod_reduction": "50_Product_reduction (former)"}


def interleaved(functions: dict, bench) -> dict:
    """Median ms of each function over ROUNDS rounds in which they take turns."""
    times = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name, fn in functions.items():
            times[name].append(bench(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def case(kernel: str, x: torch.Tensor) -> dict:
    module = load_module(ROOT / "generated" / f"{kernel}.py")
    ours = getattr(module, kernel)
    torch.cuda.synchronize()
    start = time.perf_counter()
    y = ours(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    want = TORCH[kernel](x)
    error = (y.double() - want.double()).abs().nan_to_num(0.0).max().item()
    out = torch.empty_like(x)
    eager = interleaved({"tilegen": lambda: ours(x), "torch": lambda: TORCH[kernel](x),
                         "copy": lambda: out.copy_(x)}, lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100))
    graph = interleaved({"tilegen": lambda: ours(x), "torch": lambda: TORCH[kernel](x)},
                        lambda fn: triton.testing.do_bench_cudagraph(fn, rep=100))
    moved = x.numel() * x.element_size() + y.numel() * y.element_size()  # read x once, write y once
    return {
        "problem": PROBLEM[kernel], "kernel": kernel, "shape": "x".join(map(str, x.shape)), "dtype": "f32",
        "tilegen_ms": eager["tilegen"], "torch_ms": eager["torch"], "ratio_eager": eager["torch"] / eager["tilegen"],
        "tilegen_graph_ms": graph["tilegen"], "torch_graph_ms": graph["torch"],
        "ratio_graph": graph["torch"] / graph["tilegen"],
        "tilegen_TBps": moved / eager["tilegen"] / 1e9,
        "copy_TBps": 2 * x.numel() * x.element_size() / eager["copy"] / 1e9,
        "first_call_s": first, "max_error": error,
    }


def main(out: Path, kernels: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    for kernel in ("row_cumsum", "row_cumsum_reverse", "row_cumprod"):
        if kernels and kernel not in kernels:
            continue
        for shape in ROWS:
            x = torch.rand(shape, device="cuda")
            if kernel == "row_cumprod":
                x = x * 0.2 + 0.9  # factors in [0.9, 1.1]: products stay in range (KernelBench's rand gives 0s)
            rows.append(case(kernel, x))
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
            del x
            torch.cuda.empty_cache()
    for shape in PRODUCTS if not kernels or "prod_reduction" in kernels else ():
        x = torch.randn(shape, device="cuda")
        rows.append(case("prod_reduction", x))
        print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    with open(out / "scans.csv", "w", newline="") as f:
        f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
        f.write("# ratio = torch ms / tilegen ms (eager: do_bench, L2 flushed; graph: do_bench_cudagraph); "
                "TB/s = (bytes of x + bytes of y) / eager time; copy_TBps = y.copy_(x) of x's bytes\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot(path: Path) -> Path:
    """Bars of torch ms / tilegen ms per case, eager and graphed, with 1.0 marked; ``<csv>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    labels = [f"{r['kernel']}\n{r['shape']}" for r in rows]
    figure, axes = plt.subplots(figsize=(12, 5))
    positions = range(len(rows))
    axes.bar([p - 0.2 for p in positions], [float(r["ratio_eager"]) for r in rows], 0.4, label="eager")
    axes.bar([p + 0.2 for p in positions], [float(r["ratio_graph"]) for r in rows], 0.4, label="CUDA graph")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(list(positions), labels, rotation=60, ha="right", fontsize=7)
    axes.set_ylabel("torch ms / tilegen ms")
    axes.set_title(f"scans and prod vs torch ({lines[0][2:]})", fontsize=10)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--plot":
        print(plot(Path(sys.argv[2])))
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
