"""``matmul_fast`` on every operand layout, and its pointer fallback, on the GPU (issue 12).

``python benchmarks/matmul_layouts.py [OUT_DIR] [SIZE ...]`` (default ``benchmarks/results``,
sizes 1024 2048 4096) prints and writes ``matmul_layouts_<device>.csv``:

1. For each square size, each dtype of the spec's ``T`` (f16, bf16, f32 with its tf32 dot) and
   each layout of ``a`` and ``b`` (row-major, or column-major as ``x.t()`` of a row-major
   tensor, an ``nn.Linear`` weight's layout): the max error
   against ``torch.matmul`` of the same views, and TFLOP/s of ``matmul_fast`` and of cuBLAS
   (``torch.matmul``, with TF32 allowed for f32) timed in the same run two ways
   (``tilegen.bench.interleaved``, one round): eager, the median of ``triton.testing.do_bench``
   (launches back to back, L2 flushed; ``tilegen TFLOP/s``, ``cuBLAS TFLOP/s``), and replayed in
   a CUDA graph, ``triton.testing.do_bench_cudagraph`` (the kernels alone, no host launch cost;
   ``tilegen TFLOP/s graph``, ``cuBLAS TFLOP/s graph``, ``nan`` where a call cannot be captured);
   ``ratio`` is tilegen's eager speed over cuBLAS's, ``ratio_graph`` the same of the graphed
   times.
2. Correctness of the inputs TMA cannot address (odd K, K = 0, a misaligned base, a view with
   two unit strides), in each dtype, which run the spec's pointer kernel, and of ``matmul_block_ptr`` forced
   onto its pointer kernel (as on a Triton without block pointers).

The CSV's trailing ``#`` lines say how it was timed and give part 2's results.
"""

from __future__ import annotations

import csv
import itertools
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen.bench import interleaved  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ROUNDS = 1  # one do_bench of each per layout, tilegen then cuBLAS
TIMING = ("tilegen TFLOP/s, cuBLAS TFLOP/s, ratio: eager, median of triton.testing.do_bench (L2 flushed); "
          "tilegen TFLOP/s graph, cuBLAS TFLOP/s graph, ratio_graph: replayed in a CUDA graph, "
          "triton.testing.do_bench_cudagraph (nan where capture failed)")


def operand(rows: int, cols: int, column_major: bool, dtype=torch.float16) -> torch.Tensor:
    """A random ``rows x cols`` CUDA tensor of ``dtype``: row-major, or column-major as the ``.t()``
    of a row-major ``cols x rows`` tensor (an ``nn.Linear`` weight's layout)."""
    if column_major:
        return torch.randn(cols, rows, device="cuda").to(dtype).t()
    return torch.randn(rows, cols, device="cuda").to(dtype)


def layouts(sizes: list[int]) -> list[dict]:
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS in TF32, as matmul_fast's f32 dot
    for size, dtype, a_col, b_col in itertools.product(sizes, DTYPES, (False, True), (False, True)):
        a, b = operand(size, size, a_col, dtype), operand(size, size, b_col, dtype)
        c = module.matmul_fast(a, b)
        error = float((c.double() - (a.double() @ b.double())).abs().max())
        eager, graph = interleaved({"tilegen": lambda a=a, b=b: module.matmul_fast(a, b),
                                    "cuBLAS": lambda a=a, b=b: torch.matmul(a, b)}, rounds=ROUNDS, warmup=25, rep=100)
        ours, cublas = eager["tilegen"], eager["cuBLAS"]
        flops = 2 * size**3
        row = {
            "size": size,
            "dtype": str(dtype).removeprefix("torch."),
            "a": "column-major" if a_col else "row-major",
            "b": "column-major" if b_col else "row-major",
            "max error": round(error, 4),
            "tilegen TFLOP/s": round(flops / ours * 1e-9, 1),
            "cuBLAS TFLOP/s": round(flops / cublas * 1e-9, 1),
            "ratio": round(cublas / ours, 3),
            "tilegen TFLOP/s graph": round(flops / graph["tilegen"] * 1e-9, 1),
            "cuBLAS TFLOP/s graph": round(flops / graph["cuBLAS"] * 1e-9, 1),
            "ratio_graph": round(graph["cuBLAS"] / graph["tilegen"], 3),
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def fallbacks() -> list[str]:
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    lines = []
    for dtype in DTYPES:
        cases = {
            "odd K": (torch.randn(300, 301, device="cuda").to(dtype), torch.randn(301, 256, device="cuda").to(dtype)),
            "K = 0": (torch.randn(64, 0, device="cuda").to(dtype), torch.randn(0, 64, device="cuda").to(dtype)),
            "misaligned base": (torch.randn(300 * 256 + 1, device="cuda").to(dtype)[1:].view(300, 256),
                                torch.randn(256, 256, device="cuda").to(dtype)),
            "two unit strides": (torch.randn(128, 64, device="cuda").to(dtype),
                                 torch.randn(64 + 64, device="cuda").to(dtype).as_strided((64, 64), (1, 1))),
        }
        for name, (a, b) in cases.items():
            c = module.matmul_fast(a, b)
            assert c.dtype == dtype
            error = float((c.float() - (a.float() @ b.float())).abs().max()) if c.numel() else 0.0
            lines.append(f"matmul_fast {str(dtype).removeprefix('torch.')} {name}: max error {error:.4g}")
    block = load_module(ROOT / "generated" / "matmul_block_ptr.py")
    a, b = torch.randn(300, 256, device="cuda").half(), torch.randn(256, 200, device="cuda").half()
    native = block.matmul_block_ptr(a, b)
    block._BLOCK_POINTERS = False
    pointers = block.matmul_block_ptr(a, b)
    error = float((pointers - a.float() @ b.float()).abs().max())
    lines.append(f"matmul_block_ptr through pointers: max error {error:.4g}, "
                 f"equal to the block-pointer kernel: {torch.equal(native, pointers)}")
    for line in lines:
        print(line, flush=True)
    return lines


def main(out: Path, sizes: list[int]) -> None:
    device = torch.cuda.get_device_name().replace(" ", "_")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
    rows = layouts(sizes)
    notes = fallbacks()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"matmul_layouts_{device}.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        handle.writelines(f"# {line}\n" for line in [TIMING, *notes])
    print(f"wrote {path}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]) if args else ROOT / "benchmarks" / "results", [int(s) for s in args[1:]] or [1024, 2048, 4096])
