"""Probe (issue 12; run from the repository root: python benchmarks/explore/explore_tail_h100.py, or on the CPU
with TRITON_INTERPRET=1 for a correctness check): wave quantization closed by splitting the last partial wave's tiles.

A flat grouped TMA matmul (matmul_fast's kernel) in which the T % NSM tiles of the last partial
wave are each computed as Q smaller sub-tiles by separate programs (QM x QN of them, BM/QM x BN/QN
each) in the same launch: no workspace, no atomics, deterministic. Compares against the plain
flat kernel with the same config, matmul_fast's launcher and cuBLAS, CUDA graphs.
"""
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile(pid, num_pid_m, num_pid_n, GROUP: tl.constexpr):
    num_pid_in_group = GROUP * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP
    group_size_m = min(num_pid_m - first_pid_m, GROUP)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _mm(a_desc, b_desc, c_desc, off_m, off_n, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, k * BK])
        b = b_desc.load([k * BK, off_n])
        acc += tl.dot(a, b)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def tail_kernel(a_desc, b_desc, c_desc, as_desc, bs_desc, cs_desc, M, N, K, F,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                QM: tl.constexpr, QN: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    # without a split (QM * QN == 1, a constexpr) only the whole-tile path is compiled: with both
    # paths at one block shape Triton allocates each its own shared memory, twice the flat kernel's
    if QM * QN == 1 or pid < F:
        pid_m, pid_n = _tile(pid, num_pid_m, num_pid_n, GROUP)
        _mm(a_desc, b_desc, c_desc, pid_m * BM, pid_n * BN, K, BM, BN, BK)
    else:
        t = pid - F
        pid_m, pid_n = _tile(F + t // (QM * QN), num_pid_m, num_pid_n, GROUP)
        sub = t % (QM * QN)
        _mm(as_desc, bs_desc, cs_desc, pid_m * BM + (sub // QN) * (BM // QM),
            pid_n * BN + (sub % QN) * (BN // QN), K, BM // QM, BN // QN, BK)


def tail_split_fixed(tiles, nsm):
    """(F, 2, 2) where the last partial wave's tiles, four sub-tiles each, take at most two rounds
    of programs; (tiles, 1, 1) otherwise: the rule a kernel can apply with a constexpr split."""
    rest = tiles % nsm if tiles > nsm else 0
    return (tiles - rest, 2, 2) if rest and 4 * rest <= 2 * nsm else (tiles, 1, 1)


def tail_split(tiles, nsm, bm, bn, q_max=4):
    """(F, QM, QN): the tiles run whole (the first F), and the split of each of the rest."""
    rest = tiles % nsm if tiles > nsm else 0
    q = 1
    while rest and q * 2 <= q_max and rest * q * 2 <= nsm:
        q *= 2
    if q == 1:
        return tiles, 1, 1
    qm, qn = {2: ((2, 1) if bm >= bn else (1, 2)), 4: (2, 2)}[q]
    return tiles - rest, qm, qn


def run(a, b, c, cfg, nsm, q_max=4):
    bm, bn, bk, w, s = cfg
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    F, qm, qn = tail_split_fixed(tiles, nsm) if q_max == "fixed" else tail_split(tiles, nsm, bm, bn, q_max)
    grid = (F + (tiles - F) * qm * qn,)
    descs = [TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
             TensorDescriptor.from_tensor(c, [bm, bn]),
             TensorDescriptor.from_tensor(a, [bm // qm, bk]), TensorDescriptor.from_tensor(b, [bk, bn // qn]),
             TensorDescriptor.from_tensor(c, [bm // qm, bn // qn])]
    kw = {} if os.environ.get("TRITON_INTERPRET") else {"num_warps": w, "num_stages": s}
    tail_kernel[grid](*descs, M, N, K, F, BM=bm, BN=bn, BK=bk, GROUP=8, QM=qm, QN=qn, **kw)
    return (F, qm, qn, grid[0])


def check_cpu():
    torch.manual_seed(0)
    for M, N, K, cfg, nsm in [(40, 72, 24, (16, 16, 16, 4, 3), 13), (64, 48, 40, (32, 16, 16, 4, 3), 5),
                              (36, 68, 20, (16, 32, 16, 4, 3), 7)]:
        a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
        info = run(a, b, c, cfg, nsm)
        err = (c - a @ b).abs().max().item()
        print("cpu", M, N, K, cfg, nsm, info, f"err {err:.2e}")
        assert err < 1e-3 and info[1] * info[2] > 1


def main():
    if not torch.cuda.is_available():
        return check_cpu()
    sys.path.insert(0, os.getcwd())
    from tilegen.runner import load_module
    fast = load_module("generated/matmul_fast.py").matmul_fast
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "SMs", nsm, flush=True)
    def bench(f):
        return triton.testing.do_bench_cudagraph(f, rep=100)
    cfgs = [(128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4)]
    cfgs = [cfgs[int(i)] for i in os.environ.get("CONFIGS", "0,1,2,3,4").split(",")]
    sizes = [int(x) for x in os.environ.get("SIZES", "1152,1536,1664,2176,2944,3072,3200,3840,2048,4096").split(",")]
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        c = torch.empty(n, n, device="cuda", dtype=torch.float16)
        ref = a.float() @ b.float()
        fast(a, b)
        t_cublas = bench(lambda: torch.matmul(a, b))
        t_fast = bench(lambda: fast(a, b))
        line = [f"{n}: cuBLAS {2*n**3/t_cublas*1e-9:.0f} TF/s  matmul_fast {t_cublas/t_fast:.3f}x"]
        best = (0, None)
        for cfg in cfgs:
            res = []
            for q_max in os.environ.get("MODES", "1,4").split(","):
                q_max = q_max if q_max == "fixed" else int(q_max)
                info = run(a, b, c, cfg, nsm, q_max)
                err = (c.float() - ref).abs().max().item()
                t = bench(lambda: run(a, b, c, cfg, nsm, q_max))
                r = t_cublas / t
                res.append(f"{r:.3f}" + ("" if err < 1.0 else f"(ERR {err:.2g})"))
                if q_max != 1 and r > best[0]:
                    best = (r, (cfg, info))
            line.append(f"{cfg[:3]}w{cfg[3]}s{cfg[4]} " + " ".join(res) + f" {info}")
        again = t_cublas / bench(lambda: torch.matmul(a, b))
        line.append(f"best tail {best[0]:.3f} {best[1]}; cuBLAS again {again:.3f}")
        print("\n   ".join(line), flush=True)


if __name__ == "__main__":
    main()
