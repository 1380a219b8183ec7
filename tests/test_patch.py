"""``tilegen.patch(model)`` on tiny, randomly initialised ``transformers`` causal LMs of each
supported family (Llama, Mistral, Qwen2, Gemma; no download): a patched copy and the original,
from the same weights, give the same loss and gradients, the patched one through tilegen's
kernels (counted), the original through none. Each sequence of the batch starts at its own
position, so the rotary tables differ per sequence ([B, S, D]). In Triton's interpreter (about
15 s of one core, most of it the kernels' launches); the bf16 variant runs on a GPU with
``TILEGEN_TEST_GPU=1``."""

import copy
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tilegen  # noqa: E402
from tilegen.nn import _LAUNCHERS, module  # noqa: E402

KERNELS = ("rms_norm", "rope", "swiglu", "geglu", "cross_entropy")
GPU = os.environ.get("TILEGEN_TEST_GPU") == "1"
FAMILIES = {  # a few heads, grouped-query where the family has it (Gemma: multi-query)
    "llama": lambda: transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=2),
    "mistral": lambda: transformers.MistralConfig(num_attention_heads=4, num_key_value_heads=2),
    "qwen2": lambda: transformers.Qwen2Config(num_attention_heads=4, num_key_value_heads=2),
    "gemma": lambda: transformers.GemmaConfig(num_attention_heads=4, num_key_value_heads=1, head_dim=16),
}


def tiny(family, layers, dtype=torch.float32, device="cpu"):
    """A randomly initialised model of ``family``: hidden 64, ``layers`` layers, vocabulary 100;
    its norms' weights random too (Gemma's start at 0, Llama's at 1: the weight would not show)."""
    config = FAMILIES[family]()
    config.update({"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers,
                   "max_position_embeddings": 64})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(0.0, 0.5)
    return model.to(device=device, dtype=dtype)


def batch(device="cpu"):
    """Two sequences of 4 tokens, the second at positions 3..6; some labels ignored (-100): the
    first two of the first sequence, one inside the second. (Each kernel's programs are per token:
    the interpreter's time goes with their count.)"""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (2, 4), generator=g)
    labels = ids.clone()
    labels[0, :2] = -100
    labels[1, 2] = -100
    positions = torch.arange(4)[None] + torch.tensor([[0], [3]])
    return {"input_ids": ids.to(device), "labels": labels.to(device), "position_ids": positions.to(device)}


@pytest.fixture
def calls(monkeypatch):
    """How many times each of tilegen's launchers that ``patch`` uses has run (forward calls)."""
    counted = dict.fromkeys(KERNELS, 0)
    for name in KERNELS:
        launcher = getattr(module(name), name)

        def counting(*args, _launcher=launcher, _name=name, **kwargs):
            counted[_name] += 1
            return _launcher(*args, **kwargs)

        monkeypatch.setattr(module(name), name, counting)
        monkeypatch.setitem(_LAUNCHERS, name, counting)  # what tilegen.nn.kernel hands out
    return counted


def step(model, inputs):
    """Loss and each parameter's gradient of one forward and backward."""
    model.zero_grad()
    with warnings.catch_warnings():  # the interpreter cannot time autotune configs: it says so once
        warnings.simplefilter("ignore", UserWarning)
        loss = model(**inputs).loss
        loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.skipif(GPU, reason="the interpreter's test: on a GPU see the bf16 test")
