"""Reductions across programs, lowered (:mod:`tilegen.across` says what they are).

The spec's kernel reduces its own tile of each chain and stores that partial result in a
float32 workspace ``<out>_partials`` of shape [programs, *out's shape], at its program's place
in the grid (:func:`partial_stores`). The finish kernel, ``<kernel>_finish``, merges the
partials of each output element in program order and stores the epilogue of the merged values
(:func:`lower_finish`). It is itself a spec, made here from the store (:func:`finish_spec`) and
lowered as any spec is:

```
kernel mse_loss_finish
  in  loss_partials: f32[PROGRAMS, ELEMENTS]
  in  loss_count: f32
  out loss: f32[ELEMENTS]
  block BP = 1024, BQ = 1
  grid  q over ELEMENTS by BQ
  loss_merged: f32[q] = 0
  for p over PROGRAMS by BP
    loss_merged += sum(loss_partials[p, q], dim=p)
  loss[q] = loss_merged / loss_count
```

The launcher makes the workspace, passes it to the kernel, and launches the finish after it
(:class:`~tilegen.lower.plan.FinishPlan` says how).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tilegen import model as m
from tilegen.across import Across, across
from tilegen.functions import function_of
from tilegen.lower.access import Access
from tilegen.lower.checked import block_of, tensor_of
from tilegen.lower.expressions import Expressions
from tilegen.lower.names import stride_name
from tilegen.lower.plan import Comment, FinishPlan, KernelPlan, Line, Op
from tilegen.lower.state import INT64_FLAG, KernelState

#: The finish kernel's size symbols: the programs whose partials it merges, the output's elements.
PROGRAMS, ELEMENTS = "PROGRAMS", "ELEMENTS"


def across_stores(spec: m.Spec) -> list[Across]:
    """The top-level stores of ``spec`` that reduce across programs, in body order."""
    found = [across(s, spec.grid) for s in spec.body if isinstance(s, m.Store)]
    return [f for f in found if f is not None]


def partials_name(found: Across, i: int) -> str:
    """The name of the workspace of chain ``i`` of ``found`` (a launcher local; the kernel's
    parameter is it with ``_ptr``)."""
    name = f"{found.store.tensor.id}_partials"
    return name if len(found.partials) == 1 else f"{name}_{i}"


def merged_name(found: Across, i: int) -> str:
    """The finish kernel's local holding chain ``i``'s merged partials."""
    name = f"{found.store.tensor.id}_merged"
    return name if len(found.partials) == 1 else f"{name}_{i}"


def elements(tensor: m.Tensor) -> str:
    """The element count of a new contiguous output, as text of its sizes."""
    return " * ".join(d.text if isinstance(d, m.Number) else d.id for d in tensor.dims)


def partial_stores(
    state: KernelState, stmt: m.Store, found: Across, context: tuple[str, ...], exprs: Expressions, access: Access
) -> list[Op]:
    """The kernel's ops for a store that reduces across programs: each chain reduced over the
    program's own tile (:attr:`~tilegen.across.Partial.value`) and stored, in float32, into its
    workspace at this program's place among the programs along the reduced axes."""
    if state.spec.walks_rows:
        return _carried_partials(state, stmt, found, context, exprs, access)
    ops: list[Op] = []
    place = ""
    for axis in found.axes:  # row-major over the reduced axes, in grid order
        pid = state.pids[axis]
        outer = f"({place})" if "+" in place else place
        place = pid if not place else f"{outer} * {state.num_programs[axis]} + {pid}"
    tensor = tensor_of(state.spec, stmt.tensor.id)
    ptr, mask = access.pointer_expr(stmt, context, ops, load=False)
    prefix = f"{tensor.name.id}_ptr"
    assert ptr.startswith(prefix), ptr  # the workspace's row is laid out as the (new, contiguous) output
    offsets = ptr[len(prefix):]
    for i, partial in enumerate(found.partials):
        value = exprs.expr(partial.value, context, ops)
        if exprs.dtype_of(partial.value) != "f32":
            value = f"({value}).to(tl.float32)"
        size = elements(tensor)
        row = place if size == "1" else f"({place}) * {size}" if "+" in place else f"{place} * {size}"
        target = f"{partials_name(found, i)}_ptr + {row}{offsets}"
        why = f"this program's {partial.function.name} over its tile of {', '.join(found.axes)}"
        ops.append(Comment(f"{why}: its partial, merged by {finish_name(state.spec, found)}_kernel"))
        ops.append(Line(f"tl.store({target}, {value}, mask={mask})" if mask else f"tl.store({target}, {value})"))
    return ops


