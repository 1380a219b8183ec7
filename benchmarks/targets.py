"""Issue 5's six performance targets, measured in one process on the GPU.

``python benchmarks/targets.py OUT_DIR`` prints one line per measurement and writes
``OUT_DIR/targets.csv`` (target, case, value, unit, baseline, ratio) with the device, torch and
Triton versions in its ``#`` header lines. Every kernel time is the median of
``triton.testing.do_bench``; baselines are timed in the same run.

1. overhead: each generated seed kernel against its hand-written kernel with the same config
   (the hand-written time over the generated time, median over a sweep); kernel time in CUDA
   graphs (host launch cost is target 3), medians of 5 interleaved rounds, and again eager
   (``do_bench``: launches back to back, L2 flushed; the rows whose case ends in ``eager``);
2. matmul: the best matmul specs (``matmul_fast`` in f16 and bf16: TMA descriptors,
   autotuned) and the tutorial spec against cuBLAS at 1024, 2048, 4096, 8192, medians of 5
   interleaved rounds (L2 flushed between calls), and again in CUDA graphs;
3. launch: microseconds per call in a loop of a 512^3 matmul and a 4 KiB copy, generated
   launcher against launching the compiled kernel directly (Triton's JIT call and the
   CompiledKernel runner; outputs preallocated, arguments precomputed), and a tuned launcher
   after tuning; the fastest of 5 loops, taken in turns;
4. copy: against ``torch.Tensor.copy_`` at 2**24 and 2**28 float32 elements, eager and in CUDA graphs;
5. grayscale: the spec's default config on a uint8 3 x 8192 x 8192 image (bytes read + written);
6. tuning: the first call of an autotuned launcher in a fresh process, with an empty Triton
   cache and again with the caches the first process left (tilegen's tuning cache, Triton's compile cache).
"""

import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Tune in this process (an empty tilegen tuning cache), so each launcher's Autotuner has a
# best_config to replay on the hand-written kernels.
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-targets-")

from tests.reference import add as ref_add  # noqa: E402
from tests.reference import copy as ref_copy  # noqa: E402
from tests.reference import grayscale as ref_grey  # noqa: E402
from tests.reference import matmul as ref_matmul  # noqa: E402
from tests.reference import matmul_intel as ref_intel  # noqa: E402
from tests.reference import matmul_tutorial as ref_tutorial  # noqa: E402
from tilegen.bench import environment, time_call  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

gen = {p.stem: load_module(p) for p in (ROOT / "generated").glob("*.py")}
ROWS: list[tuple] = []


def ms(fn) -> float:
    return time_call(fn)[0]


def graph_ms(fn) -> float:
    """Kernel time alone: ``fn`` replayed in a CUDA graph (no host launch cost), median ms."""
    return triton.testing.do_bench_cudagraph(fn)


ROUNDS = 5


def interleaved(ours, theirs, timer=ms) -> tuple[float, float]:
    """Median ms of ``ours`` and ``theirs`` over ROUNDS alternating measurements, so clock and
    temperature drift during the run reaches both sides alike."""
    t_ours, t_theirs = [], []
    for _ in range(ROUNDS):
        t_ours.append(timer(ours))
        t_theirs.append(timer(theirs))
    return statistics.median(t_ours), statistics.median(t_theirs)


def record(target, case, value, unit, baseline="", ratio=None):
    ROWS.append((target, case, f"{value:.4g}", unit, baseline, "" if ratio is None else f"{ratio:.3f}"))
    extra = f" vs {baseline}: {ratio:.3f}x" if ratio is not None else ""
    print(f"[{target}] {case}: {value:.4g} {unit}{extra}", flush=True)


