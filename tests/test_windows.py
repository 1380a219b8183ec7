"""Strided and windowed indices (``x[b, S * o + D * k - P]``: tile axes times sizes, summed; lanes
outside the tensor read 0), extents that round down (``(L + 2 * P - K) / S + 1``, named ``L_out``),
locals of index arithmetic in an index, grids of more than three launched axes, and the pooling
specs written with them (specs/max_pool*d.tile, specs/avg_pool*d.tile), against torch's
F.max_pool*d, F.avg_pool*d and F.conv1d as the independent oracles, in Triton's interpreter."""

import math

import pytest
import torch
import torch.nn.functional as F

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _module(tmp_path, text, name):
    from tilegen.runner import load_module

    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    return load_module(path)


def _same(ours, theirs):
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)


# (H, W, kernel_size, stride, padding, dilation): windows that hang off the top and left edges
# (padding), off the bottom and right (the last window's taps past the input), strides that skip
# rows, windows wider than the stride (overlaps), dilated taps, odd sizes.
POOL2D = [(7, 6, 3, 2, 1, 1), (10, 5, 3, 1, 1, 2), (5, 5, 2, 2, 1, 1), (9, 8, 4, 3, 2, 1), (3, 11, 3, 1, 1, 1)]
BLOCKS = [(1, 4), (2, 8), (16, 4)]


@pytest.mark.parametrize(("case", "bh", "bw", "dtype"), [
    (case, bh, bw, (torch.float32, torch.float16)[i % 2])
    for i, (case, (bh, bw)) in enumerate((case, block) for case in POOL2D for block in BLOCKS)
])
def test_max_pool2d_matches_torch(generated, case, bh, bw, dtype):
    """Every window's largest tap, -inf in the padding; a NaN in a window is its max and a window of
    -inf alone is -inf, as torch's. Each case at every block size, f32 and f16 in turn (each case
    and each block size in both)."""
    h, w, k, s, p, d = case
    module = generated("max_pool2d")
    x = _randn(2, 3, h, w, seed=h * w + k, dtype=dtype)
    x[0, 1, 1, 1] = math.nan
    x[1, 2, : d * k + 1, : d * k + 1] = -math.inf  # the first window of that channel holds -inf alone
    y = module.max_pool2d(x, k, s, p, d, BH=bh, BW=bw)
    _same(y, F.max_pool2d(x.float(), k, s, p, d).to(dtype))
    _same(module.reference(x, k, s, p, d), y)
    assert y[0, 1].isnan().any() and (y[1, 2, 0, 0] == -math.inf)


@pytest.mark.parametrize(("case", "bh", "bw"), [(c, *BLOCKS[i % len(BLOCKS)]) for i, c in enumerate(POOL2D)])
@pytest.mark.parametrize(("count_include_pad", "divisor_override"), [(1, 0), (0, 0), (1, 5)])
def test_avg_pool2d_matches_torch(generated, case, bh, bw, count_include_pad, divisor_override):
    """The window's sum over its size (count_include_pad), over the taps inside the input, or over
    divisor_override; the padding reads 0."""
    h, w, k, s, p, _ = case
    module = generated("avg_pool2d")
    x = _randn(2, 3, h, w, seed=h + w * k)
    y = module.avg_pool2d(x, k, s, p, 0, count_include_pad, divisor_override, BH=bh, BW=bw)
    expected = F.avg_pool2d(x, k, s, p, False, bool(count_include_pad), divisor_override or None)
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(module.reference(x, k, s, p, 0, count_include_pad, divisor_override), y)


@pytest.mark.parametrize("bl", [1, 4, 32])
@pytest.mark.parametrize(("length", "k", "s", "p", "d"), [(7, 3, 2, 1, 1), (10, 3, 1, 1, 2), (9, 4, 3, 2, 1)])
def test_pool1d_matches_torch(generated, length, k, s, p, d, bl):
    x = _randn(2, 3, length, seed=length * k)
    x[1, 0, 2] = math.nan
    _same(generated("max_pool1d").max_pool1d(x, k, s, p, d, BL=bl), F.max_pool1d(x, k, s, p, d))
    x = x.nan_to_num()
    for count_include_pad in (1, 0):
        torch.testing.assert_close(generated("avg_pool1d").avg_pool1d(x, k, s, p, 0, count_include_pad, BL=bl),
                                   F.avg_pool1d(x, k, s, p, False, bool(count_include_pad)))


