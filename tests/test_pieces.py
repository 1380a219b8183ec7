"""Row pieces: a block of a flat grid's rows that is a sum of two powers of two (192 = 128 + 64).

Triton's tiles are powers of two. Where a tune config sets the rows' block to a sum of two, the
kernel holds each tile as two row pieces (``BM_0 = BM - BM_1`` rows, then ``BM_1 = BM & -BM``),
each with its own accumulator, ``a`` tile (through ``a_desc`` and ``a_piece_desc``) and store,
both taking the same ``b`` tile of each step. The interpreter runs a pieced config when the
launcher's lookup is made to return it (the spec's default config must be a power of two).
"""

import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import load_module

SPEC = """\
kernel mm_pieces
  in  a: f32[M, K]
  in  b: f32[K, N]
  out c: f32[M, N]
  block BM, BN, BK, GROUP_SIZE_M = 2
  grid flat m over M by BM, n over N by BN
  swizzle m, n group GROUP_SIZE_M
  split tail
  access descriptor
  tune key M, N, K
    default config BM = 32, BN = 32, BK = 16, num_stages = 2, num_warps = 4
    config BM = 96, BN = 32, BK = 16, num_stages = 2, num_warps = 4
  acc: f32[m, n] = 0
  for k over K by BK split
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""
PIECED = 1  # the index in _CONFIGS of BM = 96 (64 + 32; the second piece is not BK, 16, so a's
# descriptor blocks differ when a is column-major)


def _module(tmp_path, text=SPEC, name="mm_pieces"):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(text, f"{name}.tile").source, encoding="utf-8")
    return load_module(path)


def _errors(text):
    with pytest.raises(SpecError) as caught:
        compile_spec(text, "t.tile")
    return [d.message for d in caught.value.diagnostics]


def _force(monkeypatch, module, launcher, index):
    """``launcher`` runs ``_CONFIGS[index]``; its pointer launcher the default (a power of two)."""
    force_config(monkeypatch, module, lambda name, key: index if name == launcher else None)


@pytest.fixture
def pieces(tmp_path, monkeypatch):
    """The spec's module, launching its BM = 96 config, with every pre_hook call's block shapes."""
    module = _module(tmp_path)
    _force(monkeypatch, module, "mm_pieces", PIECED)
    shapes = []
    real = module._descriptor_blocks

    def record(nargs):
        real(nargs)
        shapes.append({k: list(v.block_shape) for k, v in nargs.items() if k.endswith("_desc") and v is not None})

    monkeypatch.setattr(module, "_descriptor_blocks", record)
    return module, shapes


# (M, N, K): one tile; masked edges in both axes, 6 tiles on the interpreter's 4 SMs (a tail,
# which a pieced tile does not split); a long K over one tile (split-K: each piece stores its
# partial sums)
SHAPES = [(96, 32, 16), (100, 72, 40), (96, 32, 2048)]


@pytest.mark.parametrize("mnk", SHAPES)
@pytest.mark.parametrize("layout", ["row-major", "a column-major", "b column-major"])
def test_each_piece_computes_its_rows(pieces, mnk, layout):
    """Integer-valued inputs make every sum exact: the output equals torch's exactly, so each row
    piece lands where its rows are (an unwritten piece leaves torch.empty's values)."""
    module, shapes = pieces
    m, n, k = mnk
    if (m, n, k) == (100, 72, 40):  # the tail the rule would split were the tile a power of two
        assert module._tail_split(m, n, 64, 32, 4)[1:] != (1, 1)
        assert module._tail_split(m, n, 96, 32, 4)[1:] == (1, 1)
    if k == 2048:  # the loop splits
        assert module._split_grid(m, n, k, 96, 32, 16, torch.device("cpu"))[1] > 1
    g = torch.Generator().manual_seed(m + n + k)
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    if layout == "a column-major":
        a = a.t().contiguous().t()
    if layout == "b column-major":
        b = b.t().contiguous().t()
    assert torch.equal(module.mm_pieces(a, b), a @ b)
    transposed = layout == "a column-major"  # the descriptor spans a.T: blocks [BK, rows]
    assert shapes[-1]["a_desc"] == ([16, 64] if transposed else [64, 16])  # the first piece: 64 rows
    assert shapes[-1]["a_piece_desc"] == ([16, 32] if transposed else [32, 16])  # the second: 32
    assert shapes[-1]["c_desc"] == [64, 32] and shapes[-1]["c_piece_desc"] == [32, 32]


def test_the_autotuned_launch_gives_the_pieces_their_blocks(tmp_path, monkeypatch):
    """The autotuner's own launch (a key not tuned yet): the pre_hook gives the first descriptors
    the first piece's rows, the piece descriptors the second's, and the tail descriptors the whole
    first piece (a pieced tile does not split); the output is exact."""
    module = _module(tmp_path)
    monkeypatch.setattr(module.mm_pieces_kernel, "configs", [module._CONFIGS[PIECED]])  # nothing to time
    monkeypatch.setattr(module._tuner, "tuned_index", lambda name, key: None)
    monkeypatch.setattr(module._tuner, "remember", lambda key, config: None)
    shapes = []
    real = module._descriptor_blocks

    def record(nargs):
        real(nargs)
        shapes.append({k: list(v.block_shape) for k, v in nargs.items() if k.endswith("_desc") and v is not None})

    for config in module.mm_pieces_kernel.configs:
        monkeypatch.setattr(config, "pre_hook", record)
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-3, 4, (100, 40), generator=g).float()
    b = torch.randint(-3, 4, (40, 72), generator=g).float()
    assert torch.equal(module.mm_pieces(a, b), a @ b)
    assert shapes[0]["a_desc"] == [64, 16] and shapes[0]["a_piece_desc"] == [32, 16]
    assert shapes[0]["c_tail_desc"] == [64, 32] and shapes[0]["c_piece_desc"] == [32, 32]


