"""Forward + backward through tilegen kernels against torch eager, on the GPU (issue 33's table).

Each case builds its inputs (leaves that require grad), runs one training step's worth of work,
``y = f(inputs); y.backward(dy)``, through the generated function (whose autograd formula is the
backward spec, ``backward ..._backward`` in the forward spec) and through torch's own ops, and
times both eager (``triton.testing.do_bench``, launches back to back, L2 flushed, gradients reset
to None each call; median of 5 interleaved rounds) and replayed in a CUDA graph
(``do_bench_cudagraph``, where capture works). It checks the gradients against torch's first.

``python benchmarks/backward.py OUT_DIR [OP ...]`` appends one row per case to
``OUT_DIR/backward.csv`` (op, shape, dtype, tilegen ms, torch ms, ratios, max gradient error);
``python benchmarks/backward.py OUT_DIR products`` times matmul's two backward products alone
against cuBLAS (``OUT_DIR/matmul_backward.csv``); ``python benchmarks/backward.py plot CSV`` draws a
backward.csv's ratios beside it (``.png``).
Shapes are Llama-3-8B's: 4096 tokens of hidden 4096 (norms, softmax rows; the ``_16384`` rows: four
sequences of 4096 tokens, where the step's kernels outlast its host work; the ``_<m>x<n>`` norms,
bf16 rows of a small model's widths), MLP width 14336
(SwiGLU, GeGLU), 32 query and 8 key heads of 128 (rope), a vocabulary of 128256 (cross-entropy:
f32, bf16 logits against torch on ``logits.float()``, and with ignore_index and label smoothing; fused
with the head's matmul over 8192 tokens of hidden 4096, ``linear_cross_entropy``), and the generalized
Jensen-Shannon divergence and the KL divergence of bf16 log-probabilities (``jsd``, ``kl_div_rows``;
the student's gradient) against torch in float32, and dropout (p = 0.1, bf16 and f32, over an MLP
activation of 4096 x 14336) against ``F.dropout``, its gradient checked against the spec's reference.
Attention (bf16, FlashAttention-2's backward as three specs) at 4 x 32 heads of 64 and 4 x 16 heads
of 128 over 4096 tokens (tutorial 06's), causal and not, against SDPA's flash backend and its
cuDNN backend, each its own row; matmul_fast (bf16; the backward's da = dc b^T and db = a^T dc)
against cuBLAS (torch's @) at squares of 2048-8192 and Llama's MLP projection 4096 x 14336 x 4096.
Each row also gives the step's peak memory above what its inputs hold (MiB). The row
``cross_entropy_inplace_lm_head`` (memory only) is cross-entropy with ``inplace_backward=True`` on
logits from a language model's head (``h @ w.T``), its peak above the inputs and the logits.
"""

import csv
import functools
import gc
import statistics
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tilegen.nn.linear_cross_entropy import linear_cross_entropy  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5


