"""Tiled matrix multiplication from seed 000_394da3312a32ff7c (GPU MODE lecture 14 notes,
Examples 3 and 4, and Auto-Tuning).

Follows the seed's ``naive_matmul_k`` and ``grouped_matmul_k``: a 2D grid of
``(cdiv(m, bm), cdiv(n, bn))`` programs, each computing one ``bm x bn`` tile of
``C = A @ B`` in a float32 accumulator (``tl.zeros``) by stepping over K with
``for _ in range(0, k, bk)``, loading one A and one B tile per step,
``acc += tl.dot(a, b)`` and advancing the pointers by ``bk * stride_ak`` /
``bk * stride_bk``; the tile is stored with ``get_2d_mask(rm, rn, m, n)``.
``grouped_matmul_k`` first remaps the program ids with
``tl.swizzle2d(pid_m, pid_n, tl.num_programs(0), tl.num_programs(1), group_sz)``.
The launcher ``matmul`` is the seed's ``matmul``: fp16 output
``torch.empty((m, n))``, strides passed from ``.stride()`` so transposed views
work, ``naive_matmul`` / ``grouped_matmul`` made with ``functools.partial``.
``grouped_autotuned_matmul_k`` is the seed's kernel of that name from the
"Auto-Tuning" section: the same body as ``grouped_matmul_k``;
``AUTOTUNED_CONFIGS`` are its eight configs (``bm``, ``bn``, ``bk``,
``group_sz``, with ``num_stages`` / ``num_warps``), key ``m, n, k``, and
``grouped_autotuned_matmul_k_tuned`` is the kernel wrapped in
``triton.autotune`` with them. ``grouped_autotuned_matmul`` is the seed's
wrapper of that name (fp16 output, the same 2D grid lambda).

Deviations and why:
- The deliberate one: the seed loads the A and B tiles with no mask, so when
  M (or N) is not a multiple of bm (bn) the last tile row (column) reads out
  of bounds. Here A is loaded with ``mask=get_1d_mask(rm, m)[:, None]`` and B
  with ``mask=get_1d_mask(rn, n)[None, :]``, both with ``other=0.0``. Rows and
  columns past the edge then hold zeros; they are never stored anyway. K is
  still unmasked, as in the seed, so K must be a multiple of bk.
- ``tl.dot(a, b, input_precision="ieee")`` replaces the seed's
  ``allow_tf32=False`` (the same meaning in the current Triton API).
- The accumulator is stored as ``acc.to(tl.float16)``; the seed stores the
  fp32 ``acc`` into the fp16 output and relies on the implicit conversion,
  which gives the same values.
- The launcher takes ``bm, bn, bk`` separately (defaults 64) instead of one
  ``bs`` used for all three.
- The seed's ``check_tensors_gpu_ready`` is not called: its contiguity assert
  would reject transposed views, which the stride arguments handle, and its
  GPU check does not apply under the interpreter. ``a.shape[1] == b.shape[0]``
  is still asserted.
- ``grouped_matmul`` binds ``group_sz=8`` by default (the grouped kernel needs
  one; the seed always passes it by hand).
- ``grouped_autotuned_matmul_k`` gets the same changes as the other two
  kernels (M/N load masks, ``input_precision="ieee"``, fp16 cast at the
  store). It is a plain ``@triton.jit`` function and the autotuned variant is
  built from it (``triton.autotune(configs=AUTOTUNED_CONFIGS, key=["m", "n",
  "k"])``) so tests can run one fixed config in the interpreter, which cannot
  time configs. ``grouped_autotuned_matmul`` takes ``config=`` (a dict of
  ``bm``, ``bn``, ``bk``, ``group_sz`` for the plain kernel, ``group_sz``
  defaulting to 8, or ``None`` for the autotuned one) and, with a config,
  asserts ``k % bk == 0``; like ``matmul`` it skips
  ``check_tensors_gpu_ready``.
"""

from functools import partial

import torch
import triton
import triton.language as tl

from .helpers import get_1d_mask, get_1d_offset, get_2d_mask, get_2d_offset


