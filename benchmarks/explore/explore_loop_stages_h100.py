"""The norm backwards with their tile loop pipelined (``num_stages=LOOP_STAGES``): does every row
length still tune and compute what the reference does, where a pipelined config's shared memory
does not fit (about 232 KB on the H100: 3 stages x 4 rows x 8192 f16 x 2 loads do not)? For
rms_norm_backward and layer_norm_backward at M = 2048 and N = 1000, 4096, 8192, 16384, 32768, f16
and f32, with an empty tuning cache: the launcher's first call (it tunes), its result against the
module's reference under tilegen.tolerance (demo's rule), the config it kept, and the graphed time
of a second call."""

import os
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="loop-stages-")
from tilegen import tolerance  # noqa: E402
from tilegen.parser import parse  # noqa: E402
from tilegen.runner import load_module  # noqa: E402


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    for name in ("rms_norm_backward", "layer_norm_backward"):
        module = load_module(ROOT / "generated" / f"{name}.py")
        spec = parse((ROOT / "specs" / f"{name}.tile").read_text(), f"specs/{name}.tile")
        for dtype in (torch.float16, torch.float32):
            for n in (1000, 4096, 8192, 16384, 32768, 65536):
                m = 2048
                if name == "layer_norm_backward" and dtype == torch.float32:
                    continue  # the spec takes f16
                g = torch.Generator(device="cuda").manual_seed(n)
                dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
                x = torch.randn(m, n, device="cuda", dtype=dtype, generator=g) + 0.5
                w = (1 + torch.randn(n, device="cuda", generator=g) / 4).to(dtype)
                if name == "rms_norm_backward":
                    args = (dy, x, w, 1e-6)
                else:
                    mu = x.float().mean(1)
                    rstd = torch.rsqrt(x.float().var(1, unbiased=False) + 1e-5)
                    args = (dy, x, w, mu, rstd)
                launcher = getattr(module, name)
                try:
                    out = launcher(*args)
                    torch.cuda.synchronize()
                    result = tolerance.compare(spec, args, out, module.reference(*args), module.reference)
                    index = module._TUNED.get((dy.device, n, dtype)) if name == "rms_norm_backward" else \
                        module._TUNED.get((dy.device, n))
                    config = module._CONFIGS[index].all_kwargs() if index is not None else None
                    ms = triton.testing.do_bench_cudagraph(lambda a=args, f=launcher: f(*a), rep=50)
                    verdict = "PASS" if result.passed else "FAIL " + result.detail
                    print(f"{name} {str(dtype)[6:]:8s} N={n:6d}: {verdict} "
                          f"{ms * 1e3:8.1f} us  config {config}", flush=True)
                except Exception as error:
                    print(f"{name} {str(dtype)[6:]:8s} N={n:6d}: ERROR {type(error).__name__}: {str(error)[:300]}",
                          flush=True)


if __name__ == "__main__":
    main()
