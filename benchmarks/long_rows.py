"""Rows longer than one tile (issue item 4): softmax, log-softmax, layer norm and RMS norm on the GPU
at KernelBench's row length (4096 x 393216) and at row lengths around the one-tile limit.

``python benchmarks/long_rows.py [--csv benchmarks/results/long_rows_h100.csv] [--specs ...]
[--ns ...] [--rows 4096] [--first-call-ns ...] [--chunks ...] [--whole-max 65536] [--append]``

All four specs take several minutes (compiles, tunes, fresh processes); to stay within a
10-minute limit per command, run one spec per command into the same CSV::

    python benchmarks/long_rows.py --specs softmax
    python benchmarks/long_rows.py --specs log_softmax --append
    python benchmarks/long_rows.py --specs layer_norm --append
    python benchmarks/long_rows.py --specs rms_norm --append

For each spec and row length N it times, with ``tilegen.bench.interleaved``, eager
(``triton.testing.do_bench``: launches back to back, L2 flushed, the median of ``--rounds``
interleaved rounds; ``ms``, ``TB_per_s``, ``tilegen_over_torch``) and replayed in a CUDA graph
(``triton.testing.do_bench_cudagraph``: the kernels alone, no host launch cost, L2 not flushed,
``nan`` where a call cannot be captured; ``graph_ms``, ``TB_per_s_graph``,
``tilegen_over_torch_graph``):

* ``tilegen``: the generated launcher as a user calls it: the one-tile kernel up to
  ``_WHOLE_LIMIT`` (32768 for these specs), the looped kernel ``_<kernel>_loops`` past it;
* ``loops``: the looped launcher called directly, at every N (so the two kernels can be compared
  around the limit);
* ``whole``: the one-tile kernel forced past the limit (``_WHOLE_LIMIT`` raised) up to
  ``--whole-max``; its autotuner still compiles only the configs its pruning keeps;
* ``torch``: ``torch.softmax``, ``torch.log_softmax``, ``F.layer_norm``, ``F.rms_norm``.

Each row of the CSV also gives the bandwidth over the least traffic (x read once, y written once,
the weights, layer norm's mean and 1/std) and the ratio to torch, both eager and graphed, the max
error against torch in float32 (softmax and log-softmax run in f32, the norms
f16), and the config the launcher tuned to. ``first_call`` rows give the seconds of the first call in a fresh process
(a fresh Triton cache and tilegen tune cache, so compiling and tuning are included; the inputs
are made before the clock starts) for ``--first-call-ns``. ``--chunks`` times the looped
kernel at other chunks (its launcher keyword ``BLOCK_N``, 4096 by default) at the largest N, each
in a fresh process (the tune key is N alone, so one process would keep the warps tuned for the
first chunk). The ``first_call`` and ``loops_chunk`` rows are timed eagerly alone (their
graphed columns stay empty).

The modules are compiled from specs/ into a temporary folder (``--generated DIR`` uses modules
built already, such as generated/). Every case runs in its own try/except: a failure prints and
lands in the CSV's ``error`` column, and the rows are written as they come. ``--append`` refuses
a CSV whose columns differ from this script's (one written before the graphed columns).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPECS = ["softmax", "log_softmax", "layer_norm", "rms_norm"]
FIELDS = ["spec", "dtype", "M", "N", "impl", "ms", "TB_per_s", "tilegen_over_torch", "max_abs_error", "path",
          "config", "first_call_s", "chunk", "error", "graph_ms", "TB_per_s_graph", "tilegen_over_torch_graph"]


def build(folder: Path, specs: list[str]) -> Path:
    """Compile ``specs`` from specs/ into ``folder`` (one module each); returns ``folder``."""
    from tilegen.compiler import compile_spec

    for name in specs:
        path = ROOT / "specs" / f"{name}.tile"
        module = compile_spec(path.read_text(encoding="utf-8"), f"specs/{path.name}")
        (folder / f"{module.kernel}.py").write_text(module.source, encoding="utf-8")
    return folder


def least_bytes(name: str, rows: int, n: int) -> int:
    """The bytes a kernel must move: x read once and y written once, the weights, layer norm's
    mean and 1/std."""
    if name in ("softmax", "log_softmax"):
        return 2 * rows * n * 4
    if name == "rms_norm":
        return 2 * rows * n * 2 + n * 2
    return 2 * rows * n * 2 + 2 * n * 2 + 2 * rows * 4


def inputs(name: str, rows: int, n: int, seed: int = 0, device: str = "cuda"):
    """The launcher's arguments, torch's function of them (in the spec's dtype), and the least
    bytes moved."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator(device=device).manual_seed(seed)
    nbytes = least_bytes(name, rows, n)
    if name in ("softmax", "log_softmax"):
        x = torch.randn(rows, n, device=device, generator=g) * 4
        fn = torch.softmax if name == "softmax" else torch.log_softmax
        return (x,), (lambda: fn(x, dim=-1)), nbytes
    x = torch.randn(rows, n, device=device, dtype=torch.float16, generator=g) * 3 + 0.5
    w = torch.randn(n, device=device, dtype=torch.float16, generator=g)
    if name == "rms_norm":
        return (x, w, 1e-6), (lambda: F.rms_norm(x, (n,), w, 1e-6)), nbytes
    b = torch.randn(n, device=device, dtype=torch.float16, generator=g)
    return (x, w, b, 1e-5), (lambda: F.layer_norm(x, (n,), w, b, 1e-5)), nbytes


def torch_f32(name: str, args):
    """torch's answer computed in float32 (the error reference)."""
    import torch
    import torch.nn.functional as F

    if name == "softmax":
        return torch.softmax(args[0], dim=-1)
    if name == "log_softmax":
        return torch.log_softmax(args[0], dim=-1)
    n = args[0].shape[1]
    if name == "rms_norm":
        return F.rms_norm(args[0].float(), (n,), args[1].float(), args[2])
    return F.layer_norm(args[0].float(), (n,), args[1].float(), args[2].float(), args[3])


def max_error(name: str, out, args) -> float:
    first = out[0] if isinstance(out, tuple) else out
    return (first.float() - torch_f32(name, args)).abs().max().item()


def tuned_config(module, key) -> str:
    """The config the launcher remembered for ``key`` (``(device, N)`` or ``(device, "loops", N)``)."""
    index = module._tuner.tuned.get(key)
    return "" if index is None else json.dumps(module._CONFIGS[index].all_kwargs(), sort_keys=True)


FIRST_CALL = r"""
import os, sys, time, json
sys.path.insert(0, {root!r})
import torch
sys.path.insert(0, {bench!r})
from long_rows import inputs
from tilegen.runner import load_module
module = load_module({path!r})
args, _, _ = inputs({name!r}, {rows}, {n})
fn = getattr(module, {launcher!r})
kwargs = {kwargs}
torch.cuda.synchronize()
start = time.perf_counter()
fn(*args, **kwargs)
torch.cuda.synchronize()
first = time.perf_counter() - start
out = {{"first_call_s": first}}
if {time_it}:
    import triton
    out["ms"] = triton.testing.do_bench(lambda: fn(*args, **kwargs), warmup=25, rep=200)
print("RESULT " + json.dumps(out))
"""


def fresh_process(path: Path, name: str, rows: int, n: int, launcher: str, kwargs: dict, time_it: bool,
                  timeout: float) -> dict:
    """Run one call of ``launcher`` in a new Python process with empty Triton and tilegen caches."""
    code = FIRST_CALL.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), path=str(path), name=name, rows=rows,
                             n=n, launcher=launcher, kwargs=repr(kwargs), time_it=time_it)
    with tempfile.TemporaryDirectory(prefix="long-rows-cache-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
               "TILEGEN_CACHE_DIR": os.path.join(cache, "tilegen")}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-2000:]}")


