"""The decoder of benchmarks/decoder.py trained data-parallel, one process per GPU, through
tilegen's kernels (or torch's), with torch's own engine: DistributedDataParallel over NCCL (gloo
on the CPU, under Triton's interpreter).

Launch on two GPUs, then once more on one for the curve to compare against::

    torchrun --standalone --nproc-per-node 2 benchmarks/train_ddp.py OUT_DIR [--steps 300]
    python benchmarks/train_ddp.py OUT_DIR [--steps 300]

Every run takes the same global batches (``decoder.batches``, ``--batch`` sequences a step);
rank ``r`` of ``W`` trains on rows ``r::W`` of each. Each rank's loss is the mean over its rows
and DDP averages the gradients over the ranks, so with equal row counts a step of ``W``
processes is one process's step on the whole batch, up to the order of the sums. Writes
``OUT_DIR/train_ddp_<ops>_<W>gpu.csv`` (step, the loss averaged over the ranks, the step's wall
time in ms; rank 0 writes it) and prints the last loss. The size is ``--size``: ``small``
(decoder.py's small model, bfloat16, on the GPU) or ``tiny`` (one layer over 8 bytes, float32: the CPU test's).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decoder

SIZES = {
    "small": decoder.Config(vocab=256, dim=384, heads=6, layers=4, hidden=1024, context=256, compute="bfloat16"),
    "tiny": decoder.Config(vocab=256, dim=32, heads=2, layers=1, hidden=48, context=8),
}


class Model(torch.nn.Module):
    """decoder.loss over parameters a module holds, as DDP wants them (``ParameterDict`` keys
    cannot hold the dots of decoder.init_params' names: ``0.qkv`` is kept as ``0_qkv``)."""

    def __init__(self, ops: decoder.Ops, cfg: decoder.Config, device: str) -> None:
        super().__init__()
        self.ops, self.cfg = ops, cfg
        params = decoder.init_params(cfg, 0, device)
        self.weights = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v.detach())
                                               for k, v in params.items()})
        self.names = {k: k.replace(".", "_") for k in params}
        self.tables = decoder.rope_tables(cfg, device)

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        params = {name: self.weights[key] for name, key in self.names.items()}
        return decoder.loss(self.ops, params, idx, target, self.cfg, self.tables)


def train(out: Path, steps: int, batch: int, size: str, ops_name: str) -> list[float]:
    """Train on this process's share of each batch; returns the losses averaged over the ranks
    (rank 0 also writes them, see the module docstring)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    cfg = SIZES[size]
    ops = decoder.TORCH if ops_name == "torch" else decoder.tilegen_ops()
    model: torch.nn.Module = Model(ops, cfg, device)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    data = decoder.corpus(limit=None if size != "tiny" else 20000)
    losses, times = [], []
    for idx, target in decoder.batches(data, cfg, batch, steps):
        start = time.perf_counter()
        value = model(idx[rank::world].to(device), target[rank::world].to(device))
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        mean = value.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses.append(mean.item())
        times.append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"train_ddp_{ops_name}_{world}gpu.csv", "w", newline="") as f:
            writer = csv.writer(f)
            name = torch.cuda.get_device_name() if cuda else "CPU (Triton interpreter)"
            f.write(f"# {world} x {name}, torch {torch.__version__}; {size} model, {batch} sequences a step\n")
            writer.writerow(["step", "loss", "step_ms"])
            writer.writerows([i, loss, ms] for i, (loss, ms) in enumerate(zip(losses, times, strict=True)))
        print(f"{ops_name} on {world} process(es): last loss {losses[-1]:.4f}", flush=True)
    if world > 1:  # every rank done (rank 0 wrote the CSV) before the group goes: gloo's teardown
        dist.barrier()  # with a rank still inside it aborted one process ("terminate called ...")
        dist.destroy_process_group()
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32, help="sequences in each global batch")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--ops", choices=["tilegen", "torch"], default="tilegen")
    args = parser.parse_args()
    train(args.out, args.steps, args.batch, args.size, args.ops)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every rank past the barrier, the group destroyed:
        sys.stdout.flush()  # leave without the interpreter's teardown, where gloo's threads, destroyed
        sys.stderr.flush()  # while joinable, sometimes aborted a finished rank ("terminate called ...")
        os._exit(0)


if __name__ == "__main__":
    main()
