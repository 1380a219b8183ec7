"""Text helpers shared by the lowerings: generated names (``stride_a_m``), broadcasting
indices (``offs_m[:, None]``), Python literals and operator precedence.

Plain functions of strings and the model; the kernel, launcher and reference lowerings use
them so that the same spec piece is written the same way in each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeGuard

from tilegen import model as m
from tilegen.dtypes import COMPARISONS
from tilegen.lower.plan import IfBlock, Line, Op

#: The runtime's constant, true only under TRITON_INTERPRET=1: Triton's interpreter multiplies
#: the raw bits of bf16 tiles in ``tl.dot`` (triton-lang/triton#11584, "not supported yet"), so
#: there bf16 operands are upcast to f32 first (exact: bf16 products fit in f32). On the GPU
#: the branch is a false constexpr and compiles away.
BF16_DOT_FLAG = "_INTERPRETER_BF16_DOT"
#: The module's name for the runtime's ``@triton.jit`` helper (``tilegen.runtime.dot_operand``)
#: that applies it to one ``tl.dot`` operand.
BF16_DOT_OPERAND = "_dot_operand"

#: Python's precedence of the spec's binary operators (higher binds tighter). Python puts
#: comparisons below ``|`` and ``&``, the spec above them, so the text parenthesises them.
_PRECEDENCE = {**dict.fromkeys(COMPARISONS, 0), "|": 1, "&": 2, "+": 3, "-": 3, "*": 4, "/": 4, "//": 4, "%": 4}


def triton_dtype(dtype: m.Name) -> str:
    """The Triton dtype a spec dtype is written as in a kernel: ``tl.float16``, or the dtype
    variable's name (``T``) for a :class:`~tilegen.model.BoundDtype`."""
    return dtype.var if isinstance(dtype, m.BoundDtype) else m.DTYPES[dtype.id][0]


def torch_dtype(dtype: m.Name) -> str:
    """The torch dtype a spec dtype is written as on the host: ``torch.float16``, or the dtype
    variable's name (``T``, which the launcher and the reference bind to an input's dtype)."""
    return dtype.var if isinstance(dtype, m.BoundDtype) else m.DTYPES[dtype.id][1]


def dtype_options(dtype: m.Name) -> tuple[str, ...]:
    """Every dtype ``dtype`` may be: its variable's options, or itself."""
    return dtype.options if isinstance(dtype, m.BoundDtype) else (dtype.id,)


def required_first(tensors: Iterable[m.Tensor]) -> list[m.Tensor]:
    """``tensors`` with the optional inputs last (in order otherwise): sizes, dtypes and the device
    are read from the inputs the caller must give, and checked before an optional one is."""
    return sorted(tensors, key=lambda t: t.optional)


def plan_name(launcher: str) -> str:
    """The name of launcher ``launcher``'s plan of a call in its module (``_softmax_plan``)."""
    return f"_{launcher.lstrip('_')}_plan"


def given_name(tensor: str) -> str:
    """The launcher's local holding whether the caller gave optional input ``tensor`` (before it
    is filled in, :func:`tilegen.lower.launcher`'s ``_absent``): the kernel's ``HAS_<NAME>``."""
    return f"_{tensor}_given"


def absent_dtype(spec: m.Spec, tensor: m.Tensor) -> str:
    """The torch dtype (host text) of optional input ``tensor`` where the caller leaves it out: its
    dtype; for a dtype variable, the dtype of the required input it is read from (``x.dtype``),
    else the variable's first option."""
    if not isinstance(tensor.dtype, m.BoundDtype):
        return torch_dtype(tensor.dtype)
    source = dtype_bindings(spec).get(tensor.dtype.var)
    if source is not None and source != tensor.name.id:
        return f"{source}.dtype"
    return m.DTYPES[tensor.dtype.options[0]][1]


