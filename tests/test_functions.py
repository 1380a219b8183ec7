"""The function vocabulary, predicates, index values and the checks on them.

Every function of ``tilegen.functions`` runs in a one-line spec in the interpreter and is
compared with torch written out here (the oracle is not the table the compiler reads), on
float32 and on f16 inputs. The checks' messages carry ``file:line:col``.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.functions import FUNCTIONS
from tilegen.parser import parse
from tilegen.runner import load_module

SPEC = """\
kernel k
  in  x: {dtype}[N]
  in  y: {dtype}[N]
  out z: f32[N]
  block BS = 64
  grid  i over N by BS
  z[i] = {expr}
"""

#: name -> (spec expression, torch oracle of x and y, input domain)
ORACLES = {
    "exp": ("exp(x[i])", lambda x, y: torch.exp(x), "any"),
    "exp2": ("exp2(x[i])", lambda x, y: torch.exp2(x), "any"),
    "log": ("log(x[i])", lambda x, y: torch.log(x), "positive"),
    "log2": ("log2(x[i])", lambda x, y: torch.log2(x), "positive"),
    "sqrt": ("sqrt(x[i])", lambda x, y: torch.sqrt(x), "positive"),
    "rsqrt": ("rsqrt(x[i])", lambda x, y: torch.rsqrt(x), "positive"),
    "opmath": ("opmath(x[i])", lambda x, y: x, "any"),
    "abs": ("abs(x[i])", lambda x, y: torch.abs(x), "any"),
    "erf": ("erf(x[i])", lambda x, y: torch.erf(x), "any"),
    "pow": ("pow(x[i], 3)", lambda x, y: x**3, "any"),
    "clamp": ("clamp(x[i], -0.5, y[i])", lambda x, y: torch.minimum(torch.maximum(x, torch.tensor(-0.5)), y), "any"),
    "maximum": ("maximum(x[i], y[i])", lambda x, y: torch.maximum(x, y), "any"),
    "minimum": ("minimum(x[i], 0)", lambda x, y: torch.clamp(x, max=0), "any"),
    "where": ("where(x[i] > y[i], x[i], -inf)", lambda x, y: torch.where(x > y, x, -math.inf), "any"),
    "relu": ("relu(x[i])", lambda x, y: F.relu(x), "any"),
    "leaky_relu": ("leaky_relu(x[i], negative_slope=0.2)", lambda x, y: F.leaky_relu(x, 0.2), "any"),
    "hardtanh": ("hardtanh(x[i], min_val=-2, max_val=0.5)", lambda x, y: F.hardtanh(x, -2, 0.5), "any"),
    "tanh": ("tanh(x[i])", lambda x, y: torch.tanh(x), "any"),
    "sigmoid": ("sigmoid(x[i])", lambda x, y: torch.sigmoid(x), "any"),
    "silu": ("silu(x[i])", lambda x, y: F.silu(x), "any"),
    "gelu": ("gelu(x[i], approximate=tanh)", lambda x, y: F.gelu(x, approximate="tanh"), "any"),
    "elu": ("elu(x[i], alpha=0.7)", lambda x, y: F.elu(x, 0.7), "any"),
    "selu": ("selu(x[i])", lambda x, y: F.selu(x), "any"),
    "softplus": ("softplus(x[i], beta=2)", lambda x, y: F.softplus(x, beta=2), "any"),
    "softsign": ("softsign(x[i])", lambda x, y: F.softsign(x), "any"),
    "hardsigmoid": ("hardsigmoid(x[i])", lambda x, y: F.hardsigmoid(x), "any"),
    "hardswish": ("hardswish(x[i])", lambda x, y: F.hardswish(x), "any"),
    "mish": ("mish(x[i])", lambda x, y: F.mish(x), "any"),
    "round": ("round(x[i] * 2.0)", lambda x, y: torch.round(x * 2.0), "any"),
    "floor": ("floor(x[i])", lambda x, y: torch.floor(x), "any"),
    "ceil": ("ceil(x[i])", lambda x, y: torch.ceil(x), "any"),
    "trunc": ("trunc(x[i])", lambda x, y: torch.trunc(x), "any"),
    "sign": ("sign(x[i])", lambda x, y: torch.sign(x), "any"),
    "fmod": ("fmod(x[i], y[i])", lambda x, y: torch.fmod(x, y), "any"),
    "remainder": ("remainder(x[i], y[i])", lambda x, y: torch.remainder(x, y), "any"),
    "detach": ("detach(x[i] - y[i]) * 2.0", lambda x, y: (x - y) * 2.0, "any"),
}


def build(tmp_path, text, name="k"):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source)
    return load_module(path)


def test_every_elementwise_function_has_an_oracle():
    # scans: test_scans; rand and randn: test_random
    elementwise = {n for n, f in FUNCTIONS.items() if f.kind not in ("dot", "reduction", "scan", "random")}
    assert elementwise == set(ORACLES)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_function_matches_torch(tmp_path, name, dtype):
    expr, oracle, domain = ORACLES[name]
    module = build(tmp_path, SPEC.format(dtype=dtype, expr=expr))
    g = torch.Generator().manual_seed(len(name))
    x = torch.linspace(-6, 6, 101)[torch.randperm(101, generator=g)]
    y = torch.randn(101, generator=g)
    if domain == "positive":
        x = x.abs() + 0.05
    torch_dtype = {"f32": torch.float32, "f16": torch.float16}[dtype]
    x, y = x.to(torch_dtype), y.to(torch_dtype)
    expected = oracle(x.float(), y.float())  # f16 math computes in float32, as torch does
    tolerance = 1e-5 if dtype == "f32" else 2e-3
    torch.testing.assert_close(module.k(x, y), expected.float(), atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(module.reference(x, y), expected.float(), atol=tolerance, rtol=tolerance)


MASKS = """\
kernel masks
  in  x: f32[M, N]
  out z: f32[M, N]
  block BM = 4, BN = 8
  grid  m over M by BM, n over N by BN
  z[m, n] = where(n <= m & m < N - 2 | x[m, n] > 1.5, x[m, n] + m, n / N)
