"""``pow(x, p)`` and ``x ** p`` mean torch.pow for every sign of ``x`` and every exponent.

The oracle is torch.pow itself, on a fixed set of bases that covers negative, zero, one, NaN and
both infinities, with tails (11 elements at a block of 4). Before the fix, ``pow(x, 3.0)`` lowered
to ``exp2(3.0 * log2(x))``: NaN for every negative ``x`` (the literal's text, not its value, was
tested), and ``x ** 2`` did not parse.
"""

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import load_module

SPEC = """\
kernel k
  in  x: {dtype}[N]
  in  q: f32
  out z: f32[N]
  block BS = 4
  grid  i over N by BS
  z[i] = {expr}
"""

BASES = [-3.0, -2.0, -1.5, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0, 3.5, float("nan"), float("inf"), -float("inf")]


def build(tmp_path, expr: str, dtype: str = "f32"):
    source = SPEC.format(expr=expr, dtype=dtype)
    path = tmp_path / f"k_{abs(hash((expr, dtype)))}.py"
    path.write_text(compile_spec(source, "tests/pow.tile").source)
    return load_module(path)


@pytest.mark.parametrize(
    ("expr", "oracle"),
    [
        ("pow(x[i], 3.0)", lambda x, q: torch.pow(x, 3.0)),  # KernelBench's NewGELU writes torch.pow(x, 3.0)
        ("pow(x[i], 3)", lambda x, q: torch.pow(x, 3)),
        ("x[i] ** 2", lambda x, q: x**2),
        ("x[i] ** 2.0", lambda x, q: x**2.0),
        ("x[i] ** 0", lambda x, q: x**0),
        ("x[i] ** -1", lambda x, q: x**-1),
        ("x[i] ** -3.0", lambda x, q: x**-3.0),
        ("x[i] ** 7", lambda x, q: x**7),
        ("x[i] ** 10", lambda x, q: x**10),
        ("x[i] ** 65", lambda x, q: x**65),  # above the multiplied range: exp2/log2 with torch's sign rule
        ("x[i] ** 0.5", lambda x, q: x**0.5),
        ("x[i] ** -0.5", lambda x, q: x**-0.5),
        ("x[i] ** 1.5", lambda x, q: x**1.5),
        ("x[i] ** q", lambda x, q: x**q),
        ("2.0 ** x[i]", lambda x, q: torch.pow(2.0, x)),
        ("-x[i] ** 2", lambda x, q: -(x**2)),  # ** binds tighter than a unary minus, as in Python
        ("2 * x[i] ** 2 ** 2", lambda x, q: 2 * x**4),  # and groups to the right
        ("(x[i] + 1.0) ** 3", lambda x, q: (x + 1) ** 3),
        ("x[i] ** abs(x[i])", lambda x, q: torch.pow(x, torch.abs(x))),
    ],
)
@pytest.mark.parametrize("q", [3.0, -2.0, 2.5, 0.0])
def test_pow_is_torch_pow(tmp_path, expr, oracle, q):
    module = build(tmp_path, expr)
    x = torch.tensor(BASES)
    expected = oracle(x, q)
    torch.testing.assert_close(module.k(x, q), expected, equal_nan=True, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.reference(x, q), expected, equal_nan=True, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f16", "i32"])
def test_pow_of_narrow_and_integer_inputs_computes_in_float32(tmp_path, dtype):
    module = build(tmp_path, "x[i] ** 3.0 + x[i] ** q", dtype)
    x = torch.arange(-6, 7, dtype=torch.float16 if dtype == "f16" else torch.int32)
    expected = torch.pow(x.float(), 3.0) + torch.pow(x.float(), 2.0)
    torch.testing.assert_close(module.k(x, 2.0), expected)
    torch.testing.assert_close(module.reference(x, 2.0), expected)


def test_an_integral_exponent_multiplies(tmp_path):
    """``3.0`` is an integer by value: no exp2/log2 (which would be NaN for a negative base)."""
    source = compile_spec(SPEC.format(expr="x[i] ** 3.0 * x[i] ** -2", dtype="f32"), "tests/pow.tile").source
    kernel = source[source.index("def k_kernel"):source.index("\ndef k(")]
    assert "log2" not in kernel and "power(" not in kernel


def test_a_doubled_star_without_an_exponent_is_a_syntax_error():
    with pytest.raises(SpecError, match=r"tests/pow.tile:7:\d+: .*expected"):
        compile_spec(SPEC.format(expr="x[i] **", dtype="f32"), "tests/pow.tile")


def test_a_first_power_of_a_compound_base_keeps_its_parentheses(tmp_path):
    """``(x + 1) ** 1 * 2`` is ``(x + 1) * 2``, not ``x + 1 * 2`` (found by tests/test_expressions.py)."""
    module = build(tmp_path, "(x[i] + 1.0) ** 1 * 2.0")
    x = torch.tensor([-3.0, 0.5, 2.0])
    torch.testing.assert_close(module.k(x, 1.0), (x + 1) * 2)
