"""Outputs written over an input (``out dx: f32[M, N] in place of x``, the launcher's
``inplace=True``) and cross-entropy's ``inplace_backward=True``, in Triton's interpreter.

The checker proves an in-place write safe on the spec's text (tilegen.check.in_place), so the
tests below are of two kinds: specs it must refuse (each at the read or store that is not safe),
and launches whose in-place result must equal the same launch into a new tensor, at every config,
on strided inputs, with the input's version counter raised, and over tests/test_expressions.py's
random expressions. The gradients are checked against
torch's own cross-entropy, written here. The launches run on the GPU under ``TILEGEN_TEST_GPU=1``
(where the first in-place call of a tuned kernel tunes on a new output first), else in the
interpreter.
"""

import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, assume, given, settings

from tests import test_expressions as expressions
from tests.conftest import force_config
from tilegen.errors import SpecError

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
HEAD = "kernel k\n  in  x: f32[M, N]\n  out y: f32[M, N] in place of x\n  block BN = 4\n  grid r over M\n"


def _errors(text):
    from tilegen.compiler import compile_spec

    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [(d.span.line, d.span.column, d.message) for d in caught.value.diagnostics]


@pytest.mark.parametrize(("body", "line", "words"), [
    # a read of another element, after the store began
    ("  for c over N by BN\n    y[r, c] = x[r, c] + x[r, 0]\n", 7, "at another index than the store's"),
    # a read the stored value does not depend on: nothing orders it before the store
    ("  t: f32[] = 0\n  for c over N by BN\n    t += sum(x[r, c], dim=c)\n  for c over N by BN\n"
     "    y[r, c] = x[r, c] * 2\n", 8, "does not depend on the read"),
    # every step of the loop writes the same row
    ("  for c over N by BN\n    y[r, 0] = x[r, c]\n", 7, "indexed by axis names alone"),
    # the rows of other programs
    ("  s = x[0, 0]\n  for c over N by BN\n    y[r, c] = x[r, c] * s\n", 6, "outside the program's own tiles"),
])
def test_unsafe_writes_are_refused_at_the_read(body, line, words):
    errors = _errors(HEAD + body)
    assert [(where, words in message) for where, _, message in errors] == [(line, True)], errors


def test_an_output_in_place_never_written_is_said_once():
    """An ``in place of`` output no statement stores: the one error says so, at the output."""
    errors = _errors(HEAD.replace("  out y:", "  out z: f32[M, N]\n  out y:") + "  z[r, 0] = x[r, 0]\n")
    assert [(line, message) for line, _, message in errors] == [(4, "output tensor 'y' is never written")], errors


def test_a_store_every_program_writes_is_refused():
    text = ("kernel k\n  in  x: f32[M, N]\n  in  w: f32[S]\n  out y: f32[M, N] in place of x\n"
            "  block BM = 2, BN = 4\n  grid s over S, r over M by BM\n  for c over N by BN\n"
            "    y[r, c] = x[r, c] + w[s]\n")
    [(line, _, message)] = _errors(text)
    assert line == 8 and "programs along grid axis 's' would all write" in message


@pytest.mark.parametrize(("decl", "words"), [
    ("  in  w: f32[N]\n  out y: f32[M, N] in place of w\n", "differ in shape"),
    ("  out y: f16[M, N] in place of x\n", "is f16 but 'x' is f32"),
    ("  out y: f32[M, N] in place of z\n", "'z' is not an input tensor"),
])
def test_declarations_are_checked(decl, words):
    text = (f"kernel k\n  in  x: f32[M, N]\n{decl}  block BN = 4\n  grid r over M\n  for c over N by BN\n"
            "    y[r, c] = x[r, c]\n")
    errors = _errors(text)
    assert any(words in message for _, _, message in errors), errors


def test_an_input_in_place_of_another_is_refused():
    text = ("kernel k\n  in  x: f32[N]\n  in  w: f32[N] in place of x\n  out y: f32[N]\n  block BN = 4\n"
            "  grid i over N by BN\n  y[i] = x[i] + w[i]\n")
    [(line, column, message)] = _errors(text)
    assert (line, column) == (3, 29) and "'in place of' is for outputs" in message


# ------------------------------------------------------------------------------ launches

NORMALIZE = """kernel normalize
  in  x: f32[M, N]
  out y: f32[M, N] in place of x
  block BN = 4
  grid r over M
  s: f32[] = 0
  for c over N by BN
    s += sum(x[r, c] * x[r, c], dim=c)
  for c over N by BN
    y[r, c] = x[r, c] / sqrt(s + 1.0)
"""


