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
@pytest.mark.parametrize(("heads", "kv_heads", "d", "shared"), [(4, 2, 8, False), (3, 1, 6, True), (2, 2, 64, False)])
def test_rope_matches_rotate_half(generated, dtype, heads, kv_heads, d, shared):
    """Each sequence's own tables ([B, S, D], as Hugging Face's rotary embedding makes them from
    its position ids), or one table for the batch expanded to [B, S, D] (stride 0, no copy)."""
    module = generated("rope")
    q, k = _randn(2, heads, 5, d, seed=1, dtype=dtype), _randn(2, kv_heads, 5, d, seed=2, dtype=dtype)
    angles = _randn(1, 5, d // 2, seed=3).expand(2, 5, d // 2) if shared else _randn(2, 5, d // 2, seed=3)
    cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
    if shared:
        cos, sin = cos[:1].expand(2, 5, d), sin[:1].expand(2, 5, d)
        assert cos.stride(0) == 0
    for x, ours, theirs in zip((q, k), module.rope(q, k, cos, sin), module.reference(q, k, cos, sin), strict=True):
        h = x.double()
        expected = (h * cos.double()[:, None] + _rotate_half(h) * sin.double()[:, None]).to(dtype)
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
    x = _randn(5, 10, seed=bm + bn)
    padded = torch.cat((x, torch.zeros(5, 10)), dim=1)  # what lies past the row reads 0
    forward, skewed = module.shifts(x, BM=bm, BN=bn)
    torch.testing.assert_close(forward, padded[:, 1:11] - x)
    torch.testing.assert_close(skewed, padded[:, 4:14])  # N / 2 - 1 = 4
    for ours, theirs in zip(module.reference(x), (forward, skewed), strict=True):
        torch.testing.assert_close(ours, theirs)
    odd = r"^shifts: the index c \+ N / 2 - 1 of x needs N \(9\) to be a multiple of 2$"
    with pytest.raises(ValueError, match=odd):
        module.shifts(_randn(5, 9), BM=bm, BN=bn)  # a quotient of sizes in an index divides: no half row of 4.5


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


HEAD = ("kernel k\n  in  x: f32[M, N]\n  in  s: f32\n  out y: f32[M, N]\n  block BN = 8\n"
        "  grid r over M, c over N by BN\n")


@pytest.mark.parametrize(("line", "words"), [
    ("  y[r + 1, c + 1] = x[r, c]\n", "takes one offset index, not several"),
    ("  y[r, 2 * c] = x[r, c]\n", "'c' must enter a store with '=' with a factor of 1"),
    ("  y[r, N - c] = x[r, c]\n", "'c' must enter a store with '=' with a factor of 1"),
    ("  y[r, c] = x[r, c * c]\n", "tile axis 'c' is multiplied by tile axis 'c'"),
    ("  y[r, c] = x[r, c / 2]\n", "tile axis 'c' is divided"),
    ("  y[r, c] = x[r, c + c]\n", "tile axis 'c' enters the index of 'x' twice"),
    ("  y[r, c] = x[r, c + 0.5]\n", "takes integers, not 0.5"),
    ("  y[r, c] = x[r, c + s]\n", "is not an axis, a size or an integer scalar input"),
    ("  y[r, c] = x[r, c + (N < 2)]\n", "arithmetic (+ - * /) of axes, sizes and integers"),
    ("  y[r, c] = x[r, abs(c)]\n", "a call ('abs') cannot index 'x'"),  # crashed the checker (AttributeError)
    ("  y[r, abs(c)] = x[r, c]\n", "a call ('abs') cannot index 'y'"),
])
def test_what_an_offset_may_not_say(line, words):
    assert any(words in message for message in _errors(HEAD + line))


def test_an_offset_loads_through_pointers_only():
    """Block pointers take no offset; a descriptor only one of index axes and sizes (one number per
    program, below), not a tile axis's."""
    for access in ("block_ptr", "descriptor"):
        text = HEAD.replace("block BN = 8\n", f"block BN = 8\n  access {access}\n") + "  y[r, c] = x[r, c + 1]\n"
        assert any("goes through pointers only" in message for message in _errors(text))


GROUPED = """
kernel grouped
  in  x: f32[B, H, N]
  in  w: f32[B, G, N]
  out y: f32[B, H, N]
  block BN = 16
  grid  z over B, h over H, c over N by BN
  access {access}
  y[z, h, c] = x[z, h, c] + w[z, h / (H / G), c]
"""


@pytest.mark.parametrize("access", ["pointers", "descriptor"])
def test_an_offset_of_index_axes_reads_one_row_per_program(compiled, access):
    """``w[z, h / (H / G), c]``: the row of group h / (H / G), through pointers or as a descriptor's
    offset (a block of 1); the launch refuses H not a multiple of G."""
    module = compiled(GROUPED.format(access=access), f"grouped_{access}")
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 6, 40, generator=g), torch.randn(2, 3, 40, generator=g)
    torch.testing.assert_close(module.grouped(x, w), x + w.repeat_interleave(2, dim=1))
    with pytest.raises(ValueError, match="multiple of G"):
        module.grouped(x, torch.randn(2, 4, 40))


