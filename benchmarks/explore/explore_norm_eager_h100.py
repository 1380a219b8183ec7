"""Why the norms' eager forward + backward (benchmarks/backward.py's rms_norm and layer_norm rows)
takes 0.45-0.68 ms at 4096 and at 16384 x 4096 f16 while its kernels take 0.07-0.25 ms (graphed),
and softmax's eager time at 16384 x 4096 equals its graphed one: for each step (tilegen, torch),
do_bench as backward.py runs it, the host's time to enqueue one step (GPU idle before it), the wall
time per step of 50 steps back to back, and the CUDA runtime calls torch.profiler records in 20
steps (synchronizing ones, allocations), with torch.cuda.set_sync_debug_mode("warn") on."""

import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402


def _mod(name):
    return load_module(ROOT / "generated" / f"{name}.py")


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    rms, layer, softmax = _mod("rms_norm"), _mod("layer_norm"), _mod("softmax")
    for m in (4096, 16384):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
        w = (1 + torch.randn(4096, device="cuda") / 4).half()
        b = (torch.randn(4096, device="cuda") / 4).half()
        xf = torch.randn(m, 4096, device="cuda")
        leaves = [t.clone().requires_grad_() for t in (x, w, b, xf)]
        lx, lw, lb, lxf = leaves
        dy, dyf = torch.randn_like(x), torch.randn_like(xf)
        steps = {
            "rms_norm tilegen": lambda: rms.rms_norm(lx, lw, 1e-6).backward(dy),
            "rms_norm torch": lambda: F.rms_norm(lx, (4096,), lw, 1e-6).backward(dy),
            "layer_norm tilegen": lambda: layer.layer_norm(lx, lw, lb, 1e-5)[0].backward(dy),
            "layer_norm torch": lambda: F.layer_norm(lx, (4096,), lw, lb, 1e-5).backward(dy),
            "softmax tilegen": lambda: softmax.softmax(lxf).backward(dyf),
            "softmax torch": lambda: torch.softmax(lxf, dim=1).backward(dyf),
        }
        for name, step in steps.items():
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            eager = triton.testing.do_bench(step, grad_to_none=leaves, warmup=10, rep=100)
            graph = triton.testing.do_bench_cudagraph(step, rep=100, grad_to_none=leaves)
            enqueue = []
            for _ in range(30):
                for t in leaves:
                    t.grad = None
                torch.cuda.synchronize()
                start = time.perf_counter()
                step()
                enqueue.append(time.perf_counter() - start)
            torch.cuda.synchronize()
            enqueue.sort()
            start = time.perf_counter()
            for _ in range(50):
                for t in leaves:
                    t.grad = None
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / 50
            print(f"M={m:5d} {name:20s} do_bench {eager * 1e3:7.1f} us  graphed {graph * 1e3:7.1f} us  "
                  f"enqueue median {enqueue[15] * 1e6:7.1f} us (min {enqueue[0] * 1e6:6.1f})  "
                  f"back to back {wall * 1e6:7.1f} us/step", flush=True)
            if m == 4096 and name.endswith("tilegen"):
                torch.cuda.set_sync_debug_mode("warn")
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    step()
                torch.cuda.set_sync_debug_mode("default")
                print(f"   sync debug warnings in one step: {[str(c.message)[:100] for c in caught]}", flush=True)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        for t in leaves:
                            t.grad = None
                        step()
                    torch.cuda.synchronize()
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22)
                print("\n".join("   " + line for line in table.splitlines()), flush=True)


if __name__ == "__main__":
    main()
