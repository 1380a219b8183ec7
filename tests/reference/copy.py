"""Tensor copy from seed 000_394da3312a32ff7c (GPU MODE lecture 14 notes, Example 1).

Follows the seed's final, correct ``copy_k`` (the "Solution" version:
``offs = pid * bs + tl.arange(0, bs)``, ``mask = offs < n``, masked load and
store) and its ``copy`` launcher (1D grid of ``cdiv(n, bs)`` programs).

Deviations and why:
- The seed's ``print_if`` debugging call is left out of the kernel; it only
  prints under the interpreter and does not change the result.
- The launcher takes the kernel as fixed instead of a ``kernel_fn`` argument,
  and ``bs`` defaults to 1024 (the seed passes ``bs=2`` by hand).
- The output is ``torch.empty_like(x)`` instead of ``torch.zeros_like(x)``:
  every element is written by the kernel, so the initial value is unused.
- ``check_tensors_gpu_ready`` is reduced to its contiguity assert so the
  launcher also runs on CPU tensors under ``TRITON_INTERPRET=1``.
Intended for 1-D contiguous tensors (any contiguous tensor works, since the
kernel indexes the flat ``numel()`` elements).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def copy_k(x_ptr, z_ptr, n, bs: tl.constexpr):
    """Copy ``n`` elements from ``x_ptr`` to ``z_ptr``; each program copies one chunk of ``bs``.

    Program ``pid`` handles elements ``[pid*bs, (pid+1)*bs)``; the mask drops
    the elements past ``n`` in the last chunk.
    """
    pid = tl.program_id(0)  # Get current block ID
    offs = pid * bs + tl.arange(0, bs)  # Calculate correct offsets for this block
    mask = offs < n  # Prevent out-of-bounds access
    x = tl.load(x_ptr + offs, mask)  # Load input values
    tl.store(z_ptr + offs, x, mask)  # Store to output


def copy(x, bs=1024):
    """Return a copy of the contiguous tensor ``x`` made by ``copy_k``."""
    assert x.is_contiguous(), "A tensor is not contiguous"
    z = torch.empty_like(x)
    n = x.numel()  # Total number of elements
    n_blocks = triton.cdiv(n, bs)  # Number of programs needed
    grid = (n_blocks,)  # 1D grid configuration
    copy_k[grid](x, z, n, bs)
    return z
