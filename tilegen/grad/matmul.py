"""The backward of a matmul spec, derived: ``dot``'s rule, two products with the layouts swapped.

A spec whose body is one accumulate-dot loop and the store of its accumulator

    acc: f32[m, n] = 0
    for k over K by BK
      acc += dot(a[m, k], b[k, n])
    c[m, n] = acc

has the backward ``da = dc @ b^T`` and ``db = a^T @ dc`` (the rule of ``dot`` in reverse mode), two
kernels: ``<kernel>_backward_da`` on a grid over ``m`` and ``k`` looping over ``n`` (``acc += dot(dc[m,
n], b[k, n])``: the contraction over both operands' last axis), and ``<kernel>_backward_db`` on a grid
over ``k`` and ``n`` looping over ``m`` (``dot(a[m, k], dc[m, n])``: over both operands' first axis,
which the compiler transposes). Each keeps the forward's declarations: its blocks, tune configs,
access style, swizzle (the swizzled pair renamed), ``split tail`` and the loop's ``split``, and each
axis keeps its bounds (the forward's loop's ``unmasked`` moves to the grid axis over ``K``). Batch
axes (``b over B``) stay. The inputs' gradients are computed in float32 and stored in their dtypes.
"""

from __future__ import annotations

import re

from tilegen import model as m
from tilegen.functions import lookup
from tilegen.grad.declarations import NoBackward, backward_name, declarations, declared, float_tensor
from tilegen.spec_text import expr_text, index_text, safe_path


def is_dot_body(spec: m.Spec) -> bool:
    """True for a body of one accumulator, one ``for`` loop of ``acc += dot(...)`` and a store."""
    body = spec.body
    return (len(body) == 3 and isinstance(body[0], m.Declare) and isinstance(body[1], m.Loop)
            and isinstance(body[2], m.Store) and m.is_dot_loop(body[1]) and len(body[1].body) == 1)


def derive_dot_backwards(spec: m.Spec) -> tuple[tuple[str, str], ...]:
    """The (kernel name, ``.tile`` text) of the two backward kernels of the matmul ``spec`` (see the
    module's docstring), da's first. Raises :class:`NoBackward` where the body is another form: an
    epilogue after the loop (the store must be the accumulator, or a cast of it), a dot of loads of
    other tensors than two float inputs, a ``choose`` line, a whole grid axis of a's rows or b's columns."""
    spec = m.specialize(spec, spec.bindings()[0])  # dtypes known; the text writes the variables
    declare, loop, store = spec.body
    assert isinstance(declare, m.Declare) and isinstance(loop, m.Loop) and isinstance(store, m.Store), "is_dot_body"
    update = loop.body[0]
    assert isinstance(update, m.Accumulate) and isinstance(update.value, m.Call), "is_dot_body: acc += dot(...)"
    call = update.value
    if spec.choices:
        raise NoBackward("a 'choose' line: the chosen function is not known until the launch", spec.choices[0].span)
    value = store.value
    if isinstance(value, m.Call) and (f := lookup(value.func)) is not None and f.kind == "cast" and value.args:
        value = value.args[0]
    if not (isinstance(value, m.Ref) and value.name.id == declare.name.id == update.name.id):
        raise NoBackward(f"'{store.tensor.id}' stores more than the accumulator (an epilogue): only a "
                         f"matmul's plain product is derived yet; write the backward by hand", store.span)
    if not m.expr_key(declare.init) == ("number", "0"):
        raise NoBackward(f"'{declare.name.id}' starts at {expr_text(declare.init)}, not 0", declare.span)
    a, b = call.args
    assert isinstance(a, m.Load) and isinstance(b, m.Load), "is_dot_body: a dot of two loads"
    tensors = {t.name.id: t for t in spec.tensors}
    for load in (a, b):
        tensor = tensors[load.tensor.id]
        if tensor.role != "in" or not float_tensor(tensor) or not all(isinstance(i, m.Name) for i in load.index):
            raise NoBackward(f"the dot reads '{load.tensor.id}', which is not a float input read at axes",
                             load.span)
    out = tensors[store.tensor.id]
    k = loop.axis.name.id
    grid = {axis.name.id: axis for axis in spec.grid}
    left = [i.id for i in a.index if isinstance(i, m.Name) and i.id in grid and not grid[i.id].is_index]
    right = [i.id for i in b.index if isinstance(i, m.Name) and i.id in grid and not grid[i.id].is_index]
    if len(left) != 1 or len(right) != 1 or left == right:
        raise NoBackward("the dot's operands do not each span one tiled grid axis", call.span)
    i, j = left[0], right[0]
    for axis in (grid[i], grid[j]):
        if axis.block is None:  # a backward product loops over it in blocks
            raise NoBackward(f"grid axis '{axis.name.id}' is whole (no block): only a matmul tiled along a's rows "
                             f"and b's columns is derived yet; give it a block or write the backward by hand",
                             axis.span)
    kwargs = "".join(f", {key.id}={v.name.id if isinstance(v, m.Ref) else expr_text(v)}" for key, v in call.kwargs)
    dc = f"d{out.name.id}[{', '.join(index_text(x) for x in store.index)}]"
    a_text, b_text = expr_text(a), expr_text(b)
    dtypes = {name: tensors[name].dtype for name in (a.tensor.id, b.tensor.id, out.name.id)}
    widest = max(dtypes.values(), key=lambda d: m.DTYPE_BYTES[d.id])

    def operand(text: str, tensor: str) -> str:  # the dot's operands in one dtype: the widest's
        return text if dtypes[tensor].id == widest.id else f"{m.as_written(widest)}({text})"

    dc_a, b_in = operand(dc, out.name.id), operand(b_text, b.tensor.id)
    a_in, dc_b = operand(a_text, a.tensor.id), operand(dc, out.name.id)
    a_name, b_name, c_name = a.tensor.id, b.tensor.id, out.name.id
    typed = {name: f"{name}: {declared(tensors[name])}" for name in (a_name, b_name, c_name)}
    da = _kernel(spec, f"{backward_name(spec.name.id)}_d{a_name}", replaced=j, by=loop.axis, loop=grid[j],
                 split=loop.split, ins=[f"d{typed[c_name]}", typed[b_name]], out=f"d{typed[a_name]}", acc=(i, k),
                 body=f"dot({dc_a}, {b_in}{kwargs})", store=f"d{a_text}", what=f"d{a_name} = d{c_name} @ {b_name}^T")
    db = _kernel(spec, f"{backward_name(spec.name.id)}_d{b_name}", replaced=i, by=loop.axis, loop=grid[i],
                 split=loop.split, ins=[typed[a_name], f"d{typed[c_name]}"], out=f"d{typed[b_name]}", acc=(k, j),
                 body=f"dot({a_in}, {dc_b}{kwargs})", store=f"d{b_text}", what=f"d{b_name} = {a_name}^T @ d{c_name}")
    return da, db


