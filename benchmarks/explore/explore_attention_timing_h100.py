"""Kernel or launch? The attention specs against tutorial 06 at one config, timed three ways (issue 11), H100.

``explore_attention_order_h100.log`` shows the generated kernels about 2% behind the tutorial at
the same small config (64x64) while their loop bodies compile to the same instruction mix. This
times both launchers, at the same config, with ``do_bench`` (each call's host work between two
events), with ``do_bench_cudagraph`` (kernel time only, the launches replayed from a CUDA graph),
and measures each launcher's host time per call (microseconds, calls issued back to back with no
synchronisation, far fewer than the launch queue holds). Medians of 5 interleaved rounds, TFLOP/s.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from explore_attention_order_h100 import at, tutorial_at  # noqa: E402

from tilegen.runner import load_module  # noqa: E402

SHAPES = [(1024, 64, True, (64, 64, 4, 2)), (2048, 64, True, (64, 64, 4, 2)), (1024, 64, False, (64, 64, 4, 2)),
          (1024, 128, True, (64, 64, 4, 3)), (1024, 128, False, (128, 64, 4, 2)),
          (4096, 128, False, (128, 64, 4, 2))]


def host_us(fn, calls=50) -> float:
    """Median host time of one call of ``fn`` in microseconds (no synchronisation between calls)."""
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main() -> None:
    mods = {name: load_module(ROOT / "generated" / f"{name}.py") for name in ("attention", "attention_causal")}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    for s, d, causal, cfg in SHAPES:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        name = "attention_causal" if causal else "attention"
        key = (q.device, s, d, torch.float16) if causal else (q.device, s, s, d, torch.float16)
        fns = {"tilegen": at(mods[name], name, key, cfg, q, k, v, scale),
               "tutorial": tutorial_at(cfg, q, k, v, causal, scale)}
        for fn in fns.values():
            fn()
        rows = {n: {"do_bench": [], "cudagraph": [], "host": []} for n in fns}
        for _ in range(5):
            for n, fn in fns.items():
                rows[n]["do_bench"].append(triton.testing.do_bench(fn, warmup=10, rep=40))
                rows[n]["cudagraph"].append(triton.testing.do_bench_cudagraph(fn, rep=40))
                rows[n]["host"].append(host_us(fn))
        med = {n: {m: statistics.median(t) for m, t in r.items()} for n, r in rows.items()}
        ours, tut = med["tilegen"], med["tutorial"]
        print(f"S={s:<5d} D={d:<4d} causal={causal!s:5} {cfg}: "
              f"do_bench {flops / ours['do_bench'] / 1e9:6.1f} vs {flops / tut['do_bench'] / 1e9:6.1f} "
              f"(x{tut['do_bench'] / ours['do_bench']:.3f})  "
              f"cudagraph {flops / ours['cudagraph'] / 1e9:6.1f} vs {flops / tut['cudagraph'] / 1e9:6.1f} "
              f"(x{tut['cudagraph'] / ours['cudagraph']:.3f})  "
              f"host us/call {ours['host']:.0f} vs {tut['host']:.0f}  kernel ms {ours['cudagraph']:.3f}",
              flush=True)


if __name__ == "__main__":
    main()
