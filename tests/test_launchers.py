"""Launchers refuse bad tensors with messages naming the spec's tensor and dimension, return
empty outputs without launching, and switch to 64-bit offsets for tensors of 2**31+ elements."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT


def test_wrong_dtype_names_the_tensor(generated):
    with pytest.raises(TypeError, match=r"matmul_naive: b must have dtype torch\.float16, got torch\.float32"):
        generated("matmul_naive").matmul_naive(torch.zeros(16, 16, dtype=torch.float16), torch.zeros(16, 16))


def test_wrong_rank_names_the_tensor(generated):
    with pytest.raises(ValueError, match=r"rgb2grey: x must have rank 3, got shape \(4, 4\)"):
        generated("rgb2grey").rgb2grey(torch.zeros(4, 4, dtype=torch.uint8))


def test_non_tensor_names_the_argument(generated):
    with pytest.raises(TypeError, match=r"copy: x must be a torch\.Tensor, got list"):
        generated("copy").copy([1.0, 2.0])


def test_inconsistent_dimension_names_both_tensors(generated):
    a, b = torch.zeros(16, 32, dtype=torch.float16), torch.zeros(48, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"b dimension 0 \(K\) is 48, but a dimension 1 gives K = 32"):
        generated("matmul_naive").matmul_naive(a, b, BM=16, BN=16, BK=16)


def test_literal_dimension_is_checked(generated):
    with pytest.raises(ValueError, match="rgb2grey: x dimension 0 must be 3, got 4"):
        generated("rgb2grey").rgb2grey(torch.zeros(4, 5, 5, dtype=torch.uint8))


def test_unmasked_axis_refuses_a_non_multiple(generated):
    a, b = torch.zeros(16, 40, dtype=torch.float16), torch.zeros(40, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="'k over K by BK' is unmasked, so K = 40 must be a multiple of BK = 16"):
        generated("matmul_naive").matmul_naive(a, b, BM=16, BN=16, BK=16)


def test_block_override_must_be_a_power_of_two(generated):
    with pytest.raises(ValueError, match="copy: block size BS must be a power of two, got 48"):
        generated("copy").copy(torch.zeros(8), BS=48)


def test_mismatched_devices_are_refused(generated):
    meta = torch.zeros(8, device="meta")
    with pytest.raises(ValueError, match="add: inputs must be on one device, got x on cpu, y on meta"):
        generated("add").add(torch.zeros(8), meta)


@pytest.mark.parametrize(
    "name,args",
    [
        ("copy", (torch.zeros(0),)),
        ("add", (torch.zeros(0), torch.zeros(0))),
        ("rgb2grey", (torch.zeros(3, 0, 5, dtype=torch.uint8),)),
        ("matmul_tutorial", (torch.zeros(0, 32, dtype=torch.float16), torch.zeros(32, 8, dtype=torch.float16))),
        ("matmul_batched", (torch.zeros(0, 4, 4, dtype=torch.float16), torch.zeros(0, 4, 4, dtype=torch.float16))),
    ],
)
def test_empty_outputs_return_without_launching(generated, monkeypatch, name, args):
    module = generated(name)

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("launched an empty kernel")

        fn = property(lambda self: self)

    monkeypatch.setattr(module, f"{name}_kernel", NoLaunch())
    out = getattr(module, name)(*args)
    assert out.numel() == 0 and out.shape == module.reference(*args).shape


def _huge_storage(dtype):
    """2**31 + 64 elements of virtual memory; only the pages a test touches become resident."""
    return torch.empty(2**31 + 64, dtype=dtype)


@pytest.mark.skipif(not (ROOT / "generated" / "rgb2grey.py").exists(), reason="no module")
def test_offsets_past_2_31_use_int64(generated):
    """A channel stride of 2**30 puts channel 2 at element 2**31: int32 offsets would wrap."""
    module = generated("rgb2grey")
    storage = _huge_storage(torch.uint8)
    x = storage.as_strided((3, 5, 7), (2**30, 7, 1))
    g = torch.Generator().manual_seed(0)
    x.copy_(torch.randint(0, 256, (3, 5, 7), generator=g, dtype=torch.uint8))
    assert "int64 = _rt.wide_offsets((x,), (y,))" in (ROOT / "generated" / "rgb2grey.py").read_text()
    assert module._rt.wide_offsets((x,), ()) and not module._rt.wide_offsets((x[:2],), ())  # channel 1 ends below
    assert torch.equal(module.rgb2grey(x, BH=4, BW=4), module.reference(x))


def test_tile_loop_offsets_past_2_31_use_int64(generated):
    storage = _huge_storage(torch.float32)
    x = storage.as_strided((3,), (2**30,))
    y = storage[1:].as_strided((3,), (2**30,))
    x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    y.copy_(torch.tensor([10.0, 20.0, 30.0]))
    expected = torch.tensor([11.0, 22.0, 33.0])
    assert torch.equal(generated("add_loop").add_loop(x, y, BLOCK_SIZE=2), expected)
    assert torch.equal(generated("add").add(x, y, BLOCK_SIZE=2), expected)


def test_tuned_configs_are_kept_on_disk_keyed_by_device_and_sizes(generated, tmp_path, monkeypatch):
    """What a GPU process does after tuning, with the interpreter switched off for the cache."""
    import json

    module = generated("matmul_fast")
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "tilegen"))
    monkeypatch.setenv("TILEGEN_TUNE", "full")  # sizes not cached tune (quick would take the nearest)
    tuner = module._rt.Tuner("matmul_fast", "0123", module._CONFIGS)  # a new process: nothing read yet
    tuner.interpret = False
    tune_key = (torch.device("cpu"), 64, 32, 16)
    assert tuner.tuned_index("matmul_fast", tune_key) is None  # nothing tuned yet: tune now
    chosen = module._CONFIGS[3]
    tuner.remember(tune_key, chosen)
    assert tuner.tuned == {tune_key: 3}
    on_disk = json.loads((tmp_path / "tilegen" / "matmul_fast-0123.json").read_text())
    assert on_disk == {"cpu|64,32,16": chosen.all_kwargs()}
    # The next process starts with nothing tuned and reads the disk cache afresh.
    tuner = module._rt.Tuner("matmul_fast", "0123", module._CONFIGS)
    tuner.interpret = False
    assert tuner.tuned_index("matmul_fast", tune_key) == 3
    assert tuner.tuned == {tune_key: 3}
    assert tuner.tuned_index("matmul_fast", (torch.device("cpu"), 64, 32, 32)) is None  # other sizes
    # A config the spec no longer has (a hand-edited cache) is tuned again, not trusted.
    (tmp_path / "tilegen" / "matmul_fast-0123.json").write_text(json.dumps({"cpu|8,8,8": {"BM": 7}}))
    tuner.disk = None  # read it again
    assert tuner.tuned_index("matmul_fast", (torch.device("cpu"), 8, 8, 8)) is None
    # The module's own cache file is named by its kernel and spec hash; its launchers share its tuner.
    spec_hash = (ROOT / "generated" / "matmul_fast.py").read_text().split("spec sha256 ")[1][:16]
    assert module._tuner.path.endswith(f"matmul_fast-{spec_hash}.json")


@pytest.mark.parametrize("b_layout", ["row-major", "odd K (pointers)"])
def test_matmul_fast_tunes_once_per_power_of_two_of_m(generated, request, b_layout):
    """matmul_fast's key is next_power_of_2(M), N, K: the Ms of one power of two (a model's
    batches of tokens) share the tune of the first of them; N and K stay exact."""
    import warnings

    module = generated("matmul_fast")
    saved = dict(module._tuner.tuned)
    module._tuner.tuned.clear()  # the launchers' own dict (the tuner's): filled below
    module._FAST.clear()  # no launch kept: every call looks its config up
    request.addfinalizer(lambda: module._tuner.tuned.update(saved))
    k = 33 if b_layout == "odd K (pointers)" else 32
    b = torch.randn(k, 24).half()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
        for m in (5, 7, 8, 9, 16, 17):
            c = module.matmul_fast(torch.randn(m, k).half(), b)
            assert c.shape == (m, 24)
    keys = [key[2:] if key[1] == "pointers" else key[1:] for key in module._tuner.tuned]  # (M, N, K, ...)
    assert all(key[1:3] == (24, k) for key in keys)  # N and K exact
    assert sorted(key[0] for key in keys) == [8, 16, 32]  # 5, 7, 8 -> 8; 9, 16 -> 16; 17 -> 32
    assert all(key[1] == "pointers" for key in module._tuner.tuned) == (b_layout == "odd K (pointers)")


def test_autotuner_times_configs_in_a_cuda_graph_after_a_warmup(generated, monkeypatch):
    """Every tuned kernel's autotuner times a config with the runtime's time_config: 25 ms of calls first
    (triton.testing.do_bench's warmup), then a CUDA graph replay; Triton's event timing where a
    graph cannot be captured."""
    import triton

    module = generated("matmul_fast")
    assert module.matmul_fast_kernel._do_bench is module._rt.time_config
    assert module._matmul_fast_pointers_kernel._do_bench is module._rt.time_config
    assert generated("softmax").softmax_kernel._do_bench is module._rt.time_config  # one runtime for all
    calls = []

    def do_bench(fn, warmup=25, rep=100, quantiles=None):
        fn()
        calls.append(("events", warmup, rep, quantiles))
        return [2.0, 1.0, 3.0]

    def graph(fn, rep=20, quantiles=None):
        fn()
        calls.append(("graph", rep, quantiles))
        return [0.5, 0.4, 0.6]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", graph)
    launches = []
    assert module._rt.time_config(lambda: launches.append(1), (0.5, 0.2, 0.8)) == [0.5, 0.4, 0.6]
    assert calls == [("events", 25, 1, None), ("graph", 20, (0.5, 0.2, 0.8))] and len(launches) == 2

    def no_graph(fn, rep=20, quantiles=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", no_graph)
    calls.clear()
    assert module._rt.time_config(lambda: launches.append(1), (0.5, 0.2, 0.8)) == [2.0, 1.0, 3.0]
    assert calls == [("events", 25, 1, None), ("events", 25, 100, (0.5, 0.2, 0.8))]


class _TimedAutotuner:
    """What Tuner.settle_ties reads of Triton's autotuner: its pick and each config's first timing."""

    def __init__(self, module, times):
        self.configs_timings = {module._CONFIGS[i]: [ms, ms * 0.9, ms * 1.1] for i, ms in times.items()}
        self.best_config = module._CONFIGS[min(times, key=times.get)]


def _graph_timing(module, tune_key, speed, timed):
    """A do_bench_cudagraph that runs the call once and returns the time ``speed`` gives the
    config the launcher is set to (through the tuner's trial), recording which config it timed."""

    def graph(fn, rep=20, quantiles=None):
        fn()
        key, index = module._tuner.trial.pick
        assert key == tune_key
        timed.append(index)
        return speed[index]

    return graph


def test_near_ties_of_a_tune_are_timed_again_side_by_side(generated, monkeypatch):
    """The configs the autotuner timed within 5% of its pick (at most 4, fastest first) run the
    launcher again in 5 interleaved rounds; the lowest median wins, though the autotuner's one
    timing ranked it second. Configs further off are not run again, and neither the tuner's ``tuned`` nor
    the trial holds the key afterwards (the tuner's remember sets it)."""
    import triton

    module = generated("attention_causal")
    key = ("cuda", 1024, 64, "f16")
    # first timings: 5 is the pick; 7, 9, 4 are within 5% of it; 12 is 4.9% off; 2 is 20% off
    first = {5: 1.00, 7: 1.01, 9: 1.02, 4: 1.03, 12: 1.049, 2: 1.2}
    speed = {5: 0.97, 7: 0.95, 9: 0.99, 4: 0.96, 12: 0.5, 2: 0.5}  # side by side, 7 is the fastest
    timed, calls = [], []
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", _graph_timing(module, key, speed, timed))
    config = module._tuner.settle_ties(key, _TimedAutotuner(module, first), lambda: calls.append(1))
    assert config is module._CONFIGS[7]
    assert timed == [5, 7, 9, 4] * 5  # interleaved rounds, fastest first; 12 is the fifth near tie: left out
    assert len(calls) == 20 and key not in module._tuner.tuned and module._tuner.trial.pick is None


def test_a_clear_pick_or_a_single_config_is_kept_without_timing(generated, monkeypatch):
    """No config within 5% of the pick, or no timings at all (one config, or a key Triton's own
    cache already held): the pick is kept and nothing runs. The timings are read once."""
    import triton

    module = generated("attention_causal")
    key = ("cuda", 2048, 64, "f16")

    def never(*args, **kwargs):
        raise AssertionError("timed a config")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", never)
    tuner = _TimedAutotuner(module, {3: 1.0, 8: 1.06})  # the next config is 6% slower
    assert module._tuner.settle_ties(key, tuner, never) is module._CONFIGS[3]
    tuner.configs_timings = {}  # one config: Triton's autotuner timed nothing
    assert module._tuner.settle_ties(key, tuner, never) is module._CONFIGS[3]
    # timings are read once: a later call whose tune timed nothing does not see an earlier tune's ties
    tuner = _TimedAutotuner(module, {3: 1.0, 8: 1.01})
    timed = []
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", _graph_timing(module, key, {3: 1.0, 8: 2.0}, timed))
    assert module._tuner.settle_ties(key, tuner, lambda: None) is module._CONFIGS[3] and len(timed) == 10
    assert module._tuner.settle_ties(key, tuner, never) is module._CONFIGS[3] and len(timed) == 10
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", never)
    del tuner.configs_timings
    assert module._tuner.settle_ties(key, tuner, never) is module._CONFIGS[3]
    assert key not in module._tuner.tuned


def test_near_ties_fall_back_to_event_timing_and_keep_the_pick_on_error(generated, monkeypatch):
    """Where a CUDA graph cannot be captured, Triton's event timing settles the ties. Any other
    error while timing warns and keeps the autotuner's pick: the call being tuned already has its
    output. Nothing is left set for the key either way."""
    import triton

    module = generated("matmul_fast")
    key = ("cuda", 512, 512, 512)
    timed = []

    def no_graph(fn, rep=20, quantiles=None):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", no_graph)
    monkeypatch.setattr(triton.testing, "do_bench", _graph_timing(module, key, {1: 2.0, 2: 1.0}, timed))
    picked = module._tuner.settle_ties(key, _TimedAutotuner(module, {1: 1.0, 2: 1.04}), lambda: None)
    assert picked is module._CONFIGS[2]
    assert timed == [1, 2] * 5 and key not in module._tuner.tuned and module._tuner.trial.pick is None

    def broken(fn, rep=20, quantiles=None):
        raise ValueError("a launch failed")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", broken)
    with pytest.warns(UserWarning, match="near ties failed .*ValueError: a launch failed.*keeping its pick"):
        config = module._tuner.settle_ties(key, _TimedAutotuner(module, {1: 1.0, 2: 1.04}), lambda: None)
    assert config is module._CONFIGS[1] and key not in module._tuner.tuned and module._tuner.trial.pick is None


def test_near_ties_of_the_pointer_kernel_map_to_the_modules_configs(generated, monkeypatch):
    """The pointer fallback's autotuner holds _POINTER_CONFIGS (no descriptor pre_hook); its near
    ties are the _CONFIGS entries with the same settings, and the winner is one of _CONFIGS."""
    import triton

    module = generated("matmul_fast")
    key = ("cuda", "pointers", 512, 512, 513)
    tuner = _TimedAutotuner(module, {4: 1.0, 6: 1.02})
    tuner.configs_timings = {module._POINTER_CONFIGS[i]: [ms] for i, ms in ((4, 1.0), (6, 1.02))}
    tuner.best_config = module._POINTER_CONFIGS[4]
    timed = []
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", _graph_timing(module, key, {4: 1.0, 6: 0.9}, timed))
    assert module._tuner.settle_ties(key, tuner, lambda: None) is module._CONFIGS[6]
    assert timed == [4, 6] * 5


def test_a_near_tie_being_timed_is_seen_by_this_thread_only(generated):
    """While Tuner.settle_ties times a config, the launcher's lookup (Tuner.tuned_index, reached on a miss
    in Tuner.tuned under the lock) returns it on the settling thread; another thread does not see it."""
    import threading

    module = generated("attention_causal")
    key = ("cuda", 4096, 64, "test-trial")
    module._tuner.trial.pick = (key, 5)
    try:
        assert module._tuner.tuned_index("attention_causal", key) == 5 and key not in module._tuner.tuned
        seen = []
        other = threading.Thread(target=lambda: seen.append(getattr(module._tuner.trial, "pick", None)))
        other.start()
        other.join()
        assert seen == [None]
    finally:
        module._tuner.trial.pick = None


def test_settling_runs_the_launcher_itself_at_each_near_tie(generated, monkeypatch):
    """End to end through the real launcher (in the interpreter): each timed call runs the kernel
    at the near tie being timed (the launcher's lookup takes it from the tuner's trial), computes the right
    output, and leaves no config remembered for the key."""
    import triton

    module = generated("attention_causal")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, dtype=torch.float16) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    key = (q.device, 40, 16, torch.float16)  # the launcher's tune key for these inputs
    ran = []

    def kernel_grid(original):
        def launch(grid):  # which BM, BN the launcher runs
            def run(*args, **kwargs):
                ran.append((kwargs["BM"], kwargs["BN"]))
                return original[grid](*args, **kwargs)
            return run
        return launch

    class Recording:
        def __init__(self, fn):
            self.fn, self.launch = fn, kernel_grid(fn)

        def __getitem__(self, grid):
            return self.launch(grid)

    monkeypatch.setattr(module.attention_causal_kernel, "fn", Recording(module.attention_causal_kernel.fn))
    outputs = []
    speed = {1: 1.0, 4: 0.5}  # config 4 (BM = BN = 64) is the faster one side by side
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", _graph_timing(module, key, speed, []))
    monkeypatch.setattr(module._rt, "NEAR_TIE_ROUNDS", 2)
    config = module._tuner.settle_ties(key, _TimedAutotuner(module, {1: 1.0, 4: 1.01}),
                                 lambda: outputs.append(module.attention_causal(q, k, v, 0.25)[0]))
    assert config is module._CONFIGS[4] and key not in module._tuner.tuned
    blocks = [(module._CONFIGS[i].kwargs["BM"], module._CONFIGS[i].kwargs["BN"]) for i in (1, 4)]
    assert ran == blocks * 2 and len(outputs) == 4
    for out in outputs:
        assert (out.float() - expected).abs().max().item() < 2e-3


@pytest.mark.parametrize("name", ["attention_causal", "matmul_fast", "softmax"])
def test_every_tune_settles_its_near_ties_through_the_launcher(generated, name):
    """Each tuned launcher (the descriptor one and its pointer fallback) remembers the config
    Tuner.settle_ties keeps, timing near ties by calling itself on the same inputs."""
    import inspect

    module = generated(name)
    launchers = [getattr(module, n) for n in (name, f"_{name}_pointers") if hasattr(module, n)]
    for launcher in launchers:
        params = ", ".join(
            p.name if p.kind is p.POSITIONAL_OR_KEYWORD else f"{p.name}={p.name}"
            for p in inspect.signature(launcher).parameters.values() if p.name != "config"  # config= forces: no tune
        )
        source = inspect.getsource(launcher)  # its own lambda, or the runtime's (Launch.run: again=)
        assert f"lambda: {launcher.__name__}({params})" in source or any(
            f".run({launcher.__name__}, {key}, {params})" in source for key in ("fast_key", "None"))


def _submit_cleans_up():
    """Whether Triton's AsyncCompileMode.submit takes a cleanup function (3.9 does; 3.6 does not)."""
    import inspect

    from triton.runtime._async_compile import AsyncCompileMode

    return "cleanup_fn" in inspect.signature(AsyncCompileMode.submit).parameters


def _fake_autotuner(compile_fn):
    """A stand-in for ``triton.autotune``'s Autotuner over three configs whose ``fn.warmup`` does
    what Triton's JIT does under AsyncCompileMode: it submits the compile to the active mode.
    Returns the autotuner, the warmups it saw and the compiles that finished."""
    import types

    import triton
    from triton.runtime import _async_compile

    seen, finished = [], []

    def pre_hook(nargs):  # as _descriptor_blocks: the config's block shape onto the call's descriptor
        nargs["desc"]["block"] = nargs["BM"]

    def warmup(*args, grid, **meta):
        mode = _async_compile.active_mode.get()
        seen.append({"args": args, "grid": grid, "meta": meta, "block": args[0]["block"], "async": mode is not None})
        cleanup = (lambda future: finished.append(None),) if _submit_cleans_up() else ()  # Triton 3.9's, not 3.6's
        mode.submit(meta["BM"], lambda: compile_fn(meta), finished.append, *cleanup)

    configs = [triton.Config({"BM": bm}, num_warps=4, num_stages=stages, pre_hook=pre_hook)
               for bm, stages in ((16, 2), (32, 3), (64, 4))]
    autotuner = types.SimpleNamespace(fn=types.SimpleNamespace(warmup=warmup), configs=configs, arg_names=["desc", "n"])
    return autotuner, seen, finished


@pytest.mark.parametrize("name", ["matmul_fast", "attention"])
def test_compile_configs_compiles_every_config_on_pool_threads(generated, name):
    """Before a first tune, the runtime's compile_configs runs each config's pre_hook and then Triton's
    ``warmup`` with the call's keywords and the config's, under AsyncCompileMode; the compiles run
    on other threads, at once, and have all finished when it returns."""
    pytest.importorskip("triton.runtime._async_compile")
    import os
    import threading
    import time

    started = []

    def compile_fn(meta):
        started.append(time.perf_counter())
        time.sleep(0.2)
        return meta["BM"], threading.get_ident()

    autotuner, seen, finished = _fake_autotuner(compile_fn)
    desc = {"block": None}
    grid = object()
    generated(name)._rt.compile_configs(autotuner, grid, (desc, 7), {"GROUP_SIZE_M": 8})
    assert [s["block"] for s in seen] == [16, 32, 64]  # each warmup saw its own config's descriptor
    assert [s["meta"] for s in seen] == [{"GROUP_SIZE_M": 8, **c.all_kwargs()} for c in autotuner.configs]
    assert all(s["async"] and s["grid"] is grid and s["args"] == (desc, 7) for s in seen)
    assert sorted(bm for bm, _ in finished) == [16, 32, 64]
    assert threading.get_ident() not in {thread for _, thread in finished}
    at_once = sum(t < min(started) + 0.15 for t in started)  # started while the first compiled (0.2 s)
    assert at_once == min(3, os.cpu_count() or 1)  # a thread per core, at most one per config


def test_compile_configs_leaves_a_failed_compile_to_the_autotuner(generated):
    """A config whose compile raises is dropped quietly (its placeholder cleaned up); the others
    finish. The autotuner compiles it again when it times it and reports it as before."""
    pytest.importorskip("triton.runtime._async_compile")

    def compile_fn(meta):
        if meta["BM"] == 32:
            raise RuntimeError("out of registers")
        return meta["BM"], None

    autotuner, seen, finished = _fake_autotuner(compile_fn)
    generated("matmul_fast")._rt.compile_configs(autotuner, None, ({"block": None}, 7), {})
    assert len(seen) == 3
    assert finished.count(None) == (1 if _submit_cleans_up() else 0)  # 32's cleanup ran, on a Triton with one
    assert sorted(f for f in finished if f is not None) == [(16, None), (64, None)]


def test_compile_configs_without_async_compile_leaves_compiling_to_the_autotuner(generated, monkeypatch):
    """On a Triton without AsyncCompileMode, compile_configs compiles nothing ahead."""
    import sys

    autotuner, seen, finished = _fake_autotuner(lambda meta: None)
    monkeypatch.setitem(sys.modules, "triton.runtime._async_compile", None)  # the import raises ImportError
    generated("matmul_fast")._rt.compile_configs(autotuner, None, ({"block": None}, 7), {})
    assert seen == [] and finished == []


INT_EDGES = [
    0, 1, 2, 15, 16, 17, 2**31 - 16, 2**31 - 1, 2**31, 2**32, 2**63 - 16, 2**63, 2**64 - 1, -1, -16, -(2**31),
    -(2**31) - 16,
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(INT_EDGES), st.integers(-(2**63), 2**64 - 1)), min_size=2, max_size=2))
def test_int_class_refines_tritons_specialization(generated, pair):
    """Two integers a launcher files under one compiled kernel get the same specialization from
    Triton's own JIT (``native_specialize_impl``: constexpr 1, divisibility by 16, i32/i64/u64)."""
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    int_class = generated("copy")._rt.int_class
    u, v = pair
    if int_class(u) == int_class(v):
        assert native(BaseBackend, u, False, True, True) == native(BaseBackend, v, False, True, True)
    assert int_class(u) == int_class(u) and hash(int_class(u)) == hash(int_class(u))