def randn(*shape, dtype=torch.float16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


# ---------------------------------------------------------------------------- 1. no overhead
def overhead() -> None:
    cases = []  # (kernel, case, generated fn, hand-written fn)
    for n in (2**20, 2**24, 2**26):
        x = randn(n, dtype=torch.float32)
        cases.append(("copy", f"N={n}", lambda x=x: gen["copy"].copy(x), lambda x=x: ref_copy.copy(x, bs=1024)))
        y = randn(n, dtype=torch.float32)
        cases.append(("add", f"N={n}", lambda x=x, y=y: gen["add"].add(x, y), lambda x=x, y=y: ref_add.add(x, y)))
    for h in (1024, 4096, 8192):
        img = torch.randint(0, 256, (3, h, h), dtype=torch.uint8, device="cuda")
        cases.append(("rgb2grey", f"3x{h}x{h}", lambda i=img: gen["rgb2grey"].rgb2grey(i, BH=32, BW=32),
                      lambda i=img: ref_grey.rgb2grey(i, bs=(32, 32))))
    for n in (512, 1024, 2048, 4096):
        a, b = randn(n, n), randn(n, n)
        cases.append(("matmul_naive", f"{n}^3", lambda a=a, b=b: gen["matmul_naive"].matmul_naive(a, b),
                      lambda a=a, b=b: ref_matmul.naive_matmul(a, b, bm=64, bn=64, bk=64)))
        cases.append(("matmul_grouped", f"{n}^3", lambda a=a, b=b: gen["matmul_grouped"].matmul_grouped(a, b),
                      lambda a=a, b=b: ref_matmul.grouped_matmul(a, b, bm=64, bn=64, bk=64, group_sz=8)))
        cases.append(("matmul_block_ptr", f"{n}^3", lambda a=a, b=b: gen["matmul_block_ptr"].matmul_block_ptr(a, b),
                      lambda a=a, b=b: ref_intel.matmul_block_ptr(a, b)))
        for kernel, hand, names in (
            ("matmul_tutorial", ref_tutorial.matmul, dict),
            ("matmul_kmasked", ref_intel.matmul_dummy, dict),
            ("matmul_grouped_autotuned", ref_matmul.grouped_autotuned_matmul,
             lambda k: {"bm": k["BM"], "bn": k["BN"], "bk": k["BK"], "group_sz": k["GROUP_SIZE"]}),
        ):
            launcher = getattr(gen[kernel], kernel)
            launcher(a, b)  # tune
            config = getattr(gen[kernel], f"{kernel}_kernel").best_config
            # the same config: block sizes, warps and stages (the hand-written launchers splat it)
            cfg = {**names(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages}
            cases.append((kernel, f"{n}^3 {config.kwargs}", lambda a=a, b=b, f=launcher: f(a, b),
                          lambda a=a, b=b, h=hand, c=cfg: h(a, b, config=c)))
    ratios: dict[str, list[float]] = {}
    eager: dict[str, list[float]] = {}
    for kernel, case, ours, theirs in cases:
        ours(), theirs()
        t_ours, t_theirs = interleaved(ours, theirs, graph_ms)
        ratios.setdefault(kernel, []).append(t_theirs / t_ours)
        record("overhead", f"{kernel} {case}", t_ours * 1e3, "us", "hand-written", t_theirs / t_ours)
        # the same two eager (do_bench: launches back to back, L2 flushed), as a user without graphs runs them
        e_ours, e_theirs = interleaved(ours, theirs)
        eager.setdefault(kernel, []).append(e_theirs / e_ours)
        record("overhead", f"{kernel} {case} eager", e_ours * 1e3, "us", "hand-written (eager)", e_theirs / e_ours)
    for kernel, values in ratios.items():
        record("overhead", f"{kernel} median over sweep", statistics.median(values), "x", "hand-written",
               statistics.median(values))
        median = statistics.median(eager[kernel])
        record("overhead", f"{kernel} median over sweep, eager", median, "x", "hand-written (eager)", median)


# ---------------------------------------------------------------------------- 2. matmul vs cuBLAS
def matmul() -> None:
    for name, dtype in (
        ("matmul_fast", torch.float16), ("matmul_fast", torch.bfloat16), ("matmul_tutorial", torch.float16)
    ):
        launcher = getattr(gen[name], name)
        for n in (1024, 2048, 4096, 8192):
            a, b = randn(n, n, dtype=dtype), randn(n, n, dtype=dtype)
            c = launcher(a, b)
            err = (c.float() - (a.float() @ b.float())).abs().max().item()
            t_ours, t_cublas = interleaved(lambda f=launcher, a=a, b=b: f(a, b), lambda a=a, b=b: torch.matmul(a, b))
            tflops = 2 * n**3 / (t_ours * 1e-3) * 1e-12
            config = getattr(gen[name], f"{name}_kernel").best_config
            record("matmul", f"{name} {str(dtype)[6:]} {n}^3 (cuBLAS {2 * n**3 / (t_cublas * 1e-3) * 1e-12:.0f} "
                   f"TFLOP/s; {config.kwargs} w{config.num_warps} s{config.num_stages}; max err {err:.3g})",
                   tflops, "TFLOP/s", "cuBLAS", t_cublas / t_ours)
            # The same two in CUDA graphs: kernel time alone, without either side's host launch cost.
            g_ours, g_cublas = interleaved(
                lambda f=launcher, a=a, b=b: f(a, b), lambda a=a, b=b: torch.matmul(a, b), graph_ms
            )
            record("matmul", f"{name} {str(dtype)[6:]} {n}^3 in CUDA graphs "
                   f"(cuBLAS {2 * n**3 / (g_cublas * 1e-3) * 1e-12:.0f} TFLOP/s)",
                   2 * n**3 / (g_ours * 1e-3) * 1e-12, "TFLOP/s", "cuBLAS (graph)", g_cublas / g_ours)


# ---------------------------------------------------------------------------- 3. launch overhead
def per_call_us(fn, calls=2000) -> float:
    """Microseconds per call of ``fn()`` in a loop of ``calls`` (GPU work included, synchronized)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def per_call_rounds(fns: dict) -> dict:
    """The fastest of ROUNDS loops of each function, the functions taking turns, so that host
    clock changes during the run reach all of them alike (the minimum, as ``timeit`` advises)."""
    best = {name: float("inf") for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            best[name] = min(best[name], per_call_us(fn))
    return best


def launch() -> None:
    """Per-call host cost in a loop. "Direct" is the same compiled kernel launched two ways: by
    Triton's JIT call ``kernel[grid](...)`` (what hand-written Triton code does) and by the
    compiled kernel's runner ``CompiledKernel[grid](...)`` (tutorial 02's launch); both with the
    output preallocated and the arguments precomputed."""
    x = randn(1024, dtype=torch.float32)  # 4 KiB
    z = torch.empty_like(x)
    copy = gen["copy"]
    compiled_copy = copy.copy_kernel.warmup(x, z, 1024, 1, 1, BS=1024, INT64_OFFSETS=False, grid=(1,))
    a, b = randn(512, 512), randn(512, 512)
    c = torch.empty_like(a)
    naive = gen["matmul_naive"]
    args = (a, b, c, 512, 512, 512, 512, 1, 512, 1, 512, 1)
    compiled_naive = naive.matmul_naive_kernel.warmup(*args, BM=64, BN=64, BK=64, INT64_OFFSETS=False, grid=(8, 8))
    tut = gen["matmul_tutorial"]
    tut.matmul_tutorial(a, b)  # tune
    config = tut.matmul_tutorial_kernel.best_config
    kw = config.kwargs
    grid = (triton.cdiv(512, kw["BLOCK_SIZE_M"]) * triton.cdiv(512, kw["BLOCK_SIZE_N"]), 1, 1)
    compiled_tut = tut.matmul_tutorial_kernel.fn.warmup(*args, GROUP_SIZE_M=8, ACTIVATION="none", INT64_OFFSETS=False,
                                                         **config.all_kwargs(), grid=grid)
    t = per_call_rounds({
        "copy jit": lambda: copy.copy_kernel[(1, 1, 1)](x, z, 1024, 1, 1, BS=1024, INT64_OFFSETS=False),
        "copy runner": lambda: compiled_copy[(1, 1, 1)](x, z, 1024, 1, 1, 1024, False),
        "copy ours": lambda: copy.copy(x),
        "empty_like": lambda: torch.empty_like(x),
        "naive jit": lambda: naive.matmul_naive_kernel[(8, 8, 1)](*args, BM=64, BN=64, BK=64, INT64_OFFSETS=False),
        "naive runner": lambda: compiled_naive[(8, 8, 1)](*args, 64, 64, 64, False),
        "naive ours": lambda: naive.matmul_naive(a, b),
        "tuned jit": lambda: tut.matmul_tutorial_kernel.fn[grid](
            *args, GROUP_SIZE_M=8, ACTIVATION="none", INT64_OFFSETS=False, **config.all_kwargs()),
        "tuned runner": lambda: compiled_tut[grid](
            *args, kw["BLOCK_SIZE_M"], kw["BLOCK_SIZE_N"], kw["BLOCK_SIZE_K"], 8, "none", False),
        "tuned ours": lambda: tut.matmul_tutorial(a, b),
        "autotuner": lambda: tut.matmul_tutorial_kernel[grid](
            *args, GROUP_SIZE_M=8, ACTIVATION="none", INT64_OFFSETS=False),
    })
    record("launch", "copy 4 KiB: direct, Triton's JIT call", t["copy jit"], "us/call")
    record("launch", "copy 4 KiB: direct, CompiledKernel[grid]", t["copy runner"], "us/call")
    record("launch", "copy 4 KiB: torch.empty_like alone", t["empty_like"], "us/call")
    record("launch", "copy 4 KiB: generated launcher (checks + allocation + launch)", t["copy ours"], "us/call",
           "JIT call", t["copy jit"] / t["copy ours"])
    record("launch", "copy 4 KiB: launcher minus JIT call", t["copy ours"] - t["copy jit"], "us/call")
    record("launch", "copy 4 KiB: launcher minus CompiledKernel[grid]", t["copy ours"] - t["copy runner"], "us/call")
    record("launch", "matmul 512^3: direct, Triton's JIT call", t["naive jit"], "us/call")
    record("launch", "matmul 512^3: direct, CompiledKernel[grid]", t["naive runner"], "us/call")
    record("launch", "matmul 512^3: generated launcher", t["naive ours"], "us/call",
           "JIT call", t["naive jit"] / t["naive ours"])
    record("launch", "matmul 512^3: launcher minus JIT call", t["naive ours"] - t["naive jit"], "us/call")
    record("launch", "matmul 512^3: launcher minus CompiledKernel[grid]", t["naive ours"] - t["naive runner"],
           "us/call")
    record("launch", "tuned matmul_tutorial 512^3: direct, Triton's JIT call of the chosen config", t["tuned jit"],
           "us/call")
    record("launch", "tuned matmul_tutorial 512^3: direct, CompiledKernel[grid]", t["tuned runner"], "us/call")
    record("launch", "tuned matmul_tutorial 512^3: generated launcher (after tuning)", t["tuned ours"], "us/call",
           "JIT call", t["tuned jit"] / t["tuned ours"])
    record("launch", "tuned matmul_tutorial 512^3: launcher minus JIT call", t["tuned ours"] - t["tuned jit"],
           "us/call")
    record("launch", "tuned matmul_tutorial 512^3: launcher minus CompiledKernel[grid]",
           t["tuned ours"] - t["tuned runner"], "us/call")
    record("launch", "tuned matmul_tutorial 512^3: Triton's Autotuner call", t["autotuner"], "us/call")
    record("launch", "untuned matmul_naive 512^3 launcher vs the tuned launcher", t["naive ours"], "us/call",
           "tuned launcher", t["naive ours"] / t["tuned ours"])


# ---------------------------------------------------------------------------- 4. copy, 5. grayscale
def copy_and_grey() -> None:
    for n in (2**24, 2**28):
        x = randn(n, dtype=torch.float32)
        z = torch.empty_like(x)
        t_torch, t_ours = ms(lambda z=z, x=x: z.copy_(x)), ms(lambda x=x: gen["copy"].copy(x))
        record("copy", f"N=2**{n.bit_length() - 1} float32", 8 * n / (t_ours * 1e-3) * 1e-12, "TB/s", "torch copy_",
               t_torch / t_ours)
        g_torch, g_ours = graph_ms(lambda z=z, x=x: z.copy_(x)), graph_ms(lambda x=x: gen["copy"].copy(x))
        record("copy", f"N=2**{n.bit_length() - 1} float32 in CUDA graphs", 8 * n / (g_ours * 1e-3) * 1e-12, "TB/s",
               "torch copy_ (graph)", g_torch / g_ours)
    img = torch.randint(0, 256, (3, 8192, 8192), dtype=torch.uint8, device="cuda")
    grey = gen["rgb2grey"]
    t = ms(lambda: grey.rgb2grey(img))
    record("grayscale", "default config, 3x8192x8192 uint8", 4 * 8192 * 8192 / (t * 1e-3) * 1e-12, "TB/s")
    t_seed = ms(lambda: ref_grey.rgb2grey(img, bs=(32, 32)))
    record("grayscale", "seed kernel (32x32 tiles)", 4 * 8192 * 8192 / (t_seed * 1e-3) * 1e-12, "TB/s")
    blocks = [(32, 32), (16, 64), (8, 128), (4, 256), (2, 512), (8, 256), (4, 512), (16, 128), (2, 1024), (1, 1024),
              (4, 1024)]
    for bh, bw in blocks:
        t = ms(lambda bh=bh, bw=bw: grey.rgb2grey(img, BH=bh, BW=bw))
        record("grayscale", f"BH={bh} BW={bw}", 4 * 8192 * 8192 / (t * 1e-3) * 1e-12, "TB/s")


# ---------------------------------------------------------------------------- 6. tuning cost
FIRST_CALL = """
import sys, time, torch
sys.path.insert(0, {root!r})
from tilegen.runner import load_module
mod = load_module(__import__("pathlib").Path({root!r}) / "generated" / "matmul_fast.py")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
start = time.perf_counter()
mod.matmul_fast(a, b)
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def tuning() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": f"{cache}/triton", "TILEGEN_CACHE_DIR": f"{cache}/tilegen"}
        script = FIRST_CALL.format(root=str(ROOT))
        times = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            times.append(float(out.stdout.strip().splitlines()[-1]))
    record("tuning", "matmul_fast 4096^3 first call, empty caches (compile + tune 11 configs)", times[0], "s")
    record("tuning", "matmul_fast 4096^3 first call, second process (tilegen's tuning cache + Triton's compile cache)",
           times[1], "s", "first process", times[0] / times[1])


def main(out_dir: Path, parts: list[str]) -> None:
    steps = {"overhead": overhead, "matmul": matmul, "launch": launch, "copy": copy_and_grey, "tuning": tuning}
    meta = environment()
    print(meta, flush=True)
    for name in parts or list(steps):
        steps[name]()
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "targets.csv" if not parts else f"targets_{'_'.join(parts)}.csv"
    with (out_dir / name).open("w", newline="", encoding="utf-8") as handle:
        for key, value in meta.items():
            handle.write(f"# {key}: {value}\n")
        writer = csv.writer(handle)
        writer.writerow(["target", "case", "value", "unit", "baseline", "ratio"])
        writer.writerows(ROWS)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
