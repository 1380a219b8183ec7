"""tilegen.nn.matmul and tilegen.nn.linear: float32 master weights, activations in f16 or bf16, the
weight's gradient written by matmul_fast_backward_db in float32 (its caller-chosen output dtype)
and in the weight's memory order; checked against torch's float32 (and float64) products."""

import pytest
import torch

from tilegen.nn import module
from tilegen.nn.linear import linear, matmul


def _inputs(shape_x, shape_w, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape_x, generator=generator).to(dtype)
    w = torch.randn(*shape_w, generator=generator)
    dy = torch.randn(*shape_x[:-1], shape_w[1] if len(shape_w) == 2 else 1, generator=generator).to(dtype)
    return x, w, dy


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (37, 48, 33), (64, 17, 80)])
def test_a_float32_weight_gets_its_gradient_in_float32_from_the_kernel(dtype, m, k, n):
    x, w, dy = _inputs((m, k), (k, n), dtype)
    x, w = x.requires_grad_(), w.requires_grad_()
    y = matmul(x, w)
    # the forward is matmul_fast on the weight cast to x's dtype, bit for bit
    assert y.dtype == dtype and torch.equal(y, module("matmul_fast").matmul_fast(x.detach(), w.detach().to(dtype)))
    y.backward(dy)
    assert w.grad.dtype == torch.float32 and w.grad.stride() == w.stride()
    exact = x.detach().double().T @ dy.double()  # the products of f16/bf16 numbers are exact in float32
    torch.testing.assert_close(w.grad.double(), exact, rtol=1e-5, atol=1e-5)
    # float32's sum of the same products, rounded once to x's dtype
    wanted = (dy.float() @ w.detach().to(dtype).float().T).to(dtype)
    torch.testing.assert_close(x.grad, wanted, rtol=2 ** -7, atol=2 ** -7)


def test_linear_takes_torchs_weight_layout_and_keeps_it_for_the_gradient():
    x, _, _ = _inputs((3, 5, 24), (24, 1), torch.bfloat16, seed=1)  # [..., K]: three dimensions
    weight = torch.randn(40, 24, generator=torch.Generator().manual_seed(2)).requires_grad_()  # [N, K]
    dy = torch.randn(3, 5, 40, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    y = linear(x, weight)
    assert y.shape == (3, 5, 40)
    y.backward(dy)
    assert weight.grad.dtype == torch.float32 and weight.grad.stride() == (24, 1)  # row-major, as the weight
    exact = dy.reshape(-1, 40).double().T @ x.reshape(-1, 24).double()
    torch.testing.assert_close(weight.grad.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("weight_dtype", "grad_dtype"), [(torch.bfloat16, torch.bfloat16),
                                                          (torch.float16, torch.float16)])
def test_a_weight_in_another_narrow_dtype_gets_its_gradient_in_its_dtype(weight_dtype, grad_dtype):
    """bf16 weights of a bf16 model: the kernel writes bf16; f16 weights of a bf16 model: the kernel
    writes bf16 and autograd casts to f16 (the kernel writes only T or float32)."""
    x, w, dy = _inputs((19, 32), (32, 24), torch.bfloat16, seed=4)
    w = w.to(weight_dtype).requires_grad_()
    matmul(x, w).backward(dy)
    assert w.grad.dtype == grad_dtype
    exact = x.double().T @ dy.double()
    torch.testing.assert_close(w.grad.double(), exact, rtol=2 ** -7, atol=2 ** -6)


def test_under_torch_compile_the_gradients_are_the_eager_ones():
    x, w, dy = _inputs((33, 48), (48, 40), torch.bfloat16, seed=5)
    eager_w, compiled_w = w.clone().requires_grad_(), w.clone().requires_grad_()
    matmul(x, eager_w).backward(dy)
    step = torch.compile(lambda x, w: matmul(x, w), backend="aot_eager", fullgraph=True)
    step(x, compiled_w).backward(dy)
    assert compiled_w.grad.dtype == torch.float32
    torch.testing.assert_close(compiled_w.grad, eager_w.grad, rtol=0, atol=0)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: matmul(torch.ones(4, 3), torch.ones(5, 2)), "matmul: dimension 0 of b is 5, but the last dimension of x"),
    (lambda: matmul(torch.ones(4, 3), [[1.0]]), "matmul: b must be a tensor, got list"),
    (lambda: linear(torch.ones(4, 3), torch.ones(2, 5)), "linear: dimension 1 of weight is 5"),
    (lambda: linear(torch.ones(4, 3, dtype=torch.int32), torch.ones(2, 3)), "linear: x and weight must be float"),
    (lambda: matmul(torch.ones(4, 3), torch.ones(3)), "matmul: x must be [..., K] and b 2-D"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    assert message in str(caught.value)
