"""Where the attention specs lose to tutorial 06 (issue 11), kernel by kernel on the H100.

Variants of the generated kernel, hand-edited, with the spec's autotune configs:
- ``gen``: the generated module as it is (pointer loads, ``s = dot * scale`` then ``s - m``);
- ``tma4``: the same body with q, k, v and o through 4D host tensor descriptors
  (``[B, H, S, D]``, block ``[1, 1, BN, BLOCK_D]``, reshaped to 2D), any strides;
- ``tma4_fma``: ``tma4`` with tutorial 06's ordering: the max over raw scores, scaled after
  (``max(dot) * scale``), then ``dot * scale - m`` (one FMA per element; needs scale > 0);
- ``tutorial``: tutorial 06 (``tests/reference/attention.py``, 2D descriptors).
``python benchmarks/explore/explore_attention_h100.py`` prints one line per shape and variant.
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from tests.reference import attention as ref_attention  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

CONFIGS = [
    triton.Config({"BM": bm, "BN": bn}, num_warps=w, num_stages=st)
    for bm, bn, w, st in [(128, 64, 4, 3), (128, 64, 4, 4), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3),
                          (128, 32, 4, 4), (64, 64, 4, 3), (64, 64, 4, 4), (64, 128, 4, 3), (64, 32, 4, 4)]
]


def _blocks(nargs):
    bm, bn, bd = nargs["BM"], nargs["BN"], nargs["BLOCK_D"]
    for name, rows in (("q_desc", bm), ("k_desc", bn), ("v_desc", bn), ("o_desc", bm)):
        nargs[name].block_shape = [1, 1, rows, bd]


for c in CONFIGS:
    c.pre_hook = _blocks


@triton.jit
def _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, n, offs_m, S, qk_scale,
          BN: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr):
    offs_n = n * BN + tl.arange(0, BN)
    k = k_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, BLOCK_D)
    qk = tl.dot(q, k.T)
    if MASKED:
        keep = offs_n[None, :] < S
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, float("-inf"))
    if FMA:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
    else:
        s = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = v_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, BLOCK_D)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.autotune(CONFIGS, key=["S", "D", "CAUSAL", "FMA"])
@triton.jit
def tma4_kernel(q_desc, k_desc, v_desc, o_desc, S, D, scale,
                BM: tl.constexpr, BN: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, FMA: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_z = tl.program_id(1)
    pid_h = tl.program_id(2)
    offs_m = pid_m * BM + tl.arange(0, BM)
    qk_scale = scale * 1.4426950408889634
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, BLOCK_D), dtype=tl.float32)
    q = q_desc.load([pid_z, pid_h, pid_m * BM, 0]).reshape(BM, BLOCK_D)
    if CAUSAL:
        full = min(S // BN, (pid_m * BM + 1) // BN)
        end = min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))
    else:
        full = S // BN
        end = tl.cdiv(S, BN)
    for n in range(0, full):
        acc, l_i, m_i = _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, n, offs_m, S, qk_scale,
                              BN, BLOCK_D, False, CAUSAL, FMA)
    for n in range(full, end):
        acc, l_i, m_i = _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, n, offs_m, S, qk_scale,
                              BN, BLOCK_D, True, CAUSAL, FMA)
    o = (acc / l_i[:, None]).to(o_desc.dtype)
    o_desc.store([pid_z, pid_h, pid_m * BM, 0], o.reshape(1, 1, BM, BLOCK_D))


def tma4(q, k, v, scale, causal, fma):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    dummy = [1, 1, 16, D]
    descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), dummy) for t in (q, k, v, o)]
    grid = lambda meta: (triton.cdiv(S, meta["BM"]), B, H)  # noqa: E731
    tma4_kernel[grid](*descs, S, D, scale, BLOCK_D=D, CAUSAL=causal, FMA=fma)
    return o


def main():
    gen = {n: load_module(ROOT / "generated" / f"{n}.py") for n in ["attention", "attention_causal"]}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    shapes = [(False, 128, 1024), (False, 128, 16384), (False, 64, 2048), (False, 128, 4096),
              (True, 64, 1024), (True, 64, 4096), (True, 128, 1024), (True, 128, 8192)]
    for causal, d, s in shapes:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        name = "attention_causal" if causal else "attention"
        fns = {
            "gen": lambda: getattr(gen[name], name)(q, k, v, scale),
            "tma4": lambda: tma4(q, k, v, scale, causal, False),
            "tma4_fma": lambda: tma4(q, k, v, scale, causal, True),
            "tutorial": lambda: ref_attention.attention(q, k, v, causal, scale),
            "flash": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale),
        }
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        for impl, fn in fns.items():
            err = (fn().float() - expected.float()).abs().max().item()
            if err > 2e-2:
                print(f"{impl}: error {err}", flush=True)
        times = {impl: [] for impl in fns}
        for _ in range(3):
            for impl, fn in fns.items():
                times[impl].append(triton.testing.do_bench(fn, warmup=25, rep=100))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        ms = {impl: statistics.median(t) for impl, t in times.items()}
        line = "  ".join(f"{impl} {flops / t / 1e9:6.1f} ({ms['tutorial'] / t:.3f})" for impl, t in ms.items())
        best = {impl: str(getattr(kern, "best_config", "")) for impl, kern in (("tma4", tma4_kernel),)}
        print(f"causal={causal!s:5s} D={d:<4d} S={s:<6d} TFLOP/s (x tutorial): {line}  {best}", flush=True)


if __name__ == "__main__":
    main()
