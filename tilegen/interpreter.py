"""Faster kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``) for tilegen's own processes:
``tilegen run`` and ``tilegen demo`` on a machine without a GPU, and the test suite.

:func:`speed_up` replaces six pieces of Triton's interpreter with ones that skip work whose
result the interpreter drops or has already done; no kernel's result changes. Each applies only
where the interpreter has what it replaces (Triton 3.9 has all six); a Triton without it runs
as it is. :func:`round_as_the_gpu` is the one patch that changes a result: the interpreter's float32
to bf16 cast rounds as the GPU's does. A user's own process that imports a generated module is
left alone.

1. The overflow checks of 32-bit integer ``+``, ``-`` and ``*``: the interpreter computes each
   again in int64 and compares it with the bounds, then drops the result (its ``device_assert``
   asserts only in debug mode, which the interpreter never turns on). Off: a third of the time of
   a kernel of index arithmetic, a pooling window's.
2. Patching ``triton.language`` at every ``@triton.jit`` call inside a kernel (a reduction's
   combine function, the runtime's ``amax``): the interpreter patches every builtin of ``tl``,
   ``tl.core``, ``tl.math`` and ``tl.tensor`` (found by ``inspect.getmembers``) when a kernel
   starts, and again, with the same values, at each such call: about 1.7 ms a call. Now only where
   the modules are not patched already.
3. ``_get_np_dtype`` (a Triton dtype's numpy dtype), which builds its table of 19 numpy dtypes at
   every call (about 27 us; the interpreter calls it at every splat, cast and load): remembered.
4. The type checks of a binary operation (``+``, ``*``, ``<``, ``tl.where``'s operands, ...) on two
   tiles of one element type (float32, float64, int32, int64 or int1): the interpreter's
   semantics work out the computation type (that type), cast each operand to it (no cast) and
   broadcast them to one shape, which returns them as they are, or with a scalar splat to the
   other's block. Done directly for the interpreter's semantics only (``interpreter_semantic``;
   a GPU compile keeps its own).
5. A block type's making: every ``tl.block_type`` (one per operation on tiles) unwraps its shape,
   checks that each extent is a power of two and their product within Triton's limit, builds the
   extents as a ``tl.tuple`` (with its tuple type) and writes its name. A shape of plain integers
   that passed once passes again: its extents object, product and text are made once and shared
   (a shape that fails is checked each time and raises as before).
6. A tile's shape: every ``tl.tensor`` the interpreter makes (one per operation) builds its
   ``shape`` (a ``tl.tuple`` of constexprs) and ``numel`` anew; for a tile of a shared block shape
   (item 5), and for 0-d tiles, they are made once and shared. Constexprs are values, and nothing
   in Triton changes a tile's shape after it is made.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

#: Set on Triton's interpreter module once :func:`speed_up` has patched it.
_MARK = "_tilegen_sped_up"


def speed_up() -> None:
    """Patch Triton's interpreter as the module docstring says (once per process; a later call
    does nothing). Imports triton: call it where ``TRITON_INTERPRET=1`` is already set."""
    from triton.runtime import interpreter

    if getattr(interpreter, _MARK, False):
        return
    builder = getattr(interpreter, "interpreter_builder", None)
    if builder is not None and hasattr(getattr(builder, "options", None), "sanitize_overflow"):
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    if callable(getattr(interpreter, "_patch_lang", None)) and hasattr(interpreter, "_LangPatchScope"):
        interpreter._patch_lang = _patch_lang_once(interpreter._patch_lang, interpreter._LangPatchScope)
    if callable(getattr(interpreter, "_get_np_dtype", None)):
        interpreter._get_np_dtype = _np_dtype_cached(interpreter._get_np_dtype)
    semantic: Any = getattr(interpreter, "interpreter_semantic", None)
    if callable(getattr(semantic, "binary_op_type_checking_impl", None)):
        semantic.binary_op_type_checking_impl = _same_types_as_they_are(semantic.binary_op_type_checking_impl)
    _remember_shapes()
    setattr(interpreter, _MARK, True)


def round_as_the_gpu() -> None:
    """Make Triton's interpreter round float32 to bf16 to nearest, ties to even, as the GPU's
    ``cvt.rn.bf16.f32`` and torch do (once per process). Triton 3.9's interpreter casts by dropping
    the low 16 bits (toward zero) whatever rounding a kernel asks for, so a bf16 kernel run there
    loses up to a unit of bf16 at each store against torch's and the GPU's result: an update
    smaller than a unit (an optimizer's step) is lost outright. NaN stays NaN (quiet). A Triton
    whose interpreter has no ``cast_impl`` runs as it is. Imports triton: call it where
    ``TRITON_INTERPRET=1`` is already set."""
    from triton.runtime import interpreter

    builder: Any = getattr(interpreter, "InterpreterBuilder", None)
    cast_impl = getattr(builder, "cast_impl", None)
    if cast_impl is None or getattr(cast_impl, "_tilegen_rounds", False):
        return
    import numpy as np
    import triton.language as tl

    def cast(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return cast_impl(self, src, dst_type)
        data = np.atleast_1d(np.asarray(src.data, dtype=np.float32))
        bits = data.view(np.uint32)
        nearest = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        quiet = (bits >> np.uint32(16)) | np.uint32(0x40)  # a NaN's sign and payload, quiet
        rounded = np.where(np.isnan(data), quiet, nearest).astype(np.uint16)
        return interpreter.TensorHandle(rounded.reshape(np.shape(src.data)), dst_type.scalar)

    cast._tilegen_rounds = True  # type: ignore[attr-defined]
    builder.cast_impl = cast


def _patch_lang_once(patch_lang: Callable[[Any], Any], empty_scope: Callable[[], Any]) -> Callable[[Any], Any]:
    """The interpreter's ``_patch_lang(fn)`` (patch the language modules among ``fn``'s globals,
    return a scope whose ``restore`` undoes it) that patches only the modules not patched already.
    A module counts as patched while its ``program_id`` is the one the last patch set (a kernel's
    end restores the original, so the next kernel patches again); a call that finds them all
    patched gets an empty scope."""
    import triton.language as tl

    marks: dict[int, object] = {}  # id of a language module -> its program_id as the last patch set it
    seen: dict[Any, list[Any]] = {}  # function -> the language modules among its globals

    def patched(fn: Any) -> Any:
        langs = seen.get(fn)
        if langs is None:
            langs = seen[fn] = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        if langs and all(getattr(lang, "program_id", None) is marks.get(id(lang)) for lang in langs):
            return empty_scope()
        scope = patch_lang(fn)
        marks.update((id(lang), lang.program_id) for lang in langs)
        return scope

    return patched


def _np_dtype_cached(np_dtype: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The interpreter's ``_get_np_dtype`` remembered per element dtype: a block's numpy dtype is
    its element's, and dtypes are equal (and hash) by name; an unhashable one (a pointer type)
    is looked up each time."""
    import triton.language as tl

    known: dict[Any, Any] = {}

    def cached(dtype: Any) -> Any:
        element = dtype.element_ty if isinstance(dtype, tl.block_type) else dtype
        try:
            return known[element]
        except KeyError:
            made = known[element] = np_dtype(element)
            return made
        except TypeError:  # not hashable
            return np_dtype(dtype)

    return cached


