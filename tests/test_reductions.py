"""Reductions, math, predicates and gathers: the issue-10 specs against torch and against the
hand-written tutorial kernels, in Triton's interpreter.

torch is the independent oracle (``torch.softmax``, ``F.layer_norm``, ``F.rms_norm``,
``F.cross_entropy``, ``torch.tril``); row lengths are 1, 7, 781 and 3000 (never a power of
two past 1, so every whole tile has a masked tail), and rows longer than one tile of a loop.
"""

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT, spec_named
from tests.reference import layer_norm as ref_layer_norm
from tests.reference import softmax as ref_softmax
from tilegen.compiler import compile_spec
from tilegen.runner import load_module
from tilegen.tolerance import assert_close

ROW_LENGTHS = [1, 7, 781, 3000]


def _rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_softmax_matches_torch_and_tutorial_02(generated, n):
    x = _rand(5, n, seed=n, scale=4.0)
    y = generated("softmax").softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, ref_softmax.softmax(x), atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(generated("softmax").reference(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_softmax_of_strided_views(generated):
    base = _rand(6, 1600, seed=3)
    for x in (base[::2, :781], base[:, ::2], base.t()[:700:3]):  # row stride, column stride, transposed
        torch.testing.assert_close(generated("softmax").softmax(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_softmax_of_extreme_rows(generated):
    """-inf entries, a row of one large value, and large magnitudes: no NaN where torch has none."""
    x = torch.tensor([[0.0, float("-inf"), 1.0], [1e4, -1e4, 0.0], [-88.0, -88.0, -88.0]])
    torch.testing.assert_close(generated("softmax").softmax(x), torch.softmax(x, dim=-1))


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_log_softmax_matches_torch(generated, n):
    x = _rand(3, n, seed=n, scale=4.0)
    torch.testing.assert_close(
        generated("log_softmax").log_softmax(x), torch.log_softmax(x, dim=-1), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_layer_norm_matches_torch_and_tutorial_05(generated, n):
    x = _rand(4, n, dtype=torch.float16, seed=n, scale=3.0)
    w, b = _rand(n, dtype=torch.float16, seed=1), _rand(n, dtype=torch.float16, seed=2)
    y, mu, rstd = generated("layer_norm").layer_norm(x, w, b, 1e-5)
    expected = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y.float(), expected, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(mu, x.float().mean(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rstd, torch.rsqrt(x.float().var(-1, unbiased=False) + 1e-5), atol=1e-4, rtol=1e-4)
    hand_y, hand_mu, hand_rstd = ref_layer_norm.layer_norm(x, w, b, 1e-5)
    torch.testing.assert_close(y, hand_y, atol=2e-3, rtol=2e-3)  # one f16 rounding apart at most
    torch.testing.assert_close(mu, hand_mu, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(rstd, hand_rstd, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_rms_norm_matches_torch(generated, n):
    x = _rand(4, n, dtype=torch.float16, seed=n, scale=3.0)
    w = _rand(n, dtype=torch.float16, seed=5)
    y = generated("rms_norm").rms_norm(x, w, 1e-6)
    torch.testing.assert_close(y.float(), F.rms_norm(x.float(), (n,), w.float(), 1e-6), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("v", [*ROW_LENGTHS, 4500])
def test_cross_entropy_matches_torch(generated, v):
    """One program per row over tiles of BV (1024 in the interpreter): 3000 and 4500 take
    several tiles, so the online log-sum-exp rescales; targets include the first and last class."""
    logits = _rand(5, v, seed=v, scale=5.0)
    target = torch.randint(0, v, (5,), generator=torch.Generator().manual_seed(v))
    target[0], target[-1] = 0, v - 1
    loss, lse = generated("cross_entropy").cross_entropy(logits, target)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, reduction="none"), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, torch.logsumexp(logits, dim=-1), atol=1e-5, rtol=1e-5)


def test_cross_entropy_reads_nothing_past_the_classes(generated):
    """A target outside [0, V) reads no memory and gives its row the loss NaN (torch would raise);
    the other rows keep theirs."""
    logits = _rand(2, 10, seed=1)
    loss, _ = generated("cross_entropy").cross_entropy(logits, torch.tensor([3, 10]))
    lse = torch.logsumexp(logits, dim=-1)
    torch.testing.assert_close(loss[0], lse[0] - logits[0, 3])
    assert loss[1].isnan()


def _tril_of_product(a, b):
    return torch.tril(torch.tril(a) @ torch.tril(b))


def _triu_of_product(a, b):
    return torch.triu(torch.triu(a) @ torch.triu(b))


@pytest.mark.parametrize("name,torch_fn,mask", [("matmul_tril", _tril_of_product, torch.tril),
                                                ("matmul_triu", _triu_of_product, torch.triu)])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (70, 33, 100), (100, 17, 40), (150, 150, 150)])
def test_triangular_matmuls_match_torch(generated, name, torch_fn, mask, m, k, n):
    """``matmul_tril`` and ``matmul_triu`` read a and b as triangular (the other triangle taken as
    0, never read): on triangular inputs they are torch.tril(a @ b) and torch.triu(a @ b); on any
    inputs, the product of the triangles. Tiles of k outside the two diagonals are skipped, at
    sizes that cross them in several places."""
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    module = generated(name)
    out = getattr(module, name)(a, b)
    assert_close(spec_named(name), (a, b), out, torch_fn(a, b), torch_fn)
    ta, tb = mask(a), mask(b)
    got = getattr(module, name)(ta, tb)
    assert_close(spec_named(name), (ta, tb), got, mask(ta @ tb), lambda a, b: mask(a @ b))


@pytest.fixture(scope="module")
def layer_norm_looped(tmp_path_factory):
    spec = ROOT / "tests" / "specs" / "layer_norm_looped.tile"
    path = tmp_path_factory.mktemp("looped") / "layer_norm_looped.py"
    path.write_text(compile_spec(spec.read_text(), "tests/specs/layer_norm_looped.tile").source)
    return load_module(path)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_rows_longer_than_a_tile_take_three_loops(layer_norm_looped, n):
    """Statistics in two loops (mean, then centred variance) and the writes in a third, over
    tiles of 16: each loop's scalar accumulator carries across tiles."""
    x, w, b = _rand(3, n, seed=n, scale=2.0), _rand(n, seed=1), _rand(n, seed=2)
    y = layer_norm_looped.layer_norm_looped(x, w, b, 1e-5)
    torch.testing.assert_close(y, F.layer_norm(x, (n,), w, b, 1e-5), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer_norm_looped.reference(x, w, b, 1e-5), y, atol=1e-5, rtol=1e-5)


def test_generated_softmax_reads_like_tutorial_02():
    """The row is loaded once, padding lanes are kept out of max and sum, no other loads."""
    source = (ROOT / "generated" / "softmax.py").read_text()
    kernel = source[source.index("def softmax_kernel"):source.index("def softmax(")]
    assert kernel.count("tl.load(") == 1 and kernel.count("tl.store(") == 1
    assert 'amax(tl.where(mask_c[None, :], xf, float("-inf")), 1)' in kernel  # NaN-propagating tl.max
    assert "tl.sum(tl.where(mask_c[None, :], e.to(tl.float32), 0.0), axis=1)" in kernel
    assert "e / sum_c[:, None]" in kernel  # the row sums broadcast back over the row


ROW_SUMS = """\
kernel row_stats
  in  x: f32[M, N]
  out total: f32[M]
  out biggest: f32[M]
  block BM = 4, BN = 8
  grid  m over M by BM
  acc: f32[m] = 0
  top: f32[m] = -inf
  for c over N by BN
    acc += sum(x[m, c], dim=c)
    top = maximum(top, max(x[m, c], dim=c))
  total[m] = acc
  biggest[m] = top
"""


def test_tile_local_accumulators_over_a_loop(tmp_path):
    """Accumulators over a grid tile of rows (f32[m]), fed by a reduction of each loop tile."""
    path = tmp_path / "row_stats.py"
    path.write_text(compile_spec(ROW_SUMS, "row_stats.tile").source)
    module = load_module(path)
    x = _rand(10, 21, seed=4)
    total, biggest = module.row_stats(x)
    torch.testing.assert_close(total, x.sum(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(biggest, x.amax(-1))


def test_tilegen_run_draws_gather_indices_in_range():
    """`tilegen run` on the cross-entropy spec: targets are valid classes, so it passes."""
    from typer.testing import CliRunner

    from tilegen.cli import app

    result = CliRunner().invoke(
        app, ["run", str(ROOT / "specs" / "cross_entropy.tile"), "--size", "M=3", "--size", "V=1500"]
    )
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output


CLASH = """\
kernel clash
  in  x: f32[M, N]
  in  {tensor}: f32[M]
  out y: f32[M, N]
  grid  r over M, c over N whole
  {local} = x[r, c] * 2
  y[r, c] = {local} - max({local}, dim=c) + {tensor}[r]
"""


@pytest.mark.parametrize("tensor,local", [("BLOCK_N", "t"), ("b", "BLOCK_N")])
def test_the_whole_tile_constexpr_goes_around_spec_names(tmp_path, tensor, local):
    """A whole axis's tile size is a kernel constexpr and a launcher local (BLOCK_N): an input
    or a local of that name keeps it, and the generated name moves aside."""
    path = tmp_path / "clash.py"
    path.write_text(compile_spec(CLASH.format(tensor=tensor, local=local), "clash.tile").source)
    module = load_module(path)
    x, b = _rand(3, 7, seed=1), _rand(3, seed=2)
    expected = 2 * x - (2 * x).amax(-1, keepdim=True) + b[:, None]
    torch.testing.assert_close(module.clash(x, b), expected)




def test_integer_max_over_a_padded_row_stays_exact(compiled):
    """Padding lanes of an integer max hold the dtype's lowest value, not -inf (which made the tile
    float32 and rounded values past 2**24)."""
    module = compiled("""kernel k
  in  x: i32[M, N]
  out y: i32[M]
  out z: i32[M]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r] = max(x[r, c], dim=c)
  z[r] = min(x[r, c], dim=c)
""")
    x = torch.randint(50_000_000, 50_000_100, (5, 37), dtype=torch.int32)
    y, z = module.k(x)
    assert torch.equal(y, x.amax(dim=1)) and torch.equal(z, x.amin(dim=1))


def test_integer_sum_over_a_padded_row_stays_exact(compiled):
    """Padding lanes of an integer sum hold the integer 0, not 0.0 (which made the tile float32)."""
    module = compiled("""kernel k
  in  x: i32[M, N]
  out y: i32[M]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r] = sum(x[r, c], dim=c)
""")
    x = torch.randint(20_000_000, 20_000_100, (5, 37), dtype=torch.int32)
    assert torch.equal(module.k(x), x.sum(dim=1, dtype=torch.int32))
