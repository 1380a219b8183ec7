"""``deterministic``: a kernel's ``+=`` stores add in the order of their tokens, the same bits at
every block size. Each element ends at ``start + v[t1] + v[t2] + ...`` (``t1 < t2 < ...``),
rounded after each add in float32 (f16 and bf16 outputs: rounded to their dtype once, at the
end). The expected values are sums written out as Python loops over the tokens in order, in
float32, compared bit for bit; the generated references (torch's ``index_put_(...,
accumulate=True)``, which adds in order on the CPU) must give the same bits."""

import os

import pytest
import torch

from tests.conftest import config_indices, force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runtime import sorted_runs

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


def _indices(n: int, extent: int, seed: int) -> torch.Tensor:
    """``n`` indices into ``extent``: long runs of repeats (a padding token), and some outside."""
    generator = torch.Generator().manual_seed(seed)
    index = torch.randint(0, extent, (n,), generator=generator)
    if n >= 8:
        index[::3] = index[1]  # one row a third of the tokens share
        index[-1], index[-2] = -1, extent  # before the first row, past the last
    return index


def _in_order(index, values, extent, start=0.0, keep=None):
    """[extent, C]: ``start`` plus each token's row of ``values`` (float32) at its index, added one
    token after another in the tokens' order; tokens outside [0, extent) or not in ``keep`` add nothing."""
    out = torch.full((extent, values.shape[1]), start, dtype=torch.float32)
    for t, v in enumerate(index.tolist()):
        if 0 <= v < extent and (keep is None or keep[t]):
            out[v] = out[v] + values[t].float()
    return out


