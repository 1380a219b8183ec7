"""Autograd through generated kernels: a spec's ``backward`` line registers its backward spec
(``softmax_backward.tile``) as the custom op's autograd formula, so the generated function and
``torch.ops.tilegen.*`` both differentiate. Checked in Triton's interpreter against torch's own
autograd, written here: softmax, log_softmax, RMS norm (dx, and the weight gradient reduced
across programs; layer norm's, in each of its dtypes, in tests/test_layer_norm.py), SwiGLU,
GeGLU, rotary embeddings and cross-entropy, at rows with tails
and every config of the backward (in the interpreter, one config of each set of block sizes:
``tests.conftest.config_indices``); the op, ``torch.no_grad``, ``torch.compile(fullgraph=True)``,
activation checkpointing; a spec without a backward refusing inputs that require grad; and the
build's refusals of backward specs that do not fit."""

import re

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from tests.conftest import config_indices, force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError


def _rows(m, n, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, n, generator=g) * 2).to(dtype)


@pytest.mark.parametrize("kernel", ["softmax", "log_softmax"])
@pytest.mark.parametrize(("m", "n"), [(3, 1), (5, 37), (2, 130)])
def test_softmax_gradients_match_torch(generated, monkeypatch, kernel, m, n):
    module, backward = generated(kernel), generated(f"{kernel}_backward")
    x = _rows(m, n, seed=n)
    dy = _rows(m, n, seed=n + 1)
    ours = x.clone().requires_grad_()
    theirs = x.clone().requires_grad_()
    want_y = getattr(torch, kernel)(theirs, dim=1)
    want_y.backward(dy)
    for index in config_indices(backward):
        force_config(monkeypatch, backward, index)
        ours.grad = None
        y = getattr(module, kernel)(ours)
        assert type(y.grad_fn).__name__.endswith("AutogradBackward")  # eager: the Function over the launchers
        torch.testing.assert_close(y, want_y.detach(), rtol=1e-5, atol=1e-6)
        y.backward(dy)
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("m", "n"), [(3, 1), (5, 37), (2, 130)])
def test_softmax_of_half_dtypes_computes_in_float32_and_rounds_once(generated, monkeypatch, dtype, m, n):
    """bf16 and f16 rows, as torch's softmax takes them: y is torch's float32 softmax of the row
    rounded once to the dtype, and dx the Jacobian-vector product of the y it returned, in
    float64, rounded once; at every config of both kernels, one tile a row and in loops (chunks
    smaller than the row, with tails). The interpreter rounds to bf16 toward zero: one ulp."""
    module, backward = generated("softmax"), generated("softmax_backward")
    x, dy = _rows(m, n, seed=n, dtype=dtype), _rows(m, n, seed=n + 1, dtype=dtype)
    want_y = torch.softmax(x.float(), dim=1).to(dtype)
    ulp = {"rtol": 8e-3, "atol": 1e-5} if dtype == torch.bfloat16 else {"rtol": 1e-3, "atol": 1e-6}

    def want_dx(y):
        y64, g = y.double(), dy.double() * y.double()
        return (g - y64 * g.sum(dim=1, keepdim=True)).to(dtype)

    torch.testing.assert_close(torch.softmax(x, dim=1), want_y, **ulp)  # torch's own bf16 softmax rounds once
    for index in config_indices(backward):
        force_config(monkeypatch, module, index)
        force_config(monkeypatch, backward, index)
        ours = x.clone().requires_grad_()
        y = module.softmax(ours)
        assert y.dtype == dtype
        torch.testing.assert_close(y, want_y, **ulp)
        y.backward(dy)
        assert ours.grad.dtype == dtype
        torch.testing.assert_close(ours.grad, want_dx(y.detach()), **ulp)
    for block in (16, 64):
        y = module._softmax_loops(x, BLOCK_N=block)
        torch.testing.assert_close(y, want_y, **ulp)
        torch.testing.assert_close(backward._softmax_backward_loops(dy, y, BLOCK_N=block), want_dx(y), **ulp)
    torch.testing.assert_close(module.reference(x), want_y, **ulp)


