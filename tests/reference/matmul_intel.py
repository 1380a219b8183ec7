"""Matrix multiplication from seed 004_542e090f2e059ed6 (Intel XPU Triton guide, "Load and
Store Semantics" and "Triton Kernel Tuning").

Two kernels from the seed:
- ``matmul_kernel_dummy``: a 2D grid of ``(cdiv(M, BLOCK_SIZE_M),
  cdiv(N, BLOCK_SIZE_N))`` programs; the A row and B column offsets are
  wrapped with ``% M`` / ``% N`` (so every load is in bounds), the K loop
  ``for k in range(0, tl.cdiv(K, BLOCK_SIZE_K))`` masks the K tail with
  ``offs_k < K - k * BLOCK_SIZE_K`` and ``other=0.0``, the fp32 accumulator
  is cast with ``accumulator.to(tl.float16)`` and stored with
  ``c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)``. The seed shows
  it twice, plain and under ``@triton.autotune`` with seven configs keyed on
  ``M, N, K`` (the kernel bodies are the same); ``DUMMY_CONFIGS`` are those
  seven configs (the commented-out eighth stays out) and
  ``matmul_kernel_dummy_autotuned`` is the kernel wrapped with them.
  ``matmul_dummy`` is the seed's wrapper of that name: fp16 output
  ``torch.empty((M, N), device=a.device, dtype=a.dtype)`` and the same 2D
  grid lambda.
- ``matmul_kernel``: the block-pointer kernel. A 1D grid of
  ``cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N)`` programs in GROUP_SIZE_M
  grouped ordering (``num_pid_in_group``, ``group_id``, ``first_pid_m``,
  ``group_size_m = min(...)``, ``pid_m``, ``pid_n``), ``tl.make_block_ptr``
  tiles of A and B advanced by ``tl.advance`` over ``for k in range(0, K,
  BLOCK_SIZE_K)``, and the fp32 accumulator stored through a block pointer
  into an fp32 output. ``matmul_block_ptr`` is the seed's second ``matmul``
  wrapper, with the ``K % 32 == 0``-style assert.

Deviations and why:
- ``matmul_kernel_dummy`` is a plain ``@triton.jit`` function and the
  autotuned variant is built from it (``triton.autotune(configs=DUMMY_CONFIGS,
  key=["M", "N", "K"])``), so tests can run one fixed config in the
  interpreter, which cannot time configs. ``matmul_dummy`` takes
  ``config=`` (a dict of BLOCK_SIZE_M/N/K for the plain kernel, or ``None``
  for the autotuned one); the seed's unused ``activation=""`` parameter is
  dropped.
- The seed wrappers' ``a.is_contiguous()`` / ``b.is_contiguous()`` asserts
  are dropped: the kernels take strides from ``.stride()``, so transposed
  views work.
- The deliberate one, for the block-pointer kernel: the seed loads and stores
  its block pointers with no boundary check, so when M (or N) is not a
  multiple of BLOCK_SIZE_M (BLOCK_SIZE_N) the last block row (column) reads
  and writes out of bounds. Here the A load has ``boundary_check=(0,)``, the
  B load ``boundary_check=(1,)`` (both ``padding_option="zero"``) and the
  store ``boundary_check=(0, 1)``. K stays unchecked, as in the seed, and
  ``matmul_block_ptr`` asserts ``K % block_k == 0`` (the seed asserts
  ``K % 32 == 0`` for the same reason).
- All three block pointers use ``order=(1, 0)``; the seed gives B
  ``order=(0, 1)``. ``order`` is only a memory-layout hint for the compiler;
  the addresses come from ``shape``/``strides``/``offsets``, so the loaded
  values and the result are the same.
- The block-pointer kernel is named ``matmul_kernel`` as in the seed; its
  wrapper (``matmul`` in the seed, a name the seed also uses for the dummy
  kernel's first wrapper) is ``matmul_block_ptr``. The seed's wrapper passes
  no block sizes (it would need an autotuner); ``matmul_block_ptr`` passes
  ``block_m``, ``block_n``, ``block_k`` and ``group_m`` (defaults 64, 64, 32,
  8) as BLOCK_SIZE_M/N/K and GROUP_SIZE_M.

Caveat: Triton 3.9 (the version this project pins) has removed block
pointers: ``tl.make_block_ptr`` and ``tl.advance`` raise
``NotImplementedError("Block pointers have been removed in favor of the
tensor descriptor API")``, in the interpreter and when compiling. The
block-pointer ``matmul_kernel`` is written as the seed has it and was checked
under Triton 3.4's interpreter; under 3.9 ``matmul_block_ptr`` raises
``triton.runtime.errors.InterpreterError`` (``TRITON_INTERPRET=1``) or a
compilation error. ``matmul_kernel_dummy`` is unaffected.
"""

