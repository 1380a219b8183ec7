"""Benchmarks: time a generated kernel against torch and a hand-written kernel over a sweep.

Used by ``tilegen bench`` and the studies in ``benchmarks/``. Follows the seeds'
``triton.testing.perf_report`` benchmarks (lecture 14, Triton tutorial 03): every provider is
timed in the same process with ``triton.testing.do_bench`` (eager calls, as a user without CUDA
graphs makes them: median and 20/80% quantiles, in ms) and with ``do_bench_cudagraph`` (the call
replayed in a CUDA graph: the kernels alone, the mean of the replays). Results are reported as
ms, TFLOP/s (specs with ``dot``) or GB/s (bytes read plus written), and the ratio to each
baseline, eager and graphed. Needs a CUDA GPU: interpreter timings say nothing about kernel
speed."""

from __future__ import annotations

import csv
import functools
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tilegen import model as m
from tilegen.runner import random_inputs

#: Quantiles asked of ``do_bench``: the median and the 20% / 80% points.
QUANTILES = (0.5, 0.2, 0.8)


class NoGPUError(RuntimeError):
    """Raised when benchmarking is asked for on a machine without a CUDA GPU."""


@dataclass(frozen=True)
class Timing:
    """One provider at one point of a sweep: median and 20/80% quantile times in ms of eager
    calls (launches back to back, L2 flushed before each), and the median ms of the call replayed
    in a CUDA graph (nan where capture failed)."""

    provider: str
    ms: float
    ms_low: float
    ms_high: float
    graph_ms: float = math.nan


@dataclass(frozen=True)
class Point:
    """One point of a sweep: the sizes, the work it does, and every provider's timing."""

    sizes: dict[str, int]
    flops: int  # 2 * M * N * K (times the batch) for dot specs, else 0
    bytes: int  # bytes of every input and output tensor
    timings: tuple[Timing, ...]

    def timing(self, provider: str) -> Timing:
        """``provider``'s timing at this point; KeyError for a provider the sweep did not time."""
        found = next((t for t in self.timings if t.provider == provider), None)
        if found is None:
            raise KeyError(f"no timing of provider {provider!r} (timed: {[t.provider for t in self.timings]})")
        return found

    def rate(self, timing: Timing) -> float:
        """TFLOP/s for dot specs, GB/s otherwise, at the median time."""
        seconds = timing.ms * 1e-3
        return self.flops / seconds * 1e-12 if self.flops else self.bytes / seconds * 1e-9


@dataclass
class Sweep:
    """A spec's benchmark: its points, in order, and the unit of :meth:`Point.rate`."""

    kernel: str
    unit: str
    providers: list[str] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)


def environment() -> dict[str, str]:
    """Device, torch and Triton versions, for CSV headers and plot titles."""
    import torch
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"device": device, "torch": torch.__version__, "triton": triton.__version__}


def require_gpu() -> None:
    """Raise :class:`NoGPUError` unless torch sees a CUDA GPU and the interpreter is off."""
    import os

    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        raise NoGPUError(
            "tilegen bench needs a CUDA GPU (none is visible, or TRITON_INTERPRET=1 is set): "
            "Triton's CPU interpreter runs kernels but its timings say nothing about GPU speed"
        )


def dot_loop(spec: m.Spec) -> m.Loop | None:
    """The spec's ``for`` loop holding ``dot``, if any."""
    return next((s for s in spec.body if isinstance(s, m.Loop) and m.is_dot_loop(s)), None)


def flop_count(spec: m.Spec, sizes: dict[str, int]) -> int:
    """2 * M * N * K for each ``acc += dot(a[m, k], b[k, n])`` (times every index-axis extent,
    e.g. the batch); 0 for specs without ``dot``."""
    loop = dot_loop(spec)
    if loop is None:
        return 0
    dims = {a.name.id: a.dim.id for a in spec.axes()}
    total = 0
    for stmt in loop.body:
        assert isinstance(stmt, m.Accumulate) and isinstance(stmt.value, m.Call), "is_dot_loop: acc += dot(...)"
        a, b = stmt.value.args
        assert isinstance(a, m.Load) and isinstance(b, m.Load), "is_dot_loop: a dot of two loads"
        names = [i.id for i in a.index if isinstance(i, m.Name)] + [i.id for i in b.index if isinstance(i, m.Name)]
        extents = {dims[n] for n in names}
        total += 2 * math.prod(sizes[d] for d in extents)
    return total


