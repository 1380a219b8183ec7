"""Debug (session 33): min_dim1 through torch.compile (Inductor) disagreed with its launcher at
[3, 33, 97] on the H100; which autotune config, and what code Inductor emits."""
import sys

import torch
import triton

sys.path.insert(0, '.')
from tilegen.runner import load_module

mod = load_module('generated/min_dim1.py')
torch.manual_seed(0)
x = torch.randn(3, 33, 97, device='cuda')
want = torch.amin(x, dim=1)
kernel = mod.min_dim1_kernel
configs = list(kernel.configs)
for i, config in enumerate(configs):
    kernel.configs = [config]
    torch._dynamo.reset()
    f = torch.compile(lambda t: torch.ops.tilegen.min_dim1(t), backend='inductor', fullgraph=True)
    y = f(x)
    print(i, config, 'mismatches', (y != want).sum().item(), flush=True)
kernel.configs = configs
# sum_dim1 at the same shape, for comparison
smod = load_module('generated/sum_dim1.py')
torch._dynamo.reset()
f = torch.compile(lambda t: torch.ops.tilegen.sum_dim1(t), backend='inductor', fullgraph=True)
print('sum_dim1 max error', (f(x) - x.sum(1)).abs().max().item(), triton.__version__, torch.__version__)

# which rows of D1 the compiled result covers: config 1 alone (BK = 16, BN = 256: one program per row of tiles)
kernel.configs = [configs[1]]
torch._dynamo.reset()
f = torch.compile(lambda t: torch.ops.tilegen.min_dim1(t), backend='inductor', fullgraph=True)
y = f(x)
for stop in (16, 32, 33):
    for start in (0, 16, 32):
        if start < stop:
            same = torch.equal(y, torch.amin(x[:, start:stop], dim=1))
            print(f'rows {start}:{stop}', 'equal' if same else '', flush=True)
print('y[0, :8]', y[0, :8].tolist())
print('want[0, :8]', want[0, :8].tolist())
print('min rows 0:16', torch.amin(x[:, 0:16], dim=1)[0, :8].tolist())
print('min rows 16:32', torch.amin(x[:, 16:32], dim=1)[0, :8].tolist())
print('min row 32', x[0, 32, :8].tolist())
