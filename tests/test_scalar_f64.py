"""f64 scalar inputs (``in beta2: f64``): float64 in their own arithmetic and with f64 tensors,
rounded to float32 where they meet f32 tensors (as torch rounds a Python number), and
AdamW's step over f32 and f64 tensors (specs/adamw.tile as it was before it computed 16-bit
tensors in float32) against torch.optim.AdamW's single-tensor step, in place and not, over several
steps. In Triton's interpreter, or on the GPU under ``TILEGEN_TEST_GPU=1``."""

import math
import os

import pytest
import torch

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

SCALED = """kernel scaled
  dtype T in f32, f64
  in  x: T[N]
  in  s: f64
  in  k: i64
  out y: T[N]
  out z: f32[N]
  block BN = 64
  grid  i over N by BN
  y[i] = x[i] * (1 - s) + sqrt(1 - s ** k)
  z[i] = f32(x[i]) * s
"""

#: On the GPU Triton fuses a multiply and an add (one rounding, where torch rounds twice): half a
#: float32 unit of the larger term (up to 4.3 here, where the two nearly cancel, relative error
#: is unbounded).
FUSED = {"rtol": 0, "atol": 0} if DEVICE == "cpu" else {"rtol": 2.4e-7, "atol": 2.4e-7}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_f64_scalar_computes_in_f64_and_meets_f32_tensors_as_torch(compiled, dtype):
    """``1 - s`` and ``sqrt(1 - s ** k)`` of f64 scalars are float64 (Python's numbers), then meet
    ``x`` as torch's Python numbers do: rounded to float32 for f32 ``x``, in float64 for f64 ``x``;
    ``f32(x) * s`` is float32 whatever ``x``: torch's answers, float32's bit for bit, float64's
    within its last unit (``s ** k`` is ``power``'s exp2(k * log2(s)))."""
    module = compiled(SCALED, "scaled")
    x = torch.linspace(-3, 5, 150, dtype=dtype, device=DEVICE)
    third = 1 / 3  # no float32
    y, z = module.scaled(x, third, 3)
    assert y.dtype == dtype and z.dtype == torch.float32
    close = FUSED if dtype == torch.float32 else {"rtol": 4e-16, "atol": 4e-16}
    torch.testing.assert_close(y, x * (1 - third) + math.sqrt(1 - third**3), **close)
    torch.testing.assert_close(z, x.float() * third, rtol=0, atol=0)
    for got, want in zip((y, z), module.reference(x, third, 3), strict=True):
        torch.testing.assert_close(got, want, **close)
    # 1 - s of s = 1 - 2**-30 is 2**-30 in float64; of s rounded to float32 (1.0) first, it would be 0
    y, _ = module.scaled(x, 1 - 2.0**-30, 0)  # s ** 0 is 1: sqrt(0) is 0
    assert torch.equal(y, x * 2.0**-30) and (y != 0).any()


def test_an_f64_scalar_keeps_its_digits_into_the_kernel(compiled):
    """A Python float passed for an f64 scalar is not rounded to float32 on its way (Triton takes an
    unannotated float as fp32; the kernel's argument is typed tl.float64): 1 - s of s = 1 - 2**-40
    is 2**-40 with f64 tensors (0 from a float32 s)."""
    module = compiled(SCALED, "scaled")
    x = torch.full((8,), 3.0, dtype=torch.float64, device=DEVICE)
    y, _ = module.scaled(x, 1 - 2.0**-40, 0)
    assert (y == 3 * 2.0**-40).all()


MIXED = """kernel mixed
  in  a: i32[N]
  in  b: f16[N]
  in  s: f64
  out u: f64[N]
  out w: f32[N]
  block BN = 64
  grid  i over N by BN
  out v: f32[N]
  u[i] = a[i] * s
  w[i] = b[i] * s
  v[i] = where(b[i] > 0, s, f32(b[i])) * maximum(s, f32(b[i]))
"""


def test_an_f64_scalar_with_integer_tiles_is_f64_with_16_bit_ones_f32(compiled):
    """With an integer tile an f64 scalar computes in float64; with an f16 tile as an f32 scalar
    does (both operands in float32); chosen by ``where`` or ``maximum`` beside an f32 tile it is
    rounded to float32, as torch.where and torch.maximum take a Python number; in the kernel and
    in its reference."""
    module = compiled(MIXED, "mixed")
    a = torch.arange(-40, 60, dtype=torch.int32, device=DEVICE) * 1001
    b = torch.linspace(-2, 3, 100, device=DEVICE).half()
    s = 1 / 3
    u, w, v = module.mixed(a, b, s)
    s32 = torch.tensor(s, dtype=torch.float32)
    assert torch.equal(u, a.double() * s) and torch.equal(w, b.float() * s32)
    assert torch.equal(v, torch.where(b > 0, s32, b.float()) * torch.maximum(s32, b.float()))
    for got, want in zip((u, w, v), module.reference(a, b, s), strict=True):
        assert torch.equal(got, want)


