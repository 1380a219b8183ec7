"""Convolutions (specs/conv1d.tile, conv2d.tile, conv3d.tile, conv2d_depthwise.tile) against torch's
``F.conv1d``/``F.conv2d``/``F.conv3d``, their gradients (their backward specs)
against torch autograd's, and the index loop they are written with (``for kh over KH``, no
block: one step per index, the index one number in the body).

Inputs of both signs, sizes off every block, every config (``TILEGEN_TEST_GPU=1``: on the GPU;
in the interpreter conv1d at each set of block sizes, conv2d and the depthwise one at two:
``tests.conftest.config_ends``, tests/test_meaning.py running them at the others), with and without
bias, strides, padding and dilation along each dimension, f32 and bf16, and a NaN reaching the
outputs whose windows hold it.
"""

import os

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_ends, config_indices
from tilegen.errors import SpecError

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def close(got, want, dtype, taps):
    """Equal but for float32 sums in another order (f32; on the GPU tf32 operands, which a missing
    tap, about 1, still fails) and one rounding to bf16 (a unit of it, 2**-8 relative); ``taps``
    the products summed into each output."""
    assert got.dtype == dtype and got.shape == want.shape
    if dtype == torch.float32:
        tol = 1e-5 * taps if DEVICE == "cpu" else 2e-2 * taps ** 0.5  # tf32: 2**-11 per operand
        torch.testing.assert_close(got, want, atol=tol, rtol=1e-5)
    else:
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=2**-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("stride", "padding", "dilation"), [((1, 1), (0, 0), (1, 1)), ((2, 3), (1, 2), (1, 2))])
def test_conv2d_is_torchs(generated, dtype, stride, padding, dilation):
    module = generated("conv2d")
    x, w, bias = randn(2, 5, 7, 19, dtype=dtype), randn(17, 5, 3, 2, dtype=dtype, seed=1), randn(17, dtype=dtype,
                                                                                                  seed=2)
    want = F.conv2d(x.float(), w.float(), bias.float(), stride, padding, dilation).to(dtype)
    scalars = (*stride, *padding, *dilation)
    configs = config_ends(module)
    for config in configs:
        close(module.conv2d(x, w, bias, *scalars, config=config), want, dtype, 5 * 6)
    close(module.reference(x, w, bias, *scalars), want, dtype, 5 * 6)
    without = F.conv2d(x.float(), w.float(), None, stride, padding, dilation).to(dtype)
    close(module.conv2d(x, w, None, *scalars, config=configs[-1]), without, dtype, 5 * 6)  # the larger tiles


def check_training(generated, monkeypatch, kernel, leaves, settings, torch_forward, taps, ends=(0, -1),
                   backward_names=None):
    """``kernel``'s gradients (x, its weight, and the bias where ``leaves`` holds one) against
    torch autograd's of ``torch_forward`` in float32 from the same values, at its three backward
    kernels' (``<kernel>_backward_dx``, then the weight's, then ``_dbias``) configs ``ends``
    (indices into :func:`tests.conftest.config_ends`; in the interpreter bf16 at the first alone;
    ``backward_names`` where they are named otherwise); ``settings`` the launcher's scalars after
    the bias; ``taps`` the products each gradient sums (x, weight, bias), for the tolerance."""
    from tests.conftest import force_config

    module = generated(kernel)
    dtype, bias = leaves[0].dtype, len(leaves) == 3
    floats = [t.float().requires_grad_() for t in leaves]
    y_float = torch_forward(floats[0], floats[1], floats[2] if bias else None)
    dy = randn(*y_float.shape, dtype=dtype, seed=3)
    wanted = torch.autograd.grad(y_float, floats, dy.float())
    weight_grad = "dw" if kernel in ("conv1d", "conv3d") else "dweight"
    names = backward_names or [f"{kernel}_backward_{name}" for name in ("dx", weight_grad, "dbias")]
    backwards = [generated(name) for name in names]
    if DEVICE == "cpu" and dtype != torch.float32:  # the interpreter runs f32's configs; bf16's rounding at one
        ends = ends[:1]
    for end in ends:
        for backward in backwards:
            force_config(monkeypatch, backward, config_ends(backward)[end])
        inputs = [t.detach().requires_grad_() for t in leaves]
        y = getattr(module, kernel)(inputs[0], inputs[1], inputs[2] if bias else None, *settings)
        for grad, want, count in zip(torch.autograd.grad(y, inputs, dy), wanted, taps, strict=False):
            close(grad, want.to(dtype), dtype, count)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"),
                         [((1, 1), (1, 0), (1, 1), True), ((2, 3), (1, 2), (2, 1), False)])
