"""RGB to greyscale from seed 000_394da3312a32ff7c (GPU MODE lecture 14 notes, Example 2).

Follows the seed's ``rgb2grey_k`` (2D grid over height and width blocks,
offsets ``w*offs_0[:, None] + offs_1[None, :]``, channel ``c`` read at
``c*h*w``, ``out = 0.2989*r + 0.5870*g + 0.1140*b`` computed in fp32 and
stored, with the implicit fp32 -> uint8 conversion of ``tl.store``) and its
``rgb2grey`` launcher (output ``(h, w)`` with the input's dtype, grid
``(cdiv(h, bs0), cdiv(w, bs1))``).

Deviations and why:
- ``bs`` defaults to ``(32, 32)``, the value the seed calls it with.
- The launcher asserts a contiguous 3-channel CHW input, because the kernel
  assumes exactly that layout (the seed relies on it silently).
- ``triton.cdiv`` is used instead of the seed's local ``cdiv`` (same result).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rgb2grey_k(x_ptr, out_ptr, h, w, bs0: tl.constexpr, bs1: tl.constexpr):
    """Convert a contiguous CHW RGB image at ``x_ptr`` into an ``h x w`` greyscale image at ``out_ptr``.

    Program ``(pid_0, pid_1)`` handles the ``bs0 x bs1`` tile of rows
    ``pid_0*bs0 + [0, bs0)`` and columns ``pid_1*bs1 + [0, bs1)``; the mask
    drops pixels outside the image.
    """
    # Get program IDs for parallel processing
    pid_0 = tl.program_id(0)  # Block ID in height dimension
    pid_1 = tl.program_id(1)  # Block ID in width dimension

    # Calculate offsets for this block
    offs_0 = pid_0 * bs0 + tl.arange(0, bs0)  # Offsets in height dimension
    offs_1 = pid_1 * bs1 + tl.arange(0, bs1)  # Offsets in width dimension

    # Calculate 2D offset matrix
    offs = w * offs_0[:,None] + offs_1[None, :]

    # Create masks to handle image boundaries
    mask_0 = offs_0 < h
    mask_1 = offs_1 < w
    mask = mask_0[:,None] & mask_1[None,:]

    # Load RGB channels
    r = tl.load(x_ptr + 0*h*w + offs, mask=mask)
    g = tl.load(x_ptr + 1*h*w + offs, mask=mask)
    b = tl.load(x_ptr + 2*h*w + offs, mask=mask)

    # Convert to grayscale using standard weights
    out = 0.2989*r + 0.5870*g + 0.1140*b

    # Store the result
    tl.store(out_ptr + offs, out, mask=mask)


def rgb2grey(x, bs=(32, 32)):
    """Greyscale image ``(h, w)`` (dtype of ``x``) of the contiguous RGB image ``x`` of shape ``(3, h, w)``."""
    c, h, w = x.shape
    assert c == 3, "expected an RGB image in CHW layout"
    assert x.is_contiguous(), "A tensor is not contiguous"
    # Create output tensor
    out = torch.empty((h, w), dtype=x.dtype, device=x.device)

    # Define processing grid based on block sizes
    grid = lambda meta: (triton.cdiv(h, meta['bs0']), triton.cdiv(w, meta['bs1']))

    # Launch kernel
    rgb2grey_k[grid](x, out, h, w, bs0=bs[0], bs1=bs[1])
    return out.view(h, w)
