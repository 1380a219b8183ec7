"""Offset axes: an index that is an axis plus or minus sizes and integers (``x[r, c + N / 2]``),
its lanes outside the tensor reading 0, in the kernel and in the reference alike; and the rotary
embedding written with them (specs/rope.tile), against Hugging Face's ``rotate_half`` form,
checked in Triton's interpreter."""

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("heads", "kv_heads", "d"), [(4, 2, 8), (3, 1, 6), (2, 2, 64)])
def test_rope_matches_rotate_half(generated, dtype, heads, kv_heads, d):
    module = generated("rope")
    q, k = _randn(2, heads, 5, d, seed=1, dtype=dtype), _randn(2, kv_heads, 5, d, seed=2, dtype=dtype)
    angles = _randn(5, d // 2, seed=3)
    cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
    for x, ours, theirs in zip((q, k), module.rope(q, k, cos, sin), module.reference(q, k, cos, sin), strict=True):
        h = x.double()
        expected = (h * cos.double() + _rotate_half(h) * sin.double()).to(dtype)
        ulp = 1e-3 if dtype == torch.float16 else 1e-6  # rounded once from float32
        torch.testing.assert_close(ours, expected, rtol=ulp, atol=ulp)
        torch.testing.assert_close(theirs, ours, rtol=0, atol=0)


SHIFTS = """\
kernel shifts
  in  x: f32[M, N]
  out forward: f32[M, N]
  out skewed: f32[M, N]
  block BM = 2, BN = 4
  grid  r over M by BM, c over N by BN
  forward[r, c] = x[r, c + 1] - x[r, c]
  skewed[r, c] = x[r, c + N / 2 - 1]
"""


@pytest.mark.parametrize(("bm", "bn"), [(1, 1), (2, 4), (4, 16)])
def test_offsets_read_zero_outside_the_tensor_at_every_block(tmp_path, bm, bn):
    from tilegen.runner import load_module

    path = tmp_path / "shifts.py"
    path.write_text(compile_spec(SHIFTS, "shifts.tile").source, encoding="utf-8")
    module = load_module(path)
    x = _randn(5, 9, seed=bm + bn)
    padded = torch.cat((x, torch.zeros(5, 9)), dim=1)  # what lies past the row reads 0
    forward, skewed = module.shifts(x, BM=bm, BN=bn)
    torch.testing.assert_close(forward, padded[:, 1:10] - x)
    torch.testing.assert_close(skewed, padded[:, 3:12])  # N / 2 - 1 = 3
    for ours, theirs in zip(module.reference(x), (forward, skewed), strict=True):
        torch.testing.assert_close(ours, theirs)


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


HEAD = ("kernel k\n  in  x: f32[M, N]\n  in  s: f32\n  out y: f32[M, N]\n  block BN = 8\n"
        "  grid r over M, c over N by BN\n")


@pytest.mark.parametrize(("line", "words"), [
    ("  y[r, c + 1] = x[r, c]\n", "a store's index takes axes and constants"),
    ("  y[r, c] = x[r, 2 * c]\n", "'c' must enter with a factor of 1"),
    ("  y[r, c] = x[r, N - c]\n", "'c' must enter with a factor of 1"),
    ("  y[r, c] = x[r, c + 0.5]\n", "takes integers, not 0.5"),
    ("  y[r, c] = x[r, c + s]\n", "is not an axis, a size or an integer scalar input"),
    ("  y[r, c] = x[r, c + (N < 2)]\n", "arithmetic (+ - * /) of axes, sizes and integers"),
])
def test_what_an_offset_may_not_say(line, words):
    assert any(words in message for message in _errors(HEAD + line))


def test_an_offset_loads_through_pointers_only():
    text = HEAD.replace("block BN = 8\n", "block BN = 8\n  access block_ptr\n") + "  y[r, c] = x[r, c + 1]\n"
    assert any("loads through pointers only" in message for message in _errors(text))
