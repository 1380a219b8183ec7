"""Grids with more programs along program id 1 or 2 than a launch may have there (CUDA's 65535).

The launcher then sets the kernel's ``FOLDED_GRID`` and launches every program along program id
0, and the kernel reads each axis's program id from id 0. Triton's interpreter has no such limit:
these tests lower the runtime's ``MAX_GRID_YZ`` so that small shapes run folded, and check the
results against torch and against the same call launched unfolded.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT
from tests.test_split import MATMUL_2D, _module
from tilegen.compiler import compile_spec

LIMIT = 2  # the programs a test launch may have along program ids 1 and 2


@pytest.fixture
def run_both(monkeypatch):
    """``run_both(module, call)``: ``call()`` launched as usual, then with the limit lowered to
    :data:`LIMIT`; returns both outputs and the grid of the call's (last) launch, folded. Every
    launch of the call whose usual grid breaks the lowered limit must have run folded."""

    def run(module, call):
        module._FAST.clear()  # a launch kept under the usual limit would run again unfolded
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
            usual = call()
            unfolded = _kept_grids(module)
            module._FAST.clear()
            with monkeypatch.context() as patch:
                patch.setattr(module._rt, "MAX_GRID_YZ", LIMIT)
                folded = call()
                grids = _kept_grids(module)
                again = call()  # the fast path: the launches kept, folded
            module._FAST.clear()
        assert _same(again, folded)
        assert unfolded.keys() == grids.keys()
        assert any(max(grid[1:]) > LIMIT for grid in unfolded.values()), unfolded  # the lowered limit matters
        for launcher, grid in unfolded.items():
            if max(grid[1:]) > LIMIT:
                x, y, z = grids[launcher]
                assert y == 1 and x * z == grid[0] * grid[1] * grid[2], (launcher, grid, grids[launcher])
        return usual, folded, grids[list(grids)[-1]]

    return run


def _kept_grids(module):
    """The grid of each launch the module's fast path kept, by its launcher's name."""
    return {key[0]: entry[1] for key, entry in module._FAST.items()}


def _same(a, b):
    if isinstance(a, tuple):
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    return torch.equal(a, b)


def test_a_three_axis_matmul_with_its_batch_axis_last(generated, run_both):
    """bmm: ``grid m over M by BM, n over N by BN, batch over B`` (tuned): n and batch past the limit."""
    module = generated("bmm")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 40, 24, generator=g), torch.randn(3, 24, 100, generator=g)
    usual, folded, grid = run_both(module, lambda: module.bmm(a, b))
    assert grid == (2 * 4 * 3, 1, 1)  # 32x32 tiles: 2 along M, 4 along N, 3 batches
    assert torch.equal(folded, usual)
    torch.testing.assert_close(folded, torch.bmm(a, b), atol=1e-4, rtol=1e-4)


def test_a_batch_axis_first(generated, run_both):
    """matmul_batched: ``grid batch over B, m over M by BM, n over N by BN``: M's and N's tiles past the limit."""
    module = generated("matmul_batched")
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 40, 24, generator=g).half(), torch.randn(2, 24, 50, generator=g).half()
    usual, folded, grid = run_both(module, lambda: module.matmul_batched(a, b, BM=16, BN=16, BK=16))
    assert grid == (2 * 3 * 4, 1, 1)
    assert torch.equal(folded, usual)
    torch.testing.assert_close(folded.float(), torch.bmm(a.float(), b.float()), atol=2e-2, rtol=2e-2)


def test_an_index_axis_last(generated, run_both):
    """conv1d: ``grid o over O by BO, ol over L_out by BL, n over N``: L_out's tiles and N past the limit."""
    module = generated("conv1d")
    g = torch.Generator().manual_seed(2)
    x, w, bias = torch.randn(3, 5, 40, generator=g), torch.randn(20, 5, 3, generator=g), torch.randn(20, generator=g)
    usual, folded, grid = run_both(module, lambda: module.conv1d(x, w, bias, padding=1))
    assert grid == (2 * 3 * 3, 1, 1)  # 16-wide tiles: 2 along O, 3 along L_out = 40; 3 samples
    assert torch.equal(folded, usual)
    torch.testing.assert_close(folded, F.conv1d(x, w, bias, padding=1), atol=1e-4, rtol=1e-4)


