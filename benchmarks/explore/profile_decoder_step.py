"""Where a training step of benchmarks/decoder.py's model spends its GPU time, tilegen against torch:
torch.profiler over 5 settled steps of each, the CUDA kernels summed by name (top 25), and the
step's wall time against the sum of its kernels' time (the rest: the host, launches).

``python benchmarks/explore/profile_decoder_step.py [COMPUTE]`` (GPU; run benchmarks/train_decoder.py
first so that tilegen's tuning is cached; COMPUTE: the model's compute dtype, float32 by default)."""

import dataclasses
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import decoder
from train_decoder import BATCH, CONFIG


def main(compute: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    config = dataclasses.replace(CONFIG, compute=compute)
    data = decoder.corpus(limit=2_000_000)
    for ops in (decoder.TORCH, decoder.tilegen_ops()):
        params = decoder.init_params(config, 0, "cuda")
        tables = decoder.rope_tables(config, "cuda")
        batches = [(i.cuda(), t.cuda()) for i, t in decoder.batches(data, config, BATCH, 8)]

        def step(idx, target, params=params, tables=tables, ops=ops):
            value = decoder.loss(ops, params, idx, target, config, tables)
            for p in params.values():
                p.grad = None
            value.backward()
            return value

        for idx, target in batches[:3]:
            step(idx, target)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for idx, target in batches[3:]:
                step(idx, target)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / 5 * 1e3
        events = prof.key_averages()
        kernel_ms = sum(e.device_time_total for e in events) / 5 / 1e3
        print(f"== {ops.name}, {compute}: {wall:.2f} ms a step (forward + backward, no optimizer), "
              f"kernels {kernel_ms:.2f} ms")
        print(events.table(sort_by="device_time_total", row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32")
