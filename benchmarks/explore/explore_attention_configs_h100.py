"""Tuning or kernel? The attention specs against tutorial 06 config by config (issue 11), H100.

For each shape of ``benchmarks/attention.py`` (or those named on the command line as
``S:D:causal``, e.g. ``4096:64:0``) this prints:
- ``tuned``: tilegen's launcher and the tutorial, each with its own autotuner's pick;
- ``forced``: every config of the union of the two config spaces, run through tilegen's launcher
  (its tuning cache set by hand) and through the tutorial (a one-config autotuner), where the
  tutorial accepts it (its ``prune_invalid_configs``: BN <= D, BM >= BN when causal);
- for causal shapes, two schedules of the generated kernel at its three best configs:
  ``rev`` runs the query blocks of each (batch, head) in reverse (the longest loops first) and
  ``revg`` makes the query block the slowest grid axis, reversed (all long loops first).

The specs are rebuilt into a temporary folder with the union of the configs (the 21 the tutorial
keeps on an H100 plus the specs' ``128x64 w8 s3``). Times are medians of ``do_bench``.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from tests.reference import attention as ref_attention  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

TUTORIAL = [(bm, bn, w, s) for bm in (64, 128) for bn in (32, 64, 128) for s in (2, 3, 4) for w in (4, 8)
            if not (bm * bn < 128 * 128 and w == 8)]
UNION = sorted(set(TUTORIAL) | {(128, 64, 8, 3)})
FORCED = os.environ.get("FORCED", "1") == "1"  # FORCED=0: the tuned picks and schedules only
SHAPES = [(s, d, c) for c in (False, True) for d in (64, 128) for s in (1024, 2048, 4096, 8192, 16384)]


def build(tmp: Path) -> dict:
    """The two attention specs with the union configs, built into ``tmp``; plus the schedule variants."""
    (tmp / "specs").mkdir()
    lines = [f"    config BM = {bm}, BN = {bn}, num_warps = {w}, num_stages = {s}" for bm, bn, w, s in UNION]
    for name in ("attention", "attention_causal"):
        text = (ROOT / "specs" / f"{name}.tile").read_text()
        text = re.sub(r"(    default config [^\n]*\n)(    config [^\n]*\n)+",
                      lambda m: m.group(1) + "\n".join(lines) + "\n", text)
        (tmp / "specs" / f"{name}.tile").write_text(text)
    subprocess.run([sys.executable, "-m", "tilegen.cli", "build", str(tmp / "specs"), "-o", str(tmp / "gen")],
                   check=True, cwd=ROOT)
    source = (tmp / "gen" / "attention_causal.py").read_text()
    rev = source.replace("pid_m = tl.program_id(0)", "pid_m = tl.num_programs(0) - 1 - tl.program_id(0)")
    revg = source.replace("pid_m = tl.program_id(0)\n    pid_z = tl.program_id(1)\n    pid_h = tl.program_id(2)",
                          "pid_m = tl.num_programs(2) - 1 - tl.program_id(2)\n    pid_z = tl.program_id(0)\n"
                          "    pid_h = tl.program_id(1)")
    revg = revg.replace('// meta["BM"], B, H)', '// meta["BM"])').replace('// config["BM"], B, H)', '// config["BM"])')
    revg = revg.replace("grid = lambda meta: ((S", "grid = lambda meta: (B, H, (S")
    revg = revg.replace("grid = ((S", "grid = (B, H, (S")
    assert revg.count("grid = (B, H, (S") == 2 and revg.count("tl.num_programs(2)") == 2
    (tmp / "gen" / "causal_rev.py").write_text(rev.replace("attention_causal-", "causal_rev-"))
    (tmp / "gen" / "causal_revg.py").write_text(revg.replace("attention_causal-", "causal_revg-"))
    return {name: load_module(tmp / "gen" / f"{name}.py") for name in
            ("attention", "attention_causal", "causal_rev", "causal_revg")}


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=[0.5])


def main(shapes) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tilegen-attn-configs-"))
    mods = build(tmp)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{len(UNION)} configs (BM, BN, warps, stages)", flush=True)
    for s, d, causal in shapes:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        tflops = lambda ms: flops / ms / 1e9  # noqa: E731
        name = "attention_causal" if causal else "attention"
        mod = mods[name]
        key = (q.device, s, d, torch.float16) if causal else (q.device, s, s, d, torch.float16)
        ours = lambda mod=mod, name=name: getattr(mod, name)(q, k, v, scale)  # noqa: E731
        tut = lambda: ref_attention.attention(q, k, v, causal, scale)  # noqa: E731
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        ours()
        tut()
        picked = mod._TUNED[key]
        ours_cfg = mod._CONFIGS[picked].all_kwargs()
        tut_cfg = ref_attention._attn_fwd_autotuned().best_config.all_kwargs()
        t_ours, t_tut = interleaved(ours, tut)
        print(f"S={s} D={d} causal={causal}: tuned tilegen {tflops(t_ours):.1f} ({_short(ours_cfg)}) "
              f"tutorial {tflops(t_tut):.1f} ({_short(tut_cfg)}) ratio {t_tut / t_ours:.3f}", flush=True)
        if not FORCED:
            forced = {ours_cfg_tuple(mod, picked): t_ours}
        else:
            forced = force(mod, key, ours, tut, expected, tflops, d, causal)
            mod._TUNED[key] = picked
        best = sorted(forced, key=forced.get)[:3]
        print(f"  best gen {tflops(forced[best[0]]):.1f} {best[0]} (tuned pick {tflops(t_ours):.1f})", flush=True)
        if causal:
            for variant in ("causal_rev", "causal_revg"):
                vmod = mods[variant]
                for cfg in best:
                    index = next(i for i, c in enumerate(vmod._CONFIGS) if ours_cfg_tuple(vmod, i) == cfg)
                    vmod._TUNED[key] = index
                    run = lambda vmod=vmod: vmod.attention_causal(q, k, v, scale)  # noqa: E731
                    err = (run().float() - expected.float()).abs().max().item()
                    t_base, t = interleaved(ours_at(mod, key, cfg, ours), run)
                    print(f"  {variant} {cfg}: {tflops(t):6.1f} against gen {tflops(t_base):6.1f} "
                          f"(x{t_base / t:.3f}) err {err:.1e}", flush=True)
            mod._TUNED[key] = picked


def ours_cfg_tuple(mod, index):
    c = mod._CONFIGS[index]
    return (c.kwargs["BM"], c.kwargs["BN"], c.num_warps, c.num_stages)


def ours_at(mod, key, cfg, ours):
    """``ours`` run at config ``cfg`` (its tuning cache set before each call)."""
    index = next(i for i in range(len(mod._CONFIGS)) if ours_cfg_tuple(mod, i) == cfg)

    def run():
        mod._TUNED[key] = index
        return ours()

    return run


def interleaved(*fns, rounds=5):
    """Median times of ``fns`` over ``rounds`` interleaved rounds of ``bench``."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for t, fn in zip(times, fns, strict=True):
            t.append(bench(fn))
    return [statistics.median(t) for t in times]


