"""Indexing rules: ``tensor[index]`` (rank, roles, axes over the dimensions they index,
constant indices), gathers through a loaded index, and the one block shape of a TMA
descriptor. Each function reports to the :class:`~tilegen.check.state.CheckState` it is given
and raises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilegen import model as m
from tilegen.check.state import MAX_TMA_BOX, CheckState, Scope, block_text, is_two_pieces
from tilegen.dtypes import is_int
from tilegen.spec_text import extent_text

#: One item of a tensor's index as the parser makes it: an axis, a constant, a gather (a load of
#: an integer tensor) or an offset axis (arithmetic of an axis, ``c + N / 2``).
IndexItem = m.Index


def index_axes(
    state: CheckState, tensor_name: m.Name, index: Sequence[IndexItem], scope: Scope, writing: bool,
    atomic: bool = False,
) -> tuple[str, ...]:
    """Check ``tensor[index]`` (``atomic``: the target of a scatter-add, max or min) and return the axes it spans, in
    index order."""
    tensor = state.spec.tensor(tensor_name.id)
    if tensor is None:
        state.errors.error(f"unknown tensor '{tensor_name.id}'", tensor_name.span)
        return ()
    if writing and tensor.role == "in":
        state.errors.error(
            f"input tensor '{tensor.name.id}' is written; only 'out' tensors can be stored to", tensor_name.span
        )
    if not writing and tensor.role == "out":
        state.errors.error(
            f"output tensor '{tensor.name.id}' is read; only 'in' tensors can be loaded", tensor_name.span
        )
    if tensor.is_scalar:
        state.errors.error(f"'{tensor.name.id}' is a scalar; use it without an index", tensor_name.span)
        return ()
    if tensor.zero_dim and not writing:
        state.errors.error(f"'{tensor.name.id}' is a 0-dim input; read it by its name, without an index",
                           tensor_name.span)
        return ()
    if len(index) != len(tensor.dims):
        state.errors.error(
            f"tensor '{tensor.name.id}' has rank {len(tensor.dims)} but is indexed with {len(index)} "
            f"{'index' if len(index) == 1 else 'indices'}",
            tensor_name.span,
        )
        return ()
    if writing and not atomic and sum(m.is_offset(i) for i in index) > 1:
        why = digits_fault(index, scope)
        if why is not None:
            state.errors.error(f"a store to '{tensor.name.id}' takes one offset index, not several, or the digits "
                               f"of a tile axis (y[n, p // W, p % W]); {why}", tensor_name.span)
    result: list[str] = []
    bare = {i.id for i in index if isinstance(i, m.Name)}  # the axes that index a dimension by themselves
    gathered: list[str] = []  # the axes of loaded indices: x[idx[t, c], c] spans c once, as torch.gather
    for position, (item, dim) in enumerate(zip(index, tensor.dims, strict=True)):
        if isinstance(item, m.Load):
            gathered += [a for a in gather_axes(state, tensor, item, scope, writing) if a not in result]
            continue
        if isinstance(item, (m.BinOp, m.Neg)):  # an offset axis (m.is_offset)
            for offset in offset_axes(state, tensor, item, scope, writing, atomic):
                if offset in result and offset in divided_axes(index, scope) and offset not in bare:
                    continue  # x[q // KW, q % KW]: the lanes of q walk the two dimensions together
                if offset in result:  # x[j, j + 1]: one tile axis spans one dimension of the tile
                    state.errors.error(f"axis '{offset}' indexes '{tensor.name.id}' twice", item.span)
                else:
                    result.append(offset)
            continue
        if isinstance(item, m.Number):
            if not item.is_int:
                state.errors.error("a constant index must be an integer", item.span)
            elif isinstance(dim, m.Number) and dim.is_int and int(item.text) >= int(dim.text):
                state.errors.error(
                    f"index {item.text} is out of range for dimension {position} of "
                    f"'{tensor.name.id}' (size {dim.text})",
                    item.span,
                )
            continue
        if isinstance(item, m.Call):
            state.errors.error(f"a call ('{item.func.id}') cannot index '{tensor.name.id}': an index is an axis, an "
                               f"integer, an offset axis or a gather", item.span)
            continue
        axis = scope.axes.get(item.id)
        if axis is None and item.id in scope.locals:  # h = x[r] + 1: not index arithmetic (model.index_locals)
            state.errors.error(f"'{item.id}' is a local that is not index arithmetic: an index takes an axis, an "
                               "integer, a gather, or arithmetic of axes, sizes and integers, written out or as a "
                               "local assigned once to it (h = stride * oh + kh - padding)", item.span)
            continue
        if axis is None:
            state.errors.error(f"unknown axis '{item.id}'", item.span)
            continue
        if item.id in state.alias_of and not writing:
            state.errors.error(
                f"swizzled axis '{item.id}' can only index the tensor a statement stores to; "
                f"load with '{state.alias_of[item.id]}'",
                item.span,
            )
        dim_text = dim.id if isinstance(dim, m.Name) else dim.text
        shorter = (axis.is_index and isinstance(axis.extent, m.BinOp) and axis.extent.op == "-"
                   and isinstance(axis.extent.left, m.Ref) and axis.extent.left.name.id == dim_text
                   and isinstance(axis.extent.right, m.Number))  # b over B1 - 1 indexes offsets: i64[B1]
        # a size symbol, or a literal dimension (x: f32[N, 4] with k over 4)
        if dim_text != axis.dim.id and not shorter:
            state.errors.error(
                f"axis '{item.id}' tiles '{extent_text(axis)}', but dimension {position} of "
                f"'{tensor.name.id}' is '{dim_text}'",
                item.span,
            )
        if item.id in result:
            state.errors.error(f"axis '{item.id}' indexes '{tensor.name.id}' twice", item.span)
        if not axis.is_index:  # an index axis is a scalar offset, not a tile dimension
            result.append(item.id)
    known = all(not isinstance(i, m.Name) or i.id in scope.axes for i in index)  # else: reported above
    if state.spec.access_style == "descriptor" and known and not any(isinstance(i, m.Load) for i in index):
        check_descriptor_block(state, tensor, index, scope, tensor_name.span)
    return tuple(dict.fromkeys(gathered + result))


def divided_axes(index: Sequence[IndexItem], scope: Scope) -> set[str]:
    """The tile axes ``//`` or ``%`` divides in ``index`` (``q`` of ``x[q // KW, q % KW]``)."""
    return {e.name.id for item in index if m.is_offset(item) for part in m.subexpressions(item)
            if isinstance(part, m.BinOp) and part.op in m.FLOOR_OPERATORS
            for e in m.subexpressions(part.left)
            if isinstance(e, m.Ref) and e.name.id in scope.axes and not scope.axes[e.name.id].is_index}


