"""KernelBench level 1's problems as benchmarks/kernelbench_problems.py maps them: the table names
all 100, and each problem a spec runs gives the problem's own torch expression (not the spec's
generated reference) at small odd sizes, inputs of both signs, at two configs or block sizes (the
problems of a convolution kernel at one, but one of them, :data:`REPRESENTATIVES`, at two); each
convolution's expression is the suite's own module holding the same parameters."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch
from torch import nn

from benchmarks.kernelbench_problems import NOT_YET, RUNS, SUITE, problem
from tests.conftest import ROOT, checked_spec
from tilegen import model as m


def test_the_table_maps_each_of_the_100_problems_once():
    assert [row[0] for row in SUITE] == list(range(1, 101))
    assert all(row[1].startswith(f"{row[0]}_") for row in SUITE)
    assert sorted([*RUNS, *NOT_YET]) == list(range(1, 101)), "each number in RUNS or NOT_YET, once"
    for number, run in RUNS.items():
        assert (ROOT / "specs" / f"{run.kernel}.tile").exists(), (number, run.kernel)
        assert (ROOT / "generated" / f"{run.kernel}.py").exists(), (number, run.kernel)
    assert all(NOT_YET.values())


#: Each convolution problem the table runs, as the suite writes its module (KernelBench/level1/<n>_*.py,
#: with get_init_inputs() and the module's defaults: bias=False but 50's nn.Conv2d), at in and out
#: channels c, o.
SUITE_CONVOLUTIONS = {
    50: lambda c, o: nn.Conv2d(c, o, kernel_size=11, stride=4, padding=2),
    54: lambda c, o: nn.Conv3d(c, o, (3, 3, 3), stride=1, padding=0, dilation=1, groups=1, bias=False),
    55: lambda c, o: nn.Conv2d(c, o, (3, 3), stride=1, padding=0, dilation=1, groups=1, bias=False),
    56: lambda c, o: nn.Conv2d(c, o, (5, 7), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=False),
    59: lambda c, o: nn.Conv3d(c, o, (3, 3, 1), stride=1, padding=0, dilation=1, groups=1, bias=False),
    60: lambda c, o: nn.Conv3d(c, o, (3, 5, 7), stride=1, padding=0, dilation=1, groups=1, bias=False),
    62: lambda c, o: nn.Conv2d(c, o, (5, 9), stride=1, padding=0, dilation=1, groups=1, bias=False),
    63: lambda c, o: nn.Conv2d(c, o, (3, 3), stride=1, padding=0, dilation=1, groups=1, bias=False),
    66: lambda c, o: nn.Conv3d(c, o, (3, 5, 7), stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), bias=False),
    67: lambda c, o: nn.Conv1d(c, o, 3, stride=1, padding=0, dilation=1, groups=1, bias=False),
    76: lambda c, o: nn.Conv1d(c, o, 3, stride=3, dilation=4, bias=False),
    80: lambda c, o: nn.Conv2d(c, o, (5, 9), stride=1, padding=(2, 4), dilation=(2, 3), bias=False),
    82: lambda c, o: nn.Conv2d(c, c, 3, stride=1, padding=0, groups=c, bias=False),
    83: lambda c, o: nn.Conv2d(c, c, kernel_size=(3, 1), stride=1, padding=0, dilation=1, groups=c, bias=False),
    84: lambda c, o: nn.Conv2d(c, o, kernel_size=(3, 3), stride=1, padding=0, groups=c, bias=False),
    85: lambda c, o: nn.Conv2d(c, c, (3, 7), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=c, bias=False),
    87: lambda c, o: nn.Conv2d(c, o, kernel_size=1, stride=1, padding=0, bias=False),
    57: lambda c, o: nn.ConvTranspose2d(c, o, 3, stride=1, padding=0, output_padding=0, groups=1, bias=False),
    58: lambda c, o: nn.ConvTranspose3d(c, o, (3, 5, 7), stride=(1, 1, 1), padding=(0, 0, 0), output_padding=(0, 0, 0),
                                        groups=1, bias=False),
    61: lambda c, o: nn.ConvTranspose3d(c, o, (3, 3, 3), stride=1, padding=0, output_padding=0, groups=1, bias=False),
    64: lambda c, o: nn.ConvTranspose1d(c, o, 3, stride=1, padding=0, output_padding=0, groups=1, bias=False),
    65: lambda c, o: nn.ConvTranspose2d(c, o, (3, 7), stride=1, padding=0, output_padding=0, groups=1, bias=False),
    68: lambda c, o: nn.ConvTranspose3d(c, o, (3, 5, 5), stride=(1, 1, 1), padding=(0, 0, 0), output_padding=(0, 0, 0),
                                        groups=1, bias=False),
    69: lambda c, o: nn.ConvTranspose2d(c, o, (3, 5), stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                                        dilation=(1, 1), groups=1, bias=False),
    70: lambda c, o: nn.ConvTranspose3d(c, o, (3, 3, 3), stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                                        bias=False),
    71: lambda c, o: nn.ConvTranspose2d(c, o, 3, stride=1, padding=0, output_padding=0, groups=1, bias=False),
    74: lambda c, o: nn.ConvTranspose1d(c, o, 5, stride=1, padding=0, dilation=3, bias=False),
    78: lambda c, o: nn.ConvTranspose2d(c, o, (3, 7), stride=(1, 1), padding=(1, 3), bias=False),
    72: lambda c, o: nn.ConvTranspose3d(c, o, (3, 5, 7), stride=(2, 2, 2), padding=(1, 2, 3), output_padding=(1, 1, 1),
                                        groups=4, bias=False),
    73: lambda c, o: nn.ConvTranspose3d(c, o, kernel_size=(3, 3, 3), stride=2, padding=1, groups=4, bias=False),
    75: lambda c, o: nn.ConvTranspose2d(c, o, (3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4,
                                        bias=False),
    77: lambda c, o: nn.ConvTranspose3d(c, o, kernel_size=(3, 3, 3), stride=2, padding=1, dilation=2, bias=False),
    79: lambda c, o: nn.ConvTranspose1d(c, o, 3, stride=2, padding=1, dilation=2, bias=False),
    81: lambda c, o: nn.ConvTranspose2d(c, o, 3, stride=5, padding=1, dilation=2, bias=False),
}


@pytest.mark.parametrize("number", sorted(SUITE_CONVOLUTIONS))
def test_a_convolutions_expression_is_the_suites_module(number):
    """The table's expression is the suite's module holding the same weight (and bias), at the
    suite's input shape; every convolution problem left out gives a reason."""
    run = RUNS[number]
    x, w, *bias = run.make(run.small, lambda shape, device: torch.randn(shape, device=device), "cpu")
    transposed = run.kernel.startswith("conv_transpose")  # its weight is [in, out / groups, *window]
    module = SUITE_CONVOLUTIONS[number](x.shape[1], run.small[-1] if transposed else w.shape[0])
    assert module.weight.shape == w.shape
    assert (module.bias is None) == (not bias or bias[0] is None)
    with torch.no_grad():
        module.weight.copy_(w)
        if module.bias is not None:
            module.bias.copy_(bias[0])
        assert torch.equal(run.forward(x, w, *bias), module(x))
    suite_shape = problem(number)[3][0]
    assert tuple(run.sizes[:len(suite_shape)]) == suite_shape and len(run.small) == len(run.sizes)


