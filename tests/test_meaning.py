"""A spec means one thing: its result does not depend on the block sizes or the autotune config
it runs at, and its generated ``reference`` computes what its kernel computes.

Every spec in specs/ (through its committed module in generated/) and in tests/specs/ (compiled
here) runs in Triton's interpreter at three or more settings, each its own test id:

* untuned specs: launcher block keywords that are powers of two smaller and larger than the
  extents they tile (every block small, every block large, both alternations of small and large,
  the spec's defaults, the middle values; 16 or more on a ``dot`` axis), group sizes 1, 3 and the
  default;
* tuned specs: forced autotune configs (the tuner's ``tuned_index`` returns the config's
  index in ``_CONFIGS``): the default and, for each tuned block, the configs with its smallest
  and largest value;
* specs with no blocks at all: three sizes;
* specs that read through TMA descriptors (``access descriptor``, and ``access block_ptr`` where
  Triton has no block pointers): once with 16-byte aligned rows (the descriptor kernel) and once
  with odd rows (the pointer kernel generated from the same spec);
* every spec once more at tiny sizes (below every block), and a spec whose launcher splits loops
  (``for ... split``) or the last wave (``split tail``) at each setting where it does so;
* each dtype of a dtype variable and each option of a ``choose`` at least once; float scalar
  inputs positive and negative (positive where the reference is not finite with a negative one).

Extents are odd or otherwise not multiples of the blocks (tails), except along ``unmasked`` axes,
whose launchers require multiples; float inputs are standard normal (both signs), integer inputs
distinct values of both signs (gather indices valid positions, ``u8`` anything), and an input
declared with a range is drawn from it. New tensors come filled (NaN, the integer maximum) rather
than with stale memory, so an element a kernel or a reference never writes fails every time.
Integer outputs must equal the reference exactly; float outputs must lie within
:mod:`tilegen.tolerance`'s bound of it (NaN never passes), the project's one tolerance rule. As
``tilegen run`` does, a failure of a kernel that computes on bf16 values is a skip in the
interpreter, whose bf16 arithmetic is wrong (:data:`tilegen.runner.BF16_INTERPRETER_BUG`). The
sizes and settings come from the checked spec (tests/meaning_cases.py), so a new spec is covered
without editing this file, and a spec the harness cannot derive them for fails here rather than
being skipped.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import warnings

import pytest
import torch

from tests.meaning_cases import ROOT, Case, cases_for, checked, config_blocks, spec_paths
from tilegen import model as m
from tilegen import runner, tolerance

#: Cases that fail today: test id -> why (each a real disagreement, marked strict so that a fix
#: shows up as an unexpected pass).
KNOWN_FAILURES: dict[str, str] = {}


def _params() -> list:
    params = []
    for path in spec_paths():
        stem = path.relative_to(ROOT).as_posix().removesuffix(".tile")
        try:
            cases = cases_for(path)
        except Exception as error:  # the harness cannot run this spec: a failing test, not a skip
            params.append(pytest.param(error, id=f"{stem}-cannot-derive"))
            continue
        for case in cases:
            marks = ()
            if case.id in KNOWN_FAILURES:
                marks = pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case.id])
            params.append(pytest.param(case, id=case.id, marks=marks))
    return params


@pytest.fixture(scope="session")
def module_of(generated, tmp_path_factory):
    """The generated module of a case's spec: committed (generated/) for specs/, compiled here
    (once per session) for tests/specs/."""
    from tilegen.compiler import compile_spec
    from tilegen.runner import load_module

    folder = tmp_path_factory.mktemp("meaning")

    @functools.cache
    def load(path: str, kernel: str):
        if path.startswith("specs/"):
            return generated(kernel)
        module = compile_spec((ROOT / path).read_text(encoding="utf-8"), path)
        target = folder / f"{module.kernel}.py"
        target.write_text(module.source, encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an op of the same name registered by another test
            return load_module(target)

    return lambda case: load(case.path, case.kernel)


_TORCH_DTYPES = {name: getattr(torch, torch_name.split(".")[1]) for name, (_, torch_name) in m.DTYPES.items()}


def _scalar(tensor: m.Tensor, sign: int):
    if tensor.dtype.id in m.FLOAT_DTYPES:
        return 0.5 if sign > 0 else -0.75
    return 3 if sign > 0 else -3


def make_inputs(spec: m.Spec, case: Case, sign: int) -> tuple:
    """The launcher's positional arguments for ``case`` (``spec`` bound to its dtypes): an input
    declared with a range (``in x: f32[N] in [0.01, 10]``) drawn from it as ``tilegen run`` draws
    it; otherwise floats standard normal, scalars ``sign`` times 0.5 or 0.75 (3 for integers),
    integers distinct values of both signs (gather indices valid positions, jagged rows' offsets
    sorted as ``tilegen run`` draws them, ``u8`` anything)."""
    generator = torch.Generator().manual_seed(case.seed)
    ranges, starts = runner.gather_ranges(spec), runner.loaded_starts(spec)
    args = []
    for tensor in spec.inputs:
        shape = [int(d.text) if isinstance(d, m.Number) else case.sizes[d.id] for d in tensor.dims]
        if tensor.is_scalar and tensor.name.id in case.sizes:  # an integer scalar used as a size (g over G)
            args.append(case.sizes[tensor.name.id])
            continue
        if tensor.sample is not None:  # the spec states the input's domain
            value = runner.sample(tensor, shape, generator)
            args.append(value.item() if tensor.is_scalar else value)
            continue
        if tensor.is_scalar:
            args.append(_scalar(tensor, sign))
            continue
        dtype = _TORCH_DTYPES[tensor.dtype.id]
        count = math.prod(shape)
        if tensor.dtype.id in m.FLOAT_DTYPES:
            value = torch.randn(shape, generator=generator).to(dtype)
        elif tensor.dtype.id == "u8":
            value = torch.randint(0, 256, shape, generator=generator, dtype=dtype)
        elif tensor.dtype.id == "bool":  # a mask: True and False alike
            value = torch.rand(shape, generator=generator) < 0.5
        elif tensor.name.id in starts:  # jagged rows' offsets, as tilegen run draws them (no row empty: a
            # mean of none is NaN, which reads as an element never written)
            value = runner.draw_offsets(starts[tensor.name.id], case.sizes, shape, generator).to(dtype)
        elif tensor.name.id in ranges:  # gather indices: positions inside the gathered dimension
            dim = ranges[tensor.name.id]
            extent = int(dim.text) if isinstance(dim, m.Number) else case.sizes[dim.id]
            value = torch.randint(0, max(extent, 1), shape, generator=generator, dtype=dtype)
        elif torch.iinfo(dtype).max >= count:  # distinct values of both signs: a misplaced one shows
            value = (torch.randperm(count, generator=generator) - count // 2).to(dtype).reshape(shape)
        else:
            info = torch.iinfo(dtype)
            value = torch.randint(info.min, info.max + 1, shape, generator=generator, dtype=dtype)
        args.append(value)
    return tuple(args)


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _finite(outputs) -> bool:
    return all(bool(torch.isfinite(o).all()) for o in _as_tuple(outputs) if o.is_floating_point())


def _force_config(monkeypatch, module, spec: m.Spec, case: Case) -> list:
    """Make the tuned launcher (and its pointer launcher) run ``_CONFIGS[case.config]``; returns
    the list of tune keys it asks for (empty if it never asked: the config was not forced)."""
    wanted = config_blocks(spec, spec.tune.configs[case.config])
    given = module._CONFIGS[case.config].kwargs
    assert {k: given.get(k) for k in wanted} == wanted, (
        f"_CONFIGS[{case.config}] of the module is {given}, the spec's config is {wanted}: stale module?"
    )
    asked = []
    monkeypatch.setattr(module._tuner, "tuned_index", lambda launcher, key: asked.append(key) or case.config)
    monkeypatch.setattr(module._tuner, "tuned", {})
    monkeypatch.setattr(module, "_FAST", {})  # no launch kept from another config
    return asked


@contextlib.contextmanager
def filled_empty():
    """New tensors (``torch.empty``, in launchers and references alike) come filled with NaN, or
    the integer maximum, instead of whatever memory held (torch's deterministic mode, warnings
    only): an element that a kernel or a reference never writes shows, every time."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def _describe(case: Case) -> str:
    settings = dict(case.keywords)
    if case.config is not None:
        settings["config"] = case.config
    return f"{case.path} at sizes {case.sizes}, {settings}, dtypes {case.binding or '-'}"


