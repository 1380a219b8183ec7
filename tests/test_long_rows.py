"""Rows longer than one tile (issue item 4): a ``whole`` axis runs as loops past ``_WHOLE_LIMIT``.

The specs are compiled afresh (``tilegen.lower.rows`` writes the looped kernel ``_<kernel>_loops``
beside the one-tile kernel); the interpreter runs both. The long rows of KernelBench's softmax
(N = 393216) run in a few rows; the looped path is exercised cheaply at short rows by lowering the
limit (the module constant ``_WHOLE_LIMIT``, which ``TILEGEN_WHOLE_LIMIT`` sets at import) and by
calling the looped launcher with small chunks (its keyword ``BLOCK_N``).
"""

import inspect
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT
from tilegen import model as m
from tilegen.carried import check_carried
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import Collector, SpecError
from tilegen.lower.passes import without_detach
from tilegen.parser import parse
from tilegen.row_loops import CHUNK, loop_rows
from tilegen.runner import load_module
from tilegen.tolerance import assert_close

SPECS = ["softmax", "log_softmax", "layer_norm", "rms_norm"]
LONG = 393216  # KernelBench's softmax row (4096 x 393216 f32)


def _spec(name: str) -> m.Spec:
    """The checked spec as the kernels are lowered from it: without ``detach`` (softmax's max)."""
    path = ROOT / "specs" / f"{name}.tile"
    return without_detach(check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}")))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The specs compiled now, each loaded once (under a name of its own: the committed module
    of the same spec may be loaded too)."""
    folder = tmp_path_factory.mktemp("long_rows")
    cache = {}

    def load(name: str):
        if name not in cache:
            path = ROOT / "specs" / f"{name}.tile"
            module = compile_spec(path.read_text(encoding="utf-8"), f"specs/{path.name}")
            target = folder / f"long_rows_{name}.py"
            target.write_text(module.source, encoding="utf-8")
            cache[name] = load_module(target)
        return cache[name]

    return load


def _rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _inputs(name: str, rows: int, n: int, seed: int = 0):
    """The launcher's arguments, and torch's answer computed in float32."""
    if name in ("softmax", "log_softmax"):
        x = _rand(rows, n, seed=seed, scale=4.0)
        torch_fn = torch.softmax if name == "softmax" else torch.log_softmax
        return (x,), (torch_fn(x, dim=-1),)
    x = _rand(rows, n, dtype=torch.float16, seed=seed, scale=3.0) + 0.5  # a mean away from 0
    w = _rand(n, dtype=torch.float16, seed=seed + 1)
    if name == "rms_norm":
        y = F.rms_norm(x.float(), (n,), w.float(), 1e-6)
        return (x, w, 1e-6), (y.half(),)
    b = _rand(n, dtype=torch.float16, seed=seed + 2)
    xf = x.float()
    mu = xf.mean(dim=1)
    rstd = torch.rsqrt(xf.var(dim=1, unbiased=False) + 1e-5)
    return (x, w, b, 1e-5), (F.layer_norm(xf, (n,), w.float(), b.float(), 1e-5).half(), mu, rstd)


def _check(module, name, args, outputs, torch_expected):
    """The outputs within tilegen's tolerance of the module's reference, and close to torch's."""
    spec = _spec(name)
    expected = module.reference(*args)
    assert_close(spec, args, outputs, expected, module.reference)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for out, ref in zip(outputs, torch_expected, strict=True):
        tol = {"atol": 1e-2, "rtol": 1e-2} if out.dtype == torch.float16 else {"atol": 1e-5, "rtol": 1e-4}
        torch.testing.assert_close(out, ref, **tol)


# ----------------------------------------------------------------------------- the rewrite


#: The merge updates of each spec's rewrite (the running count, mean and M2 of a mean merged with
#: the sum of squares about it: tilegen.lower.rows), which the carried-value rules do not know.
MERGES = {"layer_norm": ["row_count", "row_m2", "row_mean"]}


def _refused_merges(spec: m.Spec) -> list[str]:
    """The carried values whose updates the carried-value rules refuse in ``spec``, asserting that
    every refusal is of that kind (one per update)."""
    errors = Collector()
    check_carried(spec, errors)
    names = []
    for diagnostic in errors.diagnostics:
        name = diagnostic.message.split("'")[1]
        assert diagnostic.message.startswith(f"'{name}' is carried across the steps of the loop"), diagnostic.message
        names.append(name)
    return sorted(names)


