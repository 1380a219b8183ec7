"""Values reduced across programs that every program then uses: the spec split into launches.

``norm = sqrt(sum(x[r, c] * x[r, c], dim=(r, c)))`` then ``y[r, c] = x[r, c] / norm`` (a
Frobenius norm): every program needs ``norm``, which none can compute, since each sees one tile
of ``x``. The spec stays one kernel; the compiler splits it (:func:`stage_specs`). A *stage*, a
kernel on the same grid, computes the value first and stores it as an output
``norm_reduced`` (a store that reduces across programs: per-program partials and a finish
kernel, :mod:`tilegen.lower.finish`), and the spec's kernel loads it where the spec assigned it:

```
kernel _frobenius_norm_norm            kernel frobenius_norm
  in  x: f32[M, N]                       in  x: f32[M, N]
  out norm_reduced: f32[1]               in  norm_reduced: f32[1]
  grid  r over M by BM, c over N by BN   out y: f32[M, N]
  norm_reduced[0] = sqrt(sum(...))       grid  r over M by BM, c over N by BN
                                         norm = norm_reduced[0]
                                         y[r, c] = x[r, c] / norm
```

A value over the axes it does not reduce is a tensor over them (batch norm's per-channel mean,
``mu = mean(x[b, c, h, w], dim=(b, h, w))``, is ``mu_reduced: f32[C]``, loaded as
``mu_reduced[c]``). A value computed from another (the variance from the mean) waits for it: each
stage computes the values whose inputs earlier stages hold, reading those as inputs, so
independent values (a sum and a sum of squares) share one stage and one pass over the input.
Each stage reads only the tensors its values need, recomputes the assignments they read, and
keeps the spec's blocks and tune configs; its launcher is a private function of the module
(``_frobenius_norm_norm``), which the spec's launcher calls first. The torch reference is the
spec as written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from tilegen import model as m
from tilegen.across import assigned, names_in, needed
from tilegen.functions import reduction


@dataclass(frozen=True)
class Staging:
    """A spec split into launches: ``stages`` (specs run first, in order; each stores some of
    the values as outputs) and ``main`` (the spec's own kernel, loading them). ``values`` holds,
    for each stage, the names of its outputs (the tensors the later kernels take as inputs)."""

    stages: tuple[m.Spec, ...]
    values: tuple[tuple[str, ...], ...]
    main: m.Spec


def reduced_name(spec: m.Spec, value: str, made: Collection[str] = ()) -> str:
    """The tensor a stage stores ``value`` in: ``<value>_reduced`` (underscores added where a
    name of the spec, or one ``made`` for an earlier value, takes it: ``norm`` assigned twice)."""
    taken = {t.name.id for t in spec.tensors} | set(made) | {
        s.name.id for s in m.statements(spec.body) if isinstance(s, m.Assign | m.Declare)
    }
    name = f"{value}_reduced"
    while name in taken:
        name += "_"
    return name


def _axes(expr: m.Expr, local_axes: dict[str, tuple[str, ...]], grid: tuple[str, ...]) -> tuple[str, ...]:
    """The grid axes ``expr`` spans (index axes included: a value per index), in grid order."""
    def visit(e: m.Expr) -> list[str]:
        if isinstance(e, m.Ref):
            return list(local_axes.get(e.name.id, (e.name.id,) if e.name.id in grid else ()))
        if isinstance(e, m.Load):
            return [n for n in names_in(e) if n in grid]
        if isinstance(e, m.BinOp):
            return visit(e.left) + visit(e.right)
        if isinstance(e, m.Neg):
            return visit(e.operand)
        if isinstance(e, m.Call):
            inner = [a for arg in e.args for a in visit(arg)]
            return [a for a in inner if a != e.word("dim")] if reduction(e) is not None else inner
        return []

    found = visit(expr)
    return tuple(a for a in grid if a in found)


def _tensors_read(stmts: Iterable[m.Stmt]) -> set[str]:
    """The tensors and names ``stmts`` read (loads, gathers, scalars, sizes)."""
    read: set[str] = set()
    for stmt in m.statements(tuple(stmts)):
        for value in m.values(stmt):
            read |= names_in(value)
            read |= {s.tensor.id for s in m.subexpressions(value) if isinstance(s, m.Load)}
            read |= {i.tensor.id for s in m.subexpressions(value) if isinstance(s, m.Load)
                     for i in s.index if isinstance(i, m.Load)}
    return read


def _live(body: tuple[m.Stmt, ...]) -> tuple[m.Stmt, ...]:
    """``body`` without the top-level assignments nothing after them reads."""
    kept: list[m.Stmt] = []
    live: set[str] = set()
    for stmt in reversed(body):
        if isinstance(stmt, m.Assign) and stmt.name.id not in live:
            continue
        kept.append(stmt)
        live |= _tensors_read((stmt,)) | ({stmt.name.id} if isinstance(stmt, m.Accumulate) else set())
    return tuple(reversed(kept))


def _inputs(
    spec: m.Spec, body: tuple[m.Stmt, ...], extra: tuple[m.Tensor, ...], outputs: tuple[m.Tensor, ...]
) -> tuple[m.Tensor, ...]:
    """The inputs of ``spec`` a kernel with ``body`` reads, and those that bind a size its grid,
    its body or its ``extra`` and ``outputs`` tensors use and no input it reads binds."""
    read = _tensors_read(body)
    kept = [t for t in spec.inputs if t.name.id in read]
    sizes = {a.dim.id for a in spec.grid} | {d.id for t in (*extra, *outputs) for d in t.dims if isinstance(d, m.Name)}
    sizes |= {k.id for k in spec.tune.key} if spec.tune is not None else set()  # the autotuner's key
    sizes |= read & {d.id for t in spec.arrays for d in t.dims if isinstance(d, m.Name)}
    sizes |= {n for _, extent in spec.derived for n in m.offset_names(extent)}  # c over C / G: C and G
    kept += [t for t in spec.inputs if t.is_scalar and t.name.id in sizes and t not in kept]  # g over G
    for size in sorted(sizes):
        if not any(isinstance(d, m.Name) and d.id == size for t in kept for d in t.dims):
            binder = next((t for t in spec.inputs if any(isinstance(d, m.Name) and d.id == size for d in t.dims)), None)
            if binder is not None and binder not in kept:
                kept.append(binder)
    order = [t.name.id for t in spec.inputs]
    return tuple(sorted(kept, key=lambda t: order.index(t.name.id)))


def stage_specs(spec: m.Spec) -> Staging | None:
    """``spec`` split into its stages and its own kernel (see the module docstring), or None
    where no top-level assignment reduces across programs. ``spec`` is checked (the checker's
    :func:`~tilegen.check.programs.check_stage` says which assignments may)."""
    body = spec.body
    grid = tuple(a.name.id for a in spec.grid)
    splits = {i: s for i, s in enumerate(body) if isinstance(s, m.Assign) and assigned(s, spec.grid) is not None}
    if not splits:
        return None
    local_axes: dict[str, tuple[str, ...]] = {}
    for stmt in body:
        match stmt:
            case m.Assign():
                local_axes[stmt.name.id] = _axes(stmt.value, local_axes, grid)
            case m.Declare():
                local_axes[stmt.name.id] = tuple(a.id for a in stmt.axes)
            case _:  # any other statement defines no new local (an update's is declared)
                pass
    axes_of = {i: _axes(s.value, local_axes, grid) for i, s in splits.items()}
    dims = {a.name.id: a.dim for a in spec.grid}
    tensors: dict[int, m.Tensor] = {}
    index: dict[int, tuple[m.Index, ...]] = {}
    for i, stmt in splits.items():
        span = stmt.span
        name = m.Name(reduced_name(spec, stmt.name.id, [t.name.id for t in tensors.values()]), span)
        shape = tuple(dims[a] for a in axes_of[i]) or (m.Number("1", span),)
        tensors[i] = m.Tensor("out", name, m.Name("f32", span), shape, span)
        index[i] = tuple(m.Name(a, span) for a in axes_of[i]) or (m.Number("0", span),)

    def load(i: int) -> m.Assign:  # the value as a later kernel reads it
        stmt = splits[i]
        return m.Assign(stmt.name, m.Load(tensors[i].name, index[i], stmt.span), stmt.span)

    level: dict[int, int] = {}
    for i in sorted(splits):
        level[i] = 1 + max((level[j] for j in needed(body, i) if j in splits), default=0)
    stages, values = [], []
    for k in range(1, max(level.values()) + 1):
        mine = [i for i in sorted(splits) if level[i] == k]
        earlier = frozenset(j for j in splits if level[j] < k)
        used = sorted({j for i in mine for j in needed(body, i, earlier)})
        stage_body = tuple(load(j) if j in earlier else body[j] for j in used)
        stage_body += tuple(m.Store(tensors[i].name, index[i], splits[i].value, splits[i].span) for i in mine)
        extra = tuple(dataclasses.replace(tensors[j], role="in") for j in used if j in earlier)
        outputs = tuple(tensors[i] for i in mine)
        inputs = _inputs(spec, stage_body, extra, outputs)
        dtype_ids = {t.dtype.var for t in inputs if isinstance(t.dtype, m.BoundDtype)}
        stages.append(dataclasses.replace(
            spec,
            name=m.Name(f"_{spec.name.id}_{splits[mine[0]].name.id}", spec.name.span),
            tensors=(*inputs, *extra, *outputs),
            body=stage_body,
            dtype_vars=tuple(v for v in spec.dtype_vars if v.name.id in dtype_ids),
        ))
        values.append(tuple(t.name.id for t in outputs))
    main_body = _live(tuple(load(i) if i in splits else s for i, s in enumerate(body)))
    read = _tensors_read(main_body)
    hidden = tuple(dataclasses.replace(tensors[i], role="in") for i in sorted(splits) if tensors[i].name.id in read)
    main = dataclasses.replace(spec, tensors=(*spec.inputs, *hidden, *spec.outputs), body=main_body)
    return Staging(tuple(stages), tuple(values), main)