def _factors(expr: m.Expr) -> tuple[tuple[object, ...], ...]:
    """A product of sizes and integers as the sorted keys of its factors (``KH * KW``: ``KW * KH``)."""
    if isinstance(expr, m.BinOp) and expr.op == "*":
        return tuple(sorted(_factors(expr.left) + _factors(expr.right), key=repr))
    if isinstance(expr, m.Number) and expr.text == "1":
        return ()
    return (m.expr_key(expr),)


def digits_fault(index: Sequence[IndexItem], scope: Scope) -> str | None:
    """Why the offsets of a store's ``index`` are not the digits of tile axes, or None where they
    are: ``p % W`` and ``p // W`` (``q % KW``, ``q // KW % KH``, ``q // (KH * KW)``), each axis's
    divisors the products of the moduli before them, its last digit without one. Digits write each
    element from one lane of the axis (a mixed-radix number is one number), so a store with '='
    may take them."""
    found: dict[str, list[tuple[tuple[object, ...], tuple[object, ...] | None]]] = {}
    for item in index:
        if not m.is_offset(item):
            continue
        divisor: m.Expr | None = None
        modulus: m.Expr | None = None
        part: m.Expr = item
        if isinstance(item, m.BinOp) and item.op == "%":
            part, modulus = item.left, item.right
        if isinstance(part, m.BinOp) and part.op == "//":
            divisor = part.right
            part = part.left
        axis = part.name.id if isinstance(part, m.Ref) and part.name.id in scope.axes else None
        if axis is None or (divisor is None and modulus is None):
            return "each offset is 'p // D', 'p // D % M' or 'p % M' of a tile axis 'p'"
        found.setdefault(axis, []).append((_factors(divisor) if divisor is not None else (),
                                           _factors(modulus) if modulus is not None else None))
    for axis, digits in found.items():
        place: tuple[object, ...] | None = ()
        for _ in digits:
            digit = next((d for d in digits if d[0] == place), None) if place is not None else None
            if digit is None or place is None:
                return (f"the digits of '{axis}' are not its mixed-radix digits: each divisor is the product of the "
                        "moduli before it (p % W, p // W), and the last has no modulus")
            place = tuple(sorted(place + digit[1], key=repr)) if digit[1] is not None else None
        if place is not None:
            return (f"the last digit of '{axis}' has no modulus ('p // W', not 'p // W % H'): it holds the rest of "
                    f"'{axis}'")
    return None


