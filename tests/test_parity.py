"""Generated kernels against hand-written seed kernels (bit-exact) and their torch reference.

Runs in Triton's interpreter; shapes include 1, 7, 33, 127, non-square and transposed views.
"""

import pytest
import torch

from tests.conftest import spec_named
from tests.reference import copy as ref_copy
from tests.reference import grayscale as ref_grey
from tests.reference import matmul as ref_matmul
from tests.reference import swizzle as ref_swizzle
from tilegen.tolerance import assert_close


def _rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("n", [1, 7, 33, 127, 1000, 4097])
def test_copy_matches_seed_and_reference(generated, n):
    mod = generated("copy")
    x = _rand(n, dtype=torch.float32, seed=n)
    z = mod.copy(x, BS=1024)
    assert torch.equal(z, ref_copy.copy(x, bs=1024))
    assert torch.equal(z, mod.reference(x))
    assert torch.equal(z, x)


def test_copy_strided_view(generated):
    base = _rand(200, dtype=torch.float32)
    view = base[3::3]
    assert torch.equal(generated("copy").copy(view, BS=16), view)


@pytest.mark.parametrize("h,w", [(1, 1), (7, 33), (33, 127), (64, 64)])
def test_grayscale_matches_seed_and_reference(generated, h, w):
    mod = generated("rgb2grey")
    g = torch.Generator().manual_seed(h * w)
    x = torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
    y = mod.rgb2grey(x, BH=32, BW=32)
    assert y.dtype == torch.uint8 and y.shape == (h, w)
    assert torch.equal(y, ref_grey.rgb2grey(x, bs=(32, 32)))
    assert torch.equal(y, mod.reference(x))


def test_grayscale_channel_last_view(generated):
    """An HWC image permuted to CHW (non-contiguous) gives the same grey image."""
    mod = generated("rgb2grey")
    g = torch.Generator().manual_seed(1)
    hwc = torch.randint(0, 256, (9, 13, 3), generator=g, dtype=torch.uint8)
    chw = hwc.permute(2, 0, 1)
    assert torch.equal(mod.rgb2grey(chw, BH=8, BW=8), ref_grey.rgb2grey(chw.contiguous(), bs=(8, 8)))


MATMUL_SHAPES = [(1, 16, 1), (7, 32, 33), (33, 16, 127), (127, 48, 7), (64, 64, 64)]


#: Layouts: a and b row-major (n) or transposed views (t); every shape runs nn and tt, the shapes
#: with tails in M and N both (33 x 127, 127 x 7) one operand transposed too.
MATMUL_CASES = [(*shape, layout) for shape in MATMUL_SHAPES
                for layout in (["nn", "tn", "nt", "tt"] if shape in [(33, 16, 127), (127, 48, 7)] else ["nn", "tt"])]


@pytest.mark.parametrize("kernel", ["matmul_naive", "matmul_grouped"])
@pytest.mark.parametrize("m,k,n,layout", MATMUL_CASES)
def test_matmul_matches_seed_and_reference(generated, kernel, m, k, n, layout):
    mod = generated(kernel)
    a = _rand(k, m, seed=m).t() if layout[0] == "t" else _rand(m, k, seed=m)
    b = _rand(n, k, seed=n + 1).t() if layout[1] == "t" else _rand(k, n, seed=n + 1)
    blocks = {"BM": 16, "BN": 16, "BK": 16}
    if kernel == "matmul_grouped":
        c = mod.matmul_grouped(a, b, GROUP_SIZE=2, **blocks)
        hand = ref_matmul.grouped_matmul(a, b, bm=16, bn=16, bk=16, group_sz=2)
    else:
        c = mod.matmul_naive(a, b, **blocks)
        hand = ref_matmul.naive_matmul(a, b, bm=16, bn=16, bk=16)
    assert c.dtype == torch.float16 and c.shape == (m, n)
    assert torch.equal(c, hand)
    assert_close(spec_named(kernel), (a, b), c, mod.reference(a, b), mod.reference)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=1e-2)


def test_matmul_default_blocks(generated):
    mod = generated("matmul_grouped")
    a, b = _rand(65, 128), _rand(128, 33, seed=2)
    c = mod.matmul_grouped(a, b)
    assert torch.equal(c, ref_matmul.grouped_matmul(a, b, bm=64, bn=64, bk=64, group_sz=8))


def test_swizzle_demo_exact_result(generated):
    """The lecture's 5x4 grid with group 3 (expected matrix copied from the seed's output)."""
    mod = generated("swizzle")
    x = torch.arange(20).view(5, 4)
    z = mod.swizzle(x)
    expected = torch.tensor(
        [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11], [12, 14, 16, 18], [13, 15, 17, 19]]
    )
    assert torch.equal(z, expected)
    assert torch.equal(z, ref_swizzle.swizzle(x, group_sz=3))
    assert torch.equal(z, mod.reference(x))


@pytest.mark.parametrize("m,n,group", [(7, 3, 2), (4, 9, 4), (1, 5, 3)])
def test_swizzle_other_grids(generated, m, n, group):
    mod = generated("swizzle")
    x = torch.arange(m * n).view(m, n)
    z = mod.swizzle(x, GROUP_SIZE=group)
    assert torch.equal(z, ref_swizzle.swizzle(x, group_sz=group))
    assert torch.equal(z, mod.reference(x, GROUP_SIZE=group))
    assert torch.equal(z.flatten().sort().values, x.flatten())  # a permutation


def test_unmasked_k_refuses_non_multiple(generated):
    mod = generated("matmul_naive")
    a, b = _rand(16, 20), _rand(20, 16)
    with pytest.raises(ValueError, match=r"K = 20 must be a multiple of BK = 16"):
        mod.matmul_naive(a, b, BM=16, BN=16, BK=16)


def test_launcher_names_tensor_and_dimension(generated):
    mod = generated("matmul_naive")
    with pytest.raises(TypeError, match=r"matmul_naive: a must have dtype torch\.float16"):
        mod.matmul_naive(_rand(16, 16, dtype=torch.float32), _rand(16, 16))
    with pytest.raises(ValueError, match=r"b dimension 0 \(K\) is 32, but a dimension 1 gives K = 16"):
        mod.matmul_naive(_rand(16, 16), _rand(32, 16))
    with pytest.raises(ValueError, match="x dimension 0 must be 3"):
        generated("rgb2grey").rgb2grey(torch.zeros(4, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="block size BS must be a power of two"):
        generated("copy").copy(torch.zeros(8), BS=100)


def test_empty_input_returns_empty_output(generated):
    z = generated("copy").copy(torch.zeros(0))
    assert z.shape == (0,)