def _carried_partials(
    state: KernelState, stmt: m.Store, found: Across, context: tuple[str, ...], exprs: Expressions, access: Access
) -> list[Op]:
    """A persistent program's partials (``grid persistent r over M by BM, c over N whole``): each
    chain's value over the tile is merged into a float32 accumulator the program carries over
    every tile it walks (started at the chain's identity before the tile loop), which it stores
    once, after the loop, at its own row of the workspace (``start_pid``): one row per program
    (at most one per SM) rather than one per row tile, as Liger-Kernel's RMSNorm backward does."""
    tensor = tensor_of(state.spec, stmt.tensor.id)
    ptr, mask = access.pointer_expr(stmt, context, None, load=False)
    prefix = f"{tensor.name.id}_ptr"
    assert ptr.startswith(prefix), ptr  # the workspace's row is laid out as the (new, contiguous) output
    offsets = ptr[len(prefix):]
    shape = ", ".join(state.axes[a].tile for a in context)  # the store's axes: whole ones, tile-invariant
    size = elements(tensor)
    row = state.pid if size == "1" else f"{state.pid} * {size}"
    ops: list[Op] = []
    for i, partial in enumerate(found.partials):
        value = exprs.expr(partial.value, context, ops)
        if exprs.dtype_of(partial.value) != "f32":
            value = f"({value}).to(tl.float32)"
        carried = state.fresh(f"{partials_name(found, i)}_carried")
        function = partial.function
        state.carried.append(Line(f"{carried} = tl.full([{shape}], {function.identity_text}, tl.float32)"))
        if function.combine in ("+", "*"):
            ops.append(Line(f"{carried} {function.combine}= {value}"))
        else:
            assert function.combine is not None, f"{function.name}'s partials do not combine"
            ops.append(Line(f"{carried} = {function_of(function.combine).triton_text(x=carried, other=value)}"))
        why = f"this program's {function.name} over its tiles of {', '.join(found.axes)}"
        state.after_tiles.append(Comment(f"{why}: its partial, merged by {finish_name(state.spec, found)}_kernel"))
        target = f"{partials_name(found, i)}_ptr + {row}{offsets}"
        state.after_tiles.append(Line(f"tl.store({target}, {carried}, mask={mask})" if mask
                                      else f"tl.store({target}, {carried})"))
    return ops


def finish_name(spec: m.Spec, found: Across) -> str:
    """The finish spec's kernel name: ``<kernel>_finish``, or ``<kernel>_finish_<output>`` where
    several stores of ``spec`` reduce across programs."""
    several = len(across_stores(spec)) > 1
    return f"{spec.name.id}_finish_{found.store.tensor.id}" if several else f"{spec.name.id}_finish"


