"""Whether KernelBench's scans (specs/row_cumsum.tile, row_cumsum_reverse.tile) read faster walking
each row in tiles (`c over N by BC whole`: a carry per row, the tile's scan added to it) than
holding the whole row in one tile (`c over N whole`, 2.03 and 1.76 TB/s at 32768 x 32768 against
a 3.03 TB/s copy): each (BM, BC, num_warps) compiled alone (no autotune), timed with do_bench
(eager) beside torch and beside the committed one-tile spec (autotuned), at the suite's
32768 x 32768 and at 4096 x 4097, 4096 x 1000 and 1000 x 777."""

import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import triton

from tilegen.compiler import compile_spec
from tilegen.runner import load_module

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [(1, 1024, 4), (1, 2048, 4), (1, 4096, 4), (1, 4096, 8), (1, 8192, 8), (1, 8192, 16), (2, 1024, 4),
           (4, 1024, 4), (2, 2048, 8), (4, 512, 4), (4, 1024, 8), (1, 512, 4), (1, 256, 2), (4, 256, 4), (8, 256, 4)]
TORCH = {"row_cumsum": lambda x: torch.cumsum(x, dim=1),
         "row_cumsum_reverse": lambda x: torch.cumsum(x.flip(1), 1).flip(1)}


def variant(name: str, bm: int, bc: int, warps: int):
    spec = (ROOT / "specs" / f"{name}.tile").read_text()
    head, _, rest = spec.partition("  tune key N\n")
    body = rest[rest.index("  y[r, c]"):]
    head = head.replace("  block BM\n", f"  block BM = {bm}, BC = {bc}\n")
    head = head.replace("c over N whole", "c over N by BC whole")
    out = Path(tempfile.mkdtemp()) / f"{name}_{bm}_{bc}_{warps}.py"
    source = compile_spec(head + body, f"{name}.tile").source
    out.write_text(source.replace("INT64_OFFSETS=int64,", f"INT64_OFFSETS=int64, num_warps={warps},"))
    loader = importlib.util.spec_from_file_location(out.stem, out)
    module = importlib.util.module_from_spec(loader)
    sys.modules[out.stem] = module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader.loader.exec_module(module)
    return getattr(module, name)


def main():
    for name, reference in TORCH.items():
        committed = getattr(load_module(ROOT / "generated" / f"{name}.py"), name)
        for shape in ((32768, 32768), (4096, 4097), (4096, 1000), (1000, 777)):
            x = torch.rand(*shape, device="cuda")
            want = reference(x)
            gb = 2 * x.numel() * 4 / 1e9
            torch_ms = triton.testing.do_bench(lambda x=x: reference(x))
            one_ms = triton.testing.do_bench(lambda x=x: committed(x))
            print(f"{name} {shape}: torch {torch_ms:.4f} ms, one tile {one_ms:.4f} ms ({gb / one_ms:.2f} TB/s, "
                  f"{torch_ms / one_ms:.3f}x torch)", flush=True)
            for bm, bc, warps in CONFIGS:
                try:
                    fn = variant(name, bm, bc, warps)
                    torch.testing.assert_close(fn(x), want, rtol=1e-3, atol=shape[1] * 1e-4)
                    ms = triton.testing.do_bench(lambda fn=fn, x=x: fn(x))
                    print(f"  BM={bm} BC={bc:5d} warps={warps:2d}: {ms:8.4f} ms {gb / ms:5.2f} TB/s "
                          f"{torch_ms / ms:.3f}x torch", flush=True)
                except Exception as error:  # a config that does not compile or run is reported
                    print(f"  BM={bm} BC={bc:5d} warps={warps:2d}: {type(error).__name__}: {str(error)[:100]}",
                          flush=True)
            del x, want
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