def test_int_class_separates_what_triton_separates(generated):
    """The classes of the edge values: 1, 64-bit and unsigned values are never merged with
    ordinary 32-bit integers, and True (divisible) is not confused with the value 1."""
    int_class = generated("copy")._rt.int_class
    assert int_class(32) == int_class(48) != int_class(33) == int_class(2)
    assert len({int_class(v) for v in (1, 16, 17, 2**31, 2**31 + 16, 2**63)}) == 6


class _FakeCompiled:
    """Stands in for Triton's CompiledKernel: records how it was launched."""

    def __init__(self):
        self.calls = []
        self.function, self.packed_metadata = "function", "metadata"

    def _init_handles(self):
        self.calls.append("init")

    def run(self, *args):
        self.calls.append(("run", args))

    def __getitem__(self, grid):
        return lambda *args: self.calls.append(("runner", grid, args))


class _FakeDriver:
    """Stands in for the active GPU driver: the current stream of device d is 100 + d."""

    def get_current_stream(self, device):
        return 100 + device


def test_launcher_calls_the_compiled_kernels_launcher_and_the_runner_while_hooked(generated, monkeypatch):
    """The runtime's launcher: the kernel's own launcher on the device's current stream, every argument by
    position, no launch metadata; through ``compiled[grid]`` (which calls hooks) while a launch
    hook is installed; and the runner alone on a Triton without the knobs hook chain."""
    import triton

    monkeypatch.setattr(triton.runtime.driver, "_active", _FakeDriver())
    module = generated("copy")
    compiled = _FakeCompiled()
    launch = module._rt.launcher(compiled)
    launch((4, 1, 1), 1, "x", "z", 4096, 1024, False)
    assert compiled.calls == ["init", ("run", (4, 1, 1, 101, "function", "metadata", None, None, None,
                                               "x", "z", 4096, 1024, False))]
    hooks = triton.knobs.runtime.launch_enter_hook
    hook = lambda metadata: None  # noqa: E731
    hooks.add(hook)
    try:
        launch((2, 1, 1), 0, "x", "z", 7)
    finally:
        hooks.remove(hook)
    assert compiled.calls[-1] == ("runner", (2, 1, 1), ("x", "z", 7))
    launch((5, 1, 1), 0, "x", "z", 8)  # a run without a C launch to call directly: run again
    assert compiled.calls[-1] == ("run", (5, 1, 1, 100, "function", "metadata", None, None, None, "x", "z", 8))
    old = _FakeCompiled()
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)  # no hook chain: the runner
    module._rt.launcher(old)((3, 1, 1), 0, "x")
    assert old.calls == ["init", ("runner", (3, 1, 1), ("x",))]