def is_plain_matmul(spec: m.Spec) -> bool:
    """True for ``acc = 0; for k: acc += dot(a[.., k], b[k, ..]); c[..] = acc``: torch's own
    ``torch.matmul`` (cuBLAS) is then the fair baseline, not the fp32 reference."""
    body = spec.body
    return (
        len(body) == 3
        and isinstance(body[0], m.Declare)
        and dot_loop(spec) is body[1]
        and len(body[1].body) == 1
        and isinstance(body[2], m.Store)
        and isinstance(body[2].value, m.Ref)
        and len(spec.inputs) == 2
    )


def torch_baseline(spec: m.Spec, module: ModuleType) -> tuple[str, Callable[..., Any]]:
    """(name, callable) of the torch provider: ``torch.matmul`` for plain matmuls, else the
    module's own ``reference`` (whole-tensor torch)."""
    if is_plain_matmul(spec):
        import torch

        return "torch.matmul", lambda *inputs, **_: torch.matmul(*inputs)
    return "torch", module.reference


def time_call(fn: Callable[[], object], warmup: int = 25, rep: int = 100) -> tuple[float, float, float]:
    """(median, 20%, 80%) milliseconds of ``fn()`` by ``triton.testing.do_bench``: eager calls,
    launched back to back, the L2 cache flushed before each."""
    import triton

    ms, low, high = triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=list(QUANTILES))
    return ms, low, high


def time_graphed(fn: Callable[[], object], rep: int = 100) -> float:
    """Milliseconds of ``fn()`` replayed in a CUDA graph (``triton.testing.do_bench_cudagraph``, the
    mean of its replays: no host work between calls, L2 not flushed), or nan where ``fn`` cannot
    be captured (its error printed)."""
    import triton

    try:
        return float(triton.testing.do_bench_cudagraph(fn, rep=rep))
    except Exception as failure:  # a call that synchronizes, allocates on the host, or tunes
        print(f"no CUDA graph: {type(failure).__name__}: {str(failure)[:120]}", flush=True)
        return math.nan


def timed(provider: str, fn: Callable[[], object]) -> Timing:
    """``provider``'s :class:`Timing` of ``fn()``: eager (``time_call``) and graphed (``time_graphed``)."""
    return Timing(provider, *time_call(fn), graph_ms=time_graphed(fn))


