"""The fp8 GEMM with row-wise scales (``specs/matmul_fp8.tile``) against ``torch._scaled_mm`` and
the f16 cuBLAS GEMM, on the GPU (issue 52).

``python benchmarks/matmul_fp8.py [OUT_DIR]`` (default ``benchmarks/results``) prints and writes
``matmul_fp8_<device>.csv``. Shapes (M, N, K): 4096^3 and Llama 3 8B's linear layers at 8192
tokens (q/k/v fused 6144 x 4096, the output projection 4096 x 4096, gate/up fused 28672 x 4096,
down 4096 x 14336), plus an odd M. Operands e4m3: ``a`` [M, K] and ``b`` [N, K] (nn.Linear's
layout), both K-major, scales float32 per row of ``a`` and per row of ``b``, output bf16.

Every implementation is timed in the same process two ways (``tilegen.bench.interleaved``, 3
rounds): eager, the median of ``triton.testing.do_bench`` (L2 flushed; the launcher called as a
user calls it), and replayed in a CUDA graph (``do_bench_cudagraph``, the GPU's time alone).
Baselines: ``torch._scaled_mm`` with row-wise scales, with ``use_fast_accum=True`` (Hopper's fp8
accumulator, as Triton's fp8 ``tl.dot`` uses on sm90) and without it, and ``torch.matmul`` in
f16 (cuBLAS). Columns: TFLOP/s of each (eager and graphed), tilegen's ratio to each baseline
(above 1: tilegen faster), and the max error against ``_scaled_mm``'s bf16 result relative to
its largest magnitude. Tuning runs at the first call (``TILEGEN_TUNE=full`` unless set).
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_TUNE", "full")

from tilegen.bench import interleaved  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

SHAPES = [  # (label, M, N, K)
    ("4096^3", 4096, 4096, 4096),
    ("Llama-3-8B qkv", 8192, 6144, 4096),
    ("Llama-3-8B o_proj", 8192, 4096, 4096),
    ("Llama-3-8B gate_up", 8192, 28672, 4096),
    ("Llama-3-8B down", 8192, 4096, 14336),
    ("odd", 3001, 5008, 2080),  # _scaled_mm needs N and K multiples of 16
]
BASELINES = ("scaled_mm_fast_accum", "scaled_mm", "cublas_f16")


def case(m: int, n: int, k: int) -> dict:
    """Inputs of one shape and the callables to time, keyed by implementation."""
    module = load_module(ROOT / "generated" / "matmul_fp8.py")
    fp8 = torch.float8_e4m3fn
    a32, b32 = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    scale_a = a32.abs().amax(1) / torch.finfo(fp8).max  # row-wise, as fp8 training quantises
    scale_b = b32.abs().amax(1) / torch.finfo(fp8).max
    a, b = (a32 / scale_a[:, None]).to(fp8), (b32 / scale_b[:, None]).to(fp8)
    a16, b16 = a32.half(), b32.half()

    def scaled(fast: bool):
        return lambda: torch._scaled_mm(a, b.t(), scale_a[:, None], scale_b[None, :],
                                        out_dtype=torch.bfloat16, use_fast_accum=fast)

    return {
        "tilegen": lambda: module.matmul_fp8(a, b, scale_a, scale_b),
        "scaled_mm_fast_accum": scaled(True),
        "scaled_mm": scaled(False),
        "cublas_f16": lambda: a16 @ b16.t(),
    }


def main(out: Path) -> None:
    device = torch.cuda.get_device_name()
    print(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}", flush=True)
    rows = []
    for label, m, n, k in SHAPES:
        functions = case(m, n, k)
        expected = functions["scaled_mm"]().float()
        error = ((functions["tilegen"]().float() - expected).abs().max() / expected.abs().max()).item()
        torch.cuda.synchronize()
        eager, graphed = interleaved(functions, rounds=3)
        flops = 2 * m * n * k
        row = {"shape": label, "M": m, "N": n, "K": k, "relative_error": f"{error:.2e}"}
        for impl in functions:
            row[f"{impl}_tflops"] = round(flops / eager[impl] / 1e9, 1)
            row[f"{impl}_tflops_graph"] = round(flops / graphed[impl] / 1e9, 1)
        for base in BASELINES:
            row[f"over_{base}"] = round(eager[base] / eager["tilegen"], 3)
            row[f"over_{base}_graph"] = round(graphed[base] / graphed["tilegen"], 3)
        print(", ".join(f"{key}={value}" for key, value in row.items()), flush=True)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"matmul_fp8_{device.replace(' ', '_')}.csv"
    with path.open("w", newline="") as handle:
        handle.write(f"# {device}, torch {torch.__version__}, Triton {triton.__version__}\n")
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results")
