"""Row pieces compiled for sm90 without a GPU (issue 12): registers, spills, shared memory and MMA kind.

Compiles ``generated/matmul_fast.py``'s kernel (f16, row-major, no split tail) for an H100
(``GPUTarget("cuda", 90, 128)``) with the local Triton and reads the cubin with the ``cuobjdump``
Triton ships: registers per thread and local memory (``-res-usage``), spills (``STL``/``LDL`` in
the SASS), ``HGMMA`` (Hopper's warpgroup MMA) against ``HMMA`` (``mma.sync``) instructions, and
the shared memory Triton allots. For the configs of ``specs/matmul_fast.tile`` and candidates for
the sizes row pieces do not reach yet (1536^3, 3072^3). No timing: that needs the GPU.
``python explore_pieces_sm90_compile.py``.
"""

import inspect
import subprocess
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"

# (BM, BN, BK, warps, stages): matmul_fast's configs of 128 x 256 and 128 x 128 for comparison, its
# pieced ones, then candidates
CONFIGS = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (192, 128, 64, 8, 4), (192, 128, 64, 8, 3),
           (320, 128, 64, 8, 3), (192, 64, 64, 4, 4), (160, 128, 64, 8, 4), (160, 128, 64, 4, 4),
           (96, 128, 64, 4, 4), (192, 256, 64, 8, 3), (320, 64, 64, 8, 4), (384, 128, 64, 8, 3),
           (320, 64, 64, 4, 4), (128, 256, 64, 8, 4)]


def compile_config(fn, names, bm, bn, bk, warps, stages):
    """One line: the config and what its sm90 cubin holds."""
    pieced = bool(bm & (bm - 1))
    first, second = (bm - (bm & -bm), bm & -bm) if pieced else (bm, bm)
    signature = {
        "a_desc": f"tensordesc<fp16[{first}, {bk}]>", "b_desc": f"tensordesc<fp16[{bk}, {bn}]>",
        "c_desc": f"tensordesc<fp16[{first}, {bn}]>",
        "a_piece_desc": f"tensordesc<fp16[{second}, {bk}]>" if pieced else "constexpr",
        "c_piece_desc": f"tensordesc<fp16[{second}, {bn}]>" if pieced else "constexpr",
        "partials_ptr": "*fp32", "M": "i32", "K": "i32", "N": "i32",
    }
    constants = {"a_tail_desc": None, "b_tail_desc": None, "c_tail_desc": None, "BM": bm, "BN": bn, "BK": bk,
                 "GROUP_SIZE_M": 8, "A_T": False, "B_T": False, "NUM_SMS": 132}
    if not pieced:
        constants |= {"a_piece_desc": None, "c_piece_desc": None}
    signature |= dict.fromkeys(constants, "constexpr")
    source = ASTSource(fn, signature, {(names.index(k),): v for k, v in constants.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 128),
                            options={"num_warps": warps, "num_stages": stages})
    cubin = Path("/tmp/explore_pieces_sm90.cubin")
    cubin.write_bytes(kernel.asm["cubin"])
    usage = subprocess.run([BIN / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True).stdout
    registers = next(word for line in usage.splitlines() for word in line.split() if word.startswith("REG:"))
    sass = subprocess.run([BIN / "cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
    pieces = f"{first} + {second}" if pieced else str(bm)
    return (f"{bm:>3} x {bn:<3} ({pieces:>8} rows) BK {bk} w{warps} s{stages}: {registers:<8} spills (STL/LDL) "
            f"{sass.count('STL')}/{sass.count('LDL')}  HGMMA {sass.count('HGMMA'):>2}  HMMA {sass.count('HMMA.'):>2}  "
            f"shared {kernel.metadata.shared} B")


def main() -> None:
    module = load_module(ROOT / "generated" / "matmul_fast.py")
    fn = module.matmul_fast_kernel.fn
    names = list(inspect.signature(fn.fn).parameters)
    print(f"# triton {triton.__version__}, target sm90 (compiled locally, no GPU); f16 row-major", flush=True)
    for config in CONFIGS:
        print(compile_config(fn, names, *config), flush=True)


if __name__ == "__main__":
    main()
