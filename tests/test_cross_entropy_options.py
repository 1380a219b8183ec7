"""Scalar inputs with defaults (``in ignore_index: i64 = -100``) and the cross-entropy options
they carry: ``ignore_index`` and ``label_smoothing`` as torch.nn.functional.cross_entropy has
them (reduction="none"), logits of every float dtype read into float32, forward and backward,
at every tune config, against torch computing on the logits in float32."""

import inspect
import os

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import config_indices, force_config
from tilegen.check import check
from tilegen.errors import SpecError
from tilegen.parser import parse

SCALED = """\
kernel k
  in  x: f32[N]
  in  alpha: f32 = 2
  in  shift: i32 = -3
  out y: f32[N]
  block BN = 16
  grid  n over N by BN
  y[n] = x[n] * alpha + f32(shift)
"""


def test_a_scalar_default_is_the_launchers_the_references_and_the_ops(compiled):
    module = compiled(SCALED)
    x = torch.randn(37)
    parameters = inspect.signature(module.k).parameters
    assert parameters["alpha"].default == 2.0 and type(parameters["alpha"].default) is float
    assert parameters["shift"].default == -3
    torch.testing.assert_close(module.k(x), x * 2 - 3)
    torch.testing.assert_close(module.k(x, 0.5), x * 0.5 - 3)
    torch.testing.assert_close(module.k(x, shift=4), x * 2 + 4)
    torch.testing.assert_close(module.reference(x), x * 2 - 3)
    assert inspect.signature(module.reference).parameters["shift"].default == -3
    assert "float alpha=2., SymInt shift=-3" in str(module.op.default._schema)
    torch.testing.assert_close(module.op(x), x * 2 - 3)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("in  x: f32[N]", "in  x: f32[N] = 0", "optional input 'x' has dimension 'N', which no required input gives"),
    ("in  shift: i32 = -3", "in  shift: i32", "input 'shift' has no default but follows 'alpha'"),
    ("in  shift: i32 = -3", "in  shift: i32 = 0.5", "it starts at an integer, not 0.5"),
])
def test_bad_scalar_defaults_are_refused_at_their_line(old, new, message):
    with pytest.raises(SpecError) as info:
        check(parse(SCALED.replace(old, new), "bad.tile"))
    assert message in info.value.render()
    line = [text.strip() for text in SCALED.replace(old, new).splitlines()].index(new) + 1
    assert f"bad.tile:{line}:" in info.value.render()


