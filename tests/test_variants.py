"""Issue-3 variants against their hand-written seed kernels (bit-exact, same config) and torch.

Runs in Triton's interpreter, where an autotuned launcher runs its spec's interpreter config; the
hand-written kernel is launched with that same config. Shapes are odd, prime, 1 and non-square,
with K below the block where the spec masks K.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT, spec_named, specs_find
from tests.reference import add as ref_add
from tests.reference import matmul as ref_matmul
from tests.reference import matmul_intel as ref_intel
from tests.reference import matmul_tutorial as ref_tutorial
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse
from tilegen.runner import load_module
from tilegen.tolerance import assert_close


def _rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _close(out, ref, atol, rtol):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol)


#: matmul_fast's dtype variable T: f16, bf16 and f32 (tf32 dot)
MATMUL_FAST_DTYPES = [("matmul_fast", dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32)]


def _within(kernel, args, out, reference):
    """``out`` is within tilegen.tolerance's bound of ``reference(*args)`` (the module's
    reference, or torch), under the spec of ``kernel``: the rule ``tilegen run`` and the demo use."""
    assert_close(spec_named(kernel), args, out, reference(*args), reference)


def _default_index(module):
    """Index of the config a generated launcher runs in the interpreter (its spec's default)."""
    text = (ROOT / "specs" / f"{module.__name__.removeprefix('tilegen_generated_')}.tile").read_text()
    spec = parse(text, "x.tile")
    return spec.tune.configs.index(spec.default_config())


# ------------------------------------------------------------------------------- vector add


@pytest.mark.parametrize("n", [1, 7, 1000, 4099])
def test_add_and_add_loop_match_seeds(generated, n):
    x, y = _rand(n, dtype=torch.float32, seed=n), _rand(n, dtype=torch.float32, seed=n + 1)
    z = generated("add").add(x, y, BLOCK_SIZE=256)
    assert torch.equal(z, ref_add.add(x, y, block_size=256))
    assert torch.equal(z, x + y)
    z = generated("add_loop").add_loop(x, y, BLOCK_SIZE=256)
    assert torch.equal(z, ref_add.add_fine_grained(x, y, block_size=256))
    assert torch.equal(z, generated("add_loop").reference(x, y))


@pytest.mark.parametrize("n", [1, 16, 1024])
def test_add_single_is_one_program_over_the_whole_vector(generated, n):
    x, y = _rand(n, dtype=torch.float32, seed=n), _rand(n, dtype=torch.float32, seed=n + 1)
    z = generated("add_single").add_single(x, y)
    assert torch.equal(z, ref_add.add_single(x, y))
    assert torch.equal(z, x + y)


@pytest.mark.parametrize("n", [3, 1000])
def test_add_single_pads_any_length_to_one_masked_tile(generated, n):
    """A whole axis is one tile of the next power of two, masked: any length works (the seed's
    kernel, whose tile is N itself, takes powers of two only)."""
    x, y = _rand(n, dtype=torch.float32, seed=n), _rand(n, dtype=torch.float32, seed=n + 1)
    assert torch.equal(generated("add_single").add_single(x, y), x + y)


def test_add_single_loops_past_one_tile(generated):
    """Past _WHOLE_LIMIT (8192) the one program loops over tiles of the vector (tilegen.lower.rows),
    past Triton's largest tile (2**20 elements) too."""
    n = 2**20 + 1
    x, y = _rand(n, dtype=torch.float32, seed=1), _rand(n, dtype=torch.float32, seed=2)
    assert torch.equal(generated("add_single").add_single(x, y), x + y)


def test_add_strided_views(generated):
    base = _rand(3000, dtype=torch.float32)
    x, y = base[::3], base[1::3]
    assert torch.equal(generated("add").add(x, y, BLOCK_SIZE=64), x + y)
    assert torch.equal(generated("add_loop").add_loop(x, y, BLOCK_SIZE=64), x + y)


# ------------------------------------------------------------------------------- tutorial 03


TUTORIAL_SHAPES = [(1, 32, 1), (37, 64, 41), (53, 96, 29), (64, 32, 128)]


@pytest.mark.parametrize("activation", ["none", "leaky_relu"])
@pytest.mark.parametrize("m,k,n", TUTORIAL_SHAPES)
def test_tutorial_matches_seed_reference_and_torch(generated, m, k, n, activation):
    mod = generated("matmul_tutorial")
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = mod.matmul_tutorial(a, b, activation=activation)
    config = dict(mod._CONFIGS[_default_index(mod)].kwargs)
    assert torch.equal(c, ref_tutorial.matmul(a, b, activation=activation, config=config))
    _within("matmul_tutorial", (a, b), c, lambda a, b: mod.reference(a, b, activation=activation))
    expected = a.float() @ b.float()
    if activation == "leaky_relu":
        expected = F.leaky_relu(expected, 0.01)
    _close(c, expected.half(), 1e-2, 1e-2)


def test_tutorial_transposed_operands_are_views_not_copies(generated):
    mod = generated("matmul_tutorial")
    at, bt = _rand(64, 37, seed=1), _rand(29, 64, seed=2)
    a, b = at.t(), bt.t()
    assert not a.is_contiguous() and not b.is_contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = mod.matmul_tutorial(a, b)
    config = dict(mod._CONFIGS[_default_index(mod)].kwargs)
    assert torch.equal(c, ref_tutorial.matmul(a.contiguous(), b.contiguous(), config=config))


def test_tutorial_refuses_unknown_activation_and_unmasked_k(generated):
    mod = generated("matmul_tutorial")
    with pytest.raises(ValueError, match="activation must be one of none, leaky_relu, got 'gelu'"):
        mod.matmul_tutorial(_rand(4, 32), _rand(32, 4), activation="gelu")
    with pytest.raises(ValueError, match=r"K = 33 must be a multiple of BLOCK_SIZE_K = 32 \(the largest"):
        mod.matmul_tutorial(_rand(4, 33), _rand(33, 4))


def test_interpreter_says_once_which_config_it_runs(tmp_path, monkeypatch):
    """Once per process, for every launcher: the spec's default config (config 9 of matmul_tutorial's
    10, its docstring says), and how to run another."""
    monkeypatch.setattr(torch.ops.tilegen, "_interpreter_told", False, raising=False)  # a process not told yet
    text = (ROOT / "specs" / "matmul_tutorial.tile").read_text()
    path = tmp_path / "matmul_tutorial.py"
    path.write_text(compile_spec(text, "specs/matmul_tutorial.tile").source)
    mod = load_module(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            mod.matmul_tutorial(_rand(8, 32), _rand(32, 8))
    notices = [w for w in caught if "cannot time autotune configs" in str(w.message)]
    assert len(notices) == 1
    assert "runs its spec's interpreter config" in str(notices[0].message) and "config=N" in str(notices[0].message)
    assert "untuned, a GPU runs config 9 and the Triton interpreter config 9, unless one is forced" in (
        mod.matmul_tutorial.__doc__)
    assert mod._tuner.tuned and set(mod._tuner.tuned.values()) == {9}
    assert notices[0].filename == __file__  # reported at the caller's line


# ------------------------------------------------------------------------------- lecture 14 autotuned


@pytest.mark.parametrize("m,k,n", [(1, 64, 1), (37, 64, 41), (61, 128, 17)])
def test_grouped_autotuned_matches_seed(generated, m, k, n):
    mod = generated("matmul_grouped_autotuned")
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = mod.matmul_grouped_autotuned(a, b)
    cfg = mod._CONFIGS[_default_index(mod)].kwargs
    seed_config = {"bm": cfg["BM"], "bn": cfg["BN"], "bk": cfg["BK"], "group_sz": cfg["GROUP_SIZE"]}
    assert torch.equal(c, ref_matmul.grouped_autotuned_matmul(a, b, config=seed_config))
    _within("matmul_grouped_autotuned", (a, b), c, mod.reference)


def test_tuned_unmasked_k_must_divide_by_every_config(generated):
    # BK is 64 in one config and 32 in the rest: K = 96 fits the default but not all configs.
    with pytest.raises(ValueError, match="K = 96 must be a multiple of BK = 64"):
        generated("matmul_grouped_autotuned").matmul_grouped_autotuned(_rand(4, 96), _rand(96, 4))


# ------------------------------------------------------------------------------- Intel guide


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 7, 41), (53, 29, 31), (64, 97, 64), (3, 64, 130)])
def test_kmasked_matches_seed_with_wrapped_offsets_and_k_tail(generated, m, k, n):
    mod = generated("matmul_kmasked")
    a, b = _rand(m, k, seed=m + k), _rand(k, n, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = mod.matmul_kmasked(a, b)
    config = dict(mod._CONFIGS[_default_index(mod)].kwargs)
    assert torch.equal(c, ref_intel.matmul_dummy(a, b, config=config))
    _close(c, (a.float() @ b.float()).half(), 1e-2, 1e-2)


def test_kmasked_source_wraps_loads_and_masks_stores():
    text = (ROOT / "generated" / "matmul_kmasked.py").read_text()
    assert "offs_m_wrapped = offs_m % M" in text
    assert "a_ptrs = a_ptr + offs_m_wrapped[:, None] * stride_a_m" in text
    assert "mask_k = offs_k < K - k * BLOCK_SIZE_K" in text
    assert "tl.store(c_ptrs, accumulator.to(tl.float16), mask=mask_mn)" in text


# the hand-written seed needs block pointers (Triton 3.9 removed them; the generated launcher
# then runs its pointer kernel, tested below): the generated module's own test says which
_HAS_BLOCK_POINTERS = load_module(ROOT / "generated" / "matmul_block_ptr.py")._BLOCK_POINTERS
block_ptr_reason = None if _HAS_BLOCK_POINTERS else "this Triton has no block pointers"


@pytest.mark.skipif(block_ptr_reason is not None, reason=str(block_ptr_reason))
@pytest.mark.parametrize("m,k,n", [(1, 32, 1), (37, 64, 41), (64, 96, 128)])
def test_block_ptr_matches_seed(generated, m, k, n):
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    c = generated("matmul_block_ptr").matmul_block_ptr(a, b)
    assert torch.equal(c, ref_intel.matmul_block_ptr(a, b))
    _within("matmul_block_ptr", (a, b), c, lambda a, b: a.float() @ b.float())


@pytest.mark.parametrize("m,k,n", [(1, 32, 1), (37, 64, 41), (64, 96, 128)])
def test_block_ptr_launcher_runs_on_a_triton_without_block_pointers(generated, monkeypatch, m, k, n):
    """Without block pointers (Triton 3.9; forced here where they exist) the launcher returns
    through the same spec's TMA-descriptor kernel, which returns through its pointer kernel
    where rows are not 16-byte aligned (N = 1 or 41: b's f16 rows and c's f32 rows), with the
    seed's result."""
    mod = generated("matmul_block_ptr")
    monkeypatch.setattr(mod, "_BLOCK_POINTERS", False)
    calls = []
    for variant in ("descriptors", "pointers"):
        launcher = getattr(mod, f"_matmul_block_ptr_{variant}")
        monkeypatch.setattr(mod, f"_matmul_block_ptr_{variant}",
                            lambda *args, launcher=launcher, variant=variant, **kw: calls.append(variant)
                            or launcher(*args, **kw))
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    c = mod.matmul_block_ptr(a, b)
    aligned = (n * 2) % 16 == 0 and (k * 2) % 16 == 0
    assert calls == (["descriptors"] if aligned else ["descriptors", "pointers"])
    assert c.dtype == torch.float32 and c.shape == (m, n)
    _within("matmul_block_ptr", (a, b), c, lambda a, b: a.float() @ b.float())
    if block_ptr_reason is None:
        assert torch.equal(c, ref_intel.matmul_block_ptr(a, b))


def test_block_ptr_source_uses_make_block_ptr_and_advance():
    text = (ROOT / "generated" / "matmul_block_ptr.py").read_text()
    assert "a_block_ptr = tl.make_block_ptr(a_ptr, shape=(M, K)" in text
    assert "a_block_ptr = tl.advance(a_block_ptr, (0, BLOCK_SIZE_K))" in text
    assert "b_block_ptr = tl.advance(b_block_ptr, (BLOCK_SIZE_K, 0))" in text
    assert "tl.store(c_block_ptr, accumulator, boundary_check=(0, 1))" in text
    assert "tl.program_id(1)" not in text  # a 1D grid


# ------------------------------------------------------------------------------- beyond the seeds


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 7, 41), (53, 67, 29)])
def test_bf16_epilogue_matches_torch(generated, m, k, n):
    mod = generated("matmul_epilogue")
    a, b = _rand(m, k, dtype=torch.bfloat16, seed=m), _rand(k, n, dtype=torch.bfloat16, seed=n)
    bias, residual = _rand(n, dtype=torch.float32, seed=3), _rand(m, n, dtype=torch.bfloat16, seed=4)
    c = mod.matmul_epilogue(a, b, bias, residual, 0.5)
    expected = F.gelu(0.5 * (a.float() @ b.float()) + bias, approximate="tanh") + residual.float()
    _close(c, expected.bfloat16(), 5e-2, 2e-2)
    _within("matmul_epilogue", (a, b, bias, residual, 0.5), c, mod.reference)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_scalar_inputs_of_16_bit_floats_are_refused(dtype):
    """A Python float reaches a kernel as f32 or f64 (tests/test_scalar_f64.py): a spec cannot
    promise a 16-bit one."""
    source = f"kernel s\n  in x: f32[N]\n  in a: {dtype}\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n"
    with pytest.raises(SpecError, match=f"scalar 'a' is {dtype}, but a kernel takes a Python number as f32 or f64"):
        compile_spec(source + "  z[i] = x[i] * a\n", "s.tile")