@triton.jit
def naive_matmul_k(
    a_ptr, b_ptr, c_ptr,  # Pointers to input/output matrices
    m, n, k,              # Matrix dimensions: A(m×k), B(k×n), C(m×n)
    stride_am, stride_ak, # Memory strides for matrix A
    stride_bk, stride_bn, # Memory strides for matrix B
    stride_cm, stride_cn, # Memory strides for output matrix C
    bm: tl.constexpr,     # Block size for M dimension
    bn: tl.constexpr,     # Block size for N dimension
    bk: tl.constexpr      # Block size for K dimension
):
    """Compute the ``bm x bn`` tile ``(program_id(0), program_id(1))`` of ``C = A @ B``.

    A and B tiles are masked along M and N (zeros outside); K is not masked,
    so ``k`` must be a multiple of ``bk``. Accumulates in fp32, stores fp16.
    """
    # Get program ID for the current block
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)

    # Calculate offsets for the current block
    rm = get_1d_offset(size=bm, n_prev_chunks=pid_m)  # Offset in M dimension
    rn = get_1d_offset(size=bn, n_prev_chunks=pid_n)  # Offset in N dimension
    rk = get_1d_offset(size=bk, n_prev_chunks=0)      # Initial offset in K dimension

    # Calculate memory offsets for input matrices
    offs_a = a_ptr + get_2d_offset(rm, rk, stride_am, stride_ak)
    offs_b = b_ptr + get_2d_offset(rk, rn, stride_bk, stride_bn)

    # Initialize accumulator for partial results
    acc = tl.zeros((bm, bn), dtype=tl.float32)

    # Main computation loop - iterate over K dimension
    for _ in range(0, k, bk):
        # Load blocks from input matrices (masked along M and N; deviation from the seed)
        a = tl.load(offs_a, mask=get_1d_mask(rm, m)[:, None], other=0.0)
        b = tl.load(offs_b, mask=get_1d_mask(rn, n)[None, :], other=0.0)

        # Compute partial matrix multiplication for current block
        acc += tl.dot(a, b, input_precision="ieee")

        # Update offsets for next iteration
        offs_a += bk * stride_ak
        offs_b += bk * stride_bk

    # Calculate output memory location and mask for boundary conditions
    c = c_ptr + get_2d_offset(rm, rn, stride_cm, stride_cn)
    mask = get_2d_mask(rm, rn, m, n)

    # Store the result
    tl.store(c, acc.to(tl.float16), mask=mask)