def offset_axes(
    state: CheckState, tensor: m.Tensor, item: m.BinOp | m.Neg, scope: Scope, writing: bool = False,
    atomic: bool = False,
) -> list[str]:
    """``x[r, c + N / 2]``, ``x[b, S * oh + kh * D - P]``: an offset index, in a load or a store
    through pointers (through a tensor descriptor, an offset of index axes and sizes alone,
    ``k[z, h / (H / HK), n, d]``: one number per program, a block of 1): tile axes (none, one, or a
    window of several) each times a factor of sizes, integer scalar inputs and integers (a stride,
    a dilation), plus or minus an offset of sizes, integer scalar inputs, integers, index axes
    (``g * CG + c``) and loads of an integer tensor at index axes (``offsets[r] + c``: a start from
    data), with ``+ - * /`` (a quotient of sizes that scales an axis must divide, which the
    launcher checks; other quotients and an index axis divided round down). A tile axis is not
    divided, nor multiplied by a tile axis; lanes whose index falls outside the dimension read 0,
    and a store leaves them out. A store with ``=`` takes one offset, whose one tile axis enters
    with a factor of 1 (a stride would leave elements between unwritten, a window would write one
    element from several lanes); a scatter-add (``+=``) takes windows and strides. Returns the tile
    axes, in order."""
    where = f"the index of '{tensor.name.id}'"

    def tile_names(expr: m.Expr) -> list[str]:
        return [e.name.id for e in m.subexpressions(expr)
                if isinstance(e, m.Ref) and e.name.id in scope.axes and not scope.axes[e.name.id].is_index]

    per_program = not tile_names(item) and not any(isinstance(e, m.Load) for e in m.subexpressions(item))
    if state.spec.access_style == "block_ptr" or (state.spec.access_style == "descriptor" and not per_program):
        state.errors.error(f"{where} is an offset, which goes through pointers only (this spec has "
                           f"'access {state.spec.access_style}'; a descriptor takes an offset of index axes "
                           "and sizes alone, one number per program)", item.span)
        return []
    scalars = {t.name.id for t in state.spec.inputs if t.is_scalar and is_int(t.dtype.id)}
    tiles: list[tuple[str, bool]] = []  # each tile axis, and whether it enters with a factor of 1
    divided: list[str] = []  # the tile axes under '//' or '%' (q // KW): lanes that read one element alike
    wrong: list[tuple[str, str, m.Span]] = []  # (axis, why, where) of a tile axis that is not a window's term

    def walk(expr: m.Expr, linear: bool) -> None:  # linear: added, a factor of 1
        if isinstance(expr, m.Number):
            if not expr.is_int:
                state.errors.error(f"{where} takes integers, not {expr.text}", expr.span)
        elif isinstance(expr, m.Ref):
            name = expr.name.id
            if name in scope.axes and not scope.axes[name].is_index:
                tiles.append((name, linear))
            elif name not in scope.axes and name not in state.dims and name not in scalars:
                state.errors.error(f"'{name}' in {where} is not an axis, a size or an integer scalar input",
                                   expr.span)
        elif isinstance(expr, m.Load):  # x[offsets[r] + c]: a loaded start, one number per program
            source = state.spec.tensor(expr.tensor.id)
            spanned = index_axes(state, expr.tensor, expr.index, scope, writing=False)
            if source is not None and not source.is_scalar and not is_int(source.dtype.id):
                state.errors.error(f"'{source.name.id}' in {where} is {source.dtype.id}; a loaded offset is an "
                                   "integer tensor", expr.span)
            if spanned:
                state.errors.error(f"'{expr.tensor.id}[...]' in {where} spans tile axis '{spanned[0]}'; a loaded "
                                   "offset is one number per program: index it with index axes (r over R) and "
                                   "constants",
                                   expr.span)
            if not linear:
                state.errors.error(f"a loaded offset in {where} enters added or subtracted (offsets[r] + c)",
                                   expr.span)
        elif isinstance(expr, m.Neg):
            walk(expr.operand, False)
        elif isinstance(expr, m.BinOp) and expr.op in ("+", "-"):
            walk(expr.left, linear)
            walk(expr.right, linear and expr.op == "+")
        elif isinstance(expr, m.BinOp) and expr.op == "*":
            left, right = tile_names(expr.left), tile_names(expr.right)
            if left and right:
                wrong.append((left[0], f"is multiplied by tile axis '{right[0]}'", expr.span))
            walk(expr.left, False)
            walk(expr.right, False)
        elif isinstance(expr, m.BinOp) and expr.op == "/":
            for name in tile_names(expr):
                wrong.append((name, "is divided with '/', which divides sizes", expr.span))
            walk(expr.left, False)
            walk(expr.right, False)
        elif isinstance(expr, m.BinOp) and expr.op in m.FLOOR_OPERATORS:  # q // KW, q % KW: a gather's index
            for name in tile_names(expr.right):
                wrong.append((name, f"divides ('{expr.op}')", expr.span))
            if any(isinstance(e, m.Load) for e in m.subexpressions(expr)):
                state.errors.error(f"a loaded offset in {where} enters added or subtracted, not under '{expr.op}'",
                                   expr.span)
            divided.extend(tile_names(expr.left))
            walk(expr.left, False)
            walk(expr.right, False)
        else:
            state.errors.error(f"{where} is arithmetic (+ - * /) of axes, sizes and integers", expr.span)

    walk(item, True)
    for name, why, span in wrong[:1]:
        state.errors.error(f"in {where}, tile axis '{name}' {why}: a tile axis enters added, subtracted or times a "
                           "factor of sizes and integers (S * oh + kh - P), or split into digits with '//' and '%' "
                           "(q // KW, q % KW)", span)
    names = [t for t, _ in tiles]
    twice = [t for t in dict.fromkeys(names) if names.count(t) > 1 and t not in divided]
    if twice:
        state.errors.error(f"tile axis '{twice[0]}' enters {where} twice; write it once (2 * c, not c + c)", item.span)
    if writing and not atomic and len(tiles) > 1:
        state.errors.error(f"a store with '=' to '{tensor.name.id}' offsets one tile axis, not {len(tiles)} "
                           f"({', '.join(names)}): lanes of a window would write one element; add them with "
                           "'+=' into an output declared '= 0'", item.span)
    elif writing and not atomic and tiles and not tiles[0][1] and tiles[0][0] not in divided:  # digits: index_axes
        state.errors.error(f"in {where}, '{tiles[0][0]}' must enter a store with '=' with a factor of 1: the axis "
                           "plus or minus an offset (c + N / 2, c - 1); a stride would leave the elements between "
                           "unwritten (a scatter-add, '+=', takes one)", item.span)
    return list(dict.fromkeys(names))


