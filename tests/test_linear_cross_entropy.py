"""tilegen.nn.linear_cross_entropy (fused linear cross-entropy) against torch's unfused
F.cross_entropy(h @ weight.T + bias) and its autograd: losses and the gradients of h, weight and
bias, over chunk sizes that do and do not divide the rows, ignored rows, label smoothing, both
reductions, float32 and float16, and the refusals of bad arguments."""

import os

import pytest
import torch
import torch.nn.functional as F

from tilegen.nn.linear_cross_entropy import default_chunk_rows, linear_cross_entropy


def _inputs(n, hidden, vocab, dtype=torch.float32, bias=False, seed=0, device="cpu"):
    g = torch.Generator(device).manual_seed(seed)
    h = torch.randn(n, hidden, generator=g, device=device).to(dtype)
    w = (torch.randn(vocab, hidden, generator=g, device=device) / hidden**0.5).to(dtype)
    b = torch.randn(vocab, generator=g, device=device).to(dtype) if bias else None
    target = torch.randint(0, vocab, (n,), generator=g, device=device)
    target[1::5] = -100
    return h, w, b, target


def _torch(h, w, b, target, **options):
    """The unfused answer: logits in h's dtype (as the matmul gives them), the loss in float32."""
    leaves = [t.detach().clone().requires_grad_() for t in (h, w) + ((b,) if b is not None else ())]
    logits = leaves[0] @ leaves[1].T + (leaves[2] if b is not None else 0)
    loss = F.cross_entropy(logits.float(), target, **options)
    loss.backward()
    return loss.detach(), [t.grad for t in leaves]


