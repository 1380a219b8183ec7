"""Generated kernels as PyTorch custom ops on the GPU (issue 13).

``python benchmarks/ops.py [OUT_DIR]`` (default ``benchmarks/results``) writes
``ops_<device>.csv`` and prints two tables:

1. Launch cost: host microseconds per call of one small kernel, called back to back 2000 times
   (median of 5 rounds; the kernels are tiny, so the host is the bound): the generated
   launcher, the op ``torch.ops.tilegen.<kernel>`` in eager mode, the replay of a CUDA graph
   captured through the op, and the op inside ``torch.compile(fullgraph=True)`` (Inductor).
   ``torch.clone`` of the same input is the baseline (one eager torch op, timed in the same run).
2. A transformer attention block (layer norm, projections, attention, residual) using two
   tilegen ops (``layer_norm``, ``attention``) and torch matmuls, eager and under
   ``torch.compile(fullgraph=True)``: milliseconds per forward (``triton.testing.do_bench``,
   median) and the max difference between the two.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen.runner import load_module  # noqa: E402

CALLS, ROUNDS = 1000, 9


def per_call_us(ways: dict) -> dict:
    """For each way (a no-argument callable): the median over ROUNDS of the host time of CALLS
    back-to-back calls, in microseconds per call. The ways take turns within each round, so
    drift in the host's speed reaches all of them alike."""
    times = {way: [] for way in ways}
    for _ in range(ROUNDS):
        for way, fn in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            times[way].append((time.perf_counter() - start) / CALLS * 1e6)
    return {way: round(statistics.median(t), 2) for way, t in times.items()}


def launch_cost() -> list[dict]:
    """One row per kernel: microseconds per call of torch.clone, the launcher, the eager op, the
    op compiled by Inductor, and the replay of a CUDA graph captured through the op. The eager
    ways are timed first, before Inductor starts its compile workers."""
    cases = {
        "copy": lambda: (torch.randn(4096, device="cuda"),),
        "matmul_naive": lambda: (
            torch.randn(128, 128, device="cuda").half(), torch.randn(128, 128, device="cuda").half()
        ),
        "softmax": lambda: (torch.randn(64, 512, device="cuda"),),
        "attention": lambda: (*(torch.randn(1, 2, 128, 64, device="cuda").half() for _ in range(3)), 0.125),
    }
    rows, calls = [], {}
    for name, make in cases.items():
        module = load_module(ROOT / "generated" / f"{name}.py")
        args = make()
        launcher, op = getattr(module, name), getattr(torch.ops.tilegen, name)
        expected = launcher(*args)
        _same(op(*args), expected, exact=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = op(*args)
        graph.replay()
        _same(captured, expected, exact=True)
        calls[name] = (module, args, op, expected)
        ways = {"torch.clone": args[0].clone, "launcher": lambda args=args, f=launcher: f(*args),
                "op eager": lambda args=args, f=op: f(*args), "op in a CUDA graph (replay)": graph.replay}
        rows.append({"kernel": name, **{f"{way} (us)": us for way, us in per_call_us(ways).items()}})
    for row in rows:
        module, args, op, expected = calls[row["kernel"]]
        torch._dynamo.reset()
        compiled = torch.compile(lambda *a, op=op: op(*a), fullgraph=True)
        # Inductor tunes a tuned kernel's configs itself: another block shape, another sum order
        _same(compiled(*args), expected, exact=not hasattr(module, "_CONFIGS"))
        ways = {"torch.clone": args[0].clone, "op compiled": lambda args=args, f=compiled: f(*args)}
        timed = per_call_us(ways)
        row["op compiled (us)"] = timed["op compiled"]
        row["torch.clone, compiled phase (us)"] = timed["torch.clone"]
        print(row, flush=True)
    return rows


def _same(got, expected, exact: bool) -> None:
    tolerance = 0 if exact else 4e-3
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def attention_block(x, ln_w, ln_b, wqkv, wo, heads: int):
    """x: f16[B, S, E] -> f16[B, S, E]: x + attention(layer_norm(x) @ wqkv) @ wo (tilegen ops)."""
    B, S, E = x.shape
    D = E // heads
    h, _, _ = torch.ops.tilegen.layer_norm(x.view(B * S, E), ln_w, ln_b, 1e-5)
    q, k, v = (h @ wqkv).view(B, S, 3, heads, D).permute(2, 0, 3, 1, 4)  # strided views, no copies
    o, _ = torch.ops.tilegen.attention(q, k, v, D ** -0.5)  # and each row's log-sum-exp
    return x + (o.transpose(1, 2).reshape(B * S, E) @ wo).view(B, S, E)


def compiled_model() -> dict:
    """The attention block eager and compiled (Inductor, fullgraph): ms per forward, max difference."""
    for name in ("layer_norm", "attention"):
        load_module(ROOT / "generated" / f"{name}.py")
    B, S, E, heads = 4, 1024, 1024, 16
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, S, E, device="cuda", generator=gen).half()
    ln_w = torch.ones(E, device="cuda").half()
    ln_b = torch.zeros(E, device="cuda").half()
    wqkv = (torch.randn(E, 3 * E, device="cuda", generator=gen) / E ** 0.5).half()
    wo = (torch.randn(E, E, device="cuda", generator=gen) / E ** 0.5).half()
    args = (x, ln_w, ln_b, wqkv, wo, heads)
    torch._dynamo.reset()
    compiled = torch.compile(attention_block, fullgraph=True)
    eager_out, compiled_out = attention_block(*args), compiled(*args)
    normed = torch.nn.functional.layer_norm(x.float(), (E,)).view(B * S, E)
    qkv = (normed @ wqkv.float()).view(B, S, 3, heads, E // heads)
    reference = x.float() + (torch.nn.functional.scaled_dot_product_attention(
        *qkv.permute(2, 0, 3, 1, 4)).transpose(1, 2).reshape(B * S, E) @ wo.float()).view(B, S, E)
    result = {
        "model": f"attention block B={B} S={S} E={E} H={heads} f16",
        "eager (ms)": round(triton.testing.do_bench(lambda: attention_block(*args)), 4),
        "compiled (ms)": round(triton.testing.do_bench(lambda: compiled(*args)), 4),
        "max |compiled - eager|": float((compiled_out.float() - eager_out.float()).abs().max()),
        "max |compiled - f32 torch|": float((compiled_out.float() - reference).abs().max()),
    }
    print(result, flush=True)
    return result


def main(out: Path) -> None:
    device = torch.cuda.get_device_name().replace(" ", "_")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
    rows = launch_cost()
    model = compiled_model()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"ops_{device}.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        handle.write(f"# {model}\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results")
