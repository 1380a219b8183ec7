"""Reductions across programs and 0-dim outputs (``loss = mean(x[r, c], dim=(r, c))`` over grid
axes), checked in Triton's interpreter against torch expressions written here, independently of
the specs' own references.

Each program stores the partial result of its tile in a float32 workspace and a finish kernel
merges the partials in program order (tilegen.lower.finish), so a result must not depend on the
block sizes (up to rounding) and must be bitwise the same run to run. Shapes have tails at every
block size; inputs have both signs.
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse
from tilegen.runner import load_module
from tilegen.runtime import num_sms, row_programs


def _randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _softmaxed(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g).softmax(dim=-1)


# name -> (inputs of an [M, N] problem, the loss in torch, as KernelBench level 1 writes it)
LOSSES = {
    "mse_loss": (lambda m, n, s: (_randn(m, n, seed=s), _randn(m, n, seed=s + 1)),
                 lambda p, t: torch.mean((p - t) ** 2)),
    "huber_loss": (lambda m, n, s: (_randn(m, n, seed=s) * 2, _randn(m, n, seed=s + 1)),
                   lambda p, t: F.smooth_l1_loss(p, t)),
    "hinge_loss": (lambda m, n, s: (_randn(m, n, seed=s), torch.randint(0, 2, (n,)).float() * 2 - 1),
                   lambda p, t: torch.mean(torch.clamp(1 - p * t, min=0))),
    "kl_div": (lambda m, n, s: (_softmaxed(m, n, seed=s), _softmaxed(m, n, seed=s + 1)),
               lambda p, t: F.kl_div(torch.log(p), t, reduction="batchmean")),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 7), (37, 1030)])
def test_losses_match_torch_at_every_config(generated, monkeypatch, name, m, n):
    module = generated(name)
    make, loss = LOSSES[name]
    inputs = make(m, n, m + n)
    expected = loss(*(x.double() for x in inputs)).float()
    results = []
    for index in range(len(module._CONFIGS)):  # tiles from [4, 2048] to [32, 256]: tails everywhere
        force_config(monkeypatch, module, index)
        result = getattr(module, name)(*inputs)
        assert result.shape == () and result.dtype == torch.float32
        torch.testing.assert_close(result, expected, rtol=2e-6, atol=1e-7)
        results.append(result)
    torch.testing.assert_close(module.reference(*inputs), expected, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_loss_of_half_precision_inputs_is_computed_in_float32(generated, dtype):
    module = generated("mse_loss")
    p, t = _randn(19, 300, seed=3, dtype=dtype), _randn(19, 300, seed=4, dtype=dtype)
    expected = torch.mean((p.double() - t.double()) ** 2).float()
    torch.testing.assert_close(module.mse_loss(p, t), expected, rtol=2e-6, atol=0)
    torch.testing.assert_close(module.reference(p, t), expected, rtol=2e-6, atol=0)


def test_a_reduction_across_programs_is_bitwise_the_same_run_to_run(generated):
    module = generated("huber_loss")
    p, t = _randn(61, 700, seed=5), _randn(61, 700, seed=6)
    first = module.huber_loss(p, t)
    assert all(torch.equal(module.huber_loss(p, t), first) for _ in range(3))


@pytest.mark.parametrize("block", [1, 2, 4, 8])
def test_cosine_similarity_loss_at_every_block(generated, block):
    module = generated("cosine_similarity_loss")
    p, t = _randn(13, 33, seed=7), _randn(13, 33, seed=8)
    p[2] = 0.0  # a zero row: its similarity is 0 (the norms' product clamped at eps), its loss 1
    expected = torch.mean(1 - F.cosine_similarity(p.double(), t.double(), dim=1)).float()
    torch.testing.assert_close(module.cosine_similarity_loss(p, t, BM=block), expected, rtol=2e-6, atol=1e-7)


COLUMNS = """\
kernel columns
  in  x: f32[M, N]
  out total: f32[N]
  out top: f32[N]
  out bottom: f32[N]
  out product: f32[N]
  block BM = 4, BN = 8
  grid  r over M by BM, c over N by BN
  total[c] = sum(x[r, c], dim=r)
  top[c] = max(x[r, c], dim=r)
  bottom[c] = min(x[r, c], dim=r)
  product[c] = prod(x[r, c], dim=r)