@pytest.mark.parametrize("name", [*SPECS, "add_single"])
def test_rewrite_is_a_spec_the_checker_accepts(name):
    """The looped spec passes every rule of the checker (the carried-value forms included) but
    two: a local recomputed in several loops keeps its name there, where the checker wants each
    name defined once (the kernel lowering scopes a loop's names to it); and the merge updates
    of a mean merged with its centred sum of squares (layer norm's row_count, row_mean and
    row_m2), which the carried-value rules do not know. The checker runs those rules only on an
    otherwise valid body, so they run here on their own too."""
    looped = loop_rows(_spec(name))
    assert looped is not None
    try:
        check(looped.spec)
    except SpecError as error:
        others = [d.message for d in error.diagnostics if not d.message.startswith("duplicate name")]
        assert not others, others
    assert _refused_merges(looped.spec) == MERGES.get(name, [])
    assert not any(a.bounds == "whole" for a in looped.spec.grid)


@pytest.mark.parametrize(
    ("name", "loops"),
    [("softmax", 2), ("log_softmax", 2), ("layer_norm", 2), ("rms_norm", 2), ("add_single", 1)],
)
def test_loops_per_spec(name, loops):
    """The max and the sum of exp(x - max) share one loop (online softmax); layer norm's mean and
    the centred variance share one too (merged); each spec ends with one loop of stores."""
    looped = loop_rows(_spec(name))
    assert sum(isinstance(s, m.Loop) for s in looped.spec.body) == loops


def test_rewrite_declines_what_it_does_not_take():
    for name in ("attention", "attention_causal", "cross_entropy", "matmul_fast"):
        assert loop_rows(_spec(name)) is None
    # a local assigned twice, and a reduction over the whole axis inside a loop: not taken
    source = (ROOT / "specs" / "softmax.tile").read_text(encoding="utf-8")
    twice = source.replace("  e = exp(z)\n", "  e = exp(z)\n  e = e * 2\n")
    assert loop_rows(check(parse(twice, "twice.tile"))) is None


def test_online_softmax_form():
    """The online update is the one the checker's carried-value rule accepts, started at the
    lowest float32 rather than -inf; the restore after the loop gives a row of -inf back its
    -inf max and NaN sum."""
    body = loop_rows(_spec("softmax")).spec.body
    declares = [s for s in body if isinstance(s, m.Declare)]
    assert [(d.name.id, d.dtype.id) for d in declares] == [("row_max", "f32"), ("row_sum", "f32")]
    assert declares[0].init.operand.text == "3.4028234663852886e38"
    first = next(s for s in body if isinstance(s, m.Loop))
    assert [s.name.id for s in first.body] == ["xf", "row_max_new", "row_sum", "row_max"]


def test_merged_variance_form():
    """Layer norm's statistics loop: the tile's count of valid lanes, mean and M2 about its own
    mean, merged into the row's (Chan et al.); the running mean takes the spec's name (row_mean,
    whose assignment goes) and the variance reads M2."""
    body = loop_rows(_spec("layer_norm")).spec.body
    declares = [s for s in body if isinstance(s, m.Declare)]
    assert [(d.name.id, d.dtype.id, tuple(a.id for a in d.axes)) for d in declares] == [
        ("row_count", "f32", ()), ("row_mean", "f32", ("r",)), ("row_m2", "f32", ("r",))]
    first = next(s for s in body if isinstance(s, m.Loop))
    assert [s.name.id for s in first.body] == [
        "xf", "tile_count", "tile_mean", "tile_dev", "tile_m2", "delta", "row_count_new", "row_m2", "row_mean",
        "row_count"]
    after = body[body.index(first) + 1:]
    assert not any(isinstance(s, m.Assign) and s.name.id == "row_mean" for s in after)
    path = ROOT / "specs" / "layer_norm.tile"
    text = compile_spec(path.read_text(encoding="utf-8"), "specs/layer_norm.tile").source
    kernel = text[text.index("def _layer_norm_loops_kernel("):text.index("def _layer_norm_loops(")]
    # (the spec's dtype variable T: lowering casts what a sum and rsqrt take to float32, a no-op here)
    assert "tile_count = sum_c" in kernel
    assert "sum_c = tl.sum(tl.where(offs_c < N, 1.0, 0.0).to(tl.float32), axis=0)" in kernel
    assert "row_m2 = row_m2 + tile_m2 + delta * (delta * (row_count * tile_count / row_count_new))" in kernel
    assert "inv_std = tl.rsqrt((row_m2 / N + eps).to(tl.float32))" in kernel
    assert kernel.count("for c in range(") == 2 and kernel.count("for c_1 in range(") == 2  # stats, stores
    assert "for c_2 in" not in kernel


# ----------------------------------------------------------------------------- the module


