"""The MoE grouped GEMM (specs/moe_grouped_gemm.tile, torch._grouped_mm's jagged form): tokens
sorted by expert, expert e's rows from ends[e - 1] to ends[e], each multiplied by its expert's
weight. Compared with an independent reference (a torch loop over the experts, in float64) at
every block size, with an expert without rows, one of one row, and row counts off every block;
the backward (dx by the same grouped GEMM against w transposed, dw per expert) against torch
autograd through that loop."""

import os

import pytest
import torch

from tests.conftest import config_indices, force_config

#: rows per expert: an empty expert first and in the middle, one of one row, counts off every block
COUNTS = [0, 7, 1, 0, 40, 19]
K, N = 24, 40
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _inputs(counts, dtype, seed, device="cpu", transposed=False):
    generator = torch.Generator().manual_seed(seed)
    rows = sum(counts)
    x = torch.randn(rows, K, generator=generator).to(dtype).to(device)
    if transposed:  # nn.Linear's layout, [E, N, K], read as [E, K, N] through strides
        w = torch.randn(len(counts), N, K, generator=generator).to(dtype).to(device).transpose(1, 2)
    else:
        w = torch.randn(len(counts), K, N, generator=generator).to(dtype).to(device)
    ends = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
    return x, w, ends


def _loop(x, w, ends):
    """Each expert's rows times its weight, one torch matmul per expert, in float64."""
    starts = [0, *ends[:-1].tolist()]
    parts = [x[s:e].double() @ w[i].double() for i, (s, e) in enumerate(zip(starts, ends.tolist(), strict=True))]
    return torch.cat(parts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_each_expert_multiplies_its_own_rows(generated, monkeypatch, dtype):
    module = generated("moe_grouped_gemm")
    x, w, ends = _inputs(COUNTS, dtype, seed=1)
    want = _loop(x, w, ends)
    tol = TOLERANCE[dtype]
    for index in config_indices(module):
        force_config(monkeypatch, module, index)
        got = module.moe_grouped_gemm(x, w, ends, max(COUNTS))
        assert got.dtype == dtype and got.shape == (sum(COUNTS), N)
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol, msg=f"config {index}")
    torch.testing.assert_close(module.reference(x, w, ends, max(COUNTS)).double(), want, rtol=tol, atol=tol)


def test_weights_in_linear_layout_and_a_loose_bound(generated):
    """w as nn.Linear keeps it ([E, N, K], transposed by a view) gives the same product; L above the
    most rows an expert has changes nothing (programs past every expert's rows return)."""
    module = generated("moe_grouped_gemm")
    x, w, ends = _inputs(COUNTS, torch.float32, seed=2, transposed=True)
    assert not w.is_contiguous()
    exact = module.moe_grouped_gemm(x, w, ends, max(COUNTS))
    torch.testing.assert_close(exact.double(), _loop(x, w, ends), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.moe_grouped_gemm(x, w, ends, 97), exact, rtol=0, atol=0)


def test_programs_past_an_experts_rows_return_at_once(generated):
    source = open(generated("moe_grouped_gemm").__file__).read()
    assert "if pid_m * BM >= n_e:  # every store is guarded by m < n_e" in source
    dw = open(generated("moe_grouped_gemm_backward_dw").__file__).read()
    assert "for m in range(0, min(L // BM, tl.cdiv(n_e, BM))):" in dw  # dw walks its expert's rows only


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_are_torchs(generated, monkeypatch, dtype):
    """dx and dw against torch autograd through the loop; an expert without rows has dw 0."""
    module = generated("moe_grouped_gemm")
    backward = [generated(name) for name in ("moe_grouped_gemm_backward_dx", "moe_grouped_gemm_backward_dw")]
    x, w, ends = _inputs(COUNTS, dtype, seed=3)
    dy = torch.randn(sum(COUNTS), N, generator=torch.Generator().manual_seed(4)).to(dtype)
    theirs = [t.double().requires_grad_() for t in (x, w)]
    _loop(*theirs, ends).backward(dy.double())
    tol = 10 * TOLERANCE[dtype]
    for index in config_indices(backward[1]):
        for kernel in (module, *backward):
            force_config(monkeypatch, kernel, index % len(kernel._CONFIGS))
        ours = [t.clone().requires_grad_() for t in (x, w)]
        module.moe_grouped_gemm(*ours, ends, max(COUNTS)).backward(dy)
        for name, mine, want in zip(("dx", "dw"), ours, theirs, strict=True):
            torch.testing.assert_close(mine.grad.double(), want.grad, rtol=tol, atol=tol, msg=f"{name}, config {index}")
        assert ours[1].grad[0].abs().max() == 0 and ours[1].grad[3].abs().max() == 0  # experts without rows


