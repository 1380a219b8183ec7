"""GPU parity of the attention specs (issue 11): every dtype, layout, sign of the scale and
edge shape, against float32 attention in torch, and against tutorial 06 where it runs.

``python benchmarks/attention_parity.py`` on a CUDA machine prints one line per case and exits 1
on a failure; ``benchmarks/gpu_parity.py`` runs the same cases (:func:`cases`).
"""

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-attention-parity-"))

from tests.reference import attention as ref_attention  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

DEV = "cuda"
#: (S, T, D): one row; tails of every block size (40, 100, 333, 1000 + 7); D of 16 to 128, and
#: D = 20, whose f16 rows (40 bytes) are not 16-byte aligned: the pointer kernel. Few head sizes,
#: since each (D, dtype, kernel) tunes 11 configs.
SHAPES = [(1, 1, 16), (100, 40, 64), (1007, 1007, 128), (333, 333, 20), (1024, 1024, 64)]


def expected(q, k, v, scale, causal):
    """Float32 attention: SDPA where the scale is positive, plain math otherwise (SDPA's math
    backend scales q and k by sqrt(scale) each)."""
    if scale > 0:
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale, is_causal=causal)
    s = torch.einsum("bhsd,bhtd->bhst", q.float(), k.float()) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.einsum("bhst,bhtd->bhsd", torch.softmax(s, dim=-1), v.float())


def cases():
    """Yield ``(kernel, case, equal_handwritten, max error, tolerance)`` for every case; the
    tolerance is issue 11's 1e-2 for f16, twice that for bf16 (8 bits of mantissa)."""
    gen = {name: load_module(ROOT / "generated" / f"{name}.py") for name in ["attention", "attention_causal"]}
    torch.manual_seed(0)
    for name in gen:
        causal = name == "attention_causal"
        for dtype in (torch.float16, torch.bfloat16):
            for layout in ("BHSD", "BSHD"):
                for s, t, d in SHAPES:
                    if causal and s != t:
                        continue
                    shapes = [(2, 3, n, d) if layout == "BHSD" else (2, n, 3, d) for n in (s, t, t)]
                    q, k, v = (torch.randn(shape, device=DEV, dtype=dtype) for shape in shapes)
                    if layout == "BSHD":  # a projection's [B, S, H, D] storage, viewed as [B, H, S, D]
                        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
                    scale = -(d**-0.5) if s in (100, 333) else d**-0.5  # a negative scale: min(qk) * scale
                    o = getattr(gen[name], name)(q, k, v, scale)[0]
                    equal = True  # tutorial 06 takes f16, S == T a multiple of 16, a positive scale
                    if dtype == torch.float16 and layout == "BHSD" and s == t and s % 16 == 0 and scale > 0:
                        hand = ref_attention.attention(q, k, v, causal, scale)
                        equal = torch.allclose(o.float(), hand.float(), atol=1e-2, rtol=1e-2)
                    err = (o.float() - expected(q, k, v, scale, causal)).abs().max().item()
                    tol = 1e-2 if dtype == torch.float16 else 2e-2
                    label = f"{str(dtype)[6:]} {layout} 2x3x{s}x{t}x{d} scale={scale:+.3f}"
                    yield name, label, equal, err, tol


if __name__ == "__main__":
    rows = []
    for kernel, case, equal, err, tol in cases():
        ok = bool(equal) and err <= tol
        rows.append(ok)
        print(f"{kernel:18s} {case:44s} equal_tutorial={equal!s:5s} max_err={err:.3g} {'PASS' if ok else 'FAIL'}",
              flush=True)
    print(f"device: {torch.cuda.get_device_name()}; {sum(rows)} passed, {len(rows) - sum(rows)} failed")
    sys.exit(0 if all(rows) else 1)
