"""KernelBench level 1 problems written as specs, on the GPU against torch at the suite's
``get_inputs`` shapes (and smaller, odd ones): cumsum (89), cumprod (90), reverse cumsum (91),
masked cumsum (93, a torch.bool mask) at 32768 x 32768 float32 (``torch.rand``); sum (47), mean
(48), max (49), argmax (51), argmin (52) and min (53) over the middle dimension of 128 x 4096 x
4095 (``torch.rand``); the product over that dimension, problem 50 until the suite replaced it
with a convolution (``torch.randn``); L1 normalisation (38) of 32768 x 65535 rows; RMS norm over
the channels of 112 x 64 x 512 x 512 (36); the losses reduced across programs to one number: MSE
(94), Huber (96), hinge (100) at 32768 x 32768, KL divergence (98) at 16384 x 16384, and the
cosine similarity loss of the suite's former problem 97 (128 x 4096).

``python benchmarks/kernelbench_l1.py OUT_DIR [KERNEL ...]`` (every kernel when none is named)
prints one line per case and appends it to ``OUT_DIR/kernelbench_l1.csv`` as it goes (a header
with the device, torch and Triton versions first when the file is new). Per case: the tilegen
function and torch's expression (KernelBench's own ``forward``), each timed eager (launches back
to back, ``triton.testing.do_bench``, L2 flushed, median of 5 interleaved rounds) and in a CUDA
graph (``do_bench_cudagraph``); the copy roof (``copy_`` of the input's bytes, eager);
tilegen's first call in this process (autotuning and compiling included) and its max error
against torch. Ratios are torch's time over tilegen's (above 1: tilegen faster).
``python benchmarks/kernelbench_l1.py --plot CSV`` draws a CSV's eager and graphed ratios as bars
beside it; it needs matplotlib, not a GPU.
"""

import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-kernelbench-")

from tilegen.runner import load_module  # noqa: E402

ROUNDS = 5
ROWS = [(32768, 32768), (4096, 4097), (4096, 1000), (1000, 777)]
MIDDLE = [(128, 4096, 4095), (16, 1000, 777)]


def _rand(shape):
    return torch.rand(shape, device="cuda")


def _factors(shape):
    return torch.rand(shape, device="cuda") * 0.2 + 0.9  # in [0.9, 1.1]: products stay in range


def _pair(shape):  # KernelBench's MSE and Huber inputs: torch.rand scaled by a random scale, torch.rand
    return torch.rand(shape, device="cuda") * torch.rand((), device="cuda"), torch.rand(shape, device="cuda")


def _hinge(shape):  # predictions, and targets of +-1 along the last dimension
    return torch.rand(shape, device="cuda"), torch.randint(0, 2, shape[1:], device="cuda").float() * 2 - 1


def _distributions(shape):  # KernelBench's KL inputs: rows softmaxed
    scale = torch.rand((), device="cuda")
    return (torch.rand(shape, device="cuda") * scale).softmax(dim=-1), torch.rand(shape, device="cuda").softmax(dim=-1)


LOSSES = [(32768, 32768), (4096, 4097), (1000, 777)]


def _affine(groups=None):  # KernelBench's norm inputs: x = torch.rand, the module's weight 1 and bias 0 per channel
    def make(shape):
        weight, bias = torch.ones(shape[1], device="cuda"), torch.zeros(shape[1], device="cuda")
        return (_rand(shape), weight, bias, *(() if groups is None else (groups,)), 1e-5)

    return make


