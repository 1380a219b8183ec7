"""tilegen/interpreter.py: the patches of Triton's interpreter that tilegen's processes (and these
tests, through tests/conftest.py) run under change no result and skip the repeated work."""

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from tilegen.interpreter import _np_dtype_cached, _patch_lang_once, _same_types_as_they_are, speed_up

PROGRAM_ID = tl.program_id  # the builtin, between launches


def test_speed_up_patches_once():
    speed_up()  # conftest has already called it
    semantic = interpreter.interpreter_semantic
    patched = (interpreter._patch_lang, interpreter._get_np_dtype, semantic.binary_op_type_checking_impl)
    speed_up()
    assert (interpreter._patch_lang, interpreter._get_np_dtype, semantic.binary_op_type_checking_impl) == patched


def test_the_language_is_patched_once_a_kernel_and_again_after_its_restore(monkeypatch):
    original = tl.program_id
    patches = []

    class Scope:
        def restore(self):
            tl.program_id = original

    def patch(fn):  # as the interpreter's: the builtins replaced by new functions
        patches.append(fn)
        monkeypatch.setattr(tl, "program_id", lambda *args: 0)
        return Scope()

    def kernel():  # a function whose globals hold triton.language, as a @triton.jit one's do
        return tl

    class Empty:
        def restore(self):
            pass

    patched = _patch_lang_once(patch, Empty)
    scope = patched(kernel)  # a kernel starts
    assert isinstance(scope, Scope)
    for _ in range(3):  # @triton.jit calls inside it: the language is patched already
        assert isinstance(patched(kernel), Empty)
    assert len(patches) == 1
    scope.restore()  # the kernel ends
    assert tl.program_id is original
    patched(kernel)  # the next kernel patches again
    assert len(patches) == 2


def test_numpy_dtypes_are_the_interpreters():
    original = _get_original_np_dtype()
    cached = _np_dtype_cached(original)
    dtypes = [tl.float32, tl.float16, tl.bfloat16, tl.int1, tl.int8, tl.int32, tl.int64, tl.uint64,
              tl.float8e4nv, tl.float8e5, tl.pointer_type(tl.float32),
              tl.block_type(tl.float16, [4, 8]), tl.block_type(tl.pointer_type(tl.int32), [16])]
    for dtype in dtypes * 2:  # the second time from the table
        assert cached(dtype) == original(dtype), dtype


def _get_original_np_dtype():
    """The interpreter's own ``_get_np_dtype``, from the closure speed_up wrapped it in."""
    patched = interpreter._get_np_dtype
    cells = [c.cell_contents for c in (patched.__closure__ or ()) if callable(c.cell_contents)]
    return next(c for c in cells if c.__name__ == "_get_np_dtype")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _nested_kernel(x_ptr, y_ptr, N, BS: tl.constexpr):
    offsets = tl.program_id(0) * BS + tl.arange(0, BS)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf"))  # the tail's lanes left out of the max
    for _ in range(3):
        x = _twice(x)
    tl.store(y_ptr + offsets, x + tl.max(x, axis=0), mask=mask)


@pytest.mark.parametrize("block", [16, 64])
def test_a_kernel_calling_jit_functions_computes_what_torch_does(block):
    x = torch.randn(100)
    y = torch.empty_like(x)
    _nested_kernel[(triton.cdiv(100, block),)](x, y, 100, BS=block)
    tiles = (x * 8).split(block)
    assert torch.equal(y, torch.cat([t + t.max() for t in tiles]))
    # the kernel's end restored the language (the standard library's functions, whose globals hold
    # triton.language.core, leave that module patched, as Triton's own interpreter does)
    assert tl.program_id is PROGRAM_ID


def _original_type_checks():
    """The interpreter's own ``binary_op_type_checking_impl``, from the closure speed_up wrapped it in."""
    patched = interpreter.interpreter_semantic.binary_op_type_checking_impl
    cells = [c.cell_contents for c in (patched.__closure__ or ()) if callable(c.cell_contents)]
    return next(c for c in cells if getattr(c, "__name__", "") == "binary_op_type_checking_impl")


