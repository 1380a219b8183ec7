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
import matplotlib.pyplot as plt  # noqa: E402


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
    axes.set_title(f"{path.stem} on {meta.get('device', '?')} (torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')})",
                   fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return out


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(plot(Path(name)))