"""


def test_masks_axis_values_and_sizes(tmp_path):
    """Comparisons bind tighter than & and |; an axis is its index values, a size its value."""
    module = build(tmp_path, MASKS, "masks")
    source = (tmp_path / "masks.py").read_text()
    assert "(offs_n[None, :] <= offs_m[:, None]) & (offs_m[:, None] < N - 2) | (masks > 1.5)" in source or (
        "<= offs_m[:, None]) & (offs_m[:, None] < N - 2) |" in source
    )
    x = torch.randn(13, 11) * 2
    m = torch.arange(13)[:, None]
    n = torch.arange(11)[None, :]
    expected = torch.where(((n <= m) & (m < 11 - 2)) | (x > 1.5), x + m, n / 11)
    torch.testing.assert_close(module.masks(x), expected)
    torch.testing.assert_close(module.reference(x), expected)


CASTS = """\
kernel casts
  in  x: f32[N]
  out z: f32[N]
  out w: i32[N]
  block BS = 16
  grid  i over N by BS
  z[i] = f32(f16(x[i])) - x[i]
  w[i] = i32(x[i] * 10)
"""


def test_casts(tmp_path):
    module = build(tmp_path, CASTS, "casts")
    x = torch.randn(37)
    z, w = module.casts(x)
    torch.testing.assert_close(z, x.half().float() - x)
    assert torch.equal(w, (x * 10).to(torch.int32))


REDUCE = """\
kernel reduce
  in  x: f32[B, M, N]
  out s: f32[B, N]
  out t: f32[B, M]
  grid  b over B, m over M whole, n over N whole
  s[b, n] = sum(x[b, m, n], dim=m) + min(x[b, m, n], dim=m)
  t[b, m] = mean(x[b, m, n], dim=n) * max(x[b, m, n] * 2, dim=n)
"""


def test_reductions_over_either_axis(tmp_path):
    """Reducing the first axis of a 2D tile broadcasts along the second, and the other way."""
    module = build(tmp_path, REDUCE, "reduce")
    x = torch.randn(2, 5, 9)
    s, t = module.reduce(x)
    torch.testing.assert_close(s, x.sum(1) + x.amin(1))
    torch.testing.assert_close(t, x.mean(2) * (x * 2).amax(2))


BASE = """\
kernel k
  in  x: f32[M, N]
  in  idx: i64[M]
  in  f: f32[M]
  out y: f32[M, N]
  block BM = 16
  grid  r over M by BM, c over N whole
  y[r, c] = x[r, c]
