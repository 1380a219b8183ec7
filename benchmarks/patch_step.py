"""A Hugging Face Llama patched onto tilegen's kernels (``tilegen.patch``) against the same model
unpatched: one training step (forward, backward, AdamW) on the GPU, bf16, random weights.

``python benchmarks/patch_step.py OUT_DIR [STEPS]`` builds a ``transformers`` LlamaForCausalLM of
Llama-3-8B's layer shapes (hidden 4096, 32 query and 8 key-value heads, MLP 14336, vocabulary
128256) with 2 layers, random init, bf16 parameters and AdamW, trains it on random tokens
(4 sequences of 2048) from the same weights four ways: unpatched, patched, and each of them under
``torch.compile`` (the model's forward compiled with the default inductor backend; the loss
and the optimizer step stay eager), and writes ``OUT_DIR/patch_step_<device>.csv``: per way, the
first step (ms, a fresh process's compiles and tuning included), the median of STEPS later steps
(ms), the peak memory (MiB), the first step's loss, and the ratio of the unpatched and of the
unpatched compiled step to this one (above 1: faster). All ways run in one process, in that order.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tilegen  # noqa: E402

BATCH, CONTEXT = 4, 2048


def _model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                         num_hidden_layers=2, vocab_size=128256, max_position_embeddings=CONTEXT,
                         attn_implementation="sdpa")
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to("cuda", torch.bfloat16)


def _steps(model, steps: int) -> tuple[float, float, float, float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    g = torch.Generator("cuda").manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, CONTEXT), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, first_loss = [], None
    for _ in range(steps + 3):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        first_loss = loss.item() if first_loss is None else first_loss
    return times[0], statistics.median(times[3:]), torch.cuda.max_memory_allocated() / 2**20, first_loss


def main(out: Path, steps: int) -> None:
    rows = []
    for way in ("transformers", "tilegen.patch", "transformers + torch.compile", "tilegen.patch + torch.compile"):
        torch._dynamo.reset()  # each compiled way compiles afresh
        model = _model()
        if way.startswith("tilegen.patch"):
            tilegen.patch(model)
        if way.endswith("torch.compile"):
            model.compile()  # nn.Module.compile: the module's forward compiled in place, its parameters the same
        first, step, peak, loss = _steps(model, steps)
        rows.append({"way": way, "first_ms": round(first, 1), "step_ms": round(step, 2), "peak_mib": round(peak),
                     "first_loss": round(loss, 4)})
        del model
        torch.cuda.empty_cache()
    for row in rows:
        row["vs_unpatched"] = round(rows[0]["step_ms"] / row["step_ms"], 3)
        row["vs_compiled"] = round(rows[2]["step_ms"] / row["step_ms"], 3)
        print(row, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name().split()[-1]
    with open(out / f"patch_step_{name}.csv", "w", newline="") as f:
        f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; LlamaForCausalLM, 2 layers of "
                f"Llama-3-8B's shapes, bf16, AdamW, {BATCH} x {CONTEXT} tokens\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10)
