"""GPU parity: every generated seed kernel against its hand-written seed kernel and reference.

Run on a CUDA machine from the repository root: ``python benchmarks/gpu_parity.py [DIR]
[--no-attention]`` (the attention cases, about 7 minutes, run on their own through
``benchmarks/attention_parity.py``; with them the whole run is longer than one 10-minute device call).
Prints one line per case (``torch.equal`` with the hand-written kernel, max error vs
``reference`` or torch) and a summary; exits 1 on any mismatch. Needs only torch and triton
(no lark/jinja): test specs (tests/specs/*.tile) must be built into DIR beforehand with
``tilegen build tests/specs -o DIR``. Autotuned launchers tune on the GPU; the hand-written
kernel then runs with the config the generated one picked (``best_config``).
"""

import os
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-parity-")  # tune here: best_config

import torch.nn.functional as F  # noqa: E402

from benchmarks import attention_parity, tail_parity  # noqa: E402
from tests.reference import add as ref_add  # noqa: E402
from tests.reference import copy as ref_copy  # noqa: E402
from tests.reference import grayscale as ref_grey  # noqa: E402
from tests.reference import matmul as ref_matmul  # noqa: E402
from tests.reference import matmul_intel as ref_intel  # noqa: E402
from tests.reference import matmul_tutorial as ref_tutorial  # noqa: E402
from tests.reference import swizzle as ref_swizzle  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

DEV = "cuda"
gen = {name: load_module(ROOT / "generated" / f"{name}.py") for name in
       ["copy", "rgb2grey", "matmul_naive", "matmul_grouped", "swizzle", "add", "add_single", "add_loop",
        "matmul_tutorial", "matmul_grouped_autotuned", "matmul_kmasked", "matmul_block_ptr", "matmul_epilogue",
        "matmul_f32", "matmul_batched"]}
ARGS = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
TEST_GEN = Path(ARGS[0]) if ARGS else None
ATTENTION = "--no-attention" not in sys.argv[1:]
if TEST_GEN is not None:
    gen.update({p.stem: load_module(p) for p in TEST_GEN.glob("*.py")})
rows = []


def record(kernel, shape, equal, err, tol):
    ok = bool(equal) and err <= tol
    rows.append(ok)
    print(f"{kernel:24s} {shape:28s} equal_handwritten={equal!s:5s} max_err_vs_reference={err:.3g} "
          f"{'PASS' if ok else 'FAIL'}")


torch.manual_seed(0)
for n in [1, 7, 33, 127, 1000, 98432, 2**24 + 3]:
    x = torch.randn(n, device=DEV)
    z = gen["copy"].copy(x)
    record("copy", f"N={n}", torch.equal(z, ref_copy.copy(x, bs=1024)),
           (z - gen["copy"].reference(x)).abs().max().item(), 0)

for h, w in [(1, 1), (7, 33), (33, 127), (1066, 1600), (8192, 8192)]:
    x = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, device=DEV)
    y = gen["rgb2grey"].rgb2grey(x, BH=32, BW=32)
    err = (y.int() - gen["rgb2grey"].reference(x).int()).abs().max().item()
    record("rgb2grey", f"3x{h}x{w}", torch.equal(y, ref_grey.rgb2grey(x, bs=(32, 32))), err, 1)

for kernel in ["matmul_naive", "matmul_grouped"]:
    for (m, k, n) in [(1, 64, 1), (7, 64, 33), (33, 128, 127), (127, 64, 5), (512, 512, 512), (1000, 1024, 777)]:
        for layout in ["nn", "tt"]:
            if layout[0] == "t":
                a = torch.randn(k, m, device=DEV, dtype=torch.float16).t()
            else:
                a = torch.randn(m, k, device=DEV, dtype=torch.float16)
            if layout[1] == "t":
                b = torch.randn(n, k, device=DEV, dtype=torch.float16).t()
            else:
                b = torch.randn(k, n, device=DEV, dtype=torch.float16)
            if kernel == "matmul_grouped":
                c = gen[kernel].matmul_grouped(a, b)
                hand = ref_matmul.grouped_matmul(a, b, bm=64, bn=64, bk=64, group_sz=8)
            else:
                c = gen[kernel].matmul_naive(a, b)
                hand = ref_matmul.naive_matmul(a, b, bm=64, bn=64, bk=64)
            expected = gen[kernel].reference(a, b).float()
            err = (c.float() - expected).abs().max().item()
            # fp16 output: within 5e-2 absolute plus 1e-2 relative (one or two fp16 ulps at |c| ~ 32).
            close = torch.allclose(c.float(), expected, atol=5e-2, rtol=1e-2)
            torch_err = (c.float() - torch.matmul(a, b).float()).abs().max().item()
            record(kernel, f"{m}x{k}x{n} {layout} (vs torch {torch_err:.3g})", torch.equal(c, hand) and close, err,
                   float("inf"))