def check_descriptor_block(
    state: CheckState, tensor: m.Tensor, index: Sequence[IndexItem], scope: Scope, span: m.Span
) -> None:
    """A TMA descriptor has one block shape (index axes and constants are blocks of 1), and
    its rows are at least 16 bytes: every access of a tensor takes tiles of one shape, and
    its last index is a tile axis."""
    blocks: list[str] = []
    for item in index:
        axis = scope.axes.get(item.id) if isinstance(item, m.Name) else None
        if axis is None or axis.is_index:
            blocks.append("1")
        else:
            blocks.append(block_text(axis))
    name = tensor.name.id
    if all(b == "1" for b in blocks):
        state.errors.error(
            f"'{name}[...]' is one element; tensor descriptors move tiles: index a tile axis or use "
            "'access pointers'",
            span,
        )
    elif blocks[-1] == "1":
        state.errors.error(
            f"the last index of '{name}' is not a tile axis: a tensor descriptor moves rows of 16 bytes or "
            "more (TMA); index the last dimension with a tile axis or use 'access pointers'",
            span,
        )
    for block in blocks:  # tuned or default values past a TMA box (a row piece's first piece)
        for value in state.param_values(block) if block in state.params else ():
            rows = int(value.text)
            rows -= rows & -rows if is_two_pieces(rows) else 0
            if rows > MAX_TMA_BOX and (value.span, block) not in state.boxes:
                state.boxes.add((value.span, block))
                state.errors.error(
                    f"block size '{block}' = {value.text} moves {rows} elements along a dimension of a tensor "
                    f"descriptor; TMA moves at most {MAX_TMA_BOX} (use a smaller block or 'access pointers')",
                    value.span,
                )
    first = state.descriptor_blocks.setdefault(name, tuple(blocks))
    if first != tuple(blocks):
        state.errors.error(
            f"'{name}' is accessed in blocks of [{', '.join(first)}] and of [{', '.join(blocks)}]: a tensor "
            "descriptor has one block shape; use one or 'access pointers'",
            span,
        )


