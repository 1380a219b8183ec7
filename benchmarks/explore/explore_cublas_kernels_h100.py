"""Which cuBLAS kernel torch.matmul runs at the square sizes where matmul_fast trails (names give tiles).

``python explore_cublas_kernels_h100.py [SIZE ...] [--b-col]`` (``--b-col``: ``b`` column-major, ``b = w.t()``).
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

SIZES = [768, 1152, 1536, 1664, 2048, 2176, 2944, 3072, 3200, 3840, 4096]
b_col = "--b-col" in sys.argv
sizes = [int(x) for x in sys.argv[1:] if not x.startswith("--")] or SIZES
print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; f16, b {'column' if b_col else 'row'}-major")
for n in sizes:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    if b_col:
        b = b.t().contiguous().t()
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        a @ b
        torch.cuda.synchronize()
    names = [e.name for e in p.events() if e.device_type.name == "CUDA"]
    print(n, torch.float16, names, flush=True)