def test_conv2d_trains_as_torchs(generated, monkeypatch, dtype, stride, padding, dilation, bias):
    """conv2d's backward (conv2d_backward_dx, _dweight, _dbias); with strides the taps the stride
    does not divide add nothing to dx, and a left-out bias gets no gradient."""
    x, w, b = randn(2, 5, 9, 11, dtype=dtype), randn(7, 5, 3, 2, dtype=dtype, seed=1), randn(7, dtype=dtype, seed=2)
    check_training(generated, monkeypatch, "conv2d", [x, w] + ([b] if bias else []), (*stride, *padding, *dilation),
                   lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation), (7 * 3 * 2, 2 * 9 * 11, 2 * 9 * 11))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"), [(1, 2, 1, True), (3, 1, 2, False)])
def test_conv1d_trains_as_torchs(generated, monkeypatch, dtype, stride, padding, dilation, bias):
    """conv1d's backward (conv1d_backward_dx, _dw, _dbias), strided too (the positions the stride
    skips get dx from no tap but their neighbours')."""
    x, w, b = randn(3, 5, 37, dtype=dtype), randn(19, 5, 3, dtype=dtype, seed=1), randn(19, dtype=dtype, seed=2)
    check_training(generated, monkeypatch, "conv1d", [x, w] + ([b] if bias else []), (stride, padding, dilation),
                   lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation), (19 * 3, 3 * 37, 3 * 37))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"),
                         [((1, 1), (1, 1), (1, 1), True), ((2, 1), (0, 1), (1, 2), False)])
def test_conv2d_depthwise_trains_as_torchs(generated, monkeypatch, dtype, stride, padding, dilation, bias):
    """conv2d_depthwise's backward (conv2d_depthwise_backward_dx, _dweight, and conv2d's dbias,
    its channels named O there)."""
    channels = 19
    x, w = randn(2, channels, 9, 11, dtype=dtype), randn(channels, 1, 3, 2, dtype=dtype, seed=1)
    b = randn(channels, dtype=dtype, seed=2)
    check_training(generated, monkeypatch, "conv2d_depthwise", [x, w] + ([b] if bias else []),
                   (*stride, *padding, *dilation),
                   lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups=channels),
                   (3 * 2, 2 * 9 * 11, 2 * 9 * 11),
                   backward_names=["conv2d_depthwise_backward_dx", "conv2d_depthwise_backward_dweight",
                                   "conv2d_backward_dbias"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"),
                         [((1, 1), (1, 0), (1, 1), True), ((2, 3), (1, 0), (1, 2), False)])
def test_conv_transpose2d_trains_as_torchs(generated, monkeypatch, dtype, stride, padding, dilation, bias):
    """conv_transpose2d's backward (conv_transpose2d_backward_dx, _dweight, and conv2d's dbias):
    dx is a convolution of dy, strided; against torch autograd's of F.conv_transpose2d."""
    x, w, b = randn(2, 5, 6, 7, dtype=dtype), randn(5, 7, 3, 2, dtype=dtype, seed=1), randn(7, dtype=dtype, seed=2)
    check_training(generated, monkeypatch, "conv_transpose2d", [x, w] + ([b] if bias else []),
                   (*padding, *dilation, *stride, 0, 0),
                   lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, 0, 1, dilation),
                   (7 * 3 * 2, 2 * 6 * 7, 2 * 6 * 7 * 6),
                   backward_names=["conv_transpose2d_backward_dx", "conv_transpose2d_backward_dweight",
                                   "conv2d_backward_dbias"])


