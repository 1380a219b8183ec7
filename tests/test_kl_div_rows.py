"""specs/kl_div_rows.tile (F.kl_div summed along each row, targets as probabilities or as
log-probabilities) and its derived backward against torch at every config, f32 and f16."""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices, force_config


def _inputs(rows, vocab, dtype, log_target, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(rows, vocab, generator=g) * 2, dim=1)
    t = torch.softmax(torch.randn(rows, vocab, generator=g) * 2, dim=1)
    if not log_target:
        t[0, :7] = 0.0  # a teacher's zero probabilities add 0 (torch's xlogy)
    return x.to(dtype), (t.log() if log_target else t).to(dtype)


@pytest.mark.parametrize("log_target", [0, 1])
@pytest.mark.parametrize(("dtype", "vocab"), [(torch.float32, 333), (torch.float16, 1030)])
def test_kl_div_rows_and_its_derived_backward_at_every_config(generated, monkeypatch, log_target, dtype, vocab):
    module, backward = generated("kl_div_rows"), generated("kl_div_rows_backward")
    x, t = _inputs(5, vocab, dtype, log_target, seed=vocab)
    weights = torch.randn(5)
    leaves = [x.float().clone().requires_grad_(), t.float().clone().requires_grad_()]
    expected = F.kl_div(leaves[0], leaves[1], reduction="none", log_target=bool(log_target)).sum(1)
    dx, dt = torch.autograd.grad((expected * weights).sum(), leaves)
    positive = t.float() > 0  # torch's gradient of the teacher is -inf where its probability is 0
    atol = 1e-6 if dtype == torch.float32 else 1e-3
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index)
        ours = [x.clone().requires_grad_(), t.clone().requires_grad_()]
        loss = module.kl_div_rows(*ours, log_target)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5, msg=f"config {index}")
        (loss * weights).sum().backward()
        torch.testing.assert_close(ours[0].grad.float(), dx, rtol=1e-3, atol=atol, msg=f"config {index}")
        torch.testing.assert_close(ours[1].grad.float()[positive], dt[positive], rtol=1e-3, atol=atol)
    torch.testing.assert_close(module.reference(x, t, log_target), expected.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:reduction.*mean.*divides the total loss:UserWarning")
def test_kl_div_rows_reduces_to_torchs_reductions():
    """The caller's reductions of the rows' sums are torch's: batchmean, sum and mean."""
    from tilegen.nn import kernel

    x, t = _inputs(4, 50, torch.float32, 0, seed=1)
    rows = kernel("kl_div_rows")(x, t)
    for reduction, ours in (("batchmean", rows.sum() / 4), ("sum", rows.sum()), ("mean", rows.sum() / (4 * 50))):
        torch.testing.assert_close(ours, F.kl_div(x, t, reduction=reduction), msg=reduction)