#: kernel -> (KernelBench problem, torch's forward, input maker, shapes)
CASES = {
    "row_cumsum": ("89_cumsum", lambda x: torch.cumsum(x, dim=1), _rand, ROWS),
    "row_cumsum_reverse": ("91_cumsum_reverse", lambda x: torch.cumsum(x.flip(1), dim=1).flip(1), _rand, ROWS),
    "cumsum_masked": ("93_masked_cumsum", lambda x, mask: torch.cumsum(x * mask, dim=1),
                      lambda shape: (_rand(shape), torch.randint(0, 2, shape, device="cuda").bool()), ROWS),
    "row_cumprod": ("90_cumprod", lambda x: torch.cumprod(x, dim=1), _factors, ROWS),
    "sum_dim1": ("47_Sum_reduction", lambda x: torch.sum(x, dim=1), _rand, MIDDLE),
    "mean_dim1": ("48_Mean_reduction", lambda x: torch.mean(x, dim=1), _rand, MIDDLE),
    "max_dim1": ("49_Max_reduction", lambda x: torch.max(x, dim=1)[0], _rand, MIDDLE),
    "argmax_dim1": ("51_Argmax", lambda x: torch.argmax(x, dim=1), _rand, MIDDLE),
    "argmin_dim1": ("52_Argmin", lambda x: torch.argmin(x, dim=1), _rand, MIDDLE),
    "min_dim1": ("53_Min_reduction", lambda x: torch.min(x, dim=1)[0], _rand, MIDDLE),
    "prod_reduction": ("50_Product_reduction (former)", lambda x: torch.prod(x, dim=1),
                       lambda shape: torch.randn(shape, device="cuda"), MIDDLE),
    "l1_norm": ("38_L1Norm_", lambda x: x / torch.mean(torch.abs(x), dim=1, keepdim=True), _rand,
                [(32768, 65535), (4096, 4097), (1000, 777)]),
    "rms_norm_channels": ("36_RMSNorm_", lambda x, eps: x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps),
                          lambda shape: (_rand(shape), 1e-5), [(112, 64, 512, 512), (16, 64, 256, 257)]),
    "frobenius_norm": ("37_FrobeniusNorm_", lambda x: x / torch.norm(x, p="fro"), _rand,
                       [(112, 64, 512, 512), (16, 64, 256, 257)]),
    "batch_norm": ("33_BatchNorm", lambda x, w, b, eps: torch.nn.functional.batch_norm(
                       x, None, None, w, b, training=True, eps=eps),
                   _affine(), [(64, 64, 512, 512), (16, 32, 256, 257)]),
    "group_norm": ("35_GroupNorm_", lambda x, w, b, groups, eps: torch.nn.functional.group_norm(x, groups, w, b, eps),
                   _affine(groups=8), [(112, 64, 512, 512), (16, 64, 256, 257)]),
    "mse_loss": ("94_MSELoss", lambda p, t: torch.mean((p - t) ** 2), _pair, LOSSES),
    "huber_loss": ("96_HuberLoss", lambda p, t: torch.nn.functional.smooth_l1_loss(p, t), _pair, LOSSES),
    "kl_div": ("98_KLDivLoss", lambda p, t: torch.nn.functional.kl_div(torch.log(p), t, reduction="batchmean"),
               _distributions, [(16384, 16384), (4096, 4097), (1000, 777)]),
    "hinge_loss": ("100_HingeLoss", lambda p, t: torch.mean(torch.clamp(1 - p * t, min=0)), _hinge, LOSSES),
    "cosine_similarity_loss": (
        "97_CosineSimilarityLoss (former)",
        lambda p, t: torch.mean(1 - torch.nn.functional.cosine_similarity(p, t, dim=1)), _pair,
        [(128, 4096), (4096, 4096), (1000, 777)]),
}


