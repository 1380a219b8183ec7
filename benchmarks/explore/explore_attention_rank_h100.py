"""Does the rank of the attention specs' TMA descriptors matter? (issue 11), H100.

``generated/attention*.py`` reads q, k, v and writes o through 4D descriptors over ``[B, H, S, D]``
with blocks ``[1, 1, BM, D]`` (each index axis a block of 1), then reshapes the tile to 2D. Tutorial
06 uses 2D descriptors over ``[Z * H * N_CTX, HEAD_DIM]``. At one config the generated causal kernel
trails the tutorial by 2-3% at S = 1024 (a run of the constant-trip band study, since removed). This times, at
one config each, hand copies of the generated causal kernel that differ only in how a tile is
addressed:
- ``d4``: as generated (4D descriptors, blocks ``[1, 1, BM, D]``);
- ``d3``: 3D descriptors over ``[B * H, S, D]`` (B and H merged: a contiguous tensor's strides allow
  it), blocks ``[1, BM, D]``; the tail past S is still masked by the descriptor's bounds;
- ``d2``: 2D descriptors over ``[B * H * S, D]``, blocks ``[BM, D]`` (the tutorial's; only right where
  BM and BN divide S, else a tile reads or writes the next head's rows);
- ``d4hz``: ``d4`` with the tutorial's grid order (program axis 1 enumerates (z, h), h fastest);
and tutorial 06 at the same config. Kernel time in CUDA graphs, medians of 5 interleaved rounds.
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from explore_attention_order_h100 import at, tutorial_at  # noqa: E402

from tilegen.runner import load_module  # noqa: E402


@triton.jit
def _load(desc, z, h, row, H, S, RANK: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr):
    if RANK == 4:
        x = desc.load([z, h, row, 0]).reshape(ROWS, D)
    elif RANK == 3:
        x = desc.load([z * H + h, row, 0]).reshape(ROWS, D)
    else:
        x = desc.load([(z * H + h) * S + row, 0])
    return x


@triton.jit
def _store(desc, z, h, row, H, S, x, RANK: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr):
    if RANK == 4:
        desc.store([z, h, row, 0], x.reshape(1, 1, ROWS, D))
    elif RANK == 3:
        desc.store([z * H + h, row, 0], x.reshape(1, ROWS, D))
    else:
        desc.store([(z * H + h) * S + row, 0], x)


@triton.jit
def causal_kernel(q_desc, k_desc, v_desc, o_desc, B, H, S, scale,
                  BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, RANK: tl.constexpr, HZ: tl.constexpr,
                  CAUSAL: tl.constexpr):
    """The descriptor kernel of generated/attention_causal.py (scale >= 0), addressed as RANK says;
    without CAUSAL, that of generated/attention.py with T = S."""
    DT = q_desc.dtype
    pid_m = tl.program_id(0)
    if HZ:
        pid_z = tl.program_id(1) // H
        pid_h = tl.program_id(1) % H
    else:
        pid_z = tl.program_id(1)
        pid_h = tl.program_id(2)
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    q = _load(q_desc, pid_z, pid_h, pid_m * BM, H, S, RANK, BM, D)
    if CAUSAL:
        split = min(S // BN, (pid_m * BM + 1) // BN)
        end = min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))
    else:
        split = S // BN
        end = tl.cdiv(S, BN)
    for n in range(0, split):
        k = _load(k_desc, pid_z, pid_h, n * BN, H, S, RANK, BN, D).T
        s_unscaled = tl.dot(q, k)
        max_n = tl.max(s_unscaled, axis=1) * (scale * 1.4426950408889634)
        m_new = tl.maximum(m_i, max_n)
        p = tl.exp2((s_unscaled * (scale * 1.4426950408889634)) - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        sum_n = tl.sum(p, axis=1)
        l_i = l_i * alpha + sum_n
        v = _load(v_desc, pid_z, pid_h, n * BN, H, S, RANK, BN, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(DT), v)
        m_i = m_new
    for n in range(split, end):
        offs_n = n * BN + tl.arange(0, BN)
        k = _load(k_desc, pid_z, pid_h, n * BN, H, S, RANK, BN, D).T
        if CAUSAL:
            keep = offs_n[None, :] <= (pid_m * BM + tl.arange(0, BM))[:, None]
        else:
            keep = offs_n[None, :] < S
        s = tl.where(keep,
                     tl.dot(q, k) * (scale * 1.4426950408889634), float("-inf"))
        max_n = tl.max(s, axis=1)
        m_new = tl.maximum(m_i, max_n)
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        sum_n = tl.sum(p, axis=1)
        l_i = l_i * alpha + sum_n
        v = _load(v_desc, pid_z, pid_h, n * BN, H, S, RANK, BN, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(DT), v)
        m_i = m_new
    _store(o_desc, pid_z, pid_h, pid_m * BM, H, S, (acc / l_i[:, None]).to(DT), RANK, BM, D)


def descriptors(t, rank, rows, d):
    b, h, s, _ = t.shape
    if rank == 4:
        return TensorDescriptor(t, [b, h, s, d], list(t.stride()), [1, 1, rows, d])
    if rank == 3:
        return TensorDescriptor(t, [b * h, s, d], [s * d, d, 1], [1, rows, d])
    return TensorDescriptor(t, [b * h * s, d], [d, 1], [rows, d])


def variant(rank, hz, cfg, q, k, v, scale, causal=True):
    bm, bn, w, st = cfg
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    descs = [descriptors(q, rank, bm, d), descriptors(k, rank, bn, d), descriptors(v, rank, bn, d),
             descriptors(o, rank, bm, d)]
    grid = (triton.cdiv(s, bm), b * h, 1) if hz else (triton.cdiv(s, bm), b, h)

    def run():
        causal_kernel[grid](*descs, b, h, s, scale, BM=bm, BN=bn, D=d, RANK=rank, HZ=hz, CAUSAL=causal,
                            num_warps=w, num_stages=st)
        return o

    return run


SHAPES = [(1024, 64, True, (64, 64, 4, 2)), (1024, 64, True, (128, 64, 4, 2)), (1024, 128, True, (64, 64, 4, 3)),
          (1024, 128, True, (128, 64, 4, 2)), (2048, 64, True, (64, 64, 4, 2)), (4096, 128, True, (128, 64, 4, 2)),
          (1024, 64, False, (128, 64, 4, 3)), (4096, 128, False, (128, 128, 8, 2))]


def main() -> None:
    mods = {True: load_module(ROOT / "generated" / "attention_causal.py"),
            False: load_module(ROOT / "generated" / "attention.py")}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "TFLOP/s from CUDA graphs, median of 5 interleaved rounds", flush=True)
    for s, d, causal, cfg in SHAPES:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        name = "attention_causal" if causal else "attention"
        key = (q.device, s, d, torch.float16) if causal else (q.device, s, s, d, torch.float16)
        fns = {"gen": at(mods[causal], name, key, cfg, q, k, v, scale)}
        for label, rank, hz in (("d4", 4, False), ("d3", 3, False), ("d2", 2, False), ("d4hz", 4, True),
                                ("d3hz", 3, True)):
            fns[label] = variant(rank, hz, cfg, q, k, v, scale, causal)
        fns["tutorial"] = tutorial_at(cfg, q, k, v, causal, scale)
        errs = {n: (fn().float() - expected.float()).abs().max().item() for n, fn in fns.items()}
        times = {n: [] for n in fns}
        for _ in range(5):
            for n, fn in fns.items():
                times[n].append(triton.testing.do_bench_cudagraph(fn, rep=40))
        med = {n: statistics.median(t) for n, t in times.items()}
        text = "  ".join(f"{n} {flops / t / 1e9:6.1f}" for n, t in med.items())
        print(f"S={s:<6d} D={d:<4d} causal={causal!s:5} {cfg}: {text}  d3/d4 x{med['d4'] / med['d3']:.3f}  "
              f"d2/d4 x{med['d4'] / med['d2']:.3f}  tutorial/d4 x{med['d4'] / med['tutorial']:.3f}  "
              f"max err {max(errs.values()):.1e}", flush=True)


if __name__ == "__main__":
    main()