def test_conv2d_implicit_gemm_trains_through_conv2ds_backward(generated, monkeypatch):
    """The implicit-GEMM form names conv2d's backward specs: the same gradients as torch's."""
    x, w, b = randn(2, 3, 9, 10), randn(16, 3, 3, 3, seed=1), randn(16, seed=2)
    check_training(generated, monkeypatch, "conv2d_implicit_gemm", [x, w, b], (2, 1, 1, 0, 1, 1),
                   lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 0), 1), (16 * 9, 2 * 4 * 8, 2 * 4 * 8), ends=(0,),
                   backward_names=["conv2d_backward_dx", "conv2d_backward_dweight", "conv2d_backward_dbias"])


@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"), [(1, 1, 1, True), (3, 1, 2, False)])
def test_conv_transpose1d_trains_as_torchs(generated, monkeypatch, stride, padding, dilation, bias):
    """conv_transpose1d's backward (conv_transpose1d_backward_dx, _dw, and conv1d's dbias)."""
    x, w, b = randn(3, 5, 13), randn(5, 7, 3, seed=1), randn(7, seed=2)
    check_training(generated, monkeypatch, "conv_transpose1d", [x, w] + ([b] if bias else []),
                   (padding, dilation, stride, 0),
                   lambda x, w, b: F.conv_transpose1d(x, w, b, stride, padding, 0, 1, dilation),
                   (7 * 3, 3 * 13, 3 * 13 * 3), backward_names=["conv_transpose1d_backward_dx",
                                                               "conv_transpose1d_backward_dw", "conv1d_backward_dbias"])


@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"), [(1, 1, 1, True), (2, 0, 1, False)])
def test_conv_transpose3d_trains_as_torchs(generated, monkeypatch, stride, padding, dilation, bias):
    """conv_transpose3d's backward (conv_transpose3d_backward_dx, _dw, and conv3d's dbias), f32, at
    the first config in the interpreter, first and last on a GPU."""
    x, w, b = randn(1, 3, 3, 4, 5), randn(3, 17, 2, 3, 2, seed=1), randn(17, seed=2)
    check_training(generated, monkeypatch, "conv_transpose3d", [x, w] + ([b] if bias else []),
                   (padding, dilation, stride, 0),
                   lambda x, w, b: F.conv_transpose3d(x, w, b, stride, padding, 0, 1, dilation),
                   (17 * 12, 3 * 4 * 5, 6 * 8 * 8), ends=(0, -1) if DEVICE == "cuda" else (0,),
                   backward_names=["conv_transpose3d_backward_dx", "conv_transpose3d_backward_dw",
                                   "conv3d_backward_dbias"])


@pytest.mark.parametrize(("stride", "padding", "dilation", "bias"), [(1, 1, 1, True), (2, 0, 1, False)])
def test_conv3d_trains_as_torchs(generated, monkeypatch, stride, padding, dilation, bias):
    """conv3d's backward (conv3d_backward_dx, _dw, _dbias), f32, at the backward kernels' first
    config in the interpreter (tests/test_meaning.py runs the others), first and last on a GPU."""
    x, w, b = randn(1, 3, 4, 5, 6), randn(17, 3, 2, 3, 2, seed=1), randn(17, seed=2)
    check_training(generated, monkeypatch, "conv3d", [x, w] + ([b] if bias else []), (stride, padding, dilation),
                   lambda x, w, b: F.conv3d(x, w, b, stride, padding, dilation), (17 * 12, 4 * 5 * 6, 4 * 5 * 6),
                   ends=(0, -1) if DEVICE == "cuda" else (0,))


