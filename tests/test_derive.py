"""The backward derived from the forward spec (:mod:`tilegen.grad`, ``tilegen show --grad``).

Every spec of ``specs/`` without a ``backward`` line whose build derived one is differentiated
through its generated module (the op's autograd runs the derived backward's kernel) and compared
with torch's autograd through the module's torch reference (the forward's own torch code, which
torch differentiates by its formulas, not ours), at every config of the backward (in the
interpreter one of each set of block sizes: ``tests.conftest.config_indices``), on inputs of
both signs with tails (f32 in the interpreter). Where a hand-written backward exists, the derived
one is built too and the two agree. The derived text parses back and checks; the reasons a
kernel gets none are stated.
"""

import hashlib
import inspect
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.conftest import config_indices, force_config
from tilegen import model as m
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.grad import NoBackward, derive_backward, derive_backwards
from tilegen.parser import parse
from tilegen.runner import default_sizes, load_module, random_inputs

ROOT = Path(__file__).resolve().parents[1]


def _spec(path: Path) -> m.Spec:
    return check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}"))


def _derived_modules() -> dict[str, list[str]]:
    """The specs whose committed build holds a derived backward, by file stem: the module names of
    its kernels (``rms_norm_channels_backward``; a matmul's ``..._backward_da``, ``..._backward_db``),
    read from the modules' headers (made ``from specs/<file>.tile, derived backward``)."""
    found: dict[str, list[str]] = {}
    for module in sorted((ROOT / "generated").glob("*_backward*.py")):
        head = module.read_text(encoding="utf-8").split("\n", 1)[0]
        match = re.search(r"from specs/(\w+)\.tile, derived backward", head)
        if match:
            found.setdefault(match.group(1), []).append(module.stem)
    return found


DERIVED_MODULES = _derived_modules()


def _derived_kernels() -> list[str]:
    return sorted(DERIVED_MODULES)


DERIVED = _derived_kernels()

#: Kernels with a hand-written backward whose forward the rules cover: the derived one is
#: compared with the hand-written one.
HAND_WRITTEN = ["softmax", "log_softmax", "rms_norm", "layer_norm", "swiglu", "geglu", "rope"]


def _binding(spec: m.Spec) -> dict[str, str]:
    """The float32 binding of the spec's dtype variables where they take one (the interpreter's
    exact dtype), else the first."""
    return next((b for b in spec.bindings() if all(v == "f32" for v in b.values())), spec.bindings()[0])


def _grads(function, args: list, names: list[str], cotangents=None, seed: int = 7):
    """The gradients of sum(output * cotangent) over the float outputs of ``function(*args)`` with
    respect to the float tensor inputs ``names`` (clones of ``args``' values requiring grad), and
    the cotangents used (random, one per float output, drawn where ``cotangents`` is None)."""
    args = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and i in names else a
            for i, a in zip(range(len(args)), args, strict=True)]
    outputs = function(*args)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    floats = [o for o in outputs if o.is_floating_point()]
    if cotangents is None:  # the output plus noise: a cotangent along the output counts every term
        generator = torch.Generator().manual_seed(seed)
        cotangents = [(o.detach().float() + torch.randn(o.shape, generator=generator)).to(o.dtype) for o in floats]
    total = sum((o.float() * c.float()).sum() for o, c in zip(floats, cotangents, strict=True))
    total.backward()
    return [args[i].grad for i in names], cotangents



def _case(spec: m.Spec, seed: int = 0):
    typed = m.specialize(spec, _binding(spec))
    sizes = default_sizes(typed, programs=1)  # a whole tile and a partial one along each tiled axis
    inputs = random_inputs(typed, sizes, "cpu", seed=seed)
    args = [inputs[t.name.id] for t in typed.inputs]
    names = [i for i, t in enumerate(typed.inputs) if not t.is_scalar and t.dtype.id in m.FLOAT_DTYPES]
    return typed, args, names