class _FakeCudaLauncher:
    """Stands in for Triton's CudaLauncher (``CompiledKernel.run``): its Python call makes the
    scratch buffers (``scratch``: what it makes) and passes everything to its C ``launch`` (an
    instance attribute, as Triton's is) in the order of Triton ``release`` (3.6 or 3.9)."""

    def __init__(self, release, scratch=None):
        self.release, self.scratch = release, scratch
        self.launch = self._c_launch
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.arg_annotations, self.kernel_signature = ["annotation"], b"\x01\x02"
        self.python_calls, self.c_calls = 0, []

    def _c_launch(self, *args):
        self.c_calls.append(args)

    def __call__(self, gx, gy, gz, stream, function, kernel_metadata, launch_metadata, enter, exit, *args):
        self.python_calls += 1
        head = (gx, gy, gz, stream, function, self.launch_cooperative_grid, self.launch_pdl)
        if self.release == "3.6":
            self.launch(*head, self.scratch, None, kernel_metadata, launch_metadata, enter, exit, *args)
        else:
            self.launch(*head, kernel_metadata, launch_metadata, enter, exit, self.scratch, None,
                        self.arg_annotations, self.kernel_signature, args)


@pytest.mark.parametrize(("release", "scratch"), [("3.6", None), ("3.9", None), ("3.6", "buffer"), ("3.9", "buffer")])
def test_launcher_calls_tritons_c_launch_directly_where_its_first_launch_shows_the_order(
        generated, monkeypatch, release, scratch):
    """After a first launch through Triton's CudaLauncher, the runtime's launcher calls its C
    ``launch`` itself, with the arguments CudaLauncher would pass, in the order of the Triton release
    the first launch showed; a kernel whose CudaLauncher passes something else (here, a scratch
    buffer, made per call) keeps launching through CudaLauncher. Every launch reaches the C launch
    once, with the arguments Triton's own path gives it."""
    import triton

    monkeypatch.setattr(triton.runtime.driver, "_active", _FakeDriver())
    module = generated("copy")
    compiled = _FakeCompiled()
    compiled.run = _FakeCudaLauncher(release, scratch)
    launch = module._rt.launcher(compiled)
    x, z = torch.zeros(2), torch.zeros(2)
    launch((4, 1, 1), 1, x, z, 4096, 1.5, False)
    launch((7, 2, 1), 0, z, x, 11, 0.25, True)
    reference = _FakeCudaLauncher(release, scratch)  # what Triton's own path gives the C launch
    reference.arg_annotations = compiled.run.arg_annotations
    reference(4, 1, 1, 101, "function", "metadata", None, None, None, x, z, 4096, 1.5, False)
    reference(7, 2, 1, 100, "function", "metadata", None, None, None, z, x, 11, 0.25, True)
    assert len(compiled.run.c_calls) == 2
    for got, want in zip(compiled.run.c_calls, reference.c_calls, strict=True):
        assert module._rt._same(got, want)
    assert compiled.run.launch == compiled.run._c_launch  # the recording during the first launch is undone
    assert compiled.run.python_calls == (1 if scratch is None else 2)
    assert launch.c_launch_layout == (release if scratch is None else "run")


