"""Masks as data: the ``bool`` dtype in and out (torch.bool tensors), ``where`` picking with a
bool input, ``any``/``all`` over a whole axis, and KernelBench level 1's masked cumulative sum
(problem 93), checked in Triton's interpreter against torch written here."""

import pytest
import torch

from tests.conftest import config_indices, force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _values(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g), torch.rand(*shape, generator=g) < 0.5


@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 7), (9, 130)])
def test_masked_cumsum_at_every_config(generated, monkeypatch, m, n):
    module = generated("cumsum_masked")
    x, mask = _values(m, n, seed=m + n)
    expected = torch.cumsum(x.double() * mask, dim=1).float()
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        torch.testing.assert_close(module.cumsum_masked(x, mask), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.reference(x, mask), expected, rtol=1e-5, atol=1e-5)


ROWS = """\
kernel rows
  in  x: f32[M, N]
  in  keep: bool[M, N]
  out some: bool[M]
  out every: bool[M]
  out positive: bool[M, N]
  block BM = 2
  grid  r over M by BM, c over N whole
  some[r] = any(x[r, c] > 0, dim=c)
  every[r] = all(keep[r, c], dim=c)
  positive[r, c] = x[r, c] > 0 & keep[r, c]
"""


@pytest.mark.parametrize("n", [1, 7, 33])
def test_any_all_and_bool_outputs(compiled, n):
    module = compiled(ROWS)
    x, keep = _values(5, n, seed=n)
    x[0], keep[1] = -1.0, True  # a row with nothing positive; a row kept whole
    keep[2, -1] = False  # the last lane, next to the padding, decides 'all'
    some, every, positive = module.rows(x, keep)
    assert some.dtype == every.dtype == positive.dtype == torch.bool
    assert torch.equal(some, (x > 0).any(dim=1)) and not some[0]
    assert torch.equal(every, keep.all(dim=1)) and every[1] and not every[2]
    assert torch.equal(positive, (x > 0) & keep)
    for ours, theirs in zip(module.reference(x, keep), (some, every, positive), strict=True):
        assert torch.equal(ours, theirs)


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


HEAD = "kernel k\n  in  x: f32[M, N]\n  in  keep: bool[M, N]\n  out y: bool[M]\n  block BM = 2, BN = 8\n"


@pytest.mark.parametrize(("body", "words"), [
    ("  grid r over M by BM, c over N whole\n  y[r] = any(x[r, c], dim=c)\n", "'any' takes a mask"),
    ("  grid r over M by BM, c over N whole\n  y[r] = sum(keep[r, c], dim=c) > 0\n", "'sum' takes numbers, not a mask"),
    ("  grid r over M by BM, c over N by BN\n  y[r] = all(keep[r, c], dim=c)\n", "whole"),
])
def test_what_masks_may_not_do(body, words):
    assert any(words in message for message in _errors(HEAD + body))


@pytest.mark.parametrize("bc", [1, 4, 16])
def test_any_all_across_tiles(compiled, bc):
    """``any``/``all`` merge across tiles with ``|``/``&`` (their ``combine``): a row walked in
    tiles of BC (``c over N by BC whole``), and a value carried in a ``for`` loop, both as torch's."""
    walked = compiled(ROWS.replace("block BM = 2", f"block BM = 2, BC = {bc}").replace(
        "c over N whole", "c over N by BC whole"), name="walked")
    carried = compiled(f"""kernel carried
  in  x: f32[M, N]
  in  keep: bool[M, N]
  out some: bool[M]
  out every: bool[M]
  block BM = 2, BC = {bc}
  grid  r over M by BM
  s: bool[r] = 0
  e: bool[r] = 1
  for c over N by BC
    s = s | any(x[r, c] > 0, dim=c)
    e = e & all(keep[r, c], dim=c)
  some[r] = s
  every[r] = e
""", name="carried")
    for n in (1, 7, 33):
        x, keep = _values(5, n, seed=n)
        x[0], keep[1] = -1.0, True
        keep[2, -1] = False
        some, every, positive = walked.rows(x, keep)
        assert torch.equal(some, (x > 0).any(dim=1)) and torch.equal(every, keep.all(dim=1))
        assert torch.equal(positive, (x > 0) & keep)
        some, every = carried.carried(x, keep)
        assert torch.equal(some, (x > 0).any(dim=1)) and torch.equal(every, keep.all(dim=1))
        for ours, theirs in zip(carried.reference(x, keep), (some, every), strict=True):
            assert torch.equal(ours, theirs)