def test_specs_get_derived_backwards():
    """The specs whose operations all have rules and no backward line: the build derived theirs."""
    assert {"add", "copy", "l1_norm", "fused_add_rms_norm", "frobenius_norm", "row_cumsum"} <= set(DERIVED)


def _build(tmp_path, source: str, name: str = "k"):
    """Compile ``source`` with its derived backward beside it in ``tmp_path``; the forward module."""
    generated = compile_spec(source, f"{name}.tile")
    assert generated.derived, generated.note
    (tmp_path / f"{name}.py").write_text(generated.source, encoding="utf-8")
    for kernel in generated.derived:
        (tmp_path / f"{kernel.kernel}.py").write_text(kernel.source, encoding="utf-8")
    return load_module(tmp_path / f"{name}.py")


def _without_backward(tmp_path, file: str, kernels: tuple[str, ...] = ("backward",)):
    """``specs/<file>.tile`` built without its ``backward`` line (so the build derives one), as kernel
    ``<file>_derived`` (its ops must not take the committed modules' names, ``torch.ops.tilegen.softmax``,
    in this process), into ``tmp_path``: the forward module, whose function is ``<file>_derived``, and
    the derived backward's (``kernels``: their names after ``<file>_derived_``)."""
    source = (ROOT / "specs" / f"{file}.tile").read_text(encoding="utf-8")
    source = "\n".join(line for line in source.split("\n") if not line.strip().startswith("backward "))
    source = source.replace(f"kernel {file}\n", f"kernel {file}_derived\n")
    forward = _build(tmp_path, source, f"{file}_derived")
    return forward, [load_module(tmp_path / f"{file}_derived_{name}.py") for name in kernels]


@pytest.mark.parametrize("file", DERIVED + HAND_WRITTEN)
def test_the_derived_backward_matches_torch_autograd(generated, monkeypatch, tmp_path, file):
    """The op's gradients (its derived backward's kernel) against torch's autograd through the
    module's reference, at every config of the backward (one forward, its graph differentiated at
    each); the cotangent is the output plus noise, so that every term of the gradient counts (with
    a cotangent uncorrelated with the output, a norm's term through its statistics is a thousandth
    of the rest). A spec with a hand-written backward is built without its backward line."""
    spec = _spec(ROOT / "specs" / f"{file}.tile")
    kernel = spec.name.id
    if file in HAND_WRITTEN:
        module, backwards = _without_backward(tmp_path, file)
        kernel = f"{kernel}_derived"
    else:
        module, backwards = generated(kernel), [generated(name) for name in DERIVED_MODULES[file]]
    typed, args, names = _case(spec)
    want, cotangents = _grads(module.reference, args, names)
    # one forward through the op; its graph differentiated again at each config of the backward
    leaves = [a.detach().clone().requires_grad_() if i in names else a for i, a in enumerate(args)]
    outputs = getattr(module, kernel)(*leaves)
    floats = [o for o in (outputs if isinstance(outputs, tuple) else (outputs,)) if o.is_floating_point()]
    total = sum((o.float() * c.float()).sum() for o, c in zip(floats, cotangents, strict=True))
    forced = [(b, i) for b in backwards if hasattr(b, "_CONFIGS") for i in config_indices(b)] or [(None, None)]
    for backward, index in forced:  # each config of each backward kernel, the others at their default
        monkeypatch.undo()
        if backward is not None:
            force_config(monkeypatch, backward, index)
        got = torch.autograd.grad(total, [leaves[i] for i in names], retain_graph=True, allow_unused=True)
        assert any(g is not None for g in want)
        for i, ours, theirs in zip(names, got, want, strict=True):
            if theirs is None:  # read only through detach (rope's cos and sin): none in either
                assert ours is None, f"a gradient for {typed.inputs[i].name.id}, which torch's autograd gives none"
                continue
            assert ours is not None, f"no gradient for {typed.inputs[i].name.id}"
            scale = theirs.abs().max().item() if theirs.numel() else 1.0
            # 1e-4 of the largest gradient; in f16 (a spec without an f32 binding), two units in its last place
            relative = max(1e-4, 2 * torch.finfo(theirs.dtype).eps)
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5 + relative * scale,
                                       msg=lambda text, i=i: f"d{typed.inputs[i].name.id}: {text}")


