"""``argmax`` and ``argmin`` (reductions to torch's int64 index) against torch.argmax/argmin in
Triton's interpreter: KernelBench level 1's problems 51 and 52 (over the middle dimension of
[B, D1, D2]) at every config, with tails, ties (torch's index is the first), NaN (torch's index
is the first NaN, for both), infinities and a row of one value; a whole axis walked in tiles
(``k over D1 by BK whole``: indices merged across tiles) at tiles of 1 to 64; and the checker's
refusals.

Values are drawn without near ties (distinct multiples of 1/8), so the index is unambiguous.
"""

import pytest
import torch

from tests.conftest import force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _distinct(*shape, seed=0):
    """Values of both signs, distinct along dim 1 (a permutation of multiples of 1/8)."""
    g = torch.Generator().manual_seed(seed)
    b, d1, d2 = shape
    ranks = torch.stack([torch.stack([torch.randperm(d1, generator=g) for _ in range(d2)], dim=1)
                         for _ in range(b)])
    return (ranks.float() - d1 / 2) / 8


@pytest.mark.parametrize("kernel", ["argmax_dim1", "argmin_dim1"])
@pytest.mark.parametrize(("b", "d1", "d2"), [(2, 7, 5), (3, 100, 33), (1, 1, 9), (2, 129, 3)])
def test_arg_reduction_matches_torch_at_every_config(generated, monkeypatch, kernel, b, d1, d2):
    module = generated(kernel)
    x = _distinct(b, d1, d2, seed=d1 * d2)
    want = (torch.argmax if kernel == "argmax_dim1" else torch.argmin)(x, dim=1)
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        y = getattr(module, kernel)(x)
        assert y.dtype == torch.int64 and torch.equal(y, want), (index, y, want)
    assert torch.equal(module.reference(x), want)