def interleaved(functions: dict, bench) -> dict:
    """Median ms of each function over ROUNDS rounds in which they take turns."""
    times = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name, fn in functions.items():
            times[name].append(bench(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def first_call(kernel: str, inputs: tuple):
    """The generated function of ``kernel``, its result on ``inputs`` and the seconds that first
    call took in this process (tuning and compiling included)."""
    ours = getattr(load_module(ROOT / "generated" / f"{kernel}.py"), kernel)
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = ours(*inputs)
    torch.cuda.synchronize()
    return ours, result, time.perf_counter() - start


def case(kernel: str, xs: tuple) -> dict:
    problem, reference, _, _ = CASES[kernel]
    ours, y, first = first_call(kernel, xs)
    want = reference(*xs)
    error = (y.double() - want.double()).abs().nan_to_num(0.0).max().item()
    tensors = [x for x in xs if isinstance(x, torch.Tensor)]  # not a scalar input (eps)
    outs = [torch.empty_like(x) for x in tensors]

    def copy():
        for out, x in zip(outs, tensors, strict=True):
            out.copy_(x)

    eager = interleaved({"tilegen": lambda: ours(*xs), "torch": lambda: reference(*xs), "copy": copy},
                        lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100))
    graph = interleaved({"tilegen": lambda: ours(*xs), "torch": lambda: reference(*xs)},
                        lambda fn: triton.testing.do_bench_cudagraph(fn, rep=100))
    read = sum(x.numel() * x.element_size() for x in tensors)
    moved = read + y.numel() * y.element_size()  # read the inputs once, write y once
    return {
        "problem": problem, "kernel": kernel, "shape": "x".join(map(str, xs[0].shape)), "dtype": "f32",
        "tilegen_ms": eager["tilegen"], "torch_ms": eager["torch"], "ratio_eager": eager["torch"] / eager["tilegen"],
        "tilegen_graph_ms": graph["tilegen"], "torch_graph_ms": graph["torch"],
        "ratio_graph": graph["torch"] / graph["tilegen"],
        "tilegen_TBps": moved / eager["tilegen"] / 1e9,
        "copy_TBps": 2 * read / eager["copy"] / 1e9,
        "first_call_s": first, "max_error": error,
    }


def append_rows(path: Path, note: str, rows) -> None:
    """Append each row (a dict) of ``rows`` to the CSV at ``path`` as it comes, and print it; a
    new file starts with the device, torch and Triton versions and ``note``."""
    new = not path.exists()
    with open(path, "a", newline="") as f:
        if new:
            f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
            f.write(f"# {note}\n")
        writer = None
        for row in rows:
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                if new:
                    writer.writeheader()
            writer.writerow(row)
            f.flush()
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            torch.cuda.empty_cache()


def main(out: Path, kernels: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    def rows():
        for kernel, (_, _, make, shapes) in CASES.items():
            if kernels and kernel not in kernels:
                continue
            for shape in shapes:
                xs = make(shape)
                yield case(kernel, xs if isinstance(xs, tuple) else (xs,))

    note = ("ratio = torch ms / tilegen ms (eager: do_bench, L2 flushed; graph: do_bench_cudagraph); "
            "TB/s = (bytes of the inputs + bytes of y) / eager time; copy_TBps = copy_ of the inputs' bytes")
    append_rows(out / "kernelbench_l1.csv", note, rows())

def plot(path: Path) -> Path:
    """Bars of torch ms / tilegen ms per case, eager and graphed, with 1.0 marked; ``<csv>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = path.read_text(encoding="utf-8").splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    labels = [f"{r['kernel']}\n{r['shape']}" for r in rows]
    figure, axes = plt.subplots(figsize=(max(14, 0.35 * len(rows)), 6))  # room for each label
    positions = range(len(rows))
    axes.bar([p - 0.2 for p in positions], [float(r["ratio_eager"]) for r in rows], 0.4, label="eager")
    axes.bar([p + 0.2 for p in positions], [float(r["ratio_graph"]) for r in rows], 0.4, label="CUDA graph")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(list(positions), labels, rotation=60, ha="right", fontsize=7)
    axes.set_ylabel("torch ms / tilegen ms")
    axes.set_title(f"KernelBench level 1 specs vs torch ({lines[0][2:]})", fontsize=10)
    axes.legend(fontsize=8)
    out = path.with_suffix(".png")
    figure.savefig(out, dpi=110, bbox_inches="tight")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--plot":
        print(plot(Path(sys.argv[2])))
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