def test_conv2d_takes_torchs_defaults_and_a_wide_window(generated):
    """stride 1, padding 0, dilation 1 when left out; a window wider than the input's padding-free
    part (KernelBench's 11 x 11 first layer at stride 4, padding 2), channels past one tile."""
    module = generated("conv2d")
    x, w = randn(1, 19, 12, 10), randn(6, 19, 3, 3, seed=3)
    close(module.conv2d(x, w), F.conv2d(x, w), torch.float32, 19 * 9)
    x, w = randn(1, 3, 15, 17, seed=4), randn(6, 3, 11, 11, seed=5)
    close(module.conv2d(x, w, None, 4, 4, 2, 2), F.conv2d(x, w, None, 4, 2), torch.float32, 3 * 121)


@pytest.mark.parametrize("kernel", ["conv2d", "conv2d_implicit_gemm"])
def test_conv2d_nan_reaches_the_outputs_whose_windows_hold_it(generated, kernel):
    """The taps loop and the implicit GEMM alike: a masked lane reads 0, never the NaN beside it."""
    module = generated(kernel)
    x, w = randn(1, 4, 9, 11), randn(3, 4, 3, 3, seed=6)
    x[0, 2, 4, 5] = float("nan")
    got, want = getattr(module, kernel)(x, w, None, 1, 2, 1, 1), F.conv2d(x, w, None, (1, 2), 1)
    assert torch.equal(got.isnan(), want.isnan()) and 0 < int(got.isnan().sum()) < got.numel()
    close(torch.nan_to_num(got), torch.nan_to_num(want), torch.float32, 36)


@pytest.mark.parametrize(("stride", "padding", "dilation"), [(1, 0, 1), (3, 2, 2)])
def test_conv1d_is_torchs(generated, stride, padding, dilation):
    module = generated("conv1d")
    x, w, bias = randn(2, 21, 37), randn(9, 21, 4, seed=1), randn(9, seed=2)
    want = F.conv1d(x, w, bias, stride, padding, dilation)
    for config in config_indices(module):
        close(module.conv1d(x, w, bias, stride, padding, dilation, config=config), want, torch.float32, 84)
    close(module.reference(x, w, bias, stride, padding, dilation), want, torch.float32, 84)


@pytest.mark.parametrize(("stride", "padding", "dilation"), [(1, 0, 1), (2, 1, 2)])
def test_conv3d_is_torchs(generated, stride, padding, dilation):
    module = generated("conv3d")
    x, w = randn(1, 3, 5, 6, 7, dtype=torch.bfloat16), randn(5, 3, 2, 3, 2, dtype=torch.bfloat16, seed=1)
    want = F.conv3d(x.float(), w.float(), None, stride, padding, dilation).bfloat16()
    close(module.conv3d(x, w, None, stride, padding, dilation), want, torch.bfloat16, 36)
    close(module.reference(x, w, None, stride, padding, dilation), want, torch.bfloat16, 36)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_depthwise_conv2d_is_torchs_with_groups_equal_to_channels(generated, dtype):
    module = generated("conv2d_depthwise")
    x = randn(1, 21, 5, 19, dtype=dtype)
    w, bias = randn(21, 1, 3, 4, dtype=dtype, seed=1), randn(21, dtype=dtype, seed=2)
    for scalars in [(1, 1, 0, 0, 1, 1), (2, 1, 1, 2, 1, 2)]:
        sh, sw, ph, pw, dh, dw = scalars
        want = F.conv2d(x.float(), w.float(), bias.float(), (sh, sw), (ph, pw), (dh, dw), groups=21).to(dtype)
        for config in config_ends(module):
            got = module.conv2d_depthwise(x, w, bias, *scalars, config=config)
            torch.testing.assert_close(got.float(), want.float(), atol=1e-5 if dtype == torch.float32 else 4e-3,
                                       rtol=1e-5 if dtype == torch.float32 else 2**-10)


