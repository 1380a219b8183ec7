"""Transposed convolutions (specs/conv_transpose1d/2d/3d.tile and the grouped 2d/3d ones) against
torch's ``F.conv_transpose1d/2d/3d``: strides above 1 (x read at ``(o + padding - dilation * k) //
stride`` where the stride divides, the ``//`` and ``%`` of index arithmetic), padding, dilation,
output padding, groups, with and without bias.

Inputs of both signs, sizes off every block, every config (each set of block sizes in the
interpreter; ``TILEGEN_TEST_GPU=1``: on the GPU), f32 and bf16, and a NaN reaching exactly the
outputs torch's reaches.
"""

import os

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def close(got, want, dtype, taps):
    """Equal but for float32 sums in another order (on the GPU tf32 operands) and one rounding to
    bf16; ``taps`` the most products summed into an output."""
    assert got.dtype == dtype and got.shape == want.shape
    if dtype == torch.float32:
        tol = 1e-5 * taps if DEVICE == "cpu" else 2e-2 * taps ** 0.5
        torch.testing.assert_close(got, want, atol=tol, rtol=1e-5)
    else:
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=2**-7)


@pytest.mark.parametrize(("stride", "padding", "dilation", "output_padding", "dtype"), [
    ((1, 1), (0, 0), (1, 1), (0, 0), torch.float32),
    ((2, 3), (1, 2), (2, 1), (1, 2), torch.float32),
    ((3, 2), (2, 0), (1, 1), (0, 1), torch.bfloat16),
])
def test_conv_transpose2d_is_torchs(generated, dtype, stride, padding, dilation, output_padding):
    module = generated("conv_transpose2d")
    x, w = randn(1, 5, 3, 5, dtype=dtype), randn(5, 17, 3, 2, dtype=dtype, seed=1)
    bias = randn(17, dtype=dtype, seed=2)
    want = F.conv_transpose2d(x.float(), w.float(), bias.float(), stride, padding, output_padding, 1,
                              dilation).to(dtype)
    scalars = (*padding, *dilation, *stride, *output_padding)
    for config in config_indices(module) if dtype == torch.float32 else [None]:
        close(module.conv_transpose2d(x, w, bias, *scalars, config=config), want, dtype, 5 * 6)
    close(module.reference(x, w, bias, *scalars), want, dtype, 5 * 6)
    without = F.conv_transpose2d(x.float(), w.float(), None, stride, padding, output_padding, 1, dilation).to(dtype)
    close(module.conv_transpose2d(x, w, None, *scalars), without, dtype, 5 * 6)


@pytest.mark.parametrize(("stride", "padding", "dilation", "output_padding"),
                         [(1, 0, 1, 0), (3, 2, 2, 1), (2, 1, 3, 2)])
def test_conv_transpose1d_is_torchs(generated, stride, padding, dilation, output_padding):
    module = generated("conv_transpose1d")
    x, w, bias = randn(1, 21, 13), randn(21, 9, 4, seed=1), randn(9, seed=2)
    want = F.conv_transpose1d(x, w, bias, stride, padding, output_padding, 1, dilation)
    for config in config_indices(module):
        got = module.conv_transpose1d(x, w, bias, padding, dilation, stride, output_padding, config=config)
        close(got, want, torch.float32, 84)
    close(module.reference(x, w, bias, padding, dilation, stride, output_padding), want, torch.float32, 84)


def test_conv_transpose3d_at_a_stride_is_torchs(generated):
    module = generated("conv_transpose3d")
    x, w, bias = randn(1, 3, 2, 3, 3), randn(3, 6, 2, 2, 2, seed=1), randn(6, seed=2)
    for stride, padding, dilation, output_padding in ((2, 1, 1, 1), (1, 0, 2, 0)):
        want = F.conv_transpose3d(x, w, bias, stride, padding, output_padding, 1, dilation)
        got = module.conv_transpose3d(x, w, bias, padding, dilation, stride, output_padding)
        close(got, want, torch.float32, 3 * 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_conv_transpose2d_is_torchs(generated, dtype):
    """3 groups of 2 input channels, 3 output channels each; every config."""
    module = generated("conv_transpose2d_grouped")
    x, w = randn(1, 6, 2, 3, dtype=dtype), randn(6, 3, 2, 3, dtype=dtype, seed=1)
    stride, padding, dilation, output_padding = (2, 3), (1, 2), (2, 1), (1, 0)
    want = F.conv_transpose2d(x.float(), w.float(), None, stride, padding, output_padding, 3, dilation).to(dtype)
    scalars = (3, *padding, *dilation, *stride, *output_padding)
    for config in config_indices(module) if dtype == torch.float32 else [None]:
        close(module.conv_transpose2d_grouped(x, w, *scalars, config=config), want, dtype, 2 * 6)
    close(module.reference(x, w, *scalars), want, dtype, 2 * 6)


def test_grouped_conv_transpose3d_is_torchs(generated):
    module = generated("conv_transpose3d_grouped")
    x, w = randn(1, 4, 2, 3, 2), randn(4, 2, 2, 2, 2, seed=1)
    want = F.conv_transpose3d(x, w, None, (2, 1, 2), (1, 0, 1), (1, 0, 0), 2, (1, 2, 1))
    scalars = (2, 1, 0, 1, 1, 2, 1, 2, 1, 2, 1, 0, 0)  # groups, padding, dilation, stride, output_padding
    close(module.conv_transpose3d_grouped(x, w, *scalars), want, torch.float32, 2 * 8)
    close(module.reference(x, w, *scalars), want, torch.float32, 2 * 8)


def test_groups_that_do_not_divide_the_channels_are_refused(generated):
    module = generated("conv_transpose2d_grouped")
    with pytest.raises(ValueError, match="groups"):
        module.conv_transpose2d_grouped(randn(1, 6, 3, 3), randn(6, 2, 2, 2), 4)


def test_conv_transpose2d_nan_reaches_the_outputs_its_input_reaches(generated):
    """At stride 2 a NaN of x reaches only the outputs whose taps the stride divides, as torch's
    (a masked lane reads 0, never the NaN beside it)."""
    module = generated("conv_transpose2d")
    x, w = randn(1, 4, 4, 5), randn(4, 3, 3, 3, seed=6)
    x[0, 2, 2, 3] = float("nan")
    got = module.conv_transpose2d(x, w, None, 1, 1, 1, 1, 2, 2, 1, 1)
    want = F.conv_transpose2d(x, w, None, 2, 1, 1, 1, 1)
    assert torch.equal(got.isnan(), want.isnan()) and 0 < int(got.isnan().sum()) < got.numel()
    close(torch.nan_to_num(got), torch.nan_to_num(want), torch.float32, 36)