def _logits(rows, classes, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, classes, generator=g) * 4
    x[1, 3] = float("-inf")  # a masked class: the smoothing term must not turn it into NaN without smoothing
    target = torch.randint(0, classes, (rows,), generator=g)
    target[0] = target[rows - 2] = -100
    return x.to(dtype), target, torch.randn(rows, generator=g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("classes", [333, 1030])
def test_cross_entropy_ignores_and_smooths_as_torch(generated, monkeypatch, dtype, smoothing, classes):
    module = generated("cross_entropy")
    x, target, weights = _logits(6, classes, dtype, seed=classes)
    if smoothing:
        x[1, 3] = 0.0  # with smoothing a -inf logit makes torch's loss inf as well: keep the row finite
    logits32 = x.float().clone().requires_grad_()
    expected = F.cross_entropy(logits32, target, reduction="none", label_smoothing=smoothing)
    (dx_expected,) = torch.autograd.grad((expected * weights).sum(), logits32)
    atol = 2e-3 if dtype == torch.float16 else 1e-5  # the gradient rounded to f16
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        logits = x.clone().requires_grad_()
        loss, _ = module.cross_entropy(logits, target, label_smoothing=smoothing)
        assert loss.dtype == torch.float32 and bool((loss[target == -100] == 0).all())
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
        (loss * weights).sum().backward()
        assert logits.grad.dtype == dtype and bool((logits.grad[target == -100] == 0).all())
        torch.testing.assert_close(logits.grad.float(), dx_expected, rtol=1e-3, atol=atol)
    torch.testing.assert_close(module.reference(x, target, -100, smoothing)[0], expected.detach(), rtol=1e-5, atol=1e-5)


def _softcapped_z_loss(x, target, softcap, scale, smoothing):
    """Gemma 2's soft-capping and PaLM's z-loss as Liger-Kernel defines them, in torch: the loss of
    z = softcap * tanh(x / softcap) plus scale * logsumexp(z)^2, 0 on ignored rows."""
    z = softcap * torch.tanh(x / softcap) if softcap else x
    loss = F.cross_entropy(z, target, reduction="none", label_smoothing=smoothing)
    return loss + torch.where(target == -100, 0.0, scale * torch.logsumexp(z, dim=1) ** 2)


@pytest.mark.parametrize(("softcap", "scale", "smoothing"), [(30.0, 0.0, 0.0), (0.0, 1e-3, 0.0), (5.0, 1e-3, 0.1)])
def test_cross_entropy_softcap_and_z_loss_as_liger_defines_them(generated, monkeypatch, softcap, scale, smoothing):
    module = generated("cross_entropy")
    x, target, weights = _logits(6, 333, torch.float32, seed=3)
    x[1, 3] = 0.0
    x[2] *= 20  # logits past the cap: tanh's flat ends, where its derivative is near 0
    logits32 = x.clone().requires_grad_()
    expected = _softcapped_z_loss(logits32, target, softcap, scale, smoothing)
    (dx_expected,) = torch.autograd.grad((expected * weights).sum(), logits32)
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        logits = x.clone().requires_grad_()
        loss, _ = module.cross_entropy(logits, target, label_smoothing=smoothing, softcap=softcap,
                                       lse_square_scale=scale)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
        (loss * weights).sum().backward()
        torch.testing.assert_close(logits.grad, dx_expected, rtol=1e-4, atol=1e-6)
    reference = module.reference(x, target, -100, smoothing, softcap, scale)[0]
    torch.testing.assert_close(reference, expected.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("dtype", "smoothing", "softcap", "scale"), [
    (torch.float32, 0.0, 0.0, 0.0), (torch.float32, 0.1, 0.0, 0.0), (torch.float16, 0.2, 0.0, 0.0),
    (torch.float32, 0.1, 5.0, 1e-3), (torch.float32, 0.0, 0.0, 1e-3),
])
def test_cross_entropy_weighs_each_class_as_torch(generated, monkeypatch, weight_dtype, dtype, smoothing, softcap,
                                                  scale):
    """F.cross_entropy's per-class weight (loss (1 - e) * w[t] * nll + e / V * sum(w * -log p) a
    row, reduction "none"), with smoothing, soft-capping and z-loss (unweighted, as Liger-Kernel
    adds it), forward and backward at every config; a target whose class weighs 0 has loss and
    gradient 0 without smoothing or z-loss (its row's log-sum-exp does not come back from a 0)."""
    module = generated("cross_entropy")
    x, target, upstream = _logits(7, 333, dtype, seed=11)
    x[1, 3] = 0.0
    weight = torch.rand(333, generator=torch.Generator().manual_seed(12)).to(weight_dtype)
    weight[target[3]] = 0.0  # a class that does not count
    logits32 = x.float().clone().requires_grad_()
    z = softcap * torch.tanh(logits32 / softcap) if softcap else logits32
    expected = F.cross_entropy(z, target, weight=weight.float(), reduction="none", label_smoothing=smoothing)
    expected = expected + torch.where(target == -100, 0.0, scale * torch.logsumexp(z, dim=1) ** 2)
    (dx_expected,) = torch.autograd.grad((expected * upstream).sum(), logits32)
    atol = 2e-3 if dtype == torch.float16 else 1e-5
    for index in config_indices(module):  # one config of each block size in the interpreter
        force_config(monkeypatch, module, index)
        logits = x.clone().requires_grad_()
        loss, _ = module.cross_entropy(logits, target, -100, smoothing, softcap, scale, weight)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
        (loss * upstream).sum().backward()
        assert torch.isfinite(logits.grad).all()
        torch.testing.assert_close(logits.grad.float(), dx_expected, rtol=1e-3, atol=atol)
    reference = module.reference(x, target, -100, smoothing, softcap, scale, weight)[0]
    torch.testing.assert_close(reference, expected.detach(), rtol=1e-5, atol=1e-5)


def test_cross_entropy_takes_another_ignore_index(generated):
    module = generated("cross_entropy")
    x, target, _ = _logits(5, 40, torch.float32, seed=1)
    target[3] = 7
    expected = F.cross_entropy(x, target.clamp(min=0), reduction="none", ignore_index=7)
    torch.testing.assert_close(module.cross_entropy(x, target.clamp(min=0), 7)[0], expected)
    assert module.cross_entropy(x, target.clamp(min=0), 7)[0][3] == 0


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("classes", [32000, 50257])
def test_cross_entropy_options_on_the_gpu(generated, dtype, classes):
    """A language model's vocabularies (Llama 2's, GPT-2's odd one), a quarter of the targets
    ignored, label smoothing 0.1, at every config; bf16 is exact here, as it is not in the
    interpreter."""
    module = generated("cross_entropy")
    g = torch.Generator("cuda").manual_seed(classes)
    x = (torch.randn(64, classes, device="cuda", generator=g) * 3).to(dtype)
    target = torch.randint(0, classes, (64,), device="cuda", generator=g)
    target[::4] = -100
    weights = torch.randn(64, device="cuda", generator=g)
    softcap = 30.0 if classes == 32000 else 0.0  # Gemma 2's soft-capping at Llama 2's vocabulary
    logits32 = x.float().clone().requires_grad_()
    capped = softcap * torch.tanh(logits32 / softcap) if softcap else logits32
    expected = F.cross_entropy(capped, target, reduction="none", label_smoothing=0.1)
    (dx_expected,) = torch.autograd.grad((expected * weights).sum(), logits32)
    for index in range(len(module._CONFIGS)):
        logits = x.clone().requires_grad_()
        loss, _ = module.cross_entropy(logits, target, -100, 0.1, softcap, config=index)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-4, msg=f"config {index}")
        (loss * weights).sum().backward()
        torch.testing.assert_close(logits.grad, dx_expected.to(dtype), rtol=1e-2, atol=1e-5, msg=f"config {index}")


