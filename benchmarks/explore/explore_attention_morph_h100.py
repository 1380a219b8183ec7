"""What makes tutorial 06 faster than the generated causal kernel at S = 1024? (issue 11), H100.

At one config each, tutorial 06 runs 1.6-4.4% faster than the generated causal kernel at
S = 1024 (``explore_attention_rank_h100.log``); the descriptors' rank, the grid order and the
launcher are not the cause. This morphs a hand copy of the generated kernel (4D descriptors, as
generated) toward the tutorial one difference at a time, each a constexpr flag:
- ``order``: the tutorial's statement order in the loop: ``sum(p)`` before the second dot, the
  ``l_i`` update after it (``l_i`` is not read by the dot);
- ``maskadd``: the band's mask as the tutorial adds it, ``qk * c + where(mask, 0, -1e6)``, instead
  of ``where(mask, qk * c, -inf)``;
- ``bounds``: the unmasked loop's bound without the clamp at ``S // BN`` (``(pid_m * BM) // BN``;
  right where ``BN`` divides ``BM``, as in every config timed here);
- ``band``: the band with the tutorial's constant trip count ``BM // BN`` (4D descriptors read
  zeros past S, and the causal mask hides them);
- ``accdot``: ``acc = tl.dot(p, v, acc * alpha)`` (the tutorial's accumulate form);
- ``all``: every one of these.
Kernel time in CUDA graphs, medians of 5 interleaved rounds, TFLOP/s.
"""

import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from explore_attention_order_h100 import tutorial_at
from explore_attention_rank_h100 import _load, _store, descriptors


@triton.jit
def _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, pid_m, n, H, S, qk_scale,
          BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr, ORDER: tl.constexpr,
          MASKADD: tl.constexpr, ACCDOT: tl.constexpr):
    DT = q.dtype
    k = _load(k_desc, pid_z, pid_h, n * BN, H, S, 4, BN, D).T
    qk = tl.dot(q, k)
    if MASKED:
        keep = (n * BN + tl.arange(0, BN))[None, :] <= (pid_m * BM + tl.arange(0, BM))[:, None]
        if MASKADD:
            s = qk * qk_scale + tl.where(keep, 0, -1.0e6)
        else:
            s = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    sum_n = tl.sum(p, axis=1)
    if not ORDER:
        l_i = l_i * alpha + sum_n
    v = _load(v_desc, pid_z, pid_h, n * BN, H, S, 4, BN, D)
    if ACCDOT:
        acc = tl.dot(p.to(DT), v, acc * alpha[:, None])
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(DT), v)
    if ORDER:
        l_i = l_i * alpha + sum_n
    return acc, l_i, m_new


@triton.jit
def morph_kernel(q_desc, k_desc, v_desc, o_desc, B, H, S, scale,
                 BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, ORDER: tl.constexpr, MASKADD: tl.constexpr,
                 BOUNDS: tl.constexpr, BAND: tl.constexpr, ACCDOT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_z = tl.program_id(1)
    pid_h = tl.program_id(2)
    qk_scale = scale * 1.4426950408889634
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    q = _load(q_desc, pid_z, pid_h, pid_m * BM, H, S, 4, BM, D)
    if BOUNDS:
        split = (pid_m * BM) // BN
    else:
        split = min(S // BN, (pid_m * BM + 1) // BN)
    if BAND:
        end = split + BM // BN
    else:
        end = min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))
    for n in range(0, split):
        acc, l_i, m_i = _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, pid_m, n, H, S, qk_scale,
                              BM, BN, D, False, ORDER, MASKADD, ACCDOT)
    for n in range(split, end):
        acc, l_i, m_i = _step(acc, l_i, m_i, q, k_desc, v_desc, pid_z, pid_h, pid_m, n, H, S, qk_scale,
                              BM, BN, D, True, ORDER, MASKADD, ACCDOT)
    _store(o_desc, pid_z, pid_h, pid_m * BM, H, S, (acc / l_i[:, None]).to(q_desc.dtype), 4, BM, D)


FLAGS = ("ORDER", "MASKADD", "BOUNDS", "BAND", "ACCDOT")
VARIANTS = {"base": (), "order": ("ORDER",), "maskadd": ("MASKADD",), "bounds": ("BOUNDS",), "band": ("BAND",),
            "accdot": ("ACCDOT",), "all": FLAGS, "all_noband": ("ORDER", "MASKADD", "BOUNDS", "ACCDOT")}


REGS = {}  # flags -> registers per thread of the last compile


def variant(flags, cfg, q, k, v, scale):
    bm, bn, w, st = cfg
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    descs = [descriptors(q, 4, bm, d), descriptors(k, 4, bn, d), descriptors(v, 4, bn, d), descriptors(o, 4, bm, d)]
    grid = (triton.cdiv(s, bm), b, h)

    def run():
        REGS[flags] = morph_kernel[grid](*descs, b, h, s, scale, BM=bm, BN=bn, D=d, **{f: f in flags for f in FLAGS},
                           num_warps=w, num_stages=st).n_regs
        return o

    return run


SHAPES = [(1024, 64, (64, 64, 4, 2)), (1024, 128, (64, 64, 4, 3)), (1024, 128, (128, 64, 4, 2)),
          (2048, 64, (64, 64, 4, 2)), (4096, 128, (128, 64, 4, 2))]


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "TFLOP/s from CUDA graphs, median of 5 interleaved rounds", flush=True)
    for s, d, cfg in SHAPES:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / 2
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        fns = {name: variant(flags, cfg, q, k, v, scale) for name, flags in VARIANTS.items()}
        fns["tutorial"] = tutorial_at(cfg, q, k, v, True, scale)
        errs = {n: (fn().float() - expected.float()).abs().max().item() for n, fn in fns.items()}
        times = {n: [] for n in fns}
        for _ in range(5):
            for n, fn in fns.items():
                times[n].append(triton.testing.do_bench_cudagraph(fn, rep=40))
        med = {n: statistics.median(t) for n, t in times.items()}
        text = "  ".join(f"{n} {flops / t / 1e9:6.1f}" for n, t in med.items())
        print(f"S={s:<6d} D={d:<4d} {cfg}: {text}  tutorial/base x{med['base'] / med['tutorial']:.3f}  "
              f"max err {max(errs.values()):.1e}", flush=True)
        print("    registers: " + "  ".join(f"{n} {REGS[f]}" for n, f in VARIANTS.items()), flush=True)


if __name__ == "__main__":
    main()