def test_nan_and_inf_stay_in_their_experts_rows(generated):
    """A NaN in one expert's input rows and an inf in another expert's weight reach only the rows
    of those experts, as torch's loop gives them."""
    module = generated("moe_grouped_gemm")
    x, w, ends = _inputs(COUNTS, torch.float32, seed=5)
    x[3, 2] = float("nan")  # expert 1's rows are 0-6
    w[5, 0, 7] = float("inf")  # expert 5's rows are 48-66
    got = module.moe_grouped_gemm(x, w, ends, max(COUNTS))
    want = _loop(x, w, ends)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert got[3].isnan().all() and not got[:3].isnan().any() and not got[7:].isnan().any()


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_grouped_gemm_at_every_config(generated, dtype):
    """Mixtral-like routing (8 experts, uneven loads, one empty) at every config, forward and
    backward, against the float64 loop; and torch._grouped_mm where this torch has it (bf16)."""
    module = generated("moe_grouped_gemm")
    counts = [300, 0, 1, 129, 1024, 77, 511, 2]
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(sum(counts), 256, generator=generator).to(dtype).cuda()
    w = (torch.randn(len(counts), 512, 256, generator=generator) / 16).to(dtype).cuda().transpose(1, 2)
    ends = torch.tensor(counts).cumsum(0).to(torch.int32).cuda()
    want = _loop(x, w, ends)
    tol = 3e-2 if dtype == torch.bfloat16 else 2e-2  # f32 inputs run the dot in tf32
    for index in range(len(module._CONFIGS)):
        try:
            got = module.moe_grouped_gemm(x, w, ends, max(counts), config=index)
        except Exception as error:  # a config needing more shared memory than the GPU has (f32)
            assert "OutOfResources" in type(error).__name__, error
            continue
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol, msg=f"config {index}")
    ours = [t.clone().requires_grad_() for t in (x, w)]
    dy = torch.randn(sum(counts), 512, device="cuda").to(dtype)
    module.moe_grouped_gemm(*ours, ends, max(counts)).backward(dy)
    theirs = [t.double().requires_grad_() for t in (x, w)]
    _loop(*theirs, ends).backward(dy.double())
    for mine, other in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad.double(), other.grad, rtol=tol, atol=tol * 16)
    if dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm"):
        grouped = torch._grouped_mm(x, w, offs=ends)
        torch.testing.assert_close(module.moe_grouped_gemm(x, w, ends, max(counts)), grouped, rtol=2e-2, atol=2e-2)


def test_tilegen_run_draws_rows_within_their_bound(generated):
    """The inputs `tilegen run` draws: sorted ends over all of x's rows, no expert past L (which the
    runner raises to hold the rows it draws), so that every row of y is written and checked."""
    from tests.conftest import spec_named
    from tilegen.model import specialize
    from tilegen.runner import default_sizes, random_inputs

    spec = specialize(spec_named("moe_grouped_gemm"), {"T": "f32"})
    sizes = default_sizes(spec, 2)
    inputs = random_inputs(spec, sizes, "cpu")
    ends = inputs["ends"]
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    assert (counts >= 0).all() and int(ends[-1]) == sizes["S"] and int(counts.max()) <= inputs["L"]
    y = generated("moe_grouped_gemm").moe_grouped_gemm(*(inputs[n] for n in ("x", "w", "ends", "L")))
    torch.testing.assert_close(y.double(), _loop(inputs["x"], inputs["w"], ends), rtol=1e-5, atol=1e-5)