def test_scalar_input_must_be_a_number(generated):
    mod = generated("matmul_epilogue")
    args = (_rand(4, 4, dtype=torch.bfloat16),) * 2 + (torch.zeros(4), _rand(4, 4, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="alpha must be a Python float, got Tensor"):
        mod.matmul_epilogue(*args, torch.tensor(0.5))


# K = 512: a long sum of products in float32 (the M x N of the output only repeats it, program by program)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 7, 41), (97, 61, 53), (64, 512, 64)])
def test_f32_ieee_matches_torch_to_1e4_relative(generated, m, k, n):
    a, b = _rand(m, k, dtype=torch.float32, seed=m), _rand(k, n, dtype=torch.float32, seed=n)
    c = generated("matmul_f32").matmul_f32(a, b)
    expected = a @ b
    _within("matmul_f32", (a, b), c, torch.matmul)
    assert ((c - expected).norm() / expected.norm()).item() < 1e-4


@pytest.mark.parametrize("batch,m,k,n", [(1, 1, 1, 1), (3, 37, 7, 41), (2, 64, 40, 17)])
def test_batched_matmul_over_a_third_grid_axis(generated, batch, m, k, n):
    mod = generated("matmul_batched")
    a = _rand(batch, m, k, seed=m)
    bt = _rand(batch, n, k, seed=n)
    b = bt.transpose(1, 2)  # a strided view: [B, K, N] with K the fastest dimension
    c = mod.matmul_batched(a, b)
    _close(c, torch.bmm(a.float(), b.float()).half(), 1e-2, 1e-2)
    assert torch.equal(c, mod.reference(a, b))


@pytest.fixture(scope="module")
def activations(tmp_path_factory):
    spec = ROOT / "tests" / "specs" / "activations.tile"
    path = tmp_path_factory.mktemp("gen") / "activations.py"
    path.write_text(compile_spec(spec.read_text(), "tests/specs/activations.tile").source)
    return load_module(path)


TORCH_ACTIVATIONS = {
    "none": lambda x: x,
    "relu": torch.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "gelu": F.gelu,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
}


@pytest.mark.parametrize("act", list(TORCH_ACTIVATIONS))
def test_activations_match_torch(activations, act):
    x = _rand(300, dtype=torch.float32, seed=7) * 4
    outs = activations.activations(x, 2.5, act=act)
    expected = (
        torch.relu(x),
        F.leaky_relu(x, 0.2),
        F.gelu(x),
        F.gelu(x, approximate="tanh"),
        torch.sigmoid(x),
        F.silu(x),
        TORCH_ACTIVATIONS[act](x),
        (-x * 2.5 + 1).half(),
    )
    for out, want in zip(outs, expected, strict=True):
        _close(out, want, 1e-5, 1e-5)
    for out, want in zip(outs, activations.reference(x, 2.5, act=act), strict=True):
        _close(out, want, 1e-5, 1e-5)


@pytest.mark.parametrize("name,dtype", MATMUL_FAST_DTYPES)
@pytest.mark.parametrize("m,k,n", [(1, 8, 8), (37, 40, 48), (100, 24, 72), (97, 136, 64)])
def test_persistent_descriptor_matmul_matches_torch(generated, name, dtype, m, k, n):
    """TMA descriptors bound every tile, so M, N and K tails need no masks."""
    mod = generated(name)
    a, b = _rand(m, k, dtype=dtype, seed=m), _rand(k, n, dtype=dtype, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = getattr(mod, name)(a, b)
    tol = (1e-2, 1e-2) if dtype == torch.float16 else (5e-2, 2e-2)
    _close(c, (a.float() @ b.float()).to(dtype), *tol)
    _within(name, (a, b), c, mod.reference)


@pytest.mark.parametrize("name,dtype", MATMUL_FAST_DTYPES)
@pytest.mark.parametrize(
    "case,tma",
    [
        ("b column-major", True),  # an nn.Linear weight, b = w.t(): a descriptor over w, tiles transposed
        ("a column-major", True),
        ("both column-major", True),
        ("b column-major, odd K", False),  # w's rows of 41 halves are not 16-byte aligned
        ("odd K", False),
        ("K = 0", False),  # a descriptor's shape must be positive
        ("N not a multiple of 8", False),  # the new output's rows are not 16-byte aligned
        ("a misaligned base", False),
        ("b with two unit strides", False),  # a view that is neither row- nor column-major
        ("no TMA", False),  # a Triton without host-side descriptors, or a GPU before Hopper
    ],
)
def test_descriptor_launcher_takes_every_layout(generated, monkeypatch, name, dtype, case, tma):
    """A valid matmul is never refused: row- and column-major operands run on TMA descriptors
    (a column-major one through a descriptor of its transpose); layouts, alignments and GPUs TMA
    cannot serve run the same spec's pointer kernel, and only those do."""
    mod = generated(name)
    m, k, n = 37, 40, 48
    if "odd K" in case:
        k = 41
    elif case == "K = 0":
        k = 0
    elif case == "N not a multiple of 8":
        n = 44 if dtype != torch.float32 else 42  # rows of 88 (or 168) bytes
    if case in ("a column-major", "both column-major"):
        m = 48  # a.T's rows: 16-byte aligned
    a, b = _rand(m, k, dtype=dtype, seed=1), _rand(k, n, dtype=dtype, seed=2)
    if "b column-major" in case or case == "both column-major":
        b = _rand(n, k, dtype=dtype, seed=2).t()
    if case in ("a column-major", "both column-major"):
        a = _rand(k, m, dtype=dtype, seed=1).t()
    elif case == "a misaligned base":
        a = _rand(m * k + 1, dtype=dtype, seed=1)[1:].view(m, k)
    elif case == "b with two unit strides":
        b = _rand(k + n, dtype=dtype, seed=2).as_strided((k, n), (1, 1))
    elif case == "no TMA":
        monkeypatch.setattr(mod._rt, "TensorDescriptor", None)  # what the runtime's has_tma reads
        mod._has_tma.cache_clear()
        monkeypatch.setattr(mod, "_FAST", {})  # launches kept while descriptors existed: another process's
    calls = []
    pointers = getattr(mod, f"_{name}_pointers")
    monkeypatch.setattr(mod, f"_{name}_pointers", lambda *args, **kw: calls.append(1) or pointers(*args, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = getattr(mod, name)(a, b)
    mod._has_tma.cache_clear()
    assert len(calls) == (not tma)
    assert c.shape == (m, n) and c.dtype == dtype and c.is_contiguous()
    tol = (1e-2, 1e-2) if dtype == torch.float16 else (5e-2, 2e-2)
    _close(c, (a.float() @ b.float()).to(dtype), *tol)
    _within(name, (a, b), c, mod.reference)


def test_column_major_operands_read_transposed_descriptor_tiles():
    text = (ROOT / "generated" / "matmul_fast.py").read_text()
    assert "b_desc = TensorDescriptor(b, [N, K], [_b_strides[1], 1], [1, 1])" in text
    assert "b = b_desc.load([pid_n * BN, k * BK]).T" in text
    assert 'nargs["b_desc"].block_shape = [nargs["BN"], nargs["BK"]] if nargs["B_T"] else' in text


@pytest.fixture(scope="module")
def persistent(tmp_path_factory):
    spec = ROOT / "tests" / "specs" / "matmul_persistent.tile"
    path = tmp_path_factory.mktemp("gen") / "matmul_persistent.py"
    path.write_text(compile_spec(spec.read_text(), "tests/specs/matmul_persistent.tile").source)
    return load_module(path), path.read_text()


@pytest.mark.parametrize("m,k,n", [(1, 8, 8), (100, 40, 136), (129, 24, 64)])
def test_persistent_programs_cover_every_tile(persistent, m, k, n):
    """Four programs (the interpreter's SM count) loop over up to 25 tiles of 32 x 32."""
    module, _ = persistent
    a, b = _rand(m, k, seed=m), _rand(k, n, seed=n)
    _close(module.matmul_persistent(a, b), (a.float() @ b.float()).half(), 1e-2, 1e-2)


def test_persistent_source_loops_over_tiles(persistent):
    _, text = persistent
    assert "for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):" in text
    assert "lambda meta: (min(NUM_SMS, ((M + BM - 1) // BM) * ((N + BN - 1) // BN)), 1, 1)" in text


def test_descriptor_source_loads_through_host_descriptors():
    text = (ROOT / "generated" / "matmul_fast.py").read_text()
    # the second row piece's descriptors (configs of 192 and 320 rows) follow the tiles' descriptors,
    # and with split tail the descriptors of the last wave's sub-tiles follow those
    descriptors = ("a_desc, b_desc, c_desc, a_piece_desc, c_piece_desc, a_tail_desc, b_tail_desc, c_tail_desc, "
                   "partials_ptr")
    assert f"def matmul_fast_kernel(\n    {descriptors},\n" in text
    assert "a = a_desc.load([pid_m * BM, k * BK])" in text
    assert "T = a_desc.dtype" in text  # dtype T: f16 or bf16, read off a's descriptor
    assert "c_desc.store([pid_m * BM, pid_n * BN], acc.to(T))" in text
    assert "a_desc = TensorDescriptor(a, [M, K], [*_a_strides], [1, 1])" in text
    assert 'else [first, nargs["BK"]]' in text  # BM's first row piece: BM itself for a power of two


BATCHED_DESCRIPTORS = (
    (ROOT / "specs" / "matmul_batched.tile").read_text()
    .replace("n over N by BN\n", "n over N by BN\n  access descriptor\n")
)


@pytest.fixture(scope="module")
def batched_descriptors(tmp_path_factory):
    path = tmp_path_factory.mktemp("batched") / "matmul_batched.py"
    text = compile_spec(BATCHED_DESCRIPTORS, "matmul_batched.tile").source
    path.write_text(text)
    return load_module(path), text


@pytest.mark.parametrize("tma", [True, False])
@pytest.mark.parametrize("batch,m,k,n", [(1, 1, 8, 8), (3, 37, 24, 41), (2, 64, 40, 24)])
def test_descriptors_take_index_axes_as_blocks_of_one(batched_descriptors, monkeypatch, tma, batch, m, k, n):
    """A 3D descriptor per tensor: the batch index axis is a block of 1, reshaped away in the
    kernel (``a_desc.load([pid_batch, pid_m * BM, k * BK]).reshape(BM, BK)``); without TMA the
    same spec runs through pointers."""
    mod, text = batched_descriptors
    assert "a = a_desc.load([pid_batch, pid_m * BM, k * BK]).reshape(BM, BK)" in text
    assert "c_desc.store([pid_batch, pid_m * BM, pid_n * BN], (acc.to(tl.float16)).reshape(1, BM, BN))" in text
    assert "a_desc = TensorDescriptor(a, [B, M, K], [*_a_strides], [1, BM, BK])" in text
    if not tma:
        monkeypatch.setattr(mod, "_has_tma", lambda device: False)
    a, b = _rand(batch, m, k, seed=m), _rand(batch, k, n, seed=n)
    _close(mod.matmul_batched(a, b), torch.bmm(a.float(), b.float()).half(), 1e-2, 1e-2)


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("acc += dot(a[batch, m, k], b[batch, k, n])", "acc += a[batch, 0, 0]",
         "bad.tile:12:12: error: 'a[...]' is one element; tensor descriptors move tiles"),
        ("in  a: f16[B, M, K]", "in  a: f16[B, M, K, 2, 2, 2]",
         "bad.tile:4:7: error: tensor descriptors (TMA) address at most 5 dimensions; 'a' has 6"),
    ],
)
def test_descriptors_refuse_one_element_and_more_than_five_dimensions(old, new, message):
    with pytest.raises(SpecError) as info:
        check(parse(BATCHED_DESCRIPTORS.replace(old, new), "bad.tile"))
    assert message in info.value.render()


ROWS_3D = """kernel t
  in  x: f32[Z, M, C]
  out y: f32[Z, M, C]
  block BM = 16, BC = 16
  grid  z over Z, m over M by BM, c over C by BC
  access descriptor
  y[z, m, c] = {value}
"""


@pytest.mark.parametrize(
    "value,message",
    [
        # columns: the second access's tensor name in "  y[z, m, c] = x[z, m, c] - x[z, 0, c]"
        ("x[z, m, c] - x[z, 0, c]", "bad.tile:7:29: error: 'x' is accessed in blocks of [1, BM, BC] and of [1, 1, BC]"),
        ("x[z, m, 0]", "bad.tile:7:16: error: the last index of 'x' is not a tile axis: a tensor descriptor moves "
                       "rows of 16 bytes or more"),
    ],
)
def test_descriptors_refuse_two_block_shapes_and_a_unit_last_dimension(value, message):
    with pytest.raises(SpecError) as info:
        check(parse(ROWS_3D.format(value=value), "bad.tile"))
    assert message in info.value.render()


ROWS_2D = """kernel t
  in  x: f32[N, C]
  out y: f32[N, C]
  block BC = 16
  grid  i over N, c over C by BC
  access descriptor
  y[i, c] = x[i, c] * 2.0
"""


@pytest.mark.parametrize("column_major", [False, True])
def test_a_2d_descriptor_with_an_index_axis_takes_rows(tmp_path, column_major):
    """A block of 1 row per program: no column-major flag for it (its transpose would have a
    unit last dimension), so a column-major x runs the pointer kernel."""
    text = compile_spec(ROWS_2D, "t.tile").source
    assert "X_T" not in text and "x = x_desc.load([pid_i, pid_c * BC]).reshape(BC)" in text
    path = tmp_path / "t.py"
    path.write_text(text)
    x = torch.randn(40, 7).t() if column_major else torch.randn(7, 40)
    torch.testing.assert_close(load_module(path).t(x), x * 2.0)


def test_an_untuned_descriptor_spec_with_a_whole_axis_launches(tmp_path):
    """The whole axis's tile (BLOCK_D) is in the descriptors' block shapes: computed before them."""
    text = (ROOT / "specs" / "attention.tile").read_text()
    text = text[:text.index("  tune key")] + text[text.index("  m_i: f32[m]"):]
    text = text.replace("block BM, BN", "block BM = 16, BN = 16")
    # a name of its own: torch.ops.tilegen.attention stays the op of specs/attention.tile in this process
    text = text.replace("kernel attention\n", "kernel attention_untuned\n")
    path = tmp_path / "attention_untuned.py"
    path.write_text(compile_spec(text, "attention_untuned.tile", specs_find).source)
    q, k, v = (torch.randn(1, 2, n, 32).half() for n in (20, 33, 33))
    out, _ = load_module(path).attention_untuned(q, k, v, 0.2)  # o and each row's log-sum-exp
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.2)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("blocks", [{}, {"BW": 8}, {"BW": 16, "BH": 512}])
def test_a_descriptor_row_under_16_bytes_runs_the_pointer_kernel(tmp_path, blocks):
    """On a Triton without block pointers the block-pointer grayscale runs through descriptors;
    a u8 block of 8 columns is an 8-byte TMA row, which TMA refuses: the pointer kernel runs."""
    text = compile_spec((ROOT / "tests" / "specs" / "grey_block_ptr.tile").read_text(), "grey_block_ptr.tile").source
    assert "BW * 1 < 16" in text
    path = tmp_path / "grey_block_ptr.py"
    path.write_text(text)
    mod = load_module(path)
    x = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8)
    assert torch.equal(mod.grey_block_ptr(x, **blocks), mod.reference(x))