@pytest.mark.parametrize("strided", [False, True])
def test_in_place_equals_a_new_output(compiled, strided):
    """Each row read whole (a first loop), then written in tiles over itself: the same values as
    into a new tensor, in the input's own storage and strides, its version counter raised."""
    module = compiled(NORMALIZE, "normalize")
    x = (torch.randn(7, 13) if not strided else torch.randn(13, 7).t()).to(DEVICE)
    expected = x / torch.sqrt((x * x).sum(dim=1, keepdim=True) + 1.0)
    new = module.normalize(x)
    assert new.data_ptr() != x.data_ptr()
    version = x._version
    out = module.normalize(x, inplace=True)
    assert out.data_ptr() == x.data_ptr() and out.stride() == x.stride()
    assert x._version > version
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new, expected)
    again = (torch.randn(7, 13) if not strided else torch.randn(13, 7).t()).to(DEVICE)  # the fast path's call
    kept = again.clone()
    torch.testing.assert_close(module.normalize(again, inplace=True), kept / torch.sqrt((kept * kept).sum(1, True) + 1))
    assert torch.equal(module.normalize(kept), again) and not torch.equal(kept, again)  # False: x untouched


def _problem(m, v, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, v, generator=g) * 4
    target = torch.randint(0, v, (m,), generator=g)
    return logits.to(DEVICE), target.to(DEVICE)


@pytest.mark.parametrize("config", range(5))
def test_cross_entropy_backward_in_place_at_every_config(generated, monkeypatch, config):
    forward, backward = generated("cross_entropy"), generated("cross_entropy_backward")
    force_config(monkeypatch, backward, config)
    logits, target = _problem(3, 9000 + config)  # a tail at every block
    _, lse = forward.cross_entropy(logits, target)
    dloss = torch.randn(3, generator=torch.Generator().manual_seed(config)).to(DEVICE)
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, target, reduction="none").backward(dloss)
    out = backward.cross_entropy_backward(dloss, torch.zeros_like(dloss), logits, target, lse, inplace=True)
    assert out.data_ptr() == logits.data_ptr()
    torch.testing.assert_close(out, leaf.grad, rtol=1e-5, atol=1e-6)


def test_a_first_in_place_call_tunes_on_a_new_output(generated, monkeypatch, tmp_path):
    """On the GPU the first call for a size tunes (every config runs, several times): with
    inplace=True it must not read the gradients its trials wrote, so it tunes on a new output
    first, then writes in place once. (The interpreter runs the default config.)"""
    forward, backward = generated("cross_entropy"), generated("cross_entropy_backward")
    tuner, tuned, fast = backward._tuner, {}, {}
    monkeypatch.setattr(tuner, "tuned", tuned)
    monkeypatch.setattr(backward._tuner, "tuned", tuned)
    monkeypatch.setattr(tuner, "fast", fast)
    monkeypatch.setattr(backward, "_FAST", fast)
    monkeypatch.setattr(tuner, "path", str(tmp_path / "tuned.json"))  # nothing tuned on disk
    monkeypatch.setattr(tuner, "disk", None)
    logits, target = _problem(5, 3001, seed=7)
    _, lse = forward.cross_entropy(logits, target)
    dloss = torch.randn(5).to(DEVICE)
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, target, reduction="none").backward(dloss)
    out = backward.cross_entropy_backward(dloss, torch.zeros_like(dloss), logits, target, lse, inplace=True)
    assert out.data_ptr() == logits.data_ptr()
    torch.testing.assert_close(out, leaf.grad, rtol=1e-5, atol=1e-6)


def test_the_op_makes_a_new_tensor(generated):
    backward = generated("cross_entropy_backward")
    logits, target = _problem(2, 300)
    kept = logits.clone()
    _, lse = generated("cross_entropy").cross_entropy(logits, target)
    out = backward.op(torch.ones(2, device=DEVICE), torch.zeros(2, device=DEVICE), logits, target, lse)
    assert torch.equal(logits, kept) and out.data_ptr() != logits.data_ptr()


def _head(seed=1, m=4, v=700, d=8):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(m, d, generator=g).to(DEVICE).requires_grad_()
    w = torch.randn(v, d, generator=g).to(DEVICE).requires_grad_()
    return h, w, torch.randint(0, v, (m,), generator=g).to(DEVICE)


@pytest.mark.parametrize("inplace", [False, True])
def test_inplace_backward_of_an_lm_head(generated, inplace):
    """logits = h @ w.T, as a language model's head makes them: the gradients equal torch's, and
    with inplace_backward the logits' storage holds d(loss)/d(logits) afterwards."""
    ce = generated("cross_entropy")
    h, w, target = _head()
    logits = h @ w.t()
    ce.cross_entropy(logits, target, inplace_backward=inplace)[0].mean().backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    logits2 = h2 @ w2.t()
    logits2.retain_grad()
    F.cross_entropy(logits2, target).backward()
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6)
    if inplace:
        torch.testing.assert_close(logits.detach(), logits2.grad, rtol=1e-5, atol=1e-7)
    else:
        torch.testing.assert_close(logits.detach(), logits2.detach())


