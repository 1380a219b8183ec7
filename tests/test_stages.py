"""Values reduced across programs that every program then uses (a Frobenius norm's norm, batch
norm's statistics): the spec split into launches (tilegen.lower.stages), checked in Triton's
interpreter against torch expressions written here, independently of the specs' references.

A stage computes the values first (per-program partials and a finish kernel), and the spec's
kernel loads them. Results must not depend on the block sizes (up to rounding), must be bitwise
the same run to run, and a value computed from another must wait for it. Shapes have tails at
every block size; inputs have both signs, and a large offset where a variance could lose it.
"""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import force_config


def _rand(*shape, seed=0, dtype=torch.float32, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) + offset).to(dtype)


# name -> (inputs of a [B, C, H, W] problem, the result in torch, as KernelBench level 1 writes it)
NORMS = {
    "frobenius_norm": (lambda shape, s: (_rand(*shape, seed=s),), lambda x: x / torch.norm(x, p="fro")),
    "batch_norm": (
        # a channel mean 300 times its spread: the one-pass variance must keep its digits
        lambda shape, s: (_rand(*shape, seed=s, offset=300.0), _rand(shape[1], seed=s + 1),
                          _rand(shape[1], seed=s + 2), 1e-5),
        lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, training=True, eps=eps),
    ),
    "group_norm": (
        # groups of 2 channels where C is even, else one channel each
        lambda shape, s: (_rand(*shape, seed=s, offset=300.0), _rand(shape[1], seed=s + 1),
                          _rand(shape[1], seed=s + 2), shape[1] // 2 if shape[1] % 2 == 0 else shape[1], 1e-5),
        lambda x, w, b, groups, eps: F.group_norm(x, groups, w, b, eps=eps),
    ),
}


@pytest.mark.parametrize("name", sorted(NORMS))
# H = 19: two tiles or more, the last partial, at every BH from 2 to 16; B = 2: two batch entries
# (a program each) reduced together; C odd (a group of one channel each) and even
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 2, 19, 33), (1, 4, 1, 2)])
def test_norms_match_torch_at_every_config(generated, monkeypatch, name, shape):
    module = generated(name)
    make, norm = NORMS[name]
    inputs = make(shape, sum(shape))
    exact = norm(*(x.double() if isinstance(x, torch.Tensor) else x for x in inputs))
    # no further from the exact result than torch's own float32 (x - mean rounds at 300's ulp)
    allowed = 2 * (norm(*inputs).double() - exact).abs().max().item() + 2e-6
    configs = range(len(module._CONFIGS)) if hasattr(module, "_CONFIGS") else [None]
    for index in configs:  # BH from 2 to 16: tails everywhere
        if index is not None:  # a tuned spec at each of its configs
            force_config(monkeypatch, module, index)
        result = getattr(module, name)(*inputs)
        assert (result.double() - exact).abs().max().item() <= allowed
        assert torch.equal(result, getattr(module, name)(*inputs))  # bitwise the same run to run
    assert (module.reference(*inputs).double() - exact).abs().max().item() <= allowed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_norm_of_half_precision_tensors_is_reduced_in_float32(generated, dtype):
    module = generated("frobenius_norm")
    x = _rand(2, 3, 9, 17, seed=3, dtype=dtype)
    expected = (x.double() / torch.norm(x.double(), p="fro")).to(dtype)
    result = module.frobenius_norm(x)
    assert result.dtype == dtype
    torch.testing.assert_close(result, expected)


HEAD = ("kernel k\n  in  x: f32[M, N]\n  out y: f32[M, N]\n  block BM = 4, BN = 8\n"
        "  grid r over M by BM, c over N by BN\n")


@pytest.mark.parametrize(("body", "torch_of"), [
    # a value over the axes it does not reduce: each column's mean, for every row's program
    ("  mu = mean(x[r, c], dim=r)\n  y[r, c] = x[r, c] - mu\n", lambda x: x - x.mean(0)),
    # a value computed from another waits for it: the variance from the mean (two stages)
    ("  mu = mean(x[r, c], dim=(r, c))\n  var = mean((x[r, c] - mu) * (x[r, c] - mu), dim=(r, c))\n"
     "  y[r, c] = (x[r, c] - mu) / sqrt(var)\n", lambda x: (x - x.mean()) / x.var(unbiased=False).sqrt()),
    # the values at the ends of a row's max, the stage recomputing the assignment it reads
    ("  a = abs(x[r, c])\n  top = max(a, dim=(r, c))\n  low = min(a, dim=(r, c))\n"
     "  y[r, c] = (a - low) / (top - low)\n",
     lambda x: (x.abs() - x.abs().min()) / (x.abs().max() - x.abs().min())),
])
# each size at each block shape, but for 19 x 45 in tiles of 1 x 2 (437 programs, each run one
# after another in the interpreter): tiles of 1 x 2 with tails in both axes are 5 x 7's (20 programs)
@pytest.mark.parametrize(("m", "n", "blocks"), [
    (m, n, blocks) for m, n in [(1, 1), (5, 7), (19, 45)] for blocks in [(4, 8), (1, 2), (32, 64)]
    if (m, n, blocks) != (19, 45, (1, 2))])