x = torch.arange(20, device=DEV).view(5, 4)
z = gen["swizzle"].swizzle(x)
expected = torch.tensor([[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11], [12, 14, 16, 18], [13, 15, 17, 19]], device=DEV)
record("swizzle", "5x4 group 3", torch.equal(z, ref_swizzle.swizzle(x, group_sz=3)) and torch.equal(z, expected),
       (z - gen["swizzle"].reference(x)).abs().max().item(), 0)

# ---------------------------------------------------------------------------- issue 3 variants
for n in [1, 7, 1000, 98432, 2**24 + 3]:
    x, y = torch.randn(n, device=DEV), torch.randn(n, device=DEV)
    z = gen["add"].add(x, y)
    record("add", f"N={n}", torch.equal(z, ref_add.add(x, y, block_size=1024)), (z - (x + y)).abs().max().item(), 0)
    if n <= 98432:
        z = gen["add_loop"].add_loop(x, y)
        record("add_loop", f"N={n}", torch.equal(z, ref_add.add_fine_grained(x, y, block_size=1024)),
               (z - (x + y)).abs().max().item(), 0)
for n in [1, 16, 1024, 2**16]:
    x, y = torch.randn(n, device=DEV), torch.randn(n, device=DEV)
    z = gen["add_single"].add_single(x, y)
    record("add_single", f"N={n}", torch.equal(z, ref_add.add_single(x, y)), (z - (x + y)).abs().max().item(), 0)


def same_names(kwargs):
    return dict(kwargs)


def lecture_names(kwargs):
    return {"bm": kwargs["BM"], "bn": kwargs["BN"], "bk": kwargs["BK"], "group_sz": kwargs["GROUP_SIZE"]}


TUNED = [
    ("matmul_tutorial", ref_tutorial.matmul, same_names, 32),
    ("matmul_grouped_autotuned", ref_matmul.grouped_autotuned_matmul, lecture_names, 64),
    ("matmul_kmasked", ref_intel.matmul_dummy, same_names, 1),
]
for kernel, hand, names, k_multiple in TUNED:
    for (m, k, n) in [(512, 512, 512), (33, 128, 127), (1000, 1024, 777), (4096, 4096, 4096)]:
        if k % k_multiple:
            continue
        for activation in (["none", "leaky_relu"] if kernel == "matmul_tutorial" else [None]):
            a = torch.randn(m, k, device=DEV, dtype=torch.float16)
            b = torch.randn(n, k, device=DEV, dtype=torch.float16).t()
            kw = {"activation": activation} if activation else {}
            hand_kw = {"activation": activation} if activation else {}
            c = getattr(gen[kernel], kernel)(a, b, **kw)
            config = getattr(gen[kernel], f"{kernel}_kernel").best_config
            h = hand(a, b, config=names(config.kwargs), **hand_kw)
            expected = torch.matmul(a, b).float()
            if activation == "leaky_relu":
                expected = F.leaky_relu(expected, 0.01)
            err = (c.float() - expected).abs().max().item()
            close = torch.allclose(c.float(), expected, atol=5e-2, rtol=1e-2)
            label = f"{m}x{k}x{n} nt {activation or ''} cfg={config.kwargs} w{config.num_warps}s{config.num_stages}"
            record(kernel, label, torch.equal(c, h) and close, err, 5e-2 if m == 512 else float("inf"))

