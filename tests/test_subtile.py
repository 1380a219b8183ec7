"""Epilogue subtiles: an output tile whose TMA store would stage more than ``SUBTILE_BYTES`` in
shared memory (a float32 128 x 256 tile, 128 KiB) is stored in two halves of its columns.

The launch decides (``_rt.epilogue_subtile``, from ``_descriptor_blocks``): it halves the output
descriptor's last block; the kernel compares that block with its tile (a constexpr) and stores
the halves or the whole. The compiler writes the halves only where some config's tile may be
that large. The interpreter runs descriptors as a GPU does, so a lowered limit makes a small
tile take the halves there.
"""

import os

import pytest
import torch

from tests.conftest import force_config
from tilegen import runtime
from tilegen.compiler import compile_spec
from tilegen.lower import descriptors

SPEC = """\
kernel mm_subtile
  dtype T in f32, f16
  in  a: T[M, K]
  in  b: T[K, N]
  out c: T[M, N]
  block BM, BN, BK, GROUP_SIZE_M = 2
  grid flat m over M by BM, n over N by BN
  swizzle m, n group GROUP_SIZE_M
  split tail
  access descriptor
  tune key M, N, K
    default config BM = 32, BN = 32, BK = 16, num_stages = 2, num_warps = 4
    config BM = 128, BN = 256, BK = 16, num_stages = 2, num_warps = 4
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = T(acc)
"""
GPU = os.environ.get("TILEGEN_TEST_GPU") == "1" and torch.cuda.is_available()


def test_the_compiler_and_the_runtime_agree_on_the_limit():
    assert descriptors.SUBTILE_BYTES == runtime.SUBTILE_BYTES


def test_only_a_tile_over_the_limit_is_halved():
    """float32 128 x 256 (128 KiB) halves its columns; float16 128 x 256 and float32 128 x 128
    (64 KiB each), a block whose halves' rows would be under TMA's 16 bytes, and an absent
    descriptor stay as they are."""
    shapes = {}
    for name, dtype, block in [("f32 wide", torch.float32, [128, 256]), ("f16 wide", torch.float16, [128, 256]),
                               ("f32 square", torch.float32, [128, 128]), ("f32 narrow", torch.float32, [8192, 4])]:
        desc = runtime.TensorDescriptor(torch.empty(256, 512, dtype=dtype), [256, 512], [512, 1], block)
        runtime.epilogue_subtile(desc)
        shapes[name] = list(desc.block_shape)
    runtime.epilogue_subtile(None)
    assert shapes == {"f32 wide": [128, 128], "f16 wide": [128, 256], "f32 square": [128, 128], "f32 narrow": [8192, 4]}


def test_the_halves_are_written_only_where_a_config_may_need_them():
    source = compile_spec(SPEC, "mm_subtile.tile").source
    assert "c_desc.block_shape[1] < BN" in source and '_epilogue_subtile(nargs["c_desc"])' in source
    small = SPEC.replace("BM = 128, BN = 256", "BM = 64, BN = 64")  # 16 KiB at most: never halved
    source = compile_spec(small, "mm_subtile.tile").source
    assert "block_shape[1] <" not in source and "_epilogue_subtile" not in source


