"""The default ``quick`` tuning effort against ``full`` tuning, on the GPU: what a user's first call gets.

``python benchmarks/tune_effort.py OUT_DIR [SPEC ...]`` (default: matmul_fast and causal attention's
forward and backward kernels) times each spec's launcher at every shape ``SHAPES`` gives it and every
dtype of its dtype variable, once
in a process at ``TILEGEN_TUNE=quick`` and once at ``TILEGEN_TUNE=full``, each with its own empty
tuning cache (``TILEGEN_CACHE_DIR``): ``quick`` takes the config of the nearest sizes in the table
shipped beside the spec (``specs/<kernel>.tuned.json``, embedded in ``generated/``), else the spec's
default; ``full`` compiles and times every config. Writes ``OUT_DIR/tune_effort_<device>.csv`` (a
``#`` line names the device, torch and Triton) and prints each row: kernel time in CUDA graphs
(``tilegen.bench.time_graphed``) of the config each effort chose, and ``quick / full`` (1.00: as fast;
above: quick is slower). Shapes marked ``shipped`` have a table entry of their own; the others take
the nearest one's config.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: matmul_fast's (M, N, K): sizes with an entry of their own in its shipped table (2048, 3000 and
#: a model's projection, tokens x hidden) and sizes without one (odd squares, odd and thin shapes).
MATMUL = [(2048, 2048, 2048), (3000, 3000, 3000), (8192, 5632, 2048),
          (1536, 1536, 1536), (2500, 2500, 2500), (5000, 5000, 5000), (777, 1333, 2049), (128, 4096, 4096)]
#: causal attention's (B, H, S, D): a Llama-like layer (head dimension 128), GPT-2's heads (64), an odd S
ATTENTION = [(4, 16, 2048, 128), (8, 16, 1024, 64), (2, 8, 3001, 128)]
ATTENTION_SPECS = ["attention_causal", "attention_backward_delta", "attention_causal_backward_dkdv",
                   "attention_causal_backward_dq"]
#: spec -> its sizes at each shape
SHAPES = {"matmul_fast": [dict(zip("MNK", shape, strict=True)) for shape in MATMUL],
          **{name: [dict(zip("BHSD", shape, strict=True)) for shape in ATTENTION] for name in ATTENTION_SPECS}}
#: the dtypes timed where a spec's dtype variable has more (attention: bf16, what a model runs)
DTYPES = dict.fromkeys(ATTENTION_SPECS, ("bf16",))

SPECS = ["matmul_fast", *ATTENTION_SPECS]


def child(effort: str, names: list[str]) -> None:
    """Time every case at ``effort`` in this process; print one JSON object per case."""
    import torch

    from tilegen import bench, runner
    from tilegen import model as m
    from tilegen.build import check_file, find_specs
    from tilegen.runtime import device_arch

    for name in names:
        module = runner.load_module(ROOT / "generated" / f"{name}.py")
        spec = check_file(find_specs([str(ROOT / "specs" / f"{name}.tile")])[0])
        launcher, tuner = getattr(module, name), module._tuner
        for binding in spec.bindings():
            if name in DTYPES and not set(binding.values()) <= set(DTYPES[name]):
                continue
            bound = m.specialize(spec, binding)
            for sizes in SHAPES[name]:
                args = tuple(runner.random_inputs(bound, sizes, "cuda").values())
                launcher(*args)  # the first call: chooses (and at full, tunes) its config
                torch.cuda.synchronize()
                ms = bench.time_graphed(functools.partial(launcher, *args))
                keys = [f"{device_arch(key[0])}|{','.join(map(str, key[1:]))}" for key in tuner.tuned]
                configs = sorted({str(tuner.configs[i].all_kwargs()) for i in tuner.tuned.values()})
                print(json.dumps({"kernel": name, "dtype": ",".join(binding.values()),
                                  "shape": "x".join(map(str, sizes.values())), "ms": ms, "config": "; ".join(configs),
                                  "shipped": any(key in tuner.shipped for key in keys)}), flush=True)
                tuner.tuned.clear()  # the next shape chooses afresh
                tuner.fast.clear()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2:])
        return
    import torch
    import triton

    out_dir = Path(argv[0]) if argv else Path("benchmarks/results")
    names = argv[1:] or SPECS
    results: dict[str, dict[tuple, dict]] = {}
    for effort in ("quick", "full"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TILEGEN_TUNE": effort, "TILEGEN_CACHE_DIR": cache}
            lines = subprocess.run([sys.executable, __file__, "--child", effort, *names], env=env, check=True,
                                   capture_output=True, text=True).stdout.splitlines()
        results[effort] = {(r["kernel"], r["dtype"], r["shape"]): r for r in map(json.loads, lines)}
    device = torch.cuda.get_device_name()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"tune_effort_{device.replace(' ', '_')}.csv"
    header = ["kernel", "dtype", "shape", "shipped", "quick ms", "full ms", "quick / full", "quick config",
              "full config"]
    with path.open("w", newline="") as handle:
        handle.write(f"# {device}, torch {torch.__version__}, triton {triton.__version__}\n")
        writer = csv.writer(handle)
        writer.writerow(header)
        for key, quick in results["quick"].items():
            full = results["full"][key]
            row = [*key, quick["shipped"], f"{quick['ms']:.4f}", f"{full['ms']:.4f}",
                   f"{quick['ms'] / full['ms']:.2f}", quick["config"], full["config"]]
            writer.writerow(row)
            print(" | ".join(map(str, row[:7])), flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
