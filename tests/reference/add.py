"""Vector add from seed 004_542e090f2e059ed6 (Intel XPU Triton guide, "Hello, World!" in Triton).

Follows the seed's three kernels and their wrappers:
- ``add_kernel_single`` is the seed's first ``add_kernel``: one program, the
  tile is the whole vector (``vec_offset = tl.arange(0, n_elements)`` with
  ``n_elements: tl.constexpr``), unmasked loads and store, launched by
  ``add_single`` on the grid ``(1,)``.
- ``add_kernel_fine_grained`` is the seed's kernel of that name: one program
  that loops ``for i in range(0, tl.cdiv(n_elements, BLOCK_SIZE))`` over
  ``BLOCK_SIZE`` chunks with ``mask = vec_block_offset < n_elements``,
  launched by ``add_fine_grained`` on the grid ``(1,)``.
- ``add_kernel`` is the seed's second ``add_kernel``: a 1D grid of
  ``triton.cdiv(n_elements, BLOCK_SIZE)`` programs, each adding one masked
  chunk, launched by ``add`` with the seed's grid lambda.
Both seed wrappers allocate ``output = torch.empty_like(x)`` and index the
inputs with plain offsets (no strides), as here.

Deviations and why:
- The seed names both the whole-vector kernel and the 1D-grid kernel
  ``add_kernel`` (and both wrappers ``add``); one module cannot hold two
  functions of one name, so the whole-vector kernel is ``add_kernel_single``
  (launcher ``add_single``) and the 1D-grid kernel keeps ``add_kernel``
  (launcher ``add``). The fine-grained wrapper, which the seed does not show,
  is ``add_fine_grained``.
- The seed wrappers' ``assert x.is_xpu and y.is_xpu and output.is_xpu`` is
  dropped so the launchers run on CPU tensors under ``TRITON_INTERPRET=1``
  (and on any GPU backend).
- ``add_fine_grained`` and ``add`` take ``block_size`` (default 1024, the
  seed's ``BLOCK_SIZE=1024``) instead of a fixed constant; ``add_single``
  passes ``n_elements=x.numel()`` as the seed does. The unused
  ``pid = tl.program_id(axis=0)`` lines of the one-program kernels are kept.
Inputs are meant to be contiguous 1D float32 tensors of equal length; the
kernels index the flat elements with plain offsets.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel_single(x_ptr,  # *Pointer* to first input vector.
                      y_ptr,  # *Pointer* to second input vector.
                      output_ptr,  # *Pointer* to output vector.
                      n_elements: tl.constexpr,  # Size of the vector.
                      ):
    """Store ``x + y`` for the whole vector in one program (``n_elements`` a power of two)."""
    # There are multiple 'programs' processing different data. Here, we
    # identify which program program we are in:
    pid = tl.program_id(axis=0)  # We use a 1D launch grid so axis is 0.

    vec_offset = tl.arange(0, n_elements)

    # x_ptr + vec_offset result is a vector of pointers
    x = tl.load(x_ptr + vec_offset)
    y = tl.load(y_ptr + vec_offset)

    output = x + y

    # Write x + y back to DRAM.
    tl.store(output_ptr + vec_offset, output)


@triton.jit
def add_kernel_fine_grained(x_ptr,  # *Pointer* to first input vector.
                            y_ptr,  # *Pointer* to second input vector.
                            output_ptr,  # *Pointer* to output vector.
                            n_elements: tl.constexpr,  # Size of the vector.
                            BLOCK_SIZE: tl.constexpr,
                            # Number of elements suitable for load/store granularity.
                            ):
    """Store ``x + y`` in one program that loops over ``BLOCK_SIZE`` chunks (last chunk masked)."""
    # There are multiple 'programs' processing different data. Here, we
    # identify which program we are in:
    pid = tl.program_id(axis=0)  # We use a 1D launch grid so axis is 0.

    vec_offset = tl.arange(0, BLOCK_SIZE)
    for i in range(0, tl.cdiv(n_elements, BLOCK_SIZE)):
        block_start = i * BLOCK_SIZE
        vec_block_offset = block_start + vec_offset

        # Mask will be vector of booleans
        # Used to avoid loading rubbish into the last tile.
        mask = vec_block_offset < n_elements

        x_tile = tl.load(x_ptr + vec_block_offset, mask=mask)
        y_tile = tl.load(y_ptr + vec_block_offset, mask=mask)

        output_tile = x_tile + y_tile

        tl.store(output_ptr + vec_block_offset, output_tile, mask=mask)


@triton.jit
def add_kernel(x_ptr,  # *Pointer* to first input vector.
               y_ptr,  # *Pointer* to second input vector.
               output_ptr,  # *Pointer* to output vector.
               n_elements,  # Size of the vector.
               BLOCK_SIZE: tl.constexpr,  # Number of elements each program should process.
               ):
    """Store ``x + y`` for chunk ``program_id(0)`` of ``BLOCK_SIZE`` elements (masked past ``n_elements``)."""
    # There are multiple 'programs' processing different data. Here, we
    # identify which program we are in:
    pid = tl.program_id(axis=0)  # We use a 1D launch grid so axis is 0.

    # This program will process inputs that are offset from the initial data.
    # For instance, if you had a vector of length 256 and block_size of 64, the programs
    # would each access the elements [0:64, 64:128, 128:192, 192:256].
    # Note that offsets is a list of pointers:
    block_start = pid * BLOCK_SIZE

    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # Create a mask to guard memory operations against out-of-bounds accesses.
    mask = offsets < n_elements

    # Load x and y from DRAM, masking out any extra elements in case the input is not a
    # multiple of the block size.
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)

    output = x + y

    # Write x + y back to DRAM.
    tl.store(output_ptr + offsets, output, mask=mask)


def add_single(x: torch.Tensor, y: torch.Tensor):
    """``x + y`` computed by ``add_kernel_single`` in one program (grid ``(1,)``).

    ``x`` and ``y``: contiguous 1D float32 tensors of the same length ``n``,
    where ``n`` must be a power of two (it is the ``tl.arange`` length, a
    ``tl.constexpr``); otherwise Triton rejects the kernel ("arange's range
    must be a power of 2": ``triton.runtime.errors.InterpreterError`` under
    ``TRITON_INTERPRET=1``, a ``CompilationError`` when compiled). Returns a
    new tensor like ``x``.
    """
    # We need to preallocate the output.
    output = torch.empty_like(x)
    n_elements = output.numel()

    # The SPMD launch grid denotes the number of kernel instances that run in parallel.
    # In this case, one program handles the whole vector:
    grid = (1, )  # same as (1, 1)

    add_kernel_single[grid](x, y, output, n_elements=n_elements)

    return output


def add_fine_grained(x: torch.Tensor, y: torch.Tensor, block_size=1024):
    """``x + y`` computed by ``add_kernel_fine_grained``: one program looping over ``block_size`` chunks.

    ``x`` and ``y``: contiguous 1D float32 tensors of the same length (any
    length). ``block_size`` must be a power of two. Returns a new tensor like
    ``x``.
    """
    # We need to preallocate the output.
    output = torch.empty_like(x)
    n_elements = output.numel()

    # One program; it loops over the blocks itself.
    grid = (1, )

    add_kernel_fine_grained[grid](x, y, output, n_elements=n_elements, BLOCK_SIZE=block_size)

    return output


def add(x: torch.Tensor, y: torch.Tensor, block_size=1024):
    """``x + y`` computed by ``add_kernel`` on a 1D grid of ``cdiv(n, block_size)`` programs.

    ``x`` and ``y``: contiguous 1D float32 tensors of the same length (any
    length). ``block_size`` must be a power of two. Returns a new tensor like
    ``x``.
    """
    # We need to preallocate the output.
    output = torch.empty_like(x)
    n_elements = output.numel()

    # The SPMD launch grid denotes the number of kernel instances that run in parallel.
    # In this case, we use a 1D grid where the size is the number of blocks.
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )

    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=block_size)

    return output
