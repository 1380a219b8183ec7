"""A wider config search for ``matmul_fast`` (issue 5, target 2): the generated kernel with
tile configs beyond the spec's 11, timed as ``targets.py`` times it (``triton.testing.do_bench``,
L2 flushed between calls), each against cuBLAS measured right before it.

``python benchmarks/explore/explore_configs_h100.py``; prints, per size, the spec's tuned choice and the
five fastest configs of the search with their ratio to cuBLAS.
"""

import itertools
import sys
from pathlib import Path

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

fast = load_module(ROOT / "generated" / "matmul_fast.py")
kernel = fast.matmul_fast_kernel.fn

SEARCH = [
    (bm, bn, bk, w, s)
    for (bm, bn), bk, w, s in itertools.product(
        [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (64, 256)],
        [32, 64, 128],
        [4, 8],
        [3, 4, 5],
    )
    # shared memory: every stage holds an A and a B tile, plus the C tile for the TMA store
    if ((bm + bn) * bk * s + bm * bn) * 2 <= 220 * 1024 and not (w == 8 and bm * bn <= 64 * 64)
]


def launch(a, b, c, cfg):
    BM, BN, BK, w, s = cfg
    M, K = a.shape
    N = b.shape[1]
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [BM, BK])
    b_desc = TensorDescriptor(b, [K, N], [N, 1], [BK, BN])
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    return lambda: kernel[grid](a_desc, b_desc, c_desc, M, K, N, BM=BM, BN=BN, BK=BK, GROUP_SIZE_M=8,
                                num_warps=w, num_stages=s)


print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
      f"{len(SEARCH)} configs", flush=True)
for n in (1024, 2048, 4096):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    fast.matmul_fast(a, b)
    tuned = fast.matmul_fast_kernel.best_config
    results = []
    for cfg in SEARCH:
        try:
            fn = launch(a, b, c, cfg)
            fn()
            cublas = triton.testing.do_bench(lambda: torch.matmul(a, b))
            results.append((cublas / triton.testing.do_bench(fn), cfg))
        except Exception as error:  # any error: report it and go on
            print(f"  {cfg}: {type(error).__name__}", flush=True)
    results.sort(reverse=True)
    spec = (tuned.kwargs["BM"], tuned.kwargs["BN"], tuned.kwargs["BK"], tuned.num_warps, tuned.num_stages)
    mine = next((r for r, cfg in results if cfg == spec), float("nan"))
    print(f"{n}: spec's tuned choice {spec}: {mine:.3f}x cuBLAS; best of the search:", flush=True)
    for ratio, cfg in results[:5]:
        print(f"  {cfg}: {ratio:.3f}x cuBLAS", flush=True)
