"""Which cuBLAS kernel torch.matmul runs at the square sizes where matmul_fast trails (names give tiles)."""
import torch
from torch.profiler import ProfilerActivity, profile

for n in [768, 1152, 1536, 1664, 2048, 2176, 2944, 3072, 3200, 3840, 4096]:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        a @ b
        torch.cuda.synchronize()
    names = [e.name for e in p.events() if e.device_type.name == "CUDA"]
    print(n, torch.float16, names, flush=True)