def _same_types_as_they_are(checking: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's ``binary_op_type_checking_impl(lhs, rhs, ...)`` (a bound method of its
    semantics) for two tiles of one element type, float32, float64, int32, int64 or int1: where
    their shapes are one (two scalars, or two tiles of one shape) it returns them as they are, and
    where one is a scalar and the other a block, the scalar splat to the block's shape, as its
    broadcast does: what its promotion (to that type), casts (none) and broadcast amount to for
    them (no pointer, so no pointer check refuses). Anything else goes through it."""
    import triton.language as tl

    kept = (tl.float32, tl.float64, tl.int32, tl.int64, tl.int1)  # compared: pointer types do not hash
    tensor = tl.tensor
    semantic: Any = getattr(checking, "__self__")  # noqa: B009 (a bound method; the type says Callable)

    def splat(scalar: Any, block: Any) -> Any:
        """``scalar`` (a 0-d tile) splat to ``block``'s shape, as broadcast_impl_value does."""
        shaped, builder = block.with_element_ty(scalar.type.scalar), semantic.builder
        return semantic.make_tensor(builder.create_splat(shaped.to_ir(builder), scalar.handle), shaped)

    def checked(lhs: Any, rhs: Any, *args: Any, **kwargs: Any) -> Any:
        if type(lhs) is tensor and type(rhs) is tensor:
            left, right = lhs.type, rhs.type
            if left.scalar == right.scalar and left.scalar in kept:
                if left == right:
                    return lhs, rhs
                if left.is_block() and not right.is_block():
                    return lhs, splat(rhs, left)
                if right.is_block() and not left.is_block():
                    return splat(lhs, right), rhs
        return checking(lhs, rhs, *args, **kwargs)

    return checked