"""


@pytest.mark.parametrize(("bm", "bn"), [(1, 1), (2, 8), (4, 4), (16, 2)])
def test_column_reductions_across_programs_at_several_blocks(compiled, bm, bn):
    module = compiled(COLUMNS)
    g = torch.Generator().manual_seed(bm * bn)
    x = torch.empty(11, 9).uniform_(0.8, 1.2, generator=g) * torch.where(torch.rand(11, 9, generator=g) < 0.5, -1, 1)
    x[3, 2] = float("inf")
    x[5, 4] = float("-inf")
    total, top, bottom, product = module.columns(x, BM=bm, BN=bn)
    torch.testing.assert_close(total, x.sum(dim=0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(top, x.amax(dim=0), rtol=0, atol=0)
    torch.testing.assert_close(bottom, x.amin(dim=0), rtol=0, atol=0)
    torch.testing.assert_close(product, x.prod(dim=0), rtol=1e-6, atol=1e-6)
    for ours, theirs in zip(module.reference(x), (total, top, bottom, product), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_a_reduction_over_an_index_axis_and_a_whole_axis(compiled):
    source = """kernel batch_mean
  in  x: f32[B, N]
  out y: f32[N]
  out s: f32[]
  grid  b over B, c over N whole
  y[c] = mean(x[b, c], dim=b)
  s = sum(x[b, c], dim=(b, c))
"""
    module = compiled(source)
    x = _randn(6, 10, seed=9)
    y, s = module.batch_mean(x)
    torch.testing.assert_close(y, x.mean(dim=0))
    torch.testing.assert_close(s, x.sum())
    assert s.shape == ()


def test_an_epilogue_of_several_reductions_scalars_and_sizes(compiled):
    source = """kernel ratio
  in  x: f32[M, N]
  in  y: f32[M, N]
  in  scale: f32
  out q: f32[]
  block BM = 4, BN = 4
  grid  r over M by BM, c over N by BN
  q = scale * sqrt(sum(x[r, c] * x[r, c], dim=(r, c))) / max(abs(y[r, c]), dim=(c, r)) - M
"""
    module = compiled(source)
    x, y = _randn(9, 7, seed=10), _randn(9, 7, seed=11)
    expected = 0.5 * torch.sqrt((x * x).sum()) / y.abs().max() - 9
    torch.testing.assert_close(module.ratio(x, y, 0.5), expected)
    torch.testing.assert_close(module.reference(x, y, 0.5), expected)


def test_a_mean_of_no_elements_is_nan_as_in_torch(generated):
    module = generated("mse_loss")
    empty = torch.empty(0, 5)
    assert torch.isnan(module.mse_loss(empty, empty))
    assert torch.isnan(torch.mean((empty - empty) ** 2))


def test_a_zero_dim_output_of_one_program(compiled):
    source = """kernel total
  in  x: f32[N]
  out s: f32[]
  grid  c over N whole
  s = sum(x[c], dim=c)
