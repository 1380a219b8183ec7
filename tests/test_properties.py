"""Property tests of the committed generated launchers: for random shapes (1, small primes,
sizes that do not divide the blocks) and random strides (contiguous, transposed, step-2
slices, offset slices, expanded and permuted views), each launcher agrees with its module's
own ``reference(...)`` called with the same arguments. A zero extent gives empty outputs of
the right shape and dtype without launching the kernel.

Everything runs in Triton's CPU interpreter (tests/conftest.py), so shapes stay small and each
property has a small, derandomized example budget.
"""

from __future__ import annotations

import functools
import inspect
import math
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import spec_named
from tilegen import tolerance

SETTINGS = {"deadline": None, "derandomize": True, "database": None,
            "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}

#: Sizes that stress masks: 1, small primes, and anything up to 70.
SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13, 17, 31, 37]), st.integers(1, 70))
#: Vector lengths: the same, and some that span several 16- or 64-element blocks.
LENGTHS = st.one_of(SIZES, st.integers(71, 300), st.sampled_from([1023, 1024, 1025]))

# --------------------------------------------------------------------------- tensors

def maker(dtype: torch.dtype, generator: torch.Generator):
    """A function shape -> new contiguous tensor of ``dtype`` with random values."""

    def make(shape):
        shape = tuple(shape)
        if dtype == torch.uint8:
            return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
        if dtype == torch.int64:
            # Distinct values, so a misplaced element cannot go unnoticed.
            count = math.prod(shape)
            return (torch.randperm(count, generator=generator) * 7919 - 3 * count).reshape(shape)
        return torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)

    return make


LAYOUT_KINDS = ["contiguous", "transposed", "step2", "offset", "expanded", "permuted"]


@st.composite
def layouts(draw, rank: int):
    """How a tensor of ``rank`` lies in memory: a kind and, for ``expanded``, which dim."""
    kind = draw(st.sampled_from(LAYOUT_KINDS))
    return kind, draw(st.integers(0, rank - 1))


def view(make, shape, layout) -> torch.Tensor:
    """A tensor of logical ``shape`` whose strides follow ``layout`` (see :func:`layouts`)."""
    kind, dim = layout
    shape = tuple(shape)
    rank = len(shape)
    if kind == "transposed" and rank > 1:  # memory order reversed (a .t() for matrices)
        return make(shape[::-1]).permute(*reversed(range(rank)))
    if kind == "permuted" and rank > 1:  # dimension 0 innermost (channels-last for CHW)
        return make(shape[1:] + shape[:1]).permute(rank - 1, *range(rank - 1))
    if kind == "step2":  # every other element of a twice-as-large tensor
        return make(tuple(2 * s for s in shape))[tuple(slice(None, None, 2) for _ in shape)]
    if kind == "offset":  # a slice that starts one element in (storage offset, padded rows)
        return make(tuple(s + 1 for s in shape))[tuple(slice(1, None) for _ in shape)]
    if kind == "expanded":  # one dimension broadcast with stride 0
        small = tuple(1 if i == dim else s for i, s in enumerate(shape))
        return make(small).expand(shape)
    return make(shape)


