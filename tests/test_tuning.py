"""How a tuned launcher chooses its config on first contact with new sizes: the effort levels of
TILEGEN_TUNE (none, quick, full), a config forced by ``config=`` or TILEGEN_CONFIG, and the
interpreter's one notice per process. The GPU's choices are tested with the interpreter switched
off in a Tuner (no timing runs: a Tuner that returns None tunes, which the generated launcher does).
"""

import json
import os
import warnings

import pytest
import torch

#: softmax's configs: BM (rows per program) 1, 1, 1, 2, 2, 4, 4; default 0.
SOFTMAX_BM = [1, 1, 1, 2, 2, 4, 4]


@pytest.fixture
def gpu_tuner(generated, tmp_path, monkeypatch):
    """A new process's Tuner of matmul_fast (a disk cache in tmp_path) that chooses as on a GPU."""
    module = generated("matmul_fast")
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEGEN_TUNE", raising=False)
    monkeypatch.delenv("TILEGEN_CONFIG", raising=False)

    def make(cached=None):
        if cached is not None:
            (tmp_path / "matmul_fast-0123.json").write_text(json.dumps(cached))
        tuner = module._rt.Tuner("matmul_fast", "0123", module._CONFIGS, default=23)
        tuner.interpret = False
        return tuner

    return module, make


def _key(*sizes):
    return (torch.device("cpu"), *sizes)


def test_quick_takes_the_cached_config_for_these_sizes(gpu_tuner):
    module, make = gpu_tuner
    tuner = make({"cpu|64,32,16": module._CONFIGS[3].all_kwargs(), "cpu|64,32,32": module._CONFIGS[5].all_kwargs()})
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 16)) == 3
    assert tuner.tuned == {_key(64, 32, 16): 3}


def test_quick_takes_the_nearest_tuned_sizes_of_this_device(gpu_tuner):
    module, make = gpu_tuner
    cached = {
        "cpu|64,64,64": module._CONFIGS[3].all_kwargs(),
        "cpu|4096,4096,4096": module._CONFIGS[5].all_kwargs(),
        "NVIDIA H100|2048,2048,2048": module._CONFIGS[7].all_kwargs(),  # another device: not used
        "cpu|2048,2048,torch.float16": module._CONFIGS[9].all_kwargs(),  # another dtype
        "cpu|256,256,torch.bfloat16": module._CONFIGS[11].all_kwargs(),
    }
    tuner = make(cached)
    assert tuner.tuned_index("matmul_fast", _key(2048, 2048, 2048)) == 5  # 1+1+1 octaves from 4096, 15 from 64
    assert tuner.tuned_index("matmul_fast", _key(128, 64, 64)) == 3
    assert tuner.tuned_index("matmul_fast", _key(1024, 1024, "torch.float16")) == 9
    # f16's config stands in for bf16 (the same bytes a tile) at the distance of one octave: it wins
    # at the same sizes, bf16's own where that is nearer by more than an octave
    assert tuner.tuned_index("matmul_fast", _key(2048, 2048, "torch.bfloat16")) == 9
    assert tuner.tuned_index("matmul_fast", _key(512, 512, "torch.bfloat16")) == 11
    assert tuner.tuned_index("matmul_fast", _key(2048, 2048, "torch.float32")) == 23  # nothing like it: default


def test_quick_takes_a_config_tuned_for_the_other_layout_an_octave_farther(gpu_tuner):
    """A matmul whose operand comes column-major (an ``nn.Linear`` weight's transpose) where only
    the row-major layout was tuned takes that layout's config for its sizes, not the default: a
    layout that differs weighs as one octave of size, a flag against another word still refuses."""
    module, make = gpu_tuner
    tuner = make({
        "cpu|8192,2816,1024,False,False,torch.bfloat16": module._CONFIGS[5].all_kwargs(),
        "cpu|2048,2816,1024,False,True,torch.bfloat16": module._CONFIGS[7].all_kwargs(),  # 2 octaves off
        "cpu|64,64,64,False,True,torch.bfloat16": module._CONFIGS[3].all_kwargs(),
        "cpu|8192,2816,1024,pointers,False,torch.bfloat16": module._CONFIGS[9].all_kwargs(),
    })
    assert tuner.tuned_index("matmul_fast", _key(8192, 2816, 1024, False, True, "torch.bfloat16")) == 5
    assert tuner.tuned_index("matmul_fast", _key(2048, 2816, 1024, False, True, "torch.bfloat16")) == 7  # its own
    assert tuner.tuned_index("matmul_fast", _key(8192, 2816, 1024, True, True, "torch.bfloat16")) == 5  # 2 flags: 2
    assert tuner.tuned_index("matmul_fast", _key(64, 64, 64, True, False, "torch.bfloat16")) == 3


