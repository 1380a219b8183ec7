"""``tilegen run`` and ``tilegen demo`` judge kernels on inputs their math is defined on, and say
what they saw (issue "a spec means one thing", item 7):

* NaN where the reference has NaN at the same place is equal (``torch.testing``'s
  ``equal_nan``): ``log`` of standard normal inputs passes; a NaN on one side only fails, and
  the note under the table says so;
* ``in x: f32[N] in [0.01, 10]`` draws the input from that closed range (integers for integer
  dtypes); the generated module does not change; bad ranges are ``file:line:col`` errors;
* in the interpreter, where bf16 arithmetic is wrong (triton-lang/triton#4972), a failing row
  that computes on bf16 values is SKIP, not FAIL; on a GPU it would stay FAIL.
"""

import math

import pytest
import torch
from typer.testing import CliRunner

from tests.conftest import ROOT, checked_spec, spec_named
from tilegen import model as m
from tilegen import runner
from tilegen.check import check
from tilegen.cli import app
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse
from tilegen.tolerance import compare

LOG = """kernel log_of
  in  x: f32[M, N]{range}
  out z: f32[M, N]
  block BM = 16, BN = 16
  grid  m over M by BM, n over N by BN
  z[m, n] = log(x[m, n])
"""

#: Arithmetic on two tiles of a dtype variable: bf16 in the bf16 row (wrong in the interpreter).
BF16_MATH = """kernel mul_add
  dtype T in f16, bf16
  in  x: T[N]
  in  y: T[N]
  out z: T[N]
  block BS = 64
  grid  i over N by BS
  z[i] = x[i] * y[i] + x[i]
"""


def _write(tmp_path, source: str, name: str = "spec.tile"):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return path


def _run(*args: str):
    result = CliRunner().invoke(app, ["run", *args])
    assert "Traceback" not in result.output, result.output
    return result


def _rows(output: str) -> dict[str, list[str]]:
    """kernel -> its cells in the results table (rows of rich's box characters)."""
    rows = {}
    for line in output.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            if cells[0]:
                rows[cells[0]] = cells
    return rows


def _module(tmp_path, source: str):
    generated = compile_spec(source, "spec.tile")
    path = tmp_path / f"{generated.kernel}.py"
    path.write_text(generated.source, encoding="utf-8")
    return runner.load_module(path), check(parse(source, "spec.tile"))


# ------------------------------------------------------------------------- NaN on both sides


def test_log_of_standard_normal_inputs_passes(tmp_path):
    """Half the inputs are negative: NaN in the kernel and in torch, at the same places."""
    spec_path = _write(tmp_path, LOG.format(range=""))
    module, spec = _module(tmp_path, LOG.format(range=""))
    inputs = runner.random_inputs(spec, runner.default_sizes(spec, 2), "cpu")
    assert bool((inputs["x"] < 0).any())
    assert bool(module.reference(*inputs.values()).isnan().any())
    result = _run(str(spec_path), "--programs", "2")
    assert result.exit_code == 0, result.output
    _kernel, _shape, _device, max_error, tolerance, status = _rows(result.output)["log_of"]
    assert status == "PASS" and math.isfinite(float(max_error)), result.output
    assert 0 < float(max_error) <= float(tolerance), result.output  # passed: within the tolerance there


@pytest.mark.parametrize("side", ["kernel", "reference"])
def test_nan_on_one_side_only_fails_and_the_row_says_so(tmp_path, side):
    """A kernel that gives NaN where its reference does not (or the other way round) is FAIL,
    and the note names the element."""
    module, spec = _module(tmp_path, LOG.format(range=""))
    honest = module.reference
    if side == "kernel":  # the reference takes |x|: finite where the kernel's log is NaN
        module.reference = lambda x: honest(x.abs())
    else:  # the kernel takes |x|
        launcher = module.log_of
        module.log_of = lambda x: launcher(x.abs())
    (result,) = runner.run_module(module, spec, runner.default_sizes(spec, 2), "cpu")
    assert result.status == "FAIL" and not result.passed and not result.skipped
    assert result.max_error == math.inf
    assert "log_of: FAIL: z[" in result.note and "NaN on one side only" in result.note, result.note