@pytest.mark.parametrize("limit", [runtime.SUBTILE_BYTES, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
# rows 16-byte aligned for TMA; 88 and 72 columns: the last tile's right half partly, and wholly,
# past the edge
@pytest.mark.parametrize("mnk", [(32, 32, 16), (70, 88, 40), (70, 72, 40)])
def test_the_tile_lands_whole_or_in_halves(compiled, monkeypatch, limit, dtype, mnk):
    """At the default 32 x 32 config: whole under the runtime's limit, in halves of 16 columns
    where the limit is lowered to 1 KiB (a float32 tile is 4 KiB, a float16 one 2 KiB); masked
    edges in both axes, twice (the second call through the fast path, its descriptors remade on
    the kept ones). Integer-valued inputs make every sum exact: each half lands where its columns
    are (an unwritten half leaves torch.empty's values)."""
    module = compiled(SPEC, "mm_subtile")
    force_config(monkeypatch, module, 0)
    monkeypatch.setattr(module._rt, "SUBTILE_BYTES", limit)
    blocks = []
    real = module._descriptor_blocks

    def record(nargs):
        real(nargs)
        blocks.append(list(nargs["c_desc"].block_shape))

    monkeypatch.setattr(module, "_descriptor_blocks", record)
    m, n, k = mnk
    g = torch.Generator().manual_seed(m + n + k)
    a = torch.randint(-3, 4, (m, k), generator=g).to(dtype)
    b = torch.randint(-3, 4, (k, n), generator=g).to(dtype)
    for _ in range(2):
        assert torch.equal(module.mm_subtile(a, b), (a.double() @ b.double()).to(dtype))
    assert blocks[-1] == ([32, 16] if limit == 1024 else [32, 32])


@pytest.mark.parametrize("config", [16, 23])  # BK = 192 (128 + 64 rows), 32: with the limit lowered
def test_each_row_piece_lands_whole_or_in_halves(generated, monkeypatch, config):
    """matmul_fast_backward_db's float32 weight gradient at a config whose rows are two pieces
    (its descriptor and its _piece_desc each halved) and at one of one piece, under a limit of
    2 KiB; the right halves of the last column tile partly past the edge. Exact on integers."""
    module = generated("matmul_fast_backward_db")
    force_config(monkeypatch, module, config)
    monkeypatch.setattr(module._rt, "SUBTILE_BYTES", 2048)
    blocks = []
    real = module._descriptor_blocks
    monkeypatch.setattr(module, "_descriptor_blocks", lambda nargs: real(nargs) or blocks.append(
        {k: list(v.block_shape) for k, v in nargs.items() if k.startswith("db_") and v is not None}))
    g = torch.Generator().manual_seed(config)
    x = torch.randint(-3, 4, (24, 200), generator=g).to(torch.bfloat16)
    dy = torch.randint(-3, 4, (24, 136), generator=g).to(torch.bfloat16)
    got = module.matmul_fast_backward_db(x, dy, G=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, x.float().T @ dy.float())
    halved = {"db_desc": [128, 64], "db_piece_desc": [64, 64]} if config == 16 else {"db_desc": [32, 16]}
    assert blocks[-1] == halved


def test_the_autotuned_launch_halves_the_tile_but_not_the_tails(compiled, monkeypatch):
    """The autotuner's own launch (a key not tuned yet) runs the pre_hook, which sets the split
    tail's descriptors too: their block tells the kernel the split of the last wave, so they keep
    the sub-tile's (9 tiles of 32 x 32 on the interpreter's 4 SMs: the last one in 2 x 2 quarters);
    the main tile is halved under a lowered limit, and the output is exact."""
    module = compiled(SPEC, "mm_subtile")
    monkeypatch.setattr(module._rt, "SUBTILE_BYTES", 512)  # below a quarter's 1 KiB too
    monkeypatch.setattr(module.mm_subtile_kernel, "configs", [module._CONFIGS[0]])  # nothing to time
    monkeypatch.setattr(module._tuner, "tuned_index", lambda name, key: None)
    monkeypatch.setattr(module._tuner, "remember", lambda key, config: None)
    shapes = []
    real = module._descriptor_blocks

    def record(nargs):
        real(nargs)
        shapes.append({k: list(v.block_shape) for k, v in nargs.items() if k.endswith("_desc") and v is not None})

    monkeypatch.setattr(module._CONFIGS[0], "pre_hook", record)
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-3, 4, (70, 40), generator=g).float()
    b = torch.randint(-3, 4, (40, 96), generator=g).float()
    assert module._tail_split(70, 96, 32, 32, 4)[1:] == (2, 2)
    assert torch.equal(module.mm_subtile(a, b), a @ b)
    assert shapes[0]["c_desc"] == [32, 16] and shapes[0]["c_tail_desc"] == [16, 16]


@pytest.mark.skipif(not GPU, reason="the GPU's shared memory limit: TILEGEN_TEST_GPU=1 and a GPU")
@pytest.mark.parametrize("config", [0, 1, 18, 22, None])  # 128 x 256, 256 x 128, 320 x 128 (256 + 64 rows)
def test_a_float32_weight_gradient_of_the_widest_tiles_compiles_and_is_right(config):
    """matmul_fast_backward_db's float32 output at the configs whose tile is 128 KiB or more (out
    of shared memory before the epilogue was halved), and tuned (the autotuner's launch, whose
    pre_hook also gives the split tail's descriptors their blocks); rows TMA can address."""
    from tilegen.nn import module

    db = module("matmul_fast_backward_db").matmul_fast_backward_db
    g = torch.Generator(device="cuda").manual_seed(7 if config is None else config)
    x = torch.randn(1000, 1544, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(1000, 2056, device="cuda", dtype=torch.bfloat16, generator=g)
    got = db(x, dy, G=torch.float32, config=config)
    want = x.double().T @ dy.double()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