def force(mod, key, ours, tut, expected, tflops, d, causal):
    """Every config through tilegen's launcher and (where it accepts it) the tutorial."""
    forced = {}
    tuner = ref_attention._attn_fwd_autotuned
    for index, config in enumerate(mod._CONFIGS[1:], 1):
        mod._TUNED[key] = index
        bm, bn, w, st = (config.kwargs["BM"], config.kwargs["BN"], config.num_warps, config.num_stages)
        try:
            err = (ours().float() - expected.float()).abs().max().item()
        except triton.runtime.errors.OutOfResources as exc:
            print(f"  {bm:3d}x{bn:<3d} w{w} s{st}: {exc}", flush=True)
            continue
        t_gen = bench(ours)
        t_ref = None
        if bn <= d and (bm >= bn or not causal) and (bm, bn, w, st) in TUTORIAL:
            one = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st,
                                pre_hook=ref_attention._host_descriptor_pre_hook)
            ref_attention._attn_fwd_autotuned = lambda one=one: triton.autotune(
                configs=[one], key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT", "warp_specialize", "STAGE"])(
                    ref_attention._attn_fwd)
            tut()
            t_ref = bench(tut)
            ref_attention._attn_fwd_autotuned = tuner
        forced[(bm, bn, w, st)] = t_gen
        ref_text = f"tutorial {tflops(t_ref):6.1f} (gen/tut {t_ref / t_gen:.3f})" if t_ref else ""
        print(f"  {bm:3d}x{bn:<3d} w{w} s{st}: gen {tflops(t_gen):6.1f} {ref_text}  err {err:.1e}", flush=True)
    return forced


def _short(kwargs) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items() if k in ("BM", "BN", "BLOCK_M", "BLOCK_N", "num_warps",
                                                                  "num_stages"))


if __name__ == "__main__":
    wanted = [tuple(int(x) for x in arg.split(":")) for arg in sys.argv[1:]]
    main([(s, d, bool(c)) for s, d, c in wanted] if wanted else SHAPES)