def finish_spec(spec: m.Spec, found: Across) -> m.Spec:
    """The finish kernel of ``found`` as a spec (see the module docstring): each chain's
    partials merged by its function over tiles of the programs, then the store's epilogue, with
    a mean divided by its count (a float32 input: the product of the extents it averages) and
    the scalar inputs and sizes it uses passed in."""
    store = found.store
    span = store.span
    out = tensor_of(spec, store.tensor.id)

    def name(text: str) -> m.Name:
        return m.Name(text, span)

    def number(text: str) -> m.Number:
        return m.Number(text, span)

    one = len(out.dims) == 1 and isinstance(out.dims[0], m.Number) and out.dims[0].text == "1"
    # a [128, 32] tile of partials a step (16 KiB): a program per 32 elements, each walking the
    # programs' partials 128 at a time (16 at a time, 64 elements a program, left RMS norm's
    # backward at 4096 x 4096 latency-bound: 256 steps in each of 64 programs)
    blocks = (m.Param(name("BP"), number("1024" if one else "128"), span),
              m.Param(name("BQ"), number("1" if one else "32"), span))
    q = m.Axis(name("q"), name(ELEMENTS), name("BQ"), "masked", span)
    p = m.Axis(name("p"), name(PROGRAMS), name("BP"), "masked", span)
    tensors = [m.Tensor("in", name(partials_name(found, i)), name("f32"), (name(PROGRAMS), name(ELEMENTS)), span)
               for i in range(len(found.partials))]
    values: list[m.Expr] = []
    declares: list[m.Declare] = []
    steps: list[m.Stmt] = []
    for i, partial in enumerate(found.partials):
        merged = merged_name(found, i)
        function = partial.function
        assert function.identity is not None and function.combine is not None, f"{function.name} does not merge"
        init: m.Expr = number("inf") if function.identity in (float("inf"), float("-inf")) else number(
            str(int(function.identity)))
        if function.identity == float("-inf"):
            init = m.Neg(init, span)
        declares.append(m.Declare(name(merged), name("f32"), (name("q"),), init, span))
        load = m.Load(name(partials_name(found, i)), (name("p"), name("q")), span)
        tile = m.Call(name(function.name), (load,), ((name("dim"), m.Ref(name("p"), span)),), span)
        acc = m.Ref(name(merged), span)
        if function.combine == "+":
            steps.append(m.Accumulate(name(merged), tile, span))
        elif function.combine == "*":
            steps.append(m.Assign(name(merged), m.BinOp("*", acc, tile, span), span))
        else:
            steps.append(m.Assign(name(merged), m.Call(name(function.combine), (acc, tile), (), span), span))
        value: m.Expr = acc
        if partial.averaged:
            count = f"{merged}_count"
            tensors.append(m.Tensor("in", name(count), name("f32"), (), span))
            value = m.BinOp("/", acc, m.Ref(name(count), span), span)
        values.append(value)
    epilogue = found.epilogue(values)
    scalars = {t.name.id: t for t in spec.inputs if t.is_scalar}
    sizes = {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
    used = dict.fromkeys(s.name.id for s in m.subexpressions(epilogue) if isinstance(s, m.Ref))
    for ref in used:
        if ref in scalars:
            tensors.append(dataclasses.replace(scalars[ref], span=span))
        elif ref in sizes:
            tensors.append(m.Tensor("in", name(ref), name("i32"), (), span))
    tensors.append(dataclasses.replace(out, dims=(name(ELEMENTS),), zero_dim=False, span=span))
    body: tuple[m.Stmt, ...] = (
        *declares,
        m.Loop(p, tuple(steps), span),
        m.Store(name(store.tensor.id), (name("q"),), epilogue, span),
    )
    return dataclasses.replace(
        spec,
        name=name(finish_name(spec, found)),
        tensors=tuple(tensors),
        params=blocks,
        grid=(q,),
        swizzle=None,
        body=body,
        flat=False,
        persistent=False,
        tune=None,
        choices=(),
        access=None,
        dtype_vars=tuple(  # the output's, its options spelled out (G in T, f32: the finish has no T)
            dataclasses.replace(v, options=tuple(m.Name(o, v.span) for o in spec.dtype_options(v.name)))
            for v in spec.dtype_vars if getattr(out.dtype, "var", None) == v.name.id),
        split_tail=(),
    )


def lower_finish(spec: m.Spec, found: Across, lower_kernel: Callable[[m.Spec], KernelPlan]) -> FinishPlan:
    """The finish of ``found``: its kernel (``lower_kernel`` of :func:`finish_spec`), and how the
    launcher makes its workspaces and launches it."""
    finish = finish_spec(spec, found)
    kernel = lower_kernel(finish)
    doc = (f"Triton kernel generated from {spec.path}: merges the partials {spec.name.id}_kernel stored for "
           f"'{found.store.tensor.id}'; {spec.name.id}() launches it.")
    kernel = dataclasses.replace(kernel, docstring=doc)
    out = tensor_of(spec, found.store.tensor.id)
    grid_axes = {a.name.id: a for a in spec.grid}
    programs = tuple((grid_axes[a].dim.id, None if grid_axes[a].is_index else block_of(grid_axes[a]))
                     for a in found.axes)
    workspaces = tuple(partials_name(found, i) for i in range(len(found.partials)))
    plan = FinishPlan(out.name.id, workspaces, programs, elements(out), kernel, (), "")
    texts = {f"{w}_ptr": w for w in workspaces}
    texts |= {f"{out.name.id}_ptr": out.name.id, PROGRAMS: plan.count, ELEMENTS: plan.elements}
    texts |= {f"{merged_name(found, i)}_count": f"float({' * '.join(p.averaged)})"
              for i, p in enumerate(found.partials) if p.averaged}
    for t in finish.arrays:
        for position in range(len(t.dims)):
            texts[stride_name(t, position)] = "1" if position == len(t.dims) - 1 else plan.elements
    texts |= {p.name.id: p.default.text for p in finish.params if p.default is not None}
    texts[INT64_FLAG] = f"{plan.size} >= 2**31"
    args = tuple(texts.get(p.name, p.name) for group in kernel.param_groups for p in group)
    block = texts["BQ"]
    grid = f"(({plan.elements} + {block} - 1) // {block},)" if block != "1" else f"({plan.elements},)"
    return dataclasses.replace(plan, args=args, grid=grid)


def launch_args(finish: FinishPlan) -> tuple[list[str], list[str], list[str], list[str]]:
    """The finish kernel's arguments as launcher text: (pointers, the rest, the integers Triton
    specializes on, the constexprs); the pointers come first in its signature."""
    params = [p for group in finish.kernel.param_groups for p in group]
    pointers = [a for p, a in zip(params, finish.args, strict=True) if p.name.endswith("_ptr")]
    rest = list(finish.args[len(pointers):])
    ints = [a for p, a in zip(params, finish.args, strict=True)
            if not p.name.endswith("_ptr") and not p.constexpr and not a.startswith("float(")]
    constexprs = [a for p, a in zip(params, finish.args, strict=True) if p.constexpr]
    assert finish.args[:len(pointers)] == tuple(pointers), "a finish kernel takes its pointers first"
    return pointers, rest, ints, constexprs
