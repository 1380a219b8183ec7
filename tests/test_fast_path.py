"""The launchers' fast path (issue 34): a call whose inputs look like an earlier call's (shapes,
strides, dtypes, devices, pointer alignment, scalars, keywords, current device) launches as that
call did without repeating its checks. What changed after a cached call must still get the right
kernel or the right error; the results of the fast path are those of the full one."""

import inspect
import warnings

import pytest
import torch

from tilegen import runtime


def _counted(module):
    """Wrap every launch kept in ``module._FAST`` so that the test sees the fast path taken:
    returns the list each fast launch appends to."""
    seen = []

    def wrap(launch):
        def counted(*args):
            seen.append(1)
            return launch(*args)
        return counted

    for key, (launch, *rest) in list(module._FAST.items()):
        module._FAST[key] = (wrap(launch), *rest)
    return seen


def test_a_second_call_takes_the_fast_path_and_computes_the_same(generated):
    rms = generated("rms_norm")
    x, w = torch.randn(5, 37), torch.randn(37)
    first = rms.rms_norm(x, w, 1e-6)
    seen = _counted(rms)
    second = rms.rms_norm(x, w, 1e-6)
    assert seen == [1]
    assert torch.equal(first, second)
    torch.testing.assert_close(second, rms.reference(x, w, 1e-6))
    other = torch.randn(5, 37)  # other values, same key: the fast path, its own output
    torch.testing.assert_close(rms.rms_norm(other, w, 1e-6), rms.reference(other, w, 1e-6))
    assert seen == [1, 1]


@pytest.mark.parametrize("change", ["size", "strides", "dtype", "alignment", "scalar"])
def test_a_changed_input_gets_its_own_launch(generated, change):
    rms = generated("rms_norm")
    x, w = torch.randn(6, 40), torch.randn(40)
    rms.rms_norm(x, w, 1e-6)
    rms.rms_norm(x, w, 1e-6)  # kept
    eps = 1e-6
    if change == "size":
        x, w = torch.randn(3, 24), torch.randn(24)
    elif change == "strides":  # the same shape, column-major
        x = torch.randn(40, 6).t()
    elif change == "dtype":
        x, w = x.half(), w.half()
    elif change == "alignment":  # a pointer 4 bytes past a 16-byte boundary
        x = torch.randn(6, 41)[:, 1:]
    else:
        eps = 0.5
    expected = rms.reference(x, w, eps)
    got = rms.rms_norm(x, w, eps)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=2e-3 if x.dtype == torch.float16 else 1e-5, rtol=1e-3)
    torch.testing.assert_close(rms.rms_norm(x, w, eps), expected, atol=2e-3 if x.dtype == torch.float16 else 1e-5,
                               rtol=1e-3)  # and again, through its own fast path


def test_bad_input_after_a_cached_call_still_gets_its_message(generated):
    rms = generated("rms_norm")
    x, w = torch.randn(4, 16), torch.randn(16)
    rms.rms_norm(x, w, 1e-6)
    rms.rms_norm(x, w, 1e-6)
    with pytest.raises(TypeError, match=r"weight must have dtype torch\.float32 like x"):
        rms.rms_norm(x, w.half(), 1e-6)
    with pytest.raises(ValueError, match="weight dimension 0"):
        rms.rms_norm(x, torch.randn(17), 1e-6)
    with pytest.raises(TypeError, match="eps must be a Python float"):
        rms.rms_norm(x, w, "1e-6")
    with pytest.raises(TypeError, match="eps must be a Python float"):
        rms.rms_norm(x, w, [1e-6])  # not hashable: the full path's check
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        rms.rms_norm(x.tolist(), w, 1e-6)


def test_a_keyword_is_part_of_the_key(generated):
    copy = generated("copy")
    x = torch.randn(1000)
    assert torch.equal(copy.copy(x, BS=256), x)
    assert torch.equal(copy.copy(x, BS=256), x)
    assert torch.equal(copy.copy(x, BS=64), x)
    with pytest.raises(ValueError, match="block size BS must be a power of two"):
        copy.copy(x, BS=100)


def test_outputs_of_several_and_empty_inputs(generated):
    layer = generated("layer_norm")
    x, w, b = torch.randn(3, 20).half(), torch.randn(20).half(), torch.randn(20).half()
    first = layer.layer_norm(x, w, b, 1e-5)
    second = layer.layer_norm(x, w, b, 1e-5)
    assert len(second) == 3 and all(torch.equal(a, c) for a, c in zip(first, second, strict=True))
    empty = layer.layer_norm(torch.randn(0, 20).half(), w, b, 1e-5)
    assert [t.shape for t in empty] == [(0, 20), (0,), (0,)]