def test_limits_and_pruning(built):
    module = built("softmax")
    assert module._WHOLE_LIMIT == 32768  # 64 elements a thread, 16 warps, one row per program
    assert built("add_single")._WHOLE_LIMIT == 8192  # untuned: Triton's 4 warps

    fits = module._rt.whole_fits("BLOCK_N", ("BM",))
    configs = module._CONFIGS

    def kept(block):
        return [(c.kwargs["BM"], c.num_warps) for c in fits(configs, {}, BLOCK_N=block)]

    assert kept(1024) == [(c.kwargs["BM"], c.num_warps) for c in configs]  # every config fits
    assert kept(4096) == [(1, 4), (1, 8), (1, 16), (2, 4), (2, 8), (4, 8)]  # BM = 4 at 4 warps: 128 a thread
    assert kept(32768) == [(1, 16)]
    assert kept(65536) == [(1, 16)]  # none fits: the one with the fewest elements a thread
    assert [c.kwargs for c in module._LOOPS_CONFIGS] == [{"BM": 1}] * 3
    # the autotuners prune, and the runtime's compile_configs compiles only what they keep
    text = Path(module.__file__).read_text(encoding="utf-8")
    assert text.count('prune_configs_by={"early_config_prune": _rt.whole_fits("BLOCK_N", ("BM",))}') == 2
    assert "configs = prune(configs, nargs, **kwargs)" in Path(module._rt.__file__).read_text(encoding="utf-8")


def test_limit_from_the_environment(tmp_path, monkeypatch):
    """TILEGEN_WHOLE_LIMIT, read at import, moves the limit (up to Triton's largest tile)."""
    path = ROOT / "specs" / "softmax.tile"
    target = tmp_path / "softmax_env.py"
    target.write_text(compile_spec(path.read_text(encoding="utf-8"), "specs/softmax.tile").source, encoding="utf-8")
    for value, limit in (("16", 16), ("10000000", 262144), ("", 32768)):
        monkeypatch.setenv("TILEGEN_WHOLE_LIMIT", value)
        module = load_module(target)
        assert module._WHOLE_LIMIT == limit
    x = _rand(2, 40, seed=4)
    monkeypatch.setenv("TILEGEN_WHOLE_LIMIT", "16")
    torch.testing.assert_close(load_module(target).softmax(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", SPECS)
def test_launcher_routes_long_rows(built, monkeypatch, name):
    """Past _WHOLE_LIMIT the launcher returns the looped launcher's outputs (no output is made
    for the one-tile kernel); up to it, the one-tile kernel runs."""
    module = built(name)
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 16)
    calls = []
    # the looped launcher's plan of the call (the runtime's full path), or the looped launcher itself
    route = f"_{name}_loops_plan" if hasattr(module, f"_{name}_loops_plan") else f"_{name}_loops"
    looped = getattr(module, route)

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return looped(*args, **kwargs)

    monkeypatch.setattr(module, route, spy)
    for n, routed in ((16, False), (17, True), (100, True)):
        args, expected = _inputs(name, 3, n, seed=n)
        outputs = getattr(module, name)(*args)
        assert bool(calls) == routed
        calls.clear()
        _check(module, name, args, outputs, expected)


def test_the_spec_launchers_fast_path_keeps_the_looped_launch(built, monkeypatch):
    """softmax's launcher is planned, so its fast path keeps a long row's looped launch: a second
    call of the same shape runs no plan. The looped launcher has no fast path of its own."""
    module = built("softmax")
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 16)
    monkeypatch.setattr(module, "_FAST", {})
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(0))
    first = module.softmax(x)
    assert [key[0] for key in module._FAST] == ["softmax"]
    planned = []
    plan = module._softmax_loops_plan
    monkeypatch.setattr(module, "_softmax_loops_plan", lambda *a, **k: planned.append(1) or plan(*a, **k))
    torch.testing.assert_close(module.softmax(x), first, atol=0, rtol=0)
    assert planned == []
    assert "_FAST" not in inspect.getsource(module._softmax_loops)
    torch.testing.assert_close(module._softmax_loops(x, BLOCK_N=32), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)
    assert [key[0] for key in module._FAST] == ["softmax"]  # a direct call takes the full path and keeps nothing


@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 257])
@pytest.mark.parametrize("name", SPECS)
def test_looped_kernel_at_chunk_sizes(built, name, n, block):
    """The looped launcher at chunks smaller and larger than the row, with and without a tail."""
    module = built(name)
    args, expected = _inputs(name, 3, n, seed=n + block)
    outputs = getattr(module, f"_{name}_loops")(*args, BLOCK_N=block)
    _check(module, name, args, outputs, expected)


def test_looped_kernel_of_strided_views(built):
    module = built("softmax")
    base = _rand(6, 400, seed=3)
    for x in (base[::2, :181], base[:, ::2], base.t()[:30:3]):
        torch.testing.assert_close(module._softmax_loops(x, BLOCK_N=64), torch.softmax(x, dim=-1),
                                   atol=1e-6, rtol=1e-5)