@pytest.mark.parametrize("file", HAND_WRITTEN)
def test_the_derived_backward_agrees_with_the_hand_written_one(generated, tmp_path, file):
    """The derived backward, built as a module of its own, gives the hand-written backward's
    gradients (through torch's autograd of the reference: the same numbers both take)."""
    path = ROOT / "specs" / f"{file}.tile"
    spec = _spec(path)
    text = derive_backward(spec, f"{spec.name.id}_grad")  # named apart from every other op of the process
    derived_module = tmp_path / f"{spec.name.id}_grad.py"
    derived_module.write_text(compile_spec(text, f"specs/{file}_grad.tile", derive=False).source, encoding="utf-8")
    derived = load_module(derived_module)
    hand, forward = generated(spec.backward[0].id), generated(spec.name.id)
    typed, args, _ = _case(spec, seed=3)
    outputs = forward.reference(*args)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    generator = torch.Generator().manual_seed(5)
    takes = set(inspect.signature(getattr(hand, spec.backward[0].id)).parameters)
    # an output whose gradient the hand-written backward does not take (layer_norm's mu and rstd)
    # gets a zero one: the derived backward takes it, and adds what it gives
    grads = {f"d{t.name.id}": torch.randn(o.shape, generator=generator).to(o.dtype) * (f"d{t.name.id}" in takes)
             for t, o in zip(typed.outputs, outputs, strict=True)}
    values = {t.name.id: a for t, a in zip(typed.inputs, args, strict=True)}
    values |= {t.name.id: o for t, o in zip(typed.outputs, outputs, strict=True)} | grads

    def call(module, kernel):
        params = [p for p in inspect.signature(getattr(module, kernel)).parameters if p != "config"]  # config=: forced
        result = getattr(module, kernel)(*[values[p] for p in params])
        return result if isinstance(result, tuple) else (result,)

    hand_spec = _spec(ROOT / "specs" / f"{spec.backward[0].id}.tile")
    ours = dict(zip([t.name.id for t in check(parse(text, "d.tile")).outputs],
                    call(derived, f"{spec.name.id}_grad"), strict=True))
    theirs = dict(zip([t.name.id for t in hand_spec.outputs], call(hand, spec.backward[0].id), strict=True))
    assert set(theirs) <= set(ours)  # the derived may give more (rope's dcos, dsin)
    for name, b in theirs.items():
        torch.testing.assert_close(ours[name].float(), b.float(), rtol=1e-4, atol=1e-4,
                                   msg=lambda t, n=name: f"{n}: {t}")


def test_show_grad_prints_a_spec_that_builds_and_says_why_not():
    from typer.testing import CliRunner

    from tilegen.cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["show", "--grad", str(ROOT / "specs" / "rms_norm.tile")])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("# The backward of specs/rms_norm.tile")
    backward = check(parse(shown.output, "rms_norm_backward.tile"))
    assert [t.name.id for t in backward.inputs] == ["dy", "x", "weight", "eps", "offset"]
    assert backward.inputs[-1].initial is not None and backward.inputs[-1].initial.text == "0.0"  # its default kept
    assert [t.name.id for t in backward.outputs] == ["dx", "dweight"]
    refused = runner.invoke(app, ["show", "--grad", str(ROOT / "specs" / "row_cumprod.tile")])
    assert refused.exit_code == 1
    assert "row_cumprod.tile:21:" in refused.output and "'cumprod' has no gradient rule" in refused.output


