"""Split loops (``for k over K by BK split``): split-K as a launcher decision the spec allows.

Where the output tiles are too few to fill the SMs, the launcher runs each tile's K loop in
several programs (``tl.program_id`` of one more grid axis); each stores its f32 partial sum in a
workspace, and a second kernel adds them up into the output. The interpreter's device has 4
"SMs" (``_num_sms``); these tests raise that to force many parts on small shapes.
"""

import importlib.util
import sys
import warnings
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import spec_named
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError

# A 2D grid (not flat), untuned: the parts take grid axis 2; masked M, N and K tails.
MATMUL_2D = """\
kernel mm_split
  in  a: f32[M, K]
  in  b: f32[K, N]
  out c: f32[M, N]
  block BM = 16, BN = 16, BK = 16
  grid m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK split
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""


def _module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"tilegen_split_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [(d.span.line, d.message) for d in caught.value.diagnostics]


@pytest.fixture
def fast(generated, monkeypatch):
    """matmul_fast with 64 "SMs": its default config (32x32x32 tiles) splits small shapes."""
    module = generated("matmul_fast")
    monkeypatch.setattr(module, "_num_sms", lambda device: 64)
    return module


def _default_config(module):
    """The keywords of the config the interpreter runs (the spec's default config)."""
    spec = spec_named("matmul_fast")
    return module._CONFIGS[spec.tune.configs.index(spec.default_config())].kwargs


def _parts(module, m, n, k):
    config = _default_config(module)
    return module._split_grid(m, n, k, config["BM"], config["BN"], config["BK"], torch.device("cpu"))[1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["row-major", "b column-major", "a column-major", "odd K (pointers)"])
def test_split_matmul_fast_matches_torch(fast, dtype, layout):
    m, n, k = (8, 40, 1027) if layout == "odd K (pointers)" else (8, 40, 1024)
    g = torch.Generator().manual_seed(k)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    if layout == "b column-major":
        b = b.t().contiguous().t()
    if layout == "a column-major":
        a = a.t().contiguous().t()
    parts = _parts(fast, m, n, k)
    assert parts > 1  # 2 output tiles on 64 SMs, and K much larger than M and N: the loop runs in parts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
        c = fast.matmul_fast(a, b)
    expected = a.double() @ b.double()
    assert c.dtype == dtype
    # the sum of the parts is exact in f32 here; only the final rounding to dtype remains
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(c.double(), expected, atol=tolerance * expected.abs().max().item(), rtol=0)


@pytest.mark.parametrize("sms", [1, 2, 3, 5, 7, 64])
def test_every_part_count_sums_each_k_tile_once(tmp_path, monkeypatch, sms):
    """K = 15 * 16 + 5: 16 tiles of k, the last one partial; any number of parts covers each once.
    Integer-valued inputs make every sum exact, so the result must equal torch's exactly."""
    module = _module(tmp_path, MATMUL_2D, "mm_split")
    monkeypatch.setattr(module, "_num_sms", lambda device: sms)
    m, n, k = 5, 3, 15 * 16 + 5
    g = torch.Generator().manual_seed(sms)
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    grid, parts = module._split_grid(m, n, k, 16, 16, 16, torch.device("cpu"))
    assert grid == (1, 1, parts)  # the parts take grid axis 2 of a 2D grid
    assert parts == min(sms, 16 // 4)  # one tile: as many parts as SMs, with at least 4 k tiles each
    assert torch.equal(module.mm_split(a, b), a @ b)


def test_the_split_axis_and_the_partial_store_in_the_source(tmp_path):
    source = compile_spec(MATMUL_2D, "mm_split.tile").source
    kernel = source[source.index("def mm_split_kernel"):source.index("def mm_split(")]
    assert "pid_k = tl.program_id(2)" in kernel
    assert "for k in range(k_first, min(k_first + k_per_part, tl.cdiv(K, BK))):" in kernel
    assert "a_ptrs += k_first * BK * stride_a_k" in kernel  # pointers start at the part's first k tile
    assert "if split_k > 1:" in kernel
    assert "tl.store(partials_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])" in kernel
    assert "post_hook" not in source  # untuned: the launcher sums; no autotuner hook


def test_sum_partials_hook_adds_up_a_configs_parts(fast):
    """What the autotuner runs after each config it times: the parts' sum, into c."""
    m, n, k = 8, 40, 1024
    parts = _parts(fast, m, n, k)
    assert parts > 1
    partials = torch.randn(parts * m * n)
    c = torch.empty(m, n, dtype=torch.float16)
    nargs = {"M": m, "N": n, "K": k, **_default_config(fast), "partials_ptr": partials, "c_ptr": c}
    fast._sum_partials_hook(nargs, exception=None)
    torch.testing.assert_close(c, partials.view(parts, m, n).sum(0).half())
    c.zero_()
    fast._sum_partials_hook(nargs, exception=RuntimeError("out of resources"))  # a failed config: nothing
    assert not c.any()


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 8192), st.integers(1, 8192), st.integers(0, 1 << 18), st.sampled_from([16, 32, 64, 128, 256]),
    st.sampled_from([16, 32, 64, 128, 256]), st.sampled_from([32, 64, 128]), st.sampled_from([4, 78, 132]),
)
def test_split_grid_fills_the_sms_once_at_most(generated, m, n, k, bm, bn, bk, sms):
    """The parts: one wave of programs at most, 4 or more k tiles each, and partial sums within
    half the operands' bytes; none while the tiles fill half the SMs."""
    module = generated("matmul_fast")
    with mock.patch.object(module, "_num_sms", lambda device: sms):
        (programs, parts, one), parts_again = module._split_grid(m, n, k, bm, bn, bk, torch.device("cpu"))
    tiles = -(-m // bm) * -(-n // bn)
    # one part: the launch is split tail's (the whole tiles and the last wave's sub-tiles)
    expected = tiles if parts > 1 else module._tail_split(m, n, bm, bn, sms)[0]
    assert (programs, one, parts_again) == (expected, 1, parts)
    k_tiles = -(-k // bk)
    if parts > 1:
        assert tiles * parts <= sms
        per_part = -(-k_tiles // parts)
        assert per_part >= 4 and (parts - 1) * per_part < k_tiles  # no part without tiles of k
        assert parts * m * n * 8 <= (m + n) * k * 2 / 2
    else:
        assert tiles * 2 > sms or k_tiles < 8 or 2 * m * n * 8 > (m + n) * k * 2 / 2


# An f16 matmul with a split loop; each case below changes one line of it.
F16_SPLIT = """\
kernel t
  in  a: f16[M, K]
  in  b: f16[K, N]
  out c: f16[M, N]
  block BM = 16, BN = 16, BK = 16
  grid m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK split
    acc += dot(a[m, k], b[k, n])
  c[m, n] = acc
"""
STORE_ONLY = "after a split loop the body can only store the accumulator as it is"

BAD = {
    "a loop over tiles": ("""\
kernel t
  in  x: f32[N]
  out y: f32[N]
  block BS = 16
  grid i over N by BS
  s: f32[] = 0
  for j over N by BS split
    s += sum(x[j], dim=j)
  y[i] = x[i] + s
""", 7, "'split' needs a loop of `acc += dot(x[.., k], y[k, ..])` lines only"),
    "an epilogue": (F16_SPLIT.replace("c[m, n] = acc", "c[m, n] = f16(maximum(acc, 0))"), 10, STORE_ONLY),
    "a cast to another dtype than the output's": (
        F16_SPLIT.replace("out c: f16", "out c: f32").replace("c[m, n] = acc", "c[m, n] = f16(acc)"), 10, STORE_ONLY
    ),
    "the grid's axes in another order": (
        F16_SPLIT.replace("grid m over M by BM, n over N by BN", "grid n over N by BN, m over M by BM"), 10, STORE_ONLY
    ),
    "an f16 accumulator": (
        F16_SPLIT.replace("acc: f32", "acc: f16"), 7, "a split loop's accumulator 'acc' must start as f32 zeros"
    ),
    "a batch axis": ("""\
kernel t
  in  a: f32[B, M, K]
  in  b: f32[B, K, N]
  out c: f32[B, M, N]
  block BM = 16, BN = 16, BK = 16
  grid z over B, m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK split
    acc += dot(a[z, m, k], b[z, k, n])
  c[z, m, n] = acc
""", 8, "'split' needs a grid of two tiled axes"),
    "block pointers": (
        F16_SPLIT.replace("  acc: f32", "  access block_ptr\n  acc: f32"), 9,
        "'split' needs access pointers or descriptor, not block_ptr",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_split_the_launcher_cannot_sum_is_refused_at_its_line(case):
    text, line, message = BAD[case]
    errors = _errors(text)
    assert any(at == line and said.startswith(message) for at, said in errors), errors


def test_split_is_a_keyword_and_its_launcher_locals_are_reserved():
    for name in ("split", "partials", "parts"):
        errors = _errors(MATMUL_2D.replace("acc", name))
        assert any(name in said for _, said in errors), (name, errors)


def test_a_typo_gives_its_own_error_and_no_split_error():
    errors = _errors(MATMUL_2D.replace("    acc += dot", "    acz += dot"))
    assert errors and not any("split" in said for _, said in errors), errors


@pytest.mark.parametrize("bm_bn_bk", [(16, 64, 256), (16, 128, 128), (16, 128, 256)])
@pytest.mark.parametrize("layout", ["row-major", "b column-major", "odd K (pointers)"])
def test_matmul_fast_sixteen_row_configs(generated, monkeypatch, bm_bn_bk, layout):
    """The configs for M of a few tokens (16-row tiles, deep K tiles), each forced in the
    interpreter on both kernels: tails in M, N and K."""
    module = generated("matmul_fast")
    pointers = layout == "odd K (pointers)"
    configs = module._POINTER_CONFIGS if pointers else module._CONFIGS
    wanted = dict(zip(("BM", "BN", "BK"), bm_bn_bk, strict=True))
    index = next(i for i, c in enumerate(configs) if c.kwargs == wanted)
    asked = []  # the tune keys the launcher looked up: it runs the config it is given
    monkeypatch.setattr(module._tuner, "tuned_index", lambda launcher, key: asked.append(key) or index)
    monkeypatch.setattr(module._tuner, "tuned", {})
    monkeypatch.setattr(module, "_FAST", {})
    m, n, k = 5, 40, 301 if pointers else 304  # 304 f16: 16-byte rows, which TMA needs
    g = torch.Generator().manual_seed(k)
    a = torch.randn(m, k, generator=g).half()
    b = torch.randn(k, n, generator=g).half()
    if layout == "b column-major":
        b = b.t().contiguous().t()
    c = module.matmul_fast(a, b)
    expected = a.double() @ b.double()
    torch.testing.assert_close(c.double(), expected, atol=1e-2 * expected.abs().max().item(), rtol=0)
    assert [key[1] == "pointers" for key in asked] == [pointers]  # the kernel the layout needs
