"""Debug (session 33): under torch.compile, a tilegen op compiled after another of the same
signature (sum_dim1 then min_dim1, torch._dynamo.reset() between) ran the first op's kernel.
Each variant in a fresh process with a fresh Inductor cache dir: which cache is at fault."""
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, torch
sys.path.insert(0, '.')
import torch._functorch.config as fconfig
import torch._inductor.config as iconfig
variant = sys.argv[1]
if variant == 'no_aot_cache':
    fconfig.enable_autograd_cache = False
if variant == 'no_fx_cache':
    iconfig.fx_graph_cache = False
if variant == 'no_caches':
    fconfig.enable_autograd_cache = False
    iconfig.fx_graph_cache = False
from tilegen.runner import load_module
for name in ('sum_dim1', 'min_dim1', 'max_dim1'):
    load_module(f'generated/{name}.py')
torch.manual_seed(0)
x = torch.randn(3, 33, 97, device='cuda')
wants = {'sum_dim1': x.sum(1), 'min_dim1': x.amin(1), 'max_dim1': x.amax(1)}
out = []
for name in ('sum_dim1', 'min_dim1', 'max_dim1'):
    torch._dynamo.reset()
    op = getattr(torch.ops.tilegen, name)
    f = torch.compile(lambda t: op(t), backend='inductor', fullgraph=True)
    for _ in range(3):  # stale memory of NaN where the result will be: a kernel that writes nothing shows it
        torch.full((3, 97), float('nan'), device='cuda')
    y = f(x)
    verdict = 'ok' if torch.allclose(y, wants[name], atol=1e-5) else 'WRONG'
    err = (y - wants[name]).abs().nan_to_num(-1).max().item()
    out.append(f"{name} {verdict} nan={torch.isnan(y).sum().item()} err={err:.3g}")
print(variant, '; '.join(out), flush=True)
"""
for variant in ("default", "no_caches", "default"):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp())
    result = subprocess.run([sys.executable, "-c", CHILD, variant], env=env, capture_output=True, text=True)
    print(result.stdout.strip() or result.stderr[-800:], flush=True)
