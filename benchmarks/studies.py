"""The seeds' benchmark studies, reproduced with tilegen's generated kernels (GPU only).

``python benchmarks/studies.py OUT_DIR`` writes one CSV per study into OUT_DIR (the device,
torch and Triton versions in its ``#`` header lines); ``benchmarks/plot.py`` draws them.

* ``lecture14_sizes.csv``: lecture 14's size sweep (square 32 to 2048): naive, grouped (block
  64, group 8), grouped-autotuned (8 configs) and torch.matmul (cuBLAS);
* ``lecture14_blocks.csv``: lecture 14's block-size sweep (16, 32, 64) at 512 x 512;
* ``tutorial03.csv``: Triton tutorial 03's sweep (M = N = K = 128 to 4096 step 128): cuBLAS,
  the generated tutorial matmul, the hand-written tutorial kernel (both autotuned over the same
  10 configs), and both again with the fused leaky_relu (cuBLAS + torch's leaky_relu).

Deviation from lecture 14: its studies use float32 inputs and report GB/s; tilegen's lecture-14
specs take fp16 inputs (as the issue's targets do), so these studies use fp16 and report
TFLOP/s. Every provider is timed in the same process, eager (``triton.testing.do_bench``) and
replayed in a CUDA graph (``do_bench_cudagraph``): ``tilegen.bench.timed``.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reference import matmul_tutorial as ref_tutorial  # noqa: E402
from tilegen import bench  # noqa: E402
from tilegen.check import check  # noqa: E402
from tilegen.parser import parse  # noqa: E402
from tilegen.runner import load_module  # noqa: E402


def spec_and_module(name: str, spec_file: str | None = None):
    text = (ROOT / "specs" / f"{spec_file or name}.tile").read_text()
    return check(parse(text, f"specs/{spec_file or name}.tile")), load_module(ROOT / "generated" / f"{name}.py")


def square(n: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    return {"a": a, "b": b}


def lecture14_sizes() -> bench.Sweep:
    _, naive = spec_and_module("matmul_naive")
    _, grouped = spec_and_module("matmul_grouped")
    _, tuned = spec_and_module("matmul_grouped_autotuned")
    sweep = bench.Sweep("matmul_naive", "TFLOP/s", ["naive", "grouped", "grouped-autotuned", "torch.matmul"])
    for n in [2**i for i in range(5, 12)]:
        a, b = square(n).values()
        block = min(64, n)  # the lecture's block 64; at 32 the K loop (unmasked) needs block 32
        providers = {
            "naive": lambda a=a, b=b, block=block: naive.matmul_naive(a, b, BM=block, BN=block, BK=block),
            "grouped": lambda a=a, b=b, block=block: grouped.matmul_grouped(
                a, b, BM=block, BN=block, BK=block, GROUP_SIZE=8
            ),
            # its configs have BK up to 64 and an unmasked K loop: K = 32 is refused (NaN in the CSV)
            "grouped-autotuned": (lambda a=a, b=b: tuned.matmul_grouped_autotuned(a, b)) if n >= 64 else None,
            "torch.matmul": lambda a=a, b=b: torch.matmul(a, b),
        }
        timings = []
        for provider, fn in providers.items():
            if fn is None:
                timings.append(bench.Timing(provider, float("nan"), float("nan"), float("nan")))
                continue
            fn()
            timings.append(bench.timed(provider, fn))
        sweep.points.append(bench.Point({"M": n, "N": n, "K": n}, 2 * n**3, 3 * n * n * 2, tuple(timings)))
    return sweep


def lecture14_blocks() -> bench.Sweep:
    _, naive = spec_and_module("matmul_naive")
    _, grouped = spec_and_module("matmul_grouped")
    sweep = bench.Sweep("matmul_naive", "TFLOP/s", ["naive", "grouped", "torch.matmul"])
    for block in (16, 32, 64):
        inputs = square(512)
        a, b = inputs["a"], inputs["b"]
        timings = [
            bench.timed("naive", lambda a=a, b=b, block=block: naive.matmul_naive(a, b, BM=block, BN=block, BK=block)),
            bench.timed("grouped", lambda a=a, b=b, block=block: grouped.matmul_grouped(
                a, b, BM=block, BN=block, BK=block, GROUP_SIZE=8)),
            bench.timed("torch.matmul", lambda a=a, b=b: torch.matmul(a, b)),
        ]
        sizes = {"block": block, "M": 512, "N": 512, "K": 512}
        sweep.points.append(bench.Point(sizes, 2 * 512**3, 3 * 512 * 512 * 2, tuple(timings)))
    return sweep


def tutorial03() -> bench.Sweep:
    spec, module = spec_and_module("matmul_tutorial")
    providers = {
        "cuBLAS": torch.matmul,
        "hand-written": lambda a, b: ref_tutorial.matmul(a, b),
        "tilegen leaky_relu": lambda a, b: module.matmul_tutorial(a, b, activation="leaky_relu"),
        "hand-written leaky_relu": lambda a, b: ref_tutorial.matmul(a, b, activation="leaky_relu"),
        "cuBLAS + leaky_relu": lambda a, b: F.leaky_relu(torch.matmul(a, b), 0.01),
    }
    points = [{"M": n, "N": n, "K": n} for n in range(128, 4097, 128)]
    return bench.run_sweep(spec, module, points, providers, make_inputs=lambda s: square(s["M"]))


STUDIES = {"lecture14_sizes": lecture14_sizes, "lecture14_blocks": lecture14_blocks, "tutorial03": tutorial03}


def main(out_dir: Path, names: list[str]) -> None:
    meta = bench.environment()
    for name in names or list(STUDIES):
        sweep = STUDIES[name]()
        bench.write_csv(sweep, out_dir / f"{name}.csv", meta)
        for point in sweep.points:
            ours = point.timings[0]
            ratios = ", ".join(f"{t.provider} {point.rate(t):.1f}" for t in point.timings)
            print(f"{name} {point.sizes}: {sweep.unit} {ratios} ({ours.provider} {ours.ms:.4f} ms)", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
