"""Faster kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``) for tilegen's own processes:
``tilegen run`` and ``tilegen demo`` on a machine without a GPU, and the test suite.

:func:`speed_up` replaces four pieces of Triton's interpreter with ones that skip work whose
result the interpreter drops or has already done; no kernel's result changes. Each applies only
where the interpreter has what it replaces (Triton 3.9 has all four); a Triton without it runs
as it is. A user's own process that imports a generated module is left alone.

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
    setattr(interpreter, _MARK, True)


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
