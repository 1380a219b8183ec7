"""Train the small decoder of benchmarks/decoder.py on the GPU twice, through tilegen kernels and
through torch eager, from the same initial weights on the same batches, and record both loss
curves (issue 33's model that trains on tilegen kernels).

``python benchmarks/train_decoder.py OUT_DIR [STEPS] [COMPUTE]`` writes ``OUT_DIR/train_decoder.csv``
(step, torch loss, tilegen loss, each step's wall time in ms) and ``OUT_DIR/train_decoder.png`` (the
two curves overlaid, and their difference); ``_bfloat16`` is added to the names where COMPUTE is
``bfloat16``. Both models compute in float32 with TF32 tensor-core matmuls (tilegen's ``dot`` of
f32 tiles is TF32, as torch's with ``allow_tf32``), so the curves agree to TF32's rounding, not
bit for bit; or, with COMPUTE, in bfloat16 from float32 parameters (``decoder.Config.compute``).
A step's time is wall clock around the whole step
(forward, backward, AdamW), synchronized: what a user's training loop sees, eager (no CUDA
graphs); the first steps include tilegen's autotuning of each new shape (its first call).
"""

from __future__ import annotations

import csv
import dataclasses
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decoder

#: The model trained on the GPU: 4 layers of width 384 (6 heads of 64), MLP 1024, 256 bytes of
#: context, 32 sequences a step (8192 tokens).
CONFIG = decoder.Config(vocab=256, dim=384, heads=6, layers=4, hidden=1024, context=256)
BATCH = 32


def timed_train(ops: decoder.Ops, data: torch.Tensor, steps: int, config: decoder.Config = CONFIG
                ) -> tuple[list[float], list[float]]:
    """:func:`decoder.train`'s loop, with each step's wall time (ms)."""
    params = decoder.init_params(config, 0, "cuda")
    tables = decoder.rope_tables(config, "cuda")
    optimizer = torch.optim.AdamW(params.values(), lr=3e-3, weight_decay=0.0)
    losses, times = [], []
    for idx, target in decoder.batches(data, config, BATCH, steps, 0):
        idx, target = idx.cuda(), target.cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        value = decoder.loss(ops, params, idx, target, config, tables)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        losses.append(value.item())  # synchronizes
        times.append((time.perf_counter() - start) * 1e3)
    return losses, times


def main(out: Path, steps: int, compute: str = "float32") -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    config = dataclasses.replace(CONFIG, compute=compute)
    name = "train_decoder" if compute == "float32" else f"train_decoder_{compute}"
    data = decoder.corpus()
    runs = {ops.name: timed_train(ops, data, steps, config) for ops in (decoder.TORCH, decoder.tilegen_ops())}
    (torch_loss, torch_ms), (ours_loss, ours_ms) = runs["torch"], runs["tilegen"]
    with open(out / f"{name}.csv", "w", newline="") as f:
        f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
                f"{config}, batch {BATCH}, {len(data)} bytes of the standard library's sources\n")
        writer = csv.writer(f)
        writer.writerow(["step", "torch_loss", "tilegen_loss", "torch_step_ms", "tilegen_step_ms"])
        for i in range(steps):
            writer.writerow([i, torch_loss[i], ours_loss[i], torch_ms[i], ours_ms[i]])
    settled = slice(steps // 2, None)  # past every first call's tuning
    median = {name: sorted(ms[settled])[len(ms[settled]) // 2] for name, (_, ms) in runs.items()}
    print(f"final loss: torch {torch_loss[-1]:.4f}, tilegen {ours_loss[-1]:.4f}; largest gap "
          f"{max(abs(a - b) for a, b in zip(torch_loss, ours_loss, strict=True)):.4f}; median step (second half): "
          f"torch {median['torch']:.1f} ms, tilegen {median['tilegen']:.1f} ms; first step: torch "
          f"{torch_ms[0]:.0f} ms, tilegen {ours_ms[0]:.0f} ms", flush=True)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(3, 1))
    top.plot(torch_loss, label="torch eager", linewidth=2.5, alpha=0.6)
    top.plot(ours_loss, label="tilegen kernels", linewidth=1)
    top.set_ylabel("cross-entropy (nats per byte)")
    top.set_title(f"Decoder, {config.layers} layers of {config.dim}, {compute}, on {torch.cuda.get_device_name()}")
    top.legend()
    bottom.plot([b - a for a, b in zip(torch_loss, ours_loss, strict=True)])
    bottom.set_ylabel("tilegen - torch")
    bottom.set_xlabel("AdamW step")
    figure.tight_layout()
    figure.savefig(out / f"{name}.png", dpi=120)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]), int(args[1]) if len(args) > 1 else 300, args[2] if len(args) > 2 else "float32")