def test_a_power_of_two_config_takes_no_piece_descriptors(tmp_path, monkeypatch):
    module = _module(tmp_path)
    made = []
    real = module.TensorDescriptor
    monkeypatch.setattr(module, "TensorDescriptor", lambda *args: made.append(args) or real(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice of the config it runs
        c = module.mm_pieces(torch.ones(64, 16), torch.ones(16, 32))
    assert torch.equal(c, torch.full((64, 32), 16.0))
    assert len(made) == 3  # a, b and c: no piece (nor tail) descriptors


@pytest.mark.parametrize("block, pieces", [(192, (128, 64)), (320, (256, 64)), (96, (64, 32)), (128, (128, 128))])
def test_pieces_of_a_block(tmp_path, block, pieces):
    assert _module(tmp_path)._pieces(block) == pieces


def _pieced_configs():
    """The (BM, BN) of matmul_fast's configs whose rows are two pieces, read from its spec."""
    from tilegen.build import check_file, find_specs
    spec = check_file(find_specs([Path(__file__).resolve().parent.parent / "specs" / "matmul_fast.tile"])[0])
    blocks = [(int(c.get("BM").value), int(c.get("BN").value)) for c in spec.tune.configs]
    return sorted({(rows, cols) for rows, cols in blocks if rows & (rows - 1)})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows, cols", _pieced_configs())
def test_matmul_fast_pieced_configs(generated, monkeypatch, rows, cols, dtype):
    """Each of matmul_fast's pieced configs, forced, against torch in f64: a second row of tiles
    of 8 rows, and a second column of tiles of 8 columns."""
    module = generated("matmul_fast")
    index = next(i for i, c in enumerate(module._CONFIGS) if c.kwargs["BM"] == rows and c.kwargs["BN"] == cols)
    _force(monkeypatch, module, "matmul_fast", index)
    g = torch.Generator().manual_seed(rows + cols)
    a = torch.randn(rows + 8, 80, generator=g).to(dtype)
    b = torch.randn(80, cols + 8, generator=g).to(dtype)
    expected = a.double() @ b.double()
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 4e-2}[dtype]
    torch.testing.assert_close(module.matmul_fast(a, b).double(), expected,
                               atol=tolerance * expected.abs().max().item(), rtol=0)


def test_the_pointer_kernel_takes_no_pieced_config(generated):
    """Its tiles are powers of two: the configs of 192 and 320 rows are left out of its list, and
    each config it has is one of the module's (the launchers remember indices in _CONFIGS)."""
    module = generated("matmul_fast")
    rows = [c.kwargs["BM"] for c in module._POINTER_CONFIGS]
    assert all(r & (r - 1) == 0 for r in rows)
    assert any(c.kwargs["BM"] & (c.kwargs["BM"] - 1) for c in module._CONFIGS)
    kwargs = [c.all_kwargs() for c in module._CONFIGS]
    assert all(c.all_kwargs() in kwargs for c in module._POINTER_CONFIGS)
    assert len(module._POINTER_CONFIGS) == sum(1 for c in module._CONFIGS if not c.kwargs["BM"] & (c.kwargs["BM"] - 1))


def test_the_kernel_holds_the_pieces_in_the_source():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "generated" / "matmul_fast.py").read_text()
    assert "BM_1: tl.constexpr = BM & -BM if BM & (BM - 1) else 0" in text
    assert "acc_1 = tl.zeros((BM_1, BN), dtype=tl.float32)" in text
    assert "a_1 = a_piece_desc.load([pid_m * BM + BM_0, k * BK])" in text
    assert "acc_1 += tl.dot(_dot_operand(a_1), _dot_operand(b))" in text  # the same tile of b
    assert "c_piece_desc.store([pid_m * BM + BM_0, pid_n * BN], acc_1.to(T))" in text


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("config BM = 96, BN = 32", "config BM = 32, BN = 96",
         "block size 'BN' = 96 is not a power of two"),
        ("config BM = 96,", "config BM = 224,",
         "block size 'BM' = 224 is not a power of two or a sum of two each 16 or more (192 = 128 + 64)"),
        ("config BM = 96,", "config BM = 40,",  # 32 + 8: a piece below a dot's 16
         "block size 'BM' = 40 is not a power of two or a sum of two each 16 or more (192 = 128 + 64)"),
        ("  access descriptor\n", "",
         "block size 'BM' = 96 is not a power of two: a block of a sum of two (held as two pieces) needs "
         "'access descriptor' and tune configs (a tensor descriptor for each piece, set per config)"),
        ("  c[m, n] = acc\n", "  c[m, n] = acc * 2.0\n",
         "block size 'BM' = 96 is not a power of two: a block of a sum of two (held as two pieces) needs "
         "stores of a local over 'm' ('c[m, n] = acc')"),
        ("    default config BM = 32, BN = 32, BK = 16, num_stages = 2, num_warps = 4\n    config BM = 96",
         "    config BM = 32, BN = 32, BK = 16, num_stages = 2, num_warps = 4\n    default config BM = 96",
         "the default config sets 'BM' = 96: it runs through pointers where TMA cannot serve (and in Triton's "
         "interpreter, without an interpreter config), whose tiles are powers of two; make it a power of two"),
        ("    config BM = 96",
         "    interpreter config BM = 96",
         "the interpreter config sets 'BM' = 96: Triton's interpreter runs it through pointers, whose tiles are "
         "powers of two; make it a power of two"),
    ],
)
def test_a_block_that_cannot_be_pieced_is_refused(old, new, message):
    assert old in SPEC
    assert message in _errors(SPEC.replace(old, new))


