"""Offset and mask helpers from seed 000_394da3312a32ff7c (GPU MODE lecture 14 notes).

Follows the seed's four ``@triton.jit`` helpers ``get_1d_offset``,
``get_2d_offset``, ``get_1d_mask`` and ``get_2d_mask`` with the same behaviour
(the same expressions, argument names and defaults). No deviations. The
parameter named ``max`` shadows the builtin, as it does in the seed; that is
harmless inside a Triton kernel.
"""

import triton
import triton.language as tl


@triton.jit
def get_1d_offset(size, n_prev_chunks):
    """1D offsets of chunk number ``n_prev_chunks`` of length ``size``.

    Returns ``n_prev_chunks * size + [0, 1, ..., size-1]``. ``size`` must be a
    compile-time constant (it is the length of ``tl.arange``).
    """
    return n_prev_chunks * size + tl.arange(0, size)


@triton.jit
def get_2d_offset(offs_0, offs_1, stride_0, stride_1=1):
    """2D memory offsets from row offsets ``offs_0`` and column offsets ``offs_1``.

    Returns the broadcast grid ``offs_0[:, None] * stride_0 + offs_1[None, :] * stride_1``.
    """
    return tl.expand_dims(offs_0, 1)*stride_0 + tl.expand_dims(offs_1, 0)*stride_1


@triton.jit
def get_1d_mask(offs, max):
    """Boundary mask for 1D offsets: ``offs < max``."""
    return offs < max


@triton.jit
def get_2d_mask(offs_0, offs_1, max_0, max_1):
    """Boundary mask for a 2D tile: ``(offs_0[:, None] < max_0) & (offs_1[None, :] < max_1)``."""
    return (tl.expand_dims(offs_0, 1) < max_0) & (tl.expand_dims(offs_1, 0) < max_1)
