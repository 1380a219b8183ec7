"""``prod``: the reduction added as one entry of :mod:`tilegen.functions` (issue 35), checked
against ``torch.prod`` in Triton's interpreter.

The spec ``specs/prod_reduction.tile`` is KernelBench level 1's former problem 50 (``torch.prod(x,
dim=1)`` of ``[B, D1, D2]``); it multiplies a running product by each tile's product, so every
block size must give torch's result (masked lanes hold 1). Inputs have both signs, zeros,
tails at every block size, and NaN/inf where the product makes them.
"""

import pytest
import torch

from tests.conftest import force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _values(*shape, seed=0):
    """Factors near 1 in magnitude (products of hundreds stay finite), both signs."""
    g = torch.Generator().manual_seed(seed)
    magnitude = torch.empty(*shape).uniform_(0.9, 1.1, generator=g)
    sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)
    return magnitude * sign




# (2, 7, 5): one partial tile of D1 (at every BK from 8 to 64) and one column tile, over two batch
# entries; (1, 67, 70): loops of D1 with a tail at every BK (67 = 64 + 3), two column tiles at BN =
# 64 and one partial one at the larger BN, rows of 70 floats (not 16-byte aligned). One batch entry
# there, as the interpreter multiplies tile by tile, an element at a time (several entries: the
# first case, and test_ops's unaligned rows)
@pytest.mark.parametrize(("b", "d1", "d2"), [(2, 7, 5), (1, 67, 70)])
def test_prod_over_the_middle_dim_at_every_config(generated, monkeypatch, b, d1, d2):
    module = generated("prod_reduction")
    x = _values(b, d1, d2, seed=d1 + d2)
    expected = torch.prod(x.double(), dim=1).float()
    for index in range(len(module._CONFIGS)):  # BK from 8 to 64, BN from 64 to 512: tails everywhere
        force_config(monkeypatch, module, index)
        torch.testing.assert_close(module.prod_reduction(x), expected, rtol=1e-5, atol=0)
    torch.testing.assert_close(module.reference(x), torch.prod(x, dim=1))


def test_prod_of_zeros_infinities_and_nan(generated):
    x = _values(2, 9, 6, seed=1)
    x[0, 3, 0] = 0.0  # a zero: 0
    x[0, 4, 1] = float("inf")  # inf with signs: +-inf
    x[0, 2, 2], x[0, 7, 2] = 0.0, float("-inf")  # 0 * inf: NaN
    x[1, 8, 3] = float("nan")  # NaN anywhere: NaN
    x[1, :, 4] = -1.0  # nine factors of -1: -1, exactly
    y = generated("prod_reduction").prod_reduction(x)
    torch.testing.assert_close(y, torch.prod(x, dim=1), equal_nan=True)
    assert y[1, 4].item() == -1.0 and torch.isnan(y[0, 2]) and torch.isnan(y[1, 3])


def test_prod_of_f16_accumulates_in_float32(compiled):
    """f16 factors multiply in float32 (as torch's CPU prod does for f16): 40 factors of 1.5
    give 1.1e7, past f16's range, in a float32 output."""
    source = """kernel rowprod
  in  x: f16[M, N]
  out y: f32[M]
  block BM = 2, BN = 8
  grid  r over M by BM
  p: f32[r] = 1
  for c over N by BN
    p = p * prod(x[r, c], dim=c)
  y[r] = p
"""
    module = compiled(source)
    x = torch.full((3, 40), 1.5, dtype=torch.float16)
    x[1] = -x[1]
    y = module.rowprod(x)
    torch.testing.assert_close(y, torch.prod(x.float(), dim=1), rtol=1e-6, atol=0)
    torch.testing.assert_close(module.reference(x), y, rtol=1e-6, atol=0)


def test_a_whole_row_prod_masks_its_tail_with_one(compiled):
    source = """kernel rowprod
  in  x: f32[M, N]
  out y: f32[M]
  block BM = 4
  grid  r over M by BM, c over N whole
  y[r] = prod(x[r, c], dim=c)
"""
    module = compiled(source)
    x = _values(5, 37, seed=2)  # a tile of 64 lanes, 27 of them masked
    torch.testing.assert_close(module.rowprod(x, BM=2), torch.prod(x, dim=1), rtol=1e-6, atol=0)


def test_a_running_product_combined_otherwise_is_refused():
    """``p = p + prod(...)`` adds the tiles' products: a result that depends on the block."""
    source = """kernel rowprod
  in  x: f32[M, N]
  out y: f32[M]
  block BM = 2, BN = 8
  grid  r over M by BM
  p: f32[r] = 0
  for c over N by BN
    p = p + prod(x[r, c], dim=c)
  y[r] = p
"""
    with pytest.raises(SpecError, match="would give a result that depends on the block size"):
        compile_spec(source, "rowprod.tile")


def test_prod_of_integers_asks_for_a_cast():
    source = """kernel rowprod
  in  x: i32[M, N]
  out y: f32[M]
  block BM = 4
  grid  r over M by BM, c over N whole
  y[r] = prod(x[r, c], dim=c)
"""
    with pytest.raises(SpecError, match=r"'prod' takes a float tile; cast it first, e.g. prod\(f32\(x\), dim=c\)"):
        compile_spec(source, "rowprod.tile")