def assert_matches(out: torch.Tensor, ref: torch.Tensor, spec, args, reference) -> None:
    """``out`` is within :mod:`tilegen.tolerance`'s bound of ``ref`` (same shape and dtype;
    float tolerances grow with the spec's sums; integers exact, or 1 apart from float math)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, out.dtype, ref.shape, ref.dtype)
    tolerance.assert_close(spec, args, out, ref, reference)


def reference_kwargs(module, kwargs: dict) -> dict:
    """The launch keywords ``reference`` takes too (block sizes only where the result depends
    on them, as in the swizzle demo)."""
    accepted = inspect.signature(module.reference).parameters
    return {k: v for k, v in kwargs.items() if k in accepted}


def call(module, launcher: str, *args, **kwargs):
    """Run the launcher and the reference on the same arguments (autotune notices muted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = getattr(module, launcher)(*args, **kwargs)
    return out, module.reference(*args, **reference_kwargs(module, kwargs))


def check_launch(module, launcher: str, *args, **kwargs) -> torch.Tensor:
    """:func:`call`, then :func:`assert_matches` under the spec in specs/ of ``launcher``;
    returns the launcher's output."""
    out, ref = call(module, launcher, *args, **kwargs)
    reference = functools.partial(module.reference, **reference_kwargs(module, kwargs))
    assert_matches(out, ref, spec_named(launcher), args, reference)
    return out


# --------------------------------------------------------------------------- 1D and image

@settings(max_examples=15, **SETTINGS)
@given(n=LENGTHS, layout=layouts(1), block=st.sampled_from([16, 64, 1024]), seed=st.integers(0, 2**31 - 1))
def test_copy_matches_reference(generated, n, layout, block, seed):
    make = maker(torch.float32, torch.Generator().manual_seed(seed))
    x = view(make, (n,), layout)
    out = check_launch(generated("copy"), "copy", x, BS=block)
    assert torch.equal(out, x)


@pytest.mark.parametrize("name", ["add", "add_loop"])
@settings(max_examples=15, **SETTINGS)
@given(
    n=LENGTHS, layout_x=layouts(1), layout_y=layouts(1), block=st.sampled_from([16, 64, 1024]),
    seed=st.integers(0, 2**31 - 1),
)
def test_add_matches_reference(generated, name, n, layout_x, layout_y, block, seed):
    make = maker(torch.float32, torch.Generator().manual_seed(seed))
    x, y = view(make, (n,), layout_x), view(make, (n,), layout_y)
    check_launch(generated(name), name, x, y, BLOCK_SIZE=block)


@settings(max_examples=15, **SETTINGS)
@given(
    h=SIZES, w=SIZES, layout=layouts(3), bh=st.sampled_from([4, 8, 32]), bw=st.sampled_from([4, 8, 32]),
    seed=st.integers(0, 2**31 - 1),
)
def test_rgb2grey_matches_reference(generated, h, w, layout, bh, bw, seed):
    make = maker(torch.uint8, torch.Generator().manual_seed(seed))
    x = view(make, (3, h, w), layout)
    check_launch(generated("rgb2grey"), "rgb2grey", x, BH=bh, BW=bw)


@settings(max_examples=15, **SETTINGS)
@given(
    # primes past every group size (a partial last group): 11 and 13 (17 ran more programs alike)
    m=st.one_of(st.sampled_from([1, 2, 3, 5, 7, 11, 13]), st.integers(1, 12)),
    n=st.one_of(st.sampled_from([1, 2, 3, 5, 7, 11, 13]), st.integers(1, 12)),
    layout=layouts(2), group=st.sampled_from([1, 2, 3, 4, 5, 8]), seed=st.integers(0, 2**31 - 1),
)
def test_swizzle_matches_reference(generated, m, n, layout, group, seed):
    make = maker(torch.int64, torch.Generator().manual_seed(seed))
    x = view(make, (m, n), layout)
    out = check_launch(generated("swizzle"), "swizzle", x, GROUP_SIZE=group)
    # BM = BN = 1: every tile is whole, so the swizzle is a permutation of x.
    assert torch.equal(out.flatten().sort().values, x.flatten().sort().values)


# --------------------------------------------------------------------------- matmuls

def matmul_operands(draw, dtype, k_multiple: int | None = None):
    m, n = draw(SIZES), draw(SIZES)
    if k_multiple is None:
        k = draw(SIZES)
    else:
        k = k_multiple * draw(st.integers(1, 4))
    make = maker(dtype, torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))))
    a = view(make, (m, k), draw(layouts(2)))
    b = view(make, (k, n), draw(layouts(2)))
    return a, b


@pytest.mark.parametrize("name", ["matmul_naive", "matmul_grouped"])
@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_unmasked_k_matmul_matches_reference(generated, name, data):
    a, b = matmul_operands(data.draw, torch.float16, k_multiple=16)
    kwargs = {"BM": 16, "BN": 16, "BK": 16}
    if name == "matmul_grouped":
        kwargs["GROUP_SIZE"] = data.draw(st.sampled_from([1, 2, 3, 8]), label="GROUP_SIZE")
    check_launch(generated(name), name, a, b, **kwargs)


