"""Products with few output tiles and a long contraction, where split-K decides: a weight's
gradient of the decoder (benchmarks/decoder.py: 8192 tokens into 384 x 1152, 384 x 384,
384 x 1024, 1024 x 384, 384 x 256) through matmul_fast_backward_db, the forward at deep K, against
cuBLAS (torch's @ on the same views), bf16 (or f32 with TF32 on both sides, given ``f32``), eager
(do_bench) and graphed.

``python benchmarks/explore/explore_split_small_outputs.py [f32]`` (GPU)."""

import functools
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

db = load_module(ROOT / "generated" / "matmul_fast_backward_db.py")
da = load_module(ROOT / "generated" / "matmul_fast_backward_da.py")
fwd = load_module(ROOT / "generated" / "matmul_fast.py")
print(f"# {torch.cuda.get_device_name()}; ratio = cuBLAS / tilegen")
DTYPE = torch.float32 if "f32" in sys.argv[1:] else torch.bfloat16
torch.backends.cuda.matmul.allow_tf32 = True  # f32: TF32 on both sides, as tilegen's dot of f32 tiles
print(f"# {DTYPE}")
for what, m, n, k in [("db", 8192, 1152, 384), ("db", 8192, 384, 384), ("db", 8192, 1024, 384),
                      ("db", 8192, 384, 1024), ("db", 8192, 256, 384), ("forward", 384, 1152, 8192),
                      ("forward", 1024, 1024, 8192), ("forward", 512, 512, 16384), ("forward", 8192, 1152, 384),
                      ("da", 8192, 1152, 384)]:
    if what == "db":  # db[k, n] = a[m, k]^T dc[m, n]
        a = torch.randn(m, k, device="cuda", dtype=DTYPE)
        dc = torch.randn(m, n, device="cuda", dtype=DTYPE)
        ours, theirs = functools.partial(db.matmul_fast_backward_db, a, dc), functools.partial(torch.mm, a.T, dc)
    elif what == "da":  # da[m, k] = dc[m, n] b[k, n]^T
        dc = torch.randn(m, n, device="cuda", dtype=DTYPE)
        b = torch.randn(k, n, device="cuda", dtype=DTYPE)
        ours, theirs = functools.partial(da.matmul_fast_backward_da, dc, b), functools.partial(torch.mm, dc, b.T)
    else:  # c[m, n] = a[m, k] b[k, n]
        a = torch.randn(m, k, device="cuda", dtype=DTYPE)
        b = torch.randn(k, n, device="cuda", dtype=DTYPE)
        ours, theirs = functools.partial(fwd.matmul_fast, a, b), functools.partial(torch.mm, a, b)
    torch.testing.assert_close(ours().float(), theirs().float(), rtol=2e-2, atol=2.0)
    e = [triton.testing.do_bench(f, warmup=10, rep=100) for f in (ours, theirs)]
    g = [triton.testing.do_bench_cudagraph(f, rep=100) for f in (ours, theirs)]
    print(f"{what} M={m} N={n} K={k}: tilegen {e[0] * 1e3:.1f} us, cuBLAS {e[1] * 1e3:.1f} us, "
          f"eager {e[1] / e[0]:.2f}x; graphed {g[0] * 1e3:.1f} / {g[1] * 1e3:.1f} us, {g[1] / g[0]:.2f}x", flush=True)
