"""Dtype variables (``dtype T in f16, bf16``): one spec, one kernel, every dtype of the list.

The checker checks each binding and says which binding a problem belongs to; lowering writes the
variable (``acc.to(T)``, ``dtype=T``), so one kernel serves every dtype, and refuses a list
whose dtypes would need different kernels. Launchers read ``T`` off the first input typed with it.
"""

import importlib.util
import sys
import warnings

import pytest
import torch

from tilegen import model as m
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse
from tilegen.runner import default_sizes, random_inputs
from tilegen.tolerance import compare

MATMUL = """\
kernel mm
  dtype T in f16, bf16, f32
  in  a: T[M, K]
  in  b: T[K, N]
  out c: T[M, N]
  block BM = 16, BN = 16, BK = 16
  grid m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""

# attention's second dot: a computed f32 tile cast to T, the dtype of v
SCALE_CAST = """\
kernel scaled
  dtype T in f16, bf16
  in  x: T[N]
  in  s: f32
  out y: T[N]
  out z: f32[N]
  block BS = 32
  grid i over N by BS
  y[i] = T(x[i] * s)
  z[i] = x[i]
"""


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


def _module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"tilegen_dtype_vars_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bindings_and_specialize_write_the_variable_and_its_dtype():
    spec = check(parse(MATMUL, "mm.tile"))
    assert spec.bindings() == [{"T": "f16"}, {"T": "bf16"}, {"T": "f32"}]
    bf16 = m.specialize(spec, {"T": "bf16"})
    a = bf16.tensor("a")
    assert isinstance(a.dtype, m.BoundDtype)
    assert (a.dtype.id, a.dtype.var, a.dtype.options) == ("bf16", "T", ("f16", "bf16", "f32"))
    assert bf16.body[0].dtype.id == "f32" and not isinstance(bf16.body[0].dtype, m.BoundDtype)


def test_one_kernel_writes_the_variable():
    source = compile_spec(MATMUL, "mm.tile").source
    assert source.count("@triton.jit") == 1  # the kernel (_dot_operand, bf16 under the interpreter, is the runtime's)
    bound = next(line for line in source.splitlines() if line.startswith("_") and " = _rt." in line)
    names, values = bound.split(" = ")
    assert dict(zip(names.split(", "), values.split(", "), strict=True))["_dot_operand"] == "_rt.dot_operand"
    assert source.count("def mm_kernel(") == 1
    assert "    T = a_ptr.dtype.element_ty\n" in source  # the kernel reads T off a
    assert "tl.store(c_ptrs, acc.to(T), mask=mask_mn)" in source
    assert "    T = a.dtype\n" in source  # the launcher too
    assert "c = torch.empty(M, N, device=device, dtype=T)" in source
    assert "tl.float16" not in source.split("def mm_kernel(")[1].split("def mm(")[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_each_dtype_runs_and_returns_its_dtype(tmp_path, dtype):
    module = _module(tmp_path, MATMUL, "mm")
    spec = m.specialize(check(parse(MATMUL, "mm.tile")), {torch.float16: {"T": "f16"},
                                                          torch.bfloat16: {"T": "bf16"},
                                                          torch.float32: {"T": "f32"}}[dtype])
    a = torch.randn(37, 41).to(dtype)
    b = torch.randn(41, 23).to(dtype)
    c = module.mm(a, b)
    assert c.dtype == dtype and c.shape == (37, 23)
    expected = (a.double() @ b.double()).to(dtype)
    assert compare(spec, (a, b), c, expected).passed
    assert module.reference(a, b).dtype == dtype


def test_inputs_must_share_the_variable_dtype(tmp_path):
    module = _module(tmp_path, MATMUL, "mm")
    a = torch.randn(8, 8).half()
    with pytest.raises(TypeError, match=r"mm: b must have dtype torch.float16 like a, got torch.bfloat16"):
        module.mm(a, a.bfloat16())
    with pytest.raises(TypeError, match=r"mm: a must have dtype torch.float16 or torch.bfloat16 or torch.float32, "
                                        r"got torch.float64"):
        module.mm(a.double(), a.double())


def test_cast_to_the_variable(tmp_path):
    module = _module(tmp_path, SCALE_CAST, "scaled")
    source = compile_spec(SCALE_CAST, "s.tile").source
    assert "tl.store(y_ptr + offs_i * stride_y_n, (x * s).to(T), mask=mask_i)" in source  # one cast
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(70).to(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y, z = module.scaled(x, 0.5)
        assert y.dtype == dtype and z.dtype == torch.float32
        assert torch.equal(y, (x.float() * 0.5).to(dtype)) and torch.equal(z, x.float())


def test_op_takes_each_dtype_and_fakes_it(tmp_path):
    from torch._subclasses.fake_tensor import FakeTensorMode

    _module(tmp_path, MATMUL, "mm")
    with FakeTensorMode():
        a = torch.empty(5, 7, dtype=torch.bfloat16)
        b = torch.empty(7, 3, dtype=torch.bfloat16)
        c = torch.ops.tilegen.mm(a, b)
    assert (c.shape, c.dtype) == ((5, 3), torch.bfloat16)
    spec = m.specialize(check(parse(MATMUL, "mm.tile")), {"T": "bf16"})
    args = list(random_inputs(spec, default_sizes(spec, 1), "cpu").values())
    torch.library.opcheck(torch.ops.tilegen.mm.default, args)


@pytest.mark.parametrize(
    "declaration,message",
    [
        ("dtype T in f16, i32",
         "dtype variable 'T' may stand for float dtypes (f16, bf16, f32, f64, f8e4m3, f8e5m2), not 'i32'"),
        ("dtype T in f16, f16", "'f16' is listed twice for dtype variable 'T'"),
        ("dtype T in f16", "dtype variable 'T' needs two or more dtypes; for one, write it in place of 'T'"),
        ("dtype f16 in f16, bf16", "dtype variable name 'f16' is reserved; choose another name"),
        ("dtype a in f16, bf16", "duplicate name 'a' (first defined at line 2)"),
    ],
)
def test_bad_declarations(declaration, message):
    text = MATMUL.replace("dtype T in f16, bf16, f32", declaration)
    assert message in _errors(text)


def test_a_variable_no_tensor_is_typed_with_is_refused():
    text = (MATMUL.replace("in  a: T[M, K]", "in  a: f16[M, K]").replace("in  b: T[K, N]", "in  b: f16[K, N]")
            .replace("out c: T[M, N]", "out c: f32[M, N]"))
    assert ("no input or output tensor is typed 'T'; the launcher takes 'T' from an input's dtype (in a: T[...]), "
            "or the caller chooses it for the outputs typed with it (out y: T[...])" in _errors(text))


# the output's dtype the caller's: the inputs' (T) by default, or f32
CHOSEN = MATMUL.replace("  in  a:", "  dtype G in T, f32\n  in  a:").replace("out c: T[M, N]", "out c: G[M, N]")


def test_a_variable_no_input_is_typed_with_is_the_callers_keyword(tmp_path):
    """``dtype G in T, f32`` with ``out c: G[M, N]``: G is T unless the caller passes G=torch.float32;
    the f32 output holds the f32 accumulator unrounded, the default one it rounded to T; the fast
    path keys on G; another dtype is refused naming G and its options."""
    spec = check(parse(CHOSEN, "mm.tile"))
    assert spec.bindings() == [{"T": "f16", "G": "f16"}, {"T": "f16", "G": "f32"}, {"T": "bf16", "G": "bf16"},
                               {"T": "bf16", "G": "f32"}, {"T": "f32", "G": "f32"}]
    assert spec.dtype_options(m.Name("G", spec.name.span)) == ("f16", "bf16", "f32")
    module = _module(tmp_path, CHOSEN, "mm_chosen")
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(*shape, generator=generator) for shape in ((33, 40), (40, 17)))
    exact = a.double() @ b.double()
    for dtype in (torch.float16, torch.float32):  # (the interpreter rounds f32 to bf16 toward zero)
        x, y = a.to(dtype), b.to(dtype)
        for _ in range(2):  # the second call of each takes the fast path
            narrow, wide = module.mm(x, y), module.mm(x, y, G=torch.float32)
            assert (narrow.dtype, wide.dtype) == (dtype, torch.float32)
            torch.testing.assert_close(narrow, wide.to(dtype), rtol=0, atol=0)  # one rounding of the same sum
            torch.testing.assert_close(wide.double(), x.double() @ y.double(), rtol=1e-5, atol=1e-5)
        assert module.reference(x, y).dtype == dtype
        torch.testing.assert_close(module.reference(x, y, G=torch.float32), wide, rtol=1e-5, atol=1e-5)
    assert (module.mm(a, b, G=torch.float32) - exact).abs().max() < 1e-4
    with pytest.raises(ValueError, match=r"mm: G must be torch.float16 or torch.float32 here, got torch.bfloat16"):
        module.mm(a.half(), b.half(), G=torch.bfloat16)
    torch.library.opcheck(module.op, (a.half(), b.half()), {"G": torch.float32})
    compiled = torch.compile(lambda x, y: module.mm(x, y, G=torch.float32), backend="eager", fullgraph=True)
    assert compiled(a.half(), b.half()).dtype == torch.float32


@pytest.mark.parametrize(
    "declaration,message",
    [
        ("dtype G in U, f32", "dtype variable 'G' may stand for float dtypes"),
        ("dtype G in H, f32\n  dtype H in f16, f32", "'H' names a dtype variable declared after 'G'"),
    ],
)
def test_an_option_names_only_an_earlier_variable(declaration, message):
    text = CHOSEN.replace("dtype G in T, f32", declaration)
    assert any(message in e for e in _errors(text))


def test_a_problem_of_one_binding_names_it():
    text = MATMUL.replace("dtype T in f16, bf16, f32", "dtype T in f16, f64")
    assert ("'dot' does not take f64 tiles ('a'); operands are one of f16, bf16, f32, f8e4m3, f8e5m2, i8 (with T = f64)"
            in _errors(text))


def test_dtypes_that_need_different_kernels_are_refused():
    """exp of an f16 tile computes in f32 (an upcast), of an f64 tile in f64: two kernels. An f32
    binding shares the f16 kernel (its upcast is free) and computes exp of the f32 tile."""
    text = """\