@pytest.mark.parametrize(("m", "n"), [(1, 7), (5, 37), (6, 130)])
def test_rms_norm_gradients_match_torch(generated, monkeypatch, m, n):
    """dx along each row, and dweight summed over the rows across programs, at every config of
    the backward (1, 2 and 4 rows per program), against torch's F.rms_norm in float32 on the
    same f16 values; f16 results, so a tolerance of f16's rounding."""
    module, backward = generated("rms_norm"), generated("rms_norm_backward")
    x, w, dy = _rows(m, n, 1, torch.float16), (1 + _rows(1, n, 2) / 4).half()[0], _rows(m, n, 3, torch.float16)
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    F.rms_norm(xf, (n,), wf, 1e-6).backward(dy.float())
    for index in config_indices(backward):
        force_config(monkeypatch, backward, index)
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        module.rms_norm(xs, ws, 1e-6).backward(dy)
        assert xs.grad.dtype == ws.grad.dtype == torch.float16
        torch.testing.assert_close(xs.grad.float(), xf.grad, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(ws.grad.float(), wf.grad, rtol=2e-2, atol=2e-2 * m)


def test_layer_norm_statistics_get_no_gradient_and_no_zeros(generated, monkeypatch):
    """layer_norm's backward reads dy alone (mu and rstd are statistics, not followed, as torch's
    native_layer_norm): a loss that also uses mu and rstd gives the gradients y's part alone gives;
    one of mu alone gives x, weight and bias none; and where mu and rstd take no part, autograd
    hands the eager backward None for dmu and drstd, not zeros it made."""
    module = generated("layer_norm")
    m, n = 5, 37
    x, dy = _rows(m, n, 4, torch.float16) + 3, _rows(m, n, 5, torch.float16)
    w, b = (1 + _rows(1, n, 6) / 4).half()[0], (_rows(1, n, 7) / 4).half()[0]
    first = module.layer_norm(*(t.clone().requires_grad_() for t in (x, w, b)), 1e-5)[0]
    function = first.grad_fn._forward_cls  # the Function over the launchers that eager calls record
    seen, ran = [], []
    backward = function.backward

    def spy(ctx, *grads):
        seen.append(grads)
        return backward(ctx, *grads)

    monkeypatch.setattr(function, "backward", staticmethod(spy))
    kernels = module._rt.sibling(module.__file__, "layer_norm_backward")  # the module the backward calls
    launcher = kernels.layer_norm_backward
    monkeypatch.setattr(kernels, "layer_norm_backward", lambda *args: ran.append(args) or launcher(*args))
    alone = [t.clone().requires_grad_() for t in (x, w, b)]
    module.layer_norm(*alone, 1e-5)[0].backward(dy)
    both = [t.clone().requires_grad_() for t in (x, w, b)]
    y, mu, rstd = module.layer_norm(*both, 1e-5)
    ((y.float() * dy.float()).sum() + mu.sum() + rstd.sum()).backward()
    for a, c in zip(alone, both, strict=True):
        torch.testing.assert_close(c.grad, a.grad, rtol=0, atol=0)
    assert [tuple(g is None for g in grads[1:]) for grads in seen] == [(True, True), (False, False)]
    assert len(ran) == 2
    stats = [t.clone().requires_grad_() for t in (x, w, b)]
    module.layer_norm(*stats, 1e-5)[1].sum().backward()
    assert [t.grad for t in stats] == [None, None, None]
    assert len(seen) == 3 and seen[2][0] is None and len(ran) == 2  # dy is None: the backward kernel did not run


@pytest.mark.parametrize("kernel", ["swiglu", "geglu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_mlp_gradients_match_torch(generated, monkeypatch, kernel, dtype):
    """Liger's SwiGLU and GeGLU: da and db recomputing the gate from the saved inputs, in float32,
    at every config of the backward, against torch's autograd of F.silu(a) * b and
    F.gelu(a, approximate="tanh") * b (in float32 on the same values; bf16 results within bf16's
    rounding)."""
    module, backward = generated(kernel), generated(f"{kernel}_backward")
    act = F.silu if kernel == "swiglu" else (lambda t: F.gelu(t, approximate="tanh"))
    a, b, dy = (_rows(5, 37, seed, dtype) for seed in (10, 11, 12))
    af, bf = a.float().clone().requires_grad_(), b.float().clone().requires_grad_()  # leaves of their own
    (act(af) * bf).backward(dy.float())
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for index in config_indices(backward):
        force_config(monkeypatch, backward, index)
        ours_a, ours_b = a.clone().requires_grad_(), b.clone().requires_grad_()
        getattr(module, kernel)(ours_a, ours_b).backward(dy)
        assert ours_a.grad.dtype == dtype
        torch.testing.assert_close(ours_a.grad.float(), af.grad, **tolerance)
        torch.testing.assert_close(ours_b.grad.float(), bf.grad, **tolerance)


def test_rope_gradients_rotate_back(generated):
    """The rotary embedding's gradient is the rotation by -theta (rotate_half transposed), for q
    and for k with fewer heads; cos and sin get none, as Liger's."""
    module = generated("rope")
    g = torch.Generator().manual_seed(13)
    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    angle = torch.randn(2, 5, 4, generator=g)  # each sequence's own positions
    cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()
    dq, dk = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)

    def rotate_half(x):
        return torch.cat([-x[..., 4:], x[..., :4]], dim=-1)

    want_q, want_k = q.clone().requires_grad_(), k.clone().requires_grad_()
    c, s = cos[:, None], sin[:, None]  # over the heads
    ((want_q * c + rotate_half(want_q) * s) * dq).sum().backward()
    ((want_k * c + rotate_half(want_k) * s) * dk).sum().backward()
    ours_q, ours_k = q.clone().requires_grad_(), k.clone().requires_grad_()
    q_rotated, k_rotated = module.rope(ours_q, ours_k, cos, sin)
    torch.autograd.backward([q_rotated, k_rotated], [dq, dk])
    torch.testing.assert_close(ours_q.grad, want_q.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours_k.grad, want_k.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("m", "v"), [(1, 5), (4, 37), (3, 1100)])
def test_cross_entropy_gradients_match_torch(generated, monkeypatch, m, v):
    """dlogits = (softmax - onehot(target)) * dloss per row, the row's log-sum-exp taken back from
    the forward's loss; every config of the backward (tiles of 1024-8192 over V, so 1100 spans
    two), against torch's F.cross_entropy(reduction="none")."""
    module, backward = generated("cross_entropy"), generated("cross_entropy_backward")
    logits = _rows(m, v, 20) * 3
    target = torch.randint(0, v, (m,), generator=torch.Generator().manual_seed(21))
    dloss = _rows(1, m, 22)[0]
    theirs = logits.clone().requires_grad_()
    F.cross_entropy(theirs, target, reduction="none").backward(dloss)
    for index in config_indices(backward):
        force_config(monkeypatch, backward, index)
        ours = logits.clone().requires_grad_()
        module.cross_entropy(ours, target)[0].backward(dloss)
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def test_the_op_no_grad_and_compile(generated):
    """torch.ops.tilegen.softmax differentiates as the function does; under torch.no_grad the
    output has no grad_fn; a compiled training step (fullgraph, aot_eager) and a checkpointed one
    give torch's gradient."""
    module = generated("softmax")
    x, dy = _rows(4, 19, 8), _rows(4, 19, 9)
    want = x.clone().requires_grad_()
    torch.softmax(want, dim=1).backward(dy)
    through_op = x.clone().requires_grad_()
    module.op(through_op).backward(dy)
    torch.testing.assert_close(through_op.grad, want.grad, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert module.softmax(x.clone().requires_grad_()).grad_fn is None

    def step(x, dy):
        return (module.softmax(x) * dy).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    leaf = x.clone().requires_grad_()
    compiled(leaf, dy).backward()
    torch.testing.assert_close(leaf.grad, want.grad, rtol=1e-5, atol=1e-6)
    checkpointed = x.clone().requires_grad_()  # activation checkpointing: the forward runs again in backward
    torch.utils.checkpoint.checkpoint(step, checkpointed, dy, use_reentrant=False).backward()
    torch.testing.assert_close(checkpointed.grad, want.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (37, 45, 29), (64, 48, 33)])
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
def test_matmul_gradients_match_torch(generated, monkeypatch, m, k, n, layout):
    """matmul_fast's backward of two kernels: da = dc @ b^T and db = a^T @ dc, at sizes with
    tails in every dimension and every config of each that the pointer kernels take (float32: exact
    products in the interpreter), with a and b given row-major and as transposed views (the saved inputs keep
    their strides)."""
    module = generated("matmul_fast")
    da_module, db_module = generated("matmul_fast_backward_da"), generated("matmul_fast_backward_db")
    a, b, dc = _rows(m, k, 1), _rows(k, n, 2), _rows(m, n, 3)
    if layout == "column-major":
        a, b = a.t().contiguous().t(), b.t().contiguous().t()
    theirs_a, theirs_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    (theirs_a @ theirs_b).backward(dc)
    # these rows are not 16-byte aligned: the pointer kernels run, which take the power-of-two configs
    # (192 and 320 rows are two pieces of TMA tiles)
    indices = [i for i, c in enumerate(da_module._CONFIGS) if all(v & (v - 1) == 0 for v in c.kwargs.values())]
    assert indices == [i for i, c in enumerate(db_module._CONFIGS) if all(v & (v - 1) == 0 for v in c.kwargs.values())]
    # in the interpreter, a config whose block sizes both kernels ran already runs the same programs again
    indices = [i for i in indices if i in config_indices(da_module) or i in config_indices(db_module)]
    ours_a, ours_b = a.detach().requires_grad_(), b.detach().requires_grad_()
    c = module.matmul_fast(ours_a, ours_b)  # one forward, its graph differentiated at each config
    for index in indices:
        force_config(monkeypatch, da_module, index)
        force_config(monkeypatch, db_module, index)
        grad_a, grad_b = torch.autograd.grad(c, (ours_a, ours_b), dc, retain_graph=True)
        torch.testing.assert_close(grad_a, theirs_a.grad, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(grad_b, theirs_b.grad, rtol=1e-5, atol=1e-4)
    through_op_a, through_op_b = a.detach().requires_grad_(), b.detach().requires_grad_()
    module.op(through_op_a, through_op_b).backward(dc)  # the custom op's formula, with its keyword argument
    torch.testing.assert_close(through_op_b.grad, theirs_b.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("causal", "s", "t", "d", "dtype"), [
    (False, 37, 37, 16, torch.float32), (True, 37, 37, 16, torch.float32), (False, 70, 45, 32, torch.float32),
    (True, 70, 70, 32, torch.float32), (True, 33, 33, 16, torch.float16)])
def test_attention_gradients_match_torch(generated, monkeypatch, causal, s, t, d, dtype):
    """FlashAttention-2's backward as three specs (each row's delta, then dk and dv per key tile over
    the query tiles at or after it, then dq per query tile, reading the forward's log-sum-exp), at
    sizes with tails and every config of each (key and query tiles of 16 x 16 to 128 x 64, unequal
    ones included), against torch's SDPA differentiated in float32 (the log-sum-exp, the second
    output, unused: a gradient of zeros); also through the op."""
    name = "attention_causal" if causal else "attention"
    module = generated(name)
    kernels = [generated(kernel) for kernel in ("attention_backward_delta", f"{name}_backward_dkdv",
                                                f"{name}_backward_dq")]
    g = torch.Generator().manual_seed(s + t + d)
    # one batch entry of two heads: the batch stride is checked at two entries in test_meaning
    q, k, v = (torch.randn(1, 2, n, d, generator=g).to(dtype) for n in (s, t, t))
    do = torch.randn(1, 2, s, d, generator=g).to(dtype)
    theirs = [x.float().clone().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*theirs, is_causal=causal, scale=0.3).backward(do.float())
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    indices = [config_indices(kernel) for kernel in kernels]
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    out = getattr(module, name)(*ours, 0.3)[0]  # one forward, its graph differentiated at each config
    for index in range(max(map(len, indices))):
        for kernel, forced in zip(kernels, indices, strict=True):
            force_config(monkeypatch, kernel, forced[index % len(forced)])
        for got, want in zip(torch.autograd.grad(out, ours, do, retain_graph=True), theirs, strict=True):
            torch.testing.assert_close(got.float(), want.grad, **tolerance)
    through_op = [x.clone().requires_grad_() for x in (q, k, v)]
    module.op(*through_op, 0.3)[0].backward(do)
    for got, want in zip(through_op, theirs, strict=True):
        torch.testing.assert_close(got.grad.float(), want.grad, **tolerance)


def test_a_kernel_without_a_backward_refuses_inputs_that_require_grad(generated):
    """row_cumprod names no backward and has none derived (cumprod has no gradient rule)."""
    module = generated("row_cumprod")
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"row_cumprod: an input requires grad, but the spec has no backward and "
                                           r"none could be derived \(`tilegen show --grad`"):
        module.row_cumprod(x)
    with torch.no_grad():
        torch.testing.assert_close(module.row_cumprod(x), torch.cumprod(x.detach(), dim=1))
    torch.testing.assert_close(module.row_cumprod(x.detach()), torch.cumprod(x.detach(), dim=1))


FORWARD = """kernel k
  in  x: f32[M, N]
  in  eps: f32
  out y: f32[M, N]
  block BM = 2
  backward {name}
  grid  r over M by BM, c over N whole
  y[r, c] = x[r, c] * eps
"""

BACKWARD = """kernel k_backward
  in  {inputs}
  out {outputs}
  block BM = 2
  grid  r over M by BM, c over N whole
  {body}
"""


@pytest.mark.parametrize(("inputs", "outputs", "body", "message"), [
    ("dy: f32[M, N]\n  in  z: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = dy[r, c] + z[r, c]",
     r"takes 'z', which is neither a value of this kernel nor the gradient of one of its outputs \(x, eps, y, dy\)"),
    ("dy: f16[M, N]", "dx: f32[M, N]", "dx[r, c] = f32(dy[r, c])",
     r"takes 'dy' as f16\[M, N\], but the gradient of 'y' is f32\[M, N\] here"),
    ("dy: f32[M, N]", "dw: f32[M, N]", "dw[r, c] = dy[r, c]",
     r"returns 'dw', which is not the gradient of an input of this kernel \(dx\)"),
    ("x: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = x[r, c]", r"takes no output's gradient \(dy\)"),
])
def test_backward_specs_that_do_not_fit_are_refused_at_the_line(inputs, outputs, body, message):
    backward = BACKWARD.format(inputs=inputs, outputs=outputs, body=body)
    with pytest.raises(SpecError, match=message) as caught:
        compile_spec(FORWARD.format(name="k_backward"), "k.tile", {"k_backward": (backward, "k_backward.tile")}.get)
    assert caught.value.diagnostics[0].span.line == 6


def test_a_backward_may_name_the_sizes_its_own_way_consistently():
    """A backward spec names its own sizes: ``dy: f32[R, C]`` is the gradient of ``y: f32[M, N]``
    (R for M, C for N, throughout); a name standing for two of the forward's, or two names for one,
    do not fit."""
    spec = BACKWARD.replace("grid  r over M by BM, c over N whole", "grid  r over R by BM, c over C whole")
    renamed = spec.format(inputs="dy: f32[R, C]", outputs="dx: f32[R, C]", body="dx[r, c] = dy[r, c]")
    built = compile_spec(FORWARD.format(name="k_backward"), "k.tile", {"k_backward": (renamed, "k_backward.tile")}.get)
    assert built.backward == ("k_backward",)
    for x in ("x: f32[C, R]", "x: f32[M, C]"):  # C for M after C for N; M for M after R for M
        bad = spec.format(inputs=f"dy: f32[R, C]\n  in  {x}", outputs="dx: f32[R, C]", body="dx[r, c] = dy[r, c]")
        with pytest.raises(SpecError, match=rf"backward 'k_backward' takes 'x' as {re.escape(x[3:])}, but 'x' is"):
            compile_spec(FORWARD.format(name="k_backward"), "k.tile", {"k_backward": (bad, "k_backward.tile")}.get)


@pytest.mark.parametrize(("inputs", "body", "stand_in"), [
    ("dy: f32[M, N]\n  in  x: f32[M, N]", "dx[r, c] = dy[r, c] * 2", True),  # x sizes dx alone
    ("dy: f32[M, N]\n  in  x: f32[M, N]", "dx[r, c] = dy[r, c] * x[r, c]", False),
    ("dy: f32[M, N]\n  in  x: f32[M, N]", "dx[r, c] = dy[r, c] where x[r, c] > 0", False),  # read by a guard
    ("dy: f32[M, N]\n  in  y: f32[M, N]", "dx[r, c] = dy[r, c] * 2", True),  # an output saved for its shape
])
def test_a_tensor_the_backward_reads_no_element_of_is_saved_as_a_stand_in(inputs, body, stand_in):
    """The forward's autograd declares ``shapes=`` for the saved tensors no backward kernel names in
    its grid or body (it saves a one-element stand-in of each, tilegen.runtime.stand_in); a tensor
    read anywhere, a store's guard included, is saved whole."""
    backward = BACKWARD.format(inputs=inputs, outputs="dx: f32[M, N]", body=body)
    built = compile_spec(FORWARD.format(name="k_backward"), "k.tile", {"k_backward": (backward, "k_backward.tile")}.get)
    saved = inputs.split("in  ")[1].split(":")[0]
    declared = re.search(r"saved=\(([^)]*)\)(?:, shapes=\(([^)]*)\))?", built.source)
    assert f'"{saved}"' in declared.group(1)
    assert (declared.group(2) is not None and f'"{saved}"' in declared.group(2)) == stand_in


TYPED = """kernel k
  dtype T in f16, bf16, f32
  in  x: T[M, N]
  out y: T[M, N]
  block BM = 2
  backward k_backward
  grid  r over M by BM, c over N whole
  y[r, c] = T(f32(x[r, c]) * f32(x[r, c]))
"""

TYPED_BACKWARD = """kernel k_backward
  dtype {var} in {options}
  in  dy: {dy}[M, N]
  in  x: {x}[M, N]
  out dx: {var}[M, N]
  block BM = 2
  grid  r over M by BM, c over N whole
  dx[r, c] = {var}(2 * f32(x[r, c]) * f32(dy[r, c]))
"""


def test_a_backward_may_name_its_dtype_variables_its_own_way_consistently():
    """A backward's ``dtype S`` stands for the forward's ``T`` as its sizes may stand for the
    forward's: the same at every place, and S lists every dtype T may be. The gradient is right."""
    ok = TYPED_BACKWARD.format(var="S", options="f16, bf16, f32", dy="S", x="S")
    built = compile_spec(TYPED, "k.tile", {"k_backward": (ok, "k_backward.tile")}.get)
    assert built.backward == ("k_backward",)
    for bad, message in [
        (TYPED_BACKWARD.format(var="S", options="f16, f32", dy="S", x="S"),
         r"takes 'dy' as S\[M, N\], but the gradient of 'y' is T\[M, N\] here \('S' lists f16, f32; 'T' may be "
         r"f16, bf16, f32\)"),
        (TYPED_BACKWARD.format(var="S", options="f16, bf16, f32", dy="S", x="f32"), r"takes 'x' as f32\[M, N\]"),
    ]:
        with pytest.raises(SpecError, match=message):
            compile_spec(TYPED, "k.tile", {"k_backward": (bad, "k_backward.tile")}.get)


def test_a_backward_with_its_own_dtype_variable_trains(tmp_path):
    """Built and run: the forward's T is bf16 or f32, the backward's S follows it; x.grad is torch's."""
    from tilegen.runner import load_module

    ok = TYPED_BACKWARD.format(var="S", options="f16, bf16, f32", dy="S", x="S")
    (tmp_path / "k.tile").write_text(TYPED)
    (tmp_path / "k_backward.tile").write_text(ok)
    from tilegen.build import build

    build([tmp_path], tmp_path / "out")
    module = load_module(tmp_path / "out" / "k.py")
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(5, 7).to(dtype).requires_grad_()
        module.k(x).float().sum().backward()
        assert x.grad.dtype == dtype
        torch.testing.assert_close(x.grad.float(), 2 * x.detach().float(), rtol=1e-2, atol=1e-2)


PIPELINE = """kernel k_{name}
  in  {inputs}
  out {outputs}
  block BM = 2
  grid  r over M by BM, c over N whole
  {body}
"""


@pytest.mark.parametrize(("first", "second", "message"), [
    (("dy: f32[M, N]", "s: f32[M, N]", "s[r, c] = dy[r, c]"), ("s: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = s[r, c]"),
     None),
    (("dy: f32[M, N]", "s: f32[M, N]", "s[r, c] = dy[r, c]"), ("dy: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = dy[r, c]"),
     r"returns 's', which is not the gradient of an input of this kernel \(dx\) nor read by a later backward"),
    (("dy: f32[M, N]", "s: f32[M, N]", "s[r, c] = dy[r, c]"), ("s: f32[N, M]", "dx: f32[M, N]", "dx[r, c] = s[c, r]"),
     r"backward 'k_second' takes 's' as f32\[N, M\], but 's' of backward 'k_first' is f32\[M, N\] here"),
    (("dy: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = dy[r, c]"),
     ("dy: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = dy[r, c]"),
     r"backward 'k_second' returns 'dx', which backward 'k_first' returns too"),
    (("dy: f32[M, N]", "y: f32[M, N]", "y[r, c] = dy[r, c]"), ("y: f32[M, N]", "dx: f32[M, N]", "dx[r, c] = y[r, c]"),
     r"backward 'k_first' returns 'y', a name of this kernel's values"),
])
def test_a_backward_of_several_kernels_passes_values_by_name(first, second, message):
    """``backward k_first, k_second``: an output of the first that is not a gradient is an input of
    the second, by name and type; it must be read, and each gradient comes from one kernel."""
    found = {f"k_{name}": (PIPELINE.format(name=name, inputs=i, outputs=o, body=b), f"k_{name}.tile")
             for name, (i, o, b) in (("first", first), ("second", second))}
    forward = FORWARD.format(name="k_first, k_second")
    if message is None:
        generated = compile_spec(forward, "k.tile", found.get)
        assert generated.backward == ("k_first", "k_second")
        # the first kernel's s, by name, is the second's argument (the runtime's autograd passes it)
        steps = '(("k_first", ("dy",), ("s",), False), ("k_second", ("s",), ("dx",), False))'
        assert f"backward={steps}" in generated.source
        return
    with pytest.raises(SpecError, match=message) as caught:
        compile_spec(forward, "k.tile", found.get)
    assert caught.value.diagnostics[0].span.line == 6


def test_a_missing_backward_spec_is_refused():
    with pytest.raises(SpecError, match=r"backward 'k_backward': no spec 'k_backward.tile' beside this one"):
        compile_spec(FORWARD.format(name="k_backward"), "k.tile", {}.get)
    with pytest.raises(SpecError, match=r"'k' is this kernel"):
        compile_spec(FORWARD.format(name="k"), "k.tile", {}.get)


SOFTMAX64 = """kernel softmax64
  in  x: f64[M, N]
  out y: f64[M, N]
  block BM = 2
  backward softmax64_backward
  grid  r over M by BM, c over N whole
  e = exp(x[r, c] - max(x[r, c], dim=c))
  y[r, c] = e / sum(e, dim=c)
"""

SOFTMAX64_BACKWARD = """kernel softmax64_backward
  in  dy: f64[M, N]
  in  y: f64[M, N]
  out dx: f64[M, N]
  block BM = 2
  grid  r over M by BM, c over N whole
  g = dy[r, c] * y[r, c]
  dx[r, c] = g - y[r, c] * sum(g, dim=c)
"""


def test_gradcheck_in_float64(tmp_path):
    """torch.autograd.gradcheck (finite differences against the backward spec, in float64, which
    the interpreter computes in float64) through a softmax pair built into one folder, the
    function and the op; a second derivative is refused (the backward spec names no backward)."""
    from tilegen.build import build
    from tilegen.runner import load_module

    for name, text in (("softmax64", SOFTMAX64), ("softmax64_backward", SOFTMAX64_BACKWARD)):
        (tmp_path / f"{name}.tile").write_text(text)
    assert all(result.error is None for result in build([tmp_path / "softmax64.tile"], tmp_path / "out"))
    module = load_module(tmp_path / "out" / "softmax64.py")
    x = torch.randn(5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    # fast mode: the Jacobian against random vectors on both sides (u' J v), finite differences
    # along one direction, not one per element (two launches each, 35 elements here); a backward
    # that is wrong anywhere moves u' J v off its finite difference
    assert torch.autograd.gradcheck(module.softmax64, (x,), eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)
    assert torch.autograd.gradcheck(module.op, (x,), eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)
    with pytest.raises(RuntimeError, match="softmax64_backward: an input requires grad, but the spec has no backward"):
        torch.autograd.grad(module.softmax64(x)[:, 0].sum(), x, create_graph=True)


def test_the_op_finds_its_backward_beside_another_module_of_the_spec(tmp_path):
    """The op's autograd formula is that of the first module of the spec imported in the process.
    Where that module was built alone (its backward not beside it) and another build of the same
    spec has the backward beside it, the op's backward runs that one instead of failing."""
    from tilegen.build import build
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    forward = SOFTMAX64.replace("softmax64", "softmax_alone")
    backward = SOFTMAX64_BACKWARD.replace("softmax64", "softmax_alone")
    for name, text in (("softmax_alone", forward), ("softmax_alone_backward", backward)):
        (tmp_path / f"{name}.tile").write_text(text)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "softmax_alone.py").write_text(compile_spec(forward, str(tmp_path / "softmax_alone.tile")).source)
    assert all(result.error is None for result in build([tmp_path / "softmax_alone.tile"], tmp_path / "full"))
    first = load_module(alone / "softmax_alone.py")  # registers the op, and its formula
    load_module(tmp_path / "full" / "softmax_alone.py")
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    first.op(x).backward(torch.ones(3, 5, dtype=torch.float64))
    torch.testing.assert_close(x.grad, torch.zeros(3, 5, dtype=torch.float64), atol=1e-12, rtol=0)