def test_every_convolution_runs():
    convolutions = {row[0] for row in SUITE if "_conv_" in f"_{row[1]}"}
    assert convolutions == {50, *range(54, 88)}
    assert sorted(convolutions - set(SUITE_CONVOLUTIONS)) == [86]  # two modules: the test below
    assert convolutions <= set(RUNS) and not NOT_YET


def test_the_depthwise_separable_expression_is_the_suites_model():
    """Problem 86's Model: a depthwise nn.Conv2d (groups = C, padding 1) then a pointwise 1 x 1 one,
    holding the table's two weights, at the suite's channel counts."""
    run = RUNS[86]
    x, wd, wp = run.make(run.small, lambda shape, device: torch.randn(shape, device=device), "cpu")
    channels, out = x.shape[1], wp.shape[0]
    depthwise = nn.Conv2d(channels, channels, 3, stride=1, padding=1, dilation=1, groups=channels, bias=False)
    pointwise = nn.Conv2d(channels, out, kernel_size=1, bias=False)
    with torch.no_grad():
        depthwise.weight.copy_(wd)
        pointwise.weight.copy_(wp)
        assert torch.equal(run.forward(x, wd, wp), pointwise(depthwise(x)))
    assert tuple(run.sizes[:4]) == problem(86)[3][0]