def _module(name):
    return load_module(ROOT / "generated" / f"{name}.py")


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _cases():
    """op -> (dtype, shape, make inputs, tilegen step output, torch step output)."""
    softmax, log_softmax = _module("softmax"), _module("log_softmax")
    rms, layer = _module("rms_norm"), _module("layer_norm")
    swiglu, geglu, rope = _module("swiglu"), _module("geglu"), _module("rope")
    entropy, jsd, kl_div = _module("cross_entropy"), _module("jsd"), _module("kl_div_rows")
    dropout = _module("dropout")
    conv2d, conv2d_gemm = _module("conv2d"), _module("conv2d_implicit_gemm")
    depthwise, conv1d = _module("conv2d_depthwise"), _module("conv1d")

    def rows(m, n, dtype):
        return lambda: (torch.randn(m, n, device="cuda", dtype=dtype),)

    def norm(m, n, bias, dtype=torch.float16):
        def make():
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w = (1 + torch.randn(n, device="cuda") / 4).to(dtype)
            return (x, w, (torch.randn(n, device="cuda") / 4).to(dtype)) if bias else (x, w)
        return make

    def pair(m, n):
        return lambda: tuple(torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def rotary(s, heads, kv_heads, d):
        def make():
            q = torch.randn(1, heads, s, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kv_heads, s, d, device="cuda", dtype=torch.bfloat16)
            angle = torch.randn(s, d // 2, device="cuda")
            angle = torch.cat([angle, angle], dim=-1)
            return q, k, angle.cos().bfloat16()[None], angle.sin().bfloat16()[None]  # [1, S, D]: one sequence's tables
        return make

    def classes(m, v, dtype=torch.float32, ignored=0.0):
        """Logits and targets, a fraction ``ignored`` of them -100 (padding, ignore_index)."""
        def make():
            target = torch.randint(0, v, (m,), device="cuda")
            target[torch.rand(m, device="cuda") < ignored] = -100
            return (torch.randn(m, v, device="cuda") * 3).to(dtype), target
        return make

    def head(n, hidden, v, dtype=torch.bfloat16):
        """A language model's last hidden states [n, hidden], its head's weight [v, hidden] and
        the targets, a quarter of them -100."""
        def make():
            target = torch.randint(0, v, (n,), device="cuda")
            target[torch.rand(n, device="cuda") < 0.25] = -100
            return (torch.randn(n, hidden, device="cuda", dtype=dtype),
                    (torch.randn(v, hidden, device="cuda") / hidden**0.5).to(dtype), target)
        return make

    def log_probs(m, v):
        return lambda: tuple(torch.log_softmax(torch.randn(m, v, device="cuda") * 2, 1).bfloat16() for _ in range(2))

    def torch_jsd(x, y, beta=0.5):  # Liger-Kernel's definition, in float32, per row
        x, y = x.float(), y.float()
        m = beta * y.exp() + (1 - beta) * x.exp()
        return (beta * y.exp() * (y - m.log()) + (1 - beta) * x.exp() * (x - m.log())).sum(1)

    def heads(b, h, s, d):
        return lambda: tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def sdpa(backend, causal):
        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.125)
        return run

    def matrices(m, n, k):
        return lambda: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                        torch.randn(k, n, device="cuda", dtype=torch.bfloat16))

    def ours(function):
        return lambda q, k, v: function(q, k, v, 0.125)[0]  # o (the rows' log-sum-exp: the second output)

    def images(x_shape, w_shape, dtype):
        """An input, a weight (fan-in scaled) and a bias for a convolution."""
        def make():
            fan_in = w_shape[1] * w_shape[2] * (w_shape[3] if len(w_shape) > 3 else 1)
            return (torch.randn(x_shape, device="cuda", dtype=dtype),
                    (torch.randn(w_shape, device="cuda") / fan_in**0.5).to(dtype),
                    torch.randn(w_shape[0], device="cuda", dtype=dtype))
        return make

    def convolutions(name, dtype):
        """A ResNet stage's 3x3 convolution (32 images of 64 channels, 56 x 56, padding 1) through
        conv2d and conv2d_implicit_gemm, MobileNet's depthwise 3x3 (32 x 256 channels, 28 x 28) and
        a 1D convolution over a sequence (16 x 256 channels, 4096 steps, width 3)."""
        square = (1, 1, 1, 1, 1, 1)
        return {
            f"conv2d_{name}": (name, (32, 64, 56, 56, 64, 3, 3), images((32, 64, 56, 56), (64, 64, 3, 3), dtype),
                               lambda x, w, b: conv2d.conv2d(x, w, b, *square),
                               lambda x, w, b: F.conv2d(x, w, b, padding=1)),
            f"conv2d_implicit_gemm_{name}": (
                name, (32, 64, 56, 56, 64, 3, 3), images((32, 64, 56, 56), (64, 64, 3, 3), dtype),
                lambda x, w, b: conv2d_gemm.conv2d_implicit_gemm(x, w, b, *square),
                lambda x, w, b: F.conv2d(x, w, b, padding=1)),
            f"conv2d_depthwise_{name}": (
                name, (32, 256, 28, 28, 3, 3), images((32, 256, 28, 28), (256, 1, 3, 3), dtype),
                lambda x, w, b: depthwise.conv2d_depthwise(x, w, b, *square),
                lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=256)),
            f"conv1d_{name}": (name, (16, 256, 4096, 256, 3), images((16, 256, 4096), (256, 256, 3), dtype),
                               lambda x, w, b: conv1d.conv1d(x, w, b, 1, 1),
                               lambda x, w, b: F.conv1d(x, w, b, padding=1)),
        }

    attention = {}
    for causal in (False, True):
        name = "attention_causal" if causal else "attention"
        function = getattr(_module(name), name)
        for d in (64, 128):
            for backend, label in ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
                attention[f"{name}_d{d}_vs_{label}"] = (
                    "bf16", (4, 32 if d == 64 else 16, 4096, d), heads(4, 32 if d == 64 else 16, 4096, d),
                    ours(function), sdpa(backend, causal))
    matmul = _module("matmul_fast")
    products = {f"matmul_{n}": ("bf16", (n, n, n), matrices(n, n, n), lambda a, b: matmul.matmul_fast(a, b),
                                lambda a, b: a @ b) for n in (2048, 4096, 8192)}
    products["matmul_4096x14336x4096"] = ("bf16", (4096, 14336, 4096), matrices(4096, 14336, 4096),
                                          lambda a, b: matmul.matmul_fast(a, b), lambda a, b: a @ b)

    def row_ops(m, suffix=""):
        """softmax, log_softmax, rms_norm and layer_norm over ``m`` rows of 4096."""
        return {
            f"softmax{suffix}": ("f32", (m, 4096), rows(m, 4096, torch.float32),
                                 lambda x: softmax.softmax(x), lambda x: torch.softmax(x, dim=1)),
            f"log_softmax{suffix}": ("f32", (m, 4096), rows(m, 4096, torch.float32),
                                     lambda x: log_softmax.log_softmax(x), lambda x: torch.log_softmax(x, dim=1)),
            f"rms_norm{suffix}": ("f16", (m, 4096), norm(m, 4096, False), lambda x, w: rms.rms_norm(x, w, 1e-6),
                                  lambda x, w: F.rms_norm(x, (x.shape[1],), w, 1e-6)),
            f"layer_norm{suffix}": ("f16", (m, 4096), norm(m, 4096, True),
                                    lambda x, w, b: layer.layer_norm(x, w, b, 1e-5)[0],
                                    lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, 1e-5)),
        }

    def narrow_norms():
        """rms_norm and layer_norm in bf16 over rows narrower than 2048 (a small model's 384, 768 and
        1024), where their backwards' persistent grids run several programs per SM."""
        return {f"{name}_{m}x{n}": ("bf16", (m, n), norm(m, n, name == "layer_norm", torch.bfloat16), ours, theirs)
                for m, n in ((8192, 384), (32768, 768), (16384, 1024))
                for name, ours, theirs in (
                    ("rms_norm", lambda x, w: rms.rms_norm(x, w, 1e-6),
                     lambda x, w: F.rms_norm(x, (x.shape[1],), w, 1e-6)),
                    ("layer_norm", lambda x, w, b: layer.layer_norm(x, w, b, 1e-5)[0],
                     lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, 1e-5)))}

    return {
        "cross_entropy": ("f32", (4096, 128256), classes(4096, 128256),
                          lambda x, t: entropy.cross_entropy(x, t)[0],
                          lambda x, t: F.cross_entropy(x, t, reduction="none")),
        # bf16 logits read into float32 by the kernel, against torch on logits.float() (Hugging Face's call)
        "cross_entropy_bf16": ("bf16", (4096, 128256), classes(4096, 128256, torch.bfloat16),
                               lambda x, t: entropy.cross_entropy(x, t)[0],
                               lambda x, t: F.cross_entropy(x.float(), t, reduction="none")),
        # a quarter of the targets padding (ignore_index) and label smoothing 0.1
        "cross_entropy_options": ("f32", (4096, 128256), classes(4096, 128256, ignored=0.25),
                                  lambda x, t: entropy.cross_entropy(x, t, label_smoothing=0.1)[0],
                                  lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1)),
        # the head's matmul and the loss in chunks of rows (tilegen.nn.linear_cross_entropy) against
        # F.cross_entropy((h @ w.T).float(), t): Llama-3-8B's head over 8192 tokens
        "linear_cross_entropy": ("bf16", (8192, 4096, 128256), head(8192, 4096, 128256),
                                 lambda h, w, t: linear_cross_entropy(h, w, t),
                                 lambda h, w, t: F.cross_entropy((h @ w.T).float(), t)),
        # distillation's loss: a student's and a teacher's log-probabilities over Llama 3's vocabulary
        "jsd": ("bf16", (4096, 128256), log_probs(4096, 128256), lambda x, y: jsd.jsd(x, y, 0.5), torch_jsd),
        "kl_div_rows": ("bf16", (4096, 128256), log_probs(4096, 128256), lambda x, y: kl_div.kl_div_rows(x, y, 1),
                        lambda x, y: F.kl_div(x.float(), y.float(), reduction="none", log_target=True).sum(1)),
        **row_ops(4096),
        # dropout at p = 0.1 over an MLP activation: tilegen draws its mask again in the backward
        # (Philox, Triton tutorial 04), torch stores it; the masks differ, so the gradients are
        # checked against the spec's torch reference (the same Philox numbers) instead of F.dropout
        **{f"dropout_{name}": (name, (4096, 14336), rows(4096, 14336, dtype),
                               lambda x: dropout.dropout(x, 0.1, 1234), lambda x: F.dropout(x, 0.1),
                               lambda x: dropout.reference(x, 0.1, 1234))
           for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32))},
        "swiglu": ("bf16", (4096, 14336), pair(4096, 14336),
                   lambda a, b: swiglu.swiglu(a, b), lambda a, b: F.silu(a) * b),
        "geglu": ("bf16", (4096, 14336), pair(4096, 14336),
                  lambda a, b: geglu.geglu(a, b), lambda a, b: F.gelu(a, approximate="tanh") * b),
        "rope": ("bf16", (4096, 32, 8, 128), rotary(4096, 32, 8, 128),
                 lambda q, k, c, s: torch.cat([t.flatten() for t in rope.rope(q, k, c, s)]),
                 lambda q, k, c, s: torch.cat([(q * c + _rotate_half(q) * s).flatten(),
                                               (k * c + _rotate_half(k) * s).flatten()])),
        # four sequences of 4096 tokens: the steps where the GPU, not the host, is the bound (at 4096
        # x 4096 a step's kernels take 0.07-0.12 ms, about what either side's host spends on it)
        **row_ops(16384, "_16384"),
        **narrow_norms(),
        **attention,
        **products,
        **convolutions("f32", torch.float32),
        **convolutions("bf16", torch.bfloat16),
    }


