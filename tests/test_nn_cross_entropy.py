"""tilegen.nn.cross_entropy: the loss reduced as torch's, and the statistics a training loop logs
(Liger-Kernel's return_z_loss, return_token_accuracy, return_predicted_tokens), against torch:
F.cross_entropy, torch.logsumexp and torch.argmax of the same logits, with rows ignored, class
weights, soft-capping, and the stats kernel at each of its block sizes over rows with tails."""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices, force_config
from tilegen.nn import module
from tilegen.nn.cross_entropy import CrossEntropyOutput, cross_entropy
from tilegen.nn.linear_cross_entropy import linear_cross_entropy


def _batch(rows, vocab, dtype=torch.float32, seed=0, ignore_index=-100):
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=generator) * 3).to(dtype)
    target = torch.randint(0, vocab, (rows,), generator=generator)
    target[::4] = ignore_index
    return logits, target


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_loss_is_torchs(reduction, weighted):
    logits, target = _batch(9, 37, seed=1)
    weight = torch.rand(37, generator=torch.Generator().manual_seed(2)) if weighted else None
    ours = logits.clone().requires_grad_()
    theirs = logits.clone().requires_grad_()
    got = cross_entropy(ours, target, weight, reduction=reduction, label_smoothing=0.1)
    want = F.cross_entropy(theirs, target, weight, reduction=reduction, label_smoothing=0.1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grad = torch.randn(got.shape)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("softcap", [0.0, 7.0])
def test_the_statistics_are_those_of_torch(reduction, softcap):
    """z-loss from torch.logsumexp, accuracy and predicted tokens from torch.argmax, of the logits as
    the loss sees them (soft-capped); ignored rows predict -1 and count in neither."""
    logits, target = _batch(13, 300, seed=3)
    target[5] = logits[5].argmax()  # some rows right
    target[6] = logits[6].argmax()
    out = cross_entropy(logits, target, reduction=reduction, softcap=softcap, lse_square_scale=1e-3,
                        return_z_loss=True, return_token_accuracy=True, return_predicted_tokens=True)
    assert isinstance(out, CrossEntropyOutput)
    z = softcap * torch.tanh(logits / softcap) if softcap else logits
    kept = target != -100
    z_rows = torch.where(kept, 1e-3 * torch.logsumexp(z, -1) ** 2, 0.0)
    right = ((z.argmax(-1) == target) & kept).float()
    if reduction == "none":
        want_z, want_accuracy = z_rows, right
    else:
        want_z = z_rows.sum() / kept.sum() if reduction == "mean" else z_rows.sum()
        want_accuracy = right.sum() / kept.sum()
    torch.testing.assert_close(out.z_loss, want_z, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out.token_accuracy, want_accuracy)
    assert out.predicted_tokens.dtype == torch.int64
    assert torch.equal(out.predicted_tokens, torch.where(kept, z.argmax(-1), -1))
    assert 0 < float(right.sum()) < kept.sum()
    plain = cross_entropy(logits, target, reduction=reduction, softcap=softcap, lse_square_scale=1e-3)
    torch.testing.assert_close(out.loss, plain, rtol=0, atol=0)  # the statistics change no loss


def test_only_what_is_asked_for():
    logits, target = _batch(5, 11, seed=4)
    assert isinstance(cross_entropy(logits, target), torch.Tensor)
    out = cross_entropy(logits, target, return_predicted_tokens=True)
    assert out.z_loss is None and out.token_accuracy is None and out.predicted_tokens.shape == (5,)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(logits, target, reduction="batchmean")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_stats_kernel_at_every_block_size(monkeypatch, dtype):
    """Rows longer than one tile with a tail, of both signs, a row with a NaN (torch.argmax gives the
    NaN's index; its lse is NaN), a row of ties (the first index), a row of -inf and one finite."""
    stats = module("cross_entropy_stats")
    logits, _ = _batch(6, 5000, dtype, seed=5)
    logits[1, 4321] = float("nan")
    logits[2] = 1.0
    logits[3] = float("-inf")
    logits[3, 4999] = -2.0
    for index in config_indices(stats):
        force_config(monkeypatch, stats, index)
        lse, predicted = stats.cross_entropy_stats(logits)
        want = torch.logsumexp(logits.float(), -1)
        torch.testing.assert_close(lse, want, rtol=1e-5, atol=1e-5, equal_nan=True, msg=f"config {index}")
        assert torch.equal(predicted, logits.float().argmax(-1)), f"config {index}"


def test_fused_linear_statistics_are_the_unfused_ones():
    """linear_cross_entropy's statistics over chunks of rows equal cross_entropy's on h @ weight.T."""
    generator = torch.Generator().manual_seed(6)
    h, weight = torch.randn(10, 16, generator=generator), torch.randn(40, 16, generator=generator)
    target = torch.randint(0, 40, (10,), generator=generator)
    target[3] = -100
    options = {"lse_square_scale": 1e-3, "return_z_loss": True, "return_token_accuracy": True,
               "return_predicted_tokens": True}
    fused = linear_cross_entropy(h, weight, target, chunk_rows=3, **options)
    plain = cross_entropy(h @ weight.T, target, **options)
    for name in CrossEntropyOutput._fields:
        torch.testing.assert_close(getattr(fused, name), getattr(plain, name), rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("fused", [False, True])
def test_class_weights_with_a_z_loss(fused, reduction):
    """With class weights (of both signs, one 0) and a z-loss, the cross-entropy is reduced as torch's
    (a mean divides by the targets' weights) and the z-loss over the rows not ignored (PaLM's and
    Liger-Kernel's mean): loss and gradients against torch autograd of that sum."""
    generator = torch.Generator().manual_seed(7)
    h, w = torch.randn(11, 8, generator=generator), torch.randn(30, 8, generator=generator)
    target = torch.randint(0, 30, (11,), generator=generator)
    target[2] = -100
    weight = torch.randn(30, generator=generator)
    weight[target[5]] = 0.0
    ours, theirs = h.clone().requires_grad_(), h.clone().requires_grad_()
    options = {"lse_square_scale": 1e-2, "reduction": reduction, "softcap": 5.0}
    if fused:
        loss = linear_cross_entropy(ours, w, target, ce_weight=weight, chunk_rows=4, **options)
    else:
        loss = cross_entropy(ours @ w.T, target, weight, **options)
    logits = 5.0 * torch.tanh(theirs @ w.T / 5.0)
    kept = target != -100
    z = torch.where(kept, 1e-2 * torch.logsumexp(logits, -1) ** 2, 0.0).sum()
    want = F.cross_entropy(logits, target, weight, reduction=reduction) + (z / kept.sum() if reduction == "mean" else z)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    loss.backward()
    want.backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", [-1, 7, 1000])
def test_a_target_outside_the_classes_is_nan_or_with_the_check_an_index_error(monkeypatch, bad):
    """A target outside [0, V) (not ignore_index): its row's loss and gradients are NaN, the other
    rows torch's, any reduction NaN; under TILEGEN_CHECK_INDICES=1 an IndexError as torch's CPU
    cross-entropy raises, from the fused linear head too."""
    monkeypatch.delenv("TILEGEN_CHECK_INDICES", raising=False)
    logits, _ = _batch(5, 7, seed=3)
    target = torch.tensor([0, bad, 3, -100, 6])
    ours = logits.clone().requires_grad_()
    rows = cross_entropy(ours, target, reduction="none")
    kept = torch.tensor([True, False, True, True, True])
    assert torch.isnan(rows[1])
    torch.testing.assert_close(rows[kept], F.cross_entropy(logits[kept], target[kept], reduction="none"))
    assert torch.isnan(cross_entropy(logits, target)) and torch.isnan(cross_entropy(logits, target, reduction="sum"))
    rows.sum().backward()
    theirs = logits.clone().requires_grad_()
    F.cross_entropy(theirs[kept], target[kept], reduction="sum").backward()
    assert torch.isnan(ours.grad[1]).all()
    torch.testing.assert_close(ours.grad[kept], theirs.grad[kept])
    h, w = torch.randn(5, 4), torch.randn(7, 4)
    assert torch.isnan(linear_cross_entropy(h, w, target))
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(logits, target)
    monkeypatch.setenv("TILEGEN_CHECK_INDICES", "1")
    with pytest.raises(IndexError, match=f"cross_entropy: target {bad} is out of bounds: the classes are 0 to 6"):
        cross_entropy(logits, target)
    with pytest.raises(IndexError, match=f"linear_cross_entropy: target {bad} is out of bounds"):
        linear_cross_entropy(h, w, target)
    assert torch.isfinite(cross_entropy(logits, torch.where(target == bad, 2, target)))  # in range: no error