INDEX_LOOP = """\
kernel taps
  in  x: f32[M, J, N]
  out y: f32[M, N]
  out z: f32[M, J, N]
  block BM = 16, BN = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for j over J
    acc += x[m, j, n] * (j + 1)
    z[m, j, n] = acc
  y[m, n] = acc
"""


def test_an_index_loop_steps_once_per_index_in_order(compiled):
    """Each step sees one index: the running sum stored at each step is a scan along j (the
    reference's Python loop computes the same), and a carried value may change any way (there is
    no block for the result to depend on)."""
    module = compiled(INDEX_LOOP, "taps")
    x = randn(20, 5, 17)
    weighted = x * torch.arange(1, 6, device=DEVICE, dtype=torch.float32)[None, :, None]
    y, z = module.taps(x)
    torch.testing.assert_close(y, weighted.sum(1))
    torch.testing.assert_close(z, weighted.cumsum(1))
    for got, want in zip(module.reference(x), (y, z), strict=True):
        torch.testing.assert_close(got, want)


def test_an_index_loop_takes_no_split(compiled):
    with pytest.raises(SpecError, match="'split' needs a loop of"):
        compiled(INDEX_LOOP.replace("for j over J", "for j over J split"), "taps_split")


# two configs of the small dot specs below: K's tiles of 16 and of 32, a masked last one each
DOT_CONFIGS = """\
  tune key M, N, K
    config BM = 16, BN = 16, BK = 16, num_warps = 4, num_stages = 1
    config BM = 32, BN = 16, BK = 32, num_warps = 4, num_stages = 2
"""

TAPS_OVER_DOT = """
kernel taps_dot
  in  x: f32[I, J, M, K]
  in  w: f32[I, J, K, N]
  out y: f32[M, N]
  block BM, BN, BK
  grid  m over M by BM, n over N by BN
""" + DOT_CONFIGS + """\
  acc: f32[m, n] = 0
  for i over I
    for j over J
      for k over K by BK
        acc += dot(x[i, j, m, k], w[i, j, k, n])
  y[m, n] = acc
"""


def _kernel_loops(module, name: str) -> list[str]:
    """The ``for`` lines of the module's ``<name>_kernel``."""
    source = open(module.__file__, encoding="utf-8").read()
    start = source.index(f"def {name}_kernel(")
    return [line.strip() for line in source[start:source.index("\n\n\n", start)].splitlines()
            if line.strip().startswith("for ")]


@pytest.mark.parametrize("config", [0, 1])
def test_index_loops_around_a_loop_of_sums_run_as_one_loop(compiled, config):
    """``for i over I / for j over J / for k over K by BK`` around ``acc += dot(..)`` is one loop
    whose step's digits are i, j and the tile of k (what Triton can software-pipeline), and its
    sum is the nested one's: every (i, j) pair once, k's masked tail included (K = 37 is no
    multiple of BK). So is a loop over tiles with an assignment between the taps
    (``s = j + 1``, a transposed convolution's ``h = oh + ph - dh * kh``), in two ranges: the
    whole tiles of k at every tap unmasked, then the last tile at every tap. A value that reads
    what the loops carry (a running maximum of the partial sums) keeps them nested, in order."""
    x, w = randn(3, 2, 19, 37), randn(3, 2, 37, 23, seed=1)
    module = compiled(TAPS_OVER_DOT, "taps_dot")
    assert _kernel_loops(module, "taps_dot") == ["for i_j_k in range(0, I * J * tl.cdiv(K, BK)):"]
    want = torch.einsum("ijmk,ijkn->mn", x, w)
    close(module.taps_dot(x, w, config=config), want, torch.float32, 3 * 2 * 37)

    source = TAPS_OVER_DOT.replace("kernel taps_dot", "kernel taps_scaled").replace("acc += dot(", "acc += s * dot(")
    scaled = compiled(source.replace("    for j over J\n", "    for j over J\n      s = j + 1\n"), "taps_scaled")
    assert _kernel_loops(scaled, "taps_scaled") == [  # the whole tiles of k at every tap, then the last
        "for i_j_k in range(0, I * J * (K // BK)):", "for i_j_k in range(I * J * (K // BK), I * J * tl.cdiv(K, BK)):"]
    weighted = torch.einsum("ijmk,ijkn,j->mn", x, w, torch.arange(1.0, 3.0, device=DEVICE))
    close(scaled.taps_scaled(x, w, config=config), weighted, torch.float32, 3 * 2 * 37)

    source = TAPS_OVER_DOT.replace("kernel taps_dot", "kernel taps_peak").replace("  y[m, n] = acc", "  y[m, n] = peak")
    source = source.replace("  for i over I\n", "  peak: f32[m, n] = -inf\n  for i over I\n").replace(
        "        acc += dot(x[i, j, m, k], w[i, j, k, n])\n",
        "        acc += dot(x[i, j, m, k], w[i, j, k, n])\n      peak = maximum(peak, acc)\n")
    peak = compiled(source, "taps_peak")
    assert _kernel_loops(peak, "taps_peak")[:2] == ["for i in range(0, I):", "for j in range(0, J):"]
    partial = torch.einsum("ijmk,ijkn->ijmn", x, w).reshape(6, 19, 23).cumsum(0)
    close(peak.taps_peak(x, w, config=config), partial.amax(0), torch.float32, 3 * 2 * 37)