def test_a_leaf_is_never_written_over(generated):
    ce = generated("cross_entropy")
    logits, target = _problem(3, 500)
    leaf = logits.clone().requires_grad_()
    ce.cross_entropy(leaf, target, inplace_backward=True)[0].sum().backward()
    assert torch.equal(leaf.detach(), logits)
    view = leaf[:, :400]  # nor a view of one
    ce.cross_entropy(view, target % 400, inplace_backward=True)[0].sum().backward()
    assert torch.equal(leaf.detach(), logits)


def test_a_copy_saved_elsewhere_is_refused_not_read_stale(generated):
    """A z-loss beside the cross-entropy saves the logits for its own backward: after they are
    written over, torch's version check refuses them instead of computing with gradients."""
    ce = generated("cross_entropy")
    h, w, target = _head(seed=2)
    logits = h @ w.t()
    z = torch.logsumexp(logits, dim=1).pow(2).mean()
    loss = ce.cross_entropy(logits, target, inplace_backward=True)[0].mean() + z
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# --------------------------------------------------------------------------- generated expressions

@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(example=expressions.examples())
def test_generated_expressions_in_place_equal_a_new_output(example, tmp_path_factory):
    """tests/test_expressions.py's random expressions of every function, 1D over f32 inputs, with
    ``z`` written in place of ``x``: where the checker accepts, inplace=True writes bit for bit what
    a new output holds, into x's storage; where it refuses, it says why in place is unsafe."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    assume(example.layout.dims == 1 and example.xdt == "f32")
    text = example.spec("k").replace("  out z: f32[N]\n", "  out z: f32[N] in place of x\n")
    try:
        source = compile_spec(text, "k.tile").source
    except SpecError as error:
        assert all("in place of 'x'" in d.message for d in error.diagnostics), error
        return
    path = tmp_path_factory.mktemp("in_place") / "k.py"
    path.write_text(source, encoding="utf-8")
    module = load_module(path)
    inputs = example.inputs()  # on the CPU
    first, y = inputs.x.to(DEVICE), inputs.y.to(DEVICE)
    x = first.clone()
    new = module.k(x, y, inputs.s)
    assert torch.equal(x, first)
    out = module.k(x, y, inputs.s, inplace=True)
    assert out.data_ptr() == x.data_ptr()
    torch.testing.assert_close(out, new, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("grid", [
    "grid m over M by BM, n over N by BN",
    "grid flat m over M by BM, n over N by BN\n  swizzle m, n group 2",
    "grid persistent m over M by BM, n over N by BN",
])
def test_in_place_on_every_grid_of_tiles(compiled, grid):
    """A 2D elementwise tile written over its input on a 2D grid, a flat one with grouped ordering
    and a persistent one (programs walking the tiles): each equals a new output, with tails."""
    text = ("kernel scaled\n  in  x: f32[M, N]\n  in  w: f32[N]\n  out y: f32[M, N] in place of x\n"
            f"  block BM = 4, BN = 8\n  {grid}\n  y[m, n] = x[m, n] * w[n] + 1.0\n")
    module = compiled(text, "scaled")
    x = torch.randn(11, 19).to(DEVICE)
    w = torch.randn(19).to(DEVICE)
    expected = x * w + 1.0
    out = module.scaled(x, w, inplace=True)
    assert out.data_ptr() == x.data_ptr()
    torch.testing.assert_close(out, expected)


def test_a_refused_in_place_call_leaves_its_inputs_as_they_were(generated):
    """adamw has no backward: an in-place call autograd would record is refused after its checks,
    before anything is written or counted as written (the inputs' version counters unchanged), on
    the full path and again once a call with the same key has launched."""
    adamw = generated("adamw")
    g = torch.Generator().manual_seed(4)
    param, grad, exp_avg = (torch.randn(37, generator=g).to(DEVICE) for _ in range(3))
    exp_avg_sq = torch.rand(37, generator=g).to(DEVICE)
    scalars = (1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0)
    for launched_before in (False, True):
        if launched_before:  # the same key, launched: the fast path leaves a recorded call to the checks
            adamw.adamw(param.clone(), grad, exp_avg.clone(), exp_avg_sq.clone(), *scalars, inplace=True)
        leaf = param.clone().requires_grad_()
        kept = [t.clone() for t in (exp_avg, exp_avg_sq)]
        versions = [t._version for t in (leaf, exp_avg, exp_avg_sq)]
        with pytest.raises(RuntimeError, match="adamw"):
            adamw.adamw(leaf, grad, exp_avg, exp_avg_sq, *scalars, inplace=True)
        assert [t._version for t in (leaf, exp_avg, exp_avg_sq)] == versions
        assert torch.equal(exp_avg, kept[0]) and torch.equal(exp_avg_sq, kept[1])


def test_cross_entropys_op_takes_the_inplace_backward_keyword_of_its_schema(generated):
    """The op's schema is the launcher's (inplace_backward= included, which only its Function
    reads): opcheck with the keyword (fake implementation, AOT dispatch) passes."""
    ce = generated("cross_entropy")
    logits, target = _problem(3, 301)
    torch.library.opcheck(ce.op.default, (logits, target, -100, 0.1, 0.0, 0.0, None), {"inplace_backward": True})