HEAD = "kernel k\n  in  x: f32[M, N]\n  out y: f32[M, N]\n  block BM = 2\n  grid  r over M by BM, c over N whole\n"


@pytest.mark.parametrize(("body", "reason", "line"), [
    ("  acc: f32[r, c] = 0\n  acc += x[r, c]\n  y[r, c] = acc\n", "'acc' is an accumulator", 6),
    ("  t = x[r, c]\n  t = t * 2.0\n  y[r, c] = t\n", "'t' is assigned twice (line 6 and here)", 7),
    ("  y[r, c] = x[r, c] * prod(x[r, c], dim=c)\n", "'prod' has no gradient rule for its operand", 6),
    ("  y[r, c] = x[r, c] * sum(x[r, c + 1], dim=c)\n",
     "'x' is read at a shifted index, and its gradient there is not a product with a value read at the shifted", 6),
    ("  y[r, c] = x[r, c] * 2.0\n  y[r, c] = x[r, c]\n", "output 'y' is stored twice", 7),
    ("  t = detach(x[r, c])\n  y[r, c] = t * t\n",
     "no float output depends on a float input (other than through 'detach')", 7),
])
def test_constructs_without_a_rule_are_named(body, reason, line):
    """Each construct the rules do not cover is named, at its line."""
    spec = check(parse(HEAD + body, "k.tile"))
    with pytest.raises(NoBackward, match=re.escape(reason)) as raised:
        derive_backward(spec)
    assert raised.value.span.line == line


#: One expression per gradient rule (every function with one, the operators, the reductions
#: along a whole axis and across programs), and the range its input is drawn from.
RULES = [
    ("x[r, c] * w[r, c] - x[r, c] / w[r, c] + -w[r, c]", "[0.5, 2]"),
    ("exp(x[r, c]) + exp2(x[r, c])", ""),
    ("log(x[r, c]) + log2(x[r, c]) + sqrt(x[r, c]) + rsqrt(x[r, c])", "[0.5, 2]"),
    ("erf(x[r, c]) * w[r, c]", ""),
    ("x[r, c] ** 3.0 + x[r, c] ** 2 + x[r, c] ** 0.5 + x[r, c] ** 1", "[0.5, 2]"),
    ("pow(x[r, c], s)", "[0.5, 2]"),
    ("tanh(x[r, c]) + sigmoid(x[r, c]) + silu(x[r, c])", ""),
    ("gelu(x[r, c]) + gelu(w[r, c], approximate=tanh)", ""),
    ("elu(x[r, c], 0.5) + selu(w[r, c]) + softplus(x[r, c], 2.0, 1.0)", ""),
    ("softsign(x[r, c]) + hardsigmoid(4.0 * x[r, c]) + hardswish(4.0 * w[r, c]) + mish(x[r, c])", ""),
    ("relu(x[r, c]) + leaky_relu(w[r, c], 0.2) + hardtanh(x[r, c], -0.5, 0.7) + abs(w[r, c])", ""),
    ("clamp(x[r, c], min=-0.5, max=0.5) + clamp(w[r, c], min=-0.2) + clamp(w[r, c], max=0.1)", ""),
    ("maximum(x[r, c], w[r, c]) + minimum(x[r, c], 2.0 * w[r, c])", ""),
    ("where(x[r, c] > 0, x[r, c] * w[r, c], w[r, c])", ""),
    ("fmod(3.0 * x[r, c], w[r, c]) + remainder(3.0 * x[r, c], w[r, c]) + fmod(w[r, c], 0.3)", ""),
    ("round(4.0 * x[r, c]) * w[r, c] + floor(x[r, c]) + ceil(w[r, c]) * x[r, c] + trunc(w[r, c])"
     " + sign(w[r, c]) * x[r, c]", ""),
    ("x[r, c] * sum(w[r, c], dim=c) + mean(x[r, c] * x[r, c], dim=c)", ""),
    ("x[r, c] - max(x[r, c] * w[r, c], dim=c) + min(w[r, c], dim=c)", ""),
    ("cumsum(x[r, c] * w[r, c], dim=c) + cumsum(x[r, c], dim=c, reverse=true)", ""),
    ("x[r, c] * w[r, c] + x[r, c + 1] * w[r, c] - x[r, c - 2] + 0.5 * w[r, c + (N - 1) / 2]", ""),  # N = 37
    ("exp(x[r, c] - detach(max(x[r, c], dim=c))) * detach(w[r, c] * x[r, c])", ""),
    ("exp(x[r, c] * w[r, c]) / sum(exp(x[r, c] * w[r, c]), dim=c) + x[r, c] - log(sum(exp(x[r, c]), dim=c))", ""),
]


