"""Scatter stores: ``y[idx[t], c] += v`` adds through atomics into an output declared with the
number it starts at (``out y: f32[V, C] = 0``). Every lane adds, so repeated indices add up and an
index outside its dimension adds nowhere; the result is torch's (``index_add_``, ``bincount``,
``scatter_add_``) at every block size, up to the order of float additions. A plain ``=`` through
a loaded index puts values where the index says. A gather's derived backward is a scatter-add."""

import os

import pytest
import torch

from tests.conftest import config_indices, force_config
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse


def _indices(n: int, extent: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` indices into ``extent``, repeated ones among them, and a few outside [0, extent)."""
    index = torch.randint(0, extent, (n,), generator=generator)
    if n >= 4:
        index[:3] = index[3]  # a row several tokens share
        index[-1] = -1
    if n >= 6:
        index[-2] = extent  # one past the end
    return index


def _torch_index_add(index, values, extent):
    """dweight by torch: the rows of ``values`` added at ``index`` (those inside [0, extent)), in f32."""
    keep = (index >= 0) & (index < extent)
    out = torch.zeros(extent, values.shape[1], dtype=torch.float32)
    return out.index_add_(0, index[keep], values[keep].float())


def _first_tokens(index, extent):
    """first[v] by a Python loop: the smallest t with index[t] = v, int64's max where none."""
    first = [torch.iinfo(torch.int64).max] * extent
    for t, v in enumerate(index.tolist()):
        if 0 <= v < extent:
            first[v] = min(first[v], t)
    return torch.tensor(first, dtype=torch.int64)


def _embedding_backward(generated, idx, weight, dy, padding_idx=-1, *, monkeypatch=None, index=None, reference=False):
    """The embedding's backward as autograd runs it, its three kernels in turn (their references
    with ``reference``); ``index`` forces that config of the tuned two."""
    first, add, rows = (generated(f"embedding_backward_{step}") for step in ("first", "sum", "rows"))
    if index is not None:
        for module in (add, rows):
            force_config(monkeypatch, module, min(index, len(config_indices(module)) - 1))
    run = (lambda module, name: module.reference) if reference else getattr
    slots = run(first, "embedding_backward_first")(idx, weight)
    partial = run(add, "embedding_backward_sum")(idx, slots, dy, padding_idx)
    return slots, partial, run(rows, "embedding_backward_rows")(idx, slots, partial, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n, extent, channels", [(37, 11, 70), (5, 300, 17), (64, 2, 128)])
def test_embedding_backward_adds_every_token_into_its_row(generated, monkeypatch, dtype, n, extent, channels):
    """Each row's gradient is the f32 sum of its tokens' rows of dy, rounded once to the table's
    dtype (torch's index_add_ in f32, then cast); indices outside the table add nowhere; every row
    no token indexes is zero; each row's slot is its first token."""
    generator = torch.Generator().manual_seed(n * extent)
    idx = _indices(n, extent, generator)
    weight = torch.randn(extent, channels, generator=generator).to(dtype)
    dy = (torch.randn(n, channels, generator=generator) * 3).to(dtype)
    expected = _torch_index_add(idx, dy, extent).to(dtype)
    tolerance = {"rtol": 1e-6, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    for index in range(4):
        slots, _, got = _embedding_backward(generated, idx, weight, dy, monkeypatch=monkeypatch, index=index)
        assert torch.equal(slots, _first_tokens(idx, extent))
        assert got.dtype == dtype and got.shape == (extent, channels)
        torch.testing.assert_close(got, expected, **tolerance)
    torch.testing.assert_close(_embedding_backward(generated, idx, weight, dy, reference=True)[2], expected,
                               **tolerance)


def test_embedding_backward_of_no_tokens_is_zero(generated):
    weight, dy = torch.randn(7, 9), torch.empty(0, 9)
    got = _embedding_backward(generated, torch.empty(0, dtype=torch.int64), weight, dy)[2]
    assert torch.equal(got, torch.zeros(7, 9))


def test_embedding_trains_like_torch_through_the_scatter(generated):
    """The embedding's autograd formula is the scatter-add: weight.grad is torch's F.embedding's
    (cast back to the table's dtype by autograd)."""
    module = generated("embedding")
    generator = torch.Generator().manual_seed(3)
    idx = _indices(29, 13, generator).clamp(0, 12)  # F.embedding refuses indices outside the table
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(13, 40, generator=generator).to(dtype).requires_grad_()
        upstream = torch.randn(29, 40, generator=generator).to(dtype)
        (module.embedding(idx, weight) * upstream).sum().backward()
        ours, weight.grad = weight.grad, None
        (torch.nn.functional.embedding(idx, weight) * upstream).sum().backward()
        assert ours.dtype == dtype
        tolerance = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
        torch.testing.assert_close(ours, weight.grad, **tolerance)


@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_keeps_no_table_for_its_backward(generated, deterministic):
    """The backward reads no element of the table (only its shape and dtype size dweight), so the
    graph holds a one-element stand-in: a table cast for the step (``w.to(bf16)``, as a model's) is
    freed once the forward's caller drops it, and the gradient through the cast is still torch's."""
    import weakref

    module = generated("embedding")
    generator = torch.Generator().manual_seed(11)
    idx = torch.randint(0, 13, (29,), generator=generator)
    master = torch.randn(13, 40, generator=generator).requires_grad_()
    upstream = torch.randn(29, 40, generator=generator)
    table = master.to(torch.bfloat16)
    freed = weakref.ref(table)
    y = module.embedding(idx, table)
    del table
    assert freed() is None  # nothing in y's graph keeps the [13, 40] cast alive
    saved = [t for t in y.grad_fn.saved_tensors if t.dtype == torch.bfloat16]
    assert [t.shape for t in saved] == [(13, 40)] and saved[0].untyped_storage().nbytes() == 2
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)  # the deterministic backward takes the table too
    try:
        (y.float() * upstream).sum().backward()
    finally:
        torch.use_deterministic_algorithms(before)
    ours, master.grad = master.grad, None
    (torch.nn.functional.embedding(idx, master.to(torch.bfloat16)).float() * upstream).sum().backward()
    torch.testing.assert_close(ours, master.grad, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("padding_idx", [0, 5, 12])
def test_embedding_padding_idx_row_gets_no_gradient(generated, padding_idx):
    """F.embedding's padding_idx: the forward reads that row as any other, its gradient stays zero
    (the backward's store leaves its tokens out) while every other row gets torch's sum."""
    module = generated("embedding")
    generator = torch.Generator().manual_seed(padding_idx)
    idx = torch.randint(0, 13, (41,), generator=generator)
    idx[::4] = padding_idx  # a quarter of the tokens are padding, as a padded batch's
    weight = torch.randn(13, 40, generator=generator).requires_grad_()
    upstream = torch.randn(41, 40, generator=generator)
    y = module.embedding(idx, weight, padding_idx)
    (y * upstream).sum().backward()
    ours, weight.grad = weight.grad, None
    expected_y = torch.nn.functional.embedding(idx, weight, padding_idx=padding_idx)
    (expected_y * upstream).sum().backward()
    torch.testing.assert_close(y, expected_y, rtol=0, atol=0)
    assert torch.equal(ours[padding_idx], torch.zeros(40))
    torch.testing.assert_close(ours, weight.grad)
    reference = _embedding_backward(generated, idx, weight.detach(), upstream, padding_idx, reference=True)[2]
    torch.testing.assert_close(reference, weight.grad)


@pytest.mark.parametrize("config", range(5))
def test_bincount_counts_each_value(generated, monkeypatch, config):
    """At every config (64 to 8192 lanes a program): into few bins (up to 1023) each program counts
    its lanes in a histogram and adds each bin once; into more, each lane adds 1: the same counts
    either way, values outside the bins (both signs) counted nowhere."""
    module = generated("bincount")
    force_config(monkeypatch, module, config)
    assert [module._rt.histogram_bins(b) for b in (1, 7, 31, 32, 1023, 1024)] == [32, 32, 32, 64, 1024, 0]
    generator = torch.Generator().manual_seed(config)
    for n, bins in ((1000, 7), (33, 50), (1, 1), (2000, 1023), (700, 1024), (3001, 3000)):
        x = _indices(n, bins, generator)
        keep = (x >= 0) & (x < bins)
        expected = torch.bincount(x[keep], minlength=bins)
        got = module.bincount(x, bins)
        assert got.dtype == torch.int64
        assert torch.equal(got, expected)
        assert torch.equal(module.reference(x, bins), expected)


@pytest.mark.parametrize("config", range(6))
def test_scatter_add_matches_torch_scatter_add(generated, monkeypatch, config):
    """At every config (a row of 512 columns a program to 16 rows of 64, the interpreter's 4 of 8)."""
    module = generated("scatter_add")
    force_config(monkeypatch, module, config)
    generator = torch.Generator().manual_seed(config)
    n, channels, extent = 45, 70, 9
    index = torch.randint(0, extent, (n, channels), generator=generator)
    src = torch.randn(n, channels, generator=generator)
    expected = torch.zeros(extent, channels).scatter_add_(0, index, src)
    got = module.scatter_add(index, src, extent)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(module.reference(index, src, extent), expected, rtol=1e-6, atol=1e-5)


def test_a_plain_store_through_a_loaded_index_puts_values_where_it_says(compiled):
    """``y[perm[t], c] = x[t, c]`` with ``perm`` a permutation: the inverse permutation of rows (the
    un-permute of a MoE layer), ``torch.empty`` rows untouched where no index points."""
    source = """\
kernel unpermute
  in  perm: i64[N]
  in  x: f32[N, C]
  out y: f32[N, C] = 0
  block BT = 4, BC = 16
  grid  t over N by BT, c over C by BC
  y[perm[t], c] = x[t, c]
"""
    module = compiled(source, "unpermute")
    perm = torch.randperm(23, generator=torch.Generator().manual_seed(1))
    x = torch.randn(23, 30)
    expected = torch.empty_like(x)
    expected[perm] = x
    assert torch.equal(module.unpermute(perm, x), expected)
    assert torch.equal(module.reference(perm, x), expected)


def test_a_gathers_derived_backward_is_a_scatter_add():
    """``weight[idx[t], c]`` read by the forward: the derived backward adds dy's rows where the
    index points, into an f32 gradient that starts at 0, and takes weight for its shape."""
    from tilegen.grad import derive_backward as derive

    source = """\
kernel lookup
  in  idx: i64[N]
  in  weight: f32[V, C]
  out y: f32[N, C]
  block BT = 4
  grid  t over N by BT, c over C whole
  y[t, c] = 2 * weight[idx[t], c]
"""
    text = derive(check(parse(source, "lookup.tile")))
    assert "out dweight: f32[V, C] = 0" in text
    assert "dweight[idx[t], c] += " in text
    assert "in  weight: f32[V, C]" in text


def test_the_derived_scatter_add_computes_torchs_gradient(compiled):
    from tilegen.grad import derive_backward as derive

    source = """\
kernel lookup
  in  idx: i64[N]
  in  weight: f32[V, C]
  out y: f32[N, C]
  block BT = 4
  grid  t over N by BT, c over C whole
  y[t, c] = 2 * weight[idx[t], c]
"""
    backward = compiled(derive(check(parse(source, "lookup.tile"))), "lookup_backward")
    generator = torch.Generator().manual_seed(5)
    idx = _indices(19, 6, generator).clamp(0, 5)
    weight = torch.randn(6, 11, generator=generator, requires_grad=True)
    dy = torch.randn(19, 11, generator=generator)
    (2 * torch.nn.functional.embedding(idx, weight) * dy).sum().backward()
    torch.testing.assert_close(backward.lookup_backward(dy, idx, weight.detach()), weight.grad)


SCATTER = """\
kernel k
  in  idx: i64[N]
  in  dy: f32[N, C]
  in  V: i32
  out dw: f32[V, C] = 0
  block BT = 4, BC = 16
  grid  t over N by BT, c over C by BC
  dw[idx[t], c] += dy[t, c]
"""


@pytest.mark.parametrize(
    "change, message",
    [
        (("out dw: f32[V, C] = 0", "out dw: f32[V, C]"),
         "'dw' is updated with '+=', so it needs a starting value: declare it 'out dw: f32[V, C] = 0'"),
        (("in  dy: f32[N, C]\n  in  V: i32\n  out dw: f32[V, C] = 0",
          "in  dy: bf16[N, C]\n  in  V: i32\n  out dw: bf16[V, C] = 0"),
         "'dw' is bf16; an atomic add into bf16 rounds the sum at every add: declare 'dw' f32"),
        (("out dw: f32[V, C] = 0", "out dw: u8[V, C] = 0"), "'dw' is u8; '+=' on a store takes"),
        (("  dw[idx[t], c] += dy[t, c]\n", "  dw[idx[t], c] += dy[t, c]\n  dw[idx[t], c] = dy[t, c]\n"),
         "'dw' is stored with '=' and updated with '+='"),
        (("out dw: f32[V, C] = 0", "out dw: i32[V, C] = 0.5"), "'dw' is i32: it starts at an integer, not 0.5"),
        (("  block BT", "  access block_ptr\n  block BT"), "'+=' on a store updates through pointers"),
    ],
)
def test_a_bad_scatter_add_is_refused_at_its_place(change, message):
    old, new = change
    assert old in SCATTER
    with pytest.raises(SpecError) as caught:
        compile_spec(SCATTER.replace(old, new), "k.tile")
    rendered = caught.value.render()
    assert message in rendered
    assert rendered.startswith("k.tile:")


def test_a_good_scatter_add_compiles():
    assert "tl.atomic_add(" in compile_spec(SCATTER, "k.tile").source


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
def test_tuning_a_scatter_add_on_the_gpu_adds_once(generated, monkeypatch):
    """Triton's autotuner runs every config on the call's own output while it times them: the
    launcher's first call, which tunes, must still return one sum per token (the autotuner restores
    the output after each timed run), and so must the calls after it."""
    monkeypatch.setenv("TILEGEN_TUNE", "full")
    generator = torch.Generator().manual_seed(11)
    idx = _indices(3001, 517, generator)
    weight = torch.randn(517, 200, generator=generator).cuda()
    dy = torch.randn(3001, 200, generator=generator)
    expected = _torch_index_add(idx, dy, 517).cuda()
    idx, dy = idx.cuda(), dy.cuda()
    for _ in range(3):  # tuned, then the tuned config, then the fast path
        torch.testing.assert_close(_embedding_backward(generated, idx, weight, dy)[2], expected, rtol=1e-5, atol=1e-4)
    counts = generated("bincount")
    x = torch.randint(0, 300, (100_003,), device="cuda")
    assert torch.equal(counts.bincount(x, 300), torch.bincount(x, minlength=300))


EXTREMUM = """\
kernel k
  in  idx: i64[N]
  in  x: i32[N]
  in  V: i32
  out y: i32[V] = 7
  block BT = 4
  grid  t over N by BT
  y[idx[t]] max= x[t]
"""


@pytest.mark.parametrize("update", ["max", "min"])
@pytest.mark.parametrize("dtype", ["i32", "i64"])
@pytest.mark.parametrize("block", [1, 4, 64])
def test_an_atomic_max_or_min_keeps_the_extremum_of_each_element(compiled, update, dtype, block):
    """``y[idx[t]] max= x[t]``: each element ends at the largest (smallest) of its start and of the
    values whose index names it, as torch's scatter_reduce_ with include_self; indices outside the
    dimension update nothing; an element no index names keeps its start. The reference computes
    the same."""
    source = EXTREMUM.replace("max=", f"{update}=").replace("i32[N]", f"{dtype}[N]").replace(
        "i32[V]", f"{dtype}[V]").replace("BT = 4", f"BT = {block}")
    module = compiled(source)
    generator = torch.Generator().manual_seed(block)
    torch_dtype = {"i32": torch.int32, "i64": torch.int64}[dtype]
    for n, extent in ((100, 9), (3, 40), (1, 1)):
        idx = _indices(n, extent, generator)
        x = torch.randint(-20, 20, (n,), generator=generator).to(torch_dtype)
        keep = (idx >= 0) & (idx < extent)
        expected = torch.full((extent,), 7, dtype=torch_dtype).scatter_reduce_(0, idx[keep], x[keep], f"a{update}")
        assert torch.equal(module.k(idx, x, extent), expected)
        assert torch.equal(module.reference(idx, x, extent), expected)


@pytest.mark.parametrize(
    "change, message",
    [
        (("i32[V] = 7", "f32[V] = 7"), "'y' is f32; 'max=' on a store takes i32, i64"),
        (("i32[V] = 7", "i32[V]"), "'y' is updated with 'max=', so it needs a starting value"),
        (("  y[idx[t]] max= x[t]\n", "  y[idx[t]] max= x[t]\n  y[idx[t]] += x[t]\n"),
         "'y' is updated with '+=' and with 'max='; the two race"),
        (("  y[idx[t]] max= x[t]\n", "  y[idx[t]] max= x[t]\n  y[idx[t]] = x[t]\n"),
         "'y' is stored with '=' and updated with 'max='"),
    ],
)
def test_a_bad_atomic_max_is_refused_at_its_place(change, message):
    old, new = change
    assert old in EXTREMUM
    with pytest.raises(SpecError) as caught:
        compile_spec(EXTREMUM.replace(old, new), "k.tile")
    assert caught.value.render().count(message) == 1  # said once, though two stores meet
