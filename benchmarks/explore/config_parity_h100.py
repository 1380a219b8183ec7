"""GPU parity of chosen ``matmul_fast`` configs, each forced (not tuned), H100 (issue 12).

``python config_parity_h100.py LABEL ...`` where a LABEL is ``BMxBNxBK:wWARPS:sSTAGES``
(``128x256x32:w8:s6``), a power-of-two config (the pointer kernel runs it too where TMA
cannot address the rows). Each config runs through the launchers (split tail and split-K
included) in f16 and bf16, at odd and even shapes, a long K that splits, with row-major
operands, a column-major ``b`` and a column-major ``a``; the error is against ``torch.matmul``
in f32, bounded by 0.02 sqrt(K) (four times that in bf16), as ``explore_pieces_spec_h100.py``.
"""

import os
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-explore-"))

from tilegen.runner import load_module  # noqa: E402

SHAPES = [(1000, 1000, 1000), (193, 77, 64), (320, 256, 8192), (2176, 2176, 2176), (65, 129, 40), (128, 4096, 4096)]


def label(config):
    kw = config.kwargs
    return f"{kw['BM']}x{kw['BN']}x{kw['BK']}:w{config.num_warps}:s{config.num_stages}"


def main(labels):
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    real = module._tuned_index
    for wanted in labels:
        index = next(i for i, c in enumerate(module._CONFIGS) if label(c) == wanted)
        # both launchers run it (the pointer kernel, where TMA cannot address the rows, too)
        module._tuned_index = lambda launcher, key, index=index: index
        worst, cases = 0.0, 0
        for dtype in (torch.float16, torch.bfloat16):
            for m, n, k in SHAPES:
                for a_col, b_col in [(False, False), (False, True), (True, False)]:
                    module._TUNED.clear()
                    a = torch.randn(m, k, device="cuda", dtype=dtype)
                    b = torch.randn(k, n, device="cuda", dtype=dtype)
                    if a_col:
                        a = a.t().contiguous().t()
                    if b_col:
                        b = b.t().contiguous().t()
                    err = (module.matmul_fast(a, b).float() - a.float() @ b.float()).abs().max().item()
                    bound = 0.02 * k ** 0.5 * (4 if dtype == torch.bfloat16 else 1)
                    worst, cases = max(worst, err / bound), cases + 1
                    if err > bound:
                        print(f"  FAIL {wanted} {dtype} {m}x{n}x{k} a_col={a_col} b_col={b_col}: "
                              f"{err:.4f} > {bound:.4f}", flush=True)
        print(f"{wanted}: worst error / bound {worst:.3f} over {cases} cases", flush=True)
    module._tuned_index = real
    module._TUNED.clear()


if __name__ == "__main__":
    main(sys.argv[1:])
