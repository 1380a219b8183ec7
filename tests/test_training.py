"""A model that trains on tilegen kernels: the small decoder of benchmarks/decoder.py (embedding,
rms_norm, fused_add_rms_norm, matmul_fast for every linear layer, rope, causal attention, SwiGLU,
cross-entropy, each differentiated by its backward specs) trains a few AdamW steps in Triton's
interpreter on bytes of the standard library's sources, and every step's loss equals that of the same model in torch
eager, from the same initial weights on the same batches; a training step compiled with
``torch.compile(fullgraph=True)`` through the tilegen ops gives the same loss and gradients."""

import dataclasses
import importlib.util
import os
import sys

import pytest
import torch

from tests.conftest import ROOT

GPU = os.environ.get("TILEGEN_TEST_GPU") == "1" and torch.cuda.is_available()


@pytest.fixture(scope="module")
def decoder():
    spec = importlib.util.spec_from_file_location("tilegen_decoder", ROOT / "benchmarks" / "decoder.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(decoder):
    # two heads of 16, a head dim and row lengths with no power-of-two padding to hide errors in; one
    # decoder layer (a second runs the same kernels again, on its own weights: twice the interpreter's time)
    return decoder.Config(vocab=256, dim=32, heads=2, layers=1, hidden=48, context=16)


def test_the_decoder_trains_as_torch_does(decoder, tiny):
    # two steps: the first loss checks the forward; the second, the first step's backward and
    # AdamW update (a third step runs the same kernels on other weights)
    data = decoder.corpus(limit=20000)
    theirs = decoder.train(decoder.TORCH, tiny, data, steps=2, batch=2)
    ours = decoder.train(decoder.tilegen_ops(), tiny, data, steps=2, batch=2)
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert theirs[0] == pytest.approx(torch.log(torch.tensor(256.0)).item(), abs=0.1)  # untrained: uniform


def test_a_compiled_training_step_through_tilegen_ops(decoder, tiny):
    ops, params, tables = decoder.tilegen_ops(), decoder.init_params(tiny, seed=1), decoder.rope_tables(tiny)
    idx, target = next(decoder.batches(decoder.corpus(limit=20000), tiny, batch=2, steps=1, seed=1))
    theirs = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    want = decoder.loss(decoder.TORCH, theirs, idx, target, tiny, tables)
    want.backward()
    step = torch.compile(lambda p, i, t: decoder.loss(ops, p, i, t, tiny, tables), fullgraph=True, backend="aot_eager")
    got = step(params, idx, target)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for name, value in params.items():
        torch.testing.assert_close(value.grad, theirs[name].grad, rtol=1e-4, atol=1e-5, msg=name)


def test_mixed_precision_gives_float32_weight_gradients(decoder, tiny):
    """The model computing in float16 from float32 parameters (each cast where it is used, as
    torch.autocast does): every parameter's gradient is float32, and each is close to that of the
    same computation in torch (float16 rounding apart: relative to the gradient's norm)."""
    cfg = dataclasses.replace(tiny, compute="float16")
    idx, target = next(decoder.batches(decoder.corpus(limit=20000), cfg, batch=2, steps=1, seed=2))
    tables = decoder.rope_tables(cfg)
    grads = {}
    for ops in (decoder.TORCH, decoder.tilegen_ops()):
        params = decoder.init_params(cfg, seed=2)
        decoder.loss(ops, params, idx, target, cfg, tables).backward()
        grads[ops.name] = {name: value.grad for name, value in params.items()}
    for name, want in grads["torch"].items():
        got = grads["tilegen"][name]
        assert got.dtype == torch.float32, name
        assert (got - want).norm() <= 2e-2 * want.norm(), name


@pytest.mark.skipif(not GPU, reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA (CUDA graphs, Inductor)")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_torch_compiles_the_training_step_in_every_mode(decoder, mode):
    """``torch.compile(mode=...)`` with Inductor over the decoder's loss through tilegen's ops on
    the GPU: the loss and every gradient of three steps (CUDA graphs record at the first calls and
    replay after) are those of the same ops run eagerly, in bf16 compute from float32 parameters."""
    cfg = decoder.Config(vocab=256, dim=64, heads=2, layers=2, hidden=160, context=64, compute="bfloat16")
    ops, tables = decoder.tilegen_ops(), decoder.rope_tables(cfg, "cuda")
    torch._dynamo.reset()
    step = torch.compile(lambda p, i, t: decoder.loss(ops, p, i, t, cfg, tables), mode=mode, fullgraph=True)
    batches = decoder.batches(decoder.corpus(limit=20000), cfg, batch=4, steps=3, seed=3)
    for n, (idx, target) in enumerate(batches):
        idx, target = idx.cuda(), target.cuda()
        params = decoder.init_params(cfg, seed=n, device="cuda")
        theirs = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        want = decoder.loss(ops, theirs, idx, target, cfg, tables)
        want.backward()
        got = step(params, idx, target)
        got.backward()
        torch.testing.assert_close(got.detach().clone(), want.detach(), rtol=2e-3, atol=2e-3)
        for name, value in params.items():
            scale = theirs[name].grad.abs().max().item()
            torch.testing.assert_close(value.grad, theirs[name].grad, rtol=0, atol=2e-2 * scale + 1e-6, msg=name)