"""
    module = compiled(source)
    x = _randn(37, seed=12)
    s = module.total(x)
    assert s.shape == ()
    torch.testing.assert_close(s, x.sum())
    assert module.reference(x).shape == ()


def test_several_axes_name_one_reduction_each():
    nested = parse("kernel k\n  in x: f32[M, N]\n  out s: f32[]\n  grid r over M by BM\n"
                   "  s = sum(sum(x[r, c], dim=c), dim=r)\n", "k.tile")
    tupled = parse("kernel k\n  in x: f32[M, N]\n  out s: f32[]\n  grid r over M by BM\n"
                   "  s = sum(x[r, c], dim=(r, c))\n", "k.tile")

    def shape(expr):  # the calls and the axes they reduce, spans aside
        if hasattr(expr, "func"):
            return (expr.func.id, expr.word("dim"), tuple(shape(a) for a in expr.args))
        return type(expr).__name__

    assert shape(nested.body[0].value) == shape(tupled.body[0].value)


def _errors(text):
    from tilegen.compiler import compile_spec

    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [(d.span.line, d.message) for d in caught.value.diagnostics]


HEAD = "kernel k\n  in  x: f32[M, N]\n  out s: f32[]\n  out v: f32[M]\n  block BM = 4, BN = 8\n"


@pytest.mark.parametrize(("body", "line", "words"), [
    # a value reduced across programs comes from assignments, which its stage recomputes
    ("  grid r over M by BM, c over N by BN\n  acc: f32[r, c] = 0\n  acc += x[r, c]\n  t = sum(acc, dim=(r, c))\n"
     "  s = t\n  v[r] = x[r, 0]\n", 9, "it reads what '+=' at line 8 sets"),
    # and is held in float32
    ("  grid r over M by BM, c over N by BN\n  t = f16(sum(x[r, c], dim=(r, c)))\n  s = t\n  v[r] = x[r, 0]\n",
     7, "wrap it in f32(...)"),
    # a reduction across programs is at the top level, not in a loop
    ("  grid r over M by BM, c over N by BN\n  for k over M by BM\n    t = sum(x[r, c], dim=(r, c))\n"
     "  s = 0\n  v[r] = x[r, 0]\n", 8, "or assign the reduction itself"),
    # nor one inside another reduction
    ("  grid r over M by BM, c over N whole\n  s = sum(max(x[r, c], dim=r), dim=c)\n  v[r] = x[r, 0]\n",
     7, "assign the reduction itself"),
    # outside its reductions, the stored value has no tile
    ("  grid r over M by BM, c over N whole\n  s = sum(x[r, c], dim=(r, c))\n  v[r] = sum(x[r, c], dim=r) + x[r, 0]\n",
     8, "not a tile"),
    # every chain of a store reduces the same grid axes
    ("  grid r over M by BM, c over N by BN\n  s = sum(x[r, c], dim=(r, c)) + sum(max(x[r, c], dim=c), dim=r)\n"
     "  v[r] = x[r, 0]\n", 7, "assign the reduction itself"),
    # a grid the finish kernel cannot read its partials from
    ("  grid flat r over M by BM, c over N by BN\n  s = sum(x[r, c], dim=(r, c))\n  v[r] = x[r, 0]\n",
     7, "this spec has a flat grid"),
    # argmax merges no partials: it reduces a whole axis only
    ("  grid r over M by BM, c over N whole\n  s = 0\n  v[r] = f32(argmax(x[r, c], dim=r))\n", 8, "whole"),
])
def test_what_a_reduction_across_programs_may_not_say(body, line, words):
    found = _errors(HEAD + body)
    assert any(at == line and words in message for at, message in found), found


def test_a_store_indexed_by_the_axis_it_reduces_is_refused():
    text = ("kernel k\n  in  x: f32[M, N]\n  out y: f32[M, N]\n  block BM = 4, BN = 8\n"
            "  grid r over M by BM, c over N by BN\n  y[r, c] = sum(x[r, c], dim=r)\n")
    assert any("indexed by 'r', which its value reduces over" in message for _, message in _errors(text))


@pytest.mark.parametrize("first", ["loss = sum(x[r, c], dim=(r, c)) / M", "loss = 0"])
def test_an_output_reduced_across_programs_is_written_once(first):
    """A finish kernel writes the output from every program's partial: a second write of it (the
    same reduction again, found by the fuzzer, or a plain store before it) is refused once, at the
    second write, naming the first."""
    text = ("kernel k\n  in  x: f32[M, N]\n  out loss: f32[]\n  block BM = 8, BN = 16\n"
            "  grid r over M by BM, c over N by BN\n"
            f"  {first}\n  loss = sum(x[r, c], dim=(r, c)) / M\n")
    [(line, message)] = _errors(text)
    assert line == 7 and "also written at line 6: write it once" in message, message


def test_a_tuple_of_axes_is_for_reductions_that_merge():
    text = ("kernel k\n  in  x: f32[M, N]\n  out y: i64[]\n  grid r over M whole, c over N whole\n"
            "  y = argmax(x[r, c], dim=(r, c))\n")
    [(line, message)] = _errors(text)
    assert line == 5 and "not dim= of 'argmax'" in message


def test_a_zero_dim_input_is_read_by_its_name_not_indexed():
    text = "kernel k\n  in  x: f32[N]\n  in  s: f32[]\n  out y: f32[N]\n  grid c over N whole\n  y[c] = x[c] * s[0]\n"
    [(line, message)] = _errors(text)
    assert line == 6 and "'s' is a 0-dim input; read it by its name, without an index" in message


def test_a_zero_dim_input_scales_a_row(compiled):
    """``in s: f32[]``, read as ``s``: torch's shape () in, in the kernel, the reference and the
    checks; another rank is refused by name."""
    module = compiled("kernel k\n  in  x: f32[N]\n  in  s: f32[]\n  out y: f32[N]\n  block BN = 16\n"
                      "  grid c over N by BN\n  y[c] = x[c] * s - s\n")
    x, s = torch.randn(37), torch.tensor(-1.25)
    torch.testing.assert_close(module.k(x, s), x * s - s)
    torch.testing.assert_close(module.reference(x, s), x * s - s)
    with pytest.raises(ValueError, match=r"k: s must have rank 0, got shape \(1,\)"):
        module.k(x, s.reshape(1))


PERSISTENT = """\
kernel walked
  in  dy: f32[M, N]
  in  x: f32[M, N]
  in  w: f32[N]
  out dx: f32[M, N]
  out dw: f32[N]
  out top: f32[N]
  out total: f32[]
  block BM = 2
  grid  persistent r over M by BM, c over N whole
  rstd = rsqrt(mean(x[r, c] * x[r, c], dim=c) + 1e-5)
  g = dy[r, c] * w[c]
  dx[r, c] = rstd * (g - x[r, c] * (rstd * rstd) * mean(g * x[r, c], dim=c))
  dw[c] = sum(dy[r, c] * x[r, c] * rstd, dim=r)
  top[c] = max(x[r, c], dim=r)
  total = sum(sum(dy[r, c], dim=c), dim=r) / M