@pytest.mark.parametrize(("bh", "bw"), [(1, 8), (8, 4)])
@pytest.mark.parametrize(("shape", "k", "s", "p", "d"), [((5, 6, 7), 3, 2, 1, 1), ((4, 7, 5), 2, 1, 1, 2)])
def test_max_pool3d_matches_torch_on_a_grid_of_five_axes(generated, shape, k, s, p, d, bh, bw):
    """n, c and od share program id 0: every (n, c, od) is computed once."""
    module = generated("max_pool3d")
    x = _randn(2, 2, *shape, seed=sum(shape))
    _same(module.max_pool3d(x, k, s, p, d, BH=bh, BW=bw), F.max_pool3d(x, k, s, p, d))


# (input's spatial shape, kernel_size, stride, padding, dilation) per window rank: overlapping
# windows (stride below kernel_size), padding, a dilated one, odd sizes
GRADIENT_CASES = {1: [((11,), 3, 1, 1, 2), ((9,), 4, 3, 2, 1)], 2: POOL2D[:3],
                  3: [((3, 5, 6), 3, 2, 1, 1), ((3, 5, 4), 2, 1, 1, 1)]}


@pytest.mark.parametrize("name", ["max_pool1d", "avg_pool1d", "max_pool2d", "avg_pool2d", "max_pool3d", "avg_pool3d"])
def test_pooling_gradients_match_torch(generated, name):
    """The forwards walk their windows in index loops; their backwards (specs/*_pool*d_backward.tile)
    scatter-add each window's gradient (overlapping windows add up), through autograd. A NaN in x:
    max pooling's windows holding it give their gradient to it, as torch's."""
    module = generated(name)
    rank = int(name[-2])
    for case in GRADIENT_CASES[rank]:
        if rank == 2:
            h, w, k, s, p, d = case
            spatial = (h, w)
        else:
            spatial, k, s, p, d = case
        x = _randn(2, 2, *spatial, seed=k + s)
        x[1, 1][(1,) * rank] = math.nan
        x.requires_grad_()
        args = (k, s, p, d) if name.startswith("max") else (k, s, p)
        y = getattr(module, name)(x, *args)
        dy = _randn(*y.shape, seed=7)
        (dx,) = torch.autograd.grad(y, x, dy)
        x2 = x.detach().clone().requires_grad_()
        (expected,) = torch.autograd.grad(getattr(F, name)(x2, *args), x2, dy)
        torch.testing.assert_close(dx, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(("ceil_mode", "count_include_pad", "divisor_override", "bh", "bw"),
                         [(1, 0, 0, 2, 8), (1, 1, 0, 4, 4), (0, 1, 5, 2, 8)])
def test_avg_pool2d_gradient_gathers_every_window(generated, ceil_mode, count_include_pad, divisor_override, bh, bw):
    """specs/avg_pool2d_backward.tile gathers, for each element of dx, the gradients of the windows
    covering it over their divisors (padding, a last window of ceil_mode, overlaps, strides that
    skip elements), at block sizes off the input's, against torch's autograd. (Autograd's route
    through it, at the default options: test_pooling_gradients_match_torch.)"""
    backward = generated("avg_pool2d_backward").avg_pool2d_backward
    for h, w, k, s, p, _ in POOL2D[:3]:
        x = _randn(1, 2, h, w, seed=h * w + k).requires_grad_()  # the batch and channels index as the rows do
        y = F.avg_pool2d(x, k, s, p, bool(ceil_mode), bool(count_include_pad), divisor_override or None)
        dy = _randn(*y.shape, seed=k)
        (want,) = torch.autograd.grad(y, x, dy)
        dx = backward(dy, x.detach(), k, s, p, count_include_pad, divisor_override, BH=bh, BW=bw)
        torch.testing.assert_close(dx, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "spatial", "k", "s", "p", "block"),
                         [("avg_pool1d", (11,), 3, 2, 1, {"BL": 4}), ("avg_pool3d", (4, 5, 6), 3, 2, 1, {})])
def test_avg_pool_1d_3d_gradients_gather_with_ceil_mode_and_inside_taps(generated, name, spatial, k, s, p, block):
    """avg_pool1d_backward and avg_pool3d_backward with ceil_mode's last window and the divisor of
    the taps inside x (count_include_pad 0), against torch's autograd."""
    backward = getattr(generated(f"{name}_backward"), f"{name}_backward")
    x = _randn(1, 2, *spatial, seed=len(spatial)).requires_grad_()
    y = getattr(F, name)(x, k, s, p, True, False)
    dy = _randn(*y.shape, seed=5)
    (want,) = torch.autograd.grad(y, x, dy)
    torch.testing.assert_close(backward(dy, x.detach(), k, s, p, 0, **block), want, rtol=1e-6, atol=1e-6)


