"""Tiles that are not powers of two, as pieces (issue 12), H100.

At the wave-quantized square sizes cuBLAS runs tiles that are not powers of two, chosen so that
the tiles fill the 132 SMs' waves (``explore_cublas_kernels_h100.log``: 192x96 at 1536, 192x128 at
1664, 320x128 at 2176 and 3200, 192x192 at 2944 and 3072, 128x96 at 1152). Triton's tiles are
powers of two, but one program can hold a tile of ``(BM0 + BM1) x (BN0 + BN1)`` as up to four
power-of-two accumulators: each K step loads ``a`` as ``BM0`` and ``BM1`` rows and ``b`` as
``BN0`` and ``BN1`` columns through TMA descriptors of those block shapes and runs a dot per
pair. ``pieces_kernel`` is matmul_fast's flat grouped TMA kernel (row-major a and b) written that
way; ``BM1 = 0`` or ``BN1 = 0`` drops a piece. This times it at each size against
``generated/matmul_fast.py`` (its own autotuner) and cuBLAS in the same run, kernel time from CUDA
graphs, medians of 5 interleaved rounds. ``python explore_pieces_h100.py [SIZE ...]``.
"""

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

import os  # noqa: E402

os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-explore-"))

from tilegen.runner import load_module  # noqa: E402


@triton.jit
def pieces_kernel(a0_desc, a1_desc, b0_desc, b1_desc, c00_desc, c01_desc, c10_desc, c11_desc, M, N, K,
                  BM0: tl.constexpr, BM1: tl.constexpr, BN0: tl.constexpr, BN1: tl.constexpr, BK: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    """c = a @ b for one (BM0 + BM1) x (BN0 + BN1) tile per program, in grouped order."""
    BM: tl.constexpr = BM0 + BM1
    BN: tl.constexpr = BN0 + BN1
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_SIZE_M * num_n
    first_m = (pid // group) * GROUP_SIZE_M
    size_m = min(num_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    m0 = pid_m * BM
    n0 = pid_n * BN
    T = a0_desc.dtype
    acc00 = tl.zeros((BM0, BN0), dtype=tl.float32)
    if BN1 > 0:
        acc01 = tl.zeros((BM0, BN1), dtype=tl.float32)
    if BM1 > 0:
        acc10 = tl.zeros((BM1, BN0), dtype=tl.float32)
        if BN1 > 0:
            acc11 = tl.zeros((BM1, BN1), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a0 = a0_desc.load([m0, k * BK])
        b0 = b0_desc.load([k * BK, n0])
        acc00 = tl.dot(a0, b0, acc00)
        if BN1 > 0:
            b1 = b1_desc.load([k * BK, n0 + BN0])
            acc01 = tl.dot(a0, b1, acc01)
        if BM1 > 0:
            a1 = a1_desc.load([m0 + BM0, k * BK])
            acc10 = tl.dot(a1, b0, acc10)
            if BN1 > 0:
                acc11 = tl.dot(a1, b1, acc11)
    c00_desc.store([m0, n0], acc00.to(T))
    if BN1 > 0:
        c01_desc.store([m0, n0 + BN0], acc01.to(T))
    if BM1 > 0:
        c10_desc.store([m0 + BM0, n0], acc10.to(T))
        if BN1 > 0:
            c11_desc.store([m0 + BM0, n0 + BN0], acc11.to(T))


def pieces(a, b, tile, bk=64, warps=8, stages=3, group=8):
    """``a @ b`` through pieces_kernel; ``tile`` = (BM0, BM1, BN0, BN1)."""
    bm0, bm1, bn0, bn1 = tile
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)

    def desc(t, block):  # a dummy block where the piece is absent (the kernel never reads it)
        return TensorDescriptor.from_tensor(t, [max(block[0], 16), max(block[1], 16)])

    descs = [desc(a, [bm0, bk]), desc(a, [bm1, bk]), desc(b, [bk, bn0]), desc(b, [bk, bn1]),
             desc(c, [bm0, bn0]), desc(c, [bm0, bn1]), desc(c, [bm1, bn0]), desc(c, [bm1, bn1])]
    grid = (triton.cdiv(m, bm0 + bm1) * triton.cdiv(n, bn0 + bn1),)

    def run():
        pieces_kernel[grid](*descs, m, n, k, BM0=bm0, BM1=bm1, BN0=bn0, BN1=bn1, BK=bk, GROUP_SIZE_M=group,
                            num_warps=warps, num_stages=stages)
        return c

    return run


#: size -> the piece tiles to try, (BM0, BM1, BN0, BN1, warps, stages)
CASES = {
    1152: [(128, 0, 64, 32, 4, 4), (128, 0, 64, 32, 8, 4)],
    1536: [(128, 64, 64, 32, 8, 4), (128, 64, 128, 0, 8, 4)],
    1664: [(128, 64, 128, 0, 8, 4), (128, 64, 128, 0, 8, 3)],
    2176: [(256, 64, 128, 0, 8, 3), (128, 64, 128, 0, 8, 4)],
    2944: [(128, 64, 128, 64, 8, 3), (128, 64, 128, 0, 8, 4)],
    3072: [(128, 64, 128, 64, 8, 3), (128, 64, 128, 0, 8, 4)],
    3200: [(256, 64, 128, 0, 8, 3), (128, 64, 128, 0, 8, 4)],
    4096: [(128, 0, 256, 0, 8, 3)],
}


def main(sizes) -> None:
    fast = load_module(ROOT / "generated" / "matmul_fast.py")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; f16 "
          "row-major; TFLOP/s from CUDA graphs, median of 5 interleaved rounds; tile = BM0+BM1 x BN0+BN1",
          flush=True)
    for size in sizes:
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        expected = (a.float() @ b.float())
        flops = 2 * size**3
        fns = {"cuBLAS": lambda a=a, b=b: torch.mm(a, b), "matmul_fast": lambda a=a, b=b: fast.matmul_fast(a, b)}
        for bm0, bm1, bn0, bn1, w, s in CASES[size]:
            fns[f"{bm0}+{bm1}x{bn0}+{bn1} w{w} s{s}"] = pieces(a, b, (bm0, bm1, bn0, bn1), warps=w, stages=s)
        errs = {}
        for name in list(fns):
            try:
                errs[name] = (fns[name]().float() - expected).abs().max().item()
            except Exception as exc:  # a config that does not fit is reported, not timed
                print(f"  {size} {name}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                del fns[name]
        times = {name: [] for name in fns}
        for _ in range(5):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench_cudagraph(fn, rep=40))
        med = {name: statistics.median(t) for name, t in times.items()}
        text = "  ".join(f"{name} {flops / t / 1e9:6.1f} (x{med['cuBLAS'] / t:.3f}, err {errs[name]:.2f})"
                         for name, t in med.items())
        print(f"{size}: {text}", flush=True)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or list(CASES))
