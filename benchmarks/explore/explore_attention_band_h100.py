"""The causal spec's diagonal band as a loop of constant trip count (issue 11), H100: tried, not kept.

``generated/attention_causal.py`` runs the band (the key tiles where ``n <= m`` holds for some
lanes) with the bounds ``[split, min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN)))``. Tutorial
06 gives its diagonal stage a constant trip count (``BLOCK_M // BLOCK_N``), which LLVM
straightens for a band of one tile. Variants, made from the generated file by text substitution:
- ``loop``: as generated;
- ``band``: ``[split, split + tl.cdiv(BM, BN))``, a constant trip count (tiles past the band or
  past S change nothing: they are all masked);
- ``bandmin``: the constant band clamped at the end of S, ``min(tl.cdiv(S, BN), split + tl.cdiv(BM, BN))``;
- ``loop_ns1``: as generated, the band loop not software-pipelined (``tl.range(..., num_stages=1)``);
- ``loop_if``, ``band_sel`` (``VARIANTS=loop_if,band_sel``): the unmasked loop inside ``if split > 0:``,
  and the band as generated or, where ``BN >= BM``, one tile (a constant trip count).
Each runs at one forced config against tutorial 06 at the same config; kernel time from CUDA
graphs (``do_bench_cudagraph``), medians of 5 interleaved rounds, TFLOP/s.

Finding (``explore_attention_band_h100.log``): ``band`` is 4-16% slower. Its one-trip band is
still software-pipelined, then straightened, and ptxas serializes every wgmma of the kernel
(``ptxas -v``: "C7515 Potential Performance Loss: wgmma.mma_async instructions are serialized
due to non wgmma instructions defining accumulator registers of a wgmma between start and end
of the pipeline stage"; the SASS has one ``WARPGROUP.DEPBAR`` per ``HGMMA``). Not adopted.
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from explore_attention_order_h100 import at, tutorial_at  # noqa: E402

from tilegen.runner import load_module  # noqa: E402

SPLIT = "min(S // BN, (pid_m * BM + 1) // BN)"
BAND = f"for n in range({SPLIT}, min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))):"
VARIANTS = {
    "band": f"for n in range({SPLIT}, {SPLIT} + tl.cdiv(BM, BN)):",
    "loop": BAND,
    "bandmin": f"for n in range({SPLIT}, min(tl.cdiv(S, BN), {SPLIT} + tl.cdiv(BM, BN))):",
    "loop_ns1": f"for n in tl.range({SPLIT}, min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN)), num_stages=1):",
}
SHAPES_ALL = [(1024, 64, (64, 64, 4, 2)), (1024, 64, (128, 128, 4, 3)), (1024, 128, (64, 64, 4, 3)),
              (1024, 128, (128, 64, 4, 2)), (2048, 64, (64, 128, 4, 2)), (4096, 128, (128, 64, 4, 2)),
              (16384, 64, (64, 128, 4, 2)), (1000, 64, (64, 64, 4, 2))]


SHAPES = [s for s in SHAPES_ALL if not os.environ.get("SHAPES") or f"{s[0]}:{s[1]}" in os.environ["SHAPES"].split(",")]


MAIN = f"    # tiles of n inside S where n <= m holds everywhere: no masks\n    for n in range(0, {SPLIT}):\n"


def guarded(source: str, band: str) -> str:
    """The descriptor kernel with its unmasked loop inside ``if split > 0:`` (no path out of the
    pipelined loop that skips it) and the band loop's header ``band``."""
    start = source.index(MAIN)
    mid = source.index("    # tiles where n <= m holds for some lanes", start)
    end = source.index("    # specs/attention_causal.tile:30", mid)
    main = "".join("    " + line if line.strip() else line for line in source[start:mid].splitlines(keepends=True))
    return (source[:start] + f"    if {SPLIT} > 0:\n" + main + source[mid:end].replace(BAND, band, 1)
            + source[end:])


#: the guarded forms (see the log's second part): the band a constant one tile where BN >= BM
GUARDED = {
    "loop_if": BAND,
    "band_sel": f"for n in range({SPLIT}, {SPLIT} + 1 if BN >= BM else min(tl.cdiv(S, BN), "
                "tl.cdiv(pid_m * BM + BM, BN))):",
}


def build(tmp: Path) -> dict:
    source = (ROOT / "generated" / "attention_causal.py").read_text()
    assert source.count(BAND) == 2
    mods = {}
    chosen = os.environ.get("VARIANTS", "band,loop,bandmin,loop_ns1").split(",")
    for name, header in {**VARIANTS, **GUARDED}.items():
        if name not in chosen and name != "loop":
            continue
        path = tmp / f"causal_{name}.py"
        text = guarded(source, header) if name in GUARDED else source.replace(BAND, header)
        path.write_text(text.replace('"attention_causal-', f'"attention_causal_{name}-'))
        mods[name] = load_module(path)
    return mods


def main() -> None:
    mods = build(Path(tempfile.mkdtemp(prefix="tilegen-attn-band-")))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "TFLOP/s from CUDA graphs, median of 5 interleaved rounds", flush=True)
    for s, d, cfg in SHAPES:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / 2
        key = (q.device, s, d, torch.float16)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        fns = {n: at(mod, "attention_causal", key, cfg, q, k, v, scale) for n, mod in mods.items()}
        if cfg[1] <= d and cfg[0] >= cfg[1] and s % cfg[0] == 0:
            fns["tutorial"] = tutorial_at(cfg, q, k, v, True, scale)
        errs = {n: (fn().float() - expected.float()).abs().max().item() for n, fn in fns.items()}
        times = {n: [] for n in fns}
        for _ in range(5):
            for n, fn in fns.items():
                times[n].append(triton.testing.do_bench_cudagraph(fn, rep=40))
        med = {n: statistics.median(t) for n, t in times.items()}
        text = "  ".join(f"{n} {flops / t / 1e9:6.1f}" for n, t in med.items())
        ratios = "  ".join(f"{n}/loop x{med['loop'] / t:.3f}" for n, t in med.items() if n not in ("loop", "tutorial"))
        print(f"S={s:<6d} D={d:<4d} {cfg}: {text}  {ratios}  "
              f"max err {max(errs.values()):.1e}", flush=True)


if __name__ == "__main__":
    main()
