"""Draw the CSVs of ``tilegen bench`` / ``benchmarks/studies.py`` as perf_report-style plots.

``python benchmarks/plot.py benchmarks/results/tutorial03.csv [...]`` writes ``<name>.png``
beside each CSV: one line per provider (every ``<provider> TFLOP/s`` or ``<provider> GB/s``
column) against the first size column, titled with the device from the CSV's header.
"""

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot(path: Path) -> Path:
    lines = path.read_text(encoding="utf-8").splitlines()
    meta = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    rows = list(csv.reader(line for line in lines if not line.startswith("#")))
    header, data = rows[0], rows[1:]
    x_name = header[0]
    figure, axes = plt.subplots(figsize=(8, 5))
    unit = ""
    for column, name in enumerate(header):
        for suffix in (" TFLOP/s", " GB/s"):
            if name.endswith(suffix):
                unit = suffix.strip()
                xs = [float(r[0]) for r in data]
                ys = [float(r[column]) for r in data]
                axes.plot(xs, ys, marker="o", markersize=3, label=name[: -len(suffix)])
    axes.set_xlabel(x_name)
    axes.set_ylabel(unit)
    versions = f"torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')}"
    axes.set_title(f"{path.stem} on {meta.get('device', '?')} ({versions})", fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return out


def plot_panels(path: Path, title: str, panels: list[tuple[str, str, str, dict]]) -> None:
    """One figure of side-by-side panels, each ``(title, x label, y label, {series: [(x, y), ...]})``,
    x on a log2 scale (row lengths, sequence lengths); written to ``path``."""
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, (panel_title, x_label, y_label, series) in zip(axes[0], panels, strict=True):
        for name, points in series.items():
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(panel_title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(plot(Path(name)))
