"""What one call of every generated launcher costs on the host (issue 34), at tiny sizes, where
the GPU waits for the host: microseconds per call of the generated function, of its custom op
``torch.ops.tilegen.<kernel>`` and of the torch op it replaces, each called back to back
(CALLS calls, one synchronize; the ways take turns in ROUNDS rounds; the median).

``python benchmarks/launch_overhead.py [OUT_DIR] [KERNEL ...]`` (default ``benchmarks/results``,
every spec of ``specs/``) writes ``OUT_DIR/launch_overhead_<device>.csv``: kernel, sizes (each
input's shape), dtypes (the binding of the spec's dtype variables, its first), generated_us,
custom_op_us, torch_us, torch (what the torch column ran: ``torch``, the op of :data:`TORCH`, or
``reference``, the module's torch reference, which may be several ops) and ``ratio``
(torch_us / generated_us: at least 1 where the launcher costs no more than torch). Sizes are the
demo's at one program (``tilegen.runner.default_sizes``); each launcher is called once first, so
that it tuned and compiled before the timing.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen import model as m  # noqa: E402
from tilegen.check import check  # noqa: E402
from tilegen.parser import parse  # noqa: E402
from tilegen.runner import default_sizes, load_module, quiet, random_inputs  # noqa: E402

CALLS, ROUNDS = 1000, 5


def _sdpa(causal):
    return lambda q, k, v, scale: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


#: The torch op each kernel replaces, on the spec's inputs in order.
TORCH = {
    "copy": lambda x: x.clone(),
    "add": torch.add, "add_loop": torch.add, "add_single": torch.add,
    "softmax": lambda x: torch.softmax(x, 1),
    "log_softmax": lambda x: torch.log_softmax(x, 1),
    "rms_norm": lambda x, w, eps: F.rms_norm(x, (x.shape[1],), w, eps),
    "layer_norm": lambda x, w, b, eps: F.layer_norm(x, (x.shape[1],), w, b, eps),
    "matmul_fast": torch.matmul, "matmul_naive": torch.matmul, "matmul_f32": torch.matmul,
    "matmul_grouped": torch.matmul, "matmul_grouped_autotuned": torch.matmul, "matmul_kmasked": torch.matmul,
    "matmul_tutorial": torch.matmul, "matmul_batched": torch.matmul,
    "sum_dim1": lambda x: torch.sum(x, 1), "mean_dim1": lambda x: torch.mean(x, 1),
    "max_dim1": lambda x: torch.amax(x, 1), "min_dim1": lambda x: torch.amin(x, 1),
    "argmax_dim1": lambda x: torch.argmax(x, 1), "argmin_dim1": lambda x: torch.argmin(x, 1),
    "prod_reduction": lambda x: torch.prod(x, 1),
    "row_cumsum": lambda x: torch.cumsum(x, 1), "row_cumprod": lambda x: torch.cumprod(x, 1),
    "cross_entropy": lambda z, t: F.cross_entropy(z, t, reduction="none"),
    "swiglu": lambda a, b: F.silu(a) * b,
    "geglu": lambda a, b: F.gelu(a, approximate="tanh") * b,
    "embedding": F.embedding,
    "attention": _sdpa(False), "attention_causal": _sdpa(True),
    "mse_loss": F.mse_loss, "huber_loss": F.smooth_l1_loss,
    "batch_norm": lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, True, 0.0, eps),
    "group_norm": lambda x, w, b, groups, eps: F.group_norm(x, groups, w, b, eps),
}


def per_call_us(ways: dict) -> dict:
    """Median over ROUNDS of the microseconds per call of CALLS back-to-back calls of each way
    (a no-argument callable); the ways take turns within a round."""
    times = {way: [] for way in ways}
    for _ in range(ROUNDS):
        for way, fn in ways.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            torch.cuda.synchronize()
            times[way].append((time.perf_counter() - start) / CALLS * 1e6)
    return {way: statistics.median(t) for way, t in times.items()}


def row(path: Path) -> dict | None:
    """The CSV row of the spec at ``path`` (None for an image spec, which has no tiny input)."""
    spec = check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}"))
    binding = spec.bindings()[0]
    spec = m.specialize(spec, binding)
    name = spec.name.id
    module = load_module(ROOT / "generated" / f"{name}.py")
    inputs = tuple(random_inputs(spec, default_sizes(spec, 1), "cuda").values())
    launcher, op = getattr(module, name), module.op
    theirs, label = (TORCH[name], "torch") if name in TORCH else (module.reference, "reference")
    caught: list[str] = []
    with quiet(caught):
        for fn in (launcher, op, theirs):  # tuned, compiled, warm
            fn(*inputs)
        times = per_call_us({"generated": lambda: launcher(*inputs), "op": lambda: op(*inputs),
                             "torch": lambda: theirs(*inputs)})
    return {
        "kernel": name,
        "sizes": " ".join("x".join(map(str, t.shape)) or "()" if isinstance(t, torch.Tensor) else repr(t)
                          for t in inputs),
        "dtypes": ",".join(f"{k}={v}" for k, v in binding.items()),
        "generated_us": round(times["generated"], 2),
        "custom_op_us": round(times["op"], 2),
        "torch_us": round(times["torch"], 2),
        "torch": label,
        "ratio": round(times["torch"] / times["generated"], 3),
    }


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "results"
    wanted = set(sys.argv[2:])
    device = torch.cuda.get_device_name().split()[1].lower()  # "h100"
    path = out / f"launch_overhead_{device}.csv"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec_path in sorted((ROOT / "specs").glob("*.tile")):
        if (wanted and spec_path.stem not in wanted) or spec_path.stem == "grayscale":
            continue
        try:
            result = row(spec_path)
        except Exception as error:  # a spec whose tiny inputs a launcher refuses: say so, go on
            print(f"{spec_path.stem}: skipped: {type(error).__name__}: {str(error)[:160]}", flush=True)
            continue
        rows.append(result)
        print(f"{result['kernel']:34s} {result['sizes']:28s} generated {result['generated_us']:7.2f} us  "
              f"op {result['custom_op_us']:7.2f} us  {result['torch']} {result['torch_us']:7.2f} us  "
              f"ratio {result['ratio']:.2f}", flush=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        handle.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
                     f"triton {__import__('triton').__version__}; microseconds per call on the host, "
                     f"{CALLS} calls back to back, median of {ROUNDS} rounds\n")
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
