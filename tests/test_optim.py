"""tilegen.optim.AdamW against torch.optim.AdamW: float32 parameters against its single-tensor step
(foreach=False), bf16 and f16 ones against its fused=True step (both compute in float32 and round
once); parameters of several shapes and memory orders, two groups, a learning rate changed between
steps, parameters without a gradient, a state dict moved from torch's optimizer, and the refusals.
Runs on the GPU with TILEGEN_TEST_GPU=1."""

import copy
import os

import pytest
import torch

from tilegen.optim import AdamW

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"
SHAPES = [(33, 17), (1000,), (5, 7, 3), (1,)]  # tails of the 1024-element block, one element


def _parameters(dtype, seed=0):
    """Parameters of :data:`SHAPES`, a transposed one (dense, not contiguous) and a channels-last
    one; both signs."""
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(s, generator=generator, dtype=torch.float64).to(dtype) for s in SHAPES]
    tensors.append(torch.randn(9, 20, generator=generator, dtype=torch.float64).to(dtype).T)
    tensors.append(torch.randn(2, 3, 4, 5, generator=generator, dtype=torch.float64).to(dtype)
                   .to(memory_format=torch.channels_last))
    return [torch.nn.Parameter(t.to(DEVICE)) for t in tensors]


def _gradients(params, seed):
    """Random gradients in each parameter's memory order, as autograd makes them."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.empty_like(p).copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64)) for p in params]


def _groups(params):
    """Two groups with their own learning rate and weight decay; the last parameter never gets a
    gradient."""
    return [{"params": params[:3], "weight_decay": 0.0},
            {"params": params[3:], "lr": 3e-3, "weight_decay": 0.1}]


def _train(optimizer, params, steps, seed=1):
    """``steps`` steps of random gradients (the same for the same seed), the learning rate halved
    after the first; the last parameter never gets a gradient."""
    for step in range(steps):
        for p, g in zip(params[:-1], _gradients(params[:-1], seed + step), strict=True):
            p.grad = g
        optimizer.step()
        if step == 0:
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] / 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_adamw_is_torchs_update(dtype):
    mine, theirs = _parameters(dtype), _parameters(dtype)
    untouched = mine[-1].detach().clone()
    options = {"lr": 1e-2, "betas": (0.8, 0.99), "eps": 1e-6}
    optimizer = AdamW(_groups(mine), **options)
    _train(optimizer, mine, 4)
    torch_way = {"foreach": False} if dtype == torch.float32 else {"fused": True}
    _train(torch.optim.AdamW(_groups(theirs), **options, **torch_way), theirs, 4)
    # float32: torch rounds after each operation, the kernel once per updated tensor; 16-bit: both
    # round once, after float32 arithmetic in another order (a unit of the dtype apart at most)
    unit = {torch.float32: 1e-5, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[dtype]
    for i, (got, want) in enumerate(zip(mine, theirs, strict=True)):
        assert got.dtype == dtype and got.stride() == want.stride()
        torch.testing.assert_close(got, want, msg=f"parameter {i}", rtol=unit, atol=unit / 10)
    assert torch.equal(mine[-1], untouched) and mine[-1] not in optimizer.state
    state = optimizer.state[mine[0]]
    assert state["step"].item() == 4 and state["exp_avg"].stride() == mine[0].stride()
    assert state["exp_avg"].dtype == dtype and state["exp_avg_sq"].min() >= 0


def test_a_torch_adamw_state_dict_continues_in_tilegen():
    mine, theirs = _parameters(torch.float32), _parameters(torch.float32)
    torch_optimizer = torch.optim.AdamW(_groups(theirs), lr=1e-2, foreach=False)
    _train(torch_optimizer, theirs, 2)
    with torch.no_grad():
        for p, q in zip(mine, theirs, strict=True):
            p.copy_(q)
    optimizer = AdamW(_groups(mine), lr=1e-2)
    optimizer.load_state_dict(copy.deepcopy(torch_optimizer.state_dict()))  # (its tensors, not shared)
    _train(optimizer, mine, 2, seed=10)
    _train(torch_optimizer, theirs, 2, seed=10)
    for i, (got, want) in enumerate(zip(mine, theirs, strict=True)):
        torch.testing.assert_close(got, want, msg=f"parameter {i}", rtol=1e-5, atol=1e-6)
    assert optimizer.state[mine[0]]["step"].item() == 4


def test_step_returns_the_closures_loss():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], device=DEVICE))
    optimizer = AdamW([p], lr=0.1, weight_decay=0.0)

    def closure():
        optimizer.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    assert optimizer.step(closure).item() == 5.0
    # Adam's first step moves every coordinate by lr against its gradient's sign
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, -1.9], device=DEVICE))


@pytest.mark.parametrize(("options", "message"), [
    ({"lr": -1.0}, "Invalid learning rate"),
    ({"betas": (0.9, 1.0)}, "Invalid beta parameter at index 1"),
    ({"eps": -1e-8}, "Invalid epsilon"),
    ({"weight_decay": -0.1}, "Invalid weight_decay"),
])
def test_bad_hyper_parameters_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        AdamW([torch.nn.Parameter(torch.zeros(2))], **options)


def test_a_parameter_the_kernel_cannot_update_is_named():
    params = [torch.nn.Parameter(torch.zeros(3, device=DEVICE)),
              torch.nn.Parameter(torch.zeros(4, 2, dtype=torch.float64, device=DEVICE))]
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer = AdamW(params)
    with pytest.raises(TypeError, match=r"parameter 1 of group 0 \(shape \[4, 2\]\) is torch.float64"):
        optimizer.step()
    params[1].grad = None
    if hasattr(params[0], "grad_dtype"):  # torch 2.10 on checks a gradient's dtype unless told not to
        params[0].grad_dtype = None
    params[0].grad = torch.ones(3, dtype=torch.float64, device=DEVICE)
    with pytest.raises(TypeError, match=r"parameter 0 of group 0 \(shape \[3\]\): its gradient is torch.float64"):
        optimizer.step()


def test_a_gradient_in_another_memory_order_is_refused_and_nothing_moves():
    p = torch.nn.Parameter(torch.randn(6, 5, device=DEVICE))
    before = p.detach().clone()
    p.grad = torch.randn(5, 6, device=DEVICE).T  # [6, 5] column-major: the parameter is row-major
    with pytest.raises(ValueError, match=r"one dense memory order.*grad \(1, 6\)"):
        AdamW([p]).step()
    assert torch.equal(p, before)
