"""Optional tensor inputs: ``in weight: T[N] = 1`` is an input the caller may leave out (None);
the launcher then passes a tensor whose every element is that number (one element, broadcast),
shaped and typed from the inputs the caller gave. The kernel, the reference, autograd (derived
backward), torch.compile's fake and the fast path all take either form; a spec that cannot
shape or type the absent tensor is refused at its place."""

import os

import pytest
import torch

from tests.conftest import force_config
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.grad import derive_backward as derive
from tilegen.parser import parse

SCALE = """\
kernel k
  dtype T in f32, f16
  in  x: T[M, N]
  in  weight: T[N] = 1
  in  bias: f32[N] = 0.5
  in  eps: f32 = 0.0
  out y: T[M, N]
  block BM
  grid  r over M by BM, c over N whole
  tune key N
    default config BM = 1, num_warps = 4
    config BM = 4, num_warps = 4
  y[r, c] = x[r, c] * weight[c] + bias[c] + eps
"""


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_left_out_input_reads_as_its_number_at_every_config(compiled, monkeypatch, dtype):
    module = compiled(SCALE)
    x, weight, bias = _randn(5, 37, seed=1).to(dtype), _randn(37, seed=2).to(dtype), _randn(37, seed=3)
    # the kernel's arithmetic: x * weight in the inputs' dtype, then + bias + eps in float32, stored in it
    cases = [
        ((x,), (x.float() + 0.5).to(dtype)),
        ((x, weight), ((x * weight).float() + 0.5).to(dtype)),
        ((x, None, bias, 0.25), (x.float() + bias + 0.25).to(dtype)),
        ((x, weight, bias), ((x * weight).float() + bias).to(dtype)),
    ]
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        for args, expected in cases:
            torch.testing.assert_close(module.k(*args), expected, rtol=1e-3, atol=1e-5)
            torch.testing.assert_close(module.reference(*args), expected, rtol=1e-3, atol=1e-5)


def test_a_dtype_variable_of_its_own_is_its_first_option_where_left_out(compiled):
    """``dtype W in f32, f16`` taken by the optional input alone: left out, it is float32 (the
    first option); given, any of them."""
    source = SCALE.replace("  dtype T in f32, f16\n", "  dtype T in f32, f16\n  dtype W in f32, f16\n")
    module = compiled(source.replace("in  weight: T[N] = 1", "in  weight: W[N] = 2"))
    x = _randn(3, 10, seed=8)
    torch.testing.assert_close(module.k(x), x * 2 + 0.5)
    torch.testing.assert_close(module.reference(x), x * 2 + 0.5)
    weight = _randn(10, seed=9).half()
    torch.testing.assert_close(module.k(x, weight), x * weight.float() + 0.5)
    torch.testing.assert_close(module.reference(x, weight), x * weight.float() + 0.5)


def test_the_fast_path_serves_a_call_that_leaves_the_input_out(compiled):
    """The broadcast tensor is made once per (value, dtype, device): a second call like the
    first has the same key, so it launches from the fast path."""
    module = compiled(SCALE)
    x = _randn(3, 8)
    first = module.k(x)
    assert len(module._FAST) == 1
    second = module.k(x)
    assert len(module._FAST) == 1 and torch.equal(first, second)
    module.k(x, _randn(8))  # a given weight: its own key
    assert len(module._FAST) == 2
    # a given tensor broadcast as the left-out one is (stride 0) is still read: the key says given
    torch.testing.assert_close(module.k(x, torch.tensor(3.0).expand(8)), x * 3 + 0.5)


def test_a_left_out_input_compiles_to_its_number():
    """The kernel takes HAS_<NAME> per optional input: left out, each load of it is its number
    (``tl.full``), which Triton folds, so an option left out costs no load."""
    source = compile_spec(SCALE, "k.tile").source
    assert "HAS_WEIGHT: tl.constexpr" in source and "HAS_BIAS: tl.constexpr" in source
    assert "if HAS_WEIGHT else tl.full(" in source and "HAS_WEIGHT=_weight_given" in source


def test_autograd_through_a_left_out_input_and_a_given_one(compiled):
    """The derived backward takes the optional input as the forward did: left out, no gradient
    for it; given, its gradient is torch's."""
    source = SCALE.replace("kernel k", "kernel optional_scale")  # an op of its own: its formula's backward here
    module = compiled(source, "optional_scale")
    compiled(derive(check(parse(source, "optional_scale.tile"))), "optional_scale_backward")
    x, weight = _randn(6, 19, seed=4).requires_grad_(), _randn(19, seed=5).requires_grad_()
    dy = _randn(6, 19, seed=6)
    (module.optional_scale(x) * dy).sum().backward()
    torch.testing.assert_close(x.grad, dy)
    x.grad = None
    (module.optional_scale(x, weight) * dy).sum().backward()
    torch.testing.assert_close(x.grad, dy * weight.detach())
    torch.testing.assert_close(weight.grad, (dy * x.detach()).sum(0))