def test_an_output_size_below_one_is_refused(generated):
    module = generated("max_pool2d")
    message = (r"^max_pool2d: dimension 2 of 'y', minimum\(\(H \+ 2 \* padding - dilation \* \(kernel_size - 1\) "
               r"- 1 \+ ceil_mode \* \(stride - 1\)\) / stride \+ 1, \(H \+ padding - 1\) / stride \+ 1\), is 0 at "
               r"H = 2, padding = 0, dilation = 1, kernel_size = 3, ceil_mode = 0, stride = 1; it must be at least 1")
    with pytest.raises(ValueError, match=message):
        module.max_pool2d(torch.zeros(1, 1, 2, 5), 3, 1, 0, 1)
    with pytest.raises(ValueError, match=r"divides by stride, which must be at least 1, got 0"):
        module.max_pool2d(torch.zeros(1, 1, 5, 5), 3, 0, 0, 1)


# A window over a loop axis (k in tiles of BK) beside a tiled batch axis: a dilated, strided,
# padded 1D convolution of each row with w.
CONV = """\
kernel window_conv
  in  x: f32[B, L]
  in  w: f32[K]
  in  S: i32
  in  D: i32
  in  P: i32
  out y: f32[B, L_out = (L + 2 * P - D * (K - 1) - 1) / S + 1]
  block BB = 2, BO = 4, BK = 2
  grid  b over B by BB, o over L_out by BO
  acc: f32[b, o] = 0
  for k over K by BK
    acc += sum(x[b, S * o + D * k - P] * w[k], dim=k)
  y[b, o] = acc
"""


@pytest.mark.parametrize(("bb", "bo", "bk"), [(1, 1, 1), (2, 4, 2), (4, 16, 8)])
@pytest.mark.parametrize(("length", "k", "s", "d", "p"), [(11, 3, 2, 1, 1), (9, 5, 1, 2, 3), (8, 4, 3, 1, 0)])
def test_a_window_over_a_loop_axis_is_a_convolution(tmp_path, length, k, s, d, p, bb, bo, bk):
    module = _module(tmp_path, CONV, "window_conv")
    x, w = _randn(3, length, seed=length), _randn(k, seed=k)
    y = module.window_conv(x, w, s, d, p, BB=bb, BO=bo, BK=bk)
    expected = F.conv1d(x[:, None], w[None, None], stride=s, padding=p, dilation=d)[:, 0]
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.reference(x, w, s, d, p), y, rtol=1e-5, atol=1e-5)


# Strides of both signs, and a stride reading past the end (0 there).
STRIDES = """\
kernel strides
  in  x: f32[N]
  out y: f32[M = (N + 1) / 2]
  block BM = 4
  grid  i over M by BM
  y[i] = x[2 * i] - x[N - 1 - 2 * i] + 10 * x[3 * i + 1]
"""


@pytest.mark.parametrize("bm", [1, 4, 16])
@pytest.mark.parametrize("n", [1, 7, 8])
def test_strides_of_both_signs(tmp_path, n, bm):
    module = _module(tmp_path, STRIDES, "strides")
    x = _randn(n, seed=n)
    m = (n + 1) // 2
    third = torch.cat((x, torch.zeros(3 * m + 2)))[1::3][:m]
    expected = x[0::2] - x.flip(0)[0::2] + 10 * third
    torch.testing.assert_close(module.strides(x, BM=bm), expected)
    torch.testing.assert_close(module.reference(x), expected)


# Five launched axes (a, b and c on program id 0), and a reduction across all their programs.
GRID5 = """\
kernel grid5
  in  x: f32[A, B, C, D, E]
  out y: f32[A, B, C, D, E]
  out total: f32[]
  block BD = 2, BE = 4
  grid  a over A, b over B, c over C, d over D by BD, e over E by BE
  y[a, b, c, d, e] = x[a, b, c, d, e] * 2 + a - c
  total = sum(x[a, b, c, d, e], dim=(a, b, c, d, e))
"""