def chosen_dtypes(spec: m.Spec, name: str, checked: bool = True) -> list[Line]:
    """The lines binding each dtype variable the caller chooses (``dtype G in T, f32``) in
    launcher ``name`` from its keyword: ``G = _rt.chosen_dtype("name", "G", G, (T, torch.float32))``
    (the first option where the keyword is None; an option naming another variable is that
    variable, bound before these lines). Not ``checked`` (the fast path, whose key holds the
    keyword a full call checked): ``G = T if G is None else G``."""
    variables = {v.name.id for v in spec.dtype_vars}
    lines: list[Line] = []
    for var in spec.chosen_dtype_vars():
        v = var.name.id
        options = [o.id if o.id in variables else m.DTYPES[o.id][1] for o in var.options]
        lines.append(Line(f'{v} = _rt.chosen_dtype("{name}", "{v}", {v}, {tuple_text(options)})' if checked else
                          f"{v} = {options[0]} if {v} is None else {v}"))
    return lines


def dtype_bindings(spec: m.Spec, pointer: str = "{name}") -> dict[str, str]:
    """Dtype variable -> where it is read: the first input tensor typed with it, through
    ``pointer`` (``"{name}"``: the input's name; ``"{name}.dtype"`` on the host,
    ``"{name}_ptr.dtype.element_ty"`` in a kernel); where no input is, the first output (a
    finish kernel's, :mod:`tilegen.lower.finish`, whose inputs are float32 partials)."""
    found: dict[str, str] = {}
    for t in (*required_first(spec.inputs), *spec.outputs):
        if not t.is_scalar and isinstance(t.dtype, m.BoundDtype):
            found.setdefault(t.dtype.var, pointer.format(name=t.name.id))
    return found


def binop_text(expr: m.BinOp, left: str, right: str) -> str:
    """``left op right`` with parentheses only where Python's precedence needs them (the same
    text for Triton and torch, so both evaluate in the spec's order). Comparisons never chain."""
    prec = _PRECEDENCE[expr.op]
    if isinstance(expr.left, m.BinOp) and (
        _PRECEDENCE[expr.left.op] < prec or (prec == 0 and _PRECEDENCE[expr.left.op] == 0)
    ):
        left = f"({left})"
    if isinstance(expr.right, m.BinOp) and _PRECEDENCE[expr.right.op] <= prec:
        right = f"({right})"
    return f"{left} {expr.op} {right}"


def default_text(t: m.Tensor, equals: str) -> str:
    """``equals`` and the default of a scalar input (``in eps: f32 = 1e-5``: `` = 1e-05``), as a
    Python number of the launcher's type (a float for a float dtype), or None for an optional
    tensor input; empty where it has none."""
    if t.optional:
        return equals + "None"
    return "" if t.default is None else equals + repr(t.default)


def parameters(spec: m.Spec) -> tuple[str, ...]:
    """The launcher's inputs as its ``def`` and the reference's name them: each scalar input with
    its default (``ignore_index=-100``)."""
    return tuple(t.name.id + default_text(t, "=") for t in spec.inputs)


def number_text(expr: m.Expr) -> str:
    """A constant (a number, or a negated one) as Python writes it: ``inf`` is ``float("inf")``,
    ``-inf`` ``float("-inf")``. The checker lets no other expression be one."""
    if isinstance(expr, m.Neg):
        inner = number_text(expr.operand)
        return 'float("-inf")' if inner == 'float("inf")' else f"-{inner}"
    assert isinstance(expr, m.Number), f"not a constant: {expr}"
    return 'float("inf")' if expr.text == "inf" else expr.text


def printable(text: str, strip: bool = True) -> str:
    """Text safe inside a one-line ``#`` comment: no control or line-separator characters."""
    text = "".join(c if c.isprintable() else "?" for c in text.expandtabs(4)).rstrip()
    return text.strip() if strip else text


def call_text(function: str, groups: Iterable[Sequence[str]]) -> str:
    """A call with one argument group per line (a launch, or a kernel's call of its tile function);
    an empty group writes no line."""
    lines = [f"{function}("] + [f"    {', '.join(group)}," for group in groups if group]
    return "\n".join([*lines, ")"])


def tuple_text(items: Iterable[str]) -> str:
    """A Python tuple literal: ``(a, b)``, ``(a,)``."""
    texts = list(items)
    return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"


def broadcast(var: str, axis: str, context: tuple[str, ...]) -> str:
    """Index ``var`` (1-D over ``axis``) so it broadcasts in a tile over ``context``.

    ``broadcast("offs_m", "m", ("m", "n"))`` is ``offs_m[:, None]``.
    """
    if len(context) <= 1:
        return var
    return var + "[" + ", ".join(":" if a == axis else "None" for a in context) + "]"


