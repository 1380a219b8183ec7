"""rand and randn (Triton's Philox) and the dropout spec, in the interpreter.

The torch reference computes Philox itself (``tilegen.runtime.philox_rand``); it is checked here
against Triton's ``tl.rand4x`` and ``tl.randn4x`` run in a Triton kernel of this file (offset
4q + k is lane k at counter q), bit for bit for ``rand``, and the kernels' helpers against both.
A spec's numbers depend on the seed and each element's offset only: every block size
gives the same tensor. Dropout's derived backward draws its mask again: the gradient is the
upstream one scaled where the forward kept the element and 0 where it dropped it.
``TILEGEN_TEST_GPU=1`` runs the same tests on the GPU.
"""

import os

import pytest
import torch
import triton
import triton.language as tl

from tilegen.errors import SpecError
from tilegen.runtime import philox_rand, philox_randn, tile_rand, tile_randn

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"


@triton.jit
def _philox_kernel(seed, offset_ptr, uniform_ptr, normal_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    offset = tl.load(offset_ptr + i, mask=mask, other=0)
    tl.store(uniform_ptr + i, tile_rand(seed, offset), mask=mask)
    tl.store(normal_ptr + i, tile_randn(seed, offset), mask=mask)


@triton.jit
def _triton_kernel(seed, uniform_ptr, normal_ptr, n, BLOCK: tl.constexpr):
    """Triton's own Philox: rand4x and randn4x at counters q, their four lanes at 4q..4q+3."""
    q = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = q < n
    u0, u1, u2, u3 = tl.rand4x(seed, q)
    z0, z1, z2, z3 = tl.randn4x(seed, q)
    tl.store(uniform_ptr + 4 * q, u0, mask=mask)
    tl.store(uniform_ptr + 4 * q + 1, u1, mask=mask)
    tl.store(uniform_ptr + 4 * q + 2, u2, mask=mask)
    tl.store(uniform_ptr + 4 * q + 3, u3, mask=mask)
    tl.store(normal_ptr + 4 * q, z0, mask=mask)
    tl.store(normal_ptr + 4 * q + 1, z1, mask=mask)
    tl.store(normal_ptr + 4 * q + 2, z2, mask=mask)
    tl.store(normal_ptr + 4 * q + 3, z3, mask=mask)


def _draw(seed, offset, block):
    """tile_rand and tile_randn at ``offset`` (a 1-d int64 tensor), in tiles of ``block``."""
    n = offset.numel()
    uniform, normal = torch.empty(n, device=DEVICE), torch.empty(n, device=DEVICE)
    _philox_kernel[(triton.cdiv(n, block),)](seed, offset, uniform, normal, n, BLOCK=block)
    return uniform, normal


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**33 + 7])
def test_the_reference_draws_tritons_numbers(seed):
    """tile_rand at offset 4q + k is lane k of Triton's rand4x at counter q, as philox_rand computes
    it; tile_randn the same of randn4x (Box-Muller of lanes (0, 1) and (2, 3))."""
    q = 750
    uniform, normal = torch.empty(4 * q, device=DEVICE), torch.empty(4 * q, device=DEVICE)
    _triton_kernel[(triton.cdiv(q, 256),)](seed, uniform, normal, q, BLOCK=256)
    offsets = torch.arange(4 * q, device=DEVICE)
    assert torch.equal(philox_rand(seed, offsets), uniform)
    torch.testing.assert_close(philox_randn(seed, offsets), normal, atol=1e-5, rtol=1e-5)
    for block, n in ((1, 12), (2, 20), (4, 36), (512, 4 * q)):  # a Philox evaluation per element (1, 2) or per four
        got_u, got_z = _draw(seed, offsets[:n], block)
        assert torch.equal(got_u, uniform[:n])
        torch.testing.assert_close(got_z, normal[:n], atol=1e-5, rtol=1e-5)
    assert not torch.equal(philox_rand(seed + 1, offsets), uniform)


