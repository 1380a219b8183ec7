"""specs/jsd.tile (Liger-Kernel's generalized Jensen-Shannon divergence, per row) and its derived
backward against torch: the loss and the gradients of the student's and the teacher's
log-probabilities, at every config, beta at its ends (forward and reverse KL) and between,
f32 and f16, vocabularies with tails."""

import os

import pytest
import torch

from tests.conftest import config_indices, force_config


def _torch_jsd(x, y, beta):
    """Liger-Kernel's definition, in float32: x, y log-probabilities of the student and teacher."""
    x, y = x.float(), y.float()
    q, p = x.exp(), y.exp()
    if beta == 0:
        return (p * (y - x)).sum(1)
    if beta == 1:
        return (q * (x - y)).sum(1)
    m = beta * p + (1 - beta) * q
    return (beta * p * (y - m.log()) + (1 - beta) * q * (x - m.log())).sum(1)


def _log_probs(rows, vocab, seed, dtype, device="cpu"):
    g = torch.Generator(device).manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, device=device) * 2
    return torch.log_softmax(logits, dim=1).to(dtype)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize(("dtype", "vocab"), [(torch.float32, 333), (torch.float16, 1030)])
def test_jsd_and_its_derived_backward_at_every_config(generated, monkeypatch, beta, dtype, vocab):
    module, backward = generated("jsd"), generated("jsd_backward")
    x, y = _log_probs(5, vocab, 1, dtype), _log_probs(5, vocab, 2, dtype)
    weights = torch.randn(5)  # the caller's reduction: a mask of ignored rows, a mean
    leaves = [x.float().clone().requires_grad_(), y.float().clone().requires_grad_()]
    expected = _torch_jsd(*leaves, beta)
    expected_grads = torch.autograd.grad((expected * weights).sum(), leaves)
    atol = 1e-6 if dtype == torch.float32 else 1e-3
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index)
        ours = [x.clone().requires_grad_(), y.clone().requires_grad_()]
        loss = module.jsd(*ours, beta)
        assert loss.dtype == torch.float32
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5, msg=f"config {index}")
        (loss * weights).sum().backward()
        for leaf, want in zip(ours, expected_grads, strict=True):
            assert leaf.grad.dtype == dtype
            torch.testing.assert_close(leaf.grad.float(), want, rtol=1e-3, atol=atol, msg=f"config {index}")
    torch.testing.assert_close(module.reference(x, y, beta), expected.detach(), rtol=1e-5, atol=1e-5)


def test_jsd_of_equal_distributions_is_zero_and_beta_defaults_to_a_half(generated):
    module = generated("jsd")
    x = _log_probs(3, 77, 3, torch.float32)
    torch.testing.assert_close(module.jsd(x, x), torch.zeros(3), atol=1e-6, rtol=0)
    y = _log_probs(3, 77, 4, torch.float32)
    torch.testing.assert_close(module.jsd(x, y), _torch_jsd(x, y, 0.5), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                    reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_jsd_over_llama_3s_vocabulary_on_the_gpu(generated, dtype):
    """128256 classes: past the longest row one tile holds, so the rows are looped over."""
    module = generated("jsd")
    x, y = _log_probs(16, 128256, 5, dtype, "cuda"), _log_probs(16, 128256, 6, dtype, "cuda")
    leaves = [x.float().clone().requires_grad_(), y.float().clone().requires_grad_()]
    expected = _torch_jsd(*leaves, 0.5)
    expected_grads = torch.autograd.grad(expected.sum(), leaves)
    ours = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    loss = module.jsd(*ours, 0.5)
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-4, atol=1e-4)
    loss.sum().backward()
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-4}
    for leaf, want in zip(ours, expected_grads, strict=True):
        torch.testing.assert_close(leaf.grad.float(), want.to(dtype).float(), **tol)