def broadcast_tile(var: str, axes: tuple[str, ...], context: tuple[str, ...]) -> str:
    """Index a tile over ``axes`` (a subsequence of ``context``) so it broadcasts over ``context``."""
    if axes == context or not axes:
        return var
    return var + "[" + ", ".join(":" if a in axes else "None" for a in context) + "]"


def size_symbols(spec: m.Spec) -> tuple[str, ...]:
    """Symbolic dimensions in order of first appearance, then the derived ones (``C_over_G``)."""
    seen: list[str] = []
    scalars = {t.name.id for t in spec.inputs if t.is_scalar}  # g over G: G is passed as a scalar
    for tensor in spec.tensors:
        for dim in tensor.dims:
            if isinstance(dim, m.Name) and dim.id not in seen and dim.id not in scalars:
                seen.append(dim.id)
    seen += [name for name, _ in spec.derived if name not in seen]
    return tuple(seen)


def swizzled_outputs(spec: m.Spec) -> frozenset[str]:
    """Outputs stored through ``swizzle ... as`` aliases (``z[sm, sn] = x[m, n]``): a partial edge
    tile sent to an inner tile's place leaves some of its elements unwritten, so the launcher and
    the reference make these outputs with zeros, and the kernel stores only the lanes whose
    source is inside the tensor: what no element is sent to is 0 at every block size."""
    if spec.swizzle is None or not spec.swizzle.aliases:
        return frozenset()
    aliases = {a.id for a in spec.swizzle.aliases}
    return frozenset(
        s.tensor.id
        for s in m.statements(spec.body)
        if isinstance(s, m.Store) and any(isinstance(i, m.Name) and i.id in aliases for i in s.index)
    )


def whole_dims(spec: m.Spec) -> tuple[str, ...]:
    """Dimensions tiled whole (``i over N whole``): their tile is the next power of two."""
    return tuple(dict.fromkeys(a.dim.id for a in spec.grid if a.bounds == "whole"))


def pieced_block(spec: m.Spec) -> str | None:
    """The block parameter of a flat grid's rows where its default or a tune config sets it to a
    value that is not a power of two (the checker allows a sum of two, held as two pieces: see
    :class:`tilegen.lower.plan.PiecePlan`); None where every value is a power of two."""
    if not spec.flat or not spec.grid or spec.grid[0].block is None:
        return None
    block = spec.grid[0].block.id
    values = [p.default for p in spec.params if p.name.id == block and p.default is not None]
    values += [v for c in (spec.tune.configs if spec.tune else ()) if (v := c.get(block)) is not None]
    return block if any(v.is_int and int(v.text) & (int(v.text) - 1) for v in values) else None


def dim_label(tensor: m.Tensor, position: int) -> str:
    """``m`` for dimension ``M`` when it is unique in the tensor, else the position."""
    dim = tensor.dims[position]
    names = [d.id for d in tensor.dims if isinstance(d, m.Name)]
    if isinstance(dim, m.Name) and names.count(dim.id) == 1:
        return dim.id.lower()
    return str(position)


def stride_name(tensor: m.Tensor, position: int) -> str:
    """The kernel's stride argument for one dimension (``stride_a_m``)."""
    return f"stride_{tensor.name.id}_{dim_label(tensor, position)}"


def mentions(lines: Iterable[str], name: str) -> bool:
    """True when ``name`` appears as a whole word in any of ``lines`` (generated code), not as an
    attribute (``a.T`` does not mention ``T``)."""
    pattern = re.compile(rf"(?<![.\w]){re.escape(name)}\b")
    return any(pattern.search(line) for line in lines)


#: One item of an access's index: an axis, a constant, a gather's index tile (a :class:`~tilegen.model.Load`)
#: or an offset axis's arithmetic (``c + N / 2``, :func:`tilegen.model.is_offset`).
IndexItem = m.Name | m.Expr


def index_items(access: m.Load | m.Store) -> tuple[IndexItem, ...]:
    """The index of ``access``, offsets included (the model's type of an index leaves them out)."""
    return access.index