KEPT_DOT = """
kernel kept_dot
  in  x: f32[M, K]
  in  w: f32[K, N]
  in  lim: i32
  out y: f32[M, N]
  block BM, BN, BK
  grid  m over M by BM, n over N by BN
""" + DOT_CONFIGS + """\
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(where(k < lim, x[m, k], 0), w[k, n])
  y[m, n] = acc
"""


@pytest.mark.parametrize("config", [0, 1])
def test_a_dot_operand_kept_where_a_condition_holds_is_loaded_only_there(compiled, config):
    """``dot(where(k < lim, x[m, k], 0), w)`` (a transposed convolution's taps the stride divides)
    loads x only where the condition holds, as zeros elsewhere and past K's end, with no ``where``
    left on the operand: a NaN where it fails reaches nothing."""
    module = compiled(KEPT_DOT, "kept_dot")
    source = open(module.__file__, encoding="utf-8").read()
    assert source.count("acc += tl.dot(x, w)") == 2  # the whole tiles of k, then the masked last one
    x, w = randn(19, 37), randn(37, 23, seed=1)
    x[:, 20:] = float("nan")
    got = module.kept_dot(x, w, 20, config=config)
    close(got, x[:, :20] @ w[:20], torch.float32, 20)


@pytest.mark.parametrize(("stride", "padding", "dilation", "dtype"), [
    ((1, 1), (0, 0), (1, 1), torch.float32), ((2, 3), (1, 2), (1, 2), torch.float32),
    ((2, 1), (1, 0), (2, 1), torch.bfloat16),
])
def test_conv2d_as_one_implicit_gemm_is_torchs(generated, stride, padding, dilation, dtype):
    """specs/conv2d_implicit_gemm.tile: the reduction over (c, kh, kw) and the output pixels walked
    as flattened axes split into digits; every config in f32, the same as conv2d."""
    module = generated("conv2d_implicit_gemm")
    x, w, bias = randn(2, 5, 7, 9, dtype=dtype), randn(17, 5, 3, 2, dtype=dtype, seed=1), randn(17, dtype=dtype, seed=2)
    want = F.conv2d(x.float(), w.float(), bias.float(), stride, padding, dilation).to(dtype)
    scalars = (*stride, *padding, *dilation)
    for config in config_indices(module) if dtype == torch.float32 else [None]:
        close(module.conv2d_implicit_gemm(x, w, bias, *scalars, config=config), want, dtype, 5 * 6)
    close(module.reference(x, w, bias, *scalars), want, dtype, 5 * 6)
    close(module.conv2d_implicit_gemm(x, w, None, *scalars), F.conv2d(x.float(), w.float(), None, stride, padding,
                                                                      dilation).to(dtype), dtype, 5 * 6)



