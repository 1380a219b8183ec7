"""Exploration on the H100 before choosing what tilegen generates for speed (issue 5).

``python benchmarks/explore/explore_h100.py`` prints: which Triton features this install has; a
hand-written TMA + persistent matmul (the shape of Triton tutorial 09, tensor descriptors made
on the host) against cuBLAS over a few configs; the grayscale and copy specs over block shapes
and warps; the launch overhead of generated launchers against launching the compiled kernel
directly; and a copy of more than 2**31 float32 elements (64-bit offsets). Everything is timed
with ``triton.testing.do_bench`` in this one process.
"""

import inspect
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402


def bench(fn, rep=100):
    return triton.testing.do_bench(fn, warmup=25, rep=rep, quantiles=[0.5, 0.2, 0.8])[0]


print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
print("autotune cache_results:", "cache_results" in inspect.signature(triton.autotune).parameters)
print("tl.make_tensor_descriptor:", hasattr(tl, "make_tensor_descriptor"))
print("tl.make_block_ptr:", hasattr(tl, "make_block_ptr"))
try:
    from triton.tools.tensor_descriptor import TensorDescriptor

    print("host TensorDescriptor: yes")
except ImportError as error:  # pragma: no cover - depends on the install
    TensorDescriptor = None
    print("host TensorDescriptor:", error)
print("tl.range params:", list(inspect.signature(tl.range.__init__).parameters)[1:])
NUM_SMS = torch.cuda.get_device_properties("cuda").multi_processor_count


# ---------------------------------------------------------------------------- TMA persistent
@triton.jit
def tma_persistent(a_desc, b_desc, c_desc, M, N, K,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                   NUM_SMS: tl.constexpr, OUT: tl.constexpr):
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        group_id = tile_id // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + (tile_id % group_size_m)
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([ki * BK, pid_n * BN])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(OUT))


def tma_matmul(a, b, BM, BN, BK, warps, stages, persistent=True):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device="cuda", dtype=a.dtype)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(b, [BK, BN])
    c_desc = TensorDescriptor.from_tensor(c, [BM, BN])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    programs = min(NUM_SMS, tiles) if persistent else tiles
    out = tl.float16 if a.dtype == torch.float16 else tl.bfloat16
    tma_persistent[(programs,)](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_SIZE_M=8,
                                NUM_SMS=programs, OUT=out, num_warps=warps, num_stages=stages)
    return c


CONFIGS = [(128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4),
           (256, 128, 64, 8, 3), (128, 128, 128, 8, 3), (128, 256, 128, 8, 2)]
if TensorDescriptor is not None:
    for dtype in (torch.float16, torch.bfloat16):
        for n in (1024, 2048, 4096, 8192):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            cublas = bench(lambda: torch.matmul(a, b))
            flops = 2 * n**3 * 1e-12
            best = None
            for cfg in CONFIGS:
                for persistent in (True, False):
                    try:
                        c = tma_matmul(a, b, *cfg, persistent=persistent)
                        err = (c.float() - (a.float() @ b.float())).abs().max().item()
                        ms = bench(lambda: tma_matmul(a, b, *cfg, persistent=persistent))
                    except Exception as error:  # any error: report it and go on
                        print(f"  tma {cfg} persistent={persistent}: {type(error).__name__}: {str(error)[:120]}")
                        continue
                    if best is None or ms < best[0]:
                        best = (ms, cfg, persistent, err)
            ms, cfg, persistent, err = best
            print(f"TMA {str(dtype)[6:]} {n}: cuBLAS {flops / cublas * 1e3:.0f} TFLOP/s, "
                  f"best TMA {flops / ms * 1e3:.0f} TFLOP/s = {cublas / ms:.3f}x cuBLAS cfg={cfg} "
                  f"persistent={persistent} max_err={err:.3g}", flush=True)

# ---------------------------------------------------------------------------- grayscale / copy
grey = load_module(ROOT / "generated" / "rgb2grey.py")
x = torch.randint(0, 256, (3, 8192, 8192), dtype=torch.uint8, device="cuda")
moved = 4 * 8192 * 8192
for bh, bw in [(32, 32), (16, 64), (8, 128), (4, 256), (2, 512), (1, 1024), (8, 256), (4, 512), (16, 128), (2, 1024),
               (1, 2048), (4, 1024)]:
    ms = bench(lambda: grey.rgb2grey(x, BH=bh, BW=bw))
    print(f"rgb2grey 3x8192x8192 BH={bh} BW={bw}: {moved / ms * 1e-9:.2f} TB/s", flush=True)

copy = load_module(ROOT / "generated" / "copy.py")
for n in (2**24, 2**28):
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    torch_ms = bench(lambda: dst.copy_(src))
    line = [f"copy N=2**{n.bit_length() - 1}: torch copy_ {8 * n / torch_ms * 1e-9:.2f} TB/s"]
    for bs in (1024, 2048, 4096, 8192, 16384):
        ms = bench(lambda: copy.copy(src, BS=bs))
        line.append(f"BS={bs} {8 * n / ms * 1e-9:.2f} ({torch_ms / ms:.3f}x)")
    print("; ".join(line), flush=True)

# ---------------------------------------------------------------------------- launch overhead
def per_call_us(fn, calls=2000):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


small = torch.randn(1024, device="cuda")  # 4 KiB
out = torch.empty_like(small)
direct = lambda: copy.copy_kernel[(1,)](small, out, 1024, 1, 1, BS=1024, INT64_OFFSETS=False)  # noqa: E731
print(f"copy 4 KiB per call: generated launcher {per_call_us(lambda: copy.copy(small)):.2f} us, "
      f"direct kernel launch {per_call_us(direct):.2f} us, torch copy_ {per_call_us(lambda: out.copy_(small)):.2f} us")
naive = load_module(ROOT / "generated" / "matmul_naive.py")
a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
c = torch.empty(512, 512, device="cuda", dtype=torch.float16)
direct = lambda: naive.matmul_naive_kernel[(8, 8)](  # noqa: E731
    a, b, c, 512, 512, 512, 512, 1, 512, 1, 512, 1, BM=64, BN=64, BK=64, INT64_OFFSETS=False
)
print(f"matmul 512^3 per call: generated launcher {per_call_us(lambda: naive.matmul_naive(a, b)):.2f} us, "
      f"direct kernel launch {per_call_us(direct):.2f} us")
tut = load_module(ROOT / "generated" / "matmul_tutorial.py")
tut.matmul_tutorial(a, b)
print(f"tuned matmul_tutorial 512^3 per call (after tuning): {per_call_us(lambda: tut.matmul_tutorial(a, b)):.2f} us")

# ---------------------------------------------------------------------------- > 2**31 elements
n = 2**31 + 3
src = torch.randn(n, device="cuda")
dst = copy.copy(src)
print(f"copy of N = 2**31 + 3 = {n} float32: INT64_OFFSETS={n > 2**31}, "
      f"equal={torch.equal(dst, src)}, tail={dst[-3:].tolist()}", flush=True)
