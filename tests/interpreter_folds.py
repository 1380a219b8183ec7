"""Triton's interpreter folds a ``tl.reduce`` or ``tl.associative_scan`` whose combine function it
does not know (tilegen's ``multiply`` of ``prod`` and of a running product's scan) one element at
a time: a Python call of the combine function per element of the tile, padding lanes included
(a [8, 512] tile is 4096 calls). :func:`install` replaces those two loops, for the test run, by
the same fold done a slice at a time: along the reduced axis, position by position in the same
order, each call combining the slices of every other axis at once. Each output element is the
same left fold of the same values by the same function, so the results are bit for bit those
of the interpreter's own loops (tests/test_interpreter_folds.py compares them); a combine
function that cannot take whole slices falls back to the interpreter's loop.
"""

from __future__ import annotations

import numpy as np


def _fold_reduce(self, input):
    """``ReduceOps.generic_reduce``, a slice at a time (see the module's docstring)."""
    import triton.language as tl

    original_axis = self.axis
    input, axis = self.unravel(input, self.axis)
    input_shape = input[0].handle.data.shape
    output_shape = input_shape[0:axis] + input_shape[axis + 1:]
    input_data = [arg.handle.data for arg in input]
    output_data = [np.zeros(output_shape, dtype=d.dtype) for d in input_data]
    for position in range(input_shape[axis]):
        items = [np.take(d, position, axis=axis) for d in input_data]
        if position == 0:
            for out, item in zip(output_data, items, strict=True):
                out[...] = item
            continue
        acc = tuple(self.to_tensor(o.copy(), arg.dtype) for o, arg in zip(output_data, input, strict=True))
        new = tuple(self.to_tensor(i, arg.dtype) for i, arg in zip(items, input, strict=True))
        result = self.combine_fn.fn(*acc, *new)
        result = result if isinstance(result, tuple) else (result,)
        for out, value in zip(output_data, result, strict=True):
            out[...] = np.reshape(value.handle.data, output_shape) if isinstance(value, tl.core.tensor) else value
    ret = []
    for data, arg in zip(output_data, input, strict=True):
        if self.keep_dims:
            if original_axis is not None:
                data = np.expand_dims(data, axis)
            else:
                for _ in range(len(input_shape)):
                    data = np.expand_dims(data, 0)
        elif original_axis is None:
            data = data.item()
        ret.append(self.to_tensor(data, arg.dtype))
    return ret


def _fold_scan(self, input):
    """``ScanOps.generic_scan``, a slice at a time (see the module's docstring)."""
    import triton.language as tl

    shape = input[0].handle.data.shape
    axis = self.axis
    input_data = [arg.handle.data for arg in input]
    output_data = [np.zeros(shape, dtype=d.dtype) for d in input_data]

    def at(position):
        return (slice(None),) * axis + (position,)

    for position in range(shape[axis]):
        items = [d[at(position)] for d in input_data]
        if position == 0:
            for out, item in zip(output_data, items, strict=True):
                out[at(0)] = item
            continue
        acc = tuple(self.to_tensor(o[at(position - 1)].copy(), arg.dtype)
                    for o, arg in zip(output_data, input, strict=True))
        new = tuple(self.to_tensor(i, arg.dtype) for i, arg in zip(items, input, strict=True))
        result = self.combine_fn.fn(*acc, *new)
        result = result if isinstance(result, tuple) else (result,)
        for out, value in zip(output_data, result, strict=True):
            target = out[at(position)]
            out[at(position)] = (np.reshape(value.handle.data, target.shape) if isinstance(value, tl.core.tensor)
                                 else value)
    return [self.to_tensor(data, arg.dtype) for data, arg in zip(output_data, input, strict=True)]


def _with_fallback(fast, slow):
    def fold(self, input):
        try:
            return fast(self, input)
        except Exception:  # a combine function that takes only scalars: the interpreter's own loop
            return slow(self, input)

    fold.__doc__ = fast.__doc__
    fold.slow = slow
    return fold


def install() -> bool:
    """Put the slice-at-a-time folds in place of the interpreter's (once per process). Returns
    False, changing nothing, where this Triton's interpreter has no such loops to replace."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    reduce_ops, scan_ops = getattr(interpreter, "ReduceOps", None), getattr(interpreter, "ScanOps", None)
    if not (hasattr(reduce_ops, "generic_reduce") and hasattr(scan_ops, "generic_scan")):
        return False
    if not hasattr(reduce_ops.generic_reduce, "slow"):
        reduce_ops.generic_reduce = _with_fallback(_fold_reduce, reduce_ops.generic_reduce)
        scan_ops.generic_scan = _with_fallback(_fold_scan, scan_ops.generic_scan)
    return True