def interleaved(functions: dict[str, Callable[[], object]], rounds: int = 5, warmup: int = 25,
                rep: int = 100) -> tuple[dict[str, float], dict[str, float]]:
    """Median milliseconds of each function, eager (``time_call``) over ``rounds`` rounds in which
    the functions take turns, so clock drift reaches all alike; then each in a CUDA graph
    (``time_graphed``, nan where capture fails). Returns (eager, graphed), keyed as ``functions``."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, fn in functions.items():
            times[name].append(time_call(fn, warmup=warmup, rep=rep)[0])
    eager = {name: statistics.median(t) for name, t in times.items()}
    return eager, {name: time_graphed(fn, rep=rep) for name, fn in functions.items()}


def run_sweep(
    spec: m.Spec,
    module: ModuleType,
    points: Iterable[dict[str, int]],
    providers: dict[str, Callable[..., Any]] | None = None,
    make_inputs: Callable[[dict[str, int]], dict[str, Any]] | None = None,
    progress: Callable[[dict[str, int]], None] | None = None,
    label: str = "tilegen",
) -> Sweep:
    """Time ``module``'s launcher (provider ``label``) and ``providers`` at each point.

    ``providers`` maps a name to a callable taking the launcher's inputs (default: the torch
    baseline). ``make_inputs(sizes)`` builds the inputs (default: random ones on the GPU).
    Raises :class:`NoGPUError` without a GPU.
    """
    require_gpu()
    launcher = getattr(module, spec.name.id)
    if providers is None:
        name, fn = torch_baseline(spec, module)
        providers = {name: fn}
    sweep = Sweep(spec.name.id, "TFLOP/s" if dot_loop(spec) else "GB/s", [label, *providers])
    for sizes in points:
        if progress is not None:
            progress(sizes)
        inputs = make_inputs(sizes) if make_inputs else random_inputs(spec, sizes, "cuda")
        args = list(inputs.values())
        outputs = launcher(*args)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        tensors = [a for a in args if hasattr(a, "numel")] + list(outputs)
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        calls: dict[str, Callable[[], object]] = {label: functools.partial(launcher, *args)}
        calls |= {provider: functools.partial(fn, *args) for provider, fn in providers.items()}
        timings = [timed(name, call) for name, call in calls.items()]
        sweep.points.append(Point(dict(sizes), flop_count(spec, sizes), nbytes, tuple(timings)))
    return sweep


def write_csv(sweep: Sweep, path: Path, meta: dict[str, str] | None = None) -> None:
    """One row per point: sizes, then ms / 20% / 80% / rate per provider, then the first
    provider's speed relative to each other one (their ms over its ms). ``meta`` (device,
    versions) goes in ``#`` comment lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size_names = list(sweep.points[0].sizes) if sweep.points else []
    with path.open("w", newline="", encoding="utf-8") as handle:
        for key, value in (meta or {}).items():
            handle.write(f"# {key}: {value}\n")
        writer = csv.writer(handle)
        header = list(size_names)
        for provider in sweep.providers:
            header += [f"{provider} ms", f"{provider} ms 20%", f"{provider} ms 80%", f"{provider} {sweep.unit}",
                       f"{provider} graph ms"]
        header += [f"{sweep.providers[0]} / {p}" for p in sweep.providers[1:]]
        header += [f"{sweep.providers[0]} / {p} graph" for p in sweep.providers[1:]]
        writer.writerow(header)
        for point in sweep.points:
            row: list[object] = [point.sizes[n] for n in size_names]
            for provider in sweep.providers:
                t = point.timing(provider)
                row += [f"{t.ms:.5f}", f"{t.ms_low:.5f}", f"{t.ms_high:.5f}", f"{point.rate(t):.2f}",
                        f"{t.graph_ms:.5f}"]
            ours = point.timings[0]
            row += [f"{point.timing(p).ms / ours.ms:.3f}" for p in sweep.providers[1:]]
            row += [f"{point.timing(p).graph_ms / ours.graph_ms:.3f}" for p in sweep.providers[1:]]
            writer.writerow(row)


def plot(sweeps: list[Sweep], path: Path, x: str, title: str) -> None:
    """A line per provider (per sweep) of rate against size ``x``, as perf_report draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for sweep in sweeps:
        for provider in sweep.providers:
            label = provider if len(sweeps) == 1 else f"{sweep.kernel}: {provider}"
            xs = [p.sizes[x] for p in sweep.points]
            ys = [p.rate(p.timing(provider)) for p in sweep.points]
            axes.plot(xs, ys, marker="o", markersize=3, label=label)
    axes.set_xlabel(x)
    axes.set_ylabel(sweeps[0].unit)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def parse_sweep(texts: list[str]) -> list[dict[str, int]]:
    """``["M=N=K=128:512:128", "B=4"]`` -> one dict per point. Names joined by ``=`` share the
    value; values are ``a,b,c`` or an inclusive range ``start:stop:step``. Several swept
    options vary together (zip); single values hold for every point. Raises ValueError."""
    columns: list[tuple[list[str], list[int]]] = []
    for text in texts:
        *names, values = text.split("=")
        if not names or not all(n.isidentifier() for n in names):
            raise ValueError(f"bad sweep {text!r}: expected NAME[=NAME...]=VALUES, e.g. M=N=K=256,512")
        try:
            if ":" in values:
                start, stop, step = (int(v) for v in values.split(":"))
                numbers = list(range(start, stop + 1, step))
            else:
                numbers = [int(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"bad sweep values {values!r}: integers a,b,c or start:stop:step") from None
        if not numbers:
            raise ValueError(f"sweep {text!r} has no values")
        columns.append((names, numbers))
    length = max((len(v) for _, v in columns), default=0)
    for names, numbers in columns:
        if len(numbers) not in (1, length):
            raise ValueError(f"sweep of {'='.join(names)} has {len(numbers)} values; others have {length}")
    points = []
    for i in range(length):
        point = {}
        for names, numbers in columns:
            for name in names:
                point[name] = numbers[i if len(numbers) > 1 else 0]
        points.append(point)
    return points
