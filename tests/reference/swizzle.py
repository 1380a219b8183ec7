"""Program-id swizzling demo from seed 000_394da3312a32ff7c (GPU MODE lecture 14 notes, Example 4).

Follows the seed's ``swizzle_k`` unchanged: a grid of one program per element
of a ``(num_pid_m, num_pid_n)`` matrix (block size 1), each program loading
the element at its own ``(pid_m, pid_n)`` and storing it at the position
``tl.swizzle2d(pid_m, pid_n, num_pid_m, num_pid_n, group_sz)`` gives it. For
``torch.arange(20).view(5, 4)`` and ``group_sz=3`` the result is the seed's
``[[0,3,6,9],[1,4,7,10],[2,5,8,11],[12,14,16,18],[13,15,17,19]]``.

Deviations and why:
- The seed launches the kernel inline (``swizzle_k[(blocks_m, blocks_n)](x, z, group_sz=3)``
  on ``z = -torch.ones_like(x)``); here that is wrapped in a ``swizzle``
  launcher with ``group_sz=3`` by default, and it asserts a contiguous 2D
  input because the kernel uses ``num_pid_n`` as the row stride.
"""

import torch
import triton
import triton.language as tl

from .helpers import get_1d_offset, get_2d_mask, get_2d_offset


@triton.jit
def swizzle_k(x_ptr, z_ptr, group_sz: tl.constexpr):
    """Move the element at this program's ``(pid_m, pid_n)`` of ``x`` to its swizzled position in ``z``.

    The grid must equal the shape of the contiguous matrix ``x``.
    """
    # Get current block coordinates and grid dimensions
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    num_pid_m, num_pid_n = tl.num_programs(0), tl.num_programs(1)

    # Apply 2D swizzling to reorder blocks
    pid_m_, pid_n_ = tl.swizzle2d(pid_m, pid_n, num_pid_m, num_pid_n, group_sz)

    # Calculate memory offsets for original ordering
    offs_m = get_1d_offset(1, n_prev_chunks=pid_m)
    offs_n = get_1d_offset(1, n_prev_chunks=pid_n)
    offs = get_2d_offset(offs_m, offs_n, stride_0=num_pid_n)
    mask = get_2d_mask(offs_m, offs_n, max_0=num_pid_m, max_1=num_pid_n)

    # Calculate memory offsets for swizzled ordering
    offs_sw_m = get_1d_offset(1, n_prev_chunks=pid_m_)
    offs_sw_n = get_1d_offset(1, n_prev_chunks=pid_n_)
    offs_sw = get_2d_offset(offs_sw_m, offs_sw_n, stride_0=num_pid_n)
    mask_sw = get_2d_mask(offs_sw_m, offs_sw_n, max_0=num_pid_m, max_1=num_pid_n)

    # Load from original pattern and store in swizzled pattern
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(z_ptr + offs_sw, x, mask=mask_sw)


def swizzle(x, group_sz=3):
    """Return ``z`` (initialised to -1) with each element of the 2D matrix ``x`` moved to its
    ``tl.swizzle2d`` position."""
    assert x.dim() == 2, "expected a 2D matrix"
    assert x.is_contiguous(), "A tensor is not contiguous"
    z = -torch.ones_like(x)  # Initialize output matrix with -1
    grid = (x.shape[0], x.shape[1])
    swizzle_k[grid](x, z, group_sz=group_sz)
    return z