def test_softmax_and_log_softmax_stored_read_their_outputs_back(tmp_path):
    """A softmax and a log-softmax stored as outputs: their derived backward reads them back (the
    saved outputs, as torch's softmax backward does) instead of recomputing the exponentials and
    their sums, and gives torch's autograd's gradients."""
    source = ("kernel normalized\n  in  x: f32[M, N]\n  in  w: f32[N]\n  out p: f32[M, N]\n  out q: f32[M, N]\n"
              "  block BM = 2\n  grid  r over M by BM, c over N whole\n  z = x[r, c] * w[c]\n"
              "  e = exp(z - detach(max(z, dim=c)))\n  p[r, c] = e / sum(e, dim=c)\n"
              "  q[r, c] = x[r, c] - log(sum(exp(x[r, c]), dim=c))\n")
    text = derive_backward(check(parse(source, "normalized.tile")))
    assert "  in  p: f32[M, N]\n  in  q: f32[M, N]\n" in text
    assert "exp(" not in text.split("block BM")[1].replace("exp(f32(q[r, c]))", ""), text  # nothing recomputed
    module = _build(tmp_path, source, "normalized")
    generator = torch.Generator().manual_seed(3)
    args = [torch.randn(5, 37, generator=generator) * 3, torch.randn(37, generator=generator)]
    want, cotangents = _grads(module.reference, args, [0, 1])
    got, _ = _grads(module.normalized, args, [0, 1], cotangents)
    for name, ours, theirs in zip("xw", got, want, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5, msg=lambda text, n=name: f"d{n}: {text}")


def test_values_the_forward_stores_are_read_back_not_recomputed():
    """A row statistic the forward stores exactly (layer_norm's mu and rstd, float32 both) and a
    value stored in its own dtype (fused_add_rms_norm's sum s) are read from the saved outputs:
    the derived backward neither reduces the row for them again nor reads x and residual for s."""
    layer = derive_backward(_spec(ROOT / "specs" / "layer_norm.tile"))
    assert "  row_mean = mu[r]\n" in layer and "  inv_std = rstd[r]\n" in layer
    assert "  in  mu: f32[M]\n" in layer and "  in  rstd: f32[M]\n" in layer
    assert "mean(" not in layer.split("  grid")[1] and "eps" not in layer
    fused = derive_backward(_spec(ROOT / "specs" / "fused_add_rms_norm.tile"))
    assert "  h = s[r, c]\n" in fused and "residual[" not in fused.split("  grid")[1].replace("dresidual[", "")


