"""``split tail``: the tiles of a flat grid's last partial wave run as 2 or 4 sub-tiles each.

Where a flat grid has more tiles than SMs and the last wave is partial (``tiles % SMs`` tiles),
the launcher launches more programs: each tail tile is computed by 2 (halves of its longer side)
or 4 (quarters) programs at a smaller block shape, through the kernel's tile function. The
interpreter's device has 4 "SMs" (``_num_sms``), so small shapes take every split.
"""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import load_module

MATMUL = """\
kernel mm_tail
  in  a: f32[M, K]
  in  b: f32[K, N]
  out c: f32[M, N]
  block BM = 32, BN = 32, BK = 16
  grid flat m over M by BM, n over N by BN
  swizzle m, n group 2
  split tail
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""
ACCESS = {"pointers": MATMUL, "descriptor": MATMUL.replace("  split tail", "  split tail\n  access descriptor"),
          "block_ptr": MATMUL.replace("  split tail", "  split tail\n  access block_ptr")}


def _module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    return load_module(path)


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [(d.span.line, d.span.column, d.message) for d in caught.value.diagnostics]


def _tiles(m, n, bm, bn):
    return -(-m // bm) * -(-n // bn)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 9000), st.integers(1, 9000), st.sampled_from([16, 32, 64, 128, 256]),
       st.sampled_from([16, 32, 64, 128, 256]), st.sampled_from([4, 78, 108, 132]))
def test_tail_split_fills_the_last_wave_in_one_round(generated, m, n, bm, bn, sms):
    """The rule: the tail (tiles beyond the last whole wave) splits only where its sub-tiles fit
    one round of programs beside nothing else; 4 where quarters fit, else 2 halves of the longer
    side; no block below 16; every program has a tile or a sub-tile."""
    programs, tail_m, tail_n = generated("matmul_fast")._tail_split(m, n, bm, bn, sms)
    tiles = _tiles(m, n, bm, bn)
    tail = tiles % sms if tiles > sms else 0
    subs = tail_m * tail_n
    assert programs == tiles + tail * (subs - 1)
    assert (tail_m, tail_n) in {(1, 1), (2, 1), (1, 2), (2, 2)}
    assert bm // tail_m >= 16 and bn // tail_n >= 16
    if subs > 1:
        assert tail * subs <= sms  # the sub-tiles take one round of the SMs
    if subs == 2:
        assert 4 * tail > sms or min(bm, bn) < 32  # quarters would not fit, or not be 16 wide
        assert (tail_m == 2) == (bm >= bn)  # the longer side halves
    if subs == 1:
        assert tail == 0 or 2 * tail > sms or max(bm, bn) < 32


# (M, N): the 3 x 3 tiles of 32 leave 1 tail tile on 4 SMs: quarters; 3 x 2 leave 2: halves of M;
# 2 x 2 fill the SMs: no tail; 5 x 1 leave 1: quarters, with masked edges in both axes
SPLITS = {(96, 96): (2, 2), (96, 64): (2, 1), (64, 64): (1, 1), (150, 20): (2, 2), (70, 90): (2, 2)}


@pytest.mark.parametrize("access", sorted(ACCESS))
@pytest.mark.parametrize("mn", sorted(SPLITS))
def test_every_split_computes_every_tile_once(tmp_path, access, mn):
    """Integer-valued inputs make every sum exact: the output equals torch's exactly, so each
    sub-tile lands where its tile is (an unwritten or misplaced one leaves torch.empty's values)."""
    module = _module(tmp_path, ACCESS[access], "mm_tail")
    m, n = mn
    k = 40
    _, tail_m, tail_n = module._tail_split(m, n, 32, 32, 4)
    assert (tail_m, tail_n) == SPLITS[mn]
    g = torch.Generator().manual_seed(m * n)
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    for bb in (b, b.t().contiguous().t()):  # b row- and column-major
        assert torch.equal(module.mm_tail(a, bb), a @ b)


def test_halves_of_n_where_n_has_the_longer_block(tmp_path):
    module = _module(tmp_path, ACCESS["descriptor"], "mm_tail")
    m, n, k = 96, 128, 24  # 3 x 2 tiles of 32 x 64: 2 tail tiles on 4 SMs, halves of N
    assert module._tail_split(m, n, 32, 64, 4) == (8, 1, 2)
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    assert torch.equal(module.mm_tail(a, b, BN=64), a @ b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["row-major", "b column-major", "a column-major", "odd K (pointers)"])
@pytest.mark.parametrize("mn", [(96, 96), (96, 64)])
def test_matmul_fast_splits_its_tail(generated, dtype, layout, mn):
    """matmul_fast (split tail) on the interpreter's 4 SMs with its default 32 x 32 config:
    quarters at 96 x 96, halves at 96 x 64, against torch in f64."""
    module = generated("matmul_fast")
    m, n = mn
    k = 83 if layout == "odd K (pointers)" else 64
    assert module._tail_split(m, n, 32, 32, 4)[1:] == SPLITS[mn]
    g = torch.Generator().manual_seed(k)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    if layout == "b column-major":
        b = b.t().contiguous().t()
    if layout == "a column-major":
        a = a.t().contiguous().t()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
        c = module.matmul_fast(a, b)
    expected = a.double() @ b.double()
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(c.double(), expected, atol=tolerance * expected.abs().max().item(), rtol=0)


def test_the_tail_descriptors_get_the_sub_tiles_block_shape(generated):
    """The pre_hook gives each tail descriptor the split's block shape (the kernel reads it back
    as TAIL_M x TAIL_N); the main descriptors keep the config's."""
    module = generated("matmul_fast")

    class Desc:  # what the pre_hook reads and sets: the block, and the base's element size
        block_shape = None
        base = torch.empty(0, dtype=torch.bfloat16)

    for (m, n), (tail_m, tail_n) in SPLITS.items():
        for b_t in (False, True):
            nargs = {f"{t}{s}": Desc() for t in "abc" for s in ("_desc", "_tail_desc")}
            nargs |= {"M": m, "N": n, "BM": 32, "BN": 32, "BK": 16, "A_T": False, "B_T": b_t, "NUM_SMS": 4}
            module._descriptor_blocks(nargs)
            assert nargs["c_desc"].block_shape == [32, 32]
            assert nargs["c_tail_desc"].block_shape == [32 // tail_m, 32 // tail_n]
            assert nargs["a_tail_desc"].block_shape == [32 // tail_m, 16]
            assert nargs["b_tail_desc"].block_shape == ([32 // tail_n, 16] if b_t else [16, 32 // tail_n])


@pytest.mark.parametrize("mn", sorted(mn for mn in SPLITS if mn[1] % 4 == 0))  # f32 rows TMA can address
def test_a_launch_makes_only_the_tail_descriptors_it_uses(tmp_path, monkeypatch, mn):
    """Each descriptor costs host time per launch: none where the launch does not split, and
    only those of tensors whose blocks the split divides (a split of M leaves b's whole)."""
    module = _module(tmp_path, ACCESS["descriptor"], "mm_tail")
    seen = []
    kernel = module.mm_tail_kernel

    class Spy:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                seen.append(args[3:6])
                return kernel[grid](*args, **kwargs)
            return run

    monkeypatch.setattr(module, "mm_tail_kernel", Spy())
    m, n = mn
    a, b = torch.randn(m, 24), torch.randn(24, n)
    torch.testing.assert_close(module.mm_tail(a, b), a @ b)
    a_tail, b_tail, c_tail = seen[0]
    tail_m, tail_n = SPLITS[mn]
    assert (c_tail is None) == (tail_m * tail_n == 1)
    assert (a_tail is None) == (tail_m == 1) and (b_tail is None) == (tail_n == 1)
    if c_tail is not None:
        assert c_tail.block_shape == [32 // tail_m, 32 // tail_n]


def test_the_kernel_calls_its_tile_function_in_the_source():
    source = compile_spec(ACCESS["descriptor"], "mm_tail.tile").source
    kernel = source[source.index("def mm_tail_kernel"):source.index("def mm_tail(")]
    assert "TAIL_M: tl.constexpr = 1 if c_tail_desc is None else BM // c_tail_desc.block_shape[0]" in kernel
    assert "(a_desc if a_tail_desc is None else a_tail_desc)" in kernel  # a split of N leaves a's blocks whole
    assert "if TAIL_M * TAIL_N == 1 or pid < whole_tiles:" in kernel
    assert "BM // TAIL_M, BN // TAIL_N, BK" in kernel
    tile = source[source.index("def mm_tail_tile"):source.index("def mm_tail_kernel")]
    assert "tl.program_id" not in tile  # the tile function takes its coordinates
    pointers = source[source.index("def _mm_tail_pointers_kernel"):source.index("def _mm_tail_pointers(")]
    assert "sub_tiles = max((tl.num_programs(0) - whole_tiles) // max(tail_tiles, 1), 1)" in pointers


BAD = {
    "a 2D grid": (MATMUL.replace("grid flat", "grid"), "'split tail' needs a flat grid that is not persistent"),
    "a persistent grid": (MATMUL.replace("grid flat", "grid persistent"), "'split tail' needs a flat grid"),
    "one block for both axes": (MATMUL.replace("by BN", "by BM"), "'split tail' halves each grid axis's block"),
    "no store over both axes": ("""\
kernel t
  in  a: f32[M, N]
  out r: f32[M]
  block BM = 32, BN = 32
  grid flat m over M by BM, n over N by BN
  swizzle m, n group 2
  acc: f32[m] = 0
  split tail
  r[m] = a[m, 0]
""", "'split tail' splits output tiles"),
    "twice": (MATMUL.replace("  split tail", "  split tail\n  split tail"), "'split tail' is given twice"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_tail_split_that_cannot_run_is_refused_at_its_line(case):
    text, message = BAD[case]
    errors = _errors(text)
    line = 9 if case == "twice" else 8
    assert any((at, column) == (line, 3) and said.startswith(message) for at, column, said in errors), errors


@pytest.mark.parametrize("name", ["TAIL_M", "TAIL_N", "tail_m", "tail_n"])
def test_split_tails_own_names_are_reserved(name):
    """The kernel's constexprs and the launcher's locals: a size or a block of that name would be
    overwritten by them."""
    errors = _errors(ACCESS["descriptor"].replace("K", name))
    assert any(name in said for _, _, said in errors), errors


def test_a_tensor_named_after_anothers_tail_descriptor_is_refused():
    text = ACCESS["descriptor"].replace("  in  b: f32[K, N]", "  in  b: f32[K, N]\n  in  b_tail: f32[M, N]").replace(
        "  c[m, n] = acc", "  c[m, n] = acc + b_tail[m, n]")
    errors = _errors(text)
    assert any((at, column) == (4, 7) and "rename 'b_tail'" in said for at, column, said in errors), errors
    compile_spec(text.replace("  access descriptor\n", ""), "t.tile")  # pointers: no descriptors, no clash


def test_tail_is_not_reserved():
    """'tail' is a word of the split line only: a tile may still be called tail."""
    text = MATMUL.replace("acc", "tail")
    module_source = compile_spec(text, "t.tile").source
    assert "tail = tl.zeros((BM, BN), dtype=tl.float32)" in module_source


def test_the_pointer_kernels_op_traces_under_torch_compile(tmp_path):
    """A tail-split pointer kernel's op runs under torch.compile(fullgraph=True) (in the
    interpreter an opaque custom op; the traced launch, wrap_triton's, needs a GPU)."""
    module = _module(tmp_path, MATMUL, "mm_tail_op")
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-3, 4, (96, 24), generator=g).float()
    b = torch.randint(-3, 4, (24, 96), generator=g).float()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: module.op(x, y), backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(a, b), a @ b)
