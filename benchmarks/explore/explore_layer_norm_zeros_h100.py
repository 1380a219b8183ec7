"""What autograd's zeros for layer_norm's unread output gradients (dmu, drstd) cost a training step:
the generated eager Function (``set_materialize_grads(False)``: no zeros) against the same Function
as it was before (zeros made for both), at 4096 x 4096 and 16384 x 4096 f16, in one process, rounds
taking turns: the host's time to enqueue one step (GPU idle before it; median of 30), and do_bench
(L2 flushed) as benchmarks/backward.py times it. Both call the Function's apply directly."""

import statistics
import sys
import time
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tilegen.runner import load_module  # noqa: E402


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    module = load_module(ROOT / "generated" / "layer_norm.py")

    class Before(torch.autograd.Function):  # the Function before this change: autograd's zeros for dmu, drstd
        @staticmethod
        def forward(x, weight, bias, eps):
            return module.layer_norm(x, weight, bias, eps)

        setup_context = staticmethod(module._layer_norm_setup_context)

        @staticmethod
        def backward(ctx, *grads):
            return module._layer_norm_backward(ctx, *grads, eager=True)

    applies = {"no zeros (now)": module._layer_norm_apply, "zeros (before)": module._rt.autograd_apply(Before)}
    for m in (4096, 16384):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
        leaves = [x.clone().requires_grad_(), (1 + torch.randn(4096, device="cuda") / 4).half().requires_grad_(),
                  (torch.randn(4096, device="cuda") / 4).half().requires_grad_()]
        dy = torch.randn_like(x)
        steps = {name: (lambda a=apply: a(*leaves, 1e-5)[0].backward(dy)) for name, apply in applies.items()}
        enqueue = {name: [] for name in steps}
        bench = {name: [] for name in steps}
        for step in steps.values():
            for _ in range(5):
                step()
        for _ in range(5):
            for name, step in steps.items():
                times = []
                for _ in range(30):
                    for t in leaves:
                        t.grad = None
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - start)
                enqueue[name].append(statistics.median(times) * 1e6)
                bench[name].append(triton.testing.do_bench(step, grad_to_none=leaves, warmup=10, rep=100) * 1e3)
        for name in steps:
            print(f"M={m:5d} {name:16s} enqueue {statistics.median(enqueue[name]):7.1f} us "
                  f"(rounds {', '.join(f'{v:.0f}' for v in enqueue[name])})  do_bench "
                  f"{statistics.median(bench[name]):7.1f} us (rounds {', '.join(f'{v:.0f}' for v in bench[name])})",
                  flush=True)


if __name__ == "__main__":
    main()
