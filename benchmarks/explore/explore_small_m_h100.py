"""Configs for small M (a model's decode and small-batch shapes) for ``matmul_fast`` (issue 12), H100.

At M = 16-32, N = K = 4096 (``x @ w.t()``) ``matmul_fast`` runs at 0.61-0.76x cuBLAS: the shape
is bound by reading w (32 MB), and a 64-row tile over 16 rows reads few bytes per stage, so few
are in flight per SM. This builds the spec with extra configs (BM 16 or 32: Triton's mma for tiles
under 64 rows; deep BK and more stages) into a temporary folder and runs every config, forced
through the launcher's tuning cache, against cuBLAS in CUDA graphs (medians of 3 rounds).
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from tilegen.runner import load_module  # noqa: E402

EXTRA = [(16, 64, 256, 4, 4), (16, 128, 128, 4, 4), (16, 128, 256, 4, 3), (16, 256, 128, 4, 3),
         (32, 64, 256, 4, 4), (32, 128, 128, 4, 5), (32, 128, 256, 4, 3), (16, 64, 128, 4, 6),
         (64, 128, 128, 4, 4), (64, 64, 256, 4, 4), (64, 256, 64, 4, 5)]
SHAPES = [(16, 4096, 4096, True), (32, 4096, 4096, True), (64, 4096, 4096, True), (16, 14336, 4096, True),
          (1, 4096, 4096, False), (128, 4096, 4096, True)]


def build(tmp: Path):
    (tmp / "specs").mkdir()
    text = (ROOT / "specs" / "matmul_fast.tile").read_text()
    lines = "".join(f"    config BM = {bm}, BN = {bn}, BK = {bk}, num_stages = {s}, num_warps = {w}\n"
                    for bm, bn, bk, w, s in EXTRA)
    text = re.sub(r"(    default config )", lines.replace("\\", "\\\\") + r"\1", text, count=1)
    (tmp / "specs" / "matmul_fast.tile").write_text(text)
    subprocess.run([sys.executable, "-m", "tilegen.cli", "build", str(tmp / "specs"), "-o", str(tmp / "gen")],
                   check=True, cwd=ROOT, capture_output=True)
    return load_module(tmp / "gen" / "matmul_fast.py")


def cfg(config):
    return (config.kwargs["BM"], config.kwargs["BN"], config.kwargs["BK"], config.num_warps, config.num_stages)


def main() -> None:
    module = build(Path(tempfile.mkdtemp(prefix="tilegen-small-m-")))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{len(module._CONFIGS)} configs (BM, BN, BK, warps, stages), f16, CUDA graphs", flush=True)
    for m, n, k, b_col in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16).t() if b_col else torch.randn(
            k, n, device="cuda", dtype=torch.float16)
        module.matmul_fast(a, b)  # tunes over all configs
        key, picked = list(module._TUNED.items())[-1]
        expected = a.float() @ b.float()
        cublas = statistics.median(triton.testing.do_bench_cudagraph(lambda: torch.matmul(a, b), rep=30)
                                   for _ in range(3))
        results = []
        for index, config in enumerate(module._CONFIGS):
            module._TUNED[key] = index
            try:
                err = (module.matmul_fast(a, b).float() - expected).abs().max().item()
                t = statistics.median(triton.testing.do_bench_cudagraph(lambda: module.matmul_fast(a, b), rep=30)
                                      for _ in range(3))
            except Exception as exc:  # a config the GPU cannot run
                print(f"  {cfg(config)}: {type(exc).__name__}", flush=True)
                continue
            results.append((cublas / t, cfg(config), t, err))
        module._TUNED[key] = picked
        results.sort(reverse=True)
        best = ", ".join(f"{c} x{r:.3f}{' (new)' if c in EXTRA else ''}" for r, c, _, _ in results[:4])
        tuned = next(r for r, c, _, _ in results if c == cfg(module._CONFIGS[picked]))
        print(f"{m}x{n}x{k}{' b col' if b_col else ''}: cuBLAS {cublas * 1e3:.1f} us; tuner picked "
              f"{cfg(module._CONFIGS[picked])} x{tuned:.3f}; best {best}; max err "
              f"{max(e for *_, e in results):.3g}", flush=True)


if __name__ == "__main__":
    main()
