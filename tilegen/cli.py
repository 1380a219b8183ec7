"""The ``tilegen`` command line (Typer): build, check, show, run, tune, demo and bench.

Spec errors print ``file:line:col: error: message`` with the line and a caret, exit 1, and
never a Python traceback; a failed spec leaves its generated module as it was. ``file`` is the
path as typed (a folder argument: the folder as typed joined with the spec's path in it), so
spec paths are taken as the command-line strings, not :class:`~pathlib.Path` (which would drop
a leading ``./``). ``run`` and ``demo`` print no warnings (see :func:`tilegen.runner.quiet`).
"""

from __future__ import annotations

import inspect
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tilegen import __version__
from tilegen import model as m
from tilegen.build import SpecFile, check_file, compile_file, find_specs
from tilegen.build import build as build_specs
from tilegen.check import check as check_model
from tilegen.errors import SpecError
from tilegen.grad import NoBackward, derive_backwards
from tilegen.parser import parse

if TYPE_CHECKING:  # imported where used: the runner (and the bench) import torch
    from tilegen.bench import Sweep
    from tilegen.runner import RunResult

app = typer.Typer(
    help="Compile declarative .tile kernel specs to Triton.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


_Command = TypeVar("_Command", bound=Callable[..., None])


def _command(function: _Command) -> _Command:
    """Register ``function`` as a command whose help is its docstring with each paragraph on one
    line, which rich wraps at the terminal's width (typer keeps the line breaks of a docstring's
    later paragraphs, and the command list's summary is its first paragraph)."""
    paragraphs = inspect.cleandoc(function.__doc__ or "").split("\n\n")
    return app.command(help="\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs))(function)


def _fail(message: str) -> NoReturn:
    err.print(message, markup=False)
    raise typer.Exit(1)


def _specs(paths: list[str]) -> list[SpecFile]:
    """The specs under ``paths`` (command-line strings, kept as typed for error locations)."""
    try:
        return find_specs(paths)
    except FileNotFoundError as error:
        _fail(f"error: {error}")


def _parse_sizes(values: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not number.strip().isdigit():
            _fail(f"error: --size expects NAME=VALUE with a non-negative integer, got {value!r}")
        sizes[name.strip()] = int(number)
    return sizes


@_command
def build(
    paths: Annotated[list[str], typer.Argument(help="Spec files or folders of specs.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output folder.")] = Path("generated"),
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 if any module is stale.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Say why a kernel has no backward.")] = False,
) -> None:
    """Compile specs into OUTPUT/<kernel>.py, with derived backwards beside them.

    Writes atomically; unchanged files are not rewritten. A spec without a backward line gets its derived backward
    beside it, OUTPUT/<kernel>_backward.py, where its operations all have gradient rules (-v says why a kernel has
    none).
    """
    specs = _specs(paths)
    if not specs:
        _fail(f"error: no .tile specs found in {', '.join(paths)}")
    results = build_specs(paths, output, check_only=check)
    failed = False
    for result in results:
        if result.error is not None:
            err.print(result.error.render(), markup=False)
            failed = True
        elif result.status == "stale":
            err.print(f"stale: {result.module} does not match {result.spec.given}", markup=False)
            failed = True
        else:
            out.print(f"{result.status:>9}  {result.module}  ({result.spec.given})", markup=False)
            if result.note and verbose:
                out.print(f"{'':>9}  {result.note}", markup=False, style="dim")
    without = sum(1 for result in results if result.note)
    if without and not verbose:
        out.print(f"{without} kernel{'s' if without > 1 else ''} without a backward (`tilegen build -v` says why)",
                  markup=False, style="dim")
    if failed:
        raise typer.Exit(1)


@_command
def check(paths: Annotated[list[str], typer.Argument(help="Spec files or folders of specs.")]) -> None:
    """Parse and validate specs; print every error, write nothing."""
    failed = False
    for spec in _specs(paths):
        try:
            check_file(spec)
            out.print(f"ok  {spec.given}", markup=False)
        except SpecError as error:
            err.print(error.render(), markup=False)
            failed = True
    if failed:
        raise typer.Exit(1)


@_command
def show(
    path: Annotated[str, typer.Argument(help="One spec file.")],
    grad: Annotated[bool, typer.Option("--grad", help="Print the backward spec derived from it instead.")] = False,
) -> None:
    """Print the module a spec generates, or with --grad the backward derived from it.

    With --grad it prints the derived .tile backward, or exits 1 with the reason where the spec's operations do not
    all have gradient rules.
    """
    spec = _one_spec(path, "show")
    try:
        if not grad:
            sys.stdout.write(compile_file(spec).source)
            return
        checked = check_file(spec)
        sys.stdout.write("\n".join(text for _, text in derive_backwards(checked)))
    except SpecError as error:
        _fail(error.render())
    except NoBackward as reason:
        line = f"{reason.span.line}:{reason.span.column}: " if reason.span is not None else ""
        _fail(f"{spec.given}:{line}no backward: {reason.reason}")


def _one_spec(path: str, command: str) -> SpecFile:
    """The one spec ``path`` names (a file, or a folder holding exactly one spec)."""
    specs = _specs([path])
    if len(specs) != 1:
        _fail(f"error: {command} takes one spec file; {path} holds {len(specs)}")
    return specs[0]


def _print_notes(rows: Sequence[RunResult]) -> None:
    """The lines under a results table: each row's note (a file written; for a FAIL row its worst
    element, for a SKIP row why it is no verdict) and caught warnings, then one line where tuned
    specs ran their interpreter config (the interpreter cannot time configs)."""
    for row in rows:
        if row.note:
            out.print(row.note, markup=False)
        for warning in row.warnings:
            out.print(f"{row.kernel}: {warning}", markup=False)
    if any(row.default_config for row in rows):
        out.print(INTERPRETER_NOTE, markup=False)


#: The line under a table where tuned specs ran in the interpreter.
INTERPRETER_NOTE = ("note: the Triton interpreter cannot time configs: tuned specs ran their interpreter config "
                    "(TILEGEN_CONFIG=N)")


def _results_table(results: Sequence[RunResult]) -> Table:
    """The rows as a table: full kernel names (never cut), the largest error and the error the
    tolerance allows at that element."""
    table = Table(title="tilegen kernels vs reference")
    width = max((len(r.kernel) for r in results), default=6)
    table.add_column("kernel", no_wrap=True, min_width=width)
    table.add_column("shape", overflow="fold")
    table.add_column("device", no_wrap=True)
    table.add_column("max error", justify="right", no_wrap=True)
    table.add_column("tolerance", justify="right", no_wrap=True)
    table.add_column("pass", no_wrap=True)
    for r in results:
        table.add_row(r.kernel, r.shape, r.device, f"{r.max_error:.3g}", f"{r.tolerance:.3g}", r.status)
    return table


def _print_table(table: Table) -> None:
    """Print ``table`` whole: at the terminal's width where it fits, else (a narrow terminal, or
    output to a file or pipe, which rich takes as 80 columns) at the width its cells need, so that
    no column is cut or squeezed to nothing."""
    needed = out.measure(table, options=out.options.update_width(1000)).maximum
    width = out.width
    out.width = max(width, needed)  # print's width= cannot exceed the console's
    try:
        out.print(table)
    finally:
        out.width = width


def _summary(rows: Sequence[RunResult], seconds: float, unbuilt: int = 0) -> str:
    """The last line of a run: ``164 passed, 0 failed in 83 s`` (skipped and unbuilt specs where any)."""
    counts = {status: sum(1 for r in rows if r.status == status) for status in ("PASS", "FAIL", "SKIP")}
    line = f"{counts['PASS']} passed, {counts['FAIL']} failed"
    if counts["SKIP"]:
        line += f", {counts['SKIP']} skipped"
    if unbuilt:
        line += f", {unbuilt} spec{'s' if unbuilt > 1 else ''} not built"
    return f"{line} in {seconds:.0f} s"


def _one_line(error: BaseException) -> str:
    """``Type: the first line of the message`` of ``error``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _run_spec(spec_file: SpecFile, module_dir: Path, sizes: dict[str, int], programs: int, device: str,
              image: Path | None, out_dir: Path | None, derived: str | None = None) -> list[RunResult]:
    """Run the kernel of ``spec_file`` (or of the backward ``derived`` from it: that spec's text),
    whose module is in ``module_dir``, against its reference: the rows."""
    from tilegen import runner

    if runner.interpreted():  # this process (a demo worker too) skips work Triton's interpreter repeats
        from tilegen.interpreter import round_as_the_gpu, speed_up

        speed_up()
        round_as_the_gpu()  # and rounds float32 to bf16 as the GPU does
    spec = check_file(spec_file) if derived is None else check_model(parse(derived, spec_file.display))
    module_path = module_dir / f"{spec.name.id}.py"
    module = runner.load_module(module_path)
    # on the CPU select_device has set TRITON_INTERPRET=1 (a demo worker inherits it): default_sizes keeps the
    # run within the interpreter's step budget
    return runner.run_module(
        module, spec, runner.default_sizes(spec, programs, sizes), device, image=image, out_dir=out_dir
    )


@_command
def run(
    path: Annotated[str, typer.Argument(help="One spec file.")],
    size: Annotated[list[str] | None, typer.Option("--size", help="NAME=VALUE for a size symbol.")] = None,
    image: Annotated[Path | None, typer.Option(help="An RGB image for a u8[3, H, W] input.")] = None,
    programs: Annotated[int, typer.Option(help="Default sizes: this many tiles (plus a tail) per size symbol.")] = 4,
    traceback: Annotated[
        bool, typer.Option("-v", "--traceback", help="Show the Python traceback of a kernel that fails to run.")
    ] = False,
) -> None:
    """Run a spec's kernel on random inputs (or an image) and compare it with its reference.

    Uses the GPU when there is one, else the Triton interpreter on the CPU. A kernel that fails to run prints one
    error line and exits 1 (-v shows the traceback).
    """
    from tilegen import runner

    device = runner.select_device()
    sizes = _parse_sizes(size or [])
    spec = _one_spec(path, "run")
    try:
        generated = compile_file(spec)
    except SpecError as error:
        _fail(error.render())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{generated.kernel}.py").write_text(generated.source, encoding="utf-8")
        try:
            results = _run_spec(spec, Path(tmp), sizes, programs, device, image, None)
        except KeyError as error:  # a size not given: its message is the sentence
            _fail(f"error: {error.args[0] if error.args else error}")
        except Exception as error:  # the kernel failed to run: one line, or the traceback with -v
            if traceback:
                raise
            _fail(f"error: {generated.kernel} failed on {device}: {_one_line(error)} (-v shows the traceback)")
    _print_table(_results_table(results))
    _print_notes(results)
    if any(result.status == "FAIL" for result in results):
        raise typer.Exit(1)


def _parse_dtypes(values: list[str]) -> dict[str, str]:
    dtypes: dict[str, str] = {}
    for value in values:
        name, sep, dtype = value.partition("=")
        if not sep or not name.strip() or not dtype.strip():
            _fail(f"error: --dtype expects VAR=DTYPE (T=bf16), got {value!r}")
        dtypes[name.strip()] = dtype.strip()
    return dtypes


@_command
def tune(
    path: Annotated[str, typer.Argument(help="One spec file.")],
    size: Annotated[list[str] | None, typer.Option("--size", help="NAME=VALUE for a size symbol.")] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option("--sizes", help="NAME[=NAME...]=VALUES: tune at each point, as tilegen bench sweeps (a,b,c or "
                                     "start:stop:step; several vary together)."),
    ] = None,
    dtype: Annotated[
        list[str] | None, typer.Option("--dtype", help="VAR=DTYPE: tune only this dtype of a dtype variable.")
    ] = None,
    programs: Annotated[int, typer.Option(help="Sizes not given: this many tiles (plus a tail) per size symbol.")] = 4,
    save: Annotated[
        bool, typer.Option("--save", help="Also write the choices into <kernel>.tuned.json beside the spec.")
    ] = False,
) -> None:
    """Tune a spec's launchers ahead of time at the sizes given, filling the on-disk cache.

    Runs the launchers on random inputs with TILEGEN_TUNE=full: every autotune config is compiled and timed on the
    GPU and the fastest cached (TILEGEN_CACHE_DIR, else ~/.cache/tilegen), where later runs at the default quick
    effort find it, for these sizes and as the nearest tuned sizes for others. A derived backward's kernels are
    tuned too, at the same sizes. With --save the choices also go into the table shipped beside the spec (one per
    kernel, keyed by GPU architecture), which tilegen build embeds in the generated module: quick tuning on any
    machine with such a GPU then starts from them. Needs a CUDA GPU.
    """
    from tilegen import bench as bench_mod
    from tilegen import runner

    device = runner.select_device()
    sizes = _parse_sizes(size or [])
    try:
        points = [{**point, **sizes} for point in bench_mod.parse_sweep(sweep)] if sweep else [sizes]
    except ValueError as error:
        _fail(f"error: {error}")
    dtypes = _parse_dtypes(dtype or [])
    spec_file = _one_spec(path, "tune")
    if device != "cuda":
        _fail("error: tilegen tune times configs on a GPU, and none is visible (the Triton interpreter cannot time "
              "them)")
    try:
        generated = compile_file(spec_file)
    except SpecError as error:
        _fail(error.render())
    spec = check_file(spec_file)
    # the spec's kernel, then its derived backward's (each module beside the others, as a build writes them)
    kernels = [(spec, generated), *((check_model(parse(module.spec_text or "", spec_file.display)), module)
                                    for module in generated.derived)]
    with tempfile.TemporaryDirectory() as tmp:
        for _, module_source in kernels:
            (Path(tmp) / f"{module_source.kernel}.py").write_text(module_source.source, encoding="utf-8")
        for kernel, module_source in kernels:
            if kernel is not spec and kernel.tune is None:  # a derived kernel without configs: nothing to tune
                continue
            _tune_kernel(runner.load_module(Path(tmp) / f"{module_source.kernel}.py"), kernel, points, programs,
                         device, dtypes, spec_file.path.parent if save else None)


def _tune_kernel(module: Any, spec: m.Spec, points: list[dict[str, int]], programs: int, device: str,
                 dtypes: dict[str, str], save: Path | None) -> None:
    """``tilegen tune`` of one kernel: its launcher in ``module`` tuned at each of ``points`` (the
    sizes not given: ``programs`` tiles), the choices printed and, where ``save`` is a folder,
    written into ``<kernel>.tuned.json`` there."""
    from tilegen import runner

    try:
        tuned = []
        for number, point in enumerate(points, 1):
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            at = f" at {where} ({number}/{len(points)})" if len(points) > 1 else ""
            with err.status(f"tuning {spec.name.id}{at} (every config compiles and runs)"):
                tuned += runner.tune_module(module, spec, runner.default_sizes(spec, programs, point), device, dtypes)
    except KeyError as error:
        _fail(f"error: {error.args[0] if error.args else error}")
    except Exception as error:
        _fail(f"error: tuning {spec.name.id} failed: {_one_line(error)}")
    for result in tuned:
        how = "already cached" if result.cached else "tuned"
        out.print(f"{how:>14}  {result.kernel} at {result.key}: config {result.index} {result.config}", markup=False)
    out.print(f"cache: {module._tuner.path}", markup=False)
    if save is not None:
        import torch

        from tilegen import tuned as tables
        from tilegen.runtime import device_arch

        table = tables.table_path(save, spec.name.id)
        try:
            tables.save_entries(table, runner.shipped_entries(spec, tuned, device_arch(torch.device("cuda"))))
        except SpecError as error:
            _fail(error.render())
        out.print(f"saved: {table} (tilegen build embeds it)", markup=False)


@_command
def demo(
    specs_dir: Annotated[str, typer.Argument(help="Folder of specs.")] = "specs",
    output: Annotated[Path, typer.Option("-o", "--output", help="Where modules are generated.")] = Path("generated"),
    image: Annotated[
        Path | None, typer.Option(help="Photo for image kernels (default: matplotlib's sample photo).")
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out-dir", help="Where the sample photo and its grey PNG go.")
    ] = Path("demo_out"),
    programs: Annotated[
        int | None, typer.Option(help="Tiles (plus a tail) per size symbol; default 5 on the CPU, 40 on a GPU.")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("-j", "--jobs", min=1, help="Specs compiled and run at once, each in its own process "
                     "(default: the CPU cores, at most 8; 1 runs them in this process)."),
    ] = None,
) -> None:
    """The main job: build every spec, run every kernel against its reference, print a table.

    Image kernels run on a real photograph and write its grey PNG next to it. Specs run in parallel worker
    processes (--jobs): Triton compiles each kernel on the CPU, so a first run with empty caches is bound by
    compilation. The last line counts the rows that passed and failed; the exit status is 1 where a spec failed to
    build or a kernel failed.
    """
    import os
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tilegen import runner

    start = time.perf_counter()
    device = runner.select_device()
    programs = programs or (40 if device == "cuda" else 5)
    jobs = jobs or min(os.cpu_count() or 1, 8)
    _specs([specs_dir])  # a folder that does not exist: an error, not a traceback
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(f"building the specs of {specs_dir}", total=None)
        results = build_specs([specs_dir], output)
        runnable = [r for r in results if r.error is None and not r.is_runtime]  # the runtime: nothing to run
        progress.update(task, total=len(runnable), completed=0)
        photo = image or runner.sample_photo()
        work = [_DemoWork(r.spec, output, programs, device, photo, None if image else out_dir, r.derived)
                for r in runnable]
        by_spec: dict[int, list[RunResult]] = {}
        for index, given, spec_rows in _run_specs(work, jobs):
            by_spec[index] = spec_rows
            progress.update(task, description=f"{given}: compiled and ran on {device}")
            progress.advance(task)
        rows = [row for index in range(len(work)) for row in by_spec[index]]  # in the specs' order, as built
    errors = [r.error for r in results if r.error is not None]
    for spec_error in errors:
        err.print(spec_error.render(), markup=False)
    _print_table(_results_table(rows))
    _print_notes(rows)
    out.print(_summary(rows, time.perf_counter() - start, len(errors)), markup=False)
    if errors or any(r.status == "FAIL" for r in rows):
        raise typer.Exit(1)


class _DemoWork(NamedTuple):
    """One spec the demo runs: :func:`_run_spec`'s arguments at the default sizes (picklable, for a worker)."""

    spec_file: SpecFile
    module_dir: Path
    programs: int
    device: str
    image: Path | None
    out_dir: Path | None
    derived: str | None


def _demo_rows(work: _DemoWork) -> list[RunResult]:
    """The demo's rows for one spec (:func:`_run_spec` at the default sizes); a kernel that fails to build or
    run gives one failed row with its error as the note, so the rest still run."""
    try:
        return _run_spec(work.spec_file, work.module_dir, {}, work.programs, work.device, work.image, work.out_dir,
                         work.derived)
    except Exception as error:  # any error: one kernel's failure is reported, the rest still run
        return [_failed_row(work, error)]


def _failed_row(work: _DemoWork, error: BaseException) -> RunResult:
    from tilegen.runner import RunResult

    kernel = work.spec_file.path.stem
    return RunResult(kernel, "-", work.device, float("nan"), False, f"{kernel}: {_one_line(error)}")


def _run_specs(work: list[_DemoWork], jobs: int) -> Iterator[tuple[int, str, list[RunResult]]]:
    """Run :func:`_demo_rows` on each of ``work``; yields ``(index, given path, rows)`` as each finishes.
    ``jobs`` > 1 runs them in that many spawned worker processes (each selects the device as this one did:
    ``TRITON_INTERPRET`` is inherited), so Triton compiles that many kernels at once."""
    if jobs == 1 or len(work) <= 1:
        for index, item in enumerate(work):
            yield index, item.spec_file.given, _demo_rows(item)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(min(jobs, len(work)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_demo_rows, item): index for index, item in enumerate(work)}
        for future in as_completed(futures):
            index = futures[future]
            try:
                rows = future.result()
            except Exception as error:  # the worker process died (a crash in a compiler): that spec fails
                rows = [_failed_row(work[index], error)]
            yield index, work[index].spec_file.given, rows


def _load_callable(target: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function (for ``--handwritten``)."""
    import importlib

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--handwritten takes MODULE:FUNCTION, got {target!r}")
    sys.path.insert(0, str(Path.cwd()))
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), attr)
    return function


@_command
def bench(
    path: Annotated[str, typer.Argument(help="One spec file.")],
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            "--sizes", help="NAME[=NAME...]=VALUES: a,b,c or start:stop:step (names joined by = share values)."
        ),
    ] = None,
    baseline: Annotated[str, typer.Option(help="torch, reference (the --handwritten kernel) or both.")] = "torch",
    handwritten: Annotated[
        str | None, typer.Option(help="MODULE:FUNCTION of a hand-written kernel taking the same inputs.")
    ] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write the results as CSV.")] = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Write a plot (PNG) of rate against the first size.")
    ] = None,
) -> None:
    """Time a spec's kernel against torch and/or a hand-written kernel over a sweep of sizes.

    Torch is cuBLAS for matmuls. Prints ms, TFLOP/s or GB/s and ratios. Needs a CUDA GPU.
    """
    from rich.progress import Progress

    from tilegen import bench as bench_mod
    from tilegen import runner

    if baseline not in ("torch", "reference", "both"):
        _fail(f"error: --baseline is torch, reference or both, not {baseline!r}")
    if baseline != "torch" and handwritten is None:
        _fail("error: --baseline reference needs --handwritten MODULE:FUNCTION")
    try:
        bench_mod.require_gpu()
        points = bench_mod.parse_sweep(sweep or [])
    except (bench_mod.NoGPUError, ValueError) as error:
        _fail(f"error: {error}")
    spec_file = _one_spec(path, "bench")
    try:
        generated = compile_file(spec_file)
    except SpecError as error:
        _fail(error.render())
    spec = check_file(spec_file)
    spec = m.specialize(spec, spec.bindings()[0])  # dtype variables: their first dtypes
    with tempfile.TemporaryDirectory() as tmp:
        module_path = Path(tmp) / f"{generated.kernel}.py"
        module_path.write_text(generated.source, encoding="utf-8")
        module = runner.load_module(module_path)
        if not points:
            points = [runner.default_sizes(spec, 64)]
        providers: dict[str, Callable[..., Any]] = {}
        if baseline in ("torch", "both"):
            name, fn = bench_mod.torch_baseline(spec, module)
            providers[name] = fn
        if baseline in ("reference", "both") and handwritten is not None:  # (not None: checked above)
            try:
                providers["hand-written"] = _load_callable(handwritten)
            except (ImportError, AttributeError, ValueError) as error:
                _fail(f"error: cannot load --handwritten {handwritten}: {error}")
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"bench {spec.name.id}", total=len(points))

            def advance(sizes: dict[str, int]) -> None:
                progress.update(task, advance=1, description=f"bench {spec.name.id} {sizes}")

            result = bench_mod.run_sweep(spec, module, points, providers, progress=advance)
    out.print(_bench_table(result))
    if csv_path is not None:
        bench_mod.write_csv(result, csv_path, bench_mod.environment())
        out.print(f"wrote {csv_path}", markup=False)
    if plot_path is not None:
        title = f"{spec.name.id} ({bench_mod.environment()['device']})"
        bench_mod.plot([result], plot_path, next(iter(points[0])), title)
        out.print(f"wrote {plot_path}", markup=False)


def _bench_table(sweep: Sweep) -> Table:
    table = Table(title=f"{sweep.kernel}: ms and {sweep.unit} (median of do_bench)")
    table.add_column("sizes", no_wrap=True)
    for provider in sweep.providers:
        table.add_column(f"{provider} ms", justify="right")
        table.add_column(f"{provider} {sweep.unit}", justify="right")
    for provider in sweep.providers[1:]:
        table.add_column(f"tilegen / {provider}", justify="right")
    for point in sweep.points:
        values = set(point.sizes.values())
        if len(values) == 1 and len(point.sizes) > 1:  # M=N=K=1024
            row = ["=".join(point.sizes) + f"={values.pop()}"]
        else:
            row = [",".join(f"{k}={v}" for k, v in point.sizes.items())]
        for provider in sweep.providers:
            t = point.timing(provider)
            row += [f"{t.ms:.4f}", f"{point.rate(t):.1f}"]
        ours = point.timings[0].ms
        row += [f"{point.timing(p).ms / ours:.3f}x" for p in sweep.providers[1:]]
        table.add_row(*row)
    return table


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """tilegen: declarative tile specs -> readable Triton kernels, launchers and references."""
    if version:
        out.print(f"tilegen {__version__}")
        raise typer.Exit(0)


if __name__ == "__main__":  # pragma: no cover
    app()