@pytest.mark.parametrize(("expr", "sample"), RULES)
def test_each_rule_matches_torch_autograd(tmp_path, expr, sample):
    """Each function's and operator's rule, through a derived backward built and run, against
    torch's autograd of the module's reference: x and w both get gradients; the weight gradient
    ``dv`` (v read along c only) is summed across programs."""
    kernel = f"rule{RULES.index((expr, sample))}"  # one op name per rule: none replaces another's
    source = (f"kernel {kernel}\n  in  x: f32[M, N]{' in ' + sample if sample else ''}\n  in  w: f32[M, N]\n"
              f"  in  v: f32[N]\n  in  s: f32\n  out y: f32[M, N]\n  block BM = 2\n"
              f"  grid  r over M by BM, c over N whole\n  y[r, c] = ({expr}) * v[c]\n")
    module = _build(tmp_path, source, kernel)
    generator = torch.Generator().manual_seed(11)
    x = torch.rand(5, 37, generator=generator) * 1.5 + 0.5 if sample else torch.randn(5, 37, generator=generator)
    args = [x, torch.randn(5, 37, generator=generator), torch.randn(37, generator=generator), 1.7]
    want, cotangents = _grads(module.reference, args, [0, 1, 2])
    got, _ = _grads(getattr(module, kernel), args, [0, 1, 2], cotangents)
    for name, ours, theirs in zip("xwv", got, want, strict=True):
        if theirs is None:
            assert ours is None or not ours.any(), name
            continue
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4, msg=lambda text, n=name: f"d{n}: {text}")