def test_more_axes_than_program_ids(generated, run_both):
    """conv2d: ``grid o over O by BO, ow over W_out by BW, n over N, oh over H_out``: o and ow
    share program id 0 already; folded, n and oh join them."""
    module = generated("conv2d")
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 3, 6, 20, generator=g), torch.randn(20, 3, 3, 3, generator=g)
    usual, folded, grid = run_both(module, lambda: module.conv2d(x, w))
    assert grid == (2 * 2 * 2 * 4, 1, 1)  # O and W_out = 18 in 2 tiles each, N = 2, H_out = 4
    assert torch.equal(folded, usual)
    torch.testing.assert_close(folded, F.conv2d(x, w), atol=1e-4, rtol=1e-4)


def test_a_reduction_across_programs(generated, run_both):
    """batch_norm reduces over b and h, whose programs sit along ids 0 and 2: each program's
    partial goes to its place among them, which a folded launch must keep."""
    module = generated("batch_norm")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4, 9, 5, generator=g)
    weight, bias = torch.randn(4, generator=g), torch.randn(4, generator=g)
    usual, folded, _ = run_both(module, lambda: module.batch_norm(x, weight, bias, 1e-5))
    assert torch.equal(folded, usual)
    expected = F.batch_norm(x, None, None, weight, bias, training=True, eps=1e-5)
    torch.testing.assert_close(folded, expected, atol=1e-5, rtol=1e-5)


def test_a_swizzled_grid(generated, run_both):
    """matmul_grouped: ``tl.swizzle2d`` over the tile counts, which a folded launch's
    ``tl.num_programs`` would not give."""
    module = generated("matmul_grouped")
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(40, 32, generator=g).half(), torch.randn(32, 80, generator=g).half()
    usual, folded, grid = run_both(module, lambda: module.matmul_grouped(a, b, BM=16, BN=16, BK=16))
    assert grid == (3 * 5, 1, 1)
    assert torch.equal(folded, usual)
    torch.testing.assert_close(folded.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


def test_a_split_loop_keeps_its_parts_on_program_id_2(tmp_path, monkeypatch):
    """A 2D grid with a split loop: folded, its tiles run along id 0 and the parts stay on id 2."""
    module = _module(tmp_path, MATMUL_2D, "mm_split_folded")
    monkeypatch.setattr(module, "_num_sms", lambda device: 64)  # few tiles: the K loop runs in parts
    split_grid, grids = module._split_grid, []
    monkeypatch.setattr(module, "_split_grid", lambda *args: grids.append(split_grid(*args)[0]) or split_grid(*args))
    g = torch.Generator().manual_seed(6)
    m, n, k = 5, 3 * 16 + 1, 16 * 16
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    usual = module.mm_split(a, b)
    monkeypatch.setattr(module._rt, "MAX_GRID_YZ", LIMIT)
    module._FAST.clear()  # the kept launch's grid is the usual one: the lowered limit is not in its key
    folded = module.mm_split(a, b)
    assert grids == [(1, 4, 4), (4, 1, 4)]  # 4 tiles along N (past the limit), each K loop in 4 parts
    assert torch.equal(folded, usual)
    assert torch.equal(folded, a @ b)  # integer-valued: every sum exact


def test_the_usual_launch_compiles_the_folding_away():
    """The kernel reads program ids 1 and 2 as before; the folded mapping is under a constexpr
    the launcher sets, and a grid of one program id has neither."""
    source = compile_spec((ROOT / "specs" / "bmm.tile").read_text(), "specs/bmm.tile").source
    kernel = source[source.index("def bmm_kernel"):source.index("_tuner = ")]
    assert "pid_n = tl.program_id(1)\n    pid_batch = tl.program_id(2)\n    if FOLDED_GRID:" in kernel
    assert "        pid_batch = pid // (tl.cdiv(M, BM) * tl.cdiv(N, BN))\n" in kernel
    assert "folded = max((N + 32 - 1) // 32, B) > _rt.MAX_GRID_YZ" in source  # the least BN of any config
    grid = '((M + meta["BM"] - 1) // meta["BM"], (N + meta["BN"] - 1) // meta["BN"], B)'
    assert f"lambda meta: _rt.fold_grid({grid}, folded)" in source
    rms = compile_spec((ROOT / "specs" / "rms_norm.tile").read_text(), "specs/rms_norm.tile").source
    assert "FOLDED_GRID" not in rms and "fold_grid" not in rms  # one launched axis: nothing to fold