@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_matmul_kmasked_matches_reference(generated, data):
    a, b = matmul_operands(data.draw, torch.float16)
    check_launch(generated("matmul_kmasked"), "matmul_kmasked", a, b)


@settings(max_examples=15, **SETTINGS)
@given(data=st.data(), bm=st.sampled_from([16, 32]), bn=st.sampled_from([16, 32]), bk=st.sampled_from([16, 32]))
def test_matmul_f32_matches_reference(generated, data, bm, bn, bk):
    a, b = matmul_operands(data.draw, torch.float32)
    check_launch(generated("matmul_f32"), "matmul_f32", a, b, BM=bm, BN=bn, BK=bk)


@settings(max_examples=12, **SETTINGS)
@given(
    batch=st.sampled_from([1, 2, 3, 5]), m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40),
    layout_a=layouts(3), layout_b=layouts(3), seed=st.integers(0, 2**31 - 1),
)
def test_matmul_batched_matches_reference(generated, batch, m, n, k, layout_a, layout_b, seed):
    make = maker(torch.float16, torch.Generator().manual_seed(seed))
    a = view(make, (batch, m, k), layout_a)
    b = view(make, (batch, k, n), layout_b)
    check_launch(generated("matmul_batched"), "matmul_batched", a, b, BM=16, BN=16, BK=16)


@settings(max_examples=15, **SETTINGS)
@given(
    data=st.data(), alpha=st.floats(-2.0, 2.0, allow_nan=False, width=32),
    group=st.sampled_from([1, 2, 3, 8]), bm=st.sampled_from([16, 32]), bn=st.sampled_from([16, 32]),
)
def test_matmul_epilogue_matches_reference(generated, data, alpha, group, bm, bn):
    a, b = matmul_operands(data.draw, torch.bfloat16)
    m, n = a.shape[0], b.shape[1]
    make = maker(torch.float32, torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1))))
    bias = view(make, (n,), data.draw(layouts(1)))
    residual = view(maker(torch.bfloat16, torch.Generator().manual_seed(7)), (m, n), data.draw(layouts(2)))
    check_launch(
        generated("matmul_epilogue"), "matmul_epilogue", a, b, bias, residual, float(alpha),
        BM=bm, BN=bn, BK=16, GROUP_SIZE_M=group,
    )


# --------------------------------------------------------------------------- empty and K = 0

class _NoLaunch:
    """Stands in for a module's kernel: indexing it (``kernel[grid]``) fails the test."""

    def __getitem__(self, grid):
        raise AssertionError(f"the kernel was launched with grid {grid!r} for an empty output")

    def __getattr__(self, name):
        raise AssertionError(f"the kernel's {name!r} was used for an empty output")


def _t(dtype, *shape):
    return maker(dtype, torch.Generator().manual_seed(0))(shape)


F16, BF16, F32, U8, I64 = torch.float16, torch.bfloat16, torch.float32, torch.uint8, torch.int64
BLOCKS_16 = {"BM": 16, "BN": 16, "BK": 16}