class _FrozenCudaLauncher(_FakeCudaLauncher):
    """A CudaLauncher whose ``launch`` cannot be set after it is made."""

    def __setattr__(self, name, value):
        if name == "launch" and hasattr(self, "launch"):
            raise AttributeError(f"{name} is read-only")
        super().__setattr__(name, value)


def test_launcher_keeps_tritons_launcher_where_its_c_launch_cannot_be_recorded(generated, monkeypatch):
    """A CudaLauncher whose ``launch`` cannot be swapped for the recording launches through
    CudaLauncher on every call, the first included, once each."""
    import triton

    monkeypatch.setattr(triton.runtime.driver, "_active", _FakeDriver())
    compiled = _FakeCompiled()
    compiled.run = _FrozenCudaLauncher("3.6")
    launch = generated("copy")._rt.launcher(compiled)
    launch((4, 1, 1), 0, "x", "z", 8)
    launch((4, 1, 1), 0, "x", "z", 9)
    assert compiled.run.python_calls == 2 and len(compiled.run.c_calls) == 2
    assert launch.c_launch_layout == "run"


def test_graph_timing_captures_on_a_stream_of_the_current_gpu(generated, monkeypatch):
    """torch.cuda.graph captures on one stream per process, made on the device current at the
    first capture; triton.testing.do_bench_cudagraph passes none of its own. On two H100s a tune
    on cuda:1 after one on cuda:0 captured on cuda:0's stream and ran cuda:1's kernel there ("cannot
    be accessed from Triton", then an illegal memory access). The runtime's graph_timing points
    the capture stream at one of the current device's while it times, and restores it after."""
    import triton

    module = generated("softmax")

    class Stream:
        def __init__(self, device):
            self.device = torch.device("cuda", device)

    first = Stream(0)  # the process's first capture was on cuda:0
    monkeypatch.setattr(torch.cuda.graph, "default_capture_stream", first, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(module._rt, "CAPTURE_STREAMS", {})
    seen = []
    monkeypatch.setattr(
        triton.testing, "do_bench_cudagraph", lambda call, **kw: seen.append(torch.cuda.graph.default_capture_stream)
    )
    module._rt.graph_timing(lambda: None, rep=20)
    module._rt.graph_timing(lambda: None, rep=20)
    assert [s.device for s in seen] == [torch.device("cuda", 1)] * 2 and seen[0] is seen[1]  # one stream per device
    assert torch.cuda.graph.default_capture_stream is first  # restored
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    module._rt.graph_timing(lambda: None, rep=20)
    assert seen[-1] is first  # already the current device's: left alone


def test_a_workspace_of_partials_past_2_31_uses_int64(generated):
    """A reduction across programs stores each program's partials at ``program * elements`` in an
    f32 workspace, which can pass 2**31 elements where no tensor does: conv1d's weight gradient
    keeps min(N, 32) x O x C x K partials (32 x 8192 x 8192 = 2**31; 31 x ... below)."""
    module = generated("conv1d_backward_dw")
    w = torch.empty(8192, 8192, 1)  # virtual memory: the plan reads shapes and strides only
    for samples, wide in ((31, False), (32, True), (1000, True)):
        x, dy = torch.empty(samples, 8192, 1), torch.empty(samples, 8192, 1)
        plan = module._conv1d_backward_dw_plan(x, w, dy)
        assert plan.meta["INT64_OFFSETS"] is wide
        assert not module._rt.wide_offsets((x, w, dy), plan.outputs)  # no tensor of its own needs them