def test_offsets_in_any_order_draw_their_own_numbers():
    """Runs of four offsets that are not consecutive from a multiple of 4 (shifted, reversed, 64-bit,
    repeated) take the per-element path and still draw each offset's own number."""
    base = torch.arange(1000, device=DEVICE)
    for offset in (base + 1, base.flip(0), base * 7 + 2**40, base // 2):
        want_u, want_z = philox_rand(3, offset), philox_randn(3, offset)
        got_u, got_z = _draw(3, offset, 256)
        assert torch.equal(got_u, want_u)
        torch.testing.assert_close(got_z, want_z, atol=1e-5, rtol=1e-5)


RANDOM = """\
kernel draws
  in  x: f32[M, N]
  in  seed: i64
  out u: f32[M, N]
  out z: f32[M, N]
  block BM = {bm}, BN = {bn}
  grid  r over M by BM, c over N by BN
  u[r, c] = rand(seed, r * N + c) + 0.0 * x[r, c]
  z[r, c] = randn(seed, r * N + c)
"""


def test_rand_and_randn_are_the_same_at_every_block_size(compiled):
    x = torch.zeros(37, 129, device=DEVICE)
    draws = []
    for i, (bm, bn) in enumerate([(1, 64), (4, 32), (16, 256)]):
        module = compiled(RANDOM.format(bm=bm, bn=bn), f"draws{i}")
        u, z = module.draws(x, 7)
        want_u, want_z = module.reference(x, 7)
        assert torch.equal(u, want_u)
        torch.testing.assert_close(z, want_z, atol=1e-5, rtol=1e-5)
        draws.append((u, z))
    for u, z in draws[1:]:
        assert torch.equal(u, draws[0][0]) and torch.equal(z, draws[0][1])
    u, z = draws[0]
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.02 and abs(u.std().item() - (1 / 12) ** 0.5) < 0.02
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1.0) < 0.05
    own = torch.arange(37 * 129, device=DEVICE).reshape(37, 129)  # each element's own offset
    assert torch.equal(u, philox_rand(7, own))
    other, _ = compiled(RANDOM.format(bm=4, bn=32), "draws_other").draws(x, 8)
    assert (other != u).float().mean() > 0.99  # another seed, other numbers


@pytest.mark.parametrize(("line", "message"), [
    ("u[r, c] = rand(x[r, c], r * N + c)", "the seed of 'rand' is an integer scalar input"),
    ("u[r, c] = rand(p, r * N + c)", "the seed of 'rand' is an integer scalar input"),
    ("u[r, c] = randn(seed, x[r, c])", "the offset of 'randn' is an integer expression"),
])
def test_random_arguments_are_checked(compiled, line, message):
    source = RANDOM.format(bm=4, bn=32).replace("  in  seed: i64\n", "  in  seed: i64\n  in  p: f32\n")
    source = source.split("  u[r, c]")[0] + f"  {line}\n  z[r, c] = 0.0 * x[r, c]\n"
    with pytest.raises(SpecError, match=message):
        compiled(source, "bad")


#: (dtype, p, a config of specs/dropout.tile besides the interpreter's): each config in some case.
DROPOUTS = [(dtype, p, i % 4) for i, (dtype, p) in enumerate(
    (dtype, p) for dtype in (torch.float32, torch.float16) for p in (0.1, 0.5, 0.8))]


@pytest.mark.parametrize(("dtype", "p", "config"), DROPOUTS)
def test_dropout_keeps_one_minus_p_scaled_at_every_block_size(generated, dtype, p, config):
    """Each p and dtype at the interpreter's tiles and one other config, each of the other four
    configs' tile shapes in some case: the same mask (a number per element, whatever the tile)."""
    module = generated("dropout")
    x = (torch.randn(67, 300, generator=torch.Generator().manual_seed(3)) + 5.0).to(DEVICE, dtype)  # no zeros
    y = module.dropout(x, p, 1234)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.02
    torch.testing.assert_close(y[kept], (x.float() / (1 - p)).to(dtype)[kept])
    torch.testing.assert_close(module.reference(x, p, 1234), y)
    assert torch.equal(module.dropout(x, p, 1234, config=config), y)
    again = module.dropout(x, p, 1235)
    assert ((again != 0) != kept).any()  # another seed, another mask


def test_dropout_backward_draws_the_forward_mask_again(generated):
    module = generated("dropout")
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(45, 130, generator=g) + 5.0).to(DEVICE).requires_grad_()
    y = module.dropout(x, 0.3, 99)
    dy = torch.randn(45, 130, generator=g).to(DEVICE)
    (dx,) = torch.autograd.grad(y, x, dy)
    kept = y.detach() != 0
    torch.testing.assert_close(dx, torch.where(kept, dy / 0.7, 0.0))
    assert 0.6 < kept.float().mean() < 0.8
    reference = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(module.reference(reference, 0.3, 99), reference, dy)
    torch.testing.assert_close(dx, want)
