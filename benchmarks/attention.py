"""Issue 11's performance table: the attention specs against torch SDPA and Triton tutorial 06.

``python benchmarks/attention.py OUT_DIR [S ...]`` prints one line per case and writes
``OUT_DIR/attention.csv`` (S, D, causal, implementation, ms, TFLOP/s, ratios of tilegen to each
baseline, then the same ms, TFLOP/s and ratios in a CUDA graph) with the device, torch and Triton
versions in its ``#`` header lines, and
``OUT_DIR/attention.png``. ``python benchmarks/attention.py --replot CSV`` redraws a CSV's plot
(for two runs' CSVs merged into one).

Shapes as in the FlashAttention papers: B * S = 16384, H * D = 2048, f16. FLOPs are
4 * B * H * S * S * D (two matmuls), halved for causal attention. Every implementation is timed
two ways (``tilegen.bench.interleaved``): eager, the median of 5 rounds of
``triton.testing.do_bench`` (launches back to back, L2 flushed before each call) in which the
implementations take turns, and replayed in a CUDA graph, ``triton.testing.do_bench_cudagraph``
(the kernels alone, no host launch cost; ``nan`` where a call cannot be captured): ``ms``,
``TFLOP_per_s`` and the ``tilegen_over_*`` ratios are eager, ``graph_ms``, ``TFLOP_per_s_graph``
and the ``tilegen_over_*_graph`` ratios graphed. The plot draws the eager TFLOP/s.
Baselines: ``F.scaled_dot_product_attention``
with the flash and the cuDNN backends, and tutorial 06's forward kernel (``tests/reference/
attention.py``) where it runs.
"""

import csv
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-attention-")

from tilegen.bench import interleaved  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

try:
    from tests.reference import attention as ref_attention
except ImportError:  # pragma: no cover - the hand-written kernel is optional here
    ref_attention = None

ROUNDS = 5
BASELINES = ("sdpa_flash", "sdpa_cudnn", "tutorial")
SEQS = [1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128]
gen = {n: load_module(ROOT / "generated" / f"{n}.py") for n in ["attention", "attention_causal"]}


def sdpa(backend, causal):
    def run(q, k, v, scale):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return run


