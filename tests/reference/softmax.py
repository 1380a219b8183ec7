"""Fused softmax from Triton's tutorial 02 "Fused Softmax" (python/tutorials/02-fused-softmax.py in triton-lang/triton).

Follows the tutorial's current ``softmax_kernel``: persistent programs, each
looping over the rows ``row_start = tl.program_id(0)``,
``row_step = tl.num_programs(0)``,
``for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages)``;
each row is loaded whole into a ``BLOCK_SIZE`` block with
``mask = col_offsets < n_cols`` and ``other=-float('inf')``, then
``row - tl.max(row, axis=0)``, ``tl.exp``, ``tl.sum`` and the division, and a
masked store. The kernel body is the tutorial's, comments included. The host
function ``softmax`` is the tutorial's: ``BLOCK_SIZE = triton.next_power_of_2(n_cols)``,
``num_warps = 8``, ``num_stages = 4 if SIZE_SMEM > 200000 else 2``,
``y = torch.empty_like(x)``, the kernel pre-compiled with
``softmax_kernel.warmup(..., grid=(1, ))`` to read ``n_regs`` and
``metadata.shared``, the occupancy
``NUM_REGS // (n_regs * WARP_SIZE * num_warps)`` capped by
``SIZE_SMEM // size_smem`` (the HIP/CDNA branch with ``is_hip`` / ``is_cdna``
kept as written), ``num_programs = min(NUM_SM * occupancy, n_rows)``, and the
launch of the compiled kernel
``kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages)``.
The input's row stride ``x.stride(0)`` and the output's ``y.stride(0)`` are
passed separately, so row-strided views such as ``x[::2]`` or ``x[:, :k]``
work; ``y`` is then a new contiguous tensor.

Deviations and why:
- Device properties are read when ``softmax`` runs, for the current device
  (``driver.active.get_current_device()``, the device Triton launches on),
  not at import from ``DEVICE``: the tutorial's module-level
  ``driver.active.utils.get_device_properties(DEVICE.index)`` fails on a
  machine with no GPU, and this module must import there. They are read
  once per device (``device_properties``), as the tutorial reads them once. ``properties``,
  ``NUM_SM``, ``NUM_REGS``, ``SIZE_SMEM`` and ``WARP_SIZE`` keep the
  tutorial's names and dictionary keys.
- The occupancy is cached: ``kernels`` maps
  ``(device, BLOCK_SIZE, num_stages, num_warps)`` to the program count
  ``NUM_SM * occupancy`` (and the stages used). The current tutorial declares
  ``kernels = {}`` but calls ``warmup`` and computes the occupancy on every
  call (about 1 ms of host time); an earlier upstream version cached
  ``kernels[BLOCK_SIZE] = (kernel, num_programs)``, compiled kernel included.
  Here only the program count is cached and the kernel is launched through
  the JIT: a compiled kernel is specialized on its arguments (a value of 1,
  strides divisible by 16, ...), so one compiled for, say, ``n_rows == 1``
  must not run other inputs.
- Rows too long for the tutorial's ``num_stages = 4`` buffers in shared
  memory (32768 float32 columns need 393 KB on an H100, which has 227 KB)
  fall back to ``num_stages = 1``, where the tutorial would fail with
  OutOfResources.
- Under ``TRITON_INTERPRET=1`` (CPU tensors) the interpreter has no device
  properties, and its ``warmup`` compiles nothing (no ``n_regs`` or shared
  memory size), so ``softmax`` launches the kernel directly on a plain grid
  of ``min(n_rows, 4)`` programs (4, the SM count tilegen's persistent
  launchers use in the interpreter) with ``num_stages=1``; the programs
  still loop over the rows ``row_step`` apart, so every row is covered. The
  interpreter is detected from the kernel object itself (an
  ``InterpretedFunction``), which is what ``@triton.jit`` built.
- ``softmax`` asserts ``x.stride(1) == 1`` (unless ``n_cols == 1``): the
  kernel reads ``row_start_ptr + col_offsets``, so it assumes unit column
  stride, which the tutorial relies on silently (its inputs are contiguous).
- ``naive_softmax``, the unit test, the benchmark and ``DEVICE`` are left
  out; this module holds only the kernel and its launcher.
Inputs are meant to be float32 2D tensors ``[n_rows, n_cols]`` with
``n_rows >= 1`` and ``1 <= n_cols`` small enough for one row to fit in a
block (the tutorial's limitation).
"""

import functools

import torch
import triton
import triton.language as tl
from triton.runtime import driver
from triton.runtime.errors import OutOfResources
from triton.runtime.interpreter import InterpretedFunction

#: Programs launched under TRITON_INTERPRET=1, where there is no occupancy to compute.
INTERPRETER_PROGRAMS = 4


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"


def is_cdna():
    return is_hip() and triton.runtime.driver.active.get_current_target().arch in ('gfx940', 'gfx941', 'gfx942',
                                                                                   'gfx90a', 'gfx908')


# %%
# Compute Kernel
# --------------
#
# Our softmax kernel works as follows: each program loads a set of rows of the input matrix X strided by number of programs,
# normalizes it and writes back the result to the output Y.
#
# Note that one important limitation of Triton is that each block must have a
# power-of-two number of elements, so we need to internally "pad" each row and guard the
# memory operations properly if we want to handle any possible input shapes:


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                   num_stages: tl.constexpr):
    """Row-wise softmax of the ``n_rows x n_cols`` matrix at ``input_ptr`` into ``output_ptr``.

    Program ``program_id(0)`` handles rows ``program_id(0)``,
    ``program_id(0) + num_programs(0)``, ...; each row (unit column stride)
    is one ``BLOCK_SIZE`` block, ``BLOCK_SIZE >= n_cols``, padded with
    ``-inf`` past ``n_cols`` so the padding adds nothing to the sum.
    """
    # starting row of the program
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        # The stride represents how much we need to increase the pointer to advance 1 row
        row_start_ptr = input_ptr + row_idx * input_row_stride
        # The block size is the next power of two greater than n_cols, so we can fit each
        # row in a single block
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        # Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        # Subtract maximum for numerical stability
        row_minus_max = row - tl.max(row, axis=0)
        # Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        # Write back output to DRAM
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