def test_matmul_fast_derived_backward_matches_the_hand_written_products(generated, tmp_path):
    """matmul_fast's derived backward (two products: da = dc b^T on a grid over m and k, db = a^T dc
    over k and n, each with the forward's TMA access, swizzle and configs) built without the spec's
    backward line, against torch's autograd and against the hand-written products, at the default
    configs (every config of a TMA matmul in the interpreter is the GPU suite's)."""
    forward, backwards = _without_backward(tmp_path, "matmul_fast", kernels=("backward_da", "backward_db"))
    generator = torch.Generator().manual_seed(2)
    a, b = torch.randn(37, 45, generator=generator), torch.randn(45, 29, generator=generator)
    want, cotangents = _grads(forward.reference, [a, b], [0, 1])
    got, _ = _grads(forward.matmul_fast_derived, [a, b], [0, 1], cotangents)
    for ours, theirs in zip(got, want, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())
    dc = cotangents[0]
    hand_da = generated("matmul_fast_backward_da").matmul_fast_backward_da(dc, b)
    hand_db = generated("matmul_fast_backward_db").matmul_fast_backward_db(a, dc)
    torch.testing.assert_close(backwards[0].matmul_fast_derived_backward_da(dc, b), hand_da, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(backwards[1].matmul_fast_derived_backward_db(a, dc), hand_db, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("grid", ["m over M whole, n over N by BN", "m over M by BM, n over N whole"])
def test_a_matmul_over_a_whole_grid_axis_is_refused_at_the_axis(grid):
    """A matmul whose grid axis of a's rows or b's columns is whole (no block) has no derived
    backward (its products loop over that axis in blocks): NoBackward at the axis, not a crash."""
    source = ("kernel mm\n  in  a: f32[M, K]\n  in  b: f32[K, N]\n  out c: f32[M, N]\n"
              f"  block BM = 32, BN = 32, BK = 32\n  grid  {grid}\n  acc: f32[m, n] = 0\n"
              "  for k over K by BK\n    acc += dot(a[m, k], b[k, n])\n  c[m, n] = acc\n")
    spec = check(parse(source, "mm.tile"))
    whole = next(axis for axis in spec.grid if axis.bounds == "whole")
    with pytest.raises(NoBackward, match=f"grid axis '{whole.name.id}' is whole") as raised:
        derive_backwards(spec)
    assert raised.value.span == whole.span


def test_build_says_which_kernels_have_no_backward_and_why(tmp_path):
    """The build writes a derived backward beside its forward, counts the kernels without one, and
    with -v says why each has none, at its line."""
    from typer.testing import CliRunner

    from tilegen.cli import app

    specs = [str(ROOT / "specs" / "row_cumprod.tile"), str(ROOT / "specs" / "add.tile")]
    quiet = CliRunner().invoke(app, ["build", *specs, "-o", str(tmp_path)])
    assert quiet.exit_code == 0, quiet.output
    assert "1 kernel without a backward (`tilegen build -v` says why)" in quiet.output
    assert (tmp_path / "add_backward.py").is_file() and not (tmp_path / "row_cumprod_backward.py").exists()
    verbose = CliRunner().invoke(app, ["build", *specs, "-o", str(tmp_path), "-v"])
    assert "no backward: 'cumprod' has no gradient rule for its operand (line 21)" in verbose.output


#: What random bodies are made of: values of both signs with bounded magnitude, so every function
#: stays in its domain and away from its kinks by chance only (each rule's own test covers kinks).
_LEAVES = ["x[r, c]", "w[r, c]", "v[c]", "f32(h[r, c])"]
_UNARY = ["exp(0.25 * {})", "tanh({})", "sigmoid({})", "silu({})", "gelu({})", "softsign({})", "sqrt(1.0 + {} * {})",
          "rsqrt(2.0 + {} * {})", "log(3.0 + tanh({}))", "erf({})", "{} ** 2"]
_ROWS = ["sum({}, dim=c)", "mean({}, dim=c)", "max({}, dim=c)", "min({}, dim=c)", "cumsum({}, dim=c)"]


@st.composite
def _bodies(draw, depth=3):
    """A spec body: one or two named values and a store, built from :data:`_LEAVES` by functions,
    operators and reductions along the row."""
    def expression(level):
        if level == 0 or draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from(_LEAVES))
        kind = draw(st.sampled_from(["unary", "binary", "binary", "row"]))
        if kind == "unary":
            return draw(st.sampled_from(_UNARY)).replace("{}", f"({expression(level - 1)})")
        if kind == "row":
            return draw(st.sampled_from(_ROWS)).format(expression(level - 1))
        return f"({expression(level - 1)}) {draw(st.sampled_from(['+', '-', '*']))} ({expression(level - 1)})"

    first = expression(depth)
    second = expression(depth).replace("x[r, c]", "t")
    return f"  t = {first}\n  y[r, c] = {second} + 0.5 * t\n"


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies())
def test_random_bodies_derive_what_torch_autograd_computes(tmp_path_factory, body):
    """Random compositions of rules (hoisted values, a value used twice, reductions broadcast back,
    a weight read along the row, an f16 input cast to f32): the derived backward, built and run,
    against torch's autograd of the module's reference."""
    tmp_path = tmp_path_factory.mktemp("body")
    kernel = "random_" + hashlib.sha256(body.encode()).hexdigest()[:10]
    source = (f"kernel {kernel}\n  in  x: f32[M, N]\n  in  w: f32[M, N]\n  in  v: f32[N]\n  in  h: f16[M, N]\n"
              f"  out y: f32[M, N]\n  block BM = 2\n  grid  r over M by BM, c over N whole\n{body}")
    try:
        check(parse(source, f"{kernel}.tile"))
    except SpecError:  # a reduction of what does not span its axis: not a spec
        assume(False)
    module = _build(tmp_path, source, kernel)
    generator = torch.Generator().manual_seed(3)
    args = [torch.randn(5, 19, generator=generator), torch.randn(5, 19, generator=generator),
            torch.randn(19, generator=generator), torch.randn(5, 19, generator=generator).half()]
    want, cotangents = _grads(module.reference, args, [0, 1, 2, 3])
    # exp of a square overflows for some draws: torch's own gradients are then inf or NaN, no oracle
    assume(all(t is None or bool(torch.isfinite(t).all()) for t in want))
    got, _ = _grads(getattr(module, kernel), args, [0, 1, 2, 3], cotangents)
    for name, ours, theirs in zip("xwvh", got, want, strict=True):
        if theirs is None:
            continue
        assert ours is not None, f"no gradient for {name}"
        scale = theirs.abs().max().item()
        relative = max(1e-4, 2 * torch.finfo(theirs.dtype).eps)
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=1e-3, atol=1e-5 + relative * scale,
                                   msg=lambda text, n=name: f"d{n}: {text}\n{body}")