for (m, k, n) in [(1, 32, 1), (33, 128, 127), (512, 512, 512), (1000, 1024, 777)]:
    a = torch.randn(m, k, device=DEV, dtype=torch.float16)
    b = torch.randn(k, n, device=DEV, dtype=torch.float16)
    c = gen["matmul_block_ptr"].matmul_block_ptr(a, b)
    err = (c - gen["matmul_block_ptr"].reference(a, b)).abs().max().item()
    record("matmul_block_ptr", f"{m}x{k}x{n}", torch.equal(c, ref_intel.matmul_block_ptr(a, b)), err, 1e-2)

for (m, k, n) in [(1, 1, 1), (37, 7, 41), (512, 512, 512), (1000, 1024, 777)]:
    a, b = torch.randn(m, k, device=DEV, dtype=torch.bfloat16), torch.randn(k, n, device=DEV, dtype=torch.bfloat16)
    bias, r = torch.randn(n, device=DEV), torch.randn(m, n, device=DEV, dtype=torch.bfloat16)
    c = gen["matmul_epilogue"].matmul_epilogue(a, b, bias, r, 0.5)
    expected = (F.gelu(0.5 * (a.float() @ b.float()) + bias, approximate="tanh") + r.float())
    close = torch.allclose(c.float(), expected, atol=1e-1, rtol=2e-2)
    record("matmul_epilogue", f"bf16 {m}x{k}x{n} (vs torch)", close, (c.float() - expected).abs().max().item(),
           float("inf"))

torch.backends.cuda.matmul.allow_tf32 = False
for (m, k, n) in [(1, 1, 1), (97, 61, 53), (512, 512, 512), (300, 512, 499)]:
    a, b = torch.randn(m, k, device=DEV), torch.randn(k, n, device=DEV)
    c = gen["matmul_f32"].matmul_f32(a, b)
    expected = a.double() @ b.double()
    rel = ((c.double() - expected).norm() / expected.norm()).item()
    record("matmul_f32", f"ieee {m}x{k}x{n} rel_err={rel:.2e}", rel < 1e-4, rel, 1e-4)

for (batch, m, k, n) in [(1, 1, 1, 1), (3, 37, 7, 41), (8, 512, 512, 512)]:
    a = torch.randn(batch, m, k, device=DEV, dtype=torch.float16)
    b = torch.randn(batch, n, k, device=DEV, dtype=torch.float16).transpose(1, 2)
    c = gen["matmul_batched"].matmul_batched(a, b)
    expected = torch.bmm(a.float(), b.float())
    close = torch.allclose(c.float(), expected, atol=5e-2, rtol=1e-2)
    record("matmul_batched", f"{batch}x{m}x{k}x{n}", close, (c.float() - expected).abs().max().item(), float("inf"))

if "activations" in gen:
    x = torch.randn(100003, device=DEV) * 4
    for act in ["none", "relu", "leaky_relu", "gelu", "sigmoid", "silu"]:
        outs = gen["activations"].activations(x, 2.5, act=act)
        refs = gen["activations"].reference(x, 2.5, act=act)
        # f32 outputs within 1e-5; the f16 output (-x * scale + 1) within one f16 ulp (rtol 1e-3).
        pairs = list(zip(outs, refs, strict=True))
        err = max((o - r).abs().max().item() for o, r in pairs if o.dtype == torch.float32)
        f16_ok = all(
            torch.allclose(o.float(), r.float(), rtol=1e-3, atol=0) for o, r in pairs if o.dtype == torch.float16
        )
        record("activations", f"act={act}", f16_ok, err, 1e-5)
if "grey_block_ptr" in gen:
    for h, w in [(7, 33), (1066, 1600)]:
        x = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, device=DEV)
        y = gen["grey_block_ptr"].grey_block_ptr(x)
        record("grey_block_ptr", f"3x{h}x{w}", torch.equal(y, gen["rgb2grey"].rgb2grey(x)),
               (y.int() - gen["rgb2grey"].reference(x).int()).abs().max().item(), 1)

