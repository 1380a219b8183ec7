"""Which tiles suit specs/argmax_dim1.tile now that it walks D1 in [BK, BN] tiles (`k over D1 by
BK whole`, indices merged across tiles): the spec compiled once per (BK, BN, num_warps,
num_stages), each alone (no autotune), timed with do_bench (eager) beside torch.argmax at
KernelBench's [128, 4096, 4095] and the small, odd [16, 1000, 777]."""

import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import triton

from tilegen.compiler import compile_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "specs" / "argmax_dim1.tile").read_text()
HEAD, _, rest = SPEC.partition("  tune key D1, D2\n")
BODY = rest[rest.index("  y[b, n]"):]
CONFIGS = [(bk, bn, w, s) for bk, bn, w in [(32, 64, 4), (16, 256, 4), (32, 128, 4), (8, 512, 4), (32, 256, 8),
                                            (64, 128, 8), (16, 128, 2), (64, 32, 4), (128, 32, 4), (32, 32, 2),
                                            (64, 64, 4), (16, 512, 8), (8, 1024, 8), (16, 64, 2), (128, 16, 4)]
           for s in (3, 4)]


def variant(bk: int, bn: int, warps: int, stages: int):
    text = HEAD.replace("  block BK, BN\n", f"  block BK = {bk}, BN = {bn}\n") + BODY
    out = Path(tempfile.mkdtemp()) / f"argmax_{bk}_{bn}_{warps}_{stages}.py"
    source = compile_spec(text, "argmax_dim1.tile").source
    options = f"INT64_OFFSETS=int64, num_warps={warps}, num_stages={stages},"
    out.write_text(source.replace("INT64_OFFSETS=int64,", options))
    spec = importlib.util.spec_from_file_location(out.stem, out)
    module = importlib.util.module_from_spec(spec)
    sys.modules[out.stem] = module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
    return module.argmax_dim1


def main():
    for shape in ((128, 4096, 4095), (16, 1000, 777)):
        x = torch.rand(*shape, device="cuda")
        want = torch.argmax(x, dim=1)
        gb = x.numel() * 4 / 1e9
        torch_ms = triton.testing.do_bench(lambda x=x: torch.argmax(x, dim=1))
        print(f"{shape}: torch.argmax {torch_ms:.4f} ms, {gb / torch_ms:.2f} TB/s", flush=True)
        for bk, bn, warps, stages in CONFIGS:
            try:
                fn = variant(bk, bn, warps, stages)
                assert torch.equal(fn(x), want)
                ms = triton.testing.do_bench(lambda fn=fn, x=x: fn(x))
                print(f"  BK={bk:3d} BN={bn:5d} warps={warps:2d} stages={stages}: {ms:8.4f} ms "
                      f"{gb / ms:5.2f} TB/s {torch_ms / ms:.3f}x torch", flush=True)
            except Exception as error:  # a config that does not compile or run is reported
                print(f"  BK={bk:3d} BN={bn:5d} warps={warps:2d} stages={stages}: {type(error).__name__}: "
                      f"{str(error)[:100]}", flush=True)
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
