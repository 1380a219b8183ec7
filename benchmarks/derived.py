"""Derived backwards against hand-written ones and torch eager, forward + backward, on the GPU
(issue 36's table).

For each spec with a hand-written backward whose forward the derivation covers (softmax,
log_softmax, rms_norm, layer_norm, swiglu, geglu, rope, matmul_fast: its two products), the spec
is built again without its ``backward`` line and under another kernel name (``softmax_derived``),
so that the build derives its backward (``softmax_derived_backward``, :mod:`tilegen.grad`), into a
temporary folder. One
step, ``y = f(inputs); y.backward(dy)``, runs through the committed module (hand-written
backward), the derived one and torch's ops; each is timed eager (``triton.testing.do_bench``,
launches back to back, gradients reset each call; median of 5 interleaved rounds) and in a CUDA
graph (``do_bench_cudagraph``). Gradients are checked against torch's first (max abs error).
Kernels that only have a derived backward (the KernelBench losses and norms, fused_add_rms_norm)
are timed against torch alone (batch_norm and group_norm at KernelBench's 16 x 64 x 256 x 256).
Shapes are backward.py's (Llama-3-8B: 4096 tokens of 4096, MLP 14336) and a small one (4096 x 1024,
8192 x 512 rows).

``python benchmarks/derived.py OUT_DIR [OP ...]`` writes ``OUT_DIR/derived.csv`` (op, shape, dtype,
hand-written / derived / torch ms eager and graphed, derived-vs-hand-written and
derived-vs-torch ratios, max gradient errors).
"""

import csv
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen.compiler import compile_spec  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
BUILD = Path(tempfile.mkdtemp(prefix="tilegen_derived_"))


def _committed(name):
    return load_module(ROOT / "generated" / f"{name}.py")


def _derived(file: str):
    """The forward of ``specs/<file>.tile`` built as ``<kernel>_derived`` without its backward line,
    with the backward the build derives, loaded from :data:`BUILD`; the function."""
    source = (ROOT / "specs" / f"{file}.tile").read_text(encoding="utf-8")
    lines = [line for line in source.split("\n") if not line.strip().startswith("backward ")]
    kernel = next(line.split()[1] for line in lines if line.startswith("kernel "))
    text = "\n".join(lines).replace(f"kernel {kernel}\n", f"kernel {kernel}_derived\n")
    generated = compile_spec(text, f"specs/{file}_derived.tile")
    assert generated.derived, generated.note
    (BUILD / f"{generated.kernel}.py").write_text(generated.source, encoding="utf-8")
    for module in generated.derived:
        (BUILD / f"{module.kernel}.py").write_text(module.source, encoding="utf-8")
    return getattr(load_module(BUILD / f"{generated.kernel}.py"), f"{kernel}_derived")


def _inputs():
    def rows(m, n, dtype):
        return lambda: (torch.randn(m, n, device="cuda", dtype=dtype),)

    def norm(m, n, bias):
        def make():
            x = torch.randn(m, n, device="cuda", dtype=torch.float16)
            w = (1 + torch.randn(n, device="cuda") / 4).half()
            return (x, w, (torch.randn(n, device="cuda") / 4).half()) if bias else (x, w)
        return make

    def pair(m, n, dtype=torch.bfloat16):
        return lambda: tuple(torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))

    return rows, norm, pair


