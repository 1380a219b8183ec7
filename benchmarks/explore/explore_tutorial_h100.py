"""Why the generated tutorial-03 kernel runs faster than the hand-written seed kernel with the same
config (issue 5, target 1): kernel time alone (CUDA graphs) of the hand-written
``tests/reference/matmul_tutorial.matmul_kernel``, of the same kernel with only its K loop
rewritten as the generated one writes it (``for k in range(0, tl.cdiv(K, BLOCK_SIZE_K))``
instead of ``for k in range(0, K, BLOCK_SIZE_K)``), of the same kernel with only its pointer
sums written as the generated one writes them, and of the generated kernel.

``python benchmarks/explore/explore_tutorial_h100.py``.
"""

import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.reference import matmul_tutorial as ref  # noqa: E402
from tilegen.runner import load_module  # noqa: E402


@triton.jit
def counted_loop(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                 GROUP_SIZE_M: tl.constexpr):
    """The hand-written kernel's body with the generated kernel's K loop; nothing else changed."""
    pid = tl.program_id(axis=0)
    n_blocks_m = (M + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M
    n_blocks_n = (N + BLOCK_SIZE_N - 1) // BLOCK_SIZE_N
    n_output_blocks_in_group = GROUP_SIZE_M * n_blocks_n
    group_id = pid // n_output_blocks_in_group
    first_m_block_in_group = group_id * GROUP_SIZE_M
    group_size_m = min(n_blocks_m - first_m_block_in_group, GROUP_SIZE_M)
    block_m = first_m_block_in_group + (pid % group_size_m)
    block_n = (pid % n_output_blocks_in_group) // group_size_m
    m_start = block_m * BLOCK_SIZE_M
    n_start = block_n * BLOCK_SIZE_N
    m_offsets_a = (m_start + tl.arange(0, BLOCK_SIZE_M))[:, None]
    n_offsets_b = (n_start + tl.arange(0, BLOCK_SIZE_N))[None, :]
    k_offsets = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (stride_am * m_offsets_a + stride_ak * k_offsets[None, :])
    b_ptrs = b_ptr + (stride_bk * k_offsets[:, None] + stride_bn * n_offsets_b)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):  # noqa: B007 - the tutorial kernel's loop, kept as written
        a = tl.load(a_ptrs, mask=m_offsets_a < M, other=0.0)
        b = tl.load(b_ptrs, mask=n_offsets_b < N, other=0.0)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    m_offsets_c = (m_start + tl.arange(0, BLOCK_SIZE_M))[:, None]
    n_offsets_c = (n_start + tl.arange(0, BLOCK_SIZE_N))[None, :]
    c_ptrs = c_ptr + stride_cm * m_offsets_c + stride_cn * n_offsets_c
    mask = (m_offsets_c < M) & (n_offsets_c < N)
    tl.store(c_ptrs, accumulator.to(tl.float16), mask=mask)


@triton.jit
def pointer_terms(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                 GROUP_SIZE_M: tl.constexpr):
    """The hand-written kernel's body with the generated kernel's pointer sums: each term added to
    the pointer in turn (``a_ptr + rows * stride + cols * stride``) instead of the offsets summed first."""
    pid = tl.program_id(axis=0)
    n_blocks_m = (M + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M
    n_blocks_n = (N + BLOCK_SIZE_N - 1) // BLOCK_SIZE_N
    n_output_blocks_in_group = GROUP_SIZE_M * n_blocks_n
    group_id = pid // n_output_blocks_in_group
    first_m_block_in_group = group_id * GROUP_SIZE_M
    group_size_m = min(n_blocks_m - first_m_block_in_group, GROUP_SIZE_M)
    block_m = first_m_block_in_group + (pid % group_size_m)
    block_n = (pid % n_output_blocks_in_group) // group_size_m
    m_start = block_m * BLOCK_SIZE_M
    n_start = block_n * BLOCK_SIZE_N
    m_offsets_a = (m_start + tl.arange(0, BLOCK_SIZE_M))[:, None]
    n_offsets_b = (n_start + tl.arange(0, BLOCK_SIZE_N))[None, :]
    k_offsets = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + m_offsets_a * stride_am + k_offsets[None, :] * stride_ak
    b_ptrs = b_ptr + k_offsets[:, None] * stride_bk + n_offsets_b * stride_bn
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_SIZE_K):  # noqa: B007 - the tutorial kernel's loop, kept as written
        a = tl.load(a_ptrs, mask=m_offsets_a < M, other=0.0)
        b = tl.load(b_ptrs, mask=n_offsets_b < N, other=0.0)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    m_offsets_c = (m_start + tl.arange(0, BLOCK_SIZE_M))[:, None]
    n_offsets_c = (n_start + tl.arange(0, BLOCK_SIZE_N))[None, :]
    c_ptrs = c_ptr + stride_cm * m_offsets_c + stride_cn * n_offsets_c
    mask = (m_offsets_c < M) & (n_offsets_c < N)
    tl.store(c_ptrs, accumulator.to(tl.float16), mask=mask)


gen = load_module(ROOT / "generated" / "matmul_tutorial.py")
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
for n, (bm, bn, bk, warps, stages) in [(1024, (64, 128, 32, 4, 4)), (4096, (128, 128, 32, 4, 4)),
                                       (4096, (256, 128, 32, 8, 3))]:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
    strides = (n, 1, n, 1, n, 1)
    meta = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, "num_warps": warps,
            "num_stages": stages}
    fns = {
        "hand-written": lambda: ref.matmul_kernel[grid](a, b, c, n, n, n, *strides, ACTIVATION="none", **meta),
        "hand-written, counted K loop": lambda: counted_loop[grid](a, b, c, n, n, n, *strides, **meta),
        "hand-written, pointer terms": lambda: pointer_terms[grid](a, b, c, n, n, n, *strides, **meta),
        "generated": lambda: gen.matmul_tutorial_kernel.fn[grid](a, b, c, n, n, n, *strides, ACTIVATION="none",
                                                                  INT64_OFFSETS=False, **meta),
    }
    times = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            fn()
            times[name].append(triton.testing.do_bench_cudagraph(fn))
    base = statistics.median(times["hand-written"])
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{n}^3 {(bm, bn, bk, warps, stages)} {name:30s} {ms * 1e3:8.1f} us  hand-written / this {base / ms:.3f}",
              flush=True)
