"""``argmax`` and ``argmin`` (reductions to torch's int64 index) against torch.argmax/argmin in
Triton's interpreter: KernelBench level 1's problems 51 and 52 (over the middle dimension of
[B, D1, D2]) at every config, with tails, ties (torch's index is the first), NaN (torch's index
is the first NaN, for both), infinities and a row of one value; and the checker's refusals.

Values are drawn without near ties (distinct multiples of 1/8), so the index is unambiguous.
"""

import pytest
import torch

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
        monkeypatch.setattr(module, "_tuned_index", lambda launcher, key, index=index: index)
        module._TUNED.clear()
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
    ("grid  r over M by BM\n  for c over N by BN\n    i = argmax(x[r, c], dim=c)\n  y[r] = 0",
     "", r"'argmax' reduces a 'whole' axis .* merging the indices of several tiles is not in the language yet"),
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