def test_nan_on_one_side_fails_in_the_table(tmp_path, monkeypatch):
    """Through the command: the row is FAIL, the exit code 1, the element under the table."""
    spec_path = _write(tmp_path, LOG.format(range=""))
    real = runner.load_module

    def load(path):
        module = real(path)
        honest = module.reference
        module.reference = lambda x: honest(x.abs())
        return module

    monkeypatch.setattr(runner, "load_module", load)
    result = _run(str(spec_path), "--programs", "2")
    assert result.exit_code == 1, result.output
    assert _rows(result.output)["log_of"][-1] == "FAIL"
    assert "NaN on one side only" in result.output


def test_equal_nan_is_the_runners_choice():
    """``tilegen.tolerance.compare`` keeps NaN failing unless asked; ``runner.compare`` asks."""
    spec = spec_named("copy")
    x = torch.tensor([1.0, float("nan"), -float("inf"), 4.0])
    assert not compare(spec, (x,), x.clone(), x).passed
    both = compare(spec, (x,), x.clone(), x, equal_nan=True)
    assert both.passed and both.max_error == 0.0
    assert runner.compare(x.clone(), x, spec, (x,)) == (0.0, True)
    one = x.clone()
    one[0] = float("nan")
    max_error, passed = runner.compare(one, x, spec, (x,))
    assert not passed and max_error == math.inf
    detail = runner.comparison(one, x, spec, (x,)).detail
    assert detail.startswith("z[0] = nan, reference 1") and "NaN on one side only" in detail
    assert not runner.compare(x, torch.tensor([1.0, 2.0, -float("inf"), 4.0]), spec, (x,))[1]


# ------------------------------------------------------------------------- input ranges


def test_a_range_draws_inside_it_and_log_passes(tmp_path):
    source = LOG.format(range=" in [0.01, 10]")
    spec = parse(source, "spec.tile")
    assert [(b.text, b.value) for b in spec.tensor("x").sample] == [("0.01", 0.01), ("10", 10.0)]
    module, spec = _module(tmp_path, source)
    x = runner.random_inputs(spec, {"M": 50, "N": 40}, "cpu")["x"]
    assert float(x.min()) >= 0.01 and float(x.max()) <= 10
    assert float(x.min()) < 0.5 and float(x.max()) > 9.5  # spread over the range
    assert not bool(module.reference(x).isnan().any())
    result = _run(str(_write(tmp_path, source)), "--programs", "2")
    assert result.exit_code == 0, result.output
    assert _rows(result.output)["log_of"][-1] == "PASS"


def test_ranges_of_every_dtype_kind():
    source = """kernel ranged
  dtype T in f16, bf16, f32
  in  x: T[N] in [0.01, 10]
  in  k: i32[N] in [-3, 3]
  in  u: u8[N] in [250, 255]
  in  big: i64[N] in [9223372036854775806, 9223372036854775807]
  in  neg: f64[N] in [-2.5, -2.5]
  in  idx: i64[N] in [0, 1e1]
  in  eps: f32 in [1e-6, 1e-5]
  in  shift: i32 in [-1, -1]
  out z: f32[N]
  block BS = 64
  grid  i over N by BS
  z[i] = f32(x[i]) + k[i] + u[i] + big[i] + neg[i] + idx[i] + eps + shift
"""
    spec = check(parse(source, "ranged.tile"))
    for dtype in ("f16", "bf16", "f32"):
        inputs = runner.random_inputs(m.specialize(spec, {"T": dtype}), {"N": 5000}, "cpu", seed=3)
        x = inputs["x"]
        assert x.dtype == getattr(torch, {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}[dtype])
        assert float(x.double().min()) >= 0.01 and float(x.double().max()) <= 10, dtype
    assert set(inputs["k"].tolist()) == set(range(-3, 4)) and inputs["k"].dtype == torch.int32
    assert set(inputs["u"].tolist()) == set(range(250, 256)) and inputs["u"].dtype == torch.uint8
    assert set(inputs["big"].tolist()) == {2**63 - 2, 2**63 - 1}
    assert bool((inputs["neg"] == -2.5).all())
    assert set(inputs["idx"].tolist()) == set(range(11))
    assert isinstance(inputs["eps"], float) and 1e-6 <= inputs["eps"] <= 1e-5
    assert inputs["shift"] == -1 and isinstance(inputs["shift"], int)


