"""Reductions over the middle dimension of [B, D1, D2] (KernelBench level 1's problems 47, 48,
49 and 53: torch.sum, torch.mean, torch.max and torch.min over dim 1), a loop over tiles of D1
carrying a float32 accumulator, against torch at every tune config in Triton's interpreter:
sizes with tails at every tile shape, values of both signs, infinities.
"""

import pytest
import torch

from tests.conftest import force_config

ORACLES = {
    "sum_dim1": lambda x: torch.sum(x.double(), dim=1),
    "mean_dim1": lambda x: torch.mean(x.double(), dim=1),
    "max_dim1": lambda x: torch.amax(x, dim=1).double(),
    "min_dim1": lambda x: torch.amin(x, dim=1).double(),
}


@pytest.mark.parametrize("kernel", sorted(ORACLES))
@pytest.mark.parametrize(("b", "d1", "d2"), [(2, 7, 5), (3, 100, 33), (1, 129, 70)])
def test_middle_dim_reduction_matches_torch_at_every_config(generated, monkeypatch, kernel, b, d1, d2):
    module = generated(kernel)
    g = torch.Generator().manual_seed(d1 + d2)
    x = torch.randn(b, d1, d2, generator=g) * 4
    want = ORACLES[kernel](x)
    scale = float(x.abs().sum(dim=1).max())
    for index in range(len(module._CONFIGS)):
        force_config(monkeypatch, module, index)
        y = getattr(module, kernel)(x)
        torch.testing.assert_close(y.double(), want, rtol=0, atol=1e-6 * scale)
    torch.testing.assert_close(module.reference(x).double(), want, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("kernel", sorted(ORACLES))
def test_infinities_reach_the_result(generated, kernel):
    x = torch.ones(1, 40, 3)
    x[0, 33, 0] = float("inf")  # in the last, partial tile of the default 32-row tiles
    x[0, 2, 1] = float("-inf")
    y = getattr(generated(kernel), kernel)(x)
    torch.testing.assert_close(y.double(), ORACLES[kernel](x))