kernel e
  dtype T in f16, f64
  in  x: T[N]
  out y: T[N]
  block BS = 32
  grid i over N by BS
  y[i] = exp(x[i])
"""
    (message,) = _errors(text)
    assert message.startswith("'T' = f64 needs another kernel than T = f16")
    source = compile_spec(text.replace("f16, f64", "f16, f32"), "e.tile").source
    assert "dtype T in f16, f32" in source and "tl.exp(x.to(tl.float32))" in source


def test_tolerance_binds_the_variable_to_the_arguments():
    """The tolerance of a T output is T's (an f16 output gets f16's, not an integer's bound)."""
    from tilegen.tolerance import bind_to

    spec = check(parse(MATMUL, "mm.tile"))
    a, b = torch.randn(16, 32).bfloat16(), torch.randn(32, 8).bfloat16()
    assert bind_to(spec, (a, b)).tensor("c").dtype.id == "bf16"
    a, b = a.half(), b.half()
    expected = (a.double() @ b.double()).half()
    assert compare(spec, (a, b), expected, expected).passed
    assert not compare(spec, (a, b), (expected.float() + 0.25).half(), expected).passed


def test_cli_run_gives_a_row_per_dtype(tmp_path):
    """``tilegen run`` (and the demo) check every dtype of a dtype variable against the reference."""
    from typer.testing import CliRunner

    from tilegen.cli import app

    spec = tmp_path / "mm.tile"
    spec.write_text(MATMUL, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(spec), "--size", "M=20", "--size", "N=18", "--size", "K=40"])
    assert result.exit_code == 0, result.output
    for dtype in ("f16", "bf16", "f32"):
        assert f"mm[T={dtype}]" in result.output
    assert result.output.count("PASS") == 3