@pytest.mark.parametrize(("stride", "padding", "dilation", "dtype"), [
    (1, 0, 1, torch.float32), (2, 1, 2, torch.float32), (1, 1, 1, torch.bfloat16),
])
def test_conv3d_as_one_implicit_gemm_is_torchs(generated, stride, padding, dilation, dtype):
    """specs/conv3d_implicit_gemm.tile: the reduction over (c, kd, kh, kw) and the output positions
    over (od, oh, ow), each a flattened axis split into digits; 3 input channels, as a video
    model's first layer; every config in f32 on a GPU, the two ends in the interpreter."""
    module = generated("conv3d_implicit_gemm")
    x, w, bias = randn(2, 3, 5, 6, 7, dtype=dtype), randn(17, 3, 2, 3, 2, dtype=dtype, seed=1), randn(17, dtype=dtype,
                                                                                                       seed=2)
    want = F.conv3d(x.float(), w.float(), bias.float(), stride, padding, dilation).to(dtype)
    every = config_indices(module) if DEVICE == "cuda" else config_ends(module)
    configs = every if dtype == torch.float32 else [None]
    for config in configs:
        close(module.conv3d_implicit_gemm(x, w, bias, stride, padding, dilation, config=config), want, dtype, 36)
    close(module.reference(x, w, bias, stride, padding, dilation), want, dtype, 36)
    close(module.conv3d_implicit_gemm(x, w, None, stride, padding, dilation),
          F.conv3d(x.float(), w.float(), None, stride, padding, dilation).to(dtype), dtype, 36)


def test_conv3d_implicit_gemm_trains_through_conv3ds_backward(generated, monkeypatch):
    """The implicit-GEMM form names conv3d's backward specs: the same gradients as torch's."""
    x, w, b = randn(2, 3, 4, 5, 6), randn(16, 3, 2, 3, 2, seed=1), randn(16, seed=2)
    check_training(generated, monkeypatch, "conv3d_implicit_gemm", [x, w, b], (2, 1, 1),
                   lambda x, w, b: F.conv3d(x, w, b, 2, 1, 1), (16 * 12, 2 * 3 * 3 * 4, 2 * 3 * 3 * 4), ends=(0,),
                   backward_names=["conv3d_backward_dx", "conv3d_backward_dw", "conv3d_backward_dbias"])


@pytest.mark.parametrize("samples", [0, 1, 32, 33, 70])
def test_weight_gradients_sum_every_slice_of_the_samples(generated, samples):
    """The weight gradients run a program per slice of the samples (s, s + 32, ...: at most 32
    slices) and merge the slices' partials: right at no sample (a gradient of zeros), at one, at 32
    (one sample a slice) and past it (slices of two and three samples, some one short; conv2d's up
    to two, the same finish kernel as conv1d's)."""
    x, w = randn(samples, 3, 9, seed=7), randn(5, 3, 4, seed=8)
    dy = randn(samples, 5, 6, seed=9)
    leaf = w.clone().requires_grad_()
    want = torch.autograd.grad(F.conv1d(x, leaf, None, 1, 0, 1), leaf, dy)[0] if samples else torch.zeros_like(w)
    close(generated("conv1d_backward_dw").conv1d_backward_dw(x, w, dy), want, torch.float32, max(samples, 1) * 6)
    if samples > 33:
        return
    x2, w2 = randn(samples, 3, 5, 6, seed=7), randn(4, 3, 2, 3, seed=8)
    dy2 = randn(samples, 4, 4, 4, seed=9)
    leaf2 = w2.clone().requires_grad_()
    want2 = (torch.autograd.grad(F.conv2d(x2, leaf2), leaf2, dy2)[0] if samples else torch.zeros_like(w2))
    got2 = generated("conv2d_backward_dweight").conv2d_backward_dweight(x2, w2, dy2)
    close(got2, want2, torch.float32, max(samples, 1) * 16)