class _Refusing:
    """Semantics whose type checks refuse every call (with the interpreter's builder to splat
    with): what a call the shortcut does not take runs into."""

    builder = interpreter.interpreter_semantic.builder
    make_tensor = interpreter.interpreter_semantic.make_tensor

    def binary_op_type_checking_impl(self, *args, **kwargs):
        raise LookupError("went through the interpreter's checks")


def test_pointer_tiles_go_through_the_interpreters_checks():
    """Two tiles of pointers of one type (unhashable dtypes) are the interpreter's to check."""
    pointer = tl.pointer_type(tl.float32)
    lhs = tl.tensor(interpreter.TensorHandle(torch.tensor([0, 8]).numpy().astype("uint64"), pointer),
                    tl.block_type(pointer, [2]))
    with pytest.raises(LookupError):
        _same_types_as_they_are(_Refusing().binary_op_type_checking_impl)(lhs, lhs, True, True)


def _tile(values, dtype):
    """A tile of the interpreter (a tl.tensor over a numpy array) holding ``values`` as ``dtype``."""
    data = torch.tensor(values).numpy().astype(interpreter._get_np_dtype(dtype))
    kind = tl.block_type(dtype, list(data.shape)) if data.ndim else dtype
    return tl.tensor(interpreter.TensorHandle(data, dtype), kind)


@pytest.mark.parametrize(("left", "right", "div_or_mod", "shortcut"), [
    ((tl.float32, [1.5, -2.0]), (tl.float32, [3.0, 0.25]), False, "as they are"),  # one type
    ((tl.int32, [[1, 2], [3, 4]]), (tl.int32, [[5, 6], [7, 8]]), True, "as they are"),
    ((tl.int64, 7), (tl.int64, -3), False, "as they are"),  # two scalars of one type
    ((tl.int1, [True, False]), (tl.int1, [True, True]), False, "as they are"),
    ((tl.int32, [[1, 2], [3, 4]]), (tl.int32, 9), False, "splat"),  # a block and a scalar
    ((tl.float64, 0.5), (tl.float64, [1.0, 2.0, 3.0, 4.0]), True, "splat"),
    ((tl.int32, [1, 2]), (tl.int64, [3, 4]), False, None),  # promoted: the interpreter's path
    ((tl.int32, [1, 2]), (tl.int64, 3), False, None),
    ((tl.float16, [1.0, 2.0]), (tl.float16, [3.0, 4.0]), True, None),  # a half divided: to float32
    ((tl.float32, [[1.0], [2.0]]), (tl.float32, [[3.0, 4.0]]), False, None),  # broadcast
    ((tl.float32, [1.0, 2.0]), 3, False, None),  # a number
])
def test_the_type_checks_of_one_type_return_what_the_interpreters_do(left, right, div_or_mod, shortcut):
    speed_up()
    patched = interpreter.interpreter_semantic.binary_op_type_checking_impl
    original = _original_type_checks()
    lhs = _tile(left[1], left[0])
    rhs = _tile(right[1], right[0]) if isinstance(right, tuple) else right
    got = patched(lhs, rhs, div_or_mod=div_or_mod)
    want = original(lhs, rhs, div_or_mod=div_or_mod)
    for g, w in zip(got, want, strict=True):
        assert g.type == w.type
        assert (g.handle.data == w.handle.data).all() and g.handle.data.dtype == w.handle.data.dtype
    routed = _same_types_as_they_are(_Refusing().binary_op_type_checking_impl)  # which calls take it
    if shortcut is None:
        with pytest.raises(LookupError):
            routed(lhs, rhs, div_or_mod=div_or_mod)
    else:
        back = routed(lhs, rhs, div_or_mod=div_or_mod)
        assert (back[0] is lhs and back[1] is rhs) == (shortcut == "as they are")