#: True when ``@triton.jit`` built an interpreted kernel (TRITON_INTERPRET=1).
_INTERPRET = isinstance(softmax_kernel, InterpretedFunction)

# %%
# We can create a helper function that enqueues the kernel and its (meta-)arguments for any given input tensor.

# (device, BLOCK_SIZE, num_stages, num_warps) -> NUM_SM * occupancy
kernels = {}


@functools.cache
def device_properties(device):
    """``driver.active.utils.get_device_properties(device)``, read once per device (the tutorial
    reads it once, at import)."""
    return driver.active.utils.get_device_properties(device)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of the float32 2D tensor ``x`` (``torch.softmax(x, -1)``) by ``softmax_kernel``.

    ``x``: ``[n_rows, n_cols]``, any row stride, unit column stride. Returns a
    new tensor of the same shape (contiguous for such inputs). On the GPU,
    launches ``min(NUM_SM * occupancy, n_rows)`` persistent programs; under
    ``TRITON_INTERPRET=1``, ``min(n_rows, 4)`` programs with ``num_stages=1``.
    """
    n_rows, n_cols = x.shape
    assert n_cols == 1 or x.stride(1) == 1, "softmax_kernel needs unit column stride"

    # The block size of each loop iteration is the smallest power of two greater than the number of columns in `x`
    BLOCK_SIZE = triton.next_power_of_2(n_cols)

    # Another trick we can use is to ask the compiler to use more threads per row by
    # increasing the number of warps (`num_warps`) over which each row is distributed.
    # You will see in the next tutorial how to auto-tune this value in a more natural
    # way so you don't have to come up with manual heuristics yourself.
    num_warps = 8

    # Allocate output
    y = torch.empty_like(x)

    if _INTERPRET:
        # The interpreter has no device properties and compiles nothing to measure:
        # a few programs, each looping over its rows (deviation, see the module docstring).
        num_stages = 1
        num_programs = min(n_rows, INTERPRETER_PROGRAMS)
        softmax_kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages)
        return y

    device = driver.active.get_current_device()
    properties = device_properties(device)
    NUM_SM = properties["multiprocessor_count"]
    NUM_REGS = properties["max_num_regs"]
    SIZE_SMEM = properties["max_shared_mem"]
    WARP_SIZE = properties["warpSize"]

    # Number of software pipelining stages.
    num_stages = 4 if SIZE_SMEM > 200000 else 2

    num_programs = kernels.get((device, BLOCK_SIZE, num_stages, num_warps))
    if num_programs is None:
        # pre-compile kernel to get register usage and compute thread occupancy.
        kernel = softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                       num_stages=num_stages, num_warps=num_warps, grid=(1, ))
        try:
            kernel._init_handles()
        except OutOfResources:  # deviation: rows too long for num_stages buffers in shared memory
            num_stages = 1
            kernel = softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                           num_stages=num_stages, num_warps=num_warps, grid=(1, ))
            kernel._init_handles()
        n_regs = kernel.n_regs
        size_smem = kernel.metadata.shared
        if is_hip():
            # NUM_REGS represents the number of regular purpose registers. On CDNA architectures this is half of all registers available.
            # However, this is not always the case. In most cases all registers can be used as regular purpose registers.
            # ISA SECTION (3.6.4 for CDNA3)
            # VGPRs are allocated out of two pools: regular VGPRs and accumulation VGPRs. Accumulation VGPRs are used
            # with matrix VALU instructions, and can also be loaded directly from memory. A wave may have up to 512 total
            # VGPRs, 256 of each type. When a wave has fewer than 512 total VGPRs, the number of each type is flexible - it is
            # not required to be equal numbers of both types.
            NUM_GPRS = NUM_REGS
            if is_cdna():
                NUM_GPRS = NUM_REGS * 2

            # MAX_NUM_THREADS represents maximum number of resident threads per multi-processor.
            # When we divide this number with WARP_SIZE we get maximum number of waves that can
            # execute on a CU (multi-processor)  in parallel.
            MAX_NUM_THREADS = properties["max_threads_per_sm"]
            max_num_waves = MAX_NUM_THREADS // WARP_SIZE
            occupancy = min(NUM_GPRS // WARP_SIZE // n_regs, max_num_waves) // num_warps
        else:
            occupancy = NUM_REGS // (n_regs * WARP_SIZE * num_warps)
        occupancy = min(occupancy, SIZE_SMEM // size_smem)
        num_programs = NUM_SM * occupancy
        kernels[(device, BLOCK_SIZE, 4 if SIZE_SMEM > 200000 else 2, num_warps)] = (num_programs, num_stages)
    num_programs, num_stages = kernels[(device, BLOCK_SIZE, 4 if SIZE_SMEM > 200000 else 2, num_warps)]

    num_programs = min(num_programs, n_rows)

    # Create a number of persistent programs (through the JIT, which picks the compiled kernel
    # for these arguments' specialization).
    softmax_kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, num_stages,
                                         num_warps=num_warps)
    return y
