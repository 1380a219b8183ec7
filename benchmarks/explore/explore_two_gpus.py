"""Two GPUs: which call leaves a launch on the wrong device (issue "a spec means one thing",
item 8). With cuda:0 current, call each kernel's generated function and custom op on tensors on
cuda:1 (default stream, then a side stream), printing the current device around each call and the
full traceback of any error, then synchronizing after each call so a CUDA error names its call."""

import sys
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_gpu_stress import KERNELS, _kernels  # noqa: E402

names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(KERNELS)
kernels = _kernels(names)
side = torch.cuda.Stream(device=1)
with torch.cuda.device(0):
    for attempt in range(2):
        for name, kernel in kernels.items():
            for path in ("function", "op"):
                for stream in ("default", "side"):
                    args = kernel.inputs(torch.device("cuda", 1), attempt)
                    launch = kernel.module.op if path == "op" else getattr(kernel.module, name)
                    before = torch.cuda.current_device()
                    try:
                        if stream == "side":
                            side.wait_stream(torch.cuda.default_stream(1))
                            with torch.cuda.stream(side):
                                inside = torch.cuda.current_device()
                                out = launch(*args)
                        else:
                            inside = before
                            out = launch(*args)
                        torch.cuda.synchronize(0)
                        torch.cuda.synchronize(1)
                        ref = kernel.module.reference(*args)
                        outs = out if isinstance(out, tuple) else (out,)
                        refs = ref if isinstance(ref, tuple) else (ref,)
                        err = max((o.float() - r.float()).abs().max().item() for o, r in zip(outs, refs, strict=True))
                        print(f"{attempt} {name:18s} {path:8s} {stream:7s} device {before}->{inside}->"
                              f"{torch.cuda.current_device()} ok, max error {err:.3g}", flush=True)
                    except Exception:
                        print(f"{attempt} {name:18s} {path:8s} {stream:7s} device {before} FAILED", flush=True)
                        traceback.print_exc()
                        sys.exit(1)