# Stores at offsets: the shifted row, lanes that fall outside the output left out (each element is
# stored by one program only: two stores to overlapping places from different programs would race).
STORED = """
kernel shifted
  in  x: f32[M, N]
  out y: f32[M, N]
  out halves: f32[M, N]
  block BM = 2, BN = 4
  grid  r over M by BM, c over N by BN
  y[r, c + 2] = x[r, c] * 2
  halves[r, (c + N / 2) - N / 2] = x[r, c]
"""


@pytest.mark.parametrize(("bm", "bn"), [(1, 1), (2, 4), (4, 16)])
def test_stores_at_offsets_leave_out_the_lanes_outside(tmp_path, bm, bn):
    from tilegen.runner import load_module

    path = tmp_path / "shifted.py"
    path.write_text(compile_spec(STORED, "shifted.tile").source, encoding="utf-8")
    module = load_module(path)
    x = _randn(5, 10, seed=bm * bn)
    expected = torch.zeros(5, 10)
    expected[:, 2:] = x[:, :8] * 2
    y, halves = module.shifted(x, BM=bm, BN=bn)
    torch.testing.assert_close(halves, x)
    torch.testing.assert_close(y[:, 2:], expected[:, 2:])  # its first two columns: nothing stores them
    ours, copy = module.reference(x)
    torch.testing.assert_close(ours[:, 2:], expected[:, 2:])
    torch.testing.assert_close(copy, x)


# A derived extent: an axis over C / G (G an integer input), the launcher checking that G divides C.
GROUPS = """
kernel group_sums
  in  x: f32[B, C]
  in  G: i32 in [2, 2]
  out y: f32[B, G]
  out spread: f32[B, C]
  grid  b over B, g over G, c over C / G whole
  total = sum(x[b, g * (C / G) + c], dim=c)
  y[b, g] = total
  spread[b, g * (C / G) + c] = x[b, g * (C / G) + c] - total / (C / G)
"""