def _rounded(sums: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float32 ``sums`` in ``dtype`` as the kernel's store rounds them: to nearest even (in Triton's
    interpreter too, whose bf16 cast conftest makes round as the GPU's: tilegen.interpreter)."""
    return sums.to(dtype)


def test_sorted_runs_orders_the_tokens_stably_and_marks_each_runs_end():
    index = torch.tensor([3, 1, 3, -1, 1, 3])
    order, run_end = sorted_runs(index)
    assert order.tolist() == [3, 1, 4, 0, 2, 5]  # -1; the 1s in order; the 3s in order
    assert run_end.tolist() == [1, 3, 2, 6, 4, 5]  # runs at 0, 1 and 3: their ends; elsewhere the position
    empty = sorted_runs(torch.empty(0, dtype=torch.int64))
    assert [t.numel() for t in empty] == [0, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("n", "extent", "channels"), [(61, 7, 37), (9, 300, 5), (70, 2, 24)])
def test_the_deterministic_embedding_backward_adds_in_the_tokens_order(generated, monkeypatch, dtype, n, extent,
                                                                       channels):
    """dweight at every config (block sizes 4 x 8 to 64 x 128 on the GPU) is the in-order float32
    sum rounded to the table's dtype, bit for bit; padding_idx's tokens and indices outside the
    table add nothing; a row no token names is 0."""
    module = generated("embedding_backward_deterministic")
    idx = _indices(n, extent, seed=n)
    dy = (torch.randn(n, channels, generator=torch.Generator().manual_seed(1)) * 100).to(dtype)
    padding = int(idx[0])
    weight = torch.empty(extent, channels, dtype=dtype)  # its shape and dtype only
    sums = _in_order(idx, dy, extent, keep=(idx != padding).tolist())
    want = _rounded(sums, dtype)
    ends = config_indices(module) if DEVICE == "cuda" else [config_indices(module)[0], config_indices(module)[-1]]
    for index in ends:
        force_config(monkeypatch, module, index)
        got = module.embedding_backward_deterministic(idx.to(DEVICE), dy.to(DEVICE), weight.to(DEVICE), padding)
        assert got.dtype == dtype and torch.equal(got.cpu(), want), f"config {index}"
    assert torch.equal(module.reference(idx, dy, weight, padding), sums.to(dtype))
    without = module.embedding_backward_deterministic(idx.to(DEVICE), dy.to(DEVICE), weight.to(DEVICE))  # no padding
    assert torch.equal(without.cpu(), _rounded(_in_order(idx, dy, extent), dtype))


ORDERED = """\
kernel k
  in  idx: i32[N]
  in  src: f32[N, C]
  in  V: i32
  out y: f32[V, C] = 1.5
  out copied: f32[N, C]
  block BT = 4, BC = 8
  grid  t over N by BT, c over C by BC
  deterministic
  copied[t, c] = src[t, c] * 3.0
  y[idx[t], c] += src[t, c] * src[t, c] where src[t, c] > 0
"""


@pytest.mark.parametrize(("block_t", "block_c"), [(1, 1), (4, 8), (16, 2), (128, 32)])
def test_a_deterministic_kernel_sees_each_token_once_and_sums_from_its_start(compiled, block_t, block_c):
    """Beside the ordered ``+=`` (from a start of 1.5, only where its ``where`` holds), a plain
    store through ``t`` writes each token's row once; i32 indices; the same bits at every block."""
    module = compiled(ORDERED.replace("BT = 4, BC = 8", f"BT = {block_t}, BC = {block_c}"))
    idx = _indices(47, 5, seed=3).to(torch.int32)
    src = torch.randn(47, 19, generator=torch.Generator().manual_seed(4)) * 1e4
    y, copied = (out.cpu() for out in module.k(idx.to(DEVICE), src.to(DEVICE), 5))
    keep = src > 0
    want, fused = torch.full((5, 19), 1.5), torch.full((5, 19), 1.5)
    for t, v in enumerate(idx.tolist()):
        if 0 <= v < 5:
            want[v] = torch.where(keep[t], want[v] + src[t] * src[t], want[v])
            # a GPU may fuse '+ src * src' into one fma (the exact product added, rounded once)
            fused[v] = torch.where(keep[t], (fused[v].double() + src[t].double() * src[t].double()).float(), fused[v])
    if DEVICE == "cpu":
        assert torch.equal(y, want)
    else:  # in order, with or without the fma the compiler chose at this block; the same bits again
        assert torch.equal(y, want) or torch.equal(y, fused)
        assert torch.equal(module.k(idx.to(DEVICE), src.to(DEVICE), 5)[0].cpu(), y)
    assert torch.equal(copied, src * 3.0)
    ref_y, ref_copied = module.reference(idx, src, 5)
    assert torch.equal(ref_y, want) and torch.equal(ref_copied, copied)


def test_a_deterministic_count_is_torchs_bincount(compiled):
    """A value over no axis but ``t`` (``counts[x[i]] += 1``) into an i64 output."""
    module = compiled("kernel k\n  in  x: i64[N]\n  in  bins: i32\n  out counts: i64[bins] = 0\n  block BN = 16\n"
                      "  grid  i over N by BN\n  deterministic\n  counts[x[i]] += 1\n")
    x = _indices(203, 9, seed=5)
    inside = x[(x >= 0) & (x < 9)]
    assert torch.equal(module.k(x.to(DEVICE), 9).cpu(), torch.bincount(inside, minlength=9))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ([("  y[idx[t], c] += src[t, c] * src[t, c] where src[t, c] > 0\n", "  y[t % V, c] = src[t, c]\n")],
         "'deterministic' orders a kernel's '+=' stores, and this kernel has none"),
        ([("in  idx: i32[N]", "in  idx: i32[N, C]"), ("y[idx[t], c]", "y[idx[t, c], c]")],
         "under 'deterministic' a '+=' store scatters through one index: y[idx[t], c] += v"),
        ([("  out copied: f32[N, C]\n", "  out copied: f32[N, C]\n  out total: f32[C]\n"),
          ("  deterministic\n", "  deterministic\n  total[c] = sum(src[t, c], dim=t)\n")],
         "no value spans several tokens: 'sum' over 't'"),
        ([("grid  t over N by BT", "grid  flat t over N by BT")], "'deterministic' takes a grid of plain program axes"),
        # programs along b would each store their own sum into one element: the last would win
        ([("in  src: f32[N, C]", "in  src: f32[N, C]\n  in  w: f32[G, N]"),
          ("grid  t over N by BT", "grid  g over G, t over N by BT"),
          ("  copied[t, c] = src[t, c] * 3.0\n", "  copied[t, c] = src[t, c] * 3.0\n  z[idx[t], c] += w[g, t]\n"),
          ("  out copied", "  out z: f32[V, C] = 0\n  out copied")],
         "its other index items the other grid axes"),
        # a value every program uses (a stage of its own without the walk)
        ([("  in  V: i32\n", "  in  V: i32\n  in  w: f32[C]\n"),
          ("  deterministic\n", "  deterministic\n  s = sum(w[c], dim=c)\n"), ("* src[t, c] where", "* s where")],
         "no value is reduced over a grid axis ('c')"),
        ([("c over C by BC", "c over C whole"), ("BT = 4, BC = 8", "BT = 4")], "'c' is whole"),
        ([("  out y: f32[V, C] = 1.5\n", "  out y: f32[V, C] = 1.5\n  out z: f32[V, C] = 0\n  in  jdx: i32[N]\n"),
          ("  copied[t, c] = src[t, c] * 3.0\n", "  copied[t, c] = src[t, c] * 3.0\n  z[jdx[t], c] += src[t, c]\n")],
         "every '+=' store scatters through the same index at the same axis (here: idx[t], jdx[t])"),
    ],
)
def test_a_kernel_deterministic_cannot_order_is_refused_at_its_place(changes, message):
    source = ORDERED
    for old, new in changes:
        assert old in source
        source = source.replace(old, new)
    with pytest.raises(SpecError) as caught:
        compile_spec(source, "k.tile")
    rendered = caught.value.render()
    assert message in rendered
    assert rendered.startswith("k.tile:")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_narrow_sum_starts_from_the_start_as_its_output_holds_it(compiled, dtype):
    """``out y: T[V, C] = 0.1``: the launcher fills y with 0.1 rounded to T; the run's float32 sum
    starts from that value (f16: 0.0999755859375), not from float32's 0.1."""
    module = compiled("kernel k\n  dtype T in f16, f32\n  in  idx: i64[N]\n  in  src: T[N, C]\n  in  V: i64\n"
                      "  out y: T[V, C] = 0.1\n  block BT = 4, BC = 8\n  grid  t over N by BT, c over C by BC\n"
                      "  deterministic\n  y[idx[t], c] += src[t, c]\n")
    idx = _indices(40, 6, seed=13)
    src = torch.randn(40, 20, generator=torch.Generator().manual_seed(14)).to(dtype)
    start = torch.tensor(0.1).to(dtype).float().item()
    want = _in_order(idx, src, 6, start=start).to(dtype)
    assert torch.equal(module.k(idx.to(DEVICE), src.to(DEVICE), 6).cpu(), want)
    assert torch.equal(module.reference(idx, src, 6), want)