def time_row_length(module, name: str, rows: int, n: int, options) -> list[dict]:
    """The CSV rows of one spec at one row length: tilegen (its launcher), loops (the looped
    launcher), whole (the one-tile kernel forced past its limit, up to ``--whole-max``), torch."""
    import torch

    from tilegen.bench import interleaved

    args, torch_fn, nbytes = inputs(name, rows, n)
    device = args[0].device
    limit = module._WHOLE_LIMIT
    path = "loops" if n > limit else "whole"
    launcher, looped = getattr(module, name), getattr(module, f"_{name}_loops")

    fast, forced_fast = module._FAST, {}

    def forced():
        # the limit raised, and a fast-path table of its own: the launcher's keeps a launch per
        # argument key, which does not hold the limit (a constant within a user's process), so a
        # shared table would hand the one-tile launch to the next "tilegen" call
        module._WHOLE_LIMIT, module._FAST = 1 << 40, forced_fast
        try:
            return launcher(*args)
        finally:
            module._WHOLE_LIMIT, module._FAST = limit, fast

    functions = {"tilegen": lambda: launcher(*args), "loops": lambda: looped(*args), "torch": torch_fn}
    if limit < n <= options.whole_max:
        functions["whole"] = forced
    errors = {}
    for impl, fn in functions.items():  # tune and compile before timing; check each result
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        spent = time.perf_counter() - start
        if impl != "torch":
            errors[impl] = max_error(name, out, args)
            print(f"{name} N={n} {impl}: first call in this process {spent:.2f} s", flush=True)
        del out
    configs = {
        "tilegen": tuned_config(module, (device, "loops", n) if path == "loops" else (device, n)),
        "loops": tuned_config(module, (device, "loops", n)),
        "whole": tuned_config(module, (device, n)),
    }
    ms, graph = interleaved(functions, rounds=options.rounds, warmup=25, rep=200)
    out = []
    for impl, t in ms.items():
        g = graph[impl]
        ratio = ms["torch"] / t if impl != "torch" else None
        ratio_graph = graph["torch"] / g if impl != "torch" else None
        out.append({
            "impl": impl, "ms": f"{t:.5f}", "TB_per_s": f"{nbytes / (t * 1e-3) / 1e12:.3f}",
            "tilegen_over_torch": f"{ratio:.3f}" if ratio else "",
            "max_abs_error": f"{errors[impl]:.3g}" if impl in errors else "",
            "path": path if impl == "tilegen" else "", "config": configs.get(impl, ""),
            "graph_ms": f"{g:.5f}", "TB_per_s_graph": f"{nbytes / (g * 1e-3) / 1e12:.3f}",
            "tilegen_over_torch_graph": f"{ratio_graph:.3f}" if ratio_graph is not None else "",
        })
    return out