@pytest.mark.parametrize(("bd", "be"), [(1, 2), (2, 4), (8, 8)])
def test_a_grid_of_five_axes_flattens_the_first_three(tmp_path, bd, be):
    module = _module(tmp_path, GRID5, "grid5")
    source = compile_spec(GRID5, "grid5.tile").source
    assert "pid_abc = tl.program_id(0)  # a, b, c: one program id, the first slowest" in source
    assert "pid_a = pid_abc // (B * C)" in source and "pid_b = pid_abc // C % B" in source
    x = _randn(2, 3, 5, 3, 7, seed=bd)
    y, total = module.grid5(x, BD=bd, BE=be)
    a = torch.arange(2)[:, None, None, None, None]
    c = torch.arange(5)[None, None, :, None, None]
    torch.testing.assert_close(y, x * 2 + a - c)
    torch.testing.assert_close(total, x.sum(), rtol=1e-5, atol=1e-5)


def _errors(text):
    """The ``file:line:col: error: message`` lines the checker reports for ``text``."""
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [line for line in str(caught.value).splitlines() if ": error: " in line]


HEAD = ("kernel k\n  in  x: f32[B, L]\n  in  S: i32\n  out y: f32[B, L]\n  out z: f32[B, L] = 0\n  block BL = 8\n"
        "  grid  b over B, o over L by BL, k over 3 whole\n")


@pytest.mark.parametrize(("line", "message"), [
    ("  y[b, o] = sum(x[b, o * k], dim=k)\n",
     "t.tile:8:22: error: in the index of 'x', tile axis 'o' is multiplied by tile axis 'k': a tile axis enters "
     "added, subtracted or times a factor of sizes and integers (S * oh + kh - P), or split into digits with '//' "
     "and '%' (q // KW, q % KW)"),
    ("  y[b, o] = x[b, o / S]\n",
     "t.tile:8:18: error: in the index of 'x', tile axis 'o' is divided with '/', which divides sizes: a tile axis "
     "enters added, subtracted or times a factor of sizes and integers (S * oh + kh - P), or split into digits "
     "with '//' and '%' (q // KW, q % KW)"),
    ("  y[b, o] = x[b, o + o]\n", "t.tile:8:18: error: tile axis 'o' enters the index of 'x' twice; write it once "
                                  "(2 * c, not c + c)"),
    ("  y[b, S * o] = x[b, o]\n",
     "t.tile:8:8: error: in the index of 'y', 'o' must enter a store with '=' with a factor of 1: the axis plus or "
     "minus an offset (c + N / 2, c - 1); a stride would leave the elements between unwritten (a scatter-add, "
     "'+=', takes one)"),
    ("  y[b, o + k] = x[b, o]\n",
     "t.tile:8:8: error: a store with '=' to 'y' offsets one tile axis, not 2 (o, k): lanes of a window would "
     "write one element; add them with '+=' into an output declared '= 0'"),
    ("  h = x[b, o] + 1\n  y[b, o] = x[b, h]\n",
     "t.tile:9:18: error: 'h' is a local that is not index arithmetic: an index takes an axis, an integer, a "
     "gather, or arithmetic of axes, sizes and integers, written out or as a local assigned once to it "
     "(h = stride * oh + kh - padding)"),
])
def test_what_a_window_may_not_say(line, message):
    assert _errors(HEAD + line + "  z[b, o + k] += x[b, o]\n") == [message]


def test_a_window_is_scatter_added_and_its_local_reads_as_its_arithmetic():
    """``z[b, h] += ...`` with ``h = S * o + k - 1``: accepted (the error above is the only one)."""
    text = HEAD + "  h = S * o + k - 1\n  y[b, o] = x[b, o]\n  z[b, h] += x[b, o]\n"
    assert "tl.atomic_add" in compile_spec(text, "t.tile").source


@pytest.mark.parametrize(("dims", "message"), [
    ("y: f32[B, (L - 3) / S + 1]\n  out v: f32[B, (L + 1 - 4) / S + 1]",
     "the extents (L - 3) / S + 1 and (L + 1 - 4) / S + 1 are both named 'L_out' in the generated code; write one "
     "of them with another first size"),
    ("y: f32[B, L_out = (L - 3) / S + 1]\n  out v: f32[B, L_out = L - 1]",
     "the extents (L - 3) / S + 1 and L - 1 are both named 'L_out'"),
])
def test_two_extents_of_one_name_are_refused(dims, message):
    text = (f"kernel k\n  in  x: f32[B, L]\n  in  S: i32\n  out {dims}\n  grid  b over B, o over L whole\n"
            "  y[b, 0] = x[b, 0]\n  v[b, 0] = x[b, 1]\n")
    assert any(message in line for line in _errors(text))


