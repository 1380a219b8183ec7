"""Scans: ``cumsum`` and ``cumprod`` along a whole axis, forward and from the end
(``reverse=true``), against torch.cumsum/cumprod in Triton's interpreter.

The specs are KernelBench level 1's problems 89 (``torch.cumsum(x, dim=1)``), 91 (the reverse
cumsum, ``x.flip(1).cumsum(1).flip(1)``) and 90 (``torch.cumprod``). Rows of 1, 100 and 781
elements (each tile has masked padding lanes, which must hold the scan's identity, or a scan
from the end would start in them; 1 a row of one element, 100 one partial tile at every config,
781 several at 256 and 512, the loop), every config of the spec forced in turn (the specs walk each
row in tiles of 256 to 4096, so the longer rows span several), inputs of both signs, and NaN/inf,
which a scan carries forward (or backward) from where it appears; scans walked in tiles of 1 to
8 (the carry across tiles), and the looped kernel of a whole-row scan.
"""

import pytest
import torch

from tests.conftest import config_indices, force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError

ROWS = [1, 100, 781]


def _rand(*shape, seed=0, low=None):
    g = torch.Generator().manual_seed(seed)
    if low is not None:  # factors of both signs near 1: products stay finite
        magnitude = torch.empty(*shape).uniform_(low, 2 - low, generator=g)
        return magnitude * torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)
    return torch.randn(*shape, generator=g) * 3


def _oracle(kernel, x):
    """The torch expression each spec stands for, written here, independently of the spec."""
    xd = x.double()
    if kernel == "row_cumsum":
        return torch.cumsum(xd, dim=1)
    if kernel == "row_cumsum_reverse":
        return xd.flip(1).cumsum(1).flip(1)
    return torch.cumprod(xd, dim=1)


@pytest.mark.parametrize("kernel", ["row_cumsum", "row_cumsum_reverse", "row_cumprod"])
@pytest.mark.parametrize("n", ROWS)
def test_scan_matches_torch_at_every_config(generated, monkeypatch, kernel, n):
    module = generated(kernel)
    x = _rand(5, n, seed=n, low=0.9 if kernel == "row_cumprod" else None)
    want = _oracle(kernel, x)
    for index in config_indices(module):  # in the interpreter, one config of each block size
        force_config(monkeypatch, module, index)
        y = getattr(module, kernel)(x)
        scale = torch.cumsum(x.double().abs(), dim=1).amax() if kernel != "row_cumprod" else want.abs()
        torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=float((1e-5 * scale).max()) + 1e-6)
    torch.testing.assert_close(module.reference(x).double(), want, rtol=1e-5, atol=1e-3)


def test_a_scan_carries_nan_and_inf_from_where_they_appear(generated):
    x = torch.ones(3, 9)
    x[0, 4] = float("nan")
    x[1, 2] = float("inf")
    x[2, 6] = float("-inf")
    forward = generated("row_cumsum").row_cumsum(x)
    backward = generated("row_cumsum_reverse").row_cumsum_reverse(x)
    torch.testing.assert_close(forward, torch.cumsum(x, dim=1), equal_nan=True)
    torch.testing.assert_close(backward, x.flip(1).cumsum(1).flip(1), equal_nan=True)
    assert torch.isnan(forward[0, 4:]).all() and not torch.isnan(forward[0, :4]).any()
    assert torch.isnan(backward[0, :5]).all() and not torch.isnan(backward[0, 5:]).any()
    product = generated("row_cumprod").row_cumprod(torch.tensor([[2.0, 0.0, float("inf"), 3.0]]))
    torch.testing.assert_close(product, torch.tensor([[2.0, 0.0, float("nan"), float("nan")]]), equal_nan=True)




SCAN_3D = """kernel k
  in  x: {dtype}[B, S, D]
  out y: f32[B, S, D]
  block BB = 2, BD = 4
  grid  b over B by BB, s over S whole, d over D by BD
  y[b, s, d] = {scan}(x[b, s, d], dim=s{reverse})
"""