import torch
import triton
import triton.language as tl

DUMMY_CONFIGS = [
    # FIXME: Once tl.dot uses DPAS put back the workload commented out.
    # triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8}, num_stages=3,
    #               num_warps=8),
    triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 32}, num_stages=4,
                  num_warps=4),
    triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32}, num_stages=4,
                  num_warps=4),
    triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32}, num_stages=4,
                  num_warps=4),
    triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32}, num_stages=4,
                  num_warps=4),
    triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32}, num_stages=4,
                  num_warps=4),
    triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32}, num_stages=5,
                  num_warps=2),
    triton.Config({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32}, num_stages=5,
                  num_warps=2),
]


@triton.jit
def matmul_kernel_dummy(
        # Pointers to matrices
        a_ptr, b_ptr, c_ptr,
        # Matrix dimensions
        M, N, K,
        # The stride variables indicate how much to increase the pointer when moving by one
        # element in a specific dimension. For example, `stride_am` represents the increment
        # in `a_ptr` to access the element one row down (A has M rows).
        stride_am, stride_ak,  #
        stride_bk, stride_bn,  #
        stride_cm, stride_cn,
        # Meta-parameters
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
):
    """Kernel for computing the matmul C = A x B.
    A has shape (M, K), B has shape (K, N) and C has shape (M, N)

    Program ``(program_id(0), program_id(1))`` computes one
    ``BLOCK_SIZE_M x BLOCK_SIZE_N`` block of C. A rows and B columns past the
    edge are wrapped (``% M``, ``% N``) and never stored; the K tail is
    masked with zeros, so any K works. Accumulates in fp32, stores fp16.
    """
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)

    # ----------------------------------------------------------
    # Create pointers for the first blocks of A and B.
    # We will advance this pointer as we move in the K direction
    # and accumulate
    # `a_ptrs` is a block of [BLOCK_SIZE_M, BLOCK_SIZE_K] pointers
    # `b_ptrs` is a block of [BLOCK_SIZE_K, BLOCK_SIZE_N] pointers
    # See above `Pointer Arithmetic` section for details
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # -----------------------------------------------------------
    # Iterate to compute a block of the C matrix.
    # We accumulate into a `[BLOCK_SIZE_M, BLOCK_SIZE_N]` block
    # of fp32 values for higher accuracy.
    # `accumulator` will be converted back to fp16 after the loop.
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # Load the next block of A and B, generate a mask by checking the K dimension.
        # If it is out of bounds, set it to 0.
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        # We accumulate along the K dimension.
        accumulator += tl.dot(a, b)
        # Advance the ptrs to the next K block.
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)

    # -----------------------------------------------------------
    # Write back the block of the output matrix C with masks.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


matmul_kernel_dummy_autotuned = triton.autotune(configs=DUMMY_CONFIGS, key=["M", "N", "K"])(matmul_kernel_dummy)