def _special_rows(n: int) -> torch.Tensor:
    """Rows where the math makes infinities and NaN, at chunk 16: -inf in the whole first chunk,
    a row of -inf alone, one +inf, two +inf, a NaN, -inf with one finite value in the tail, large
    magnitudes, and an ordinary row."""
    x = _rand(8, n, seed=7, scale=3.0)
    inf = float("inf")
    x[0, :40] = -inf
    x[1] = -inf
    x[2, 33] = inf
    x[3, [5, 60]] = inf
    x[4, 17] = float("nan")
    x[5] = -inf
    x[5, n - 1] = 2.0
    x[6] = x[6] * 1e4
    return x


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_infinities_and_nan(built, name):
    """The looped kernel gives what torch and the one-tile kernel give, NaN where they do."""
    module = built(name)
    x = _special_rows(70)
    torch_fn = torch.softmax if name == "softmax" else torch.log_softmax
    one_tile = getattr(module, name)(x)  # 70 <= _WHOLE_LIMIT: the one-tile kernel
    for block in (16, 64, 128):
        looped = getattr(module, f"_{name}_loops")(x, BLOCK_N=block)
        torch.testing.assert_close(looped, torch_fn(x, dim=-1), equal_nan=True, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(looped, one_tile, equal_nan=True, atol=1e-6, rtol=1e-6)
        assert torch.equal(looped.isnan(), one_tile.isnan())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_of_half_dtypes_with_infinities_and_nan(built, dtype):
    """bf16 and f16 rows of the special values (f16 holds the large row as infinities): one tile
    and looped, what torch's softmax of the dtype gives (computed in float32, rounded once), NaN
    where it has them."""
    module = built("softmax")
    x = _special_rows(70).to(dtype)
    want = torch.softmax(x, dim=-1)
    assert want.dtype == dtype and want.isnan().any()
    one_tile = module.softmax(x)
    torch.testing.assert_close(one_tile, want, equal_nan=True, atol=1e-5, rtol=8e-3)
    for block in (16, 64, 128):
        looped = module._softmax_loops(x, BLOCK_N=block)
        torch.testing.assert_close(looped, want, equal_nan=True, atol=1e-5, rtol=8e-3)
        assert torch.equal(looped.isnan(), one_tile.isnan())


def test_layer_norm_of_constant_and_infinite_rows(built):
    """A constant row (variance 0: rstd = 1/sqrt(eps)) and a row with an infinity (NaN, as torch)."""
    module = built("layer_norm")
    n = 50
    x = torch.full((3, n), 2.5, dtype=torch.float16)
    x[1] = _rand(n, dtype=torch.float16, seed=1)
    x[2, 7] = float("inf")
    w, b = torch.ones(n, dtype=torch.float16), torch.zeros(n, dtype=torch.float16)
    for got, want in zip(module._layer_norm_loops(x, w, b, 1e-5, BLOCK_N=16), module.layer_norm(x, w, b, 1e-5),
                         strict=True):
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1e-2)


# Layer norm's merged statistics (Chan et al.'s merge of each tile's count, mean and M2): the
# result must not depend on BLOCK_N, nor lose the variance where the mean is large.


@pytest.fixture(scope="module")
def layer_norm_f32(built):
    """specs/layer_norm.tile, called with f32 tensors (its dtype T = f32: x in f32 holds 1e4 + small
    noise, which f16 cannot)."""
    return built("layer_norm")


