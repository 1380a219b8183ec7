"""Optional tensor inputs: ``in weight: T[N] = 1`` is an input the caller may leave out (None);
the launcher then passes a tensor whose every element is that number (one element, broadcast),
shaped and typed from the inputs the caller gave. The kernel, the reference, autograd (derived
backward), torch.compile's fake and the fast path all take either form; a spec that cannot
shape or type the absent tensor is refused at its place."""

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
    cases = [
        ((x,), (x.float() + 0.5).to(dtype)),
        ((x, weight), (x.float() * weight.float() + 0.5).to(dtype)),
        ((x, None, bias, 0.25), (x.float() + bias + 0.25).to(dtype)),
        ((x, weight, bias), (x.float() * weight.float() + bias).to(dtype)),
    ]
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        for args, expected in cases:
            torch.testing.assert_close(module.k(*args), expected, rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(module.reference(*args), expected, rtol=1e-3, atol=1e-3)


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