def test_an_input_requiring_grad_after_a_cached_call_is_recorded(generated):
    softmax = generated("softmax")
    x = torch.randn(4, 33)
    softmax.softmax(x)
    softmax.softmax(x)
    leaf = x.clone().requires_grad_()
    y = softmax.softmax(leaf)
    assert y.grad_fn is not None
    dy = torch.randn_like(y)
    y.backward(dy)
    expected = torch.autograd.grad(torch.softmax(leaf, dim=1), leaf, dy)[0]
    torch.testing.assert_close(leaf.grad, expected)
    with torch.no_grad():  # grad mode off: the fast path, no graph
        assert softmax.softmax(leaf).grad_fn is None


class _Lookups(dict):
    """A launcher's ``_FAST`` table that counts its lookups."""

    looked = 0

    def get(self, key, default=None):
        self.looked += 1
        return super().get(key, default)


def test_a_call_autograd_records_goes_to_its_function_before_the_fast_paths_key(generated, monkeypatch):
    """A launcher with a backward routes a call autograd records (grad mode on, an input requiring
    grad) before it makes the fast path's key: the key is made once, by the launcher the Function
    calls (grad mode off there), not also by the outer call; a spec without a backward still
    refuses such a call, after its fast path and checks."""
    rms = generated("rms_norm")
    x, w = torch.randn(3, 40), torch.randn(40)
    rms.rms_norm(x, w, 1e-6)  # kept
    table = _Lookups(rms._FAST)
    monkeypatch.setattr(rms, "_FAST", table)
    leaf = x.clone().requires_grad_()
    y = rms.rms_norm(leaf, w, 1e-6)
    assert y.grad_fn is not None and table.looked == 1  # the Function's call only
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(leaf.grad, torch.autograd.grad(rms.reference(leaf, w, 1e-6).sum(), leaf)[0])
    with torch.no_grad():
        rms.rms_norm(leaf, w, 1e-6)
    assert table.looked == 2
    argmax = generated("argmax_dim1")  # no backward, and a float input autograd could follow
    values = torch.randn(2, 5, 7)
    argmax.argmax_dim1(values)
    with pytest.raises(RuntimeError, match="argmax_dim1"):
        argmax.argmax_dim1(values.clone().requires_grad_())


def test_keep_launch_keeps_nothing_for_a_trial_or_a_key_of_none_and_starts_afresh_when_full(monkeypatch):
    class Tuner:
        trial = type("Trial", (), {"pick": None})()
        forcings = 0

    fast, tuner = {}, Tuner()
    runtime.keep_launch(fast, None, "entry")
    assert fast == {}
    tuner.trial.pick = (("key",), 3)  # settle_ties times config 3: not the config to keep
    runtime.keep_launch(fast, "a", "entry", tuner)
    assert fast == {}
    tuner.trial.pick = None
    tuner.forcings = 1  # a call's config= runs: not the config to keep
    runtime.keep_launch(fast, "a", "entry", tuner)
    assert fast == {}
    tuner.forcings = 0
    runtime.keep_launch(fast, "a", "entry", tuner)
    assert fast == {"a": "entry"}
    monkeypatch.setattr(runtime, "FAST_LIMIT", 2)
    runtime.keep_launch(fast, "b", "entry")
    runtime.keep_launch(fast, "c", "entry")
    assert fast == {"c": "entry"}


def test_a_remembered_config_clears_the_launches_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path))
    import triton

    fast = {"a": "entry"}
    tuner = runtime.Tuner("k", "0" * 16, [triton.Config({"B": 1}), triton.Config({"B": 2})], fast=fast)
    key = (torch.device("cpu"), 8)
    tuner.remember(key, triton.Config({"B": 2}))
    assert fast == {} and tuner.tuned[key] == 1


def _device_error_inputs(device):
    """test_a_cpu_tensor_after_a_cached_gpu_call_gets_the_device_error's x and w of rms_norm (f32)."""
    return torch.randn(4, 16, device=device), torch.randn(16, device=device)


