"""Does statement order in the loop body matter? The attention specs as written against the same
specs with the ``acc = ...`` line before the ``l_i = ...`` line (issue 11), H100.

Both orders compute the same thing; ``acc`` first leaves ``sum(p, dim=n)`` after the second dot,
which a local sm90 compile (Triton 3.9) gives 106 registers instead of 116 at 64x64 w4 s2, D = 64
(causal). For each shape and each of three configs this prints the two orders and tutorial 06 (a
one-config autotuner, where it accepts the config), as TFLOP/s, medians of interleaved rounds of
``do_bench``. Shapes as in ``benchmarks/attention.py`` (B * S = 16384, H * D = 2048, f16).
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from explore_attention_configs_h100 import interleaved  # noqa: E402

from tests.reference import attention as ref_attention  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

CONFIGS = {64: [(64, 64, 4, 2), (64, 128, 4, 2), (128, 128, 4, 3)],
           128: [(128, 64, 4, 2), (128, 128, 8, 3), (64, 64, 4, 3)]}
SHAPES = [(1024, 64, True), (2048, 64, True), (4096, 64, True), (1024, 128, True), (2048, 128, True),
          (16384, 128, True), (1024, 64, False), (4096, 128, False)]


def build(tmp: Path) -> dict:
    """Both specs as written and with the ``acc`` line moved above the ``l_i`` line."""
    out = {}
    for order in ("written", "acc_first"):
        (tmp / order / "specs").mkdir(parents=True)
        for name in ("attention", "attention_causal"):
            text = (ROOT / "specs" / f"{name}.tile").read_text()
            if order == "acc_first":
                l_line = re.search(r"    l_i = [^\n]*\n", text).group(0)
                acc_line = re.search(r"    acc = [^\n]*\n", text).group(0)
                text = text.replace(l_line + acc_line, acc_line + l_line)
                assert acc_line + l_line in text
            (tmp / order / "specs" / f"{name}.tile").write_text(text)
        subprocess.run([sys.executable, "-m", "tilegen.cli", "build", str(tmp / order / "specs"), "-o",
                        str(tmp / order / "gen")], check=True, cwd=ROOT)
        for name in ("attention", "attention_causal"):
            path = tmp / order / "gen" / f"{name}_{order}.py"  # a module name of its own
            path.write_text((tmp / order / "gen" / f"{name}.py").read_text().replace(f"{name}-", f"{name}_{order}-"))
            out[order, name] = load_module(path)
    return out


def at(mod, name, key, cfg, q, k, v, scale):
    """The launcher of ``mod`` run at config ``cfg`` (its tuning cache set before each call)."""
    index = next(i for i, c in enumerate(mod._CONFIGS)
                 if (c.kwargs["BM"], c.kwargs["BN"], c.num_warps, c.num_stages) == cfg)

    def run():
        mod._TUNED[key] = index
        return getattr(mod, name)(q, k, v, scale)

    return run


def tutorial_at(cfg, q, k, v, causal, scale):
    bm, bn, w, st = cfg
    one = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st,
                        pre_hook=ref_attention._host_descriptor_pre_hook)
    tuner = triton.autotune(configs=[one], key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT", "warp_specialize", "STAGE"])(
        ref_attention._attn_fwd)

    def run():
        saved = ref_attention._attn_fwd_autotuned
        ref_attention._attn_fwd_autotuned = lambda: tuner
        try:
            return ref_attention.attention(q, k, v, causal, scale)
        finally:
            ref_attention._attn_fwd_autotuned = saved

    return run


def main() -> None:
    mods = build(Path(tempfile.mkdtemp(prefix="tilegen-attn-order-")))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          "TFLOP/s, median of 5 interleaved rounds", flush=True)
    for s, d, causal in SHAPES:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        name = "attention_causal" if causal else "attention"
        key = (q.device, s, d, torch.float16) if causal else (q.device, s, s, d, torch.float16)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        for cfg in CONFIGS[d]:
            fns = [at(mods[order, name], name, key, cfg, q, k, v, scale) for order in ("written", "acc_first")]
            bm, bn, _, _ = cfg
            if bn <= d and (bm >= bn or not causal):
                fns.append(tutorial_at(cfg, q, k, v, causal, scale))
            errs = [(fn().float() - expected.float()).abs().max().item() for fn in fns]
            times = interleaved(*fns)
            tf = [flops / t / 1e9 for t in times]
            tut = f"tutorial {tf[2]:6.1f}  acc_first/tutorial {times[2] / times[1]:.3f}" if len(tf) > 2 else ""
            print(f"S={s:<6d} D={d:<4d} causal={causal!s:5} {cfg}: written {tf[0]:6.1f}  acc_first {tf[1]:6.1f} "
                  f"(x{times[0] / times[1]:.3f})  {tut}  max err {max(errs):.1e}", flush=True)


if __name__ == "__main__":
    main()