def test_inputs_without_a_range_are_drawn_as_before():
    """The demo's inputs do not move: standard normal floats, the same seed, the same values."""
    spec = m.specialize(spec_named("matmul_fast"), {"T": "bf16"})
    inputs = runner.random_inputs(spec, {"M": 8, "N": 8, "K": 8}, "cpu")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn((8, 8), generator=generator, dtype=torch.float32).to(torch.bfloat16)
    assert torch.equal(inputs["a"], a)


def test_a_range_with_no_value_of_the_dtype_is_an_error():
    source = LOG.replace("f32[M, N]{range}", "f16[M, N] in [0.01, 0.010001]").replace("out z: f32", "out z: f16")
    spec = check(parse(source, "spec.tile"))
    with pytest.raises(ValueError, match=r"no f16 value lies in the range \[0.01, 0.010001\] of 'x'"):
        runner.random_inputs(spec, {"M": 2, "N": 2}, "cpu")


def test_the_range_leaves_the_generated_module_alone():
    plain = compile_spec(LOG.format(range=""), "spec.tile").source.splitlines()
    ranged = compile_spec(LOG.format(range=" in [0.01, 10]"), "spec.tile").source.splitlines()
    changed = [(a, b) for a, b in zip(plain, ranged, strict=True) if a != b]
    # the header's spec hash and the op's registration (the hash): the module does not echo the spec
    assert len(changed) == 2, changed
    assert "spec sha256" in changed[0][0] and changed[1][0].startswith("op = _rt.register_op(")


@pytest.mark.parametrize(
    "declaration,location,message",
    [
        ("out z: f32[M, N] in [0, 1]", "4:24", "'z' is an output; a range (`in [low, high]`)"),
        ("in  x: f32[M, N] in [10, 0.01]", "2:24", "the range [10, 0.01] is empty: 10 is above 0.01"),
        ("in  x: i32[M, N] in [0.5, 2]", "2:24", "'x' is i32: its range takes integers, not 0.5"),
        ("in  x: u8[M, N] in [-1, 255]", "2:23", "'x' is u8, which holds 0 to 255: -1 is outside"),
        ("in  x: f16[M, N] in [0, 1e5]", "2:27", "'x' is f16, whose largest value is 65504: 1e5 is outside"),
        ("in  x: T[M, N] in [-7e4, 1]", "2:22", "'x' is f16, whose largest value is 65504: -7e4 is outside (with T"),
        ("in  s: f32 in [2, 1]", "3:18", "the range [2, 1] is empty"),
        ("in  x: f32[M, N] in [0.01]", "2:28", "unexpected ']'; expected ','"),
        ("in  x: f32[M, N] in [a, 1]", "2:24", "unexpected 'a'; expected '-' or a number"),
        ("in  x: f32[M, N] in (0, 1)", "2:23", "unexpected '('; expected '['"),
        ("in  x: f32[M, N] in [0, 1, 2]", "2:28", "unexpected ','; expected ']'"),
        ("in  x: f32[M, N] [0, 1]", "2:20", "unexpected '['; expected '=', 'in', 'packed' or end of line"),
    ],
)
def test_bad_ranges_are_located_errors(tmp_path, declaration, location, message):
    lines = [
        "kernel bad_range",
        "  in  x: f32[M, N]",
        "  in  s: f32",
        "  out z: f32[M, N]",
        "  block BM = 16, BN = 16",
        "  grid  m over M by BM, n over N by BN",
        "  z[m, n] = x[m, n] * s",
    ]
    if declaration.startswith("out"):
        lines[3] = "  " + declaration
    elif declaration.startswith("in  s"):
        lines[2] = "  " + declaration
    else:
        lines[1] = "  " + declaration
    if "T[" in declaration:
        lines.insert(1, "  dtype T in f16, f32")
        line, column = location.split(":")
        location = f"{int(line) + 1}:{column}"
    source = "\n".join(lines) + "\n"
    with pytest.raises(SpecError) as error:
        check(parse(source, "bad.tile"))
    assert f"bad.tile:{location}: error: {message}" in error.value.render(), error.value.render()
    result = CliRunner().invoke(app, ["check", str(_write(tmp_path, source, "bad.tile"))])
    assert result.exit_code == 1 and f"{location}: error: {message}" in result.output, result.output


