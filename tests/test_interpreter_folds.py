"""The test run's slice-at-a-time folds (tests/interpreter_folds.py) give what Triton's interpreter
gives with its own element-at-a-time loops, bit for bit: reductions along each axis and over all
(keep_dims or not), scans forwards and reversed, a tuple of values with a tie-breaking index,
and a product of f16 whose rounding depends on the order."""

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from tests import interpreter_folds


@triton.jit
def _multiply(x, y):
    return x * y


@triton.jit
def _max_first_index(v, i, w, j):
    take = (w > v) | ((w == v) & (j < i))
    return tl.where(take, w, v), tl.where(take, j, i)


@triton.jit
def _folds_kernel(x_ptr, prod0_ptr, prod1_ptr, prod_all_ptr, keep_ptr, val_ptr, idx_ptr, scan0_ptr, scan1_ptr,
                  back_ptr, M: tl.constexpr, N: tl.constexpr):
    rows, cols = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(prod0_ptr + cols, tl.reduce(x, 0, _multiply))
    tl.store(prod1_ptr + rows, tl.reduce(x, 1, _multiply))
    tl.store(prod_all_ptr, tl.reduce(x, None, _multiply))
    tl.store(keep_ptr + rows[:, None], tl.reduce(x, 1, _multiply, keep_dims=True))
    index = tl.broadcast_to(cols[None, :], (M, N))
    value, where = tl.reduce((x, index), 1, _max_first_index)
    tl.store(val_ptr + rows, value)
    tl.store(idx_ptr + rows, where)
    tl.store(scan0_ptr + rows[:, None] * N + cols[None, :], tl.associative_scan(x, 0, _multiply))
    tl.store(scan1_ptr + rows[:, None] * N + cols[None, :], tl.associative_scan(x, 1, _multiply))
    tl.store(back_ptr + rows[:, None] * N + cols[None, :], tl.associative_scan(x, 1, _multiply, reverse=True))


def _run(x):
    m, n = x.shape
    outs = [torch.empty(n, dtype=x.dtype), torch.empty(m, dtype=x.dtype), torch.empty(1, dtype=x.dtype),
            torch.empty(m, dtype=x.dtype), torch.empty(m, dtype=x.dtype), torch.empty(m, dtype=torch.int32),
            torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)]
    _folds_kernel[(1,)](x, *outs, M=m, N=n)
    return outs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_folds_give_the_interpreters_results_bit_for_bit(monkeypatch, dtype):
    assert interpreter_folds.install()
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(8, 16, generator=g) + 0.6).to(dtype)
    x[2, 5] = x[2, 9] = x[2].max() + 1  # a tie: the first index
    x[3, 7] = float("nan")
    fast = _run(x)
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", interpreter.ReduceOps.generic_reduce.slow)
    monkeypatch.setattr(interpreter.ScanOps, "generic_scan", interpreter.ScanOps.generic_scan.slow)
    slow = _run(x)
    for got, want in zip(fast, slow, strict=True):
        assert torch.equal(got.view(torch.uint8) if got.is_floating_point() else got,
                           want.view(torch.uint8) if want.is_floating_point() else want)
    torch.testing.assert_close(fast[1], torch.prod(x.double(), dim=1).to(dtype), equal_nan=True)
    assert fast[5][2].item() == 5