def _stats64(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's mean and 1/std, from x's values in float64 (the exact answer, rounded once)."""
    x64 = x.double()
    return x64.mean(dim=1).float(), torch.rsqrt(x64.var(dim=1, unbiased=False) + eps).float()


@pytest.mark.parametrize("n", [1, 2, 33, 257, 1000])
def test_layer_norm_merge_does_not_depend_on_the_chunk(built, n):
    """Chunks of 1 lane to more than the row, with and without a tail: within the file's
    tolerances of torch and of the one-tile kernel, and of each other (statistics to 1e-5). Two
    rows: a second program's row offsets; more rows run the same steps again."""
    module = built("layer_norm")
    args, expected = _inputs("layer_norm", 2, n, seed=n)
    one_tile = module.layer_norm(*args)
    stats = []
    # one lane a step: the short rows; four: up to 257 (a row of 1000 in 16, 64 and 1024: tails, one tile wider)
    for block in (1, 4, 16, 64, 1024) if n <= 64 else (4, 16, 64, 1024) if n <= 257 else (16, 64, 1024):
        outputs = module._layer_norm_loops(*args, BLOCK_N=block)
        _check(module, "layer_norm", args, outputs, expected)
        for got, want in zip(outputs, one_tile, strict=True):
            tol = {"atol": 1e-2, "rtol": 1e-2} if got.dtype == torch.float16 else {"atol": 1e-5, "rtol": 1e-5}
            torch.testing.assert_close(got, want, **tol)
        stats.append(outputs[1:])
    for mu, rstd in stats[1:]:
        torch.testing.assert_close(mu, stats[0][0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(rstd, stats[0][1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n", [1000, 4099])
def test_layer_norm_merge_keeps_the_variance_of_a_large_mean(layer_norm_f32, n):
    """A row of 1e4 + N(0, 1) in f32 and one of -3e4 + N(0, 0.5): E[x^2] is about 1e8, whose
    float32 ulp is 8, so E[x^2] - E[x]^2 loses the variance of 1 (checked below); the merged
    statistics keep it to the file's float32 tolerance at every chunk, as the one-tile kernel does."""
    module = layer_norm_f32
    x = _rand(2, n, seed=n, scale=1.0) + 1e4
    x[1] = _rand(n, seed=n + 1, scale=0.5) - 3e4
    w = _rand(n, seed=n + 2) + 1.0
    b = _rand(n, seed=n + 3)
    eps = 1e-5
    mu64, rstd64 = _stats64(x, eps)
    naive = (x * x).mean(dim=1) - x.mean(dim=1) ** 2  # in float32
    assert ((naive - x.double().var(dim=1, unbiased=False)).abs() > 0.1).any()  # the cancellation is real
    y64 = F.layer_norm(x.double(), (n,), w.double(), b.double(), eps).float()
    one_tile = module.layer_norm(x, w, b, eps)
    ulp = (mu64.abs() * 2.0**-23).max().item()  # float32's spacing at the means (about 1e-3 and 2e-3)
    for block in (16, 128, 1024, 4096):
        y, mu, rstd = module._layer_norm_loops(x, w, b, eps, BLOCK_N=block)
        torch.testing.assert_close(rstd, rstd64, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(rstd, one_tile[2], atol=1e-5, rtol=1e-4)
        # the running mean rounds to float32 once a step: a few ulps of it, which y's x - mu carries
        # (times rstd * w: about 2 * 3); one tile rounds its mean once, torch's float32 mean too
        assert (mu - mu64).abs().max().item() <= 4 * ulp
        assert (one_tile[1] - mu64).abs().max().item() <= ulp
        torch.testing.assert_close(y, y64, atol=4 * ulp * 8, rtol=1e-4)
        torch.testing.assert_close(y, one_tile[0], atol=5 * ulp * 8, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply")  # 1e20's padding lanes, discarded
def test_layer_norm_merge_of_constant_and_nearly_constant_rows(layer_norm_f32):
    """Constant rows (delta is 0 at every step: the mean stays, and the variance is 0 where the
    tiles' sums are exact, tiny otherwise; a row of 1e20, whose delta * delta would overflow at
    the first step, stays finite) and rows of tiny spread, at chunks with tails."""
    module = layer_norm_f32
    n, eps = 100, 1e-5
    x = torch.empty(7, n)
    x[0] = 2.5
    x[1] = 0.1  # tile sums round: a variance of 0 or tiny, as one tile's
    x[2] = 1e4
    x[3] = -3.0
    x[4] = 1.0 + 1e-3 * _rand(n, seed=1)  # a variance of 1e-6, below eps
    x[5] = 1e4 + 1e-2 * _rand(n, seed=2)
    x[6] = 1e20  # delta * delta would overflow at a first step
    w, b = _rand(n, seed=3) + 1.0, _rand(n, seed=4)
    mu64, rstd64 = _stats64(x, eps)
    one_tile = module.layer_norm(x, w, b, eps)
    for block in (16, 32, 64, 128):
        y, mu, rstd = module._layer_norm_loops(x, w, b, eps, BLOCK_N=block)
        exact = [0, 2, 3]  # constant rows whose tiles' sums are exact
        assert torch.equal(mu[exact], x[exact, 0])
        assert torch.equal(rstd[exact], torch.full((len(exact),), eps).rsqrt())
        assert torch.equal(y[exact], b.expand(len(exact), n))
        # 1e20: sums of its tiles may round (as one tile's does), but nothing overflows to NaN
        assert y[6].isfinite().all() and rstd[6].isfinite() and math.isclose(mu[6].item(), 1e20, rel_tol=1e-6)
        torch.testing.assert_close(mu[:6], mu64[:6], atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(rstd[:5], rstd64[:5], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(rstd[:5], one_tile[2][:5], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(y[:5], one_tile[0][:5], atol=1e-4, rtol=1e-4)
        # a spread of 1e-2 at 1e4 is 10 ulps: each rounding of a mean (once in one tile, once a
        # step here) costs the variance about a percent; E[x^2] - E[x]^2 would lose all of it
        torch.testing.assert_close(rstd[5], rstd64[5], atol=0, rtol=2e-2)
        torch.testing.assert_close(one_tile[2][5], rstd64[5], atol=0, rtol=2e-2)


def test_layer_norm_merge_of_infinities_and_nan(built):
    """Rows with +inf in the first, a middle and the tail tile (the tail's only lane), -inf, +inf
    and -inf, NaN, all +inf: at every chunk the looped kernel gives what the one-tile kernel and
    the reference give (a mean of inf, -inf or NaN; NaN variance and y), NaN where they do."""
    module = built("layer_norm")
    n, inf = 65, float("inf")
    x = _rand(9, n, dtype=torch.float16, seed=5, scale=3.0)
    x[0, 3] = inf
    x[1, 40] = inf
    x[2, 64] = inf  # the tail's only lane at chunks of 4, 16, 32 and 64
    x[3, 20] = -inf
    x[4, [2, 50]] = torch.tensor([inf, -inf], dtype=torch.float16)
    x[5, 33] = float("nan")
    x[6] = inf
    x[7, [0, 64]] = inf
    w, b = _rand(n, dtype=torch.float16, seed=6), _rand(n, dtype=torch.float16, seed=7)
    args = (x, w, b, 1e-5)
    one_tile = module.layer_norm(*args)
    reference = module.reference(*args)
    assert one_tile[1][[0, 1, 2, 6, 7]].eq(inf).all() and one_tile[1][3] == -inf
    for block in (4, 16, 32, 64, 128):  # one lane a step: test_layer_norm_merge_does_not_depend_on_the_chunk
        looped = module._layer_norm_loops(*args, BLOCK_N=block)
        for got, want, ref in zip(looped, one_tile, reference, strict=True):
            torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1e-2)
            torch.testing.assert_close(got, ref, equal_nan=True, atol=1e-2, rtol=1e-2)
            assert torch.equal(got.isnan(), want.isnan())


def test_fake_takes_long_rows(built):
    """The custom op's fake implementation (torch.compile's shapes) no longer refuses long rows."""
    module = built("layer_norm")
    x = torch.empty(2, LONG, dtype=torch.float16)
    w = torch.empty(LONG, dtype=torch.float16)
    y, mu, rstd = module._layer_norm_launch.fake(x, w, w, 1e-5)
    assert y.shape == (2, LONG) and mu.shape == rstd.shape == (2,)


def test_traced_body_routes_long_rows(built, monkeypatch):
    """Under torch.compile (on the GPU) long rows launch the looped kernel through wrap_triton, over
    chunks of its default size; rows up to the limit, the one-tile kernel."""
    module = built("softmax")
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 16)
    traced = []
    for launch in (module._softmax_launch, module._softmax_loops_launch):
        monkeypatch.setattr(launch, "traced", lambda grid, args, meta, name=launch.name: traced.append((name, meta)))
    for n, kernel in ((16, "softmax"), (17, "_softmax_loops")):
        y = module._softmax_launch.traced_call(torch.randn(3, n))
        assert y.shape == (3, n) and traced[-1][0] == kernel
    assert traced[-1][1]["BLOCK_N"] == CHUNK


def test_add_single_past_one_tile(built):
    """A one-program add of a vector longer than the limit loops in one program."""
    module = built("add_single")
    x, y = _rand(20000, seed=1), _rand(20000, seed=2)
    assert torch.equal(module.add_single(x, y), x + y)


# ----------------------------------------------------------------------------- long rows


@pytest.mark.parametrize("name", SPECS)
def test_kernelbench_row_length(built, name):
    """N = 393216 (KernelBench's softmax), two rows: the launcher loops (the one-tile kernel
    would need a tile of 524288 elements, past what it refuses to compile); within tolerance of
    the reference and of torch."""
    module = built(name)
    assert LONG > module._WHOLE_LIMIT
    args, expected = _inputs(name, 2, LONG, seed=11)
    outputs = getattr(module, name)(*args)
    _check(module, name, args, outputs, expected)
    if name == "softmax":
        assert math.isclose(outputs.sum().item(), 2.0, rel_tol=1e-4)


def test_looped_spec_keeps_the_reference(built):
    """The reference stays the spec as written: one tile, whole-tensor torch."""
    text = Path(built("softmax").__file__).read_text(encoding="utf-8")
    reference = text[text.index("def reference(x):"):text.index("op = _rt.register_op(")]
    assert "torch.amax(xf, dim=1)" in reference and "_loops" not in reference


# ----------------------------------------------------------------------------- other shapes of spec

LOGSUMEXP = """\
kernel lse
  in  x: f32[B, M, N]
  out y: f32[B, M]
  block BM = 2
  grid  b over B, r over M by BM, c over N whole
  m = max(x[b, r, c], dim=c)
  y[b, r] = m + log(sum(exp(x[b, r, c] - m), dim=c))
"""

STATS = """\
kernel stats
  in  x: f32[M, N]
  out lo: f32[M]
  out hi: f32[M]
  out avg: f32[M]
  out scaled: f32[M, N]
  out spread: f32[M]
  grid  r over M, c over N whole
  lo[r] = min(x[r, c], dim=c)
  hi[r] = max(x[r, c], dim=c)
  avg[r] = mean(x[r, c], dim=c)
  scaled[r, c] = (x[r, c] - mean(x[r, c], dim=c)) / (max(x[r, c], dim=c) - min(x[r, c], dim=c))
  spread[r] = sum(abs(x[r, c] - max(x[r, c], dim=c)), dim=c)
"""


def _compiled(tmp_path, source: str, stem: str):
    target = tmp_path / f"{stem}.py"
    target.write_text(compile_spec(source, f"{stem}.tile").source, encoding="utf-8")
    return load_module(target)


def test_log_sum_exp_through_a_local_with_an_index_axis(tmp_path):
    """The max held in a local (``m``) still runs online with its sum; a batch axis (no block)
    and two rows per program; a row of -inf alone gives what one tile gives (NaN)."""
    spec = check(parse(LOGSUMEXP, "lse.tile"))
    assert sum(isinstance(s, m.Loop) for s in loop_rows(spec).spec.body) == 1  # no stores along c
    module = _compiled(tmp_path, LOGSUMEXP, "lse")
    x = _rand(2, 3, 70, seed=9, scale=5.0)
    x[0, 1] = float("-inf")
    x[1, 2, :50] = float("-inf")
    one_tile = module.lse(x)
    for block in (16, 32, 128):
        looped = module._lse_loops(x, BLOCK_N=block)
        torch.testing.assert_close(looped, one_tile, equal_nan=True)
    finite = torch.ones_like(one_tile, dtype=torch.bool)
    finite[0, 1] = False
    torch.testing.assert_close(one_tile[finite], torch.logsumexp(x, dim=-1)[finite])
    assert one_tile[0, 1].isnan()


def test_min_max_mean_in_one_loop(tmp_path):
    """Reductions that need nothing else share the first loop (min, max, mean); one that needs
    the max follows in a second; per-row stores go after the loop that made their values."""
    spec = check(parse(STATS, "stats.tile"))
    body = loop_rows(spec).spec.body
    loops = [s for s in body if isinstance(s, m.Loop)]
    assert len(loops) == 3  # min, max, mean; the sum over |x - max|; the stores along c
    assert {s.name.id for s in loops[0].body} == {"row_min", "row_max", "row_sum"}
    module = _compiled(tmp_path, STATS, "stats")
    x = _rand(3, 45, seed=2)
    for block in (16, 64):
        outputs = module._stats_loops(x, BLOCK_N=block)
        expected = module.reference(x)
        for got, want in zip(outputs, expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs[0], x.amin(dim=1))
    torch.testing.assert_close(outputs[2], x.mean(dim=1))


VARIANCE = """\
kernel spread
  in  x: f32[B, M, N]
  in  z: f32[B, M, N]
  out mu: f32[B, M]
  out var: f32[B, M]
  block BM = 2
  grid  b over B, r over M by BM, c over N whole
  xf = x[b, r, c] * 2.0
  m = mean(xf, dim=c)
  mu[b, r] = m
  STATEMENT
"""

#: The variance statement of VARIANCE, the loops of its rewrite (1: the mean's, merged), and the
#: running mean's name in the looped spec (the spec's own ``m``, or a fresh one).
FORMS = [
    ("var[b, r] = mean((xf - m) * (xf - m), dim=c)", 1, "m"),
    ("var[b, r] = mean((xf - m) ** 2, dim=c)", 1, "m"),
    ("var[b, r] = sum(pow(xf - m, 2), dim=c) / N", 1, "m"),
    ("d = xf - m\n  sq = d * d\n  var[b, r] = mean(sq, dim=c)", 1, "m"),  # through locals
    ("a = m\n  var[b, r] = mean((xf - a) ** 2, dim=c)", 1, "m"),  # an alias of the mean
    ("var[b, r] = mean((x[b, r, c] * 2.0 - mean(x[b, r, c] * 2.0, dim=c)) ** 2, dim=c)", 1, "row_mean"),
    ("var[b, r] = mean((xf - m) * (xf - m), dim=c) + mean((xf - m) ** 2, dim=c)", 2, "m"),  # one per mean
    # not a centred square of the mean's own operand: a loop after the mean's
    ("var[b, r] = mean((z[b, r, c] - m) ** 2, dim=c)", 2, None),
    ("var[b, r] = mean((xf - m) * (z[b, r, c] - m), dim=c)", 2, None),
    ("var[b, r] = mean((xf - m) ** 3, dim=c)", 2, None),
    ("var[b, r] = mean((m - xf) ** 2, dim=c)", 2, None),
    ("var[b, r] = mean((xf - max(xf, dim=c)) ** 2, dim=c)", 2, None),
]


@pytest.mark.parametrize(("statement", "loops", "running"), FORMS)
def test_merged_forms(tmp_path, statement, loops, running):
    """The forms the merge takes (``* itself``, ``** 2``, ``pow(., 2)``, through locals and
    aliases, a mean written inline, a sum) and those it leaves to a loop of their own; a batch
    axis and two rows per program (one running count for them). Each at chunks with tails
    gives what the one-tile kernel gives; the carried-value rules refuse the merge's three
    updates and nothing else."""
    source = VARIANCE.replace("STATEMENT", statement)
    looped = loop_rows(check(parse(source, "spread.tile"))).spec
    assert sum(isinstance(s, m.Loop) for s in looped.body) == loops
    declared = [s.name.id for s in looped.body if isinstance(s, m.Declare)]
    merged = ["row_count", "row_m2", running] if running is not None else []
    assert _refused_merges(looped) == sorted(merged)
    assert all(name in declared for name in merged)
    module = _compiled(tmp_path, source, "spread")
    x = _rand(2, 3, 21, seed=3) + 5.0
    z = _rand(2, 3, 21, seed=4)
    x[1, 2, 7] = float("inf")
    one_tile = module.spread(x, z)
    for block in (1, 16, 64):
        for got, want in zip(module._spread_loops(x, z, BLOCK_N=block), one_tile, strict=True):
            # atol: the product of (xf - m) and (z - m) cancels to about 0 (terms of 20)
            torch.testing.assert_close(got, want, equal_nan=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_norms_in_f32_at_kernelbench_row_length(tmp_path, name):
    """The norm specs with float32 tensors (their dtype T bound to f32), N = 393216."""
    source = (ROOT / "specs" / f"{name}.tile").read_text(encoding="utf-8")
    source = source.replace(f"  backward {name}_backward\n", "")  # its backward: not built beside this variant
    module = _compiled(tmp_path, source, f"{name}_f32")
    args, _ = _inputs(name, 2, LONG, seed=12)
    args = tuple(a.float() if isinstance(a, torch.Tensor) else a for a in args)
    outputs = getattr(module, name)(*args)
    spec = check(parse(source, f"{name}_f32.tile"))
    assert_close(spec, args, outputs, module.reference(*args), module.reference)
    x, w = args[0], args[1]
    if name == "rms_norm":
        torch.testing.assert_close(outputs, F.rms_norm(x, (LONG,), w, 1e-6), atol=1e-5, rtol=1e-4)
    else:
        torch.testing.assert_close(outputs[0], F.layer_norm(x, (LONG,), w, args[2], 1e-5), atol=1e-4, rtol=1e-4)


def test_a_reduction_of_float_literals_loops_in_float32(tmp_path, monkeypatch):
    """``max(where(x > 0, 2.5, 1.0), dim=c)`` reduces a value made of literals (a ``where`` of them
    is an f32 tile, tilegen.dtypes): the looped kernel's accumulator is float32, as the one-tile
    kernel computes it (it raised KeyError 'float' at build time; found by tests/test_expressions.py)."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    text = (
        "kernel lit\n  in  x: f32[M, N]\n  out y: f32[M]\n  block BM = 1\n"
        "  grid  r over M by BM, c over N whole\n  y[r] = max(where(x[r, c] > 0, 2.5, 1.0), dim=c)\n"
    )
    path = tmp_path / "lit.py"
    path.write_text(compile_spec(text, "lit.tile").source)
    module = load_module(path)
    x = torch.randn(3, 37, generator=torch.Generator().manual_seed(0))
    x[1] = -x[1].abs()
    expected = torch.where(x > 0, 2.5, 1.0).amax(1)
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 1)  # the looped kernel
    torch.testing.assert_close(module.lit(x), expected)
    torch.testing.assert_close(module.reference(x), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_spec_with_a_dtype_variable_loops_over_long_rows(generated, monkeypatch, dtype):
    """fused_add_rms_norm (``dtype T in f16, bf16, f32``) past its whole-row limit: the looped
    kernel of the same spec, for each binding, against its reference and torch."""
    module = generated("fused_add_rms_norm")
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 16)
    x, residual, w = _rand(5, 100, dtype=dtype, seed=1), _rand(5, 100, dtype=dtype, seed=2), _rand(100, dtype=dtype)
    y, s = module.fused_add_rms_norm(x, residual, w, 1e-6)
    want_s = (x.float() + residual.float()).to(dtype)
    torch.testing.assert_close(s, want_s, atol=0, rtol=0)
    want_y = F.rms_norm(want_s.float(), (100,), None, 1e-6).to(dtype).float() * w.float()
    torch.testing.assert_close(y.float(), want_y.to(dtype).float(), atol=2e-3, rtol=2e-3)
    args = (x, residual, w, 1e-6)
    assert_close(_spec("fused_add_rms_norm"), args, (y, s), module.reference(*args), module.reference)


def test_long_rows_with_an_optional_input_left_out(generated, monkeypatch):
    """rms_norm without its weight past _WHOLE_LIMIT: the looped kernel too reads the weight as left
    out (every element 1, not offset + 1)."""
    module = generated("rms_norm")
    monkeypatch.setattr(module, "_WHOLE_LIMIT", 16)
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(3))
    for offset in (0.0, 0.5):
        looped = module.rms_norm(x, None, 1e-6, offset)
        torch.testing.assert_close(looped, module.reference(x, None, 1e-6, offset))
        torch.testing.assert_close(looped, module.rms_norm(x, torch.ones(40), 1e-6, 0.0))