@pytest.mark.parametrize("kernel", ["argmax_dim1", "argmin_dim1"])
def test_ties_nan_and_infinities_take_torchs_index(generated, kernel):
    x = torch.zeros(1, 6, 7)
    x[0, :, 0] = torch.tensor([1.0, 3.0, 3.0, -2.0, 3.0, -2.0])  # ties: the first
    x[0, :, 1] = torch.tensor([1.0, float("nan"), 5.0, float("nan"), -9.0, 0.0])  # the first NaN
    x[0, :, 2] = torch.tensor([float("-inf")] * 6)  # one value: index 0
    x[0, :, 3] = torch.tensor([0.0, float("inf"), 2.0, float("-inf"), float("inf"), 1.0])
    x[0, :, 4] = torch.tensor([-0.0, 0.0, -0.0, 0.0, 0.0, -0.0])  # signed zeros are equal
    x[0, :, 5] = torch.tensor([7.0, 6.0, 5.0, 4.0, 3.0, 2.0])
    x[0, :, 6] = torch.tensor([2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    torch_fn = torch.argmax if kernel == "argmax_dim1" else torch.argmin
    y = getattr(generated(kernel), kernel)(x)
    assert torch.equal(y, torch_fn(x, dim=1)), (y, torch_fn(x, dim=1))




def test_argmax_of_f16_rows_and_its_use_in_arithmetic(compiled):
    """Along a row of f16, the index used as a number (an int64 tile times 2, stored as f32)."""
    module = compiled("""kernel k
  in  x: f16[M, N]
  out y: f32[M]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r] = argmax(x[r, c], dim=c) * 2 + argmin(x[r, c], dim=c)
""")
    x = (torch.stack([torch.randperm(37, generator=torch.Generator().manual_seed(i)) for i in range(5)]) - 18).half()
    want = (torch.argmax(x, dim=1) * 2 + torch.argmin(x, dim=1)).float()
    assert torch.equal(module.k(x), want)
    assert torch.equal(module.reference(x), want)


@pytest.mark.parametrize(("grid", "body", "message"), [
    ("grid  r over M by BM\n  best: i64[r] = 0\n  for c over N by BN\n    best = maximum(best, argmax(x[r, c], dim=c))",
     "  y[r] = best", r"'best' is carried across the steps of the loop"),
    ("grid  r over M by BM, c over N by BN", "  y[r] = argmax(x[r, c], dim=c)",
     r"'c' is a grid axis tiled by BN, so one program sees one tile of N"),
    ("grid  r over M by BM, c over N whole", "  y[r] = argmax(i32(x[r, c]), dim=c)",
     r"'argmax' takes a float tile; cast it first"),
])
def test_bad_arg_reductions_get_a_message(grid, body, message):
    source = f"""kernel k
  in  x: f32[M, N]
  out y: i64[M]
  block BM = 2, BN = 16
  {grid}
{body}
"""
    with pytest.raises(SpecError, match=message):
        compile_spec(source, "k.tile")


def test_argmax_of_bf16(compiled):
    """bf16 rows (with a tail): the helper compares them in float32, exactly; Triton's interpreter
    orders raw bf16 wrongly in tl.argmax, which gave the padding lane's index before."""
    module = compiled("""kernel k
  in  x: bf16[M, N]
  out y: i64[M]
  out z: i64[M]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r] = argmax(x[r, c], dim=c)
  z[r] = argmin(x[r, c], dim=c)
""")
    x = (torch.stack([torch.randperm(9, generator=torch.Generator().manual_seed(i)) for i in range(7)]) - 4).bfloat16()
    y, z = module.k(x)
    assert torch.equal(y, torch.argmax(x, dim=1)) and torch.equal(z, torch.argmin(x, dim=1))


def _hard(b, d1, d2, seed):
    """Small integers (ties everywhere) with NaN, inf and -inf sprinkled in, and every fifth draw
    a tensor of -inf alone (torch's index 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (b, d1, d2), generator=g).float()
    r = torch.rand(x.shape, generator=g)
    x[r < 0.03] = float("nan")
    x[(r >= 0.03) & (r < 0.08)] = float("inf")
    x[(r >= 0.08) & (r < 0.12)] = float("-inf")
    if seed % 5 == 0:
        x[:] = float("-inf")
    return x


@pytest.mark.parametrize("func", ["argmax", "argmin"])
@pytest.mark.parametrize("bk", [1, 2, 8, 64])
def test_indices_merged_across_tiles(compiled, func, bk):
    """``k over D1 by BK whole``: each program walks D1 in tiles of BK, a tile replacing the running
    index where its value is strictly better (ties keep the earlier tile's, torch's first) or it
    holds the first NaN; the same index as torch's for every tile size, ties, NaN and infinities
    across tiles, tails, and a column of -inf alone."""
    module = compiled(f"""kernel k
  in  x: f32[B, D1, D2]
  out y: i64[B, D2]
  block BK = {bk}, BN = 4
  grid  b over B, n over D2 by BN, k over D1 by BK whole
  y[b, n] = {func}(x[b, k, n], dim=k)
""")
    torch_fn = getattr(torch, func)
    shapes = [(2, 1, 3), (1, 7, 5), (2, 33, 9), (1, 65, 4), (2, 100, 6)]
    # tiles of 1: the short ones; of 2: not (2, 100, 6), which has no tail there (100 is even) and
    # merges 50 tiles where (1, 65, 4) merges 33 and a tail
    for seed, (b, d1, d2) in enumerate(shapes[:3] if bk == 1 else shapes[:4] if bk == 2 else shapes):
        x = _hard(b, d1, d2, seed)
        assert torch.equal(module.k(x), torch_fn(x, dim=1)), (seed, b, d1, d2)
        assert torch.equal(module.reference(x), torch_fn(x, dim=1))


@pytest.mark.parametrize("kernel", ["argmax_dim1", "argmin_dim1"])
def test_specs_walk_d1_in_tiles(generated, monkeypatch, kernel):
    """The KernelBench specs' configs tile D1 by 8 to 64: hard inputs (ties, NaN, inf) at each."""
    module = generated(kernel)
    torch_fn = torch.argmax if kernel == "argmax_dim1" else torch.argmin
    x = _hard(2, 97, 5, seed=3)
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        assert torch.equal(getattr(module, kernel)(x), torch_fn(x, dim=1)), index


@pytest.mark.parametrize(("axis", "body", "message"), [
    ("k over D1 by BK whole", "  y[b, n] = sum(cumsum(x[b, k, n], dim=k), dim=k)",
     r"'k over D1 by BK whole' walks D1 in tiles of BK, which this spec's body cannot take"),
    ("k over D1 by BQ whole", "  y[b, n] = sum(x[b, k, n], dim=k)", r"unknown block size 'BQ'"),
])
def test_bad_whole_axes_in_tiles_get_a_message(axis, body, message):
    source = f"""kernel k
  in  x: f32[B, D1, D2]
  out y: f32[B, D2]
  block BK = 8, BN = 4
  grid  b over B, n over D2 by BN, {axis}
{body}
"""
    with pytest.raises(SpecError, match=message):
        compile_spec(source, "k.tile")


def test_a_loop_axis_is_not_whole():
    source = """kernel k
  in  x: f32[M, N]
  out y: f32[M]
  block BM = 2, BN = 8
  grid  r over M by BM
  s: f32[r] = 0
  for c over N by BN whole
    s += sum(x[r, c], dim=c)
  y[r] = s
"""
    with pytest.raises(SpecError, match=r"'whole' is for grid axes"):
        compile_spec(source, "k.tile")