# matmul_fast also at shapes whose few output tiles split the K loop (the parts' partial sums
# added up), with a column-major b, and through its pointer kernel (odd K)
SPLIT_SHAPES = [(16, 4096, 4096), (1, 4096, 4096), (128, 131072, 128), (256, 65536, 256), (16, 4095, 1024)]
gen["matmul_fast"] = load_module(ROOT / "generated" / "matmul_fast.py")
for name, dtype in (
    ("matmul_fast", torch.float16), ("matmul_fast", torch.bfloat16), ("matmul_fast", torch.float32),
    *((("matmul_persistent", torch.float16),) if "matmul_persistent" in gen else ()),  # a test spec (DIR)
):
    shapes = [(1, 8, 8), (33, 136, 128), (512, 512, 512), (1000, 1024, 776)]
    for (m, k, n), b_col in [(s, False) for s in shapes] + [
        (s, b_col) for s in (SPLIT_SHAPES if name == "matmul_fast" else []) for b_col in (False, True)
    ]:
        a = torch.randn(m, k, device=DEV, dtype=dtype)
        b = torch.randn(n, k, device=DEV, dtype=dtype).t() if b_col else torch.randn(k, n, device=DEV, dtype=dtype)
        c = getattr(gen[name], name)(a, b)
        expected = a.double() @ b.double()
        scale = max(1.0, k**0.5 / 10)  # the outputs grow as sqrt(k): sums of k products of N(0, 1) numbers
        atol = (1e-1 if dtype == torch.bfloat16 else 5e-2) * scale
        close = torch.allclose(c.double(), expected, atol=atol, rtol=2e-2)
        error = (c.double() - expected).abs().max().item()
        layout = ", b column-major" if b_col else ""
        record(f"{name} {str(dtype)[6:]}", f"{m}x{k}x{n}{layout} (vs torch)", close, error, float("inf"))

# The launchers' compiled-kernel cache (issue 5's launch path): arguments Triton specializes
# differently must never share a compiled kernel. Each case first runs the specialization Triton
# compiles with the most assumptions (16-byte aligned pointers, sizes and strides divisible by 16),
# then arguments that break one assumption; a shared kernel would read misaligned vectors.
storage = torch.randn(4096 + 64, device=DEV)
for label, n, offset in [("aligned", 1024, 0), ("pointer off by 4 bytes", 1024, 1), ("N % 16 != 0", 1023, 0),
                         ("N == 1", 1, 0), ("N == 17, off by 4 bytes", 17, 3)]:
    x = storage[offset:offset + n]
    before = len(gen["copy"]._COMPILED)
    z = gen["copy"].copy(x)
    record("copy launch cache", f"{label} (+{len(gen['copy']._COMPILED) - before} kernels)", torch.equal(z, x), 0.0, 0)
for label, (m, k, n), view in [("contiguous 64^3", (64, 64, 64), False), ("strides 65 (views)", (64, 64, 64), True),
                               ("M = N = 33", (33, 64, 33), False), ("M = N = 1", (1, 64, 1), False)]:
    a = torch.randn(m, k + 1 if view else k, device=DEV, dtype=torch.float16)[:, :k]
    b = torch.randn(k, n + 1 if view else n, device=DEV, dtype=torch.float16)[:, :n]
    module = gen["matmul_naive"]
    before = len(module._COMPILED)
    c = module.matmul_naive(a, b, BM=16, BN=16, BK=16)
    record("matmul_naive launch cache", f"{label} (+{len(module._COMPILED) - before} kernels)",
           True, (c.float() - module.reference(a, b).float()).abs().max().item(), 5e-2)
# A launch hook (what a profiler such as Proton installs) sees the launchers' launches.
hooked = []
chain = triton.knobs.runtime.launch_enter_hook
chain.add(hooked.append)
z = gen["copy"].copy(storage[:1024])
chain.remove(hooked.append)
gen["copy"].copy(storage[:1024])
record("copy launch hook", f"called {len(hooked)} time(s) for 1 hooked launch",
       len(hooked) == 1 and torch.equal(z, storage[:1024]), 0.0, 0)
torch.cuda.synchronize()

