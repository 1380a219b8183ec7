"""Warp specialization for the attention specs' loop (issue 11), H100.

Tutorial 06 with ``warp_specialize=True`` (in-kernel descriptors on Hopper) ran 1.07-1.08x its
default at D = 128 and 0.87x at D = 64 (``explore_attention_configs_h100.log``). Does the same
hold for the generated kernel? A hand copy of the generated descriptor kernel
(``explore_attention_rank_h100.causal_kernel``'s body, 4D descriptors, causal or not) runs:
- ``host``: host descriptors, no warp specialization (as generated);
- ``dev``: in-kernel descriptors (``tl.make_tensor_descriptor``), no warp specialization;
- ``dev_ws``: in-kernel descriptors, both loops ``tl.range(..., warp_specialize=True)``;
- ``host_ws``: host descriptors with warp specialization (the tutorial avoids this on Hopper);
at each config of ``CONFIGS``, with tutorial 06 (its own autotuner, ``warp_specialize`` False
and True) for reference. Kernel time from CUDA graphs, medians of 5 interleaved rounds.
"""

import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from explore_attention_rank_h100 import descriptors

from tests.reference import attention as ref_attention


@triton.jit
def _desc(x, B, H, S, ROWS: tl.constexpr, D: tl.constexpr):
    if isinstance(x, tl.tensor_descriptor):
        return x
    else:
        return tl.make_tensor_descriptor(x, [B, H, S, D], [H * S * D, S * D, D, 1], [1, 1, ROWS, D])


@triton.jit
def ws_kernel(q_in, k_in, v_in, o_in, B, H, S, scale,
              BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, WS: tl.constexpr):
    q_desc = _desc(q_in, B, H, S, BM, D)
    k_desc = _desc(k_in, B, H, S, BN, D)
    v_desc = _desc(v_in, B, H, S, BN, D)
    o_desc = _desc(o_in, B, H, S, BM, D)
    DT = q_desc.dtype
    pid_m = tl.program_id(0)
    pid_z = tl.program_id(1)
    pid_h = tl.program_id(2)
    c = scale * 1.4426950408889634
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    q = q_desc.load([pid_z, pid_h, pid_m * BM, 0]).reshape(BM, D)
    if CAUSAL:
        split = min(S // BN, (pid_m * BM + 1) // BN)
        end = min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))
    else:
        split = S // BN
        end = tl.cdiv(S, BN)
    for n in tl.range(0, split, warp_specialize=WS):
        k = k_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, D).T
        s_unscaled = tl.dot(q, k)
        m_new = tl.maximum(m_i, tl.max(s_unscaled, axis=1) * c)
        p = tl.exp2(s_unscaled * c - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = v_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(DT), v)
        m_i = m_new
    for n in tl.range(split, end, warp_specialize=WS):
        offs_n = n * BN + tl.arange(0, BN)
        k = k_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, D).T
        if CAUSAL:
            keep = offs_n[None, :] <= (pid_m * BM + tl.arange(0, BM))[:, None]
        else:
            keep = offs_n[None, :] < S
        s = tl.where(keep, tl.dot(q, k) * c, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = v_desc.load([pid_z, pid_h, n * BN, 0]).reshape(BN, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(DT), v)
        m_i = m_new
    o_desc.store([pid_z, pid_h, pid_m * BM, 0], (acc / l_i[:, None]).to(DT).reshape(1, 1, BM, D))


def variant(dev, ws, cfg, q, k, v, scale, causal):
    bm, bn, w, st = cfg
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    if dev:
        args = [q, k, v, o]
    else:
        args = [descriptors(q, 4, bm, d), descriptors(k, 4, bn, d), descriptors(v, 4, bn, d),
                descriptors(o, 4, bm, d)]
    grid = (triton.cdiv(s, bm), b, h)

    def run():
        ws_kernel[grid](*args, b, h, s, scale, BM=bm, BN=bn, D=d, CAUSAL=causal, WS=ws, num_warps=w, num_stages=st)
        return o

    return run


CONFIGS = {64: [(64, 64, 4, 2), (64, 128, 4, 2)], 128: [(128, 64, 4, 2), (128, 128, 8, 2)]}
SHAPES = [(4096, 128, False), (16384, 128, False), (4096, 128, True), (4096, 64, False), (1024, 64, True)]


def main() -> None:
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "TFLOP/s from CUDA graphs, median of 5 interleaved rounds", flush=True)
    for s, d, causal in SHAPES:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        tut = {f"tutorial_ws={ws}": (lambda ws=ws: ref_attention.attention(q, k, v, causal, scale, ws))
               for ws in (False, True)}
        for cfg in CONFIGS[d]:
            fns = {name: variant(dev, ws, cfg, q, k, v, scale, causal)
                   for name, dev, ws in (("host", False, False), ("dev", True, False), ("dev_ws", True, True),
                                         ("host_ws", False, True))}
            errs = {}
            for n in list(fns):
                try:
                    errs[n] = (fns[n]().float() - expected.float()).abs().max().item()
                except Exception as exc:
                    print(f"  {n} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                    del fns[n]
            fns |= tut
            times = {n: [] for n in fns}
            for _ in range(5):
                for n, fn in fns.items():
                    times[n].append(triton.testing.do_bench_cudagraph(fn, rep=40))
            med = {n: statistics.median(t) for n, t in times.items()}
            text = "  ".join(f"{n} {flops / t / 1e9:6.1f}" for n, t in med.items())
            ws = f"dev_ws/host x{med['host'] / med['dev_ws']:.3f}" if "dev_ws" in med else ""
            print(f"S={s:<6d} D={d:<4d} causal={causal!s:5} {cfg}: {text}  {ws}  "
                  f"max err {max(errs.values()):.1e}", flush=True)


if __name__ == "__main__":
    main()