def is_offset(item: IndexItem) -> TypeGuard[m.BinOp | m.Neg]:
    """:func:`tilegen.model.is_offset`: an index item that is arithmetic (``c + N / 2``), an
    offset axis (the model types an index item as an axis, a number or a gather's load)."""
    return m.is_offset(item)


def offset_text(item: m.Expr, name: Callable[[str], str], load: Callable[[m.Load], str] | None = None,
                floor: Callable[[m.BinOp, str, str], str] | None = None) -> str:
    """An offset index (``c + N / 2``, :func:`tilegen.model.is_offset`) as Python text for the
    kernel or the reference: each name written by ``name(name)`` (an axis as its offsets or its
    ``arange``, a size or scalar as itself), a loaded start (``offsets[r] + c``) by ``load``,
    ``/`` as ``//`` (sizes are whole numbers), ``//`` and ``%`` as Python's (torch's on tensors) or,
    given ``floor``, as it writes them (a kernel's, where Triton's round toward 0)."""
    if isinstance(item, m.Number):
        return item.text
    if isinstance(item, m.Ref):
        return name(item.name.id)
    if isinstance(item, m.Load):
        assert load is not None, f"a loaded offset where none is read: {item}"
        return load(item)
    if isinstance(item, m.Neg):
        return f"-({offset_text(item.operand, name, load, floor)})"
    if m.is_extent_call(item):  # an extent's minimum(A, B): the launcher's min(A, B)
        return f"{m.EXTENT_CALLS[item.func.id]}({', '.join(offset_text(a, name, load, floor) for a in item.args)})"
    assert isinstance(item, m.BinOp), f"not an offset index: {item}"
    left, right = offset_text(item.left, name, load, floor), offset_text(item.right, name, load, floor)
    if floor is not None and item.op in (*m.FLOOR_OPERATORS, "/"):  # an index's / rounds down too
        return floor(item, left, right)
    return f"({left} {'//' if item.op == '/' else item.op} {right})"


def made_outputs(spec: m.Spec, shape: Callable[[m.Tensor], str], inplace: bool = True, mark: bool = True) -> list[Op]:
    """The lines making the outputs of ``spec`` (``shape(tensor)``: the text of its sizes): new
    tensors (``torch.zeros`` for one stored through swizzle aliases, see :func:`swizzled_outputs`),
    and with ``inplace`` those written over an input (``out dx: f32[N] in place of x``) as the input
    itself where the call says ``inplace=True``, whose version counters then go up
    (``_rt.overwritten``), as a torch in-place op's do, so that autograd refuses a saved copy
    instead of reading the overwritten values (without ``mark``, the caller marks them)."""
    swizzled = swizzled_outputs(spec)
    lines: list[Op] = []
    for t in spec.outputs:
        make = "zeros" if t.name.id in swizzled else "empty"
        new = f"torch.{make}({shape(t)}, device=device, dtype={torch_dtype(t.dtype)})"
        if t.initial is not None:  # out counts: i32[B] = 0
            new = initial_text(t, shape(t), "device")
        if inplace and t.in_place_of is not None:
            new = f"{t.in_place_of.id} if inplace else {new}"
        lines.append(Line(f"{t.name.id} = {new}"))
    if inplace and mark and spec.in_place:
        sources = ", ".join(t.in_place_of.id for t in spec.in_place if t.in_place_of is not None)
        why = "the inputs written over: autograd's saved copies of them are stale"
        lines.append(IfBlock("inplace", why, (Line(f"_rt.overwritten({sources})"),)))
    return lines


def initial_text(tensor: m.Tensor, shape: str, device: str) -> str:
    """The torch text making output ``tensor`` filled with its declared starting number
    (``out counts: i32[B] = 0``): ``torch.zeros``, else ``torch.full``."""
    assert tensor.initial is not None, f"'{tensor.name.id}' has no starting value"
    dtype = torch_dtype(tensor.dtype)
    if float(tensor.initial.text) == 0:
        return f"torch.zeros({shape}, device={device}, dtype={dtype})"
    size = shape if shape == "()" else f"({shape},)"
    return f"torch.full({size}, {number_text(tensor.initial)}, device={device}, dtype={dtype})"