#: (module, launcher arguments, keyword arguments, expected output shape and dtype).
EMPTY_CASES = {
    "copy-N0": ("copy", lambda: (_t(F32, 0),), {}, (0,), F32),
    "rgb2grey-H0": ("rgb2grey", lambda: (_t(U8, 3, 0, 5),), {}, (0, 5), U8),
    "rgb2grey-W0": ("rgb2grey", lambda: (_t(U8, 3, 4, 0),), {}, (4, 0), U8),
    "add-N0": ("add", lambda: (_t(F32, 0), _t(F32, 0)), {}, (0,), F32),
    "add_loop-N0": ("add_loop", lambda: (_t(F32, 0), _t(F32, 0)), {}, (0,), F32),
    "matmul_naive-M0": ("matmul_naive", lambda: (_t(F16, 0, 16), _t(F16, 16, 5)), BLOCKS_16, (0, 5), F16),
    "matmul_naive-N0": ("matmul_naive", lambda: (_t(F16, 4, 16), _t(F16, 16, 0)), BLOCKS_16, (4, 0), F16),
    "matmul_naive-MNK0": ("matmul_naive", lambda: (_t(F16, 0, 0), _t(F16, 0, 0)), BLOCKS_16, (0, 0), F16),
    "matmul_grouped-M0": ("matmul_grouped", lambda: (_t(F16, 0, 32), _t(F16, 32, 3)), BLOCKS_16, (0, 3), F16),
    "matmul_grouped-N0": ("matmul_grouped", lambda: (_t(F16, 7, 16), _t(F16, 16, 0)), BLOCKS_16, (7, 0), F16),
    "matmul_kmasked-M0": ("matmul_kmasked", lambda: (_t(F16, 0, 7), _t(F16, 7, 5)), {}, (0, 5), F16),
    "matmul_kmasked-N0": ("matmul_kmasked", lambda: (_t(F16, 3, 7), _t(F16, 7, 0)), {}, (3, 0), F16),
    "matmul_f32-M0": ("matmul_f32", lambda: (_t(F32, 0, 5), _t(F32, 5, 5)), {}, (0, 5), F32),
    "matmul_f32-N0": ("matmul_f32", lambda: (_t(F32, 5, 5), _t(F32, 5, 0)), {}, (5, 0), F32),
    "matmul_batched-B0": ("matmul_batched", lambda: (_t(F16, 0, 3, 4), _t(F16, 0, 4, 5)), {}, (0, 3, 5), F16),
    "matmul_batched-M0": ("matmul_batched", lambda: (_t(F16, 2, 0, 4), _t(F16, 2, 4, 5)), {}, (2, 0, 5), F16),
    "matmul_batched-N0": ("matmul_batched", lambda: (_t(F16, 2, 3, 4), _t(F16, 2, 4, 0)), {}, (2, 3, 0), F16),
    "matmul_epilogue-M0": (
        "matmul_epilogue", lambda: (_t(BF16, 0, 6), _t(BF16, 6, 5), _t(F32, 5), _t(BF16, 0, 5), 0.5), {}, (0, 5), BF16,
    ),
    "matmul_epilogue-N0": (
        "matmul_epilogue", lambda: (_t(BF16, 4, 6), _t(BF16, 6, 0), _t(F32, 0), _t(BF16, 4, 0), 0.5), {}, (4, 0), BF16,
    ),
    "swizzle-M0": ("swizzle", lambda: (_t(I64, 0, 5),), {}, (0, 5), I64),
    "swizzle-N0": ("swizzle", lambda: (_t(I64, 5, 0),), {}, (5, 0), I64),
}


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_empty_output_is_returned_without_launching(generated, monkeypatch, case):
    name, args, kwargs, shape, dtype = EMPTY_CASES[case]
    module = generated(name)
    monkeypatch.setattr(module, f"{name}_kernel", _NoLaunch())
    args = args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = getattr(module, name)(*args, **kwargs)
    assert isinstance(out, torch.Tensor)
    assert tuple(out.shape) == shape and out.dtype == dtype and out.numel() == 0
    ref = module.reference(*args, **reference_kwargs(module, kwargs))
    assert tuple(ref.shape) == shape and ref.dtype == dtype


#: K = 0 leaves the output non-empty: the kernel runs no K step and stores the epilogue of 0.
K0_CASES = {
    "matmul_naive": (lambda: (_t(F16, 5, 0), _t(F16, 0, 3)), {"BM": 16, "BN": 16, "BK": 16}),
    "matmul_grouped": (lambda: (_t(F16, 5, 0), _t(F16, 0, 3)), {"BM": 16, "BN": 16, "BK": 16}),
    "matmul_kmasked": (lambda: (_t(F16, 5, 0), _t(F16, 0, 3)), {}),
    "matmul_f32": (lambda: (_t(F32, 5, 0), _t(F32, 0, 3)), {}),
    "matmul_batched": (lambda: (_t(F16, 2, 5, 0), _t(F16, 2, 0, 3)), {}),
    "matmul_epilogue": (lambda: (_t(BF16, 5, 0), _t(BF16, 0, 3), _t(F32, 3), _t(BF16, 5, 3), 1.5), {}),
}