"""


@pytest.mark.parametrize(("m", "bm", "n"), [(1, 1, 19), (7, 1, 19), (37, 2, 19), (101, 1, 19), (64, 4, 19),
                                         (9, 16, 19), (37, 2, 2100)])
def test_a_persistent_grid_walks_the_row_tiles_carrying_its_partials(compiled, m, bm, n):
    """``grid persistent r over M by BM, c over N whole``: at most NUM_SMS programs (4 per SM at
    rows of 19, 16 in the interpreter's 4 SMs; one per SM at rows of 2100) walk the row tiles,
    carrying each reduction's partial over them (a sum, a max, a mean over every element), and
    store one partial a program: the rows a program walks (101 tiles over 16 programs; 19 tiles of
    2100 over 4, a tail tile) and those it does not (9 rows in one tile of 16) give the
    reference's dx, dw, top and total."""
    module = compiled(PERSISTENT)
    g = torch.Generator().manual_seed(m * bm)
    dy, x = torch.randn(m, n, generator=g), torch.randn(m, n, generator=g)
    w = torch.randn(n, generator=g)
    got = module.walked(dy, x, w, BM=bm)
    want = module.reference(dy, x, w)
    for name, ours, theirs in zip(("dx", "dw", "top", "total"), got, want, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=lambda text, n=name: f"{n}: {text}")
    rstd = torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-5)
    torch.testing.assert_close(got[1], (dy * x * rstd).sum(dim=0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2], x.amax(dim=0), rtol=0, atol=0)


def test_the_generated_persistent_grid_stores_one_partial_a_program():
    """The kernel loops over its tiles NUM_SMS apart with the partials started before the loop and
    stored after it, at its own row (start_pid); the launcher's plan sizes the workspace for at
    most NUM_SMS programs."""
    source = compile_spec(PERSISTENT, "walked.tile", derive=False).source
    assert "for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):" in source
    before, loop = source.split("for tile_id in tl.range(", 1)
    assert "dw_partials_carried = tl.full([BLOCK_N], 0.0, tl.float32)" in before
    assert 'top_partials_carried = tl.full([BLOCK_N], float("-inf"), tl.float32)' in before
    assert "tl.store(dw_partials_ptr + start_pid * N + offs_c" in loop.split("\n\n\n")[0]
    assert "_rt.Finish(dw, 1, N, lambda meta: min(NUM_SMS, ((M + BM - 1) // BM)), " in source
    assert "NUM_SMS = _rt.row_programs(device, BLOCK_N)" in source