@pytest.mark.parametrize("family", FAMILIES)
def test_a_patched_model_computes_what_the_original_does(family, calls):
    """Same loss and gradients from the same weights in f32, each up to a few f32 roundings: the
    kernels compute in f32 and round once where torch rounds after each op (observed: the loss
    equal, the gradients within 5 ulps of their largest magnitude)."""
    layers = 2 if family == "llama" else 1  # every layer is patched (Llama's two); one each keeps the file short
    theirs = tiny(family, layers)
    ours = tilegen.patch(copy.deepcopy(theirs))
    inputs = batch()
    loss, grads = step(ours, inputs)
    gate = "geglu" if family == "gemma" else "swiglu"
    # each layer's two norms, rope and MLP, the final norm, the loss
    expected = {**dict.fromkeys(KERNELS, 0), "rms_norm": 2 * layers + 1, "rope": layers, gate: layers,
                "cross_entropy": 1}
    assert calls == expected
    want_loss, want_grads = step(theirs, inputs)
    assert calls == expected  # the original, of the same family, ran none (rope's dispatcher included)
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(loss, want_loss, rtol=4 * eps, atol=0)
    assert grads.keys() == want_grads.keys()
    for name, want in want_grads.items():
        scale = want.abs().max().item()
        torch.testing.assert_close(grads[name], want, rtol=0, atol=32 * eps * scale, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.skipif(GPU, reason="the interpreter's test")
def test_each_piece_can_be_left_out(calls):
    """``rope=False, loss=False`` patch the norms and the MLP only; patching again adds nothing."""
    model = tilegen.patch(tilegen.patch(tiny("llama", layers=1), rope=False, loss=False), rope=False, loss=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model(**batch())
    assert calls == {**dict.fromkeys(KERNELS, 0), "rms_norm": 3, "swiglu": 1}


def test_the_loss_divides_by_num_items_in_batch_where_given():
    """``causal_lm_loss`` is ``transformers``' ForCausalLMLoss: shifted labels, the sum over the
    tokens divided by ``num_items_in_batch`` where given, else their mean."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    from tilegen.nn.patch import causal_lm_loss

    g = torch.Generator().manual_seed(2)
    logits, labels = torch.randn(2, 5, 11, generator=g), torch.randint(0, 11, (2, 5), generator=g)
    labels[0, 2] = -100
    if GPU:  # the kernels run on the GPU there, not through the interpreter
        logits, labels = logits.cuda(), labels.cuda()
    for n in (None, 7, torch.tensor(7)):
        torch.testing.assert_close(causal_lm_loss(logits, labels, 11, num_items_in_batch=n),
                                   ForCausalLMLoss(logits, labels, 11, num_items_in_batch=n))


def test_import_tilegen_imports_neither_torch_nor_transformers():
    """``tilegen.patch`` is found on first use; ``import tilegen`` stays light."""
    code = "import sys, tilegen; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)
    from tilegen.nn.patch import patch

    assert tilegen.patch is patch
    assert not hasattr(tilegen, "patched")


def test_a_family_not_supported_is_named():
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=10, n_positions=8)
    with pytest.raises(ValueError, match=r"^tilegen.patch: model type 'gpt2' \(GPT2LMHeadModel\) is not supported; "
                                         r"supported: llama, mistral, qwen2, gemma$"):
        tilegen.patch(transformers.GPT2LMHeadModel(config))


def test_an_activation_without_a_kernel_is_named():
    model = tiny("llama", layers=1)
    model.config.hidden_act = "relu"
    with pytest.raises(ValueError, match=r"hidden_act 'relu' has no gated kernel .* pass mlp=False"):
        tilegen.patch(model)
    tilegen.patch(model, mlp=False)  # the rest patches


@pytest.mark.skipif(not GPU or not torch.cuda.is_available(), reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine "
                                                                    "with CUDA")
@pytest.mark.parametrize("family", FAMILIES)
def test_a_patched_bf16_model_is_as_close_to_f32_as_the_original(family, calls):
    """In bf16 the two round differently (tilegen once per kernel, torch after each op): each is
    compared with the f32 model, and the patched one's error may be at most twice the original's
    plus 2 bf16 ulps of the value's largest magnitude."""
    exact = tiny(family, 2, device="cuda")
    theirs = tiny(family, 2, dtype=torch.bfloat16, device="cuda")
    ours = tilegen.patch(copy.deepcopy(theirs))
    inputs = batch("cuda")
    loss, grads = step(ours, inputs)
    assert calls["rope"] == 2 and calls["rms_norm"] == 5 and calls["cross_entropy"] == 1
    want_loss, want_grads = step(theirs, inputs)
    exact_loss, exact_grads = step(exact, inputs)
    ulp = torch.finfo(torch.bfloat16).eps
    assert (loss - exact_loss).abs() <= 2 * (want_loss - exact_loss).abs() + 2 * ulp * exact_loss.abs()
    for name, exact_grad in exact_grads.items():
        ours_err = (grads[name].float() - exact_grad).norm()
        their_err = (want_grads[name].float() - exact_grad).norm()
        assert ours_err <= 2 * their_err + 2 * ulp * exact_grad.norm(), name


@pytest.mark.skipif(not GPU or not torch.cuda.is_available(), reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine "
                                                                    "with CUDA")
@pytest.mark.parametrize("family", FAMILIES)
def test_torch_compile_sees_a_patched_training_step_whole(family):
    """``torch._dynamo.explain`` over a patched model's loss (the GPU's code paths: its kernels are
    custom ops there) finds one graph and no break, as it does over the unpatched model."""
    model = tilegen.patch(tiny(family, 1, dtype=torch.bfloat16, device="cuda"))
    inputs = batch("cuda")
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda: model(**inputs).loss)()
    assert explained.graph_break_count == 0, [reason.reason.splitlines()[0] for reason in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.skipif(GPU, reason="the interpreter's test")
def test_training_fuses_the_head_with_the_loss(calls):
    """In training with labels the patched causal LM runs the head and the loss as one fused call
    (no logits returned), through the cross_entropy kernel, to the original's loss and head
    gradient; in eval mode, or with ``linear_cross_entropy=False``, it returns the logits."""
    theirs = tiny("qwen2", layers=1)
    ours = tilegen.patch(copy.deepcopy(theirs))
    assert ours.training
    inputs = batch()
    loss, grads = step(ours, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert ours(**inputs).logits is None
        ours.eval()
        assert ours(**inputs).logits.shape == (2, 4, 100)
        plain = tilegen.patch(copy.deepcopy(theirs), linear_cross_entropy=False)
        assert plain(**inputs).logits is not None
    assert calls["cross_entropy"] == 4
    want_loss, want_grads = step(theirs, inputs)
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(loss, want_loss, rtol=4 * eps, atol=0)
    scale = want_grads["lm_head.weight"].abs().max().item()
    torch.testing.assert_close(grads["lm_head.weight"], want_grads["lm_head.weight"], rtol=0, atol=32 * eps * scale)
