"""specs/kl_div_rows.tile (F.kl_div summed along each row, targets as probabilities or as
log-probabilities) and its derived backward against torch at every config, f32 and f16; and
specs/kl_div_elementwise.tile (F.kl_div(reduction="none"), the target in a dtype of its own) and
its backward, in each dtype and at torch's infinities and NaN."""

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
@pytest.mark.parametrize(("dtype", "target_dtype", "vocab"), [
    (torch.float32, torch.float32, 333), (torch.float16, torch.float16, 1030), (torch.float16, torch.float32, 333)])
def test_kl_div_rows_and_its_derived_backward_at_every_config(generated, monkeypatch, log_target, dtype,
                                                              target_dtype, vocab):
    """The rows' losses and both gradients (the teacher's of log-probabilities too), the teacher in
    the student's dtype or its own."""
    module, backward = generated("kl_div_rows"), generated("kl_div_rows_backward")
    x, t = _inputs(5, vocab, dtype, log_target, seed=vocab)
    t = t.to(target_dtype)
    weights = torch.randn(5)
    leaves = [x.float().clone().requires_grad_(), t.float().clone().requires_grad_()]
    expected = F.kl_div(leaves[0], leaves[1], reduction="none", log_target=bool(log_target)).sum(1)
    dx, dt = torch.autograd.grad((expected * weights).sum(), leaves)
    positive = t.float() > 0 if not log_target else torch.ones_like(dt, dtype=torch.bool)
    assert bool(dt[positive].isfinite().all())  # torch's gradient of the teacher is -inf where its probability is 0
    atol = 1e-6 if dtype == torch.float32 else 1e-3
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index)
        ours = [x.clone().requires_grad_(), t.clone().requires_grad_()]
        loss = module.kl_div_rows(*ours, log_target)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5, msg=f"config {index}")
        (loss * weights).sum().backward()
        torch.testing.assert_close(ours[0].grad.float(), dx, rtol=1e-3, atol=atol, msg=f"config {index}")
        assert ours[1].grad.dtype == target_dtype
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


# specs/kl_div_elementwise.tile: F.kl_div(reduction="none"), the loss of each element, the target in
# a dtype of its own, and its derived backward.

#: (input dtype, target dtype, V): Liger's float32 target beside a half-precision input, and each
#: dtype alone; V leaves a tail of every config's BV.
ELEMENTWISE = [(torch.float32, torch.float32, 333), (torch.bfloat16, torch.float32, 1030),
               (torch.float16, torch.float32, 333), (torch.float16, torch.float16, 1030),
               (torch.bfloat16, torch.bfloat16, 333)]


@pytest.mark.parametrize("log_target", [0, 1])
@pytest.mark.parametrize(("dtype", "target_dtype", "vocab"), ELEMENTWISE)
def test_kl_div_elementwise_and_its_derived_backward_at_every_config(generated, monkeypatch, log_target, dtype,
                                                                     target_dtype, vocab):
    """Each element's loss, float32, against torch's F.kl_div(reduction="none") of the same values in
    float64; the input's gradient against torch's autograd (rounded once to its dtype) and the
    target's where torch's is finite (t > 0), at every config of both kernels."""
    module, backward = generated("kl_div_elementwise"), generated("kl_div_elementwise_backward")
    x, t = _inputs(5, vocab, dtype, log_target, seed=vocab)
    t = t.to(target_dtype)
    dloss = torch.randn(5, vocab, generator=torch.Generator().manual_seed(3))
    leaves = [x.double().requires_grad_(), t.double().requires_grad_()]
    expected = F.kl_div(leaves[0], leaves[1], reduction="none", log_target=bool(log_target))
    dx, dt = torch.autograd.grad(expected, leaves, dloss.double())
    finite = dt.isfinite()
    assert (~finite).any() != bool(log_target)  # probabilities of 0: torch's target gradient is not finite
    half = {"rtol": 8e-3, "atol": 1e-5} if torch.bfloat16 in (dtype, target_dtype) else {"rtol": 1e-3, "atol": 1e-6}
    for index in config_indices(module):
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index)
        ours = [x.clone().requires_grad_(), t.clone().requires_grad_()]
        loss = module.kl_div_elementwise(*ours, log_target)
        assert loss.dtype == torch.float32
        torch.testing.assert_close(loss, expected.detach().float(), rtol=1e-5, atol=1e-6, msg=f"config {index}")
        loss.backward(dloss)
        assert ours[0].grad.dtype == dtype and ours[1].grad.dtype == target_dtype
        want = dx.to(dtype).double() if dtype == torch.float32 else dx
        torch.testing.assert_close(ours[0].grad.double(), want, **(half if dtype != torch.float32 else
                                                                  {"rtol": 1e-6, "atol": 1e-7}))
        torch.testing.assert_close(ours[1].grad.double()[finite], dt[finite], rtol=1e-2, atol=1e-3)
    torch.testing.assert_close(module.reference(x, t, log_target), expected.detach().float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log_target", [0, 1])
def test_kl_div_elementwise_special_values_as_torch(generated, log_target):
    """Infinities, NaN, a target of 0 against an input of -inf (NaN: torch's 0 * -inf), a negative
    probability (NaN: log of it), inputs of both signs: the loss and the input's gradient where
    torch has them, NaN included."""
    module = generated("kl_div_elementwise")
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[-inf, -inf, -1.0, nan, -2.0, 3.0, -0.5, 0.0, 2.5, -1.0]])
    t = torch.tensor([[0.0, 0.5, nan, 0.25, -0.5, 0.75, 0.0, 1.0, -inf, inf]])
    dloss = torch.tensor([[1.0, -2.0, 1.0, 1.0, 0.5, -1.5, 2.0, 1.0, 1.0, -1.0]])
    leaf = x.clone().requires_grad_()
    want = F.kl_div(leaf, t, reduction="none", log_target=bool(log_target))
    want.backward(dloss)
    ours = x.clone().requires_grad_()
    got = module.kl_div_elementwise(ours, t, log_target)
    got.backward(dloss)
    torch.testing.assert_close(got, want.detach(), equal_nan=True, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.grad, leaf.grad, equal_nan=True, rtol=1e-6, atol=1e-6)