#: How many of each case's first inputs get a gradient (the rest: rope's cos and sin).
LEAVES = {"cross_entropy": 1, "dropout": 1, "linear_cross_entropy": 2, "jsd": 1, "kl_div_rows": 1, "softmax": 1,
          "log_softmax": 1, "rms_norm": 2, "layer_norm": 3, "swiglu": 2, "geglu": 2, "rope": 2, "attention": 3,
          "matmul": 2, "conv2d": 3, "conv1d": 3}


def _leaves(op):
    """LEAVES of the longest name that is ``op`` or begins it (``rms_norm_16384``: rms_norm's)."""
    names = [name for name in LEAVES if op == name or op.startswith(name + "_")]
    return LEAVES[max(names, key=len)] if names else 0


def _step(fn, inputs, dy):
    def run():
        fn(*inputs).backward(dy)
    return run


def case(op, dtype, shape, make, ours, theirs, check=None):
    """One row: ``ours`` and ``theirs`` timed forward + backward on inputs from ``make``; the
    gradients checked against ``check``'s (default ``theirs``: the same function, computed by torch)."""
    base = make()
    with torch.no_grad():
        dy = torch.randn_like(theirs(*base))
    functions = {"tilegen": ours, "torch": theirs}
    for fn in functions.values():  # the first call tunes (its trials' buffers and CUDA graphs freed below)
        fn(*[t.clone().requires_grad_(i < _leaves(op)) for i, t in enumerate(base)]).backward(dy)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    peaks = {}  # each on inputs of its own
    for name, fn in functions.items():
        inputs = [t.clone().requires_grad_(i < _leaves(op)) for i, t in enumerate(base)]
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(*inputs).backward(dy)
        torch.cuda.synchronize()
        peaks[name] = (torch.cuda.max_memory_allocated() - before) / 2**20  # MiB above the inputs
        del inputs
    mine = [t.clone().requires_grad_(i < _leaves(op)) for i, t in enumerate(base)]
    ref = [t.clone().requires_grad_(i < _leaves(op)) for i, t in enumerate(base)]
    ours(*mine).backward(dy)
    (check or theirs)(*ref).backward(dy)
    error = max((a.grad.float() - b.grad.float()).abs().max().item()
                for a, b in zip(mine, ref, strict=True) if a.grad is not None)
    grads = [t for t in mine + ref if t.requires_grad]
    steps = {"tilegen": _step(ours, mine, dy), "torch": _step(theirs, ref, dy)}
    eager = {name: [] for name in steps}
    graph = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, run in steps.items():
            eager[name].append(triton.testing.do_bench(run, grad_to_none=grads, warmup=10, rep=100))
    for name, run in steps.items():
        try:
            graph[name].append(triton.testing.do_bench_cudagraph(run, rep=100, grad_to_none=grads))
        except Exception as failure:  # autograd's backward cannot always be captured
            print(f"{op}: no CUDA graph for {name}: {type(failure).__name__}: {str(failure)[:120]}", flush=True)
    e = {k: statistics.median(v) for k, v in eager.items()}
    g = {k: statistics.median(v) if v else float("nan") for k, v in graph.items()}
    return {"op": op, "shape": "x".join(map(str, shape)), "dtype": dtype,
            "tilegen_ms": e["tilegen"], "torch_ms": e["torch"], "ratio_eager": e["torch"] / e["tilegen"],
            "tilegen_graph_ms": g["tilegen"], "torch_graph_ms": g["torch"],
            "ratio_graph": g["torch"] / g["tilegen"], "max_grad_error": error,
            "tilegen_peak_MiB": peaks["tilegen"], "torch_peak_MiB": peaks["torch"]}