def test_the_shipped_matmul_table_serves_a_linear_weights_layout(generated, gpu_tuner):
    """matmul_fast's shipped table holds row-major weights (``x @ w``); a linear layer's weight
    (``x @ weight.T``: b column-major) at the same sizes runs the config tuned for them."""
    module, make = gpu_tuner
    tuner = make()
    tuner.path = str(tuner.path) + ".none"
    tuner.shipped = {key.replace("sm_90|", "cpu|"): kwargs for key, kwargs in module._tuner.shipped.items()}
    row_major = _key(8192, 2816, 1024, False, False, "torch.bfloat16")
    assert f"cpu|{','.join(map(str, row_major[1:]))}" in tuner.shipped
    wanted = tuner.tuned_index("matmul_fast", row_major)
    assert wanted != 23
    assert tuner.tuned_index("matmul_fast", _key(8192, 2816, 1024, False, True, "torch.bfloat16")) == wanted


def test_quick_without_a_cache_runs_the_default_and_times_nothing(gpu_tuner):
    _, make = gpu_tuner
    tuner = make()
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 16)) == 23
    assert tuner.tuned == {_key(64, 32, 16): 23}


def test_full_tunes_sizes_not_cached_and_none_never_does(gpu_tuner, monkeypatch):
    module, make = gpu_tuner
    cached = {"cpu|64,32,16": module._CONFIGS[3].all_kwargs()}
    monkeypatch.setenv("TILEGEN_TUNE", "full")
    tuner = make(cached)
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 32)) is None  # not cached: tune now
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 16)) == 3
    monkeypatch.setenv("TILEGEN_TUNE", "none")
    tuner = make(cached)
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 16)) == 23  # the cache is not read
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 32)) == 23


def test_an_interpreter_config_runs_in_the_interpreter_and_the_default_on_an_untuned_gpu(generated, monkeypatch):
    """attention_causal names a 16 x 16 interpreter config and a 64 x 64 default: the interpreter runs
    the first, a GPU at none (or quick with nothing tuned) the second, and a launch in the
    interpreter reaches the kernel with the interpreter's blocks."""
    module = generated("attention_causal")
    monkeypatch.delenv("TILEGEN_CONFIG", raising=False)
    blocks = lambda index: {k: module._CONFIGS[index].all_kwargs()[k] for k in ("BM", "BN", "num_stages")}  # noqa: E731
    interpreter = module._rt.Tuner("attention_causal", "0123", module._CONFIGS, default=module._tuner.default,
                                   interpreted=module._tuner.interpreted)
    interpreter.interpret = True
    assert blocks(interpreter.tuned_index("attention_causal", _key(40, 8))) == {"BM": 16, "BN": 16, "num_stages": 1}
    for effort in ("none", "quick"):
        monkeypatch.setenv("TILEGEN_TUNE", effort)
        gpu = module._rt.Tuner("attention_causal", "0123", module._CONFIGS, default=module._tuner.default,
                               interpreted=module._tuner.interpreted, shipped={})
        gpu.interpret = False
        monkeypatch.setattr(gpu, "before", dict)  # no disk cache
        assert blocks(gpu.tuned_index("attention_causal", _key(40, 8))) == {"BM": 64, "BN": 64, "num_stages": 3}
    monkeypatch.setattr(module._tuner, "tuned", {})
    monkeypatch.setattr(module, "_FAST", {})
    q = torch.randn(1, 1, 40, 8)
    torch.testing.assert_close(module.attention_causal(q, q, q, 0.5), module.reference(q, q, q, 0.5))  # (o, lse)
    assert [blocks(i)["BM"] for i in module._tuner.tuned.values()] == [16]