@pytest.mark.parametrize("reverse", ["", ", reverse=true", ", reverse=false"])
@pytest.mark.parametrize("scan", ["cumsum", "cumprod"])
def test_a_scan_along_the_middle_axis_of_f16(compiled, scan, reverse):
    """Along the middle axis of [B, S, D] (the tile is [BB, S, BD]), f16 input scanned in float32
    as torch's CPU scans accumulate it: 40 factors of 1.5 give 1.1e7, past f16's range."""
    module = compiled(SCAN_3D.format(dtype="f16", scan=scan, reverse=reverse))
    x = torch.full((3, 40, 5), 1.5, dtype=torch.float16)
    x[1] = -x[1]
    x[2, ::3] = 0.25
    xf = x.float()
    if "true" in reverse:
        want = getattr(torch, scan)(xf.flip(1), dim=1).flip(1)
    else:
        want = getattr(torch, scan)(xf, dim=1)
    torch.testing.assert_close(module.k(x), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(module.reference(x), want, rtol=1e-5, atol=1e-4)


def test_a_scan_along_a_loop_axis_is_refused_with_what_to_write():
    source = """kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 2, BN = 16
  grid  r over M by BM
  for c over N by BN
    y[r, c] = cumsum(x[r, c], dim=c)
"""
    with pytest.raises(SpecError, match=r"'cumsum' runs along a 'whole' axis .* write 'grid \.\.\. c over N whole'"):
        compile_spec(source, "k.tile")


@pytest.mark.parametrize(("call", "message"), [
    ("cumsum(x[r, c], dim=c, reverse=yes)", "reverse= is one of false, true"),
    ("cumsum(x[r, c], dim=c, flip=true)", "unknown argument 'flip' to 'cumsum'; expected 'dim', 'reverse'"),
    ("cumsum(x[r, c])", r"'cumsum' needs the axis it runs along: cumsum\(x, dim=<axis>\)"),
    ("cumprod(i32(x[r, c]), dim=c)", "'cumprod' takes a float tile; cast it first"),
])
def test_bad_scans_get_a_message(call, message):
    source = f"""kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r, c] = {call}
"""
    with pytest.raises(SpecError, match=message):
        compile_spec(source, "k.tile")


def test_a_scan_given_reverse_by_position_says_how_to_call_it():
    source = """kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 2
  grid  r over M by BM, c over N whole
  y[r, c] = cumsum(x[r, c], true, dim=c)
"""
    with pytest.raises(SpecError, match="'cumsum' takes 1 argument and dim=, optionally reverse=, not 2 arguments"):
        compile_spec(source, "k.tile")


WHOLE_TUNED = """kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM
  grid  r over M by BM, c over N whole
  tune key N
    default config BM = 1, num_warps = 4
    config BM = 1, num_warps = 16
    config BM = 4, num_warps = 4
  y[r, c] = cumsum(x[r, c], dim=c)
"""


def test_a_whole_row_scan_prunes_and_loops_past_one_tile(compiled):
    """A tuned scan over a whole row keeps the one-tile kernel's prune (the configs whose tile holds
    at most 64 elements a thread, tilegen.lower.rows.whole_pruned) and gets the looped kernel for
    rows past one tile, its carry taken across the chunks."""
    module = compiled(WHOLE_TUNED)
    configs = module._CONFIGS

    def kept(block):
        pruned = module.k_kernel.early_config_prune(configs, {}, BLOCK_N=block)
        return [(c.kwargs["BM"], c.num_warps) for c in pruned]

    assert kept(1024) == [(c.kwargs["BM"], c.num_warps) for c in configs]
    assert kept(32768) == [(1, 16)]  # the KernelBench row: 64 elements a thread at 16 warps
    x = _rand(3, 37, seed=5)
    for block in (1, 4, 16):
        torch.testing.assert_close(module._k_loops(x, BLOCK_N=block), torch.cumsum(x, dim=1), rtol=1e-5, atol=1e-4)


TILED = """kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 2, BC = {bc}
  grid  r over M by BM, c over N by BC whole
  y[r, c] = {scan}(x[r, c], dim=c{reverse})
"""


@pytest.mark.parametrize("bc", [1, 2, 8])
@pytest.mark.parametrize(("scan", "reverse"), [("cumsum", ""), ("cumsum", ", reverse=true"), ("cumprod", ""),
                                               ("cumprod", ", reverse=true")])
def test_a_scan_walked_in_tiles_carries_across_them(compiled, scan, reverse, bc):
    """``c over N by BC whole``: each tile's scan merged with the carry of the tiles before it (from
    the end for ``reverse=true``), the same as torch's at every tile size, across tails, and
    with NaN and inf carried on from where they appear."""
    module = compiled(TILED.format(bc=bc, scan=scan, reverse=reverse))
    for n in (1, 7, 33):
        x = _rand(3, n, seed=n, low=0.9 if scan == "cumprod" else None)
        if n > 4:
            x[1, n // 2] = float("nan")
            x[2, 3] = float("inf") if scan == "cumsum" else 0.0
        xd = x.double()
        want = getattr(torch, scan)(xd.flip(1), dim=1).flip(1) if reverse else getattr(torch, scan)(xd, dim=1)
        torch.testing.assert_close(module.k(x).double(), want, rtol=1e-5, atol=1e-4, equal_nan=True)
        torch.testing.assert_close(module.reference(x).double(), want, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_scans_from_both_ends_in_one_tiled_row_are_refused():
    source = """kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 2, BC = 8
  grid  r over M by BM, c over N by BC whole
  y[r, c] = cumsum(x[r, c], dim=c) + cumsum(x[r, c], dim=c, reverse=true)
"""
    with pytest.raises(SpecError, match=r"walks N in tiles of BC, which this spec's body cannot take"):
        compile_spec(source, "k.tile")
