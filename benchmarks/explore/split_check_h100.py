"""One-off (issue 12): matmul_fast at shapes whose K loop splits, after the split loops' review fixes.

f16 (both layouts of b), bf16 and f32, against torch in f64: the first call (tuning), the tuned
call, and a CUDA graph capture and replay of it; prints the parts each shape ran in.
Run on the GPU from the repository root: ``python benchmarks/explore/split_check_h100.py``.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp()
from pathlib import Path

import torch

from tilegen.runner import load_module

mod = load_module(Path("generated/matmul_fast.py"))
ok = True
SHAPES = [(16, 4096, 4096), (1, 4096, 4096), (128, 131072, 128), (256, 65536, 256), (16, 4095, 1024)]
cases = [(torch.float16, s, bc) for s in SHAPES for bc in (False, True)]
cases += [(torch.bfloat16, (16, 4096, 4096), True), (torch.float32, (256, 65536, 256), False)]
cases += [(torch.float16, (1024, 1024, 1024), False)]
for dtype, (m, k, n), bc in cases:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if bc else torch.randn(k, n, device="cuda", dtype=dtype)
    c = mod.matmul_fast(a, b)
    c2 = mod.matmul_fast(a, b)  # the tuned path
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c3 = mod.matmul_fast(a, b)
    g.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = max((x.double() - ref).abs().max().item() for x in (c, c2, c3))
    tol = (0.1 if dtype == torch.bfloat16 else 0.05) * max(1, k**0.5 / 10) + 0.02 * ref.abs().max().item()
    key = next(key for key in mod._TUNED if (m, n, k) in (key[1:4], key[2:5]))
    cfg = mod._CONFIGS[mod._TUNED[key]].kwargs
    parts = mod._split_grid(m, n, k, cfg["BM"], cfg["BN"], cfg["BK"], a.device)[1]
    good = err <= tol
    ok &= good
    verdict = "PASS" if good else "FAIL"
    print(f"{str(dtype)[6:]:9s} {m}x{k}x{n} b_col={bc} parts={parts} max_err={err:.3g} {verdict}", flush=True)
print("ALL PASS" if ok else "SOME FAIL")
