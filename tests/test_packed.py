"""Packed inputs (``in b: T[K, N] packed [N, K]``): the launcher copies the input into that memory
order unless it is in it already, the kernel reads the same values, and the checker refuses an
order that does not name each dimension once.
"""

import os

import pytest
import torch

from tilegen import runtime
from tilegen.check import check
from tilegen.errors import SpecError
from tilegen.parser import parse

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"

MATMUL = """\
kernel mm
  in  a: f32[M, K]
  in  b: f32[K, N] packed [N, K]
  out c: f32[M, N]
  block BM = 16, BN = 16, BK = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""

def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def test_the_order_is_parsed_as_the_dimensions_positions():
    spec = check(parse(MATMUL, "mm.tile"))
    b = spec.tensor("b")
    assert [n.id for n in b.packed] == ["N", "K"] and b.packed_order == (1, 0)
    assert spec.tensor("a").packed == () and spec.tensor("a").packed_order == ()


@pytest.mark.parametrize(("old", "new", "message"), [
    ("packed [N, K]", "packed [N]", "the order 'b' is packed in leaves out 'K': name each of its 2 dimensions once"),
    ("packed [N, K]", "packed [N, Q]", "'Q' is not a dimension of 'b' (K, N)"),
    ("packed [N, K]", "packed [N, N]", "'N' is named twice in the order 'b' is packed in"),
    ("f32[K, N] packed [N, K]", "f32[K, K] packed [K, K]", "each of its dimensions must be a size named once"),
    ("f32[K, N] packed [N, K]", "f32[K, 4] packed [K]", "each of its dimensions must be a size named once"),
    ("out c: f32[M, N]", "out c: f32[M, N] packed [N, M]", "'c' is an output; only an input tensor can be packed"),
])
def test_an_order_that_does_not_name_each_dimension_once_is_refused_where_written(old, new, message):
    with pytest.raises(SpecError) as info:
        check(parse(MATMUL.replace(old, new), "bad.tile"))
    assert message in info.value.render()
    assert info.value.render().startswith("bad.tile:")


def test_a_scalar_and_an_input_written_over_cannot_be_packed():
    scalar = MATMUL.replace("  out c", "  in  s: f32 packed [K]\n  out c")
    with pytest.raises(SpecError) as info:
        check(parse(scalar, "bad.tile"))
    assert "'s' is a scalar; only an input tensor can be packed" in info.value.render()
    over = MATMUL.replace("in  b: f32[K, N] packed [N, K]", "in  b: f32[M, N] packed [N, M]").replace(
        "out c: f32[M, N]", "out c: f32[M, N] in place of b").replace("b[k, n]", "a[k, n]")
    with pytest.raises(SpecError) as info:
        check(parse(over, "bad.tile"))
    assert "'c' is written in place of 'b', which is packed (a copy)" in info.value.render()


def test_packed_keeps_a_tensor_in_that_order_and_copies_any_other():
    w = randn(6, 5, 3, 2)  # [O, C, KH, KW], contiguous
    order = (2, 3, 0, 1)
    copy = runtime.packed(w, order)
    assert copy.shape == w.shape and torch.equal(copy, w) and copy.data_ptr() != w.data_ptr()
    assert copy.permute(order).is_contiguous()
    assert runtime.packed(copy, order) is copy  # in that order already: no second copy
    strided = w[:, ::2]  # a view with gaps: packed densely
    assert torch.equal(runtime.packed(strided, order), strided)
    for other in (None, 3, randn(4, 4)):  # not a tensor of that rank: the launcher's checks name it
        assert runtime.packed(other, order) is other


def test_a_packed_input_gives_the_kernel_its_values(compiled):
    """The matmul of a packed b is torch's at every layout b comes in (the copy's strides, or the
    caller's where b is in that order, reach the kernel). The gradient through the copy is
    tests/test_conv.py's: every convolution's weight is packed."""
    module = compiled(MATMUL, "mm")
    a, b = randn(19, 37), randn(37, 23, seed=1)
    for given in (b, b.t().contiguous().t(), randn(23, 74, seed=2).t()[::2]):
        torch.testing.assert_close(module.mm(a, given), a @ given, rtol=1e-5, atol=1e-4)


def test_the_launcher_packs_before_anything_else(compiled):
    """The packing is the launcher's first line (before config=, torch.compile's route and the fast
    path), so every route sees the packed tensor; the docstring says so."""
    module = compiled(MATMUL, "mm")
    import inspect

    source = inspect.getsource(module.mm)
    body = source.split('"""')[2].strip().splitlines()
    assert body[0].startswith("b = _rt.packed(b, (1, 0))")
    assert "b: f32[K, N] (copied into memory order [N, K] unless it has it)" in module.mm.__doc__


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_launcher_with_a_packed_input_compiles_whole(generated, requires_grad):
    """conv1d (its weight packed [K, O, C]) called inside torch.compile(fullgraph=True): the
    packing traces as torch ops before the launcher hands the call to its custom op, with no graph
    break, and the result and gradients are the eager call's."""
    import torch.nn.functional as F

    module = generated("conv1d")
    x, w = randn(2, 5, 13), randn(7, 5, 3, seed=1)
    torch._dynamo.reset()
    backend = "aot_eager" if DEVICE == "cpu" else "inductor"
    compiled = torch.compile(lambda x, w: module.conv1d(x * 2, w, None, 1, 1, 1), backend=backend, fullgraph=True)
    leaves = [t.clone().requires_grad_(requires_grad) for t in (x, w)]
    y = compiled(*leaves)
    want = F.conv1d(x * 2, w, None, 1, 1, 1)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4 if DEVICE == "cpu" else 2e-2)
    if requires_grad:
        dy = randn(*y.shape, seed=3)
        got = torch.autograd.grad(y, leaves, dy)
        floats = [t.clone().requires_grad_() for t in (x, w)]
        wanted = torch.autograd.grad(F.conv1d(floats[0] * 2, floats[1], None, 1, 1, 1), floats, dy)
        for g, e in zip(got, wanted, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 if DEVICE == "cpu" else 2e-2)
