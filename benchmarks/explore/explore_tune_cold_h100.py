"""Does ``matmul_fast``'s tuner pick worse configs while it is still compiling them (issue 12), H100?

In ``explore_candidates3_h100.log`` the tuner's pick at the first two sizes of the process (1792^3
and 2048^3, on a machine just started) ran 7% and 11% slower than the best config forced, and at
the later sizes it was the best config or within 2%. A guess: Triton's autotuner compiles each
config just before timing it, so on a first tune the GPU idles for the second or so each compile
takes, and every config is timed after such a pause (25 ms of warmup calls, then 20 ms of graph
replays), at clocks that may not have settled; once every config is compiled (later sizes of the
same specialization) the configs are timed back to back.

For each size, a fresh process with an empty Triton cache (``TRITON_CACHE_DIR``) and an empty
tilegen cache: the launcher tunes (``cold``: compiling as it goes), then its choice is forgotten
and it tunes again (``warm``: everything compiled); then every config of 128 x 64 or more is
forced and timed against cuBLAS, medians of 3 interleaved rounds in CUDA graphs, to tell how far
each pick is from the best. It also prints the five fastest first-pass timings of each tune (the
autotuner's, before ``_settle_ties``), relative to the fastest.

``python explore_tune_cold_h100.py [SIZE ...] [--bf16] [--b-col]`` (default 1792 2048 3072 4096).
"""

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = [1792, 2048, 3072, 4096]


def label(config):
    kw = config.kwargs
    return f"{kw['BM']}x{kw['BN']}x{kw['BK']} w{config.num_warps} s{config.num_stages}"


def one_size(size, dtype_name, b_col):
    """Runs in its own process (fresh caches): both tunes at ``size``, then every config forced."""
    import torch
    import triton

    sys.path.insert(0, str(ROOT))
    from tilegen.runner import load_module

    module = load_module(ROOT / "generated" / "matmul_fast.py")
    first_pass = []
    settle = module._settle_ties

    def recording_settle(tune_key, autotuner, call):
        timings = {label(c): t[0] for c, t in (getattr(autotuner, "configs_timings", None) or {}).items()}
        if timings:  # empty where Triton timed nothing
            fastest = min(timings.values())
            first_pass.append(sorted((t / fastest, name) for name, t in timings.items())[:5])
        return settle(tune_key, autotuner, call)

    module._settle_ties = recording_settle
    dtype = getattr(torch, dtype_name)
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    if b_col:
        b = b.t().contiguous().t()
    picks = {}
    for tune in ("cold", "warm"):
        module._TUNED.clear()
        module.matmul_fast_kernel.cache.clear()
        module.matmul_fast(a, b)
        key, picks[tune] = list(module._TUNED.items())[-1]
    large = [i for i, c in enumerate(module._CONFIGS) if c.kwargs["BM"] * c.kwargs["BN"] >= 128 * 64]
    fns = {"cuBLAS": lambda: torch.mm(a, b)}
    for i in large:
        fns[i] = lambda i=i: (module._TUNED.__setitem__(key, i), module.matmul_fast(a, b))[1]
    times = {name: [] for name in fns}
    for _ in range(3):
        for name, fn in fns.items():
            times[name].append(triton.testing.do_bench_cudagraph(fn, rep=30))
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = {i: med["cuBLAS"] / med[i] for i in large}
    best = max(ratio, key=ratio.get)
    text = "  ".join(f"{tune} {label(module._CONFIGS[i])} {ratio.get(i, float('nan')):.3f}"
                     for tune, i in picks.items())
    print(f"{size}: {text}  best {label(module._CONFIGS[best])} {ratio[best]:.3f}", flush=True)
    for tune, top in zip(picks, first_pass, strict=False):
        print(f"    {tune} first pass: " + ", ".join(f"{name} {t:.3f}" for t, name in top), flush=True)


def main(args):
    import torch
    import triton

    dtype_name = "bfloat16" if "--bf16" in args else "float16"
    b_col = "--b-col" in args
    sizes = [int(x) for x in args if not x.startswith("--")] or SIZES
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; {dtype_name}, "
          f"b {'column' if b_col else 'row'}-major; one fresh process per size; ratio = cuBLAS time / config time",
          flush=True)
    for size in sizes:
        env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cold-"),
               "TILEGEN_CACHE_DIR": tempfile.mkdtemp(prefix="tilegen-cold-")}
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
               f"import explore_tune_cold_h100 as e; e.one_size({size}, {dtype_name!r}, {b_col})"
        subprocess.run([sys.executable, "-c", code], env=env, check=False)


if __name__ == "__main__":
    main(sys.argv[1:])