def test_values_used_by_every_program(compiled, body, torch_of, m, n, blocks):
    module = compiled(HEAD + body)
    x = _rand(m, n, seed=m * n)
    expected = torch_of(x.double()).float()
    bm, bn = blocks
    result = module.k(x, BM=bm, BN=bn)
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(module.reference(x), expected, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_independent_values_share_one_stage_and_dependent_ones_wait(compiled):
    from tilegen.check import check
    from tilegen.lower.stages import stage_specs
    from tilegen.parser import parse

    body = ("  s = sum(x[r, c], dim=(r, c))\n  q = sum(x[r, c] * x[r, c], dim=(r, c))\n"
            "  d = max(abs(x[r, c] - s / q), dim=(r, c))\n  y[r, c] = x[r, c] / d\n")
    staging = stage_specs(check(parse(HEAD + body, "k.tile")))
    assert staging.values == (("s_reduced", "q_reduced"), ("d_reduced",))
    second = {t.name.id: t.role for t in staging.stages[1].tensors}
    assert second == {"x": "in", "s_reduced": "in", "q_reduced": "in", "d_reduced": "out"}
    # the spec's kernel reads only what it uses: d, not s and q
    assert [t.name.id for t in staging.main.inputs] == ["x", "d_reduced"]
    module = compiled(HEAD + body)
    x = _rand(6, 11, seed=1)
    expected = x / (x - x.sum() / (x * x).sum()).abs().max()
    torch.testing.assert_close(module.k(x), expected)
    launcher = module.k.__code__.co_names
    assert "_k_s" in launcher and "_k_d" in launcher  # the stages' launchers, in the spec's


def test_a_staged_function_takes_only_the_spec_inputs_and_checks_them(compiled):
    module = compiled(HEAD + "  mu = mean(x[r, c], dim=(r, c))\n  y[r, c] = x[r, c] - mu\n")
    import inspect

    assert list(inspect.signature(module.k).parameters) == ["x", "BM", "BN"]
    with pytest.raises(ValueError, match="x"):
        module.k(torch.zeros(3, 4, 5))


@pytest.mark.parametrize(("name", "extra"), [("group_norm", (3,)), ("layer_norm_chw", ())])
def test_a_derived_backward_runs_the_forwards_own_stage(generated, name, extra):
    """The derived backward recomputes the forward's statistics with the same kernel: its module
    calls the forward module's stage launcher (tilegen.compiler.borrow_stages) instead of holding
    that kernel again, and its gradients are torch's (inputs with an offset 300 times their spread,
    where a one-pass variance would lose digits)."""
    forward, backward = generated(name), generated(f"{name}_backward")
    source = open(backward.__file__, encoding="utf-8").read()
    assert f"def _{name}_backward_shift_kernel(" not in source
    assert f'_rt.sibling(__file__, "{name}")._{name}_shift(' in source
    shape = (2, 6, 5, 7)
    x = _rand(*shape, offset=300.0).requires_grad_()
    w = _rand(*(shape[1:] if name == "layer_norm_chw" else shape[1:2]), seed=1).requires_grad_()
    b = _rand(*w.shape, seed=2).requires_grad_()
    dy = _rand(*shape, seed=3)
    getattr(forward, name)(x, w, b, *extra, 1e-5).backward(dy)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    if name == "group_norm":
        F.group_norm(xd, 3, wd, bd, 1e-5).backward(dy.double())
    else:
        F.layer_norm(xd, shape[1:], wd, bd, 1e-5).backward(dy.double())
    for got, want in ((x.grad, xd.grad), (w.grad, wd.grad), (b.grad, bd.grad)):
        torch.testing.assert_close(got.double(), want, atol=2e-3, rtol=1e-3)


def test_a_call_with_nothing_to_compute_runs_no_stage(generated, monkeypatch):
    """batch_norm of zero channels: its plan returns the empty output before its stage (each
    channel's shift and scale, a launch of its own) runs; with channels, the stage runs once a
    call, on the full path and on the fast path."""
    module = generated("batch_norm")
    calls = []
    stage = module._batch_norm_shift
    monkeypatch.setattr(module, "_batch_norm_shift", lambda x: calls.append(x.shape) or stage(x))
    x = _rand(2, 0, 5, 7)
    y = module.batch_norm(x, torch.ones(0), torch.zeros(0), 1e-5)
    assert y.shape == (2, 0, 5, 7) and calls == []
    x, w, b = _rand(2, 3, 5, 7, seed=1), _rand(3, seed=2), _rand(3, seed=3)
    for _ in range(2):
        torch.testing.assert_close(module.batch_norm(x, w, b, 1e-5), NORMS["batch_norm"][1](x, w, b, 1e-5),
                                   rtol=1e-5, atol=1e-5)
    assert calls == [(2, 3, 5, 7)] * 2