@pytest.mark.skipif(not torch.cuda.is_available() or runtime.INTERPRET, reason="a GPU")
def test_a_cpu_tensor_after_a_cached_gpu_call_gets_the_device_error(generated):
    rms = generated("rms_norm")
    x, w = _device_error_inputs("cuda")
    rms.rms_norm(x, w, 1e-6)
    rms.rms_norm(x, w, 1e-6)
    with pytest.raises(ValueError, match="inputs must be on one device"):
        rms.rms_norm(x, w.cpu(), 1e-6)
    with pytest.raises(ValueError, match="inputs are on the CPU"):
        rms.rms_norm(x.cpu(), w.cpu(), 1e-6)


def test_the_gpu_tests_call_is_planned_without_a_gpu(generated):
    """The GPU-only test above calls rms_norm with inputs its op's fake implementation (the
    launcher's checks, no launch) accepts on a GPU: CI without a GPU sees the spec change under it."""
    from tests.conftest import fake_call

    x, w = _device_error_inputs("cpu")
    (y,) = fake_call(generated("rms_norm"), [x, w, 1e-6])
    assert (y.shape, y.dtype, y.device.type) == (x.shape, x.dtype, "cuda")


@pytest.mark.parametrize("kernel", ["rms_norm_backward", "mse_loss", "layer_norm_backward"])
def test_a_launcher_with_finish_kernels_takes_the_fast_path(generated, kernel):
    """Reductions across programs: the kept launch makes the workspaces and runs the finish
    kernels too (a weight gradient's column sums, a loss's one number)."""
    module = generated(kernel)
    g = torch.Generator().manual_seed(7)
    if kernel == "rms_norm_backward":
        args = (torch.randn(9, 40, generator=g), torch.randn(9, 40, generator=g), torch.randn(40, generator=g), 1e-6)
    elif kernel == "mse_loss":
        args = (torch.randn(13, 70, generator=g), torch.randn(13, 70, generator=g))
    else:
        x = torch.randn(9, 40, generator=g).half()
        args = (torch.randn(9, 40, generator=g).half(), x, torch.randn(40, generator=g).half(),
                x.float().mean(dim=1), x.float().var(dim=1, unbiased=False).add(1e-5).rsqrt())
    launcher = getattr(module, kernel)
    first = launcher(*args)
    seen = _counted(module)
    second = launcher(*args)
    assert seen == [1]
    first, second, expected = (t if isinstance(t, tuple) else (t,) for t in (first, second, module.reference(*args)))
    for a, b, c in zip(first, second, expected, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(b.float(), c.float(), atol=2e-2 if b.dtype == torch.float16 else 1e-5, rtol=1e-3)


@pytest.mark.parametrize("change", ["none", "b column-major", "dtype", "odd K (pointers)"])
def test_a_matmul_with_descriptors_takes_the_fast_path(generated, change):
    """matmul_fast launches through TMA descriptors: the kept launch makes them again on the new
    call's tensors (shapes, strides, block shapes kept); another layout, dtype or a K that TMA
    cannot address gets its own launch."""
    module = generated("matmul_fast")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(40, 32, generator=g).half(), torch.randn(32, 24, generator=g).half()
    module.matmul_fast(a, b)
    module.matmul_fast(a, b)
    if change == "b column-major":
        b = torch.randn(24, 32, generator=g).half().t()
    elif change == "dtype":
        a, b = a.float(), b.float()
    elif change == "odd K (pointers)":
        a, b = torch.randn(40, 33, generator=g).half(), torch.randn(33, 24, generator=g).half()
    other = torch.randn(a.shape, generator=g).to(a.dtype)  # new values, the same key as a
    for x in (a, other, other):
        expected = (x.double() @ b.double()).to(x.dtype)
        torch.testing.assert_close(module.matmul_fast(x, b), expected, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("layout", ["descriptors", "head dimension 6 (pointers)", "k transposed (pointers)"])
def test_attention_keeps_its_launch_through_descriptors_or_its_pointer_kernel(generated, layout):
    """attention's plan makes TMA descriptors, or returns its pointer kernel's plan where they
    cannot serve (rows of 12 bytes; a last stride not 1): either way the launch is kept under
    attention's own key, and the fast path launches it again, on each call's tensors, without the
    plan."""
    module = generated("attention")
    g = torch.Generator().manual_seed(5)
    d = 6 if layout.startswith("head") else 16
    q, k, v = (torch.randn(1, 2, 20, d, generator=g) for _ in range(3))  # 20 rows: lse's rows 16-byte aligned
    if layout.startswith("k transposed"):
        k = torch.randn(1, 2, d, 20, generator=g).transpose(2, 3)
    module._FAST.clear()
    module.attention(q, k, v, 0.3)
    (key,) = module._FAST
    assert key[0] == "attention"
    pointers = layout.endswith("(pointers)")  # the tensors themselves (no templates), or their descriptors' fields
    assert (module._FAST[key][-1] is None) == pointers
    plans = []
    plan = module._attention_launch.plan
    module._attention_launch.plan = lambda *args: plans.append(1) or plan(*args)
    try:
        seen = _counted(module)
        for _ in range(2):  # the kept launch, each call's own values
            q, k, v = (x.clone().normal_(generator=g) for x in (q, k, v))
            o, lse = module.attention(q, k, v, 0.3)
            want_o, want_lse = module.reference(q, k, v, 0.3)
            torch.testing.assert_close(o, want_o, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)
    finally:
        module._attention_launch.plan = plan
    assert seen == [1, 1] and plans == []


@pytest.mark.parametrize("layout", ["descriptors", "odd K (pointers)"])
def test_a_split_loop_in_parts_takes_the_fast_path_and_sums_its_parts(generated, layout):
    """A matmul whose K loop runs in parts (two output tiles, K much longer than M and N: a
    weight's gradient over many tokens) keeps its launch too: the fast path makes the workspace
    of the partial sums, launches, and adds the parts up, each call on its own values."""
    module = generated("matmul_fast")
    k = 1027 if layout == "odd K (pointers)" else 1024
    g = torch.Generator().manual_seed(k)
    a, b = torch.randn(8, k, generator=g), torch.randn(k, 40, generator=g)
    config = module._CONFIGS[module._tuner.default].kwargs
    assert module._split_grid(8, 40, k, config["BM"], config["BN"], config["BK"], torch.device("cpu"))[1] > 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
        first = module.matmul_fast(a, b)
    seen = _counted(module)
    for x in (a, torch.randn(8, k, generator=g)):  # the same key: the kept launch, each call's own sum
        torch.testing.assert_close(module.matmul_fast(x, b), x @ b, atol=1e-4, rtol=1e-4)
    assert seen == [1, 1]
    assert torch.equal(module.matmul_fast(a, b), first)


def test_a_launcher_with_stages_takes_the_fast_path(generated):
    """batch_norm's stage (each channel's shift and scale, a kernel of its own) runs first on the
    fast path too, through its own launcher."""
    module = generated("batch_norm")
    g = torch.Generator().manual_seed(5)
    args = (torch.randn(3, 4, 5, 7, generator=g), torch.randn(4, generator=g), torch.randn(4, generator=g), 1e-5)
    first = module.batch_norm(*args)
    seen = _counted(module)
    second = module.batch_norm(*args)
    assert len(seen) == 2  # the stage's launch and the kernel's, both kept
    assert torch.equal(first, second)
    torch.testing.assert_close(second, module.reference(*args), atol=1e-5, rtol=1e-4)


def _compiling_on_the_cpu(module, monkeypatch):
    """Make ``module``'s launches take the GPU's path of the runtime's Launch on the CPU: Triton's
    compile replaced by the interpreter's launch of what the compiled kernel's launcher gets (every
    argument by position, constexprs last), with new tables; the inputs' device check passes CPU
    tensors. Returns the compile keys it sees."""
    compiles = []

    def compile_launch(compiled, key, kernel, grid, *args, **meta):
        assert key not in compiled
        compiles.append(key)
        compiled[key] = lambda grid, device_index, *passed: kernel[grid](*passed)
        return compiled[key]

    monkeypatch.setattr(module._rt, "INTERPRET", False)
    monkeypatch.setattr(module._rt, "bad_device", lambda launcher, **tensors: None)  # CPU tensors pass as a GPU's
    monkeypatch.setattr(module._rt, "compile_launch", compile_launch)
    monkeypatch.setattr(module, "_COMPILED", {})
    if hasattr(module, "_tuner"):
        monkeypatch.setattr(module._tuner, "fast", {})
    monkeypatch.setattr(module, "_FAST", module._tuner.fast if hasattr(module, "_tuner") else {})
    return compiles


@pytest.mark.parametrize("name,given,launcher", [
    ("copy", {}, "copy"), ("softmax", {}, "softmax"), ("cross_entropy_backward", {}, "cross_entropy_backward"),
    ("embedding", {}, "embedding"), ("rope", {}, "rope"), ("matmul_tutorial", {}, "matmul_tutorial"),
    ("attention_causal", {"D": 61}, "_attention_causal_pointers"), ("attention_causal", {"D": 64}, "attention_causal"),
    ("geglu_backward", {}, "geglu_backward"), ("argmax_dim1", {}, "argmax_dim1"), ("add_single", {}, "add_single"),
])
def test_the_compiled_launch_computes_what_the_reference_does(generated, monkeypatch, name, given, launcher):
    """Every kind of launcher through the runtime's Launch, on the GPU's path
    (:func:`_compiling_on_the_cpu`): untuned and tuned kernels, an in-place one, integer inputs,
    scalars, several outputs, TMA descriptors (the interpreter emulates them; rows of 64 f16 are
    16-byte aligned) and their pointer fallback (61). Twice: the second call is the fast path's.
    ``launcher`` is the one that compiles."""
    from tests.conftest import spec_named
    from tilegen import model as m
    from tilegen.runner import compare, default_sizes, random_inputs

    module = generated(name)
    compiles = _compiling_on_the_cpu(module, monkeypatch)
    spec = m.specialize(spec_named(name), spec_named(name).bindings()[0])
    args = list(random_inputs(spec, default_sizes(spec, 3, given), "cpu", 1).values())
    for _ in range(2):
        error, passed = compare(getattr(module, name)(*args), module.reference(*args), spec, args, module.reference)
        assert passed, f"{name}: max error {error}"
    assert [key[0] for key in compiles] == [launcher]


def test_the_compiled_launch_takes_every_argument_by_position_and_compiles_once_per_specialization(
        generated, monkeypatch):
    """The GPU's path of the runtime's Launch, run on the CPU (:func:`_compiling_on_the_cpu`): the
    outputs are right; a call like an earlier one compiles nothing; another pointer alignment or
    dtype compiles its own kernel."""
    module = generated("rms_norm")
    compiles = _compiling_on_the_cpu(module, monkeypatch)
    x, w = torch.randn(5, 37), torch.randn(37)
    torch.testing.assert_close(module.rms_norm(x, w, 1e-6), module.reference(x, w, 1e-6))
    assert len(compiles) == 1 and compiles[0][0] == "rms_norm"
    other = torch.randn(5, 37)
    torch.testing.assert_close(module.rms_norm(other, w, 1e-6), module.reference(other, w, 1e-6))  # kept
    module._FAST.clear()  # the full path again: the compiled kernel of this specialization is there
    torch.testing.assert_close(module.rms_norm(x, w, 1e-6), module.reference(x, w, 1e-6))
    assert len(compiles) == 1
    shifted = torch.randn(5, 38)[:, 1:]  # a pointer 4 bytes past a 16-byte boundary
    torch.testing.assert_close(module.rms_norm(shifted, w, 1e-6), module.reference(shifted, w, 1e-6))
    halves = x.half(), w.half()
    torch.testing.assert_close(module.rms_norm(*halves, 1e-6), module.reference(*halves, 1e-6), atol=2e-3, rtol=2e-3)
    assert len(compiles) == 3 == len(set(compiles))


def test_a_launch_is_kept_in_the_modules_table_as_it_is_then(generated, monkeypatch):
    """The runtime's Launch keeps a launch in the module's ``_FAST`` of the moment: a table put in
    its place (a test's, a benchmark's) gets it, and the one it replaced does not."""
    module = generated("copy")
    before, fresh = module._FAST, {}
    monkeypatch.setattr(module, "_FAST", fresh)
    x = torch.randn(10)
    kept = set(before)
    torch.testing.assert_close(module.copy(x), x)
    assert len(fresh) == 1 and set(before) == kept


def test_a_launch_refuses_a_kernel_with_a_constexpr_before_another_parameter(generated):
    """The compiled launch passes the constexprs last, by position: a kernel whose signature has
    them elsewhere is refused when its Launch is made, not launched with its arguments shifted."""
    import triton
    import triton.language as tl

    def kernel(x_ptr, BLOCK: tl.constexpr, n):
        pass

    rt = generated("copy")._rt
    with pytest.raises(AssertionError, match="a constexpr before another parameter"):
        rt.Launch({"kernel": triton.jit(kernel)}, "kernel", "kernel", pointers=1)
    good = rt.Launch({"kernel": triton.jit(lambda x_ptr, n, BLOCK: None)}, "kernel", "kernel", pointers=1)
    assert good.constexprs == () and good.arg_names == ("x_ptr", "n", "BLOCK")


@pytest.mark.parametrize("name,compiled", [
    ("mse_loss", ["mse_loss", "mse_loss_finish_kernel"]),
    ("rms_norm_backward", ["rms_norm_backward", "rms_norm_backward_finish_kernel"]),
    ("batch_norm", ["_batch_norm_shift", "_batch_norm_shift_finish_shift_reduced_kernel",
                    "_batch_norm_shift_finish_square_reduced_kernel", "batch_norm"]),
])
def test_the_compiled_launch_runs_the_finish_kernels_after_the_kernel(generated, monkeypatch, name, compiled):
    """A kernel whose stores reduce across programs, on the GPU's path of the runtime's Launch
    (:func:`_compiling_on_the_cpu`): the workspaces made for the config it runs, each finish kernel
    compiled once and launched after the kernel (a loss's one number, a weight gradient's column
    sums from a persistent kernel, a stage's two per-channel sums); the second call, on new
    values, is the fast path's and compiles nothing."""
    from tests.conftest import spec_named
    from tilegen import model as m
    from tilegen.runner import compare, default_sizes, random_inputs

    module = generated(name)
    compiles = _compiling_on_the_cpu(module, monkeypatch)
    spec = m.specialize(spec_named(name), spec_named(name).bindings()[0])
    sizes = default_sizes(spec, 3)
    for seed in (1, 2):
        args = list(random_inputs(spec, sizes, "cpu", seed).values())
        error, passed = compare(getattr(module, name)(*args), module.reference(*args), spec, args, module.reference)
        assert passed, f"{name}, seed {seed}: max error {error}"
    assert [key[0] for key in compiles] == compiled


def test_a_float_scalars_new_value_takes_the_fast_path_with_that_value(generated):
    """A float scalar the kernel only takes as an argument is not part of the key: an optimizer's
    learning rate and step, new each call, launch through the fast path, each with its own value
    (and an int given for a float, converted as the checks convert it)."""
    adamw = generated("adamw")
    g = torch.Generator().manual_seed(0)
    param, grad, exp_avg = (torch.randn(300, generator=g) for _ in range(3))
    exp_avg_sq = torch.rand(300, generator=g)
    adamw.adamw(param, grad, exp_avg, exp_avg_sq, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0)
    seen, kept = _counted(adamw), len(adamw._FAST)  # (the module is shared: other tests' calls kept too)
    for lr, step in ((2e-3, 2.0), (5e-4, 3.0), (1, 4)):
        got = adamw.adamw(param, grad, exp_avg, exp_avg_sq, lr, 0.9, 0.999, 1e-8, 0.01, step)
        for out, want in zip(got, adamw.reference(param, grad, exp_avg, exp_avg_sq, lr, 0.9, 0.999, 1e-8, 0.01, step),
                             strict=True):
            torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-7)
    assert seen == [1, 1] and len(adamw._FAST) == kept + 1  # an int is keyed by its value: the full path, kept
    adamw.adamw(param, grad, exp_avg, exp_avg_sq, 2, 0.9, 0.999, 1e-8, 0.01, 4)
    assert len(seen) == 2 and len(adamw._FAST) == kept + 2


def test_a_scalar_whose_sign_picks_the_kernels_reduction_stays_in_the_key(generated):
    """attention's scale sets a constexpr from its sign (the kernel reduces scale-scaled tiles
    unscaled, taking the max or the min), so the key keeps its value; a float scalar that is only
    an argument (matrix_scalar's s) is keyed by its type."""
    assert "scale, type(scale)" in inspect.getsource(generated("attention_causal").attention_causal)
    source = inspect.getsource(generated("matrix_scalar").matrix_scalar)
    assert "s, type(s)" not in source and "type(s), s if type(s) is not float else None" in source


def test_a_pointer_kernels_configs_are_its_descriptor_kernels_without_their_pre_hook(generated):
    """attention's pointer kernel tunes over the descriptor kernel's configs (one tuner, one index
    per config), written as _rt.configs_like: the same keywords and options, no pre_hook."""
    module = generated("attention")
    assert len(module._POINTER_CONFIGS) == len(module._CONFIGS)
    for pointers, descriptors in zip(module._POINTER_CONFIGS, module._CONFIGS, strict=True):
        assert descriptors.pre_hook is module._descriptor_blocks and pointers.pre_hook is None
        assert pointers.all_kwargs() == descriptors.all_kwargs()