@triton.jit
def grouped_matmul_k(
    a_ptr, b_ptr, c_ptr,
    m, n, k,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    bm: tl.constexpr, bn: tl.constexpr, bk: tl.constexpr,
    group_sz: tl.constexpr
):
    """Same as ``naive_matmul_k``, but the program ids are first swizzled in groups of ``group_sz`` rows.

    ``tl.swizzle2d`` maps ``(program_id(0), program_id(1))`` to the tile this
    program computes, so that programs that run close together share A and B
    tiles (better L2 reuse). The result is the same as the naive kernel's.
    """
    # Get block coordinates and grid dimensions
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    num_pid_m, num_pid_n = tl.num_programs(0), tl.num_programs(1)

    # Apply swizzling to optimize memory access pattern
    pid_m, pid_n = tl.swizzle2d(pid_m, pid_n, num_pid_m, num_pid_n, group_sz)

    # Calculate block offsets
    rm = get_1d_offset(size=bm, n_prev_chunks=pid_m)
    rn = get_1d_offset(size=bn, n_prev_chunks=pid_n)
    rk = get_1d_offset(size=bk, n_prev_chunks=0)

    # Calculate memory offsets for input matrices
    offs_a = a_ptr + get_2d_offset(rm, rk, stride_am, stride_ak)
    offs_b = b_ptr + get_2d_offset(rk, rn, stride_bk, stride_bn)

    # Initialize accumulator
    acc = tl.zeros((bm, bn), dtype=tl.float32)

    # Main computation loop (A/B loads masked along M and N; deviation from the seed)
    for _ in range(0, k, bk):
        a = tl.load(offs_a, mask=get_1d_mask(rm, m)[:, None], other=0.0)
        b = tl.load(offs_b, mask=get_1d_mask(rn, n)[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        offs_a += bk * stride_ak
        offs_b += bk * stride_bk

    # Store results
    c = c_ptr + get_2d_offset(rm, rn, stride_cm, stride_cn)
    mask = get_2d_mask(rm, rn, m, n)
    tl.store(c, acc.to(tl.float16), mask=mask)


def matmul(a, b, matmul_k_fn, bm=64, bn=64, bk=64, group_sz=None):
    """``a @ b`` as fp16 ``(m, n)`` computed by ``matmul_k_fn`` (``naive_matmul_k`` or ``grouped_matmul_k``).

    ``a`` is ``(m, k)``, ``b`` is ``(k, n)``; any strides (e.g. transposed
    views) are fine. ``k`` must be a multiple of ``bk``. ``group_sz`` is passed
    only when given (required by ``grouped_matmul_k``).
    """
    # Verify matrix dimensions are compatible
    assert a.shape[1] == b.shape[0], "matrix dims not compatible for matmul"

    # Get matrix dimensions
    (m, k), (_, n) = a.shape, b.shape

    # Initialize output matrix
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)

    # Calculate grid dimensions for kernel launch
    grid = lambda meta: (triton.cdiv(m, meta['bm']), triton.cdiv(n, meta['bn']))

    # Handle optional group size parameter
    group_sz = {} if group_sz is None else {"group_sz": group_sz}

    # Launch kernel
    matmul_k_fn[grid](
        a, b, c,                     # Input/output matrices
        m, n, k,                     # Matrix dimensions
        a.stride(0), a.stride(1),    # Strides for matrix A
        b.stride(0), b.stride(1),    # Strides for matrix B
        c.stride(0), c.stride(1),    # Strides for output matrix
        bm=bm, bn=bn, bk=bk,         # Block sizes
        **group_sz
    )

    return c


naive_matmul = partial(matmul, matmul_k_fn=naive_matmul_k)
grouped_matmul = partial(matmul, matmul_k_fn=grouped_matmul_k, group_sz=8)


# ===== Autotuned Matrix Multiplication Kernel =====
# The seed's eight configs: different block sizes, group size and execution parameters.
AUTOTUNED_CONFIGS = [
    # Different configurations to try, varying block sizes and execution parameters
    triton.Config({'bm': 128, 'bn': 256, 'bk': 64, 'group_sz': 8},
                  num_stages=3, num_warps=8),  # Larger blocks, fewer stages
    triton.Config({'bm': 64, 'bn': 256, 'bk': 32, 'group_sz': 8},
                  num_stages=4, num_warps=4),
    triton.Config({'bm': 128, 'bn': 128, 'bk': 32, 'group_sz': 8},
                  num_stages=4, num_warps=4),
    triton.Config({'bm': 128, 'bn': 64, 'bk': 32, 'group_sz': 8},
                  num_stages=4, num_warps=4),
    triton.Config({'bm': 64, 'bn': 128, 'bk': 32, 'group_sz': 8},
                  num_stages=4, num_warps=4),
    triton.Config({'bm': 128, 'bn': 32, 'bk': 32, 'group_sz': 8},
                  num_stages=4, num_warps=4),
    triton.Config({'bm': 64, 'bn': 32, 'bk': 32, 'group_sz': 8},
                  num_stages=5, num_warps=2),  # Smaller blocks, more stages
    triton.Config({'bm': 32, 'bn': 64, 'bk': 32, 'group_sz': 8},
                  num_stages=5, num_warps=2),
]


@triton.jit
def grouped_autotuned_matmul_k(
    a_ptr, b_ptr, c_ptr,
    m, n, k,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    bm: tl.constexpr, bn: tl.constexpr, bk: tl.constexpr,
    group_sz: tl.constexpr
):
    """
    Autotuned matrix multiplication kernel that tries different configurations
    to find the best performance for given matrix dimensions.

    The configurations vary:
    - Block sizes (bm, bn, bk)
    - Number of pipeline stages
    - Number of warps
    - Group size for memory access optimization

    Same computation as ``grouped_matmul_k``: A/B tiles masked along M and N
    (zeros outside), K unmasked (``k`` must be a multiple of ``bk``), fp32
    accumulator stored as fp16. Plain ``@triton.jit``; the autotuned variant
    is ``grouped_autotuned_matmul_k_tuned``.
    """
    # Get thread block coordinates and grid dimensions
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    num_pid_m = tl.num_programs(0)
    num_pid_n = tl.num_programs(1)

    # Apply swizzling for memory access optimization
    pid_m, pid_n = tl.swizzle2d(pid_m, pid_n, num_pid_m, num_pid_n, group_sz)

    # Calculate block offsets
    rm = get_1d_offset(size=bm, n_prev_chunks=pid_m)
    rn = get_1d_offset(size=bn, n_prev_chunks=pid_n)
    rk = get_1d_offset(size=bk, n_prev_chunks=0)

    # Calculate memory offsets
    offs_a = a_ptr + get_2d_offset(rm, rk, stride_am, stride_ak)
    offs_b = b_ptr + get_2d_offset(rk, rn, stride_bk, stride_bn)

    # Matrix multiplication computation (A/B loads masked along M and N; deviation from the seed)
    acc = tl.zeros((bm, bn), dtype=tl.float32)
    for _ in range(0, k, bk):
        a = tl.load(offs_a, mask=get_1d_mask(rm, m)[:, None], other=0.0)
        b = tl.load(offs_b, mask=get_1d_mask(rn, n)[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        offs_a += bk * stride_ak
        offs_b += bk * stride_bk

    # Store results
    c = c_ptr + get_2d_offset(rm, rn, stride_cm, stride_cn)
    mask = get_2d_mask(rm, rn, m, n)
    tl.store(c, acc.to(tl.float16), mask=mask)


# Autotuning is based on input matrix dimensions
grouped_autotuned_matmul_k_tuned = triton.autotune(
    configs=AUTOTUNED_CONFIGS, key=["m", "n", "k"]
)(grouped_autotuned_matmul_k)


def grouped_autotuned_matmul(a, b, *, config=None):
    """``a @ b`` as fp16 ``(m, n)`` computed by ``grouped_autotuned_matmul_k``.

    ``a`` is ``(m, k)``, ``b`` is ``(k, n)`` (fp16); any strides (e.g.
    transposed views) are fine. ``config``: ``None`` launches
    ``grouped_autotuned_matmul_k_tuned`` (GPU only: the interpreter cannot
    time configs; ``k`` must then be a multiple of 64, the largest ``bk`` of
    ``AUTOTUNED_CONFIGS``); a dict such as ``{"bm": 32, "bn": 64, "bk": 32,
    "group_sz": 8}`` launches the plain kernel with those values
    (``group_sz`` defaults to 8).

    Raises ``AssertionError`` if ``a.shape[1] != b.shape[0]`` or (with
    ``config``) if ``k % bk != 0``.
    """
    # Validate inputs
    assert a.shape[1] == b.shape[0], "matrix dims not compatible for matmul"

    # Get matrix dimensions
    (m, k), (_, n) = a.shape, b.shape

    # Initialize output matrix
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)

    # Compute grid dimensions
    grid = lambda meta: (triton.cdiv(m, meta['bm']), triton.cdiv(n, meta['bn']))

    if config is None:
        # Block sizes and group size are autotuned
        matmul_k_fn, meta = grouped_autotuned_matmul_k_tuned, {}
    else:
        matmul_k_fn, meta = grouped_autotuned_matmul_k, {"group_sz": 8, **config}
        assert k % meta["bk"] == 0, "k must be a multiple of bk (K is not masked)"

    # Launch kernel
    matmul_k_fn[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        **meta
    )
    return c