def test_every_bad_range_of_a_spec_is_reported_at_once():
    source = LOG.format(range=" in [3, 2]").replace("out z: f32[M, N]", "out z: f32[M, N] in [0, 1]")
    with pytest.raises(SpecError) as error:
        check(parse(source, "two.tile"))
    assert [d.span.line for d in error.value.diagnostics] == [2, 3]


# ------------------------------------------------------------------------- bf16 in the interpreter


def _failing(tmp_path, source):
    """The module of ``source`` with its reference made wrong (+1): every row fails its comparison,
    as bf16 arithmetic did in the interpreter before the kernel computed it in float32; what the
    runner calls that failure is what these tests check."""
    module, spec = _module(tmp_path, source)
    honest = module.reference
    module.reference = lambda x, y: honest(x, y) + 1
    return module, spec


def test_bf16_arithmetic_in_the_interpreter_is_skip_not_fail(tmp_path):
    module, spec = _failing(tmp_path, BF16_MATH)
    f16, bf16 = runner.run_module(module, spec, runner.default_sizes(spec, 2), "cpu")
    assert f16.status == "FAIL"
    assert bf16.status == "SKIP" and bf16.skipped, bf16.note
    assert "triton-lang/triton#4972" in bf16.note and "'x[i] * y[i] + x[i]'" in bf16.note and "spec.tile:8" in bf16.note


def test_bf16_arithmetic_passes_in_the_interpreter(tmp_path):
    """The kernel computes bf16 arithmetic in float32, rounded per operation: the interpreter's
    bf16 garbage (triton-lang/triton#4972) no longer reaches it, and the row passes."""
    result = _run(str(_write(tmp_path, BF16_MATH)), "--programs", "2")
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["mul_add[T=f16]"][-1] == "PASS"
    assert rows["mul_add[T=bf16]"][-1] == "PASS", result.output


def test_on_a_gpu_the_same_failure_stays_fail(tmp_path, monkeypatch):
    """The SKIP is for the interpreter only: where kernels are compiled a failure is FAIL."""
    module, spec = _failing(tmp_path, BF16_MATH)
    monkeypatch.setattr(runner, "interpreted", lambda: False)
    f16, bf16 = runner.run_module(module, spec, runner.default_sizes(spec, 2), "cpu")
    assert f16.status == "FAIL" and bf16.status == "FAIL" and not bf16.skipped
    assert bf16.note.startswith("mul_add[T=bf16]: FAIL: z[")


def test_a_bf16_kernel_without_bf16_arithmetic_that_fails_is_fail(tmp_path):
    """Loads, stores, casts and math in float32 are right in the interpreter: no excuse."""
    source = BF16_MATH.replace("z[i] = x[i] * y[i] + x[i]", "z[i] = f32(x[i]) * f32(y[i])")
    module, spec = _module(tmp_path, source)
    assert runner.bf16_arithmetic(m.specialize(spec, {"T": "bf16"})) is None
    honest = module.reference
    module.reference = lambda x, y: honest(x, y) + 1
    results = runner.run_module(module, spec, runner.default_sizes(spec, 2), "cpu")
    assert [r.status for r in results] == ["FAIL", "FAIL"]


@pytest.mark.parametrize(
    "value,found",
    [
        ("x[i] * y[i]", "x[i] * y[i]"),
        ("-x[i]", "-x[i]"),
        ("where(x[i] > 0, x[i], 0)", "x[i] > 0"),
        ("maximum(x[i], y[i])", "maximum(x[i], y[i])"),
        ("x[i] + 1.5", "x[i] + 1.5"),
        ("exp(x[i])", None),  # math computes in float32
        ("f32(x[i]) * y[i]", None),  # f32 wins
        ("x[i]", None),
        ("where(i < 5, x[i], 0)", None),  # a select of loaded values
    ],
)
def test_bf16_arithmetic_follows_the_promotion_rules(value, found):
    spec = check(parse(BF16_MATH.replace("x[i] * y[i] + x[i]", value), "spec.tile"))
    assert runner.bf16_arithmetic(m.specialize(spec, {"T": "f16"})) is None
    where = runner.bf16_arithmetic(m.specialize(spec, {"T": "bf16"}))
    assert (where and runner._quote(spec, where)) == found