def matmul_dummy(a, b, *, config=None):
    """``a @ b`` as an ``(M, N)`` tensor of ``a.dtype`` (fp16) computed by ``matmul_kernel_dummy``.

    ``a``: fp16 ``(M, K)``; ``b``: fp16 ``(K, N)``; any strides (e.g.
    transposed views) and any M, N, K are fine. ``config``: ``None`` launches
    ``matmul_kernel_dummy_autotuned`` (GPU only: the interpreter cannot time
    configs); a dict such as ``{"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 32}`` launches the plain ``matmul_kernel_dummy`` with
    those values.

    Raises ``AssertionError`` if ``a.shape[1] != b.shape[0]``.
    """
    # Check constraints.
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    # Allocates output.
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    # 2D launch kernel where each block gets its own program.
    grid = lambda META: (triton.cdiv(M, META['BLOCK_SIZE_M']), triton.cdiv(N, META['BLOCK_SIZE_N']), )
    if config is None:
        kernel, meta = matmul_kernel_dummy_autotuned, {}
    else:
        kernel, meta = matmul_kernel_dummy, dict(config)
    kernel[grid](
        a, b, c,  #
        M, N, K,  #
        a.stride(0), a.stride(1),  #
        b.stride(0), b.stride(1),  #
        c.stride(0), c.stride(1),  #
        **meta,
    )
    return c


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr,  #
                  M, N, K,  #
                  stride_am, stride_ak,  #
                  stride_bk, stride_bn,  #
                  stride_cm, stride_cn,  #
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
                  GROUP_SIZE_M: tl.constexpr  #
                  ):
    """Block-pointer matmul C = A x B with an fp32 accumulator stored into fp32 C.

    Program ``program_id(0)`` computes one ``BLOCK_SIZE_M x BLOCK_SIZE_N``
    block of C, picked in GROUP_SIZE_M grouped ordering. Loads are
    boundary-checked along M (A) and N (B) with zero padding and the store
    along M and N; K is not checked, so K must be a multiple of BLOCK_SIZE_K.
    """
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    block_offset_m = pid_m * BLOCK_SIZE_M
    block_offset_n = pid_n * BLOCK_SIZE_N

    a_tile_ptr = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                   offsets=(block_offset_m, 0), block_shape=(BLOCK_SIZE_M, BLOCK_SIZE_K), order=(1, 0))
    b_tile_ptr = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                   offsets=(0, block_offset_n), block_shape=(BLOCK_SIZE_K, BLOCK_SIZE_N), order=(1, 0))
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)

    for k in range(0, K, BLOCK_SIZE_K):
        # Boundary checks along M (A) and N (B); deviation from the seed.
        a = tl.load(a_tile_ptr, boundary_check=(0,), padding_option="zero")
        b = tl.load(b_tile_ptr, boundary_check=(1,), padding_option="zero")
        accumulator += tl.dot(a, b)
        a_tile_ptr = tl.advance(a_tile_ptr, [0, BLOCK_SIZE_K])
        b_tile_ptr = tl.advance(b_tile_ptr, [BLOCK_SIZE_K, 0])

    c_block_ptr = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                    offsets=(block_offset_m, block_offset_n), block_shape=(BLOCK_SIZE_M, BLOCK_SIZE_N),
                                    order=(1, 0))

    tl.store(c_block_ptr, accumulator, boundary_check=(0, 1))


def matmul_block_ptr(a, b, block_m=64, block_n=64, block_k=32, group_m=8):
    """``a @ b`` as an fp32 ``(M, N)`` tensor computed by the block-pointer ``matmul_kernel``.

    ``a``: fp16 ``(M, K)``; ``b``: fp16 ``(K, N)``; any strides (e.g.
    transposed views) are fine. ``block_m``, ``block_n``, ``block_k`` (powers
    of two) and ``group_m`` are passed as BLOCK_SIZE_M/N/K and GROUP_SIZE_M;
    the grid is 1D with ``cdiv(M, block_m) * cdiv(N, block_n)`` programs.

    Raises ``AssertionError`` if ``a.shape[1] != b.shape[0]`` or if
    ``K % block_k != 0`` (K is not boundary-checked). On Triton >= 3.9, which
    has removed block pointers, every launch fails (``InterpreterError`` under
    ``TRITON_INTERPRET=1``); see the module docstring.
    """
    # checks constraints
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    assert (K % block_k == 0), "We don't check memory-out-of-bounds with K so K must be divisible by BLOCK_SIZE_K"

    c = torch.empty((M, N), device=a.device, dtype=torch.float32)

    def grid(META):
        return (triton.cdiv(M, META['BLOCK_SIZE_M']) * triton.cdiv(N, META['BLOCK_SIZE_N']), )

    matmul_kernel[grid](
        a_ptr=a, b_ptr=b, c_ptr=c,  #
        M=M, N=N, K=K,  #
        stride_am=a.stride(0), stride_ak=a.stride(1),  #
        stride_bk=b.stride(0), stride_bn=b.stride(1),  #
        stride_cm=c.stride(0), stride_cn=c.stride(1),  #
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,  #
        GROUP_SIZE_M=group_m)
    return c