def test_the_op_under_torch_compile_takes_none(compiled):
    module = compiled(SCALE)
    x = _randn(4, 9, seed=7)
    function = torch.compile(lambda x: module.k(x) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(function(x), (x + 0.5) * 2)


def test_bad_inputs_name_the_input_not_the_left_out_one(compiled):
    module = compiled(SCALE)
    with pytest.raises(TypeError, match=r"k: x must be a torch\.Tensor"):
        module.k(3)
    with pytest.raises(ValueError, match="weight dimension 0 \\(N\\) is 4, but x dimension 1 gives N = 9"):
        module.k(_randn(2, 9), _randn(4))


@pytest.mark.parametrize(
    "change, message",
    [
        (("in  weight: T[N] = 1", "in  weight: T[K] = 1"),
         "k.tile:4:17: error: optional input 'weight' has dimension 'K', which no required input gives"),
        (("  in  eps: f32 = 0.0\n", "  in  eps: f32 = 0.0\n  in  z: f32[N]\n"),
         "input 'z' has no default but follows 'weight', which has one: declare the inputs with defaults last"),
        (("  out y: T[M, N]", "  out y: f32[N] in place of bias\n  out y2: T[M, N]"),
         "'y' is written in place of 'bias', an optional input"),
    ],
)
def test_an_optional_input_that_cannot_be_made_is_refused_at_its_place(change, message):
    source = SCALE.replace(*change)
    assert source != SCALE
    with pytest.raises(SpecError) as error:
        compile_spec(source, "k.tile")
    assert message in str(error.value)


GIVEN = """\
kernel g
  in  x: f32[N]
  in  weight: f32[N] = 1
  out y: f32[N]
  out count: f32[N]
  block BN = 16
  grid  n over N by BN
  y[n] = where(given(weight), x[n] * weight[n], x[n] - 1)
  count[n] = where(given(weight), 1.0, 0.0) + x[n]
"""


def test_given_says_whether_the_caller_passed_the_input(compiled):
    """``given(weight)``: the kernel's HAS_WEIGHT (a constant of each compiled kernel), the
    reference's ``weight is not None``; a spec picks its work by it."""
    module = compiled(GIVEN)
    x, weight = _randn(37, seed=10), _randn(37, seed=11)
    for function in (module.g, module.reference):
        y, count = function(x)
        torch.testing.assert_close(y, x - 1)
        torch.testing.assert_close(count, x)
        y, count = function(x, weight)
        torch.testing.assert_close(y, x * weight)
        torch.testing.assert_close(count, x + 1)


@pytest.mark.parametrize(("change", "message"), [
    (("given(weight), 1.0", "given(x), 1.0"),
     "'given' takes the name of an optional input ('in w: f32[N] = 1'): one of weight"),
    (("given(weight), 1.0", "given(weight[n]), 1.0"), "'given' takes the name of an optional input"),
])
def test_given_of_anything_but_an_optional_input_is_refused(change, message):
    source = GIVEN.replace(*change)
    assert source != GIVEN
    with pytest.raises(SpecError) as error:
        compile_spec(source, "g.tile")
    assert message in str(error.value) and "g.tile:9:" in str(error.value)


@pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                    reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_optional_inputs_compile_either_way_on_the_gpu(compiled, dtype):
    """Each left-out/given combination is its own compiled kernel (HAS_WEIGHT, HAS_BIAS), at
    every config, eager and under torch.compile (inductor)."""
    module = compiled(SCALE)
    g = torch.Generator("cuda").manual_seed(1)
    x = torch.randn(37, 1000, device="cuda", generator=g).to(dtype)
    weight = torch.randn(1000, device="cuda", generator=g).to(dtype)
    bias = torch.randn(1000, device="cuda", generator=g)
    # the kernel's arithmetic: x * weight in the inputs' dtype, then + bias in float32, stored in it
    cases = [((x,), x.float() + 0.5), ((x, weight), (x * weight).float() + 0.5),
             ((x, None, bias), x.float() + bias), ((x, weight, bias), (x * weight).float() + bias)]
    cases = [(args, expected.to(dtype).float()) for args, expected in cases]
    tolerance = {"rtol": 1e-3, "atol": 1e-5} if dtype == torch.float16 else {"rtol": 1e-5, "atol": 1e-5}
    for index in range(len(module._CONFIGS)):
        for args, expected in cases * 2:  # twice: the second through the fast path
            torch.testing.assert_close(module.k(*args, config=index).float(), expected, **tolerance)
    function = torch.compile(lambda *args: module.k(*args) * 2, fullgraph=True)
    for args, expected in cases:
        torch.testing.assert_close(function(*args).float(), expected * 2, **tolerance)