def _cases():
    """op -> (dtype, shape, make inputs, leaves, {name: step output})."""
    rows, norm, pair = _inputs()
    softmax, log_softmax = _committed("softmax"), _committed("log_softmax")
    rms, layer = _committed("rms_norm"), _committed("layer_norm")
    swiglu, geglu = _committed("swiglu"), _committed("geglu")
    d = {f: _derived(f) for f in ("softmax", "log_softmax", "rms_norm", "layer_norm", "swiglu", "geglu", "rope",
                                  "matmul_fast")}
    matmul = _committed("matmul_fast")

    def matrices(m_, n_, k_):
        return lambda: (torch.randn(m_, k_, device="cuda", dtype=torch.bfloat16),
                        torch.randn(k_, n_, device="cuda", dtype=torch.bfloat16))
    rope = _committed("rope")

    def rotary(s, heads, kv_heads, dim):
        def make():
            q = torch.randn(1, heads, s, dim, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kv_heads, s, dim, device="cuda", dtype=torch.bfloat16)
            angle = torch.randn(s, dim // 2, device="cuda")
            angle = torch.cat([angle, angle], dim=-1)
            return q, k, angle.cos().bfloat16()[None], angle.sin().bfloat16()[None]  # [1, S, D]: one sequence's tables
        return make

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cases = {}
    for m, n in ((4096, 4096), (8192, 512)):
        cases[f"softmax_{m}x{n}"] = ("f32", (m, n), rows(m, n, torch.float32), 1, {
            "hand": softmax.softmax, "derived": d["softmax"], "torch": lambda x: torch.softmax(x, dim=1)})
        cases[f"log_softmax_{m}x{n}"] = ("f32", (m, n), rows(m, n, torch.float32), 1, {
            "hand": log_softmax.log_softmax, "derived": d["log_softmax"],
            "torch": lambda x: torch.log_softmax(x, dim=1)})
        cases[f"rms_norm_{m}x{n}"] = ("f16", (m, n), norm(m, n, False), 2, {
            "hand": lambda x, w: rms.rms_norm(x, w, 1e-6), "derived": lambda x, w: d["rms_norm"](x, w, 1e-6),
            "torch": lambda x, w: F.rms_norm(x, (x.shape[1],), w, 1e-6)})
        cases[f"layer_norm_{m}x{n}"] = ("f16", (m, n), norm(m, n, True), 3, {
            "hand": lambda x, w, b: layer.layer_norm(x, w, b, 1e-5)[0],
            "derived": lambda x, w, b: d["layer_norm"](x, w, b, 1e-5)[0],
            "torch": lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, 1e-5)})
    for m, n in ((4096, 14336), (4096, 1024)):
        cases[f"swiglu_{m}x{n}"] = ("bf16", (m, n), pair(m, n), 2, {
            "hand": swiglu.swiglu, "derived": d["swiglu"], "torch": lambda a, b: F.silu(a) * b})
        cases[f"geglu_{m}x{n}"] = ("bf16", (m, n), pair(m, n), 2, {
            "hand": geglu.geglu, "derived": d["geglu"], "torch": lambda a, b: F.gelu(a, approximate="tanh") * b})
    cases["rope_4096x32x8x128"] = ("bf16", (4096, 32, 8, 128), rotary(4096, 32, 8, 128), 2, {
        "hand": lambda q, k, c, s: torch.cat([t.flatten() for t in rope.rope(q, k, c, s)]),
        "derived": lambda q, k, c, s: torch.cat([t.flatten() for t in d["rope"](q, k, c, s)]),
        "torch": lambda q, k, c, s: torch.cat([(q * c + rotate_half(q) * s).flatten(),
                                               (k * c + rotate_half(k) * s).flatten()])})
    for size in (2048, 4096):
        cases[f"matmul_fast_{size}"] = ("bf16", (size, size, size), matrices(size, size, size), 2, {
            "hand": matmul.matmul_fast, "derived": d["matmul_fast"], "torch": lambda a, b: a @ b})
    # derived only: against torch
    batch, group = _committed("batch_norm"), _committed("group_norm")

    def image(b, c, h, w):
        def make():
            return (torch.randn(b, c, h, w, device="cuda"), 1 + torch.randn(c, device="cuda") / 4,
                    torch.randn(c, device="cuda") / 4)
        return make

    cases["batch_norm_16x64x256x256"] = ("f32", (16, 64, 256, 256), image(16, 64, 256, 256), 3, {
        "derived": lambda x, w, b: batch.batch_norm(x, w, b, 1e-5),
        "torch": lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)})
    cases["group_norm_16x64x256x256_g8"] = ("f32", (16, 64, 256, 256), image(16, 64, 256, 256), 3, {
        "derived": lambda x, w, b: group.group_norm(x, w, b, 8, 1e-5),
        "torch": lambda x, w, b: F.group_norm(x, 8, w, b, 1e-5)})
    mse, huber, l1 = _committed("mse_loss"), _committed("huber_loss"), _committed("l1_norm")
    fused = _committed("fused_add_rms_norm")
    cases["mse_loss_4096x4096"] = ("f32", (4096, 4096), pair(4096, 4096, torch.float32), 2, {
        "derived": mse.mse_loss, "torch": F.mse_loss})
    cases["huber_loss_4096x4096"] = ("f32", (4096, 4096), pair(4096, 4096, torch.float32), 2, {
        "derived": huber.huber_loss, "torch": F.huber_loss})
    cases["l1_norm_4096x4096"] = ("f32", (4096, 4096), rows(4096, 4096, torch.float32), 1, {
        "derived": l1.l1_norm, "torch": lambda x: x / torch.mean(torch.abs(x), dim=1, keepdim=True)})

    def added(x, r, w):
        s = (x.float() + r.float()).to(x.dtype)
        return torch.cat([F.rms_norm(s, (s.shape[1],), w, 1e-6).flatten(), s.flatten()])

    cases["fused_add_rms_norm_4096x4096"] = ("f16", (4096, 4096), lambda: (*pair(4096, 4096, torch.float16)(),
                                             (1 + torch.randn(4096, device="cuda") / 4).half()), 3, {
        "derived": lambda x, r, w: torch.cat([t.flatten() for t in fused.fused_add_rms_norm(x, r, w, 1e-6)]),
        "torch": added})
    return cases


