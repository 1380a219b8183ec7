"""Thread-block clusters for ``matmul_fast`` (issue 5, target 2): the generated TMA kernel launched
with ``num_ctas=1`` and ``num_ctas=2`` (a cluster of two programs, which Hopper can feed with one
multicast TMA load), against cuBLAS, as ``targets.py`` times it: medians of 3 rounds taking
turns, ``do_bench`` with the L2 flushed.

``python benchmarks/explore/explore_ctas_h100.py``.
"""

import statistics
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
CONFIGS = {1024: [(64, 128, 64, 4, 4), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4)],
           2048: [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (256, 128, 64, 8, 3)],
           4096: [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (256, 128, 64, 8, 3)]}


def launch(a, b, c, cfg, ctas):
    BM, BN, BK, w, s = cfg
    M, K = a.shape
    N = b.shape[1]
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [BM, BK])
    b_desc = TensorDescriptor(b, [K, N], [N, 1], [BK, BN])
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [BM, BN])
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    return lambda: kernel[grid](a_desc, b_desc, c_desc, M, K, N, BM=BM, BN=BN, BK=BK, GROUP_SIZE_M=8,
                                num_warps=w, num_stages=s, num_ctas=ctas)


print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
for dtype in (torch.float16, torch.bfloat16):
    for n, configs in CONFIGS.items():
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        expected = (a.float() @ b.float())
        fns = {"cuBLAS": lambda: torch.matmul(a, b)}
        for cfg in configs:
            for ctas in (1, 2):
                fn = launch(a, b, c, cfg, ctas)
                try:
                    c.zero_()
                    fn()
                    torch.cuda.synchronize()
                    ok = torch.allclose(c.float(), expected, atol=1.0, rtol=2e-2)
                except Exception as error:  # any error: report it and go on
                    print(f"  {n} {cfg} num_ctas={ctas}: {type(error).__name__}: {str(error)[:120]}", flush=True)
                    continue
                if not ok:
                    print(f"  {n} {cfg} num_ctas={ctas}: WRONG RESULT", flush=True)
                    continue
                fns[f"{cfg} num_ctas={ctas}"] = fn
        times = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench(fn))
        base = statistics.median(times["cuBLAS"])
        print(f"{str(dtype)[6:]} {n}: cuBLAS {2 * n**3 / (base * 1e-3) * 1e-12:.0f} TFLOP/s", flush=True)
        for name, values in times.items():
            if name != "cuBLAS":
                print(f"  {name:34s} {base / statistics.median(values):.3f}x cuBLAS", flush=True)