def _settings(module, kernel: str) -> list[dict]:
    """Two ways to run ``kernel``: two tune configs (the first and the last), or its default blocks
    and blocks of 16, or (no blocks at all) one setting."""
    parameters = inspect.signature(getattr(module, kernel)).parameters
    if "config" in parameters:
        return [{"config": 0}, {"config": len(module._CONFIGS) - 1}]
    blocks = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY and name.isupper()
              and name != "GROUP_SIZE_M"]
    return [{}, dict.fromkeys(blocks, 16)] if blocks else [{}]


def _grown(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Other small sizes for a kernel without blocks: each size but the first two larger, odd."""
    return tuple(s if i < 2 else s + 2 for i, s in enumerate(sizes))


def _elements(number: int) -> int:
    """How many elements the inputs of problem ``number`` hold at its small sizes."""
    run = RUNS[number]
    inputs = run.make(run.small, lambda shape, device: torch.zeros(shape, device=device), "cpu")
    return sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))


def _steps_per_tap(kernel: str) -> bool:
    """Whether ``kernel``'s spec loops over a window's taps (``for kh over KH``: an index loop,
    each step a tap): a convolution, whose window is its cost in the interpreter."""
    spec = checked_spec(ROOT / "specs" / f"{kernel}.tile")
    return any(isinstance(s, m.Loop) and s.axis.is_index for s in m.statements(spec.body))


#: The problem that runs a convolution kernel (:func:`_steps_per_tap`) at both of its settings: of
#: the problems it runs, the one whose inputs hold the fewest elements at the small sizes (the first
#: on a tie); the others run the first setting (problem 58's 3 x 5 x 7 taps of conv_transpose3d take
#: 15 s a setting, 61's 3 x 3 x 3 four). Every other problem runs both.
REPRESENTATIVES = {
    kernel: min((n for n, run in RUNS.items() if run.kernel == kernel), key=_elements)
    for kernel in dict.fromkeys(run.kernel for run in RUNS.values()) if _steps_per_tap(kernel)
}


def _cases():
    for number, run in RUNS.items():
        yield pytest.param(number, 0, id=f"{number}-{run.kernel}-a")
        if REPRESENTATIVES.get(run.kernel, number) == number:
            yield pytest.param(number, 1, id=f"{number}-{run.kernel}-b")


@pytest.mark.parametrize(("number", "which"), list(_cases()))
def test_the_spec_computes_the_problems_expression(number, which, generated):
    run = RUNS[number]
    module = generated(run.kernel)
    settings = _settings(module, run.kernel)
    sizes = run.small
    if which >= len(settings):  # no blocks to vary: other sizes
        settings, sizes = [{}], _grown(run.small)
        which = 0
    torch.manual_seed(number)
    inputs = run.make(sizes, lambda shape, device: torch.randn(shape, device=device), "cpu")
    launcher = functools.partial(getattr(module, run.kernel), **settings[which])
    got = run.launch(launcher, *inputs)
    want = run.forward(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    else:
        assert torch.equal(got, want)
