"""How far apart are tilegen and tutorial 06 at the small causal shapes, run after run? (issue 11), H100.

``benchmarks/attention.py`` measured S = 1024, D = 64, causal at 0.982x tutorial 06. At one
config the two kernels compile to the same instructions (``explore_attention_morph_h100``).
This repeats the benchmark's own procedure (each launcher autotuned with its own configs, then
interleaved rounds of ``triton.testing.do_bench``, and the same with CUDA graphs) ``ROUNDS`` times
in one process per shape, and prints every round's ratio, so that the spread is seen beside the
gap. ``python explore_attention_repeat_h100.py S:D ...`` (causal shapes).
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
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-explore-")

from tests.reference import attention as ref_attention  # noqa: E402
from tilegen.runner import load_module  # noqa: E402

ROUNDS = 10


def main(shapes) -> None:
    mod = load_module(ROOT / "generated" / "attention_causal.py")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"tutorial / tilegen time per round ({ROUNDS} rounds): > 1 means tilegen is faster", flush=True)
    for s, d in shapes:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d**-0.5
        flops = 4 * b * h * s * s * d / 2
        ours = lambda: mod.attention_causal(q, k, v, scale)  # noqa: E731
        tut = lambda: ref_attention.attention(q, k, v, True, scale)  # noqa: E731
        ours()
        tut()
        pick = mod._CONFIGS[mod._TUNED[(q.device, s, d, torch.float16)]]
        tpick = ref_attention._attn_fwd_autotuned().best_config
        for name, bench in (("do_bench", lambda fn: triton.testing.do_bench(fn, warmup=10, rep=40)),
                            ("cudagraph", lambda fn: triton.testing.do_bench_cudagraph(fn, rep=40))):
            ratios, t_ours, t_tut = [], [], []
            for _ in range(ROUNDS):
                t_ours.append(bench(ours))
                t_tut.append(bench(tut))
                ratios.append(t_tut[-1] / t_ours[-1])
            print(f"S={s} D={d} causal {name}: tilegen {flops / statistics.median(t_ours) / 1e9:.1f} "
                  f"({pick.kwargs} w{pick.num_warps} s{pick.num_stages}), tutorial "
                  f"{flops / statistics.median(t_tut) / 1e9:.1f} ({tpick.kwargs} w{tpick.num_warps} "
                  f"s{tpick.num_stages}); ratio of medians {statistics.median(t_tut) / statistics.median(t_ours):.3f}; "
                  f"per round {min(ratios):.3f}-{max(ratios):.3f}: " + " ".join(f"{r:.3f}" for r in ratios),
                  flush=True)


if __name__ == "__main__":
    main([tuple(map(int, arg.split(":"))) for arg in sys.argv[1:]] or [(1024, 64), (2048, 64)])
