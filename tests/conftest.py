"""Test setup: run every kernel in Triton's CPU interpreter (set before triton is imported).

``TILEGEN_TEST_GPU=1`` leaves the interpreter off, for the tests written for both, on a machine
with two GPUs (one runs all but the 2-GPU tests, which skip)::

    TILEGEN_TEST_GPU=1 python -m pytest -n 0 tests/test_ops.py tests/test_in_place.py \
        tests/test_gpu_stress.py tests/test_layer_norm.py \
        tests/test_fast_path.py::test_a_cpu_tensor_after_a_cached_gpu_call_gets_the_device_error \
        tests/test_subtile.py::test_a_float32_weight_gradient_of_the_widest_tiles_compiles_and_is_right

The rest of the suite expects the interpreter (its tensors are on the CPU). The calls the GPU-only
tests make are built by functions of the device, which CPU tests run through :func:`fake_call`.
"""

import functools
import os

if os.environ.get("TILEGEN_TEST_GPU") != "1":
    os.environ["TRITON_INTERPRET"] = "1"
    from tilegen.interpreter import round_as_the_gpu, speed_up

    speed_up()  # skips work Triton's interpreter drops or repeats (tilegen/interpreter.py)
    round_as_the_gpu()  # float32 -> bf16 to nearest even, as the GPU and torch round

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def specs_find(name: str):
    """The finder of the specs in ``specs/`` (:func:`tilegen.compiler.beside`): what a spec's
    ``backward`` line names, for tests compiling a spec's text under another path."""
    from tilegen.compiler import beside

    return beside(ROOT / "specs" / "any.tile", "specs/any.tile")(name)


#: The test files that take longest in the interpreter (about 4 s or more on one core, measured
#: with ``--durations=0``; every Liger case, not CI's subset), longest first. ``--dist loadfile``
#: hands files to the workers in collection order (``--no-loadscope-reorder``): these go first, so
#: that the end of a run is short files on both workers, not one long file on one worker while the
#: other waits. Only the order changes. test_distributed.py runs three processes of its own: early,
#: while the other worker has long files to run.
LONG_FILES = ("test_meaning.py", "test_ops.py", "test_kernelbench_problems.py", "test_liger_replay_losses.py",
              "test_distributed.py", "test_windows.py", "test_derive.py", "test_expressions.py", "test_long_rows.py",
              "test_build.py", "test_attention.py", "test_random.py", "test_fuzz.py", "test_autograd.py",
              "test_check_build.py", "test_liger_replay.py", "test_conv_transpose.py", "test_conv.py",
              "test_linear_cross_entropy.py", "test_training.py", "test_hostile.py", "test_rounding.py",
              "test_cross_entropy_options.py", "test_argmax.py", "test_scans.py", "test_paged_attention.py",
              "test_liger.py", "test_prod.py", "test_gqa.py", "test_stages.py", "test_nn_cross_entropy.py",
              "test_fast_path.py", "test_grid_limit.py", "test_pieces.py", "test_properties.py", "test_quiet_demo.py",
              "test_moe.py", "test_patch.py", "test_tail.py", "test_parity.py", "test_layer_norm.py",
              "test_ranges.py", "test_across.py", "test_carried.py", "test_varlen_attention.py")


