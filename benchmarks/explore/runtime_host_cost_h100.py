"""Per-call host cost of generated launchers before and after the shared runtime (issue 35).

Question: did moving the launch, tuning and check helpers out of each generated module into
one runtime module (``generated/_tilegen_runtime.py``) make a call cost more? Run from the
repository root on a CUDA machine, with the old modules extracted beside it first:

    mkdir -p /tmp/old && for k in copy softmax rms_norm matmul_fast; do
        git show 7ee8e76:generated/$k.py > /tmp/old/old_$k.py; done
    python benchmarks/explore/runtime_host_cost_h100.py /tmp/old

Tiny inputs, so the host is the bottleneck: calls back to back, then one synchronize; the
ten runs of 1000 calls each, old and new interleaved; the minimum and the median, in
microseconds per call. Prints to stdout, writes nothing.
"""

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "copy": lambda: (torch.randn(128, device="cuda"),),
    "softmax": lambda: (torch.randn(8, 512, device="cuda"),),
    "rms_norm": lambda: (torch.randn(8, 512, device="cuda", dtype=torch.float16),
                         torch.randn(512, device="cuda", dtype=torch.float16), 1e-6),
    "matmul_fast": lambda: (torch.randn(64, 64, device="cuda", dtype=torch.float16),
                            torch.randn(64, 64, device="cuda", dtype=torch.float16)),
}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_us(fn, args, calls: int = 2000, repeats: int = 5) -> float:
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    best = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
        best.append((time.perf_counter() - start) / calls * 1e6)
    return min(best)


def main(old_dir: Path) -> None:
    for name, make in CASES.items():
        args = make()
        old = getattr(load(old_dir / f"old_{name}.py", f"old_{name}"), name)
        new = getattr(load(ROOT / "generated" / f"{name}.py", f"new_{name}"), name)
        times = {"old": [], "new": []}
        for _ in range(10):  # interleaved, so drifts of the host's speed fall on both
            times["old"].append(per_call_us(old, args, calls=1000, repeats=1))
            times["new"].append(per_call_us(new, args, calls=1000, repeats=1))
        lo, ln = min(times["old"]), min(times["new"])
        mo, mn = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:12s} min: old {lo:.2f} us  new {ln:.2f} us  new/old {ln / lo:.3f}   "
              f"median: old {mo:.2f}  new {mn:.2f}  new/old {mn / mo:.3f}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
