"""``matmul_fast``'s grouped ordering (``GROUP_SIZE_M``) at the square sizes below 0.9x cuBLAS (issue 12), H100.

The spec's tiles run in tutorial 03's grouped order, ``GROUP_SIZE_M = 8`` rows of tiles per
group, so that the programs of one wave share tiles of ``a`` and ``b`` in L2. Is 8 the best
group at the sizes where the tuner's best config still trails cuBLAS (2944, 3072, 3200) and at a
few others? Each size tunes once (group 8), then the tuned config runs with each group size
(a launcher keyword), f16 row-major, CUDA graphs, medians of 3 interleaved rounds with cuBLAS.

``python explore_group_h100.py [SIZE ...]``.
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-explore-"))

from tilegen.runner import load_module  # noqa: E402

GROUPS = [1, 4, 8, 16, 32]


def main(sizes):
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "f16 row-major; CUDA graphs, median of 3 interleaved rounds; ratio = cuBLAS time / time", flush=True)
    for size in sizes:
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        module.matmul_fast(a, b)
        picked = list(module._TUNED.values())[-1]
        config = module._CONFIGS[picked]
        fns = {"cuBLAS": lambda: torch.mm(a, b)}
        for group in GROUPS:
            fns[group] = lambda group=group: module.matmul_fast(a, b, GROUP_SIZE_M=group)
            fns[group]()
        times = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench_cudagraph(fn, rep=30))
        med = {name: statistics.median(t) for name, t in times.items()}
        text = "  ".join(f"group {g} {med['cuBLAS'] / med[g]:.3f}" for g in GROUPS)
        kw = config.kwargs
        print(f"{size} ({kw['BM']}x{kw['BN']}x{kw['BK']} w{config.num_warps} s{config.num_stages}): {text}", flush=True)


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [2944, 3072, 3200, 2560, 4096])