# Reductions, norms and losses (issue 10): against torch, and the tutorial kernels where there are
# some; rows of odd lengths (masked tails of whole tiles), and cross-entropy rows of many tiles.
from tests.reference import layer_norm as ref_layer_norm  # noqa: E402
from tests.reference import softmax as ref_softmax  # noqa: E402

gen.update({name: load_module(ROOT / "generated" / f"{name}.py") for name in
            ["softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "matmul_tril"]})
for m, n in [(1, 1), (5, 7), (37, 781), (64, 3000), (4096, 4096), (33, 32768)]:
    x = torch.randn(m, n, device=DEV) * 4
    y = gen["softmax"].softmax(x)
    err = (y - torch.softmax(x, dim=-1)).abs().max().item()
    record("softmax", f"{m}x{n} (vs tutorial 02)", torch.allclose(y, ref_softmax.softmax(x), atol=1e-6, rtol=1e-5),
           err, 1e-6)
    y = gen["log_softmax"].log_softmax(x)
    record("log_softmax", f"{m}x{n}", True, (y - torch.log_softmax(x, dim=-1)).abs().max().item(), 1e-4)
    xh = (torch.randn(m, n, device=DEV) * 3).half()
    w, b = torch.randn(n, device=DEV).half(), torch.randn(n, device=DEV).half()
    y, mu, rstd = gen["layer_norm"].layer_norm(xh, w, b, 1e-5)
    hand = ref_layer_norm.layer_norm(xh, w, b, 1e-5)
    expected = F.layer_norm(xh.float(), (n,), w.float(), b.float(), 1e-5)
    close = torch.allclose(y.float(), hand[0].float(), atol=2e-2, rtol=1e-2) and torch.allclose(mu, hand[1], atol=1e-5)
    record("layer_norm", f"{m}x{n} (vs tutorial 05)", close and torch.allclose(rstd, hand[2], rtol=1e-4, atol=1e-4),
           (y.float() - expected).abs().max().item(), 5e-2)
    y = gen["rms_norm"].rms_norm(xh, w, 1e-6)
    record("rms_norm", f"{m}x{n}", True,
           (y.float() - F.rms_norm(xh.float(), (n,), w.float(), 1e-6)).abs().max().item(), 5e-2)
for m, v in [(1, 1), (5, 7), (37, 781), (64, 3000), (256, 32000), (64, 128256), (3, 262144)]:
    logits = torch.randn(m, v, device=DEV) * 4
    target = torch.randint(0, v, (m,), device=DEV)
    loss, _ = gen["cross_entropy"].cross_entropy(logits, target)
    err = (loss - F.cross_entropy(logits, target, reduction="none")).abs().max().item()
    record("cross_entropy", f"{m}x{v}", True, err, 1e-4)
for m, k, n in [(1, 1, 1), (70, 33, 100), (1000, 512, 777)]:
    a, b = torch.randn(m, k, device=DEV), torch.randn(k, n, device=DEV)
    c = gen["matmul_tril"].matmul_tril(a, b)
    record("matmul_tril", f"{m}x{k}x{n}", True, (c - torch.tril(a @ b)).abs().max().item(), 1e-3)
if "layer_norm_looped" in gen:
    for m, n in [(3, 1), (5, 100), (7, 5000)]:
        x, w, b = torch.randn(m, n, device=DEV), torch.randn(n, device=DEV), torch.randn(n, device=DEV)
        y = gen["layer_norm_looped"].layer_norm_looped(x, w, b, 1e-5)
        record("layer_norm_looped", f"{m}x{n}", True, (y - F.layer_norm(x, (n,), w, b, 1e-5)).abs().max().item(), 1e-4)
for case in attention_parity.cases() if ATTENTION else ():  # issue 11: every dtype, layout and sign of the scale
    record(*case)
for case in tail_parity.cases():  # issue 12: matmul_fast's split tail, each split with a forced config
    record(*case)
torch.cuda.synchronize()

print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
print(f"{sum(rows)} passed, {len(rows) - sum(rows)} failed")
sys.exit(0 if all(rows) else 1)