def _remember_shapes() -> None:
    """Items 5 and 6: ``tl.block_type.__init__`` and ``tl.tensor.__init__`` that make what this
    Triton's make once per shape and hand the same objects to every later block type or tile of
    that shape (its extents as Triton holds them, their product, the text of the type's name; a
    tile's extents as constexprs). Another Triton, whose objects have other attributes, keeps its
    own. The originals stay reachable as ``_tilegen_made_by`` (tests compare with them)."""
    import triton.language as tl

    block_type, tensor, language_tuple = tl.block_type, tl.tensor, tl.tuple
    make_block, make_tensor = block_type.__init__, tensor.__init__
    probe = tensor(None, block_type(tl.float32, [2, 4]))
    if (vars(probe).keys() != {"handle", "shape", "numel", "type", "dtype"}
            or vars(probe.type).keys() != {"element_ty", "shape", "numel", "name"}):
        return
    blocks: dict[tuple[int, ...], tuple[Any, Any, str]] = {}  # extents -> block type's shape, numel, text
    shared: dict[int, Any] = {}  # id of a shape object in ``blocks`` -> the object (kept alive)
    tiles: dict[int, tuple[Any, Any]] = {}  # id of a shared shape -> a tile's shape and numel
    scalar: list[tuple[Any, Any]] = []  # a 0-d tile's shape and numel, once made

    def block_init(self: Any, element_ty: Any, shape: Any) -> None:
        extents = shape.values if type(shape) is language_tuple else shape if type(shape) is list else None
        key = tuple(extents) if extents is not None and all(type(e) is int for e in extents) else None
        known = blocks.get(key) if key is not None else None
        if known is None:
            make_block(self, element_ty, shape)  # checks the shape, and raises for a bad one
            if key is not None:
                blocks[key] = (self.shape, self.numel, str(self.shape))
                shared[id(self.shape)] = self.shape
            return
        self.element_ty = element_ty
        self.shape, self.numel, text = known
        self.name = f"<{text}, {element_ty}>"

    def tensor_init(self: Any, handle: Any, type: Any) -> None:
        block = type.is_block()
        known = tiles.get(id(type.shape)) if block else scalar[0] if scalar else None
        if known is None:
            make_tensor(self, handle, type)
            if not block:
                scalar.append((self.shape, self.numel))
            elif id(type.shape) in shared:
                tiles[id(type.shape)] = (self.shape, self.numel)
            return
        self.handle, self.type, self.dtype = handle, type, type.scalar
        self.shape, self.numel = known

    block_type.__init__ = block_init
    tensor.__init__ = tensor_init
    setattr(block_type, "_tilegen_made_by", make_block)  # noqa: B010
    setattr(tensor, "_tilegen_made_by", make_tensor)  # noqa: B010
