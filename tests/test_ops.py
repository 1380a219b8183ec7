"""Generated kernels as PyTorch custom ops (``torch.ops.tilegen.<kernel>``).

Every spec's module registers its op on import; ``torch.library.opcheck`` passes (schema,
fake implementation, AOT dispatch with dynamic shapes); the op matches the launcher in eager
mode and inside ``torch.compile(fullgraph=True)`` (``aot_eager`` in the interpreter, Inductor
on a GPU). Where there is no GPU the kernels run in Triton's interpreter (tests/conftest.py).
"""

import os
import threading
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import checked_spec, fake_call, force_config
from tests.meaning_cases import derive_sizes, uses_tma
from tilegen import model as m
from tilegen.compiler import compile_spec
from tilegen.runner import compare, default_sizes, fit_jagged_rows, random_inputs
from tilegen.sizes import divided

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(p.stem for p in (ROOT / "specs").glob("*.tile"))
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
BACKEND = "aot_eager" if INTERPRET else "inductor"


def _spec(name):
    return checked_spec(ROOT / "specs" / f"{name}.tile")


def _inputs(spec, device=DEVICE, small=False):
    """Inputs at the default sizes (one tile and a tail per size symbol), or where ``small``, at
    sizes below every block (one partial tile along each axis; no dimension of 1, which dynamic
    shapes would specialize on, and quotients of sizes kept whole; rows a TMA descriptor reads
    16-byte aligned, so that its kernel runs). An integer scalar that is no tensor's dimension (a
    stride, a padding) keeps its value: opcheck and the compiled graph take it as a constant (see
    :func:`_fewest_outputs` for the value the interpreter runs)."""
    sizes = default_sizes(spec, 1)
    if small:
        tiny = derive_sizes(spec, variant="tma" if uses_tma(spec) else "", shape="tiny")
        dims = {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
        constants = {t.name.id for t in spec.inputs if t.is_scalar} - dims
        sizes = {name: 2 if size == 1 and name not in constants else size for name, size in tiny.items()}
        for name, (numerator, divisor) in divided(spec).items():  # H = (H / HK) * HK, HK now 2
            sizes[numerator] = sizes[name] * (divisor if isinstance(divisor, int) else sizes[divisor])
        sizes = fit_jagged_rows(spec, sizes)
    return list(random_inputs(spec, sizes, device).values())


def _fewest_outputs(module, spec, args: list) -> list:
    """``args`` with each integer scalar drawn from a range (a stride, a padding) at the end of its
    range that gives the fewest output elements, one scalar after another, the others held
    (outputs sized by the op's fake implementation, nothing run): a convolution's largest stride
    and smallest padding, a transposed one's smallest stride and largest padding. What the
    opcheck test checks does not depend on the values, and the interpreter's time on a 3D
    convolution grows with its programs."""
    from tests.conftest import fake_call

    def outputs(candidate: list) -> float:
        try:
            return sum(o.numel() for o in fake_call(module, candidate, device=DEVICE))
        except (ValueError, TypeError):  # a combination the launcher refuses (output padding >= stride)
            return float("inf")

    args = list(args)
    for position, tensor in enumerate(spec.inputs):
        if tensor.is_scalar and tensor.sample is not None and isinstance(args[position], int):
            ends = [int(n.value) for n in tensor.sample]
            args[position] = min(ends, key=lambda end: outputs([*args[:position], end, *args[position + 1:]]))
    return args


def _ulps(dtype: torch.dtype) -> float:
    """A few units in the last place of ``dtype`` near 1 (4 eps), and no less than f16's: how far
    two configs of one kernel, summing in other orders, may land apart."""
    return max(4e-3, 4 * torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _same(got, expected, exact=True):
    """Outputs equal in shape, dtype and device, and in value: bit for bit when ``exact``; else
    (Inductor tunes a kernel's configs itself, and another block shape sums in another order)
    within a few units in the last place of the output's dtype (:func:`_ulps`)."""
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype and g.device == e.device
        tolerance = 0 if exact else _ulps(e.dtype)
        torch.testing.assert_close(g, e, rtol=tolerance, atol=tolerance, equal_nan=True)


def _cases(every_dtype: bool) -> list[tuple[str, dict[str, str]]]:
    """(spec file stem, dtype binding) for every spec: every binding of its dtype variables, or the
    first (``{}`` for a spec without dtype variables)."""
    return [(name, binding) for name in SPECS for binding in _spec(name).bindings()[: None if every_dtype else 1]]


# every dtype of a spec with dtype variables on the GPU (one op serves them all, a kernel each);
# in the interpreter, where one Python function runs each, the first (the suite's time)
GPU_CASES = _cases(every_dtype=True)
CASES = _cases(every_dtype=not INTERPRET)


def _op_case(name, binding, device=DEVICE, small=False):
    """test_op_registered_opcheck_and_compile's call: spec ``name`` specialized to ``binding``, and
    its inputs (default sizes, or ``small`` ones: see :func:`_inputs`) on ``device``."""
    spec = m.specialize(_spec(name), binding)
    return spec, _inputs(spec, device, small)


#: The op schemas' argument and return types compiled so far in this process: Dynamo traces a call
#: of an op by its schema, so in the interpreter (aot_eager) one op of each kind is compiled; on
#: the GPU every op is (Inductor then launches each spec's kernel).
_COMPILED_SCHEMAS: set[tuple[tuple[tuple[str, bool], ...], tuple[str, ...]]] = set()


@pytest.mark.parametrize(
    "name,binding", CASES, ids=[name + "".join(f"-{d}" for d in b.values()) for name, b in CASES]
)
def test_op_registered_opcheck_and_compile(generated, name, binding):
    """Every spec, and on the GPU every dtype of a spec with dtype variables (one op serves them all).
    In the interpreter at sizes below every block: what this checks (the op's registration, schema,
    fake implementation, AOT dispatch, a compiled graph: there, one for each kind of schema) does not
    depend on how many tiles run, and the interpreter runs a [BK, BN] tile of a combine-function
    reduction (prod, argmax) element by element; tests/test_meaning.py runs every spec at tails of
    several tiles."""
    spec, args = _op_case(name, binding, small=INTERPRET)
    kernel = spec.name.id
    module = generated(kernel)
    if INTERPRET:
        args = _fewest_outputs(module, spec, args)
    op = getattr(torch.ops.tilegen, kernel)
    assert module.op is op
    launcher = getattr(module, kernel)
    expected = launcher(*args)
    # float atomic adds (a scatter-add, y[idx[t], c] += v) sum in the order the GPU's atomics take
    ordered = INTERPRET or not any(isinstance(s, m.Store) and s.atomic for s in m.statements(spec.body))
    _same(op(*args), expected, exact=ordered)
    # a tuned kernel traced for the GPU runs the config Triton's autotuner picks there, which may
    # differ from the launcher's choice (and so sum in another order): ulps of the outputs' dtype apart
    exact = (spec.tune is None or INTERPRET) and ordered
    outputs = expected if isinstance(expected, tuple) else (expected,)
    tolerance = max(_ulps(o.dtype) for o in outputs)
    options = {} if exact else {"atol": tolerance, "rtol": tolerance}
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    if any(isinstance(a, torch.Tensor) and a.dtype in fp8 for a in args):  # torch's schema check multiplies
        options["test_utils"] = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(op.default, args, **options)
    schema = op.default._schema
    kinds = (tuple((str(a.type), a.kwarg_only) for a in schema.arguments), tuple(str(r.type) for r in schema.returns))
    if INTERPRET and kinds in _COMPILED_SCHEMAS:  # aot_eager runs what opcheck's AOT dispatch ran
        return
    _COMPILED_SCHEMAS.add(kinds)

    def model(*tensors):
        return op(*tensors)

    torch._dynamo.reset()  # a fresh cache: every spec compiles this same function
    compiled = torch.compile(model, backend=BACKEND, fullgraph=True)
    _same(compiled(*args), expected, exact=spec.tune is None or INTERPRET)


def test_schema_follows_the_spec(generated):
    """Tensors, scalars, block-size keywords and choices become the op's schema."""
    generated("layer_norm"), generated("matmul_tutorial"), generated("copy")
    assert str(torch.ops.tilegen.copy.default._schema) == "tilegen::copy(Tensor x, *, SymInt BS=1024) -> Tensor"
    assert str(torch.ops.tilegen.layer_norm.default._schema) == (
        "tilegen::layer_norm(Tensor x, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)"
    )
    assert str(torch.ops.tilegen.matmul_tutorial.default._schema) == (
        'tilegen::matmul_tutorial(Tensor a, Tensor b, *, SymInt GROUP_SIZE_M=8, str activation="none") -> Tensor'
    )


def test_a_triton_op_takes_the_launchers_schema_and_traces_the_runtimes_launch(generated, monkeypatch):
    """On the GPU a pointer kernel's op is a ``torch.library.triton_op`` whose body is the runtime's
    traced launch over the module's plan (``Launch.traced_call``): registered here as on the GPU, its
    schema is the launcher's (keywords included, ``config=`` left out), and on a GPU that body, called
    outside tracing (``wrap_triton`` then calls the kernel; it needs a GPU's driver), computes what
    the launcher does."""
    module = generated("matmul_tutorial")
    monkeypatch.setattr(module._rt, "INTERPRET", False)  # register as on the GPU
    op = module._rt.register_op("matmul_tutorial_as_on_a_gpu", "0" * 16, module.matmul_tutorial,
                                module._matmul_tutorial_launch)
    monkeypatch.setattr(module._rt, "INTERPRET", INTERPRET)
    assert str(op.default._schema) == ('tilegen::matmul_tutorial_as_on_a_gpu(Tensor a, Tensor b, *, '
                                       'SymInt GROUP_SIZE_M=8, str activation="none") -> Tensor')
    if INTERPRET:
        return
    a = torch.randn(40, 64, device=DEVICE).half()
    b = torch.randn(64, 30, device=DEVICE).half()
    traced = module._matmul_tutorial_launch.traced_call(a, b, activation="leaky_relu")
    _same(traced, module.matmul_tutorial(a, b, activation="leaky_relu"))


def test_keywords_reach_the_kernel_through_the_op(generated):
    module = generated("matmul_tutorial")
    a = torch.randn(40, 64, device=DEVICE).half()
    b = torch.randn(64, 30, device=DEVICE).half()
    relu = torch.ops.tilegen.matmul_tutorial(a, b, activation="leaky_relu")
    _same(relu, module.matmul_tutorial(a, b, activation="leaky_relu"))
    assert not torch.equal(relu, module.matmul_tutorial(a, b))
    with pytest.raises(ValueError, match="activation must be one of"):
        torch.ops.tilegen.matmul_tutorial(a, b, activation="tanh")


def test_fake_gives_shapes_and_dtypes_without_running(generated):
    """Under FakeTensorMode the op allocates its outputs from the spec and launches nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    generated("layer_norm")
    with FakeTensorMode():
        x = torch.empty(7, 300, dtype=torch.float16, device=DEVICE)
        w = torch.empty(300, dtype=torch.float16, device=DEVICE)
        y, mean, rstd = torch.ops.tilegen.layer_norm(x, w, w, 1e-5)
    assert (y.shape, y.dtype) == ((7, 300), torch.float16)
    assert (mean.shape, mean.dtype) == ((7,), torch.float32)
    assert (rstd.shape, rstd.dtype) == ((7,), torch.float32)


def test_fake_checks_inputs_like_the_launcher(generated):
    from torch._subclasses.fake_tensor import FakeTensorMode

    generated("matmul_naive")
    message = r"b dimension 0 \(K\) is 100, but a dimension 1 gives K = 128"
    with FakeTensorMode(), pytest.raises(ValueError, match=message):
        a = torch.empty(64, 128, dtype=torch.float16, device=DEVICE)
        b = torch.empty(100, 64, dtype=torch.float16, device=DEVICE)
        torch.ops.tilegen.matmul_naive(a, b)


def test_compiled_graph_has_no_break_and_serves_new_shapes(generated):
    """Two tilegen ops and torch ops in one compiled graph (no graph break), run at three
    numbers of rows with one compile (dynamic shapes). A whole-axis length (softmax's N) is a
    constexpr tile size, so the graph is specialised on it."""
    from torch._dynamo.testing import CompileCounterWithBackend

    generated("softmax"), generated("copy")
    counter = CompileCounterWithBackend(BACKEND)

    def model(x):
        return torch.ops.tilegen.softmax(torch.ops.tilegen.copy(x.reshape(-1) * 2.0).view(x.shape) + 1)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for rows in (3, 5, 17):
        x = torch.randn(rows, 100, device=DEVICE)
        torch.testing.assert_close(compiled(x), torch.softmax(x * 2 + 1, dim=1))
    assert counter.frame_count == 1


@pytest.mark.parametrize("requires_grad", [False, True])
def test_compiled_launcher_call_goes_to_the_op(generated, requires_grad):
    """A call of the launcher itself (not the op) inside torch.compile(fullgraph=True) compiles
    without a graph break, with or without inputs that require grad: the launcher hands the call
    to its custom op before its fast path, whose key (``data_ptr() & 15``) dynamo cannot trace."""
    module = generated("softmax")
    x = torch.randn(4, 33, device=DEVICE, requires_grad=requires_grad)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: module.softmax(t * 2), backend=BACKEND, fullgraph=True)
    y = compiled(x)
    want = torch.softmax(x.detach() * 2, dim=1)
    torch.testing.assert_close(y, want)
    if requires_grad:
        dy = torch.randn_like(want)
        y.backward(dy)
        leaf = x.detach().clone().requires_grad_()
        torch.softmax(leaf * 2, dim=1).backward(dy)
        torch.testing.assert_close(x.grad, leaf.grad)


def test_same_kernel_name_from_another_spec_gets_its_own_op(tmp_path):
    """A second spec with a kernel name already registered becomes <name>_<spec hash>; the same
    spec imported again returns the op registered first."""
    from tilegen.runner import load_module

    sources = {
        "one": "kernel twin_op\n  in x: f32[N]\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n"
        "  z[i] = x[i] + 1\n",
        "two": "kernel twin_op\n  in x: f32[N]\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n"
        "  z[i] = x[i] * 2\n",
    }
    modules = {}
    for stem, source in sources.items():
        for copy in ("a", "b"):
            path = tmp_path / copy / stem / "twin_op.py"
            path.parent.mkdir(parents=True)
            path.write_text(compile_spec(source, f"{stem}.tile").source, encoding="utf-8")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                modules[stem, copy] = load_module(path)
            renamed = [w for w in caught if "is the op of another spec" in str(w.message)]
            assert len(renamed) == (stem == "two")  # the second spec is told its op's name
    x = torch.arange(5.0, device=DEVICE)
    one, two = modules["one", "a"].op, modules["two", "a"].op
    assert one is torch.ops.tilegen.twin_op and modules["one", "b"].op is one
    assert two is not one and modules["two", "b"].op is two and two.__name__.startswith("twin_op_")
    torch.testing.assert_close(one(x), x + 1)
    torch.testing.assert_close(two(x), x * 2)


def _graph_input(device):
    """test_cuda_graph_capture_through_the_op's input to copy."""
    return torch.randn(5000, device=device)


@pytest.mark.skipif(INTERPRET or not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_graph_capture_through_the_op(generated):
    generated("copy")
    x = _graph_input("cuda")
    torch.ops.tilegen.copy(x)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        z = torch.ops.tilegen.copy(x)
    x.copy_(torch.randn(5000, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(z, x)


def _threads_inputs(device):
    """test_threads_calling_a_tuned_launcher_first_tune_once's a and b of matmul_grouped_autotuned."""
    return torch.randn(1000, 704, device=device).half(), torch.randn(704, 900, device=device).half()


@pytest.mark.skipif(INTERPRET or not torch.cuda.is_available(), reason="needs a GPU")
def test_threads_calling_a_tuned_launcher_first_tune_once(tmp_path, monkeypatch):
    """8 threads make the first call of a tuned launcher at once: every result is right and the
    autotuner runs once (the others wait for the module's lock and take its choice)."""
    from tilegen.runner import load_module

    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "cache"))  # no choice on disk yet
    monkeypatch.setenv("TILEGEN_TUNE", "full")  # quick, the default, tunes nothing
    path = tmp_path / "matmul_grouped_autotuned.py"
    path.write_text((ROOT / "generated" / "matmul_grouped_autotuned.py").read_text(encoding="utf-8"))
    module = load_module(path)
    # no near ties timed again (Tuner.settle_ties compiles each of them): one config compiles
    monkeypatch.setattr(module._rt, "NEAR_TIE", 0.0)
    tunes = []
    run = module.matmul_grouped_autotuned_kernel.run

    def counting_run(*args, **kwargs):
        tunes.append(1)
        return run(*args, **kwargs)

    monkeypatch.setattr(module.matmul_grouped_autotuned_kernel, "run", counting_run)
    a, b = _threads_inputs("cuda")
    expected = (a.float() @ b.float()).half()
    results, errors = [None] * 8, []
    barrier = threading.Barrier(8)

    def call(i):
        try:
            barrier.wait()
            results[i] = module.matmul_grouped_autotuned(a, b)
        except Exception as error:  # any error: reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for result in results:
        torch.testing.assert_close(result, expected, atol=2e-2, rtol=2e-2)
    assert len(tunes) == 1
    assert len(module._COMPILED) == 1


C_LAUNCH = ["add", "softmax", "matmul_fast", "rms_norm_backward"]


def _c_launch_calls(name, device=DEVICE):
    """test_launches_after_the_first_call_tritons_c_launch_directly's calls of spec ``name``: the
    spec in its first dtype, and the inputs of seeds 0, 1 and 2 (sizes for 3 programs) on ``device``."""
    spec = m.specialize(_spec(name), _spec(name).bindings()[0])
    sizes = default_sizes(spec, 3)
    return spec, [list(random_inputs(spec, sizes, device, seed).values()) for seed in range(3)]


@pytest.mark.skipif(INTERPRET or not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", C_LAUNCH)
def test_launches_after_the_first_call_tritons_c_launch_directly(generated, name):
    """On Triton 3.6 and 3.9 (whose C launch's argument order the runtime knows), every kernel's
    first launch finds that order and the launches after it call the C launch directly: pointer
    kernels, TMA descriptors (matmul_fast), a tuned kernel with a finish kernel (rms_norm's
    backward); each call's outputs match the torch reference, on new inputs each time."""
    import triton

    spec, calls = _c_launch_calls(name)
    module = generated(name)
    launcher = getattr(module, name)
    for seed, args in enumerate(calls):
        error, passed = compare(launcher(*args), module.reference(*args), spec, args, module.reference)
        assert passed, f"{name}, inputs of seed {seed}: max error {error}"
    layouts = {launch.c_launch_layout for launch in module._COMPILED.values()}
    version = ".".join(triton.__version__.split(".")[:2])
    assert layouts and layouts <= {"3.6", "3.9", "run"}
    if version in ("3.6", "3.9"):
        assert layouts == {version}


def _second_gpu_inputs(device):
    """test_tensors_on_the_second_gpu_run_there's inputs: matmul_grouped_autotuned's a and b with
    K = 200 (refused: K must be a multiple of 64), its a and b with K = 256, and copy's x."""
    refused = (torch.empty(300, 200, device=device).half(), torch.empty(200, 100, device=device).half())
    a = torch.randn(300, 256, device=device).half()
    b = torch.randn(256, 100, device=device).half()
    return refused, (a, b), torch.randn(10000, device=device)


@pytest.mark.skipif(INTERPRET or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensors_on_the_second_gpu_run_there(generated):
    """Tensors on cuda:1 while cuda:0 is current, on a side stream of cuda:1, through the
    launcher and the op. The spec's K loop is unmasked and tuned up to BK = 64, so K is a multiple
    of 64 (M and N are masked: any size); K = 200 is refused on cuda:1 as on any device."""
    module = generated("matmul_grouped_autotuned")
    refused, (a, b), x = _second_gpu_inputs("cuda:1")
    with pytest.raises(ValueError, match="K = 200 must be a multiple of BK = 64"):
        module.matmul_grouped_autotuned(*refused)
    assert torch.cuda.current_device() == 0
    stream = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.stream(stream):
        c = module.matmul_grouped_autotuned(a, b)
        c2 = torch.ops.tilegen.matmul_grouped_autotuned(a, b)
    stream.synchronize()
    assert c.device == torch.device("cuda:1")
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(c2, c)
    copy = generated("copy")
    torch.testing.assert_close(copy.copy(x), x)


def _inductor_inputs(device):
    """test_inductor_sees_the_triton_kernel's inputs: copy's x (3000 floats) and matmul_fast's a
    (256 x 256 f16, multiplied by itself)."""
    return torch.randn(3000, device=device), torch.randn(256, 256, device=device).half()


@pytest.mark.skipif(INTERPRET or not torch.cuda.is_available(), reason="needs a GPU")
def test_inductor_sees_the_triton_kernel(generated):
    """On the GPU a pointer kernel's op is a triton_op: Inductor's output code launches the Triton
    kernel itself; a TMA-descriptor kernel's op stays an opaque call to the custom op."""
    from torch._inductor.utils import run_and_get_code

    generated("copy"), generated("matmul_fast")
    x, a = _inductor_inputs("cuda")
    torch._dynamo.reset()
    z, code = run_and_get_code(torch.compile(lambda t: torch.ops.tilegen.copy(t + 1), fullgraph=True), x)
    torch.testing.assert_close(z, x + 1)
    assert "copy_kernel" in "\n".join(code)
    torch._dynamo.reset()
    c, code = run_and_get_code(torch.compile(lambda t: torch.ops.tilegen.matmul_fast(t, t), fullgraph=True), a)
    torch.testing.assert_close(c, (a.float() @ a.float()).half(), atol=2e-2, rtol=2e-2)
    assert "torch.ops.tilegen.matmul_fast" in "\n".join(code)


def test_every_gpu_call_is_planned_without_a_gpu(generated):
    """The calls of this file's GPU-only runs, built as those build them (here on the CPU) and run
    through each op's fake implementation on a GPU, which checks the inputs as the launcher does
    and gives the outputs' shapes and dtypes; nothing launches. CI has no GPU: a spec that changes
    under a GPU test (a dtype variable to bind, a size, an input's dtype) fails here. Covers
    test_op_registered_opcheck_and_compile at every dtype (GPU_CASES), the C-launch test, and the
    inputs the other GPU tests make by hand."""
    failures = []
    for name, binding in GPU_CASES:
        try:
            spec, args = _op_case(name, binding, "cpu")
            outputs = fake_call(generated(spec.name.id), args)
            assert {o.device.type for o in outputs} == {"cuda"}
        except Exception as error:  # every case's failure, reported together
            failures.append(f"{name} {binding}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
    for name in C_LAUNCH:
        _, calls = _c_launch_calls(name, "cpu")
        assert len(calls) == 3
        for args in calls:
            fake_call(generated(name), args)
    (z,) = fake_call(generated("copy"), [_graph_input("cpu")])
    assert (z.shape, z.dtype) == ((5000,), torch.float32)
    matmul = generated("matmul_grouped_autotuned")
    (c,) = fake_call(matmul, _threads_inputs("cpu"))
    assert (c.shape, c.dtype) == ((1000, 900), torch.float16)
    refused, (a, b), x = _second_gpu_inputs("cpu")
    with pytest.raises(ValueError, match="K = 200 must be a multiple of BK = 64"):
        fake_call(matmul, refused, "cuda:1")
    (c,) = fake_call(matmul, (a, b), "cuda:1")
    assert (c.shape, c.dtype, c.device) == ((300, 100), torch.float16, torch.device("cuda:1"))
    (z,) = fake_call(generated("copy"), [x], "cuda:1")
    assert (z.shape, z.device) == (x.shape, torch.device("cuda:1"))
    x, a = _inductor_inputs("cpu")
    assert fake_call(generated("copy"), [x])[0].shape == x.shape
    (c,) = fake_call(generated("matmul_fast"), [a, a])
    assert (c.shape, c.dtype) == ((256, 256), torch.float16)


def test_symbolic_ints_under_compile(tmp_path):
    """An int scalar and a block-size keyword that change between calls become symbolic under
    torch.compile (automatic dynamic shapes): the op still traces and runs."""
    from tilegen.runner import load_module

    source = (
        "kernel shift_op\n  in x: f32[N]\n  in k: i32\n  out z: f32[N]\n  block BS = 64\n"
        "  grid i over N by BS\n  z[i] = x[i] + k\n"
    )
    path = tmp_path / "shift_op.py"
    path.write_text(compile_spec(source, "shift_op.tile").source, encoding="utf-8")
    module = load_module(path)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, k, bs: module.op(x, k, BS=bs), backend=BACKEND, fullgraph=True)
    x = torch.randn(300, device=DEVICE)
    for k, bs in ((3, 64), (4, 64), (5, 128), (6, 256)):
        torch.testing.assert_close(compiled(x, k, bs), x + k)
    torch.library.opcheck(module.op.default, (x, 7), {"BS": 32})


MIDDLE_DIM = {
    "sum_dim1": lambda x: torch.sum(x, dim=1),
    "mean_dim1": lambda x: torch.mean(x, dim=1),
    "max_dim1": lambda x: torch.max(x, dim=1)[0],
    "min_dim1": lambda x: torch.min(x, dim=1)[0],
    "prod_reduction": lambda x: torch.prod(x, dim=1),
    "argmax_dim1": lambda x: torch.argmax(x, dim=1),
    "argmin_dim1": lambda x: torch.argmin(x, dim=1),
}


@pytest.mark.parametrize("name", sorted(MIDDLE_DIM))
def test_every_config_of_a_middle_dim_reduction_on_unaligned_rows(generated, monkeypatch, name):
    """Each tune config forced, rows of 97 floats (not 16-byte aligned): on the H100, Triton 3.6
    summed a [BN, BK] tile (the contiguous axis first) wrongly at BK <= 16, BN >= 128 there, a
    config the autotuner could pick in one process and not in another
    (reproduced by `git show c43ff28:benchmarks/explore/dbg_sum_dim1_unaligned.py`); the tile is now
    [BK, BN]. In the interpreter, which runs a prod or arg tile's combine an element at a time, 17
    rows: two tiles, the last of one row, at BK = 8 and 16 (where the bug was), one partial tile
    at BK = 32 and 64."""
    module = generated(name)
    g = torch.Generator().manual_seed(1)
    rows = 17 if INTERPRET else 33
    x = (torch.rand(2, rows, 97, generator=g) + 0.5).to(DEVICE)  # products of 33 factors or fewer near 1 stay finite
    expected = MIDDLE_DIM[name](x.double())
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        got = getattr(module, name)(x)
        if got.dtype == torch.int64:
            assert torch.equal(got, expected), module._CONFIGS[index]
        else:
            torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5, msg=str(module._CONFIGS[index]))