def _made_by(cls):
    """``cls.__init__`` as Triton wrote it (``speed_up`` keeps it), or the one in use where this
    Triton was left alone."""
    return getattr(cls, "_tilegen_made_by", cls.__init__)


def _original_block(element_ty, shape):
    block = tl.block_type.__new__(tl.block_type)
    _made_by(tl.block_type)(block, element_ty, shape)
    return block


@pytest.mark.parametrize("element_ty", [tl.float32, tl.int1, tl.bfloat16, tl.pointer_type(tl.float16)])
@pytest.mark.parametrize("shape", [[1], [16], [4, 32], [2, 8, 2]])
def test_block_types_and_tiles_are_what_the_interpreters_are(element_ty, shape):
    """A block type of a shape made before (item 5) and a tile of it (item 6) hold what Triton's own
    constructors give: extents, product, name; the tile's constexpr extents, numel and dtype; and a
    block type made from another's shape (``with_element_ty``) is equal to Triton's."""
    speed_up()
    assert tl.block_type.__init__ is not _made_by(tl.block_type)  # this Triton is sped up
    for _ in range(2):  # the first makes, the second shares
        block, original = tl.block_type(element_ty, list(shape)), _original_block(element_ty, list(shape))
        assert (list(block.shape), block.numel, block.name) == (list(original.shape), original.numel, original.name)
        assert type(block.shape) is type(original.shape) and block == original
        tile, made = tl.tensor(None, block), tl.tensor.__new__(tl.tensor)
        _made_by(tl.tensor)(made, None, original)
        assert [s.value for s in tile.shape] == [s.value for s in made.shape] and tile.numel.value == made.numel.value
        assert type(tile.shape) is type(made.shape) and tile.dtype == made.dtype and tile.type is block
        other, wanted = block.with_element_ty(tl.int32), _original_block(tl.int32, list(shape))
        assert other == wanted and other.name == wanted.name
    assert tl.block_type(element_ty, list(shape)).shape is block.shape  # shared, not made again
    assert tl.tensor(None, block).shape is tile.shape
    scalar = tl.tensor(None, element_ty)
    assert list(scalar.shape) == [] and scalar.numel.value == 1 and scalar.dtype == element_ty


@pytest.mark.parametrize("shape, error", [([3], ValueError), ([], TypeError), ([2 ** 21, 2 ** 10], ValueError)])
def test_a_bad_block_shape_raises_every_time(shape, error):
    """A shape Triton refuses (an extent not a power of two, no extent, too many elements) is
    refused each time, as Triton's constructor refuses it, never remembered."""
    speed_up()
    for _ in range(2):
        with pytest.raises(error) as raised:
            tl.block_type(tl.float32, shape)
        with pytest.raises(error) as expected:
            _original_block(tl.float32, shape)
        assert str(raised.value) == str(expected.value)


@triton.jit
def _to_bf16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.bfloat16), mask=offs < n)


def test_float32_rounds_to_bf16_as_torch_rounds():
    """round_as_the_gpu (conftest applies it): float32 -> bf16 to nearest, ties to even, bit for
    bit as torch's conversion, over random floats of every magnitude and sign, exact ties both
    ways, the largest finite floats (to inf), subnormals, zeros, infinities; NaN stays NaN."""
    generator = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (4096,), generator=generator, dtype=torch.int64).to(torch.int32)
    ties = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 2.0**-130 * (1 + 2**-8)])
    edges = torch.tensor([3.4028235e38, -3.4028235e38, 1e-40, -1e-45, 0.0, -0.0, float("inf"), -float("inf"),
                          float("nan")])
    x = torch.cat([bits.view(torch.float32), ties, edges])
    y = torch.empty(x.shape, dtype=torch.bfloat16)
    _to_bf16[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    finite = ~x.isnan()
    assert torch.equal(y.view(torch.int16)[finite], x.bfloat16().view(torch.int16)[finite])
    assert y[x.isnan()].isnan().all()
