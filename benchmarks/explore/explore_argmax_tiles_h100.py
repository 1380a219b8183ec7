"""Which tile of specs/argmax_dim1.tile's one-tile kernel ([D1 whole, BN]) runs fastest at
KernelBench's [128, 4096, 4095], against torch.argmax(x, dim=1): the spec compiled once per
(BN, num_warps), each alone (no autotune), timed with do_bench (eager) beside torch."""

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton

from tilegen.compiler import compile_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "specs" / "argmax_dim1.tile").read_text()
HEAD, _, _ = SPEC.partition("  tune key D1\n")
BODY = "  y[b, n] = argmax(x[b, k, n], dim=k)\n"


def variant(bn: int, warps: int):
    text = HEAD.replace("  block BN\n", f"  block BN = {bn}\n") + BODY
    out = Path(tempfile.mkdtemp()) / f"argmax_{bn}_{warps}.py"
    source = compile_spec(text, "argmax_dim1.tile").source
    out.write_text(source.replace("INT64_OFFSETS=int64,", f"INT64_OFFSETS=int64, num_warps={warps},"))
    spec = importlib.util.spec_from_file_location(out.stem, out)
    module = importlib.util.module_from_spec(spec)
    sys.modules[out.stem] = module
    spec.loader.exec_module(module)
    return module.argmax_dim1


def main():
    x = torch.rand(128, 4096, 4095, device="cuda")
    want = torch.argmax(x, dim=1)
    torch_ms = triton.testing.do_bench(lambda: torch.argmax(x, dim=1))
    print(f"torch.argmax: {torch_ms:.3f} ms", flush=True)
    for bn, warps in [(2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16), (16, 32), (32, 32), (64, 32)]:
        try:
            fn = variant(bn, warps)
            assert torch.equal(fn(x), want)
            ms = triton.testing.do_bench(lambda fn=fn: fn(x))
            print(f"BN={bn:3d} num_warps={warps:2d}: {ms:8.3f} ms  {torch_ms / ms:.3f}x torch", flush=True)
        except Exception as error:
            print(f"BN={bn:3d} num_warps={warps:2d}: {type(error).__name__}: {str(error)[:120]}", flush=True)


if __name__ == "__main__":
    main()