def gather_axes(state: CheckState, tensor: m.Tensor, index: m.Load, scope: Scope, writing: bool) -> tuple[str, ...]:
    """Check a gather ``tensor[.., idx[..], ..]`` (or, ``writing``, a scatter into it) and return
    the axes of its index tile."""
    if state.spec.access_style != "pointers":
        state.errors.error(
            f"a gather needs 'access pointers'; {state.spec.access_style} cannot index by a loaded tile",
            index.span,
        )
    axes = index_axes(state, index.tensor, index.index, scope, writing=False)
    source = state.spec.tensor(index.tensor.id)
    if source is not None and not source.is_scalar and not is_int(source.dtype.id):
        state.errors.error(
            f"a gather index must be an integer tensor; '{source.name.id}' is {source.dtype.id}", index.span
        )
    return axes


#: The dtypes a scatter-add adds into (``tl.atomic_add`` on the GPU and in Triton's interpreter).
#: Not f16 or bf16: an atomic add rounds the sum at every add, where torch adds up in f32.
ATOMIC_DTYPES = ("f32", "f64", "i32", "i64")
#: The dtypes ``max=`` and ``min=`` update (``tl.atomic_max`` / ``tl.atomic_min``): integers, whose
#: order is the same on every device (a float's atomic max orders NaN and -0.0 by its bits).
EXTREMUM_DTYPES = ("i32", "i64")
#: How each atomic update is written in a spec.
UPDATE_TEXT = {"add": "+=", "max": "max=", "min": "min="}