def test_a_cast_to_a_written_dtype_is_not_converted_again(compiled):
    """``f32(dy)`` in a spec with ``dtype T in f32, f16`` is float32 under every binding: the sum
    over it takes ``dy.to(tl.float32)``, once (it was ``dy.to(tl.float32).to(tl.float32)``, in
    group_norm's and batch_norm's derived backwards), and still sums f16 in float32."""
    text = ("kernel k\n  dtype T in f32, f16\n  in  dy: T[B, H, N]\n  out s: T[B]\n"
            "  grid  b over B, h over H, n over N whole\n  s[b] = sum(sum(f32(dy[b, h, n]), dim=n), dim=h)\n")
    source = compile_spec(text, "k.tile").source
    assert ".to(tl.float32).to(tl.float32)" not in source and "dy.to(tl.float32)" in source
    module = compiled(text)
    for dtype in (torch.float32, torch.float16):
        dy = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1)).to(dtype)
        tol = 1e-5 if dtype == torch.float32 else 1e-3
        torch.testing.assert_close(module.k(dy).float(), dy.float().sum((1, 2)), rtol=tol, atol=tol)


EXP_CHOSEN = """\
kernel ex
  dtype T in f16, bf16, f32
  dtype G in T, f32
  in  x: T[N]
  out y: G[N]
  block BN = 32
  grid i over N by BN
  y[i] = exp(x[i])
"""


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("chosen", [None, torch.float32])
def test_a_derived_backward_reads_the_chosen_dtype_off_the_gradient(tmp_path, dtype, chosen):
    """The derived backward of ``out y: G[N]`` takes ``dy: G[N]``, where G, read off dy, is T or
    f32 (an option naming T in a variable an input is typed with); dx is in x's dtype."""
    from tilegen.build import build
    from tilegen.grad import derive_backward
    from tilegen.runner import load_module

    derived = check(parse(derive_backward(check(parse(EXP_CHOSEN, "ex.tile"))), "ex_backward.tile"))
    assert [m.as_written(t.dtype) for t in derived.inputs if t.name.id == "dy"] == ["G"]
    assert not derived.chosen_dtype_vars()  # G is read off dy there
    spec = tmp_path / "ex.tile"
    spec.write_text(EXP_CHOSEN, encoding="utf-8")
    build([spec], tmp_path / "out")
    assert (tmp_path / "out" / "ex_backward.py").is_file()
    module = load_module(tmp_path / "out" / "ex.py")
    x = (torch.randn(45, generator=torch.Generator().manual_seed(3)) * 2).to(dtype).requires_grad_()
    y = module.ex(x, G=chosen)
    assert y.dtype == (chosen or dtype)
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad, torch.exp(x.detach().float()).to(dtype))