@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_class_weights_on_the_gpu(generated, dtype, smoothing):
    """Per-class weights at Llama 2's vocabulary, forward and backward at every config, against
    torch's F.cross_entropy(weight=...) in float32."""
    module = generated("cross_entropy")
    g = torch.Generator("cuda").manual_seed(7)
    x = (torch.randn(64, 32000, device="cuda", generator=g) * 3).to(dtype)
    target = torch.randint(0, 32000, (64,), device="cuda", generator=g)
    target[::5] = -100
    weight = torch.rand(32000, device="cuda", generator=g)
    upstream = torch.randn(64, device="cuda", generator=g)
    logits32 = x.float().clone().requires_grad_()
    expected = F.cross_entropy(logits32, target, weight=weight, reduction="none", label_smoothing=smoothing)
    (dx_expected,) = torch.autograd.grad((expected * upstream).sum(), logits32)
    for index in range(len(module._CONFIGS)):
        logits = x.clone().requires_grad_()
        loss, _ = module.cross_entropy(logits, target, -100, smoothing, 0.0, 0.0, weight, config=index)
        torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-4, msg=f"config {index}")
        (loss * upstream).sum().backward()
        torch.testing.assert_close(logits.grad, dx_expected.to(dtype), rtol=1e-2, atol=1e-5, msg=f"config {index}")


OPTION = """\
kernel k
  in  x: f32[N]
  in  scale: f32 = 0.0
  out y: f32[N]
  out z: f32[N]
  block BN = 16
  grid  n over N by BN
  y[n] = where(scale == 0, x[n], exp(x[n]) / scale)
  z[n] = where(x[n] > 0, x[n], exp(x[n]) / scale)
"""


def test_a_where_on_a_scalar_option_is_a_branch_per_program(compiled):
    """A mask of one value per program (a scalar input's test) with a costly branch is a
    conditional expression, which Triton compiles to a branch: the option off computes no exp; a
    mask that varies along the tile stays a tl.where. Both give torch.where's values."""
    module = compiled(OPTION)
    source = open(module.__file__).read()
    assert "(x if scale == 0 else tl.exp(x) / scale)" in source
    assert "tl.where(x > 0, x, tl.exp(x) / scale)" in source
    x = torch.randn(37)
    for scale in (0.0, 2.0):
        y, z = module.k(x, scale)
        torch.testing.assert_close(y, torch.where(torch.tensor(scale == 0), x, x.exp() / scale))
        torch.testing.assert_close(z, torch.where(x > 0, x, x.exp() / scale))