def pytest_collection_modifyitems(items):
    """Run the files of :data:`LONG_FILES` first, in its order; the rest keep theirs (a stable
    sort: each file's tests keep their order)."""
    rank = {name: index for index, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


@pytest.fixture(scope="session")
def generated():
    """Load a committed generated module by kernel name: ``generated("copy").copy(x)``; once per
    process, the module already imported from that file where there is one (as ``tilegen.nn.module``
    and a forward's backward, ``_tilegen_runtime.sibling``, reuse it), so that a test patching it
    patches what its callers run."""
    import sys

    from tilegen.runner import load_module

    cache = {}

    def load(name: str):
        if name not in cache:
            path = ROOT / "generated" / f"{name}.py"
            loaded = sys.modules.get(f"tilegen_generated_{name}")
            same = loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve()
            cache[name] = loaded if same else load_module(path)
        return cache[name]

    return load


@pytest.fixture
def compiled(tmp_path):
    """Compile a ``.tile`` source and load its module from ``tmp_path``: ``compiled(source).k(x)``
    (a bad spec raises :class:`tilegen.errors.SpecError`; ``name`` names the file and module)."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    def build(source: str, name: str = "k"):
        path = tmp_path / f"{name}.py"
        path.write_text(compile_spec(source, f"{name}.tile").source, encoding="utf-8")
        return load_module(path)

    return build


@functools.cache
def checked_spec(path: Path):
    """The checked :class:`tilegen.model.Spec` of the spec file at ``path`` (in this repository;
    its errors and messages name it relative to the root, ``specs/add.tile``), parsed once per
    process: a spec is immutable, and the tests ask for the same ones many times."""
    from tilegen.check import check
    from tilegen.parser import parse

    return check(parse(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix()))


@functools.cache
def spec_named(kernel: str):
    """The checked :class:`tilegen.model.Spec` of the spec in specs/ whose kernel is ``kernel``
    (``spec_named("rgb2grey")`` is specs/grayscale.tile), for :mod:`tilegen.tolerance`.
    Raises KeyError for a kernel no spec defines."""
    for path in sorted((ROOT / "specs").glob("*.tile")):
        spec = checked_spec(path)
        if spec.name.id == kernel:
            return spec
    raise KeyError(f"no spec in specs/ defines kernel {kernel!r}")


def force_config(monkeypatch, module, index):
    """Make the tuned launchers of ``module`` run ``_CONFIGS[index]`` from their next call
    (``index``: an int, a dict of a config's keywords, or a function of the launcher's name and
    tune key giving one, or None for the usual choice): the module's ``Tuner.forced``, the
    per-module form of TILEGEN_CONFIG, with no choice remembered (``tuned``) and no launch kept
    for the fast path (``_FAST``) from before, each replaced until the test ends."""
    tuner = module._tuner
    monkeypatch.setattr(tuner, "forced", index)
    monkeypatch.setattr(tuner, "tuned", {})
    monkeypatch.setattr(tuner, "fast", {})
    monkeypatch.setattr(module, "_FAST", tuner.fast)


def fake_call(module, args, device: str = "cuda", **keywords) -> tuple:
    """Plan-check one call of a generated module without launching it: ``module.op`` run under
    torch's FakeTensorMode on ``args`` with each tensor replaced by a fake one of its shape,
    strides and dtype on ``device`` (a GPU's name, e.g. ``"cuda:1"``; no GPU is needed). The op's
    fake implementation checks the inputs as the launcher does and allocates the outputs, so a
    call a GPU test plans that its kernel would refuse raises here what the launcher raises
    (ValueError, TypeError). Returns the outputs as a tuple of fake tensors (shape, dtype and
    device are real; values are not). On a machine with CUDA but no such GPU the calling test is
skipped: fake CUDA tensors initialize their device there."""
    import pytest
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    index = torch.device(device).index
    if torch.cuda.is_available() and index is not None and index >= torch.cuda.device_count():
        # a fake CUDA tensor initializes its device where CUDA is present: plan there only where it exists
        pytest.skip(f"plans a call on {device}, which this machine's CUDA does not have")
    with FakeTensorMode():
        fake = [
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=device) if isinstance(a, torch.Tensor) else a
            for a in args
        ]
        outputs = module.op(*fake, **keywords)
    return outputs if isinstance(outputs, tuple) else (outputs,)


def config_indices(module) -> list[int]:
    """The indices of ``module._CONFIGS`` a test that runs every config forces: on a GPU all of
    them; in Triton's interpreter, which runs a kernel the same whatever its ``num_warps`` and
    ``num_stages``, the first of the configs with each set of block sizes (``Config.kwargs``),
    the others running the same program again."""
    configs = module._CONFIGS
    if os.environ.get("TRITON_INTERPRET") != "1":
        return list(range(len(configs)))
    firsts: dict[tuple, int] = {}
    for index, config in enumerate(configs):
        firsts.setdefault(tuple(sorted(config.kwargs.items())), index)
    return sorted(firsts.values())


def config_ends(module) -> list[int]:
    """The indices of ``module._CONFIGS`` a test of what a tuned kernel computes runs, where
    tests/test_meaning.py checks that its result does not depend on the config: on a GPU all of
    them; in Triton's interpreter the first and the last of :func:`config_indices` (the
    interpreter's small tiles, several to an axis, and another set of block sizes)."""
    indices = config_indices(module)
    if os.environ.get("TRITON_INTERPRET") != "1":
        return indices
    return sorted({indices[0], indices[-1]})