@pytest.mark.parametrize("case", _params())
def test_spec_result_does_not_depend_on_blocks_or_configs(case, module_of, monkeypatch):
    if isinstance(case, Exception):
        raise case
    spec = checked(ROOT / case.path)
    module = module_of(case)
    bound = m.specialize(spec, case.binding)
    chosen = runner.chosen_keywords(spec, case.binding)  # a dtype the caller chooses (G=torch.float32)
    launcher = functools.partial(getattr(module, case.kernel), **chosen)
    accepted = inspect.signature(module.reference).parameters
    reference = functools.partial(module.reference, **{k: v for k, v in case.keywords.items() if k in accepted},
                                  **chosen)
    asked = _force_config(monkeypatch, module, spec, case) if case.config is not None else None
    with filled_empty(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notices (tuning, numpy overflow in exp)
        args = make_inputs(bound, case, case.sign)
        expected = reference(*args)
        if case.sign < 0 and not _finite(expected):  # a negative scalar outside the math's domain (eps)
            args = make_inputs(bound, case, 1)
            expected = reference(*args)
        outputs = launcher(*args, **case.keywords)
    if asked is not None:
        assert asked, f"{case.kernel} never asked for a config: config {case.config} was not forced"

    outputs, expected = _as_tuple(outputs), _as_tuple(expected)
    assert len(outputs) == len(expected) == len(spec.outputs)
    failure = _disagreement(bound, args, outputs, expected, reference)
    if failure and runner.interpreted() and _bf16_arithmetic(bound) is not None:
        pytest.skip(f"{runner.BF16_INTERPRETER_BUG}; the kernel computes in bf16; here {failure}: {_describe(case)}")
    assert not failure, f"{failure}: {_describe(case)}"


def _bf16_arithmetic(spec: m.Spec):
    """Where ``spec``'s kernel computes on bf16 values (:func:`tilegen.runner.bf16_arithmetic`),
    or None."""
    return runner.bf16_arithmetic(spec)


def _disagreement(spec: m.Spec, args, outputs, expected, reference) -> str:
    """Why ``outputs`` are not the reference's ``expected`` ("" where they are): a shape or
    dtype, an integer element that differs, or a float element outside tilegen.tolerance."""
    for tensor, out, ref in zip(spec.outputs, outputs, expected, strict=True):
        name = tensor.name.id
        if (out.shape, out.dtype) != (ref.shape, ref.dtype):
            return f"{name} is {tuple(out.shape)} {out.dtype}, the reference {tuple(ref.shape)} {ref.dtype}"
        if not ref.is_floating_point():  # integers: exactly the reference
            differ = out != ref
            if differ.any():
                first = tuple(differ.nonzero()[0].tolist())
                return (
                    f"{name} differs from the reference at {int(differ.sum())} of {ref.numel()} elements, first "
                    f"{name}{list(first)} = {out[first].item()}, reference {ref[first].item()}"
                )
    result = tolerance.compare(spec, args, outputs, expected, reference)
    if result.passed:
        return ""
    return (
        f"outside tilegen.tolerance (max |error| {result.max_error:.3g}, {result.ratio:.3g}x the bound; "
        f"{result.detail})"
    )