def test_deterministic_takes_a_bf16_sum_that_atomics_refuse():
    """An f16 or bf16 ``+=`` output is refused for atomics (each add would round); a deterministic
    kernel sums each run in float32 and rounds once, so it takes one."""
    narrow = ORDERED.replace("out y: f32[V, C] = 1.5", "out y: bf16[V, C] = 0")
    assert "acc_y.to(tl.bfloat16)" in compile_spec(narrow, "k.tile").source
    with pytest.raises(SpecError, match="an atomic add into bf16 rounds the sum at every add"):
        compile_spec(narrow.replace("  deterministic\n", ""), "k.tile")


@pytest.fixture
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) for the test, as it was after."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_embedding_trains_deterministically_under_torchs_switch(generated, monkeypatch, dtype,
                                                                    deterministic_algorithms):
    """embedding.tile's ``backward deterministic`` line: with torch's deterministic algorithms on,
    autograd runs embedding_backward_deterministic (once a backward), whose weight gradient is the
    in-order sum; with them off, the atomic kernels run and the one-kernel backward does not."""
    embedding, ordered = generated("embedding"), generated("embedding_backward_deterministic")
    calls = []
    run = ordered.embedding_backward_deterministic
    monkeypatch.setattr(ordered, "embedding_backward_deterministic", lambda *a, **k: calls.append(a) or run(*a, **k))
    idx = _indices(50, 6, seed=7)[:-2]  # inside the table: torch's own embedding refuses others
    weight = torch.randn(6, 24, generator=torch.Generator().manual_seed(8)).to(DEVICE, dtype).requires_grad_()
    dy = (torch.randn(48, 24, generator=torch.Generator().manual_seed(9)) * 100).to(DEVICE, dtype)
    embedding.embedding(idx.to(DEVICE), weight, 2).backward(dy)
    want = _rounded(_in_order(idx, dy.cpu(), 6, keep=(idx != 2).tolist()), dtype)
    assert len(calls) == 1 and torch.equal(weight.grad.cpu(), want)
    torch.use_deterministic_algorithms(False)
    weight.grad = None
    embedding.embedding(idx.to(DEVICE), weight, 2).backward(dy)
    assert len(calls) == 1
    torch.testing.assert_close(weight.grad.float().cpu(), want.float(), rtol=1e-2, atol=1e-2 * 100 * 50 ** 0.5)


def test_a_deterministic_backward_needs_a_backward_beside_it(tmp_path):
    """``backward deterministic k`` names what runs instead of a ``backward`` line's kernels: alone,
    it is refused at its line."""
    source = ("kernel k\n  in  x: f32[N]\n  out y: f32[N]\n  block B = 4\n  backward deterministic k_backward\n"
              "  grid  i over N by B\n  y[i] = x[i] * 2.0\n")
    (tmp_path / "k_backward.tile").write_text(
        "kernel k_backward\n  in  dy: f32[N]\n  out dx: f32[N]\n  block B = 4\n  grid  i over N by B\n"
        "  dx[i] = dy[i] * 2.0\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        compile_spec(source, str(tmp_path / "k.tile"))
    assert "k.tile:5:26: error: 'backward deterministic' names what runs instead" in caught.value.render()


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_deterministic_embedding_backward_on_the_gpu_is_the_cpus_in_order_sum(generated, dtype):
    """A vocabulary of 1000 over 20000 tokens of 256 channels, 30% of them one token (a run one lane
    walks 6000 steps long): two runs give the same bits, and those of a float32 sum in token order
    (a Python loop of row adds), rounded to the table's dtype."""
    module = generated("embedding_backward_deterministic")
    generator = torch.Generator().manual_seed(21)
    idx = torch.randint(0, 1000, (20000,), generator=generator)
    idx[torch.rand(20000, generator=generator) < 0.3] = 7
    dy = torch.randn(20000, 256, generator=generator).to(dtype)
    total = torch.zeros(1000, 256)
    for token, row in zip(idx.tolist(), dy.float(), strict=True):
        total[token] += row
    want = total.to(dtype)
    weight = torch.empty(1000, 256, device="cuda", dtype=dtype)
    runs = [module.embedding_backward_deterministic(idx.cuda(), dy.cuda(), weight) for _ in range(2)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0].cpu(), want)
