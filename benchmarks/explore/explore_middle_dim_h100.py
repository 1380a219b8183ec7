"""Why specs/sum_dim1.tile reads [128, 4096, 4095] at about 2.5 TB/s where torch.sum(x, dim=1)
reads at 2.8: the spec compiled once per (BK, BN, num_warps, num_stages), each alone (no
autotune), timed with do_bench (eager) beside torch, on the rows of 4095 floats (not 16-byte
aligned) and on rows of 4096 (aligned), to tell the layout's cost from the tile's."""

import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import triton

from tilegen.compiler import compile_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "specs" / "sum_dim1.tile").read_text()
HEAD, _, rest = SPEC.partition("  tune key D1, D2\n")
BODY = rest[rest.index("  acc: f32[n] = 0"):]
CONFIGS = [(32, 64, 4, 3), (16, 256, 4, 3), (8, 512, 4, 3), (32, 256, 8, 3), (16, 512, 8, 3), (8, 1024, 8, 3),
           (16, 256, 4, 4), (16, 256, 4, 5), (32, 128, 4, 5), (8, 256, 2, 4), (4, 512, 4, 6), (64, 64, 4, 3),
           (16, 1024, 16, 3), (32, 512, 16, 3)]


def variant(bk: int, bn: int, warps: int, stages: int):
    text = HEAD.replace("  block BK, BN\n", f"  block BK = {bk}, BN = {bn}\n") + BODY
    out = Path(tempfile.mkdtemp()) / f"sum_{bk}_{bn}_{warps}_{stages}.py"
    source = compile_spec(text, "sum_dim1.tile").source
    options = f"INT64_OFFSETS=int64, num_warps={warps}, num_stages={stages},"
    out.write_text(source.replace("INT64_OFFSETS=int64,", options))
    spec = importlib.util.spec_from_file_location(out.stem, out)
    module = importlib.util.module_from_spec(spec)
    sys.modules[out.stem] = module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
    return module.sum_dim1


def main():
    for d2 in (4095, 4096):
        x = torch.rand(128, 4096, d2, device="cuda")
        want = torch.sum(x, dim=1)
        gb = x.numel() * 4 / 1e9
        torch_ms = triton.testing.do_bench(lambda x=x: torch.sum(x, dim=1))
        print(f"D2 = {d2}: torch.sum {torch_ms:.3f} ms, {gb / torch_ms:.2f} TB/s", flush=True)
        for bk, bn, warps, stages in CONFIGS:
            try:
                fn = variant(bk, bn, warps, stages)
                torch.testing.assert_close(fn(x), want, rtol=1e-4, atol=1e-3)
                ms = triton.testing.do_bench(lambda fn=fn, x=x: fn(x))
                print(f"  BK={bk:3d} BN={bn:5d} warps={warps:2d} stages={stages}: {ms:7.3f} ms "
                      f"{gb / ms:5.2f} TB/s {torch_ms / ms:.3f}x torch", flush=True)
            except Exception as error:  # a config that does not compile or run is reported
                print(f"  BK={bk:3d} BN={bn:5d} warps={warps:2d} stages={stages}: {type(error).__name__}: "
                      f"{str(error)[:100]}", flush=True)
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