@pytest.mark.parametrize(("row_tile", "per_sm"), [(1, 4), (32, 4), (512, 4), (1024, 2), (2048, 1), (65536, 1)])
def test_a_row_grid_runs_up_to_four_programs_per_sm_where_rows_are_narrow(row_tile, per_sm):
    """row_programs: 2048 // the row's tile programs per SM, at least 1 and at most 4 (the
    interpreter counts 4 SMs)."""
    cpu = torch.device("cpu")
    assert row_programs(cpu, row_tile) == per_sm * num_sms(cpu) == per_sm * 4


PIPELINED = PERSISTENT.replace("kernel walked", "kernel piped").replace("  block BM = 2\n", """\
  block BM
  tune key N
    default config BM = 1, num_warps = 4
    config BM = 2, num_warps = 4, num_stages = 2
    config BM = 4, num_warps = 8, num_stages = 3
""")


def test_a_tuned_persistent_grid_pipelines_its_tile_loop_at_each_configs_num_stages(compiled, monkeypatch):
    """Where a persistent row grid's configs give num_stages, the tile loop takes it
    (``tl.range(..., num_stages=LOOP_STAGES)``: Triton pipelines a loop without dots only where
    the loop says how deep), None where a config gives none; each config computes the
    reference's outputs, with a tail tile."""
    source = compile_spec(PIPELINED, "piped.tile", derive=False).source
    assert "for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, num_stages=LOOP_STAGES, flatten=True):" in source
    assert "LOOP_STAGES: tl.constexpr" in source
    configs = [line.strip() for line in source.splitlines() if line.strip().startswith("triton.Config(")]
    assert configs == [
        'triton.Config({"BM": 1, "LOOP_STAGES": None}, num_warps=4),',
        'triton.Config({"BM": 2, "LOOP_STAGES": 2}, num_warps=4, num_stages=2),',
        'triton.Config({"BM": 4, "LOOP_STAGES": 3}, num_warps=8, num_stages=3),',
    ]
    module = compiled(PIPELINED)
    g = torch.Generator().manual_seed(3)
    dy, x, w = torch.randn(37, 19, generator=g), torch.randn(37, 19, generator=g), torch.randn(19, generator=g)
    want = module.reference(dy, x, w)
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        got = module.piped(dy, x, w)
        for name, ours, theirs in zip(("dx", "dw", "top", "total"), got, want, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=lambda t, n=name: f"{n}: {t}")


@pytest.mark.parametrize(("grid", "words"), [
    ("persistent r over M by BM, c over N by BN, k over K whole", "or of one tiled axis beside whole ones"),
    ("persistent b over B, c over N whole", "or of one tiled axis beside whole ones"),
])
def test_a_persistent_grid_walks_one_tiled_axis_or_two(grid, words):
    text = (f"kernel k\n  in  x: f32[B, M, N, K]\n  out y: f32[N]\n  block BM = 4, BN = 8\n  grid {grid}\n"
            "  y[c] = 0.0\n")
    found = _errors(text)
    assert any(line == 5 and words in message for line, message in found), found


def test_a_value_reduced_across_programs_twice_gets_a_tensor_each(tmp_path):
    """``norm`` assigned twice, each a reduction across programs: two stage tensors (norm_reduced,
    norm_reduced_), not one name given twice (a kernel with a duplicate argument)."""
    line = "  norm = sqrt(sum(v * v, dim=(b, c, h, w)))\n"
    spec = Path(__file__).resolve().parents[1] / "specs" / "frobenius_norm.tile"
    text = spec.read_text(encoding="utf-8").replace(line, line + line.replace("v * v", "2 * v * v"))
    module = compile_spec(text, "specs/frobenius_norm.tile")
    assert "norm_reduced_" in module.source
    path = tmp_path / "twice.py"
    path.write_text(module.source, encoding="utf-8")
    x = torch.randn(1, 2, 3, 4)
    torch.testing.assert_close(load_module(path).frobenius_norm(x), x / torch.sqrt(2 * (x * x).sum()))