def case(op, dtype, shape, make, leaves, functions):
    base = make()
    inputs = {name: [t.clone().requires_grad_(i < leaves) for i, t in enumerate(base)] for name in functions}
    dy = torch.randn_like(functions["torch"](*base))
    for name, fn in functions.items():
        fn(*inputs[name]).backward(dy)
    errors = {name: max((a.grad.float() - b.grad.float()).abs().max().item()
                        for a, b in zip(inputs[name], inputs["torch"], strict=True) if a.grad is not None)
              for name in functions if name != "torch"}
    grads = [t for ts in inputs.values() for t in ts if t.requires_grad]

    def step(name):
        def run():
            functions[name](*inputs[name]).backward(dy)
        return run

    eager = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name in functions:
            eager[name].append(triton.testing.do_bench(step(name), grad_to_none=grads, warmup=10, rep=100))
    graph = {}
    for name in functions:
        try:
            graph[name] = triton.testing.do_bench_cudagraph(step(name), rep=100, grad_to_none=grads)
        except Exception as failure:  # autograd's backward cannot always be captured
            print(f"{op}: no CUDA graph for {name}: {type(failure).__name__}: {str(failure)[:120]}", flush=True)
            graph[name] = float("nan")
    e = {k: statistics.median(v) for k, v in eager.items()}
    nan = float("nan")
    row = {"op": op, "shape": "x".join(map(str, shape)), "dtype": dtype,
           "hand_ms": e.get("hand", nan), "derived_ms": e["derived"], "torch_ms": e["torch"],
           "derived_vs_hand_eager": e.get("hand", nan) / e["derived"],
           "derived_vs_torch_eager": e["torch"] / e["derived"],
           "hand_graph_ms": graph.get("hand", nan), "derived_graph_ms": graph["derived"],
           "torch_graph_ms": graph["torch"], "derived_vs_hand_graph": graph.get("hand", nan) / graph["derived"],
           "derived_vs_torch_graph": graph["torch"] / graph["derived"],
           "hand_grad_error": errors.get("hand", nan), "derived_grad_error": errors["derived"]}
    return row


def main(out: Path, ops: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    path = out / "derived.csv"
    with open(path, "w", newline="") as f:
        f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
        f.write("# forward + backward (y = f(x); y.backward(dy)); hand: the spec's hand-written backward; derived: "
                "the backward tilegen derives; ratio = other ms / derived ms; eager: do_bench (median of 5 "
                "rounds); graph: do_bench_cudagraph\n")
        writer = None
        for op, (dtype, shape, make, leaves, functions) in _cases().items():
            if ops and not any(op.startswith(o) for o in ops):
                continue
            row = case(op, dtype, shape, make, leaves, functions)
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            f.flush()
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
