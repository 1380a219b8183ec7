"""GPU parity of ``split tail`` in matmul_fast (issue 12): each split, with configs forced.

The autotuner picks one config per size, so which split a size runs depends on the tuning; here
each case seeds the launcher's tuned-config cache (its tuner's ``tuned``) with a chosen config, so that
quarters, halves of M, halves of N and no split all run, in f16 and bf16, with ``b`` row- and
column-major, against torch in f64; through TMA descriptors and, with an odd K, through the
pointer kernel.

``python benchmarks/tail_parity.py`` on a CUDA machine prints one line per case and exits 1 on a
failure; ``benchmarks/gpu_parity.py`` runs the same cases (:func:`cases`).
"""

import os
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-tail-parity-"))

from tilegen.runner import load_module  # noqa: E402

DEV = "cuda"
#: (M, K, N, config): on 132 SMs, 128 x 128 tiles at 1536 leave 12 tiles past the first wave
#: (quarters), at 1664 37 (halves of M); 128 x 256 at 2000 x 3000 leave 60 (halves of N); 16 x 128
#: at 100 x 3000 leave 36 (halves of N, 16 x 64); 256 x 128 at 1536 fill 72 tiles (no split).
CASES = [
    (1536, 1536, 1536, {"BM": 128, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4}),
    (1664, 1000, 1664, {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4}),
    (2000, 512, 3000, {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}),
    (100, 4096, 3000, {"BM": 16, "BN": 128, "BK": 128, "num_warps": 4, "num_stages": 4}),
    (1536, 1536, 1536, {"BM": 256, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 3}),
    # odd K: rows TMA cannot address, the pointer kernel (which reads the split from its grid)
    (1536, 1535, 1536, {"BM": 128, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4}),
    (1664, 999, 1664, {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4}),
    (2000, 511, 3000, {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}),
]


def cases():
    """Yield ``(kernel, case, True, max error, tolerance)`` per case: the split ``_tail_split``
    gives for the forced config, and the error against a @ b in f64 (tolerance: the inputs'
    rounding, 2e-2 relative to the largest output in f16, 4e-2 in bf16)."""
    fast = load_module(ROOT / "generated" / "matmul_fast.py")
    sms = fast._num_sms(torch.device(DEV, torch.cuda.current_device()))
    for m, k, n, wanted in CASES:
        index = next(i for i, c in enumerate(fast._CONFIGS)
                     if {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} == wanted)
        split = fast._tail_split(m, n, wanted["BM"], wanted["BN"], sms)
        for dtype in (torch.float16, torch.bfloat16):
            for b_col in (False, True):
                a = torch.randn(m, k, device=DEV, dtype=dtype)
                b = torch.randn(n, k, device=DEV, dtype=dtype)
                b = b.t() if b_col else b.reshape(k, n)
                if k % 8:  # the pointer launcher's tune key
                    fast._tuner.tuned[(a.device, "pointers", triton.next_power_of_2(m), n, k, dtype)] = index
                else:
                    fast._tuner.tuned[(a.device, triton.next_power_of_2(m), n, k, False, b_col, dtype)] = index
                c = fast.matmul_fast(a, b)
                expected = a.double() @ b.double()
                err = (c.double() - expected).abs().max().item() / expected.abs().max().item()
                tol = 2e-2 if dtype == torch.float16 else 4e-2
                layout = (" b column-major" if b_col else "") + (" (pointers)" if k % 8 else "")
                label = (f"{str(dtype)[6:]} {m}x{k}x{n}{layout} {wanted['BM']}x{wanted['BN']} "
                         f"split {split[1]}x{split[2]} ({split[0]} programs)")
                yield "matmul_fast tail", label, True, err, tol


if __name__ == "__main__":
    rows = []
    for kernel, case, _, err, tol in cases():
        ok = err <= tol
        rows.append(ok)
        print(f"{kernel:18s} {case:64s} max_rel_err={err:.3g} {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"device: {torch.cuda.get_device_name()}; {sum(rows)} passed, {len(rows) - sum(rows)} failed")
    sys.exit(0 if all(rows) else 1)
