"""Liger-Kernel's forward ops written as specs (swiglu, geglu, fused_add_rms_norm, rope), on the GPU
at Llama-3-8B shapes (hidden 4096, MLP 14336, 32 query and 8 key heads of 128; 4096 and 16384
tokens, bf16 and f16), against torch eager (Hugging Face's form for rope: ``q * cos +
rotate_half(q) * sin``) and ``torch.compile`` (Inductor, the choice a user would make instead),
timed in the same run.

``python benchmarks/liger_ops.py OUT_DIR [KERNEL ...]`` appends one row per case to
``OUT_DIR/liger_ops.csv`` (a header with the device, torch and Triton versions first when the file
is new) and prints it. Per case: tilegen, torch eager and torch.compile each timed eager
(``triton.testing.do_bench``, launches back to back, L2 flushed) and in a CUDA graph
(``do_bench_cudagraph``), the median of 5 interleaved rounds; tilegen's first call in this
process (tuning and compiling included); the max error against torch eager. Ratios are the other
time over tilegen's (above 1: tilegen faster).
"""

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-liger-")

from benchmarks.kernelbench_l1 import append_rows, first_call, interleaved  # noqa: E402

HIDDEN, MLP = 4096, 14336
TOKENS = (4096, 16384)


def _gate(shape, dtype):
    return torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype)


def _residual(shape, dtype):
    x, residual = _gate(shape, dtype)
    return x, residual, torch.randn(shape[-1], device="cuda", dtype=dtype), 1e-6


def _fused_add_rms_norm(x, residual, weight, eps):
    s = x + residual
    h = s.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight, s


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(q, k, cos, sin):
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rope_inputs(shape, dtype):  # shape: (tokens, head dim); one sequence of that many tokens
    tokens, d = shape
    q = torch.randn(1, 32, tokens, d, device="cuda", dtype=dtype)
    k = torch.randn(1, 8, tokens, d, device="cuda", dtype=dtype)
    angles = torch.randn(tokens, d // 2, device="cuda")
    emb = torch.cat((angles, angles), dim=-1)
    return q, k, emb.cos().to(dtype)[None], emb.sin().to(dtype)[None]  # [1, tokens, d]: the sequence's tables


#: kernel -> (torch's forward, as Liger's tests write it; input maker; the row length)
CASES = {
    "swiglu": (lambda a, b: F.silu(a) * b, _gate, MLP),
    "geglu": (lambda a, b: F.gelu(a, approximate="tanh") * b, _gate, MLP),
    "fused_add_rms_norm": (_fused_add_rms_norm, _residual, HIDDEN),
    "rope": (_rope, _rope_inputs, 128),
}


def case(kernel: str, inputs: tuple) -> dict:
    reference, _, _ = CASES[kernel]
    ours, got, first = first_call(kernel, inputs)
    want = reference(*inputs)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    error = max((g.double() - w.double()).abs().max().item() for g, w in zip(got, want, strict=True))
    compiled = torch.compile(reference)
    compiled(*inputs)
    ways = {"tilegen": lambda: ours(*inputs), "torch": lambda: reference(*inputs), "compile": lambda: compiled(*inputs)}
    eager = interleaved(ways, lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100))
    graph = interleaved(ways, lambda fn: triton.testing.do_bench_cudagraph(fn, rep=100))
    x = inputs[0]
    return {
        "kernel": kernel, "shape": "x".join(map(str, x.shape)), "dtype": str(x.dtype).removeprefix("torch."),
        "tilegen_ms": eager["tilegen"], "torch_ms": eager["torch"], "compile_ms": eager["compile"],
        "vs_torch_eager": eager["torch"] / eager["tilegen"], "vs_compile_eager": eager["compile"] / eager["tilegen"],
        "tilegen_graph_ms": graph["tilegen"], "torch_graph_ms": graph["torch"], "compile_graph_ms": graph["compile"],
        "vs_torch_graph": graph["torch"] / graph["tilegen"], "vs_compile_graph": graph["compile"] / graph["tilegen"],
        "first_call_s": first, "max_error": error,
    }


def main(out: Path, kernels: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    def rows():
        for kernel, (_, make, width) in CASES.items():
            if kernels and kernel not in kernels:
                continue
            for tokens in TOKENS:
                for dtype in (torch.bfloat16, torch.float16):
                    yield case(kernel, make((tokens, width), dtype))

    note = "vs_* = that way's ms / tilegen ms (eager: do_bench, L2 flushed; graph: do_bench_cudagraph)"
    append_rows(out / "liger_ops.csv", note, rows())

if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