VARIANTS = {
    "without split tail": lambda text: text.replace("  split tail\n", ""),
    "persistent": lambda text: text.replace("  split tail\n", "").replace("grid flat", "grid persistent")
    .replace(" split\n", "\n"),
    "without a split loop": lambda text: text.replace(" split\n", "\n"),
    "f16": lambda text: text.replace("f32[M", "T[M").replace("f32[K", "T[K").replace(", precision=ieee", "")
    .replace("kernel mm_pieces\n", "kernel mm_pieces\n  dtype T in f16, bf16\n"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pieces_in_other_kernels(tmp_path, monkeypatch, variant):
    """The pieces with each grid form the checker allows them on, and in a dtype variable's
    kernel: exact on integer inputs (f16 holds these sums exactly)."""
    module = _module(tmp_path, VARIANTS[variant](SPEC))
    _force(monkeypatch, module, "mm_pieces", PIECED)
    dtype = torch.float16 if variant == "f16" else torch.float32
    for m, n, k in [(100, 72, 40), (152, 96, 304)]:
        g = torch.Generator().manual_seed(m)
        a = torch.randint(-3, 4, (m, k), generator=g).to(dtype)
        b = torch.randint(-3, 4, (k, n), generator=g).to(dtype)
        module._tuner.tuned.clear()
        module._FAST.clear()
        assert torch.equal(module.mm_pieces(a, b), (a.float() @ b.float()).to(dtype))


def test_a_tensor_named_after_anothers_piece_descriptor_is_refused():
    text = SPEC.replace("out c: f32[M, N]", "out c: f32[M, N]\n  out c_piece: f32[M, N]").replace(
        "  c[m, n] = acc\n", "  c[m, n] = acc\n  c_piece[m, n] = acc\n").replace(" split\n", "\n")
    assert ("with row pieces the descriptor of c's second piece is named c_piece_desc, as is c_piece's own: "
            "rename 'c_piece'") in _errors(text)
    compile_spec(text.replace("config BM = 96,", "config BM = 64,"), "t.tile")  # no pieces: no clash


@pytest.mark.parametrize(
    "old, new, needs",
    [
        # a statement lowered for one piece only would leave the other's rows without it
        ("  in  b: f32[K, N]\n", "  in  b: f32[K, N]\n  in  bias: f32[N]\n", None),
        ("grid flat m over M by BM,", "grid flat m over M by BM unmasked,", "masked rows"),
    ],
)
def test_pieces_need_what_the_lowering_holds_per_piece(old, new, needs):
    text = SPEC.replace(old, new)
    if needs is None:  # acc += bias[n] after the loop (no split: the split rules would refuse it first)
        text = text.replace(" split\n", "\n").replace("  c[m, n] = acc\n", "  acc += bias[n]\n  c[m, n] = acc\n")
        needs = "a body of tile declarations, loops of dots"
        compile_spec(text.replace("config BM = 96,", "config BM = 64,"), "t.tile")  # fine without pieces
    assert any(f"block size 'BM' = 96 is not a power of two: a block of a sum of two (held as two pieces) needs "
               f"{needs}" in message for message in _errors(text))


@pytest.mark.parametrize("value, moved", [("512", 512), ("576", 512)])  # a power of two; 512 + 64 in pieces
def test_a_block_past_a_tma_box_is_refused(value, moved):
    """A descriptor's block moves at most 256 elements along a dimension (CUDA's boxDim): a
    block, or the first of its row pieces, past it is refused at its value, not at launch."""
    message = (f"block size 'BM' = {value} moves {moved} elements along a dimension of a tensor descriptor; TMA "
               "moves at most 256 (use a smaller block or 'access pointers')")
    assert message in _errors(SPEC.replace("config BM = 96,", f"config BM = {value},"))
    compile_spec(SPEC.replace("config BM = 96,", "config BM = 320,"), "t.tile")  # 256 + 64: each piece fits


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 200), st.integers(1, 80).map(lambda n: 4 * n), st.integers(1, 24).map(lambda k: 4 * k),
       st.sampled_from(["row-major", "a column-major", "b column-major"]))
def test_pieces_at_any_shape(tmp_path_factory, m, n, k, layout):
    """Any M (rows of 16-byte aligned N and K for TMA; others run the pointer kernel): exact on
    integer inputs with the BM = 96 config (64 + 32 rows)."""
    module = _module(tmp_path_factory.mktemp("pieces"))
    real = module._tuner.tuned_index
    module._tuner.tuned_index = lambda name, key: PIECED if name == "mm_pieces" else real(name, key)
    g = torch.Generator().manual_seed(m * n + k)
    a = torch.randint(-3, 4, (m, k), generator=g).float()
    b = torch.randint(-3, 4, (k, n), generator=g).float()
    if layout == "a column-major":
        a = a.t().contiguous().t()
    if layout == "b column-major":
        b = b.t().contiguous().t()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter's notice, where the pointer kernel runs its default
        assert torch.equal(module.mm_pieces(a, b), a @ b)