def test_a_default_config_too_big_for_the_gpu_falls_back_on_the_interpreter_config(generated, monkeypatch):
    """Launch.fallback, which a launch calls where compiling its config ran out of resources: an
    untuned default gives way to the interpreter config, with a warning, and is remembered for its
    key; a forced config, another config, or a spec whose default is its interpreter config keeps
    the error."""
    module = generated("attention_causal")
    launch = module._attention_causal_launch
    tuner = module._tuner
    monkeypatch.setattr(tuner, "tuned", {})
    monkeypatch.delenv("TILEGEN_CONFIG", raising=False)
    key = (torch.device("cpu"), 100, 256)
    assert not launch.fallback(key, tuner.interpreted) and not launch.fallback(key, 7)
    monkeypatch.setenv("TILEGEN_CONFIG", "1")
    assert not launch.fallback(key, tuner.default)
    monkeypatch.delenv("TILEGEN_CONFIG")
    with pytest.warns(UserWarning, match=r"attention_causal: the spec's default config needs more resources than "
                                         r"this GPU has at sizes \(100, 256\); running its interpreter config"):
        assert launch.fallback(key, tuner.default)
    assert module._tuner.tuned == {key: tuner.interpreted}
    softmax = generated("softmax")  # its default is its interpreter config: nothing to fall back on
    assert not softmax._softmax_launch.fallback(key, softmax._tuner.default)


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
def test_on_a_gpu_a_default_config_too_big_runs_the_interpreter_config(generated, monkeypatch):
    """f32 causal attention at head dimension 256: the default's 64 x 64 tiles in 3 stages need more
    shared memory than an H100 has; the launch warns, runs the 16 x 16 interpreter config and is right."""
    monkeypatch.setenv("TILEGEN_TUNE", "none")
    monkeypatch.delenv("TILEGEN_CONFIG", raising=False)
    module = generated("attention_causal")
    monkeypatch.setattr(module._tuner, "tuned", {})
    q, k, v = (torch.randn(1, 2, 100, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
               for i in range(3))
    with pytest.warns(UserWarning, match="needs more resources than this GPU has"):
        out = module.attention_causal(q, k, v, 0.0625)
    torch.testing.assert_close(out, module.reference(q, k, v, 0.0625), rtol=1e-4, atol=1e-4)  # (o, lse)
    assert list(module._tuner.tuned.values()) == [module._tuner.interpreted]


def test_an_unknown_effort_is_refused(gpu_tuner, monkeypatch):
    _, make = gpu_tuner
    monkeypatch.setenv("TILEGEN_TUNE", "fast")
    with pytest.raises(ValueError, match="TILEGEN_TUNE='fast': use none, quick \\(the default\\) or full"):
        make().tuned_index("matmul_fast", _key(64, 32, 16))


def test_the_launcher_tunes_only_where_the_tuner_says_none(generated, monkeypatch):
    """The generated launcher on a GPU key: quick's choice runs with no autotune call; full's None tunes."""
    module = generated("softmax")
    tuned = []
    monkeypatch.setattr(module._rt, "autotune", lambda *args, **kwargs: tuned.append(args))
    monkeypatch.setattr(module._tuner, "tuned", {})
    monkeypatch.setattr(module, "_FAST", {})
    monkeypatch.setattr(module._tuner, "tuned_index", lambda launcher, key: 5)
    x = torch.randn(9, 16)
    assert torch.allclose(module.softmax(x), torch.softmax(x, -1), atol=1e-6) and tuned == []


def _recording(module, monkeypatch, name):
    """Record the grid of every launch of ``module``'s kernel ``name`` (its JIT function's)."""
    real = getattr(module, name)
    grids = []

    class Kernel:
        fn = property(lambda self: self)

        def __getitem__(self, grid):
            grids.append(tuple(grid))
            return real.fn[grid]

    monkeypatch.setattr(module, name, Kernel())
    return grids


@pytest.fixture
def softmax(generated, monkeypatch):
    """softmax's module with fresh tuned choices and fast path, recording its launches' grids."""
    module = generated("softmax")
    monkeypatch.setattr(module._tuner, "tuned", {})
    monkeypatch.setattr(module._tuner, "fast", {})
    monkeypatch.setattr(module, "_FAST", module._tuner.fast)
    monkeypatch.delenv("TILEGEN_CONFIG", raising=False)
    return module, _recording(module, monkeypatch, "softmax_kernel")


@pytest.mark.parametrize("config,bm", [(5, 4), (3, 2), ({"BM": 2, "num_warps": 8}, 2), ({"BM": 4}, 4)])
def test_config_keyword_runs_that_config(softmax, config, bm):
    module, grids = softmax
    x = torch.randn(9, 16)
    expected = torch.softmax(x, -1)
    assert torch.allclose(module.softmax(x), expected, atol=1e-6)  # the default config: BM = 1
    assert grids == [(9, 1, 1)]
    assert torch.allclose(module.softmax(x, config=config), expected, atol=1e-6)
    assert grids[-1] == ((9 + bm - 1) // bm, 1, 1)
    module.softmax(x)  # the fast path still runs the default: the forced launch was not kept
    assert grids[-1] == (9, 1, 1) and len(module._FAST) == 1


def test_config_keyword_reaches_the_kernel_under_autograd(softmax):
    module, grids = softmax
    x = torch.randn(9, 16, requires_grad=True)
    y = module.softmax(x, config=5)
    assert grids == [(3, 1, 1)] and y.grad_fn is not None


@pytest.mark.parametrize(
    "config,error,message",
    [
        (7, ValueError, r"softmax: no config 7: its spec has 7 configs, 0 to 6"),
        ({"BM": 3}, ValueError, r"softmax: no config has \{'BM': 3\}; its configs are 0: \{'BM': 1, 'num_warps': 4"),
        ({"BX": 1}, ValueError, r"softmax: no config has \{'BX': 1\}"),
        ("2", TypeError, r"softmax: config must be an index or a dict of a config's keywords, got str"),
    ],
)
def test_a_config_the_spec_lacks_is_refused(softmax, config, error, message):
    module, grids = softmax
    with pytest.raises(error, match=message):
        module.softmax(torch.randn(4, 8), config=config)
    assert grids == []


@pytest.mark.parametrize("text,bm", [("6", 4), ("BM=2", 2), ("BM=2,num_warps=8", 2)])
def test_tilegen_config_forces_every_tuned_launcher(softmax, monkeypatch, text, bm):
    module, grids = softmax
    monkeypatch.setenv("TILEGEN_CONFIG", text)
    x = torch.randn(9, 16)
    assert torch.allclose(module.softmax(x), torch.softmax(x, -1), atol=1e-6)
    assert grids == [((9 + bm - 1) // bm, 1, 1)]


def test_tilegen_config_that_does_not_parse_is_refused(softmax, monkeypatch):
    module, _ = softmax
    monkeypatch.setenv("TILEGEN_CONFIG", "BM:2")
    with pytest.raises(ValueError, match=r"TILEGEN_CONFIG='BM:2': write a config index \(2\) or its keywords"):
        module.softmax(torch.randn(4, 8))


def test_force_config_fixture_is_the_tuners_forced(softmax, monkeypatch):
    """tests.conftest.force_config sets the module's Tuner.forced: the path TILEGEN_CONFIG takes."""
    from tests.conftest import force_config

    module, grids = softmax
    force_config(monkeypatch, module, 5)
    assert module._tuner.forced == 5
    module.softmax(torch.randn(9, 16))
    assert grids == [(3, 1, 1)]


def test_the_interpreter_says_once_per_process_how_to_force_a_config(generated, monkeypatch):
    """One notice for all launchers (it was one per launcher: ten lines in a small training step)."""
    monkeypatch.setattr(torch.ops.tilegen, "_interpreter_told", False, raising=False)
    modules = [generated(name) for name in ("softmax", "matmul_fast", "log_softmax")]
    for module in modules:
        monkeypatch.setattr(module._tuner, "tuned", {})
        monkeypatch.setattr(module, "_FAST", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules[0].softmax(torch.randn(4, 8))
        modules[1].matmul_fast(torch.randn(16, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16))
        modules[2].log_softmax(torch.randn(4, 8))
    told = [str(w.message) for w in caught if "cannot time autotune configs" in str(w.message)]
    assert len(told) == 1, told
    assert "config=N" in told[0] and "TILEGEN_CONFIG" in told[0]


def test_tune_module_tunes_at_full_effort_and_fills_the_disk_cache(tmp_path, monkeypatch):
    """What `tilegen tune` does on a GPU, with the timing faked: the launcher runs at full effort
    (the autotuner is called), the choice lands on disk, and a later quick process takes it for
    nearby sizes."""
    from tests.conftest import ROOT
    from tilegen import runner
    from tilegen.build import build, check_file, find_specs

    monkeypatch.setenv("TILEGEN_TUNE", "none")  # tune_module sets full for its calls, then puts this back
    build([ROOT / "specs" / "softmax.tile"], tmp_path / "gen")
    module = runner.load_module(tmp_path / "gen" / "softmax.py")
    spec = check_file(find_specs([str(ROOT / "specs" / "softmax.tile")])[0])
    monkeypatch.setattr(module._tuner, "interpret", False)
    monkeypatch.setattr(module._tuner, "path", str(tmp_path / "cache" / "softmax.json"))
    tuned = []
    monkeypatch.setattr(module._rt, "autotune", lambda *args, **kwargs: tuned.append(args[0]))
    monkeypatch.setattr(module._tuner, "settle_ties", lambda key, kernel, call: module._CONFIGS[5])
    results = runner.tune_module(module, spec, {"M": 8, "N": 256}, "cpu", {"T": "f32"})
    assert tuned == [module.softmax_kernel]
    assert [(r.kernel, r.key, r.index, r.cached) for r in results] == [
        ("softmax[T=f32]", "cpu|256,torch.float32", 5, False)]
    assert json.loads((tmp_path / "cache" / "softmax.json").read_text()) == {
        "cpu|256,torch.float32": module._CONFIGS[5].all_kwargs()}
    import os

    assert os.environ["TILEGEN_TUNE"] == "none"
    later = module._rt.Tuner("softmax", "x", module._CONFIGS)
    later.interpret, later.path = False, module._tuner.path
    monkeypatch.setenv("TILEGEN_TUNE", "quick")
    assert later.tuned_index("softmax", (torch.device("cpu"), 512, torch.float32)) == 5  # the nearest tuned N


def test_tilegen_tune_needs_a_gpu_and_says_so(tmp_path):
    from typer.testing import CliRunner

    from tests.conftest import ROOT
    from tilegen.cli import app

    result = CliRunner().invoke(app, ["tune", str(ROOT / "specs" / "softmax.tile"), "--size", "N=4096"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: tilegen tune times configs on a GPU, and none is visible (the Triton "
                                      "interpreter cannot time them)")


def test_a_kernel_failing_in_tilegen_run_is_one_error_line(monkeypatch):
    from typer.testing import CliRunner

    from tests.conftest import ROOT
    from tilegen import runner
    from tilegen.cli import app

    def fail(*args, **kwargs):
        raise RuntimeError("out of resources: shared memory\nRequired: 262144")

    monkeypatch.setattr(runner, "run_module", fail)
    spec = str(ROOT / "specs" / "softmax.tile")
    result = CliRunner().invoke(app, ["run", spec, "--programs", "1"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: softmax failed on cpu: RuntimeError: out of resources: shared memory "
                                     "(-v shows the traceback)")
    shown = CliRunner().invoke(app, ["run", spec, "--programs", "1", "-v"])
    assert isinstance(shown.exception, RuntimeError) and shown.exit_code == 1


def _shipped(module, index):
    """Config ``index`` of matmul_fast by the keywords its spec writes (as a shipped table has it)."""
    kwargs = module._CONFIGS[index].all_kwargs()
    return {k: kwargs[k] for k in ("BM", "BN", "BK", "num_stages", "num_warps")}


def test_quick_falls_back_on_the_shipped_table_after_this_devices_cache(gpu_tuner):
    """A table shipped beside the spec (keyed by architecture; here the CPU's, "cpu") gives the
    nearest sizes' config where this device tuned nothing like them; this device's own cache
    wins where it has any; an entry of another architecture, or naming a config the spec no
    longer has, is passed over."""
    module, make = gpu_tuner
    tuner = make({"cpu|64,64,64": module._CONFIGS[3].all_kwargs()})
    tuner.shipped = {
        "cpu|4096,4096,4096": _shipped(module, 5),
        "cpu|2048,2048,torch.float16": _shipped(module, 9),
        "cpu|1024,1024,torch.float16": {**_shipped(module, 9), "BM": 48},  # no config has BM = 48
        "sm_90|1024,1024,torch.bfloat16": _shipped(module, 7),  # another architecture
    }
    assert tuner.tuned_index("matmul_fast", _key(2048, 2048, 2048)) == 3  # this device's cache, however far
    assert tuner.tuned_index("matmul_fast", _key(1024, 1024, "torch.float16")) == 9  # 1 octave from the 2048 entry
    assert tuner.tuned_index("matmul_fast", _key(1024, 1024, "torch.bfloat16")) == 9  # f16's stands in for bf16
    assert tuner.tuned_index("matmul_fast", _key(1024, 1024, "torch.float32")) == 23  # nothing of this arch: default
    empty = make()
    empty.path = str(empty.path) + ".none"
    empty.shipped = tuner.shipped
    assert empty.tuned_index("matmul_fast", _key(3000, 3000, 3000)) == 5


def test_full_effort_tunes_past_a_shipped_table(gpu_tuner, monkeypatch):
    module, make = gpu_tuner
    tuner = make()
    tuner.shipped = {"cpu|64,32,16": _shipped(module, 5)}
    monkeypatch.setenv("TILEGEN_TUNE", "full")
    assert tuner.tuned_index("matmul_fast", _key(64, 32, 16)) is None  # None: the launcher times every config


def test_tune_save_writes_a_table_that_the_build_embeds(tmp_path, monkeypatch):
    """``tilegen tune --save``'s table (here written from faked tune results) lands beside the
    spec; ``tilegen build`` embeds it in the module, whose Tuner then holds it; a spec without a
    table builds as before (no ``_SHIPPED``)."""
    import shutil

    from tests.conftest import ROOT
    from tilegen import runner, tuned
    from tilegen.build import build, check_file, find_specs

    shutil.copy(ROOT / "specs" / "sum_dim1.tile", tmp_path / "sum_dim1.tile")
    spec = check_file(find_specs([str(tmp_path / "sum_dim1.tile")])[0])
    results = [runner.TuneResult("sum_dim1", "NVIDIA H100 80GB HBM3|4096,4096", 5,
                                 {"BK": 64, "BN": 128, "num_warps": 8, "num_stages": 1, "num_ctas": 1}, False)]
    entries = runner.shipped_entries(spec, results, "sm_90")
    written = {s.name.id for c in spec.tune.configs for s in c.settings}
    assert entries == {"sm_90|4096,4096": {"BK": 64, "BN": 128, "num_warps": 8}}
    assert written == {"BK", "BN", "num_warps"}
    path = tuned.table_path(tmp_path, "sum_dim1")
    tuned.save_entries(path, {"sm_90|1024,1024": {"BK": 8, "BN": 512, "num_warps": 4}})
    tuned.save_entries(path, entries)  # added to what the table holds
    assert json.loads(path.read_text()) == {"sm_90|1024,1024": {"BK": 8, "BN": 512, "num_warps": 4}, **entries}
    build([tmp_path / "sum_dim1.tile"], tmp_path / "gen")
    module = runner.load_module(tmp_path / "gen" / "sum_dim1.py")
    assert module._tuner.shipped == json.loads(path.read_text())
    path.unlink()
    build([tmp_path / "sum_dim1.tile"], tmp_path / "plain")
    assert "_SHIPPED" not in (tmp_path / "plain" / "sum_dim1.py").read_text()
    assert runner.load_module(tmp_path / "plain" / "sum_dim1.py")._tuner.shipped == {}


def test_tilegen_tune_save_tunes_a_derived_backward_and_the_build_embeds_its_table(tmp_path, monkeypatch):
    """``tilegen tune --save`` on a spec whose backward is derived (fused_add_rms_norm): the
    derived kernel is tuned at the same sizes as the forward (tuning itself faked here: the CLI
    needs a GPU), each kernel's choice lands in its own table beside the spec, and the build embeds
    the backward's table in the derived module."""
    import shutil

    from typer.testing import CliRunner

    from tests.conftest import ROOT
    from tilegen import runner, runtime
    from tilegen.build import build
    from tilegen.cli import app

    shutil.copy(ROOT / "specs" / "fused_add_rms_norm.tile", tmp_path / "fused_add_rms_norm.tile")
    calls = []

    def fake_tune(module, spec, sizes, device, dtypes=None):
        calls.append((spec.name.id, module.__name__, sizes["M"], sizes["N"]))
        config = {"BM": 4, "num_warps": 8, "num_stages": 2 if "backward" in spec.name.id else 1}
        return [runner.TuneResult(spec.name.id, "NVIDIA H200|2048,torch.bfloat16", 3, config, False)]

    monkeypatch.setattr(runner, "select_device", lambda: "cuda")
    monkeypatch.setattr(runner, "tune_module", fake_tune)
    monkeypatch.setattr(runtime, "device_arch", lambda device: "sm_90")
    result = CliRunner().invoke(app, ["tune", str(tmp_path / "fused_add_rms_norm.tile"), "--size", "M=64",
                                      "--size", "N=2048", "--save"])
    assert result.exit_code == 0, result.output
    assert [(name, m, n) for name, _, m, n in calls] == [
        ("fused_add_rms_norm", 64, 2048), ("fused_add_rms_norm_backward", 64, 2048)]
    forward = json.loads((tmp_path / "fused_add_rms_norm.tuned.json").read_text())
    backward = json.loads((tmp_path / "fused_add_rms_norm_backward.tuned.json").read_text())
    assert forward == {"sm_90|2048,torch.bfloat16": {"BM": 4, "num_warps": 8}}  # the keywords its configs write
    assert backward == {"sm_90|2048,torch.bfloat16": {"BM": 4, "num_warps": 8, "num_stages": 2}}
    build([tmp_path / "fused_add_rms_norm.tile"], tmp_path / "gen")
    assert runner.load_module(tmp_path / "gen" / "fused_add_rms_norm_backward.py")._tuner.shipped == backward
    assert runner.load_module(tmp_path / "gen" / "fused_add_rms_norm.py")._tuner.shipped == forward


@pytest.mark.parametrize("text, message", [
    ('{"sm_90|4096": {"BM": 4},\n "sm_90|8192": {"BM": }}', "2:23: error: not JSON: Expecting value"),
    ('["sm_90|4096"]', "1:1: error: a table of tuned configs is a JSON object"),
    ('{\n "sm_90|4096": {"BM": 4},\n "4096": {"BM": 4}\n}', "3:1: error: key '4096' is not \"<arch>|<sizes>\""),
    ('{\n "sm_90|4096": {"BM": "4"}\n}', "2:1: error: the config of 'sm_90|4096' is not an object of integer keywords"),
])
def test_a_bad_table_is_an_error_at_its_path_and_writes_nothing(tmp_path, monkeypatch, text, message):
    import shutil

    from typer.testing import CliRunner

    from tests.conftest import ROOT
    from tilegen.cli import app

    shutil.copy(ROOT / "specs" / "sum_dim1.tile", tmp_path / "sum_dim1.tile")
    (tmp_path / "sum_dim1.tuned.json").write_text(text)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["build", "sum_dim1.tile", "-o", "gen"])
    assert result.exit_code == 1
    assert result.output.startswith(f"sum_dim1.tuned.json:{message}"), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "gen" / "sum_dim1.py").exists()


def test_a_launcher_with_finish_kernels_tunes_on_workspaces_for_every_config(generated, monkeypatch):
    """mse_loss's kernel stores one partial a program, and its configs' blocks make 10, 3, 9 and 6
    programs at 33 x 600: the autotuner runs the kernel alone on a workspace of 10 (room for every
    config), and the call returns what the launch on the chosen config (9 programs) and its finish
    kernel compute, which the fast path keeps."""
    module = generated("mse_loss")
    tuner = module._tuner
    monkeypatch.setattr(tuner, "tuned", {})
    monkeypatch.setattr(tuner, "fast", {})
    monkeypatch.setattr(module, "_FAST", tuner.fast)
    monkeypatch.setattr(tuner, "tuned_index", lambda launcher, key: tuner.tuned.get(key))  # full: tune
    tuned = []

    def autotune(autotuner, grid, *args, **meta):  # the trials write their partials, and nothing else
        assert autotuner is module.mse_loss_kernel
        tuned.append(args[3].numel())
        args[3].fill_(float("nan"))

    monkeypatch.setattr(module._rt, "autotune", autotune)
    monkeypatch.setattr(tuner, "settle_ties", lambda key, autotuner, call: module._CONFIGS[2])
    monkeypatch.setattr(tuner, "remember", lambda key, config: tuner.tuned.__setitem__(key, 2))
    g = torch.Generator().manual_seed(11)
    predictions, targets = torch.randn(33, 600, generator=g), torch.randn(33, 600, generator=g)
    loss = module.mse_loss(predictions, targets)
    assert tuned == [10]
    torch.testing.assert_close(loss, module.reference(predictions, targets))
    (entry,) = module._FAST.values()
    assert entry[5] == 9  # the workspace's size: config 2's programs
    torch.testing.assert_close(module.mse_loss(predictions, targets), loss)  # the fast path
    assert tuned == [10]