def check_atomic_store(state: CheckState, store: m.Store) -> None:
    """``y[idx[t], c] += v`` (or ``max=``, ``min=``): ``y`` is an output declared with the number
    it starts at (``out y: f32[V, C] = 0``), of a dtype the atomic takes, accessed through
    pointers, and not also stored with ``=`` or another update (atomics and a plain store to one
    element race)."""
    tensor = state.spec.tensor(store.tensor.id)
    if tensor is None or tensor.role != "out":
        return  # index_axes reports it
    name, text = tensor.name.id, UPDATE_TEXT[store.update]
    if tensor.initial is None:
        shape = ", ".join(d.text if isinstance(d, m.Number) else d.id for d in tensor.dims)
        state.errors.error(
            f"'{name}' is updated with '{text}', so it needs a starting value: declare it "
            f"'out {name}: {tensor.dtype.id}[{shape}] = {0 if store.update == 'add' else '<number>'}'",
            store.tensor.span,
        )
    takes: tuple[str, ...] = ATOMIC_DTYPES if store.update == "add" else EXTREMUM_DTYPES
    if store.update == "add" and state.spec.deterministic is not None:  # a run's f32 sum, rounded once
        takes = ("f16", "bf16", *ATOMIC_DTYPES)
    refused = [d for d in state.spec.dtype_options(tensor.dtype) if d not in takes]
    if refused:
        narrow = refused[0] in ("f16", "bf16") and store.update == "add"
        why = (f"an atomic add into {refused[0]} rounds the sum at every add: declare '{name}' f32 and cast it "
               "after the kernel (torch adds up in f32 too)" if narrow else
               f"'{text}' on a store takes {', '.join(takes)}")
        state.errors.error(f"'{name}' is {refused[0]}; {why}", tensor.dtype.span)
    if any(isinstance(s, m.Loop) and s.split for s in m.statements(state.spec.body)):
        state.errors.error(f"a kernel with a 'split' loop cannot also update a store atomically ('{text}')",
                           store.span)
    if state.spec.access_style != "pointers":
        state.errors.error(
            f"'{text}' on a store updates through pointers (tl.atomic_*); '{state.spec.access_style}' cannot: "
            "use 'access pointers'",
            store.span,
        )
    stores = [s for s in m.statements(state.spec.body) if isinstance(s, m.Store) and s.tensor.id == name]
    other = [s for s in stores if s.update != store.update]
    if other and other[0].update:  # two kinds of update: said once, by the first of them, at the other
        if stores.index(store) < stores.index(other[0]):
            state.errors.error(
                f"'{name}' is updated with '{UPDATE_TEXT[other[0].update]}' and with '{text}'; the two race: "
                "update an output one way",
                other[0].span,
            )
    elif other:
        state.errors.error(
            f"'{name}' is stored with '=' and updated with '{text}'; a store and an atomic update to one element "
            f"race: update every value with '{text}' (the output starts at its declared value)",
            other[0].span,
        )


def check_unread_arrays(state: CheckState) -> None:
    """Under ``access descriptor`` or ``access block_ptr`` every tensor input must be read by the
    body: the launcher makes each tensor a TMA descriptor (or block pointer) of the tiles the body
    accesses, which a tensor never accessed has none of (its launch failed with Triton's "rank
    mismatch"). A scalar input, and a tensor read through pointers, need no such thing."""
    style = state.spec.access_style
    if style == "pointers":
        return
    read = m.tensors_read(state.spec.body)
    made = "TMA descriptor" if style == "descriptor" else "block pointer"
    for tensor in state.spec.inputs:
        if not tensor.is_scalar and tensor.name.id not in read:
            state.errors.error(
                f"input tensor '{tensor.name.id}' is never read; 'access {style}' passes each tensor as a {made} "
                f"of the tiles the body reads: read it, remove it, or write 'access pointers'", tensor.name.span)