def _ours(h, w, b, target, **options):
    leaves = [t.detach().clone().requires_grad_() for t in (h, w) + ((b,) if b is not None else ())]
    loss = linear_cross_entropy(leaves[0], leaves[1], target, leaves[2] if b is not None else None, **options)
    loss.backward()
    return loss.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("chunk_rows", [None, 1, 4, 7, 64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_matches_the_unfused_loss_and_gradients(chunk_rows, reduction):
    h, w, b, target = _inputs(23, 16, 77, bias=True)
    expected, expected_grads = _torch(h, w, b, target, reduction=reduction)
    loss, grads = _ours(h, w, b, target, reduction=reduction, chunk_rows=chunk_rows)
    torch.testing.assert_close(loss, expected)
    for name, grad, want in zip(("h", "weight", "bias"), grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want, msg=name)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_ignore_index_and_label_smoothing(smoothing):
    h, w, _, target = _inputs(19, 8, 40, seed=1)
    target[3] = 5  # another ignore_index: rows with 5 count for nothing, -100 is a class index error in torch
    target[target == -100] = 0
    expected, expected_grads = _torch(h, w, None, target, ignore_index=5, label_smoothing=smoothing)
    loss, grads = _ours(h, w, None, target, ignore_index=5, label_smoothing=smoothing, chunk_rows=8)
    torch.testing.assert_close(loss, expected)
    for grad, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_class_weights_as_torchs_cross_entropy_weight(reduction, smoothing):
    """``ce_weight``: F.cross_entropy's ``weight`` (the mean divides by the targets' weights), a
    class of weight 0 among them, over several chunks."""
    h, w, b, target = _inputs(21, 8, 40, bias=True, seed=4)
    ce_weight = torch.rand(40, generator=torch.Generator().manual_seed(5))
    ce_weight[target[2]] = 0.0
    options = {"reduction": reduction, "label_smoothing": smoothing}
    expected, expected_grads = _torch(h, w, b, target, weight=ce_weight, **options)
    loss, grads = _ours(h, w, b, target, ce_weight=ce_weight, chunk_rows=8, **options)
    torch.testing.assert_close(loss, expected)
    for name, grad, want in zip(("h", "weight", "bias"), grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want, msg=name)


def test_softcap_and_z_loss_as_the_per_row_kernel_has_them():
    """The mean over rows not ignored of Gemma 2's soft-capped loss plus PaLM's z-loss (Liger-Kernel's
    definitions), through torch's autograd."""
    h, w, _, target = _inputs(14, 8, 50, seed=9)
    leaves = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    z = 3.0 * torch.tanh(leaves[0] @ leaves[1].T / 3.0)
    z_loss = torch.where(target == -100, 0.0, 1e-3 * torch.logsumexp(z, dim=1) ** 2)
    expected = F.cross_entropy(z, target) + z_loss.sum() / (target != -100).sum()
    expected.backward()
    loss, grads = _ours(h, w, None, target, softcap=3.0, lse_square_scale=1e-3, chunk_rows=4)
    torch.testing.assert_close(loss, expected.detach())
    for grad, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(grad, leaf.grad)


def test_the_loss_gradient_scales_the_saved_gradients_and_3d_tokens_are_rows():
    h, w, _, target = _inputs(12, 8, 30, seed=2)
    h3, t3 = h.view(3, 4, 8).clone().requires_grad_(), target.view(3, 4)
    w1 = w.clone().requires_grad_()
    (linear_cross_entropy(h3, w1, t3, chunk_rows=5) * 2.5).backward()
    leaves = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    (F.cross_entropy(leaves[0] @ leaves[1].T, target) * 2.5).backward()
    torch.testing.assert_close(h3.grad.view(12, 8), leaves[0].grad)
    torch.testing.assert_close(w1.grad, leaves[1].grad)


def test_half_precision_within_the_unfused_rounding():
    """f16 logits are rounded from the matmul either way; the gradients of weight accumulate over
    chunks in f16 (one rounding per chunk), so they are compared at f16's tolerance."""
    h, w, b, target = _inputs(40, 32, 100, dtype=torch.float16, bias=True, seed=3)
    expected, expected_grads = _torch(h, w, b, target)
    loss, grads = _ours(h, w, b, target, chunk_rows=16)
    torch.testing.assert_close(loss, expected, rtol=1e-3, atol=1e-3)
    for grad, want in zip(grads, expected_grads, strict=True):
        assert grad.dtype == torch.float16
        torch.testing.assert_close(grad, want, rtol=2e-2, atol=2e-3)


def test_without_gradients_only_the_loss_and_every_row_ignored_is_nan_as_torch():
    h, w, _, target = _inputs(9, 8, 20, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(h, w, target), F.cross_entropy(h @ w.T, target))
    target[:] = -100
    assert torch.isnan(linear_cross_entropy(h, w, target)) and torch.isnan(F.cross_entropy(h @ w.T, target))
    assert linear_cross_entropy(h, w, target, reduction="sum") == 0


def test_nonfinite_logits_propagate_as_torch():
    h, w, _, target = _inputs(6, 4, 10, seed=5)
    h[2, 0] = float("nan")
    h[4, 1] = float("inf")
    expected, _ = _torch(h, w, None, target, reduction="sum")
    loss, _ = _ours(h, w, None, target, reduction="sum", chunk_rows=2)
    assert torch.isnan(loss) and torch.isnan(expected)


def test_default_chunk_holds_logits_of_half_the_weight_or_256_mib():
    assert default_chunk_rows(8192, 4096, 128256) == 2048  # bf16 [2048, V]: half of [V, 4096]
    assert default_chunk_rows(8192, 2048, 32000) == 4096  # [4096, 32000] bf16 is 250 MiB
    assert default_chunk_rows(8192, 2048, 32000, itemsize=4) == 2048
    assert default_chunk_rows(3, 4096, 100) == 4  # the next power of two of the rows
    assert default_chunk_rows(5, 1, 2**30) == 1


def test_a_second_backward_through_one_call_is_refused():
    h, w, _, target = _inputs(6, 4, 10, seed=8)
    h.requires_grad_()
    loss = linear_cross_entropy(h, w, target)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


@pytest.mark.parametrize(("args", "message"), [
    (lambda h, w, t: (h, w[:, :3], t), "dimension 1 of weight is 3, but dimension 1 of h"),
    (lambda h, w, t: (h, w, t[:4]), "dimension 0 of target is 4"),
    (lambda h, w, t: (h, w.double(), t), "weight is torch.float64 but h is torch.float32"),
    (lambda h, w, t: (h, w, t.int()), "target must be int64"),
    (lambda h, w, t: (h, w, t.view(1, -1)), "h must be [N, H]"),
])
def test_bad_arguments_are_named(args, message):
    h, w, _, target = _inputs(6, 4, 10)
    with pytest.raises((TypeError, ValueError)) as error:
        linear_cross_entropy(*args(h, w, target))
    assert message in str(error.value)
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none'"):
        linear_cross_entropy(h, w, target, reduction="batchmean")
    with pytest.raises(ValueError, match=r"ce_weight must be a float tensor \[10\] \(a weight per class\), got \(9,\)"):
        linear_cross_entropy(h, w, target, ce_weight=torch.ones(9))


def test_under_torch_compile_one_graph():
    h, w, b, target = _inputs(10, 8, 30, bias=True, seed=6)
    expected, expected_grads = _torch(h, w, b, target)
    compiled = torch.compile(linear_cross_entropy, backend="aot_eager", fullgraph=True)
    leaves = [t.clone().requires_grad_() for t in (h, w, b)]
    loss = compiled(leaves[0], leaves[1], target, leaves[2], chunk_rows=4)
    loss.backward()
    torch.testing.assert_close(loss.detach(), expected)
    for grad, want in zip([t.grad for t in leaves], expected_grads, strict=True):
        torch.testing.assert_close(grad, want)


def test_under_torch_compile_a_transposed_heads_gradient_stays_in_its_memory_order():
    """A [H, V] head passed as head.T, several chunks, under torch.compile: every [V, H] tensor of
    the forward and backward graphs AOTAutograd hands its compiler is column-major, a view of an
    [H, V] row-major one (the chunks' products are added in the weight's memory order). Added
    through a transposed view, functionalization made the sum row-major [V, H], which then took a
    whole transposing copy to reach the head (4 ms a step at Llama-3-8B's head on an H200). The
    loss and gradient are torch's."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    h, w, _, target = _inputs(12, 8, 30, seed=9)
    graphs = []

    def keep(graph, _):
        graphs.append(graph)
        return make_boxed_func(graph.forward)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep)
    compiled = torch.compile(linear_cross_entropy, fullgraph=True, backend=backend)
    head = w.T.contiguous().requires_grad_()  # [H, V], row-major
    loss = compiled(h, head.T, target, chunk_rows=4)
    loss.backward()
    values = [node.meta.get("val") for graph in graphs for node in graph.graph.nodes if node.op == "call_function"]
    layouts = {v.stride() for v in values if isinstance(v, torch.Tensor) and tuple(v.shape) == (30, 8)}
    assert len(graphs) == 2 and layouts == {(1, 30)}
    reference = head.detach().clone().requires_grad_()
    expected = F.cross_entropy(h @ reference, target)
    expected.backward()
    torch.testing.assert_close(loss.detach(), expected.detach())
    torch.testing.assert_close(head.grad, reference.grad)


@pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                    reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_language_models_head_on_the_gpu(dtype):
    """Llama 2's vocabulary and a quarter of the rows ignored, the default chunks."""
    h, w, _, target = _inputs(1000, 512, 32000, dtype=dtype, seed=7, device="cuda")
    expected, expected_grads = _torch(h, w, None, target, label_smoothing=0.1)
    loss, grads = _ours(h, w, None, target, label_smoothing=0.1)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-3}
    torch.testing.assert_close(loss, expected, **({"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else tol))
    for grad, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, want, **tol)


def test_under_autocast_the_matmuls_run_in_its_dtype():
    """Under torch.autocast (bf16) the chunks' matmuls run in bf16 as the unfused loss's do, and the
    gradients come back in the float32 inputs' dtype, close to the unfused ones."""
    generator = torch.Generator().manual_seed(11)
    h, w = torch.randn(6, 8, generator=generator), torch.rand(16, 8, generator=generator)
    target = torch.randint(0, 16, (6,), generator=generator)
    ours = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    theirs = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    with torch.autocast("cpu", torch.bfloat16):
        loss = linear_cross_entropy(*ours, target, chunk_rows=4)
        want = F.cross_entropy((theirs[0] @ theirs[1].T).float(), target)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    loss.backward()
    want.backward()
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.grad.dtype == torch.float32
        torch.testing.assert_close(mine.grad, other.grad, rtol=2e-2, atol=4e-3)


@pytest.mark.parametrize("chunk_rows", [None, 4, 7])
def test_reduction_none_gives_each_rows_loss_and_its_gradients(chunk_rows):
    """reduction="none": each row's loss, and gradients of h, weight and bias under a gradient per
    row (some rows ignored, class weights, smoothing, soft-capping, z-loss) against torch's unfused
    autograd; the statistics asked for are those of the logits."""
    h, w, b, target = _inputs(19, 16, 53, bias=True)
    ce_weight = torch.rand(53, generator=torch.Generator().manual_seed(8)) + 0.5
    row_grad = torch.randn(19, generator=torch.Generator().manual_seed(9))
    ours = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    theirs = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    got = linear_cross_entropy(*ours[:2], target, ours[2], reduction="none", ce_weight=ce_weight, chunk_rows=chunk_rows,
                               label_smoothing=0.1, softcap=4.0, lse_square_scale=1e-3, return_z_loss=True,
                               return_predicted_tokens=True)
    z = 4.0 * torch.tanh((theirs[0] @ theirs[1].T + theirs[2]) / 4.0)
    kept = target != -100
    z_rows = torch.where(kept, 1e-3 * torch.logsumexp(z, -1) ** 2, 0.0)
    want = F.cross_entropy(z, target, ce_weight, reduction="none", label_smoothing=0.1) + z_rows
    torch.testing.assert_close(got.loss, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.z_loss, z_rows.detach(), rtol=1e-5, atol=1e-6)
    assert torch.equal(got.predicted_tokens, torch.where(kept, z.argmax(-1), -1))
    got.loss.backward(row_grad)
    want.backward(row_grad)
    for name, mine, other in zip(("h", "weight", "bias"), ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad, other.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ce_weight", [False, True])
def test_token_scaling_weighs_each_row_by_its_targets_probability(reduction, ce_weight):
    """``use_token_scaling``: each row's loss (z-loss included) times softmax(z)[target] of its
    soft-capped logits, that factor a constant in the autograd (detached) and 0 on ignored rows,
    against torch's unfused autograd over several chunks; the returned z-loss is scaled alike."""
    h, w, b, target = _inputs(21, 8, 37, bias=True, seed=11)
    weights = torch.rand(37, generator=torch.Generator().manual_seed(12)) + 0.5 if ce_weight else None
    ours = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    theirs = [t.detach().clone().requires_grad_() for t in (h, w, b)]
    got = linear_cross_entropy(*ours[:2], target, ours[2], reduction=reduction, ce_weight=weights, chunk_rows=8,
                               label_smoothing=0.1, softcap=5.0, lse_square_scale=1e-3, use_token_scaling=True,
                               return_z_loss=True)
    z = 5.0 * torch.tanh((theirs[0] @ theirs[1].T + theirs[2]) / 5.0)
    kept = target != -100
    safe = target.masked_fill(~kept, 0)
    probability = torch.where(kept, torch.softmax(z.detach(), -1)[torch.arange(21), safe], 0.0)
    assert 0 < probability[kept].min() and probability[kept].max() < 1
    ce = F.cross_entropy(z, target, weights, reduction="none", label_smoothing=0.1) * probability
    z_rows = torch.where(kept, 1e-3 * torch.logsumexp(z, -1) ** 2, 0.0) * probability
    if reduction == "none":
        want, want_z = ce + z_rows, z_rows
    elif reduction == "sum":
        want, want_z = ce.sum() + z_rows.sum(), z_rows.sum()
    else:  # the cross-entropy over the targets' weights, the z-loss over the rows not ignored
        denominator = kept.sum() if weights is None else weights[safe][kept].sum()
        want, want_z = ce.sum() / denominator + z_rows.sum() / kept.sum(), z_rows.sum() / kept.sum()
    torch.testing.assert_close(got.loss, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.z_loss, want_z.detach(), rtol=1e-5, atol=1e-7)
    row_grad = torch.randn(21, generator=torch.Generator().manual_seed(13)) if reduction == "none" else None
    got.loss.backward(row_grad)
    want.backward(row_grad)
    for name, mine, other in zip(("h", "weight", "bias"), ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad, other.grad, rtol=1e-4, atol=1e-6, msg=name)
    if reduction == "sum":  # each factor is below 1
        unscaled = linear_cross_entropy(h, w, target, b, reduction="sum", ce_weight=weights, label_smoothing=0.1,
                                        softcap=5.0, lse_square_scale=1e-3)
        assert got.loss < unscaled


@pytest.mark.parametrize(("reduction", "chunk_rows", "accum_dtype"),
                         [("mean", None, None), ("mean", 4, torch.float64), ("none", 4, None)])
def test_a_transposed_weights_gradient_comes_in_its_memory_order(reduction, chunk_rows, accum_dtype):
    """A [H, V] head passed as head.T (a column-major [V, H] weight) gets its gradient laid out as
    the weight is (strides (1, V)), so none is copied to transpose it; the values are torch's."""
    h, w, _, target = _inputs(21, 16, 37)
    head = w.T.contiguous().requires_grad_()  # [H, V], row-major
    mine = linear_cross_entropy(h, head.T, target, reduction=reduction, chunk_rows=chunk_rows,
                                accum_dtype=accum_dtype)
    theirs = F.cross_entropy(h @ head, target, reduction=reduction)
    torch.testing.assert_close(mine, theirs)
    row_grad = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(3))
    view = head.T  # the weight as the loss sees it: a non-leaf, so grad returns what the loss gave
    (got,) = torch.autograd.grad(linear_cross_entropy(h, view, target, reduction=reduction, chunk_rows=chunk_rows,
                                                      accum_dtype=accum_dtype), view, row_grad)
    (want,) = torch.autograd.grad(theirs, head, row_grad)
    assert got.stride() == view.stride()
    torch.testing.assert_close(got, want.T)