@pytest.mark.parametrize("name", list(K0_CASES))
def test_zero_length_reduction_matches_reference(generated, name):
    args, kwargs = K0_CASES[name]
    check_launch(generated(name), name, *args(), **kwargs)


# --------------------------------------------------------------------------- specs built here

def _build(text: str, tag: str):
    """Compile ``text`` and import the module (from a fresh temporary folder)."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    module = compile_spec(text, f"{tag}.tile")
    folder = Path(tempfile.mkdtemp(prefix="tilegen_props_"))
    path = folder / f"{module.kernel}.py"
    path.write_text(module.source, encoding="utf-8")
    return load_module(path), module.kernel


def _spec(text: str):
    """The checked model of ``text`` (for :mod:`tilegen.tolerance`)."""
    from tilegen.check import check
    from tilegen.parser import parse

    return check(parse(text, "built.tile"))


SWIZZLED = """\
kernel {name}
  in  x: f32[M, N]
  out z: f32[M, N]
  block BM = 4, BN = 4
  grid  m over M by BM, n over N by BN
  swizzle m, n group 2 as sm, sn
{body}"""

@pytest.mark.parametrize(
    "body",
    [
        pytest.param("  z[sm, sn] = x[m, n] * 2\n", id="load-then-store"),
        pytest.param("  z[sm, sn] = relu(x[m, n])\n", id="call"),
        pytest.param("  z[m, n] = x[m, n] + 1\n", id="unswizzled"),
        pytest.param("  t = x[m, n]\n  z[sm, sn] = t\n", id="local"),
        pytest.param("  acc: f32[m, n] = 1\n  z[sm, sn] = acc + x[m, n]\n", id="declared"),
    ],
)
def test_swizzle_alias_specs_match_reference(request, body):
    text = SWIZZLED.format(name=f"swz_{request.node.callspec.id.replace('-', '_')}", body=body)
    module, kernel = _build(text, "swz")
    x = torch.arange(96, dtype=torch.float32).reshape(8, 12)  # whole 4x4 tiles: every element written
    assert_matches(getattr(module, kernel)(x), module.reference(x), _spec(text), (x,), module.reference)


@pytest.mark.parametrize("body", ["  t = x[sm, sn]\n  z[m, n] = t\n", "  z[sm, sn] = x[sm, sn]\n"])
def test_loads_through_swizzle_aliases_are_refused(body):
    from tilegen.errors import SpecError

    with pytest.raises(SpecError, match="swizzled axis 'sm' can only index the tensor a statement stores to"):
        _build(SWIZZLED.format(name="swz_refused", body=body), "swz")


CONSTANT = """\
kernel {name}
  in  x: f32[N]
  out z: f32[N]
  block BS = 16
  grid  i over N by BS
{body}"""


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("  z[i] = x[i] * 0 + 2\n", id="via-load"),
        pytest.param("  z[i] = 2\n", id="int"),
        pytest.param("  z[i] = 2.5\n", id="float"),
        pytest.param("  z[i] = -2\n", id="negative"),
        pytest.param("  t = 3\n  z[i] = t\n", id="local"),
        pytest.param("  z[i] = relu(2)\n", id="call"),
    ],
)
def test_constant_stores_build_a_module_that_matches_reference(request, body):
    text = CONSTANT.format(name=f"const_{request.node.callspec.id.replace('-', '_')}", body=body)
    module, kernel = _build(text, "const")
    x = torch.randn(20)
    out = getattr(module, kernel)(x)
    assert_matches(out, module.reference(x), _spec(text), (x,), module.reference)
    assert torch.all(out == out[0])