@pytest.mark.parametrize(("c", "groups"), [(6, 2), (6, 3), (7, 7), (12, 1)])
def test_an_axis_over_a_derived_extent(tmp_path, c, groups):
    from tilegen.runner import load_module

    path = tmp_path / "group_sums.py"
    path.write_text(compile_spec(GROUPS, "group_sums.tile").source, encoding="utf-8")
    module = load_module(path)
    x = _randn(3, c, seed=c + groups)
    grouped = x.reshape(3, groups, c // groups)
    y, spread = module.group_sums(x, groups)
    torch.testing.assert_close(y, grouped.sum(-1))
    torch.testing.assert_close(spread, (grouped - grouped.mean(-1, keepdim=True)).reshape(3, c))
    for ours, theirs in zip(module.reference(x, groups), (y, spread), strict=True):
        torch.testing.assert_close(ours, theirs)
    assert "C_over_G = (C // G)" in path.read_text()  # computed once by the launcher, passed as a size


@pytest.mark.parametrize(("c", "groups"), [(6, 4), (6, 0)])
def test_a_derived_extent_that_does_not_divide_is_refused(tmp_path, c, groups):
    from tilegen.runner import load_module

    path = tmp_path / "group_sums.py"
    path.write_text(compile_spec(GROUPS, "group_sums.tile").source, encoding="utf-8")
    module = load_module(path)
    with pytest.raises(ValueError, match=rf"group_sums: the extent \(C / G\) needs C \({c}\) to be a multiple of G"):
        module.group_sums(torch.zeros(2, c), groups)


@pytest.mark.parametrize(("grid", "words"), [
    ("  grid  b over B, g over G, c over C / eps whole\n", "integer scalar inputs and positive integers"),
    ("  grid  b over B, g over G, c over C / 0 whole\n", "integer scalar inputs and positive integers"),
    ("  grid  b over B, g over G, c over C < G whole\n", "unexpected"),
])
def test_what_a_derived_extent_may_not_say(grid, words):
    text = GROUPS.replace("  grid  b over B, g over G, c over C / G whole\n", grid).replace(
        "  in  G: i32 in [2, 2]\n", "  in  G: i32 in [2, 2]\n  in  eps: f32\n")
    assert any(words in message for message in _errors(text))


def _shift(x, dim, by):
    """``x`` read at ``i + by`` along ``dim``: 0 where that falls outside (what an offset reads)."""
    out = torch.zeros_like(x)
    n = x.shape[dim]
    src, dst = slice(max(by, 0), n + min(by, 0)), slice(max(-by, 0), n - max(by, 0))
    lead = (slice(None),) * dim
    out[(*lead, dst)] = x[(*lead, src)]
    return out


# Offsets on program axes (no block: one program per index), alone and beside a tile axis, masked or
# not. Triton 3.9's interpreter raised "mask has unsupported dtype" for every one: the program's own
# truth value (pid_h - 1 >= 0) combined into the tile's mask by & came out a tile of int32.
PROGRAM_OFFSETS = [
    ("  in  x: f32[H, N]\n  out y: f32[H, N]\n  out z: f32[H, N]\n  block BN = 4\n"
     "  grid  h over H, n over N by BN{unmasked}\n  y[h, n] = x[h - 1, n]\n  z[h + 2, n] = x[h, n] * 2\n",
     (5, 8), lambda x: (_shift(x, 0, -1), _shift(x, 0, -2) * 2), (slice(2, None),)),
    ("  in  x: f32[A, B, N]\n  out y: f32[A, B, N]\n  block BN = 4\n"
     "  grid  a over A, b over B, n over N by BN{unmasked}\n  y[a, b, n] = x[a - 1, b, n] + x[a, b + 1, n]\n",
     (3, 4, 8), lambda x: (_shift(x, 0, -1) + _shift(x, 1, 1),), None),
    ("  in  x: f32[A, B, C]\n  out y: f32[A, B, C]\n  grid  a over A, b over B, c over C\n"
     "  y[a, b, c] = x[a + 1, b, c] - x[a, b - 2, c + 3]\n",
     (3, 4, 5), lambda x: (_shift(x, 0, 1) - _shift(_shift(x, 1, -2), 2, 3),), None),
    ("  in  x: f32[A, B, C, N]\n  out y: f32[A, B, C, N]\n  grid  a over A, b over B, c over C, n over N whole\n"
     "  y[a, b, c, n] = x[a, b, c - 1, n] + x[a + 1, b - 1, c, n]\n",
     (2, 3, 4, 5), lambda x: (_shift(x, 2, -1) + _shift(_shift(x, 0, 1), 1, -1),), None),
]


@pytest.mark.parametrize(("body", "shape", "oracle", "stored"), [
    (body.replace("{unmasked}", unmasked), *rest)
    for body, *rest in PROGRAM_OFFSETS
    for unmasked in (["", " unmasked"] if "{unmasked}" in body else [""])  # a tile axis with no mask too
])
def test_offsets_on_program_axes(compiled, body, shape, oracle, stored):
    module = compiled("kernel k\n" + body)
    x = _randn(*shape, seed=len(shape))
    got, want = module.k(x), oracle(x)
    got, reference = (got,) if isinstance(got, torch.Tensor) else got, module.reference(x)
    reference = (reference,) if isinstance(reference, torch.Tensor) else reference
    for index, (ours, theirs, ref) in enumerate(zip(got, want, reference, strict=True)):
        part = stored if index == 1 and stored is not None else (slice(None),)  # rows nothing stores: left out
        torch.testing.assert_close(ours[part], theirs[part], rtol=0, atol=0)
        torch.testing.assert_close(ref[part], theirs[part], rtol=0, atol=0)


# GQA's head of k: h / (H / HK) query heads share one of k's. With H = 6, HK = 4 the group was
# 6 // 4 = 1, heads 4 and 5 read past k and came out zeros, with no error.
GQA = """kernel gqa
  in  q: f32[B, H, N]
  in  k: f32[B, HK, N]
  out y: f32[B, H, N]
  grid  z over B, h over H, n over N whole
  y[z, h, n] = q[z, h, n] + k[z, h / (H / HK), n]
"""


@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 3), (6, 1), (4, 4)])
def test_an_axis_divided_by_a_quotient_of_sizes(compiled, heads, kv_heads):
    module = compiled(GQA)
    q, k = _randn(2, heads, 5, seed=heads), _randn(2, kv_heads, 5, seed=kv_heads)
    want = q + k.repeat_interleave(heads // kv_heads, dim=1)
    torch.testing.assert_close(module.gqa(q, k), want, rtol=0, atol=0)
    torch.testing.assert_close(module.reference(q, k), want, rtol=0, atol=0)


@pytest.mark.parametrize(("heads", "kv_heads", "says"), [
    (6, 4, "gqa: the index h / (H / HK) of k needs H (6) to be a multiple of HK (4), and HK at least 1"),
    (2, 4, "gqa: the index h / (H / HK) of k needs H (2) to be a multiple of HK (4), and HK at least 1"),
    (0, 4, "gqa: the index h / (H / HK) of k divides by H / HK, which must be at least 1, got 0"),
])
def test_a_quotient_of_sizes_in_an_index_that_does_not_divide_is_refused_at_launch(compiled, heads, kv_heads, says):
    module = compiled(GQA)
    with pytest.raises(ValueError) as caught:
        module.gqa(torch.zeros(2, heads, 5), torch.zeros(2, kv_heads, 5))
    assert str(caught.value) == says


# A channel group's c in g * (C / G) + c (no axis over C / G): the group size must divide too, as
# a quotient added to an axis (c + N / 2 above) must.
CHANNELS = """kernel k
  in  x: f32[B, C]
  in  w: f32[B, G]
  out y: f32[B, C]
  grid  b over B, g over G, c over 2 whole
  y[b, g * (C / G) + c] = x[b, g * (C / G) + c] * w[b, g]
"""


def test_a_group_size_that_scales_an_axis_must_divide(compiled):
    module = compiled(CHANNELS)
    x, w = _randn(2, 6, seed=1), _randn(2, 3, seed=2)
    torch.testing.assert_close(module.k(x, w), x * w.repeat_interleave(2, dim=1), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^k: the index g \* \(C / G\) \+ c of y needs C \(7\) to be a multiple of "
                                         r"G \(3\), and G at least 1$"):
        module.k(_randn(2, 7), w)


def test_messages_name_a_derived_extent_as_written():
    """An axis over ``R1 - 1`` is over ``R1_minus_1`` in the generated code; the checker's and the
    launcher's messages say ``R1 - 1``, as the spec does."""
    text = ("kernel k\n  in  x: f32[M, R1]\n  out y: f32[M, R1]\n  grid  r over M, i over R1 - 1 whole\n"
            "  y[r, i] = x[r, i]\n")
    assert _errors(text) == ["axis 'i' tiles 'R1 - 1', but dimension 1 of 'y' is 'R1'",
                             "axis 'i' tiles 'R1 - 1', but dimension 1 of 'x' is 'R1'"]
    source = compile_spec(GROUPS, "group_sums.tile").source
    assert "group_sums: 'c over C / G whole' makes one tile of all of C / G, so C / G must be <= " in source
    assert "C_over_G must" not in source


@pytest.mark.parametrize("name", ["rope", "rope_backward"])
def test_rope_refuses_an_odd_head_dim_at_launch(generated, name):
    """rotate_half takes the row's halves: with D = 7 the shift by D / 2 = 3 mixed lanes of the
    wrong half, and the launcher ran it (rope's output was silently wrong)."""
    module = generated(name)
    q, k, cos = torch.zeros(1, 2, 3, 7), torch.zeros(1, 1, 3, 7), torch.zeros(1, 3, 7)
    odd = rf"^{name}: the index d [-+] D / 2 of \w+ needs D \(7\) to be a multiple of 2$"
    with pytest.raises(ValueError, match=odd):
        getattr(module, name)(q, k, cos, cos)


def test_a_long_product_of_sizes_is_named_by_its_factors():
    """A derived extent's size symbol: spelled out while short (``C_over_G``), a long product of
    sizes by its factors (not ``C_out``, which reads as an output's channels), anything else long
    by its first size and ``_out`` (a pooling's ``H_out``); a call by its function and arguments."""
    from tilegen import model as m
    from tilegen.parser import parse

    spec = parse("""\
kernel k
  in  x: f32[C, KD, KH, KW]
  in  s: i32
  out y: f32[C / KD, C * KD * KH * KW, (C + 2 * s - KD) / s + 1, minimum(C, 32)]
  grid  c over C
  y[0, 0, 0, 0] = 0
""", "k.tile")
    names = [m.derived_name(extent) for _, extent in spec.tensor("y").extents]
    assert names == ["C_over_KD", "C_KD_KH_KW", "C_out", "minimum_C_32"]