def test_options_naming_earlier_variables_bind_in_the_same_assignment():
    """H in G, f16 with G in T, f32: H is whatever G is in that assignment, or f16; the options
    spelled out are every dtype the named variables may be."""
    text = (CHOSEN.replace("dtype G in T, f32", "dtype G in T, f32\n  dtype H in G, f16")
            .replace("out c: G[M, N]", "out c: G[M, N]\n  out d: H[M, N]")
            .replace("  c[m, n] = acc", "  c[m, n] = acc\n  d[m, n] = acc"))
    spec = check(parse(text, "mm.tile"))
    assert [v.name.id for v in spec.chosen_dtype_vars()] == ["G", "H"]
    assert {"T": "bf16", "G": "f32", "H": "f32"} in spec.bindings()
    assert {"T": "bf16", "G": "f32", "H": "f16"} in spec.bindings()
    assert {"T": "bf16", "G": "f32", "H": "bf16"} not in spec.bindings()  # H is G's dtype, not T's
    assert len(spec.bindings()) == len({tuple(b.items()) for b in spec.bindings()})  # no assignment twice
    assert spec.dtype_options(m.Name("H", spec.name.span)) == ("f16", "bf16", "f32")
    source = compile_spec(text, "mm.tile").source  # one kernel for every assignment
    assert 'H = _rt.chosen_dtype("mm", "H", H, (G, torch.float16))' in source