def inplace_memory(m: int = 4096, v: int = 128256, d: int = 256) -> dict:
    """cross_entropy(..., inplace_backward=True) where a language model's head makes the logits
    (``logits = h @ w.T``, f32, hidden ``d``): the peak memory of one cross-entropy forward and the
    backward through it into the head, above the inputs and the logits (which both sides hold).
    The dlogits go into the logits' storage, so what remains is the head's gradients (dh, dw), which
    torch allocates too. Not timed: the kernels are the leaf row's, into another pointer."""
    entropy = _module("cross_entropy")
    h = torch.randn(m, d, device="cuda", requires_grad=True)
    w = (torch.randn(v, d, device="cuda") / d**0.5).requires_grad_()
    t = torch.randint(0, v, (m,), device="cuda")
    dy = torch.randn(m, device="cuda")
    functions = {"tilegen": lambda x: entropy.cross_entropy(x, t, inplace_backward=True)[0],
                 "torch": lambda x: F.cross_entropy(x, t, reduction="none")}
    for fn in functions.values():  # the first call tunes
        fn(h @ w.T).backward(dy)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    peaks, grads = {}, {}
    for name, fn in functions.items():
        h.grad = w.grad = None
        logits = h @ w.T
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(logits).backward(dy)
        torch.cuda.synchronize()
        peaks[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
        grads[name] = (h.grad.clone(), w.grad.clone())
        del logits
    error = max((a - b).abs().max().item() for a, b in zip(grads["tilegen"], grads["torch"], strict=True))
    nan = float("nan")
    return {"op": "cross_entropy_inplace_lm_head", "shape": f"{m}x{v}", "dtype": "f32",
            "tilegen_ms": nan, "torch_ms": nan, "ratio_eager": nan, "tilegen_graph_ms": nan, "torch_graph_ms": nan,
            "ratio_graph": nan, "max_grad_error": error, "tilegen_peak_MiB": peaks["tilegen"],
            "torch_peak_MiB": peaks["torch"]}


def products(out: Path) -> None:
    """The two products of matmul_fast's backward alone, da = dc b^T (matmul_fast_backward_da) and
    db = a^T dc (matmul_fast_backward_db), against cuBLAS on the same transposed views (torch's
    ``@``), bf16, eager and graphed; rows appended to ``out/matmul_backward.csv``."""
    da, db = _module("matmul_fast_backward_da"), _module("matmul_fast_backward_db")
    path = out / "matmul_backward.csv"
    new = not path.exists()
    with open(path, "a", newline="") as f:
        if new:
            f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
            f.write("# ratio = cuBLAS ms / tilegen ms; eager: do_bench (median of 5); graph: do_bench_cudagraph\n")
        writer = csv.DictWriter(f, fieldnames=["product", "M", "N", "K", "dtype", "tilegen_ms", "cublas_ms",
                                               "ratio_eager", "tilegen_graph_ms", "cublas_graph_ms", "ratio_graph",
                                               "max_error"])
        if new:
            writer.writeheader()
        for m, n, k in [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (3000, 3000, 3000),
                        (4096, 14336, 4096), (4096, 4096, 14336)]:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            dc = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            partial = functools.partial
            pairs = (("da = dc b^T", partial(da.matmul_fast_backward_da, dc, b), partial(torch.mm, dc, b.T)),
                     ("db = a^T dc", partial(db.matmul_fast_backward_db, a, dc), partial(torch.mm, a.T, dc)))
            for product, ours, theirs in pairs:
                error = (ours().float() - theirs().float()).abs().max().item()
                eager = {name: statistics.median(triton.testing.do_bench(fn, warmup=10, rep=100) for _ in range(ROUNDS))
                         for name, fn in (("tilegen", ours), ("cublas", theirs))}
                graph = {name: triton.testing.do_bench_cudagraph(fn, rep=100)
                         for name, fn in (("tilegen", ours), ("cublas", theirs))}
                row = {"product": product, "M": m, "N": n, "K": k, "dtype": "bf16",
                       "tilegen_ms": eager["tilegen"], "cublas_ms": eager["cublas"],
                       "ratio_eager": eager["cublas"] / eager["tilegen"], "tilegen_graph_ms": graph["tilegen"],
                       "cublas_graph_ms": graph["cublas"], "ratio_graph": graph["cublas"] / graph["tilegen"],
                       "max_error": error}
                writer.writerow(row)
                f.flush()
                print({key: (f"{v:.4g}" if isinstance(v, float) else v) for key, v in row.items()}, flush=True)


def main(out: Path, ops: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    path = out / "backward.csv"
    new = not path.exists()
    with open(path, "a", newline="") as f:
        if new:
            f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
            f.write("# forward + backward (y = f(x); y.backward(dy)); ratio = torch ms / tilegen ms; "
                    "eager: do_bench, L2 flushed; graph: do_bench_cudagraph\n")
        writer = None
        cases = {op: functools.partial(case, op, *spec) for op, spec in _cases().items()}
        cases["cross_entropy_inplace_lm_head"] = inplace_memory
        for op, run in cases.items():
            if ops and op not in ops:
                continue
            try:
                row = run()
            except Exception:  # one case that fails (out of memory, a compile error) ends no run
                print(f"FAILED {op}:", file=sys.stderr)
                traceback.print_exc()
                torch.cuda.empty_cache()
                continue
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                if new:
                    writer.writeheader()
            writer.writerow(row)
            f.flush()
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            torch.cuda.empty_cache()


def plot(path: Path) -> Path:
    """``path`` (a backward.csv) as horizontal bars, one pair per row: torch ms / tilegen ms eager
    and in CUDA graphs, with 1.0 marked; written beside it as ``.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    rows = [r for r in rows if r["ratio_eager"] != "nan"]  # not the memory-only rows
    labels = [f"{r['op']} ({r['dtype']}, {r['shape']})" for r in rows]
    figure, axes = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    ys = range(len(rows))
    axes.barh([y + 0.2 for y in ys], [float(r["ratio_graph"]) for r in rows], height=0.4, label="CUDA graphs")
    axes.barh([y - 0.2 for y in ys], [float(r["ratio_eager"]) for r in rows], height=0.4, label="eager")
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_yticks(list(ys), labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("torch ms / tilegen ms, forward + backward (higher: tilegen faster)")
    axes.set_title(lines[0].lstrip("# "), fontsize=9)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["plot"]:
        print(plot(Path(sys.argv[2])))
    elif sys.argv[2:] == ["products"]:
        Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
        products(Path(sys.argv[1]))
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