def main(out: Path, seqs=SEQS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for causal in (False, True):
        for d in HEAD_DIMS:
            for s in seqs:
                b, h = 16384 // s, 2048 // d
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
                scale = d**-0.5
                name = "attention_causal" if causal else "attention"
                flash, cudnn = sdpa(SDPBackend.FLASH_ATTENTION, causal), sdpa(SDPBackend.CUDNN_ATTENTION, causal)
                ours = getattr(gen[name], name)  # o and each row's log-sum-exp: o timed with it
                functions = {
                    "tilegen": lambda q=q, k=k, v=v, f=ours, scale=scale: f(q, k, v, scale)[0],
                    "sdpa_flash": lambda q=q, k=k, v=v, f=flash, scale=scale: f(q, k, v, scale),
                    "sdpa_cudnn": lambda q=q, k=k, v=v, f=cudnn, scale=scale: f(q, k, v, scale),
                }
                if ref_attention is not None:
                    functions["tutorial"] = lambda q=q, k=k, v=v, c=causal, scale=scale: ref_attention.attention(
                        q, k, v, c, scale
                    )
                expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                for impl, fn in list(functions.items()):  # compile, tune, and check before timing
                    try:
                        result = fn()
                        result = result[0] if isinstance(result, tuple) else result
                        error = (result.float() - expected.float()).abs().max().item()
                    except Exception as exc:  # a baseline this machine cannot run
                        print(f"{impl}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                        del functions[impl]
                        continue
                    if error > 2e-2:
                        print(f"{impl}: max error {error:.3g} against SDPA; left out", flush=True)
                        del functions[impl]
                torch.cuda.synchronize()
                ms, graph = interleaved(functions, rounds=ROUNDS, warmup=25, rep=100)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                for impl, t in ms.items():
                    g = graph[impl]
                    ratios = {base: (ms[base] / t if impl == "tilegen" and base in ms else None) for base in BASELINES}
                    ratios_graph = {base: (graph[base] / g if impl == "tilegen" and base in graph else None)
                                    for base in BASELINES}
                    rows.append((s, d, causal, impl, f"{t:.4f}", f"{flops / t / 1e9:.1f}",
                                 *("" if r is None else f"{r:.3f}" for r in ratios.values()),
                                 f"{g:.4f}", f"{flops / g / 1e9:.1f}",
                                 *("" if r is None else f"{r:.3f}" for r in ratios_graph.values())))
                    extra = "".join(f"  x{r:.3f} {base}" for base, r in ratios.items() if r is not None)
                    extra_graph = "".join(f"  x{r:.3f} {base}" for base, r in ratios_graph.items() if r is not None)
                    print(f"S={s:<6d} D={d:<4d} causal={causal!s:5s} {impl:11s} eager {t:8.3f} ms "
                          f"{flops / t / 1e9:7.1f} TFLOP/s{extra} | graph {g:8.3f} ms "
                          f"{flops / g / 1e9:7.1f} TFLOP/s{extra_graph}", flush=True)
    header = [f"# device: {torch.cuda.get_device_name()}", f"# torch {torch.__version__}, triton {triton.__version__}",
              f"# B * S = 16384, H * D = 2048, f16; ms, TFLOP_per_s, tilegen_over_*: eager, median of {ROUNDS} "
              "interleaved rounds of triton.testing.do_bench (L2 flushed)",
              "# graph_ms, TFLOP_per_s_graph, tilegen_over_*_graph: replayed in a CUDA graph, "
              "triton.testing.do_bench_cudagraph (nan where capture failed)"]
    with open(out / "attention.csv", "w", newline="") as handle:
        handle.write("\n".join(header) + "\n")
        writer = csv.writer(handle)
        writer.writerow(["S", "D", "causal", "impl", "ms", "TFLOP_per_s", "tilegen_over_sdpa_flash",
                         "tilegen_over_sdpa_cudnn", "tilegen_over_tutorial", "graph_ms", "TFLOP_per_s_graph",
                         "tilegen_over_sdpa_flash_graph", "tilegen_over_sdpa_cudnn_graph",
                         "tilegen_over_tutorial_graph"])
        writer.writerows(rows)
    plot(rows, out / "attention.png", torch.cuda.get_device_name())


def plot(rows, path: Path, device: str) -> None:
    """Eager TFLOP/s against S, one panel per (D, causal), one line per implementation; ``rows`` as in
    the CSV (S, D, causal, impl, ms, TFLOP_per_s first; later columns are not read)."""
    from benchmarks.plot import plot_panels

    panels = []
    for causal in (False, True):
        for d in HEAD_DIMS:
            series = {impl: [(r[0], float(r[5])) for r in rows if r[1] == d and r[2] == causal and r[3] == impl]
                      for impl in ["tilegen", "sdpa_flash", "sdpa_cudnn", "tutorial"]}
            panels.append((f"D = {d}, {'causal' if causal else 'not causal'}", "S", "TFLOP/s", series))
    plot_panels(path, f"tilegen attention (f16) on {device}", panels)


def replot(csv_path: Path) -> None:
    """Redraw ``csv_path``'s plot (next to it, ``.png``) from its rows, e.g. after merging two runs' CSVs.
    Reads columns by name: CSVs with or without the graphed columns both work."""
    lines = csv_path.read_text().splitlines()
    device = lines[0].removeprefix("# device: ")
    rows = [(int(r["S"]), int(r["D"]), r["causal"] == "True", r["impl"], r["ms"], r["TFLOP_per_s"])
            for r in csv.DictReader(line for line in lines if not line.startswith("#"))]
    plot(rows, csv_path.with_suffix(".png"), device)


if __name__ == "__main__" and sys.argv[1:2] == ["--replot"]:
    replot(Path(sys.argv[2]))
elif __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results",
        [int(s) for s in sys.argv[2:]] or SEQS,
    )