@pytest.mark.parametrize("count_include_pad", [1, 0])
@pytest.mark.parametrize(("shape", "k", "s", "p"), [((5, 6, 7), 3, 2, 1), ((3, 4, 5), 2, 1, 1)])
def test_avg_pool3d_matches_torch(generated, shape, k, s, p, count_include_pad):
    x = _randn(2, 3, *shape, seed=sum(shape) + k)
    y = generated("avg_pool3d").avg_pool3d(x, k, s, p, 0, count_include_pad, BH=4, BW=8)
    torch.testing.assert_close(y, F.avg_pool3d(x, k, s, p, False, bool(count_include_pad)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("bh", "bw"), BLOCKS)
@pytest.mark.parametrize("case", POOL2D[:4])
def test_max_pool2d_indices_match_torch_ties_included(generated, case, bh, bw):
    """``return_indices=True``: each maximum's place h * W + w in its plane, the first of equal values
    in row-major order, as torch's (integer-valued inputs make ties in most windows)."""
    h, w, k, s, p, d = case
    module = generated("max_pool2d_indices")
    ties = torch.randint(-2, 3, (2, 3, h, w), generator=torch.Generator().manual_seed(w)).float()
    for x in (_randn(2, 3, h, w, seed=h), ties):
        y, indices = module.max_pool2d_indices(x, k, s, p, d, BH=bh, BW=bw)
        expected, expected_indices = F.max_pool2d(x, k, s, p, d, return_indices=True)
        _same(y, expected)
        assert torch.equal(indices, expected_indices)
        assert torch.equal(module.reference(x, k, s, p, d)[1], expected_indices)


# (H, W, kernel_size, stride, padding): ceil_mode adds a last partial window (8 = 3 + 2 * 2 + 1 rows
# at stride 2), or would add one that starts in the padding, which torch drops (5, 3, 2, 1).
CEIL = [(8, 7, 3, 2, 1), (6, 9, 2, 2, 0), (5, 5, 3, 2, 1), (7, 10, 4, 3, 2)]


@pytest.mark.parametrize("case", CEIL)
def test_ceil_mode_matches_torch(generated, case):
    """Extents of minimum(...): torch's shapes, the last windows hanging past the input (-inf for
    max, and for average their taps inside the padded input as the divisor)."""
    h, w, k, s, p = case
    x = _randn(2, 3, h, w, seed=h * w)
    for ceil in (0, 1):
        y, indices = generated("max_pool2d_indices").max_pool2d_indices(x, k, s, p, 1, ceil, BH=4, BW=4)
        expected, expected_indices = F.max_pool2d(x, k, s, p, 1, bool(ceil), True)
        _same(y, expected)
        assert torch.equal(indices, expected_indices)
        _same(generated("max_pool2d").max_pool2d(x, k, s, p, 1, ceil, BH=4, BW=4), expected)
        _same(generated("max_pool1d").max_pool1d(x[0], k, s, p, 1, ceil), F.max_pool1d(x[0], k, s, p, 1, bool(ceil)))
        for count_include_pad in (1, 0):
            ours = generated("avg_pool2d").avg_pool2d(x, k, s, p, ceil, count_include_pad, BH=4, BW=4)
            theirs = F.avg_pool2d(x, k, s, p, bool(ceil), bool(count_include_pad))
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
            ours = generated("avg_pool1d").avg_pool1d(x[0], k, s, p, ceil, count_include_pad)
            torch.testing.assert_close(ours, F.avg_pool1d(x[0], k, s, p, bool(ceil), bool(count_include_pad)))


@pytest.mark.parametrize(("extent", "message"), [
    ("exp(L)", "t.tile:3:17: error: a dimension of 'y' is arithmetic (+ - * /, minimum, maximum) of the inputs' "
               "sizes, integer scalar inputs and integers"),
    ("minimum(L, 2, 3)", "t.tile:3:17: error: a dimension of 'y' is arithmetic (+ - * /, minimum, maximum) of the "
                         "inputs' sizes, integer scalar inputs and integers"),
])
def test_what_an_extent_may_not_call(extent, message):
    text = f"kernel k\n  in  x: f32[B, L]\n  out y: f32[B, {extent}]\n  grid  b over B\n  y[b, 0] = x[b, 0]\n"
    assert _errors(text) == [message]
