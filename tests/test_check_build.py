"""``tilegen check`` says what ``tilegen build`` says: the same verdict and the same errors for
every spec in the repository and for specs that must be refused, including one refused only
once lowered (a dtype variable over f64 and f16, whose bindings need two kernels).

Before, ``check`` stopped after the checker: a spec with ``dtype T in f16, bf16, f32`` computing
through float32 passed ``check`` and failed ``build`` ("'T' = f32 needs another kernel"). Now such
a spec is one kernel (``.to(tl.float32)`` of an f32 tile is free) and runs for every binding.
"""

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from tests.conftest import ROOT
from tilegen.cli import app
from tilegen.compiler import compile_spec
from tilegen.runner import load_module

SPEC_FILES = sorted((ROOT / "specs").glob("*.tile")) + sorted((ROOT / "tests" / "specs").glob("*.tile"))

#: A swiglu that computes through float32 for every binding of T (Liger's swiglu runs so).
SWIGLU = """\
kernel swiglu
  dtype T in f16, bf16, f32
  in  a: T[M, N]
  in  b: T[M, N]
  out c: T[M, N]
  out s: f32[M]
  block BM = 2
  grid  r over M by BM, j over N whole
  g = f32(a[r, j])
  c[r, j] = silu(g) * b[r, j]
  s[r] = sum(a[r, j], dim=j)
"""

#: name -> spec text that must be refused, by the parser, the checker or the lowering
REFUSED = {
    "syntax": "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n  z[i] = x[i] **\n",
    "undeclared": "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n  z[i] = y[i]\n",
    "partial_reduction": (
        "kernel k\n  in  x: f32[M, N]\n  out z: f32[M]\n  block BM = 4, BN = 8\n"
        "  grid r over M by BM, c over N by BN\n  s = sum(x[r, c], dim=c) * x[r, c]\n  z[r] = s\n"
    ),
    "two_kernels": SWIGLU.replace("f16, bf16, f32", "f16, f64"),
}


def verdict(command: str, path, tmp_path) -> tuple[int, str]:
    args = [command, str(path)] + (["-o", str(tmp_path / "out")] if command == "build" else [])
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if ": error: " in line]
    return result.exit_code, "\n".join(errors)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_check_and_build_pass_every_spec(path, tmp_path):
    """`tilegen check` passes every spec, and `tilegen build` builds it: here for tests/specs, and
    for specs/ in tests/test_build.py's test_generated_is_current (one build of them all, compared
    with generated/)."""
    assert verdict("check", path, tmp_path) == (0, "")
    if path.parent != ROOT / "specs":
        assert verdict("build", path, tmp_path) == (0, "")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_check_and_build_refuse_the_same_specs_with_the_same_errors(name, tmp_path):
    path = tmp_path / f"{name}.tile"
    path.write_text(REFUSED[name])
    checked, built = verdict("check", path, tmp_path), verdict("build", path, tmp_path)
    assert checked == built
    assert checked[0] == 1 and f"{name}.tile:" in checked[1]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_dtype_variable_computing_through_f32_is_one_kernel_for_every_binding(tmp_path):
    path = tmp_path / "swiglu.py"
    path.write_text(compile_spec(SWIGLU, "tests/swiglu.tile").source)
    module = load_module(path)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16):  # bf16 math is wrong in the interpreter (triton#4972)
        a, b = torch.randn(5, 37).to(dtype), torch.randn(5, 37).to(dtype)
        c, s = module.swiglu(a, b)
        assert c.dtype == dtype and s.dtype == torch.float32
        tol = {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 2e-3, "rtol": 2e-3}
        torch.testing.assert_close(c, (F.silu(a.float()) * b.float()).to(dtype), **tol)
        torch.testing.assert_close(s, a.float().sum(1), atol=1e-5, rtol=1e-5)
        ref_c, ref_s = module.reference(a, b)
        torch.testing.assert_close(c, ref_c, **tol)
        torch.testing.assert_close(s, ref_s, atol=1e-5, rtol=1e-5)


#: An output's size that no input gives: check passed it, and the launcher raised
#: "NameError: name 'M' is not defined" at the call.
UNBOUND = """\
kernel k
  in  x: f32[N]
  out y: f32[M]
  block BM = 16
  grid  m over M by BM
  y[m] = x[0] * 2
"""


@pytest.mark.parametrize(("declared", "what"), [
    ("", "given by no input"),
    ("  in  M: f32\n", "a float scalar input"),
])
def test_an_output_size_no_input_gives_is_refused_at_its_dimension(tmp_path, declared, what):
    path = tmp_path / "k.tile"
    path.write_text(UNBOUND.replace("  out y", declared + "  out y"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "k.py").write_text("# the module built before\n")
    line = 3 + bool(declared)
    for command in ("check", "build"):
        code, errors = verdict(command, path, tmp_path)
        assert code == 1 and errors.splitlines()[0] == (
            f"{path}:{line}:14: error: output 'y' has dimension 'M', which is {what}: the launcher makes "
            "outputs from the sizes of its inputs, so name a dimension of an input tensor, or take it as an "
            "integer scalar input ('in M: i32')"
        )
        assert len(errors.splitlines()) == 1 + bool(declared)  # and a float M is a second 'M' besides
    assert [p.name for p in out.iterdir()] == ["k.py"] and (out / "k.py").read_text() == "# the module built before\n"


def test_an_output_size_an_integer_scalar_input_gives_runs(compiled):
    module = compiled(UNBOUND.replace("  out y", "  in  M: i32\n  out y"))
    y = module.k(torch.tensor([1.5, 2.0]), 37)
    assert torch.equal(y, torch.full((37,), 3.0)) and torch.equal(module.reference(torch.tensor([1.5, 2.0]), 37), y)