"""


def errors(text):
    with pytest.raises(SpecError) as info:
        check(parse(text, "bad.tile"))
    return info.value.render()


@pytest.mark.parametrize(
    "line,message",
    [
        (
            "y[r, c] = x[r, c] - sum(f[r], dim=c)",
            "bad.tile:8:37: error: 'sum' reduces over 'c', but its operand spans r",
        ),
        ("y[r, c] = sum(x[r, c], dim=q)", "dim= names a tile axis of the operand; 'q' is not a tile axis in scope"),
        ("y[r, c] = sum(x[r, c])", "'sum' needs the axis it reduces: sum(x, dim=<axis>)"),
        ("y[r, c] = sum(x[r, c], dim=r)", "the store to 'y' is indexed by 'r', which its value reduces over"),
        ("y[r, c] = x[r, c] * exp(sum(x[r, c], dim=r))", "outside those reductions its value may use numbers"),
        ("y[r, c] = sum(x[r, c] * sum(x[r, c], dim=r), dim=c)",
         "'r' is a grid axis tiled by BM, so one program sees one tile of M"),
        ("y[r, c] = x[r, f[r]]", "a gather index must be an integer tensor; 'f' is f32"),
        ("y[r, c] = (x[r, c] > 0) * 2", "a comparison is a mask and cannot be used as a number"),
        ("y[r, c] = x[r, c] & 1", "'&' combines masks (comparisons such as 'n <= m'), not numbers"),
        ("y[r, c] = where(x[r, c], 1, 0)", "the first argument of 'where' is a mask"),
        ("y[r, c] = exp(x[r, c] > 0)", "'exp' takes numbers, not a mask"),
        ("y[r, c] = leaky_relu(x[r, c], x[r, c])", "the negative_slope of 'leaky_relu' must be a number"),
        ("y[r, c] = clamp(x[r, c], 0, 1, 2)", "'clamp' takes 1 to 3 arguments, not 4"),
        ("y[r, c] = elu(x[r, c], beta=2)", "unknown argument 'beta' to 'elu'; expected 'alpha'"),
        ("y[r, c] = tanhh(x[r, c])", "unknown function 'tanhh'"),
        ("y[r, c] = x[r, c] * BM", "'BM' is a block size, which has no value in the body"),
        ("y[r, idx[r]] = x[r, c]", "the value spans axis 'c', which the store to 'y' does not index"),
        ("t = f[r]\n  t = x[r, c]\n  y[r, c] = t", "'t' spans ['r'], but the new value spans ['r', 'c']"),
    ],
)
def test_new_forms_are_checked(line, message):
    text = BASE.replace("y[r, c] = x[r, c]", line)
    assert message in errors(text)


def test_every_problem_is_reported_at_once():
    text = BASE.replace("y[r, c] = x[r, c]", "y[r, c] = sum(x[r, c], dim=r) + (x[r, c] > 0) * x[r, f[r]]")
    rendered = errors(text)
    # the store reduces across programs but indexes r, keeps tiles outside its reduction, a mask
    # used as a number, a float gather index
    assert rendered.count("error:") == 4


def test_a_later_loop_reuses_an_axis_name_over_the_same_dimension_only():
    text = """\
kernel k
  in  x: f32[M, N]
  in  w: f32[K]
  out y: f32[M]
  block BN = 16
  grid  r over M
  s: f32[] = 0
  for c over N by BN
    s += sum(x[r, c], dim=c)
  for c over K by BN
    s += sum(w[c], dim=c)
  y[r] = s