#: AdamW's single-tensor step over f32 or f64 tensors, the f64 scalars meeting them in their dtype:
#: float64 throughout for f64 tensors (specs/adamw.tile computes f16, bf16 and f32 in float32).
ADAMW = """kernel adamw
  dtype T in f32, f64
  in  param: T[N]
  in  grad: T[N] in [-1, 1]
  in  exp_avg: T[N] in [-0.1, 0.1]
  in  exp_avg_sq: T[N] in [0, 0.01]
  in  lr: f64 in [1e-4, 1e-2]
  in  beta1: f64 in [0.8, 0.95]
  in  beta2: f64 in [0.99, 0.9999]
  in  eps: f64 in [1e-8, 1e-6]
  in  weight_decay: f64 in [0, 0.1]
  in  step: f64 in [1, 1000]
  out param_out: T[N] in place of param
  out exp_avg_out: T[N] in place of exp_avg
  out exp_avg_sq_out: T[N] in place of exp_avg_sq
  block BN = 1024
  grid  n over N by BN
  g = grad[n]
  m = exp_avg[n] + (1 - beta1) * (g - exp_avg[n])
  v = exp_avg_sq[n] * beta2 + (1 - beta2) * g * g
  exp_avg_out[n] = m
  exp_avg_sq_out[n] = v
  decayed = param[n] * (1 - lr * weight_decay)
  param_out[n] = decayed - lr / (1 - beta1 ** step) * m / (sqrt(v) / sqrt(1 - beta2 ** step) + eps)
"""


def _torch_adamw(param, grad, exp_avg, exp_avg_sq, steps, **options):
    """torch.optim.AdamW, foreach=False (its single-tensor step), ``steps`` times with the same
    gradient, from the given moving averages; (param, exp_avg, exp_avg_sq) after."""
    p = torch.nn.Parameter(param.clone())
    optimizer = torch.optim.AdamW([p], foreach=False, **options)
    p.grad = grad.clone()
    optimizer.step()  # makes the state; then it is set to the given averages and the step redone
    state = optimizer.state[p]
    with torch.no_grad():
        p.copy_(param)
    state["exp_avg"].copy_(exp_avg)
    state["exp_avg_sq"].copy_(exp_avg_sq)
    state["step"].zero_()
    for _ in range(steps):
        optimizer.step()
    return p.detach(), state["exp_avg"], state["exp_avg_sq"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("inplace", [False, True])
def test_adamw_is_torchs_single_tensor_step(compiled, dtype, inplace):
    """specs/adamw.tile, three steps, against torch.optim.AdamW: f64 within float64's rounding
    (an f64 scalar rounded to float32 anywhere would be ~1e-8 off), f32 within a few float32
    units (torch rounds each op; the kernel the whole expression once)."""
    module = compiled(ADAMW, "adamw")
    n = 1000  # not a multiple of the block: the last program's tail is masked
    g = torch.Generator().manual_seed(0)
    param, grad = (torch.randn(n, generator=g, dtype=torch.float64).to(dtype).to(DEVICE) for _ in range(2))
    exp_avg = (0.1 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype).to(DEVICE)
    exp_avg_sq = (0.01 * torch.rand(n, generator=g, dtype=torch.float64)).to(dtype).to(DEVICE)
    options = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    want = _torch_adamw(param, grad, exp_avg, exp_avg_sq, 3, **options)
    state = [t.clone() for t in (param, exp_avg, exp_avg_sq)]
    for step in (1, 2, 3):
        out = module.adamw(state[0], grad, state[1], state[2], 1e-3, 0.9, 0.999, 1e-8, 0.01, step, inplace=inplace)
        if inplace:
            assert all(o.data_ptr() == s.data_ptr() for o, s in zip(out, state, strict=True))
        state = list(out)
    tolerance = {"rtol": 1e-13, "atol": 1e-15} if dtype == torch.float64 else {"rtol": 1e-6, "atol": 1e-7}
    for name, got, expected in zip(("param", "exp_avg", "exp_avg_sq"), state, want, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got, expected, msg=name, **tolerance)
    reference = module.reference(param, grad, exp_avg, exp_avg_sq, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1)
    first = module.adamw(param, grad, exp_avg, exp_avg_sq, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1)
    for got, expected in zip(first, reference, strict=True):
        torch.testing.assert_close(got, expected, **tolerance)


def test_adamw_refuses_a_tensor_for_a_number(compiled):
    module = compiled(ADAMW, "adamw")
    x = torch.zeros(4, device=DEVICE)
    with pytest.raises(TypeError, match="lr must be a Python float"):
        module.adamw(x, x, x, x, torch.tensor(1e-3), 0.9, 0.999, 1e-8, 0.01, 1)