def _kernel(spec: m.Spec, name: str, *, replaced: str, by: m.Axis, loop: m.Axis, split: bool, ins: list[str],
            out: str, acc: tuple[str, str], body: str, store: str, what: str) -> tuple[str, str]:
    """One backward product: ``spec``'s declarations with the grid axis ``replaced`` swapped for the
    forward loop's axis ``by``, and a loop over ``loop`` (the replaced axis)."""
    def rewrite(word: str, line: str) -> str:
        if word == "grid":
            return line.replace(_axis_text(loop), _axis_text(by))
        return re.sub(rf"\b{replaced}\b", by.name.id, line) if word == "swizzle" else line

    tensors = [f"  in  {text}\n" for text in ins] + [f"  out {out}\n"]
    bounds = " unmasked" if loop.bounds == "unmasked" else ""  # a wrapped grid axis's loop is masked
    lines = [f"# A backward product of {safe_path(spec.path)}, derived by tilegen (tilegen show --grad): {what}.\n",
             f"kernel {name}\n", *declarations(spec, tensors, keep=lambda line: _fits(line, loop), rewrite=rewrite),
             f"  acc: f32[{acc[0]}, {acc[1]}] = 0\n",
             f"  for {loop.name.id} over {loop.dim.id} by {_block(loop)}{bounds}{' split' if split else ''}\n",
             f"    acc += {body}\n",
             f"  {store} = acc\n"]
    return name, "".join(lines)


def _fits(line: str, loop: m.Axis) -> bool:
    """False for a config line that gives the new loop's block a size a loop cannot take: not a power
    of two (the forward's two-piece row blocks, 192 = 128 + 64, are for a grid axis of a dot's rows)."""
    found = re.search(rf"\b{_block(loop)}\s*=\s*(\d+)", line)
    return found is None or (int(found.group(1)) & (int(found.group(1)) - 1)) == 0


def _axis_text(axis: m.Axis) -> str:
    """``n over N by BN`` (with its bounds) as a grid line writes it."""
    bounds = f" {axis.bounds}" if axis.bounds in ("unmasked", "wrapped") else ""
    return f"{axis.name.id} over {axis.dim.id} by {_block(axis)}{bounds}"


def _block(axis: m.Axis) -> str:
    """The block parameter of ``axis``, a loop axis or a grid axis :func:`derive_dot_backwards` has
    checked to have one."""
    assert axis.block is not None, f"axis '{axis.name.id}' has no block"
    return axis.block.id


__all__ = ["derive_dot_backwards", "is_dot_body"]
