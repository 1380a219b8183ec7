"""Which kernel structure closes the gap to cuBLAS at 2048 and 4096 (issue 5, target 2):
kernel time alone (CUDA graphs) of hand-written variants of the generated TMA matmul, each
with its best of a few tile configs, against cuBLAS timed before and after them.

Variants (all with host TensorDescriptors and GROUP_SIZE_M = 8 ordering):
- ``flat``: one program per tile (what ``matmul_fast`` generates);
- ``flat ws``: the same with ``warp_specialize=True`` on the K loop;
- ``persistent``: one program per SM looping over tiles (``tl.range(..., flatten=True)``);
- ``persistent ws``: the same with ``warp_specialize=True`` on the tile loop (tutorial 09);
- ``persistent split``: the epilogue stored as two halves of BN/2 columns (tutorial 09's
  EPILOGUE_SUBTILE), which frees shared memory for the pipeline.

``python benchmarks/explore/explore_matmul2_h100.py``; prints one line per (dtype, size, variant).
"""

import statistics

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count


@triton.jit
def tile_ids(tile, M, N, BM: tl.constexpr, BN: tl.constexpr):
    num_n = tl.cdiv(N, BN)
    in_group = 8 * num_n
    first = (tile // in_group) * 8
    size = min(tl.cdiv(M, BM) - first, 8)
    return first + ((tile % in_group) % size), (tile % in_group) // size


@triton.jit
def flat(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
         WS: tl.constexpr):
    pid_m, pid_n = tile_ids(tl.program_id(0), M, N, BM, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        acc += tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]))
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@triton.jit
def persistent(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               WS: tl.constexpr, SPLIT: tl.constexpr, PROGRAMS: tl.constexpr):
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS, flatten=True, warp_specialize=WS):
        pid_m, pid_n = tile_ids(tile, M, N, BM, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            acc += tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]))
        if SPLIT:
            halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([pid_m * BM, pid_n * BN], left.to(c_desc.dtype))
            c_desc.store([pid_m * BM, pid_n * BN + BN // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 128, 8, 3)]
SMALL = [(64, 128, 64, 4, 4), (128, 128, 64, 4, 4), (64, 64, 64, 4, 5)]


def graph_ms(fn):
    fn()
    return triton.testing.do_bench_cudagraph(fn)


def launch(variant, a, b, c, cfg):
    BM, BN, BK, warps, stages = cfg
    M, K = a.shape
    N = b.shape[1]
    split = variant.endswith("split")
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [BM, BK])
    b_desc = TensorDescriptor(b, [K, N], [N, 1], [BK, BN])
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [BM, BN // 2 if split else BN])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    ws = variant.endswith("ws")
    if variant.startswith("flat"):
        return lambda: flat[(tiles,)](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, WS=ws,
                                      num_warps=warps, num_stages=stages)
    programs = min(NUM_SMS, tiles)
    return lambda: persistent[(programs,)](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, WS=ws,
                                           SPLIT=split, PROGRAMS=programs, num_warps=warps, num_stages=stages)


print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
for dtype in (torch.float16, torch.bfloat16):
    for n in (1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        expected = (a.float() @ b.float()).to(dtype)
        tflops = lambda ms: 2 * n**3 / (ms * 1e-3) * 1e-12  # noqa: E731
        cublas = [graph_ms(lambda: torch.matmul(a, b))]
        results = []
        for variant in ("flat", "flat ws", "persistent", "persistent ws", "persistent split"):
            best = None
            for cfg in SMALL if n == 1024 else CONFIGS:
                try:
                    fn = launch(variant, a, b, c, cfg)
                    c.zero_()
                    fn()
                    if not torch.allclose(c.float(), expected.float(), atol=1.0, rtol=2e-2):
                        results.append(f"{variant} {cfg}: WRONG")
                        continue
                    t = graph_ms(fn)
                except Exception as error:  # any error: report it and go on
                    results.append(f"{variant} {cfg}: {type(error).__name__}")
                    continue
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best:
                results.append((variant, best))
        cublas.append(graph_ms(lambda: torch.matmul(a, b)))
        base = statistics.mean(cublas)
        print(f"{str(dtype)[6:]} {n}: cuBLAS {tflops(cublas[0]):.0f} / {tflops(cublas[1]):.0f} TFLOP/s "
              "(before / after)", flush=True)
        for item in results:
            if isinstance(item, str):
                print("  " + item)
            else:
                variant, (t, cfg) = item
                print(f"  {variant:18s} {tflops(t):5.0f} TFLOP/s  {base / t:.3f}x cuBLAS  {cfg}", flush=True)