"""
    assert "bad.tile:10:14: error: loop axis 'c' was over 'N' (line 8)" in errors(text)
    fixed = text.replace(
        "for c over K by BN\n    s += sum(w[c], dim=c)", "for c over N by BN\n    s += sum(x[r, c], dim=c)"
    )
    check(parse(fixed, "ok.tile"))


@pytest.mark.parametrize(
    ("expr", "oracle"),
    [
        ("clamp(x[i], min=0)", lambda x, y: torch.clamp(x, min=0)),
        ("clamp(x[i], max=0.5)", lambda x, y: torch.clamp(x, max=0.5)),
        ("clamp(x[i], -0.25)", lambda x, y: torch.clamp(x, -0.25)),
        ("clamp(x[i], max=y[i])", lambda x, y: torch.clamp(x, max=y)),
        ("clamp(x[i], min=y[i], max=1.0)", lambda x, y: torch.clamp(x, min=y, max=torch.tensor(1.0))),
    ],
)
def test_clamp_takes_either_bound_alone(tmp_path, expr, oracle):
    """torch.clamp takes min or max alone (the other is None); so does the spec's clamp."""
    path = tmp_path / "k.py"
    path.write_text(compile_spec(SPEC.format(dtype="f32", expr=expr), "k.tile").source)
    module = load_module(path)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(37, generator=g), torch.randn(37, generator=g)
    torch.testing.assert_close(module.k(x, y), oracle(x, y))
    torch.testing.assert_close(module.reference(x, y), oracle(x, y))


def test_clamp_needs_a_bound():
    with pytest.raises(SpecError, match=r"k.tile:7:10: error: 'clamp' needs 'min' or 'max' \(or both\)"):
        compile_spec(SPEC.format(dtype="f32", expr="clamp(x[i])"), "k.tile")


def test_detach_changes_no_kernel_only_the_reference():
    """``detach`` marks what a gradient does not flow through: the kernels of softmax are the same
    with it and without it (its online-softmax loop kernel included, which recognises
    ``x - max(x)``), and only the reference (``torch.detach``) and the spec's echo differ."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "specs" / "softmax.tile").read_text(encoding="utf-8")
    assert "detach(max(" in source
    with_it = compile_spec(source, "specs/softmax.tile", derive=False).source
    without = compile_spec(source.replace("detach(max(xf, dim=c))", "max(xf, dim=c)"),
                           "specs/softmax.tile", derive=False).source

    def code(text):  # the kernels and launchers: no comments, no hash, no reference
        text = text.split("\ndef reference(", 1)[0]
        return [line for line in text.split("\n") if not line.lstrip().startswith("#") and "sha256" not in line
                and not re.search(r"[0-9a-f]{16}", line)]

    assert code(with_it) == code(without)
    assert "torch.detach(torch.amax(" in with_it and "torch.detach" not in without


@pytest.mark.parametrize(("call", "limits"), [
    ("hardtanh(x[n])", (-1.0, 1.0)),
    ("hardtanh(x[n], -1, 3)", (-1.0, 3.0)),
    ("hardtanh(x[n], max_val=3)", (-1.0, 3.0)),
    ("hardtanh(x[n], 0, 3)", (0.0, 3.0)),
    ("hardtanh(x[n], min_val=0, max_val=200)", (0.0, 200.0)),
])
def test_hardtanh_of_u8_is_refused_where_torch_refuses_it(tmp_path, call, limits):
    """torch refuses hardtanh of an unsigned tensor with a negative limit; so does the checker."""
    text = f"kernel ht\n  in  x: u8[N]\n  out y: u8[N]\n  block BN = 16\n  grid n over N by BN\n  y[n] = {call}\n"
    try:
        torch.nn.functional.hardtanh(torch.arange(4, dtype=torch.uint8), *limits)
        torch_refuses = False
    except RuntimeError:
        torch_refuses = True
    if torch_refuses:
        with pytest.raises(SpecError, match="'hardtanh' of a u8 tile cannot have a negative min_val"):
            compile_spec(text, "ht.tile")
    else:
        compile_spec(text, "ht.tile")


def test_an_integer_meeting_bf16_converts_its_value_not_its_bits(compiled):
    """``where`` of an i16 tile and a bf16 one is bf16, as torch promotes; the interpreter once took
    the i16's bits for a bf16's (120 came out 1e-38), so the conversion goes through float32."""
    module = compiled("kernel k\n  in  x: f32[N]\n  out y: bf16[N]\n  block BN = 4\n  grid n over N by BN\n"
                      "  y[n] = where(x[n] > 0.0, i16(clamp(x[n], -3000, 3000)), bf16(x[n]))\n")
    x = torch.tensor([120.0, 1.0, 3.0, -5.0, 0.5, -7.25, 2500.0])  # no value halfway between two bf16s
    expected = torch.where(x > 0, x.clamp(-3000, 3000).to(torch.int16), x.to(torch.bfloat16))
    assert expected.dtype == torch.bfloat16
    assert torch.equal(module.k(x), expected)
