"""Why the derived softmax / log_softmax backward trails the hand-written one at 8192 x 512 (issue 36).

The hand-written backwards read the saved output y (one reduction a row); the derived ones
recompute from x (max, sum of exp, then the gradient's sum: three). Does a config with more rows
a program (BM = 8, 16: a warp or two a row, so the reductions stay within warps) close the gap?
Times the backward kernel alone (CUDA graphs, do_bench_cudagraph) and eager (do_bench): the
hand-written backward, the derived one with the forward's configs, and the derived one with
extra configs, at row lengths a user has (256 ... 4096, odd 1000 and 3000).

Run from the repository root on a CUDA machine: python benchmarks/explore/explore_derived_rows_h100.py
"""

import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tilegen.check import check  # noqa: E402
from tilegen.compiler import compile_spec  # noqa: E402
from tilegen.derive import derive_backward  # noqa: E402
from tilegen.parser import parse  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

BUILD = Path(tempfile.mkdtemp(prefix="tilegen_explore_"))
EXTRA = ["BM = 8, num_warps = 4", "BM = 8, num_warps = 8", "BM = 16, num_warps = 8", "BM = 16, num_warps = 4"]


def derived(file: str, name: str, extra: list[str]):
    spec = check(parse((ROOT / "specs" / f"{file}.tile").read_text(encoding="utf-8"), f"specs/{file}.tile"))
    text = derive_backward(spec, name)
    lines = text.split("\n")
    last = max(i for i, line in enumerate(lines) if line.strip().startswith(("config ", "default config ")))
    lines[last + 1:last + 1] = [f"    config {c}" for c in extra]
    source = compile_spec("\n".join(lines), f"specs/{name}.tile", derive=False).source
    (BUILD / f"{name}.py").write_text(source, encoding="utf-8")
    return getattr(load_module(BUILD / f"{name}.py"), name)


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for file in ("softmax", "log_softmax"):
        forward = getattr(load_module(ROOT / "generated" / f"{file}.py"), file)
        hand = getattr(load_module(ROOT / "generated" / f"{file}_backward.py"), f"{file}_backward")
        plain = derived(file, f"{file}_dplain", [])
        more = derived(file, f"{file}_dmore", EXTRA)
        for m, n in [(8192, 256), (8192, 512), (8192, 1000), (8192, 1024), (4096, 2048), (4096, 3000), (4096, 4096)]:
            x = torch.randn(m, n, device="cuda")
            dy = torch.randn(m, n, device="cuda")
            y = forward(x)
            calls = {"hand": lambda: hand(dy, y), "derived": lambda: plain(dy, x),
                     "derived+BM8/16": lambda: more(dy, x)}
            want = calls["hand"]()
            errors = {k: (f() - want).abs().max().item() for k, f in calls.items()}
            graph = {k: triton.testing.do_bench_cudagraph(f, rep=100) * 1e3 for k, f in calls.items()}
            eager = {k: triton.testing.do_bench(f, warmup=10, rep=100) * 1e3 for k, f in calls.items()}
            print(f"{file} {m}x{n}: graphed us " + ", ".join(f"{k} {v:.1f}" for k, v in graph.items())
                  + f" | hand/derived {graph['hand'] / graph['derived']:.3f}, "
                  f"hand/derived+ {graph['hand'] / graph['derived+BM8/16']:.3f}"
                  + " | eager us " + ", ".join(f"{k} {v:.1f}" for k, v in eager.items())
                  + " | max err " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)


if __name__ == "__main__":
    main()