def existing_columns(path: Path) -> list[str] | None:
    """The header row of the CSV at ``path`` (its first line not starting with ``#``), or None."""
    with open(path, newline="", encoding="utf-8") as handle:
        return next(csv.reader(line for line in handle if not line.startswith("#")), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "results" / "long_rows_h100.csv")
    parser.add_argument("--specs", default=",".join(SPECS), help="comma-separated specs (default: all four)")
    parser.add_argument("--rows", type=int, default=4096, help="M, the number of rows (default 4096)")
    parser.add_argument("--ns", default="4096,8192,16384,32768,65536,131072,393216", help="row lengths N")
    parser.add_argument("--first-call-ns", default="32768,65536,393216",
                        help="N at which to time the first call in a fresh process ('' for none)")
    parser.add_argument("--chunks", default="2048,4096,8192,16384",
                        help="chunks (BLOCK_N) of the looped kernel to time at the largest N, each in a fresh "
                             "process ('' for none)")
    parser.add_argument("--whole-max", type=int, default=65536,
                        help="the longest row to also time on the one-tile kernel forced past its limit")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (default 3)")
    parser.add_argument("--generated", type=Path, default=None,
                        help="a folder of modules built already (default: compile specs/ now)")
    parser.add_argument("--timeout", type=float, default=420, help="seconds for each fresh-process case")
    parser.add_argument("--append", action="store_true",
                        help="add rows to an existing CSV (a run per spec fills one file: each run stays within "
                             "a time limit)")
    options = parser.parse_args()
    if options.append and options.csv.exists():
        columns = existing_columns(options.csv)
        if columns is not None and columns != FIELDS:
            parser.error(f"{options.csv} has the columns {','.join(columns)}, not this script's {','.join(FIELDS)} "
                         "(written before the graphed columns?): append to a new CSV")

    import torch
    import triton

    from tilegen.runner import load_module

    os.environ.setdefault("TILEGEN_CACHE_DIR", tempfile.mkdtemp(prefix="tilegen-long-rows-"))
    specs = [s for s in options.specs.split(",") if s]
    ns = [int(v) for v in options.ns.split(",") if v]
    first_ns = [int(v) for v in options.first_call_ns.split(",") if v]
    chunks = [int(v) for v in options.chunks.split(",") if v]
    rows = options.rows
    folder = options.generated or build(Path(tempfile.mkdtemp(prefix="long-rows-build-")), specs)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"modules from {folder}", flush=True)

    options.csv.parent.mkdir(parents=True, exist_ok=True)
    header = not (options.append and options.csv.exists())
    handle = open(options.csv, "a" if options.append else "w", newline="")  # written row by row
    writer = csv.DictWriter(handle, fieldnames=FIELDS)
    if header:
        handle.write(f"# device: {torch.cuda.get_device_name()}\n")
        handle.write(f"# torch {torch.__version__}, triton {triton.__version__}\n")
        handle.write(f"# M = {rows}; ms, TB_per_s, tilegen_over_torch: eager launches, median of {options.rounds} "
                     "interleaved rounds of do_bench (L2 flushed); graph_ms, TB_per_s_graph, "
                     "tilegen_over_torch_graph: replayed in a CUDA graph, do_bench_cudagraph (nan where capture "
                     "failed); first_call: a fresh process with empty caches\n")
        writer.writeheader()

    def emit(**row):
        writer.writerow({key: row.get(key, "") for key in FIELDS})
        handle.flush()
        shown = " ".join(f"{k}={v}" for k, v in row.items() if v not in ("", None))
        print(shown, flush=True)

    for name in specs:
        dtype = "f32" if name in ("softmax", "log_softmax") else "f16"
        try:
            module = load_module(folder / f"{name}.py")
            limit = module._WHOLE_LIMIT
        except Exception as error:
            emit(spec=name, error=f"load: {type(error).__name__}: {error}")
            continue
        print(f"## {name} ({dtype}), _WHOLE_LIMIT = {limit}", flush=True)
        for n in ns:
            try:
                for row in time_row_length(module, name, rows, n, options):
                    emit(spec=name, dtype=dtype, M=rows, N=n, **row)
            except Exception as error:
                traceback.print_exc()
                emit(spec=name, dtype=dtype, M=rows, N=n, error=f"{type(error).__name__}: {error}"[:500])
            torch.cuda.empty_cache()
        for n in first_ns:
            try:
                result = fresh_process(folder / f"{name}.py", name, rows, n, name, {}, False, options.timeout)
                emit(spec=name, dtype=dtype, M=rows, N=n, impl="first_call", path="loops" if n > limit else "whole",
                     first_call_s=f"{result['first_call_s']:.2f}")
            except Exception as error:
                emit(spec=name, dtype=dtype, M=rows, N=n, impl="first_call",
                     error=f"{type(error).__name__}: {error}"[:500])
        for chunk in chunks if ns else ():
            n = max(ns)
            try:
                result = fresh_process(folder / f"{name}.py", name, rows, n, f"_{name}_loops", {"BLOCK_N": chunk},
                                       True, options.timeout)
                nbytes = least_bytes(name, rows, n)
                emit(spec=name, dtype=dtype, M=rows, N=n, impl="loops_chunk", chunk=chunk,
                     ms=f"{result['ms']:.5f}", TB_per_s=f"{nbytes / (result['ms'] * 1e-3) / 1e12:.3f}",
                     first_call_s=f"{result['first_call_s']:.2f}")
            except Exception as error:
                emit(spec=name, dtype=dtype, M=rows, N=n, impl="loops_chunk", chunk=chunk,
                     error=f"{type(error).__name__}: {error}"[:500])
    handle.close()
    print(f"wrote {options.csv}", flush=True)


if __name__ == "__main__":
    main()