def test_a_bf16_tile_accumulated_is_bf16_arithmetic():
    source = BF16_MATH.replace(
        "  z[i] = x[i] * y[i] + x[i]\n", "  t: T[i] = 0\n  t += x[i]\n  z[i] = t\n"
    )
    spec = m.specialize(check(parse(source, "spec.tile")), {"T": "bf16"})
    where = runner.bf16_arithmetic(spec)
    assert where is not None and where.line == 9


def test_the_committed_specs_compute_bf16_in_float32():
    """Every spec in specs/, in every binding: no bf16 arithmetic, so none of the demo's rows
    could be SKIP (they all pass in the interpreter)."""
    for path in sorted((ROOT / "specs").glob("*.tile")):
        spec = check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}"))
        for binding in spec.bindings():
            assert runner.bf16_arithmetic(m.specialize(spec, binding)) is None, (path.name, binding)


def test_tile_steps_count_loops_in_sequence_and_nested():
    """Programs times the body's steps: loops one after another add up (a looped layer norm's three
    passes over a row), a loop inside another multiplies (a 3d convolution's taps, then its channel
    tiles), an index loop steps once per index; blocks are the interpreter's unless given."""
    looped = checked_spec(ROOT / "tests" / "specs" / "layer_norm_looped.tile")
    assert runner.tile_steps(looped, {"M": 3, "N": 40}) == 3 * (3 + 3 + 3)  # BN = 16: 3 tiles a pass
    assert runner.tile_steps(looped, {"M": 3, "N": 40}, {"BN": 8}) == 3 * (5 + 5 + 5)
    conv = spec_named("conv3d")
    blocks = runner.interpreter_blocks(conv)
    assert {k: blocks[k] for k in ("BO", "BW", "BC")} == {"BO": 16, "BW": 16, "BC": 16}  # its interpreter config
    sizes = {"N": 2, "O": 20, "W_out": 5, "D_out": 3, "H_out": 4, "KD": 2, "KH": 3, "KW": 1, "C": 40}
    programs = 2 * 1 * 2 * 3 * 4  # o over O by BO, ow over W_out by BW, n, od, oh
    assert runner.tile_steps(conv, sizes) == programs * 2 * 3 * 1 * 3  # kd, kh, kw, then c over C by BC
    assert runner.tile_steps(conv, sizes, {"BO": 32, "BW": 8, "BC": 64}) == 1 * 1 * 2 * 3 * 4 * 2 * 3 * 1 * 1


def test_default_sizes_keep_an_interpreter_run_within_its_steps(monkeypatch):
    """Under TRITON_INTERPRET=1 (which ``tilegen run`` and ``tilegen demo`` set on a machine without a
    GPU before sizing) a run takes at most INTERPRETER_STEPS tile steps: a 3d convolution's taps
    times its channel tiles at 5 tiles a symbol would take far more, as without the interpreter."""
    spec = spec_named("conv3d")
    interpreted = runner.default_sizes(spec, 5)
    assert runner.tile_steps(spec, interpreted) <= runner.INTERPRETER_STEPS
    monkeypatch.delenv("TRITON_INTERPRET")
    assert runner.tile_steps(spec, runner.default_sizes(spec, 5)) > 10 * runner.INTERPRETER_STEPS


def test_every_spec_at_the_demos_sizes_stays_within_the_interpreters_steps():
    """What the demo runs on a machine without a GPU: each spec's default sizes at 5 tiles a symbol
    take at most INTERPRETER_STEPS tile steps. A grid axis over a product of derived extents
    (``p over D_out * H_out * W_out``, the implicit-GEMM convolutions) sizes its first factor by the
    tiles and the later ones as a window's: with each factor the tiles' size, 97 x 97 x 97 output
    positions took 764764 steps and most of the demo's time."""
    over = {}
    for path in sorted((ROOT / "specs").glob("*.tile")):
        spec = checked_spec(path)
        steps = runner.tile_steps(spec, runner.default_sizes(spec, 5))
        if steps > runner.INTERPRETER_STEPS:
            over[path.stem] = steps
    assert not over
    spec = spec_named("conv3d_implicit_gemm")
    sizes = runner.default_sizes(spec, 5)
    assert sizes["D"] > 16 * sizes["H"] and sizes["H"] == sizes["W"] <= 3
