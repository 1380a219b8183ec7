"""Why matmul_fast trails cuBLAS at 1024 and 2048: kernel time alone (CUDA graphs) of the
generated kernel against hand-written variants with the same tile config.

Variants: host-side TensorDescriptor (persistent and not), device-side descriptors not
persistent, and the K loop with ``warp_specialize=True``. ``python benchmarks/explore/explore_matmul_h100.py``.
"""

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402

NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count
triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))


@triton.jit
def host_desc(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              NUM_PROGRAMS: tl.constexpr, WS: tl.constexpr):
    start = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    num_tiles = tl.cdiv(M, BM) * num_n
    in_group = 8 * num_n
    for tile in tl.range(start, num_tiles, NUM_PROGRAMS, flatten=True):
        group = tile // in_group
        first = group * 8
        size = min(tl.cdiv(M, BM) - first, 8)
        pid_m = first + ((tile % in_group) % size)
        pid_n = (tile % in_group) // size
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
            acc += tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]))
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@triton.jit
def device_desc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    in_group = 8 * num_n
    group = pid // in_group
    first = group * 8
    size = min(tl.cdiv(M, BM) - first, 8)
    pid_m = first + ((pid % in_group) % size)
    pid_n = (pid % in_group) // size
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(a_desc.load([pid_m * BM, k * BK]), b_desc.load([k * BK, pid_n * BN]))
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def graph_ms(fn):
    fn()
    return triton.testing.do_bench_cudagraph(fn)


def run(a, b, c, cfg, variant):
    BM, BN, BK, w, s = cfg
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    if variant.startswith("host"):
        ad = TensorDescriptor(a, [M, K], [K, 1], [BM, BK])
        bd = TensorDescriptor(b, [K, N], [N, 1], [BK, BN])
        cd = TensorDescriptor(c, [M, N], [N, 1], [BM, BN])
        programs = min(NUM_SMS, tiles) if "persistent" in variant else tiles
        ws = "ws" in variant
        return lambda: host_desc[(programs,)](ad, bd, cd, M, N, K, BM=BM, BN=BN, BK=BK, NUM_PROGRAMS=programs, WS=ws,
                                              num_warps=w, num_stages=s)
    return lambda: device_desc[(tiles,)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=w, num_stages=s)


fast = {
    "f16": load_module(ROOT / "generated" / "matmul_fast.py"),
    "bf16": load_module(ROOT / "generated" / "matmul_fast_bf16.py"),
}
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
for dtype, name in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
    launcher = getattr(fast[name], "matmul_fast" if name == "f16" else "matmul_fast_bf16")
    for n in (1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        flops = 2 * n**3 * 1e-9
        cublas = graph_ms(lambda: torch.matmul(a, b))
        line = [f"{name} {n}: cuBLAS {flops / cublas:.0f}",
                f"generated {cublas / graph_ms(lambda: launcher(a, b)):.3f}x"]
        configs = [(64, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 128, 64, 4, 4)]
        for variant in ("host persistent", "host", "host ws", "device"):
            best = None
            for cfg in configs:
                try:
                    fn = run(a, b, c, cfg, variant)
                    t = graph_ms(fn)
                except Exception as error:  # any error: report it and go on
                    line.append(f"{variant} {cfg}: {type(error).__name__}")
                    continue
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best:
                line.append(f"{variant} {cublas / best[0]:.3f}x {best[1]}")
        print("; ".join(line), flush=True)
