"""Rows longer than one tile: a ``whole`` axis as loops over tiles of it (a spec rewrite).

A rewrite of the model, below the checker and the lowering: the checker asks it whether a
spec's ``k over D1 by BK whole`` can loop (:func:`tilegen.check.schedule.check_chunks`), the
lowering writes its result as a kernel (:mod:`tilegen.lower.rows`).

``c over N whole`` makes one tile of all of ``N`` (tutorial 02's softmax row): the row is read
once and held in registers. That is the fastest kernel while the row fits in registers, and
past that it spills, compiles for minutes and then runs slowly (on the H100, softmax at N =
393216 compiled for 284 s and ran at 0.35x torch), and past Triton's largest tile it cannot
run at all. :func:`loop_rows` rewrites such a spec into one whose whole axis is gone from the
grid and whose body runs in ``for c over N by BLOCK_N`` loops, as Helion's ``reduction_loops``
do and as ``tests/specs/layer_norm_looped.tile`` is written by hand:

* every reduction over ``c`` (``sum``, ``mean``, ``max``, ``min``) becomes an accumulator over
  the other axes, declared before a loop and updated in it from the tiles of the step
  (``row_sum += sum(e, dim=c)``, ``row_max = maximum(row_max, max(x, dim=c))``), the loop
  recomputing the elementwise locals the reduction needs from loads; the kernel lowering masks
  the tail tile, whose padding lanes take the reduction's identity;
* reductions that do not depend on each other share a loop; the statements that use them
  follow it, so each loop reads what the ones before it computed (a sum over ``|x - max|``
  after the max's loop);
* a ``sum`` of ``exp(x - m)`` with ``m = max(x, dim=c)`` (softmax, log-softmax, a log-sum-exp)
  runs in the same loop as the max, online (Milakov and Gimelshein, 2018): ``row_sum =
  row_sum * exp(row_max - row_max_new) + sum(exp(x - row_max_new), dim=c)``, which saves one
  read of the row;
* a ``sum`` or ``mean`` of ``(v - m) * (v - m)`` (``(v - m) ** 2``, ``pow(v - m, 2)``, through
  locals) with ``m`` (an alias of) ``mean(v, dim=c)``, a centred variance (layer norm), runs in
  the same loop as the mean, merged (Chan, Golub and LeVeque's parallel form of Welford's
  algorithm, as Apex and PyTorch merge per-thread statistics), which saves one read of the
  row. Each row keeps a running count ``n_a`` (one per program: every row has as many lanes),
  mean and ``M2`` (its sum of squares about its mean), all in the accumulators' float32; a step
  takes its tile's count of valid lanes ``n_b = sum(where(c < N, 1.0, 0.0), dim=c)``, mean
  ``tile_mean = sum(v, dim=c) / n_b`` and ``tile_m2 = sum((v - tile_mean) ** 2, dim=c)`` (the
  kernel lowering makes the padding lanes of these sums 0), then with ``delta = tile_mean -
  mean`` and ``n = n_a + n_b``: ``M2 += tile_m2 + delta * (delta * (n_a * n_b / n))`` (so grouped
  that a first step, ``n_a = 0``, adds 0 even where ``delta * delta`` would overflow) and ``mean
  += delta * n_b / n``. The kernel's loops run over the tiles that start inside ``N``, so ``n_b
  >= 1`` at every step and nothing divides by 0. After the loop the mean's value is the running
  mean (which takes the name of the spec's local that holds the mean alone, whose assignment
  goes) and the sum of squares is ``M2`` (a mean of them ``M2 / N``). Each tile centred on its
  own mean, the variance keeps float32's accuracy where the mean is large against the spread
  (``E[x^2] - E[x]^2`` would cancel it); in a constant row ``delta`` is 0, so its mean stays and
  its variance is 0 where the tiles' sums are exact (as one tile's is where its sum is), tiny
  otherwise. The running mean rounds once a step, so it may be a few ulps off where one tile's
  is within one. A running mean that went infinite stays so (``mean + tile_mean``, where
  ``delta`` would give ``inf - inf`` = NaN), so a row with an infinity or a NaN gets the one-tile
  mean (``inf``, ``-inf`` or NaN) and a NaN variance;
* an ``argmax`` (``argmin``) keeps each row's index and the value it points at: a step takes the
  tile's ``max``, whether it holds a NaN and its index along ``N`` (:func:`_pick_step`), so ties
  keep the first index and the first NaN wins, as torch's;
* a last loop does the stores along ``c``; stores of per-row values go where their values are. A
  scan along ``c`` runs there with a carry per row (:func:`_carry_step`): its value is the
  carry merged with the tile's scan (``row_cumsum + cumsum(x, dim=c)``), the loop walking the
  tiles from the last for ``reverse=true``.

A spec may ask for the looped form itself, ``k over D1 by BK whole`` (a whole axis walked in
tiles of its own block ``BK``, with the spec's own configs): then it is the spec's only kernel.

The result passes the checker (``tests/test_long_rows.py`` checks each rewrite) but for two
things: a local recomputed in several loops keeps its name in each (the checker wants a name
defined once in a spec; the kernel lowering scopes a loop's names to it), and the merge's three
updates of its running count, mean and ``M2``, which :mod:`tilegen.carried` does not know (its
accepted forms are sums, extrema and the online-softmax rescaling). Its other updates of carried
values are in the forms :mod:`tilegen.carried` allows. The online max
starts at the dtype's lowest finite value rather than ``-inf``, so that a row whose first tiles
are all ``-inf`` (masked logits) adds ``exp(-inf - lowest) = 0`` rather than ``exp(-inf + inf)``
= NaN; after the loop a row of ``-inf`` alone (the only row whose sum stays 0) gets back what
one tile gives: a max of ``-inf`` and a NaN sum.

:func:`tilegen.lower.rows.lower_rows` lowers the rewrite as a second kernel and launcher of the module
(``_<kernel>_loops``), which the launcher returns through where the row is longer than
``_WHOLE_LIMIT`` elements (:class:`~tilegen.lower.plan.RowsPlan`); the one-tile kernel keeps
the rows up to it, and its autotuner compiles and times only the configs whose tile fits the
threads' registers (``whole_fits`` of the runtime, tilegen/runtime.py). The reference stays the spec
as written: one tile, whole-tensor torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.dtypes import INDEX, expr_dtype, is_float
from tilegen.functions import Function, combining, function_of, partial_reduction, reduction, scan, spanned_axes

#: Triton's largest tile (``tl.arange`` extent): TRITON_MAX_TENSOR_NUMEL.
MAX_TILE = 1 << 20

#: The chunk (``BLOCK_N``) the looped kernel takes by default: 4096 elements, 32 per thread at 4
#: warps, 8 at 16 (less where blocks of other axes share the tile: the row one tile holds, as
#: :func:`whole_limit` has it); a launcher keyword of the private ``_<kernel>_loops`` launcher.
CHUNK = 4096

#: The most elements of a one-tile kernel's tile each thread may hold in a config worth compiling:
#: 64 of its registers per tile (the H100's 65536 registers give each of 512 threads, 16 warps,
#: 128), so that the kernel's few live tiles fit without spilling. With the specs' largest config
#: (one row per program, 16 warps) the longest row held in one tile is 64 * 32 * 16 = 32768
#: elements, the longest the H100 ran at copy bandwidth (benchmarks/results/reductions_h100.csv).
#: The generated module's ``_THREAD_ELEMENTS`` (templates/rows.py.j2), which prunes configs, is the same.
THREAD_ELEMENTS = 64

#: The lowest finite value of each float dtype: the online max's start (see the module doc).
LOWEST = {
    "f16": "-65504.0",
    "bf16": "-3.3895313892515355e38",
    "f32": "-3.4028234663852886e38",
    "f64": "-1.7976931348623157e308",
}


def _combine(function: Function) -> str:
    """How two partials of the reduction or scan ``function`` merge (the rewrite takes no other)."""
    assert function.combine is not None, f"'{function.name}''s partials do not combine"
    return function.combine


def _picks(func: str) -> str:
    """The reduction whose value the arg-reduction ``func`` (``argmax``) points at (``max``)."""
    picks = function_of(func).picks
    assert picks is not None, f"'{func}' is not an arg-reduction"
    return picks


def _identity(func: str) -> str:
    """What a reduction's accumulator starts at: its identity, as spec number text."""
    value = function_of(func).identity
    assert value is not None, f"'{func}' has no identity"
    return str(value) if math.isinf(value) else str(int(value)) if value.is_integer() else repr(value)


@dataclass
class _Reduction:
    """One reduction over the whole axis: ``func(operand, dim=c)``, accumulated in ``acc``
    (a ``mean`` in a sum, divided by the extent after the loop)."""

    func: str
    operand: m.Expr  # as written, with the reductions inside it replaced
    span: m.Span  # the statement it is in
    acc: str
    dtype: str  # the accumulator's
    axes: tuple[str, ...]  # the accumulator's (the operand's less c)
    deps: frozenset[str]  # the accumulators its operand needs
    level: int = 0  # the loop that computes it (0: the first)
    online: _Reduction | None = None  # a sum of exp(x - this max), in the same loop
    fused: list[_Reduction] = field(default_factory=list)  # (a max) the sums computed online with it
    merged: _Reduction | None = None  # a sum of (v - this mean) ** 2, merged into the mean's loop
    merge: _Merge | None = None  # (a mean) the running statistics of its merge, if one is
    value: str = ""  # (an argmax) the running value its index points at
    value_dtype: str = ""


@dataclass
class _Merge:
    """A mean and the sum of squares about it in one loop (Chan et al.'s parallel merge): the
    names of the running count, mean and sum of squares (``M2``), which replace the mean's value
    (``acc / N``) and the sum's accumulator after the loop."""

    squares: _Reduction  # the sum (or mean) over c of (v - mean) ** 2
    count: str
    mean: str
    m2: str


@dataclass(frozen=True)
class LoopedRows:
    """The rewrite of a spec with a whole axis: the looped spec, and what the launcher needs."""

    spec: m.Spec  # the looped spec (named like the original; the caller renames it)
    dim: str  # the whole axis's dimension (``N``)
    block: str  # the looped spec's chunk parameter (``BLOCK_N``)
    rows: tuple[str, ...]  # the block parameters of the other tiled grid axes (``BM``)


@dataclass
class _Scan:
    """One scan along the whole axis, ``func(operand, dim=c, reverse=...)``: its carry ``carry``
    (over the operand's other axes, in ``dtype``) holds the scan of the tiles walked so far."""

    func: str
    operand: m.Expr  # as written, with the reductions inside it replaced
    reverse: bool
    carry: str
    dtype: str
    axes: tuple[str, ...]
    span: m.Span


class _NotLooped(Exception):
    """The spec has a form the rewrite does not take (it keeps its one-tile kernel alone)."""


def loop_rows(spec: m.Spec) -> LoopedRows | None:
    """The looped form of ``spec`` (see the module doc), or None where ``spec`` has no ``whole``
    grid axis or has a form the rewrite does not take: more than one whole axis, a flat,
    persistent or swizzled grid, TMA descriptors or block pointers, loops,
    tile declarations or ``+=`` in the body, a local assigned twice, a ``dot`` or a gather, a
    reduction of a scan, a scan of a scan, or scans from both ends."""
    try:
        return _Rewrite(spec).run()
    except _NotLooped:
        return None


class _Rewrite:
    """The analysis of one spec for :func:`loop_rows` (which reductions over the whole axis it
    has, which of them fuse online or merge, in which loop each goes) and the looped body it
    builds; the statements of each loop's step come from the functions below the class."""

    def __init__(self, spec: m.Spec):
        self.spec = spec
        whole = [a for a in spec.grid if a.bounds == "whole"]
        offsets = any(m.is_offset(i) for s in m.statements(spec.body) for a in m.accesses(s) for i in a.index)
        if (len(whole) != 1 or spec.flat or spec.persistent or spec.split_tail or spec.swizzle is not None
                or spec.access_style != "pointers" or offsets):
            raise _NotLooped
        self.whole = whole[0]
        self.c = self.whole.name.id
        self.tile_axes = {a.name.id for a in spec.grid if not a.is_index}
        self.taken = _identifiers(spec)
        self.axes: dict[str, tuple[str, ...]] = {}  # local -> its tile axes
        self.dtypes: dict[str, str | None] = {}  # local -> its dtype
        self.varying: dict[str, m.Expr] = {}  # local spanning c -> its value (reductions replaced)
        self.needs: dict[str, frozenset[str]] = {}  # local -> the accumulators it needs
        self.reductions: dict[str, _Reduction] = {}  # accumulator -> its reduction, in order
        self.keys: dict[tuple[object, ...], str] = {}  # (func, operand key) -> accumulator: one per distinct reduction
        self.stmts: list[tuple[m.Assign | m.Store, bool]] = []  # the body, reductions replaced; True: along c
        self.scans: dict[str, _Scan] = {}  # carry -> its scan along c, in order
        self.scan_keys: dict[tuple[object, ...], str] = {}  # (func, reverse, operand key) -> carry

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name

    # what the body computes --------------------------------------------------------
    def own_axes(self, part: m.Expr) -> tuple[str, ...] | None:
        if isinstance(part, m.Load):
            return tuple(i.id for i in part.index if isinstance(i, m.Name) and i.id in self.tile_axes)
        if isinstance(part, m.Ref):
            name = part.name.id
            if name in self.axes:
                return self.axes[name]
            return (name,) if name in self.tile_axes else ()
        if isinstance(part, m.Number):
            return ()
        return None

    def dtype(self, expr: m.Expr) -> str | None:
        def local(name: str) -> str | None:
            if name in self.dtypes:
                return self.dtypes[name]
            tensor = self.spec.tensor(name)
            return tensor.dtype.id if tensor is not None else INDEX

        return expr_dtype(expr, self.spec, local)

    def spans_c(self, expr: m.Expr) -> bool:
        return self.c in spanned_axes(expr, self.own_axes)

    def needed(self, expr: m.Expr) -> frozenset[str]:
        """The accumulators ``expr`` needs, through the locals it reads."""
        found: set[str] = set()
        for part in m.subexpressions(expr):
            if isinstance(part, m.Ref):
                name = part.name.id
                if name in self.reductions:
                    found.add(name)
                found |= self.needs.get(name, frozenset())
        return frozenset(found)

    def extract(self, expr: m.Expr, span: m.Span) -> m.Expr:
        """``expr`` with each reduction over c replaced by its accumulator (a ``mean`` by the
        accumulated sum over the extent), inner reductions first."""
        if isinstance(expr, m.BinOp):
            return dataclasses.replace(expr, left=self.extract(expr.left, span), right=self.extract(expr.right, span))
        if isinstance(expr, m.Neg):
            return dataclasses.replace(expr, operand=self.extract(expr.operand, span))
        if isinstance(expr, m.Load):
            if any(isinstance(i, m.Load) for i in expr.index):
                raise _NotLooped  # a gather
            return expr
        if not isinstance(expr, m.Call):
            return expr
        if m.is_dot(expr):
            raise _NotLooped
        args = tuple(self.extract(a, span) for a in expr.args)
        kwargs = tuple((k, v if isinstance(v, m.Ref) else self.extract(v, span)) for k, v in expr.kwargs)
        call = dataclasses.replace(expr, args=args, kwargs=kwargs)
        found = reduction(expr)
        if scan(expr) is not None:
            return self.scanned(expr, call)
        if found is not None and found.combine is None and found.picks is None:
            raise _NotLooped  # a reduction whose partials do not merge
        if found is None:
            return call
        if expr.word("dim") != self.c:
            raise _NotLooped  # a reduction over another axis
        operand = args[0]
        if self.reads_scan(operand):
            raise _NotLooped  # a reduction of a scan: the scan's carry runs in the stores' loop only
        key = (expr.func.id, m.expr_key(operand))
        acc = self.keys.get(key)
        if acc is None:
            func, part = expr.func.id, partial_reduction(function_of(expr.func.id)).name
            acc = self.keys[key] = self.fresh(f"row_{part}")
            axes = spanned_axes(call, self.own_axes)
            dtype = self.dtype(dataclasses.replace(call, func=dataclasses.replace(expr.func, id=part)))
            if dtype is None:
                raise _NotLooped
            r = self.reductions[acc] = _Reduction(func, operand, span, acc, dtype, axes, self.needed(operand))
            if function_of(func).picks is not None:  # an argmax: its index and the value it points at
                r.value, r.value_dtype = self.fresh(f"{acc}_value"), "f64" if self.dtype(operand) == "f64" else "f32"
            self.axes[acc], self.dtypes[acc] = axes, dtype
        value: m.Expr = m.Ref(m.Name(acc, expr.span), expr.span)
        if function_of(expr.func.id).averages:
            value = m.BinOp("/", value, m.Ref(m.Name(self.whole.dim.id, expr.span), expr.span), expr.span)
        return value

    def scanned(self, expr: m.Call, call: m.Call) -> m.Expr:
        """A scan along c (``cumsum(x, dim=c)``) as its carry, the scan of the rows' tiles before
        this one, merged with the scan of this tile: ``row_cumsum + cumsum(x, dim=c)`` (``*`` for
        ``cumprod``), the tiles walked from the last where ``reverse=true``."""
        if expr.word("dim") != self.c or self.reads_scan(call.args[0]):
            raise _NotLooped  # a scan along another axis, or of a scan
        function = function_of(expr.func.id)
        reverse = expr.word("reverse") == "true"
        key = (expr.func.id, reverse, m.expr_key(call.args[0]))
        carry = self.scan_keys.get(key)
        if carry is None:
            carry = self.scan_keys[key] = self.fresh(f"row_{expr.func.id}")
            axes = tuple(a for a in spanned_axes(call, self.own_axes) if a != self.c)
            dtype = self.dtype(call)
            if dtype in ("f16", "bf16") and function.widens:
                dtype = "f32"
            if dtype is None:
                raise _NotLooped
            self.scans[carry] = _Scan(expr.func.id, call.args[0], reverse, carry, dtype, axes, expr.span)
            self.axes[carry], self.dtypes[carry] = axes, dtype
        return m.BinOp(_combine(function), m.Ref(m.Name(carry, expr.span), expr.span), call, expr.span)

    def reads_scan(self, expr: m.Expr) -> bool:
        """``expr`` reads a scan's carry, through the locals along c."""
        return any(isinstance(p, m.Ref) and p.name.id in self.scans for p in m.subexpressions(self.inline(expr)))

    def inline(self, expr: m.Expr) -> m.Expr:
        """``expr`` with the locals along c replaced by their values (to compare operands)."""
        def value(e: m.Expr) -> m.Expr | None:
            return self.inline(self.varying[e.name.id]) if isinstance(e, m.Ref) and e.name.id in self.varying else None

        return m.map_expr(expr, value)

    def alias(self, expr: m.Expr) -> str | None:
        """The accumulator ``expr`` is (a reference to it, or to a row local that is one)."""
        current: m.Expr | None = expr
        while isinstance(current, m.Ref):
            name = current.name.id
            if name in self.reductions:
                return name
            current = self.row_values.get(name)
        return None

    # the rewrite -----------------------------------------------------------------
    def run(self) -> LoopedRows:
        self.row_values: dict[str, m.Expr] = {}
        assigned: set[str] = set()
        for stmt in self.spec.body:
            match stmt:
                case m.Assign():
                    value = self.extract(stmt.value, stmt.span)
                    name = stmt.name.id
                    if name in assigned:
                        raise _NotLooped
                    assigned.add(name)
                    self.axes[name] = spanned_axes(value, self.own_axes)
                    self.dtypes[name] = self.dtype(value)
                    self.needs[name] = self.needed(value)
                    along = self.c in self.axes[name]
                    if along:
                        self.varying[name] = value
                    else:
                        self.row_values[name] = value
                case m.Store():
                    value = self.extract(stmt.value, stmt.span)
                    along = any(isinstance(i, m.Name) and i.id == self.c for i in stmt.index)
                case _:  # any other statement (a loop, a tile declaration, an accumulation): not looped
                    raise _NotLooped
            self.stmts.append((dataclasses.replace(stmt, value=value), along))
        self.levels()
        return self.looped()

    def levels(self) -> None:
        """Each reduction's loop: after the loops of the reductions it needs; a sum of
        ``exp(x - m)`` with ``m`` a max of the same ``x`` in the max's own loop (online); a sum of
        ``(v - m) ** 2`` with ``m`` the mean of the same ``v`` in the mean's own loop (merged)."""
        for r in self.reductions.values():
            r.level = 1 + max((self.reductions[d].level for d in r.deps), default=-1)
            if function_of(r.func).combine == "+":  # sums: online with a max, merged with a mean
                operand = self.inline(r.operand)
                if not self.fuse_online(r, operand):
                    self.fuse_merge(r, operand)

    def fuse_online(self, r: _Reduction, operand: m.Expr) -> bool:
        """``r`` (a sum) computed online with a max: its operand is ``exp(x - m)``, ``m`` the max
        of the same ``x``."""
        if not (isinstance(operand, m.Call) and operand.func.id == "exp" and len(operand.args) == 1):
            return False
        arg = operand.args[0]
        if not (isinstance(arg, m.BinOp) and arg.op == "-"):
            return False
        top = self.alias(arg.right)
        if top is None:
            return False
        peak = self.reductions[top]
        if (peak.func != "max" or peak.dtype not in LOWEST or not is_float(self.dtype(arg.left))
                or m.expr_key(arg.left) != m.expr_key(self.inline(peak.operand))):
            return False
        r.online, r.level = peak, peak.level
        peak.fused.append(r)
        return True

    def fuse_merge(self, r: _Reduction, operand: m.Expr) -> bool:
        """``r`` (a sum or mean) merged into a mean's loop: its operand is ``(v - m) * (v - m)``
        (``(v - m) ** 2``, ``pow(v - m, 2)``), ``m`` (an alias of) the mean of the same ``v``,
        both accumulated in float32 (or float64); one such sum per mean."""
        base = _squared(operand)
        if not (isinstance(base, m.BinOp) and base.op == "-"):
            return False
        mean = self.mean_of(base.right)
        if (mean is None or mean.merge is not None or mean.online is not None or mean.dtype not in ("f32", "f64")
                or r.dtype != mean.dtype or r.axes != mean.axes
                or m.expr_key(base.left) != m.expr_key(self.inline(mean.operand))):
            return False
        r.merged, r.level = mean, mean.level
        mean.merge = _Merge(r, self.fresh("row_count"), self.mean_name(mean), self.fresh("row_m2"))
        return True

    def mean_of(self, expr: m.Expr) -> _Reduction | None:
        """The mean over c whose value ``expr`` is (``acc / N``, or a row local holding it)."""
        while isinstance(expr, m.Ref) and expr.name.id in self.row_values:
            expr = self.row_values[expr.name.id]
        if (isinstance(expr, m.BinOp) and expr.op == "/" and isinstance(expr.left, m.Ref)
                and isinstance(expr.right, m.Ref) and expr.right.name.id == self.whole.dim.id):
            r = self.reductions.get(expr.left.name.id)
            if r is not None and function_of(r.func).averages:
                return r
        return None

    def mean_name(self, mean: _Reduction) -> str:
        """The running mean's name: that of the first row local the spec assigns the mean to
        alone (``row_mean = mean(xf, dim=c)``, whose statement then goes), else a fresh one."""
        value = m.expr_key(self.mean_value(mean))
        for stmt, along in self.stmts:
            if not along and isinstance(stmt, m.Assign) and m.expr_key(stmt.value) == value:
                return stmt.name.id
        return self.fresh("row_mean")

    def mean_value(self, mean: _Reduction) -> m.Expr:
        """A mean's value as :meth:`extract` writes it: ``acc / N``."""
        span = mean.span
        return m.BinOp("/", m.Ref(m.Name(mean.acc, span), span), m.Ref(m.Name(self.whole.dim.id, span), span), span)

    def looped(self) -> LoopedRows:
        spec, span, c = self.spec, self.whole.span, self.c
        dim = self.whole.dim.id
        own = self.whole.chunk  # k over D1 by BK whole: the spec's own block and configs
        chunked = own is not None
        block = own.id if own is not None else self.fresh(f"BLOCK_{dim}")
        axis = m.Axis(m.Name(c, span), self.whole.dim, m.Name(block, span), "masked", span)
        body: list[m.Stmt] = []
        emitted: set[int] = set()  # the row statements placed so far (their index in self.stmts)
        reductions = list(self.reductions.values())
        last = max((r.level for r in reductions), default=-1)

        def ready(level: int) -> list[m.Stmt]:
            """The row statements whose accumulators the loops up to ``level`` computed."""
            out: list[m.Stmt] = []
            for number, (stmt, along) in enumerate(self.stmts):
                if along or number in emitted:
                    continue
                needs = self.needed(stmt.value)
                if all(self.reductions[n].level <= level for n in needs):
                    emitted.add(number)
                    out.append(stmt)
            return out

        body += ready(-1)
        for level in range(last + 1):
            here = [r for r in reductions if r.level == level]
            for r in here:
                body += _declare(r)
            operands = [r.operand for r in here if r.online is None and r.merged is None]
            steps = self.locals_for(operands)
            for r in here:
                if r.online is None and r.merged is None:
                    steps += (_merge_step(r, c, dim, self.fresh) if r.merge is not None
                              else _step(r, c, self.fresh))
            body.append(m.Loop(axis, tuple(steps), span))
            for r in here:
                body += _restore(r)
            body += ready(level)
        stores = [stmt for stmt, along in self.stmts if along and isinstance(stmt, m.Store)]
        if stores:
            scans = list(self.scans.values())
            if len({s.reverse for s in scans}) > 1:
                raise _NotLooped  # scans from both ends: no one order of the tiles serves both
            body += [_declare_carry(s) for s in scans]
            steps = self.locals_for([s.value for s in stores], stores) + [_carry_step(s, c, dim) for s in scans]
            body.append(m.Loop(axis, tuple(steps), span, reverse=any(s.reverse for s in scans)))
        body += ready(last)  # row statements that need nothing (placed above), or no reduction at all
        body = self.merged_names(body)
        grid = tuple(a for a in spec.grid if a is not self.whole)
        rows = tuple(a.block.id for a in grid if a.block is not None)
        # a chunk no longer than the row one tile holds: beside blocks of other axes (a [C, BW]
        # tile) that is less than CHUNK, which would spill
        chunk = min(CHUNK, whole_limit(spec, rows)[0])
        params = spec.params
        if not chunked:  # the chunk is a keyword of the looped launcher
            params = (*params, m.Param(m.Name(block, span), m.Number(str(chunk), span), span))
        tune = spec.tune if chunked else _row_tune(spec, self.whole.dim, rows)
        looped = dataclasses.replace(spec, grid=grid, params=params, body=tuple(body), tune=tune)
        return LoopedRows(looped, dim, block, rows)

    def locals_for(self, exprs: list[m.Expr], stores: Sequence[m.Store] = ()) -> list[m.Stmt]:
        """The statements along c that ``exprs`` need, in body order, then ``stores`` in theirs."""
        wanted: set[str] = set()
        pending = list(exprs)
        while pending:
            for part in m.subexpressions(pending.pop()):
                if isinstance(part, m.Ref) and part.name.id in self.varying and part.name.id not in wanted:
                    wanted.add(part.name.id)
                    pending.append(self.varying[part.name.id])
        keep = {id(s) for s in stores}
        return [stmt for stmt, along in self.stmts
                if along and ((isinstance(stmt, m.Assign) and stmt.name.id in wanted) or id(stmt) in keep)]

    def merged_names(self, body: list[m.Stmt]) -> list[m.Stmt]:
        """``body`` with each merged mean's value (``acc / N``) read from its running mean and
        each merged sum of squares from its ``M2``; the spec's own assignment of the running
        mean's name (``row_mean = row_mean``) goes."""
        values: dict[tuple[object, ...], str] = {}
        for r in self.reductions.values():
            if r.merge is not None:
                values[m.expr_key(self.mean_value(r))] = r.merge.mean
                values[m.expr_key(m.Ref(m.Name(r.merge.squares.acc, r.span), r.span))] = r.merge.m2
        if not values:
            return body

        def swap(expr: m.Expr) -> m.Expr | None:
            name = values.get(m.expr_key(expr))
            return m.Ref(m.Name(name, expr.span), expr.span) if name is not None else None

        out: list[m.Stmt] = []
        for stmt in body:
            match stmt:
                case m.Loop():
                    stmt = dataclasses.replace(stmt, body=tuple(self.merged_names(list(stmt.body))))
                case _:  # any other statement: its values read the merged names
                    stmt = m.map_values(stmt, lambda e: m.map_expr(e, swap))
                    if (isinstance(stmt, m.Assign) and isinstance(stmt.value, m.Ref)
                            and stmt.value.name.id == stmt.name.id):
                        continue
            out.append(stmt)
        return out


def _declare(r: _Reduction) -> list[m.Stmt]:
    """The accumulators of ``r`` (none for a sum merged into its mean's loop), declared
    before its loop: a merged mean's running count (one per program: every row has as many
    lanes), mean and sum of squares start at 0."""
    span = r.span

    def declare(name: str, axes: tuple[str, ...], init: str) -> m.Declare:
        return m.Declare(m.Name(name, span), m.Name(r.dtype, span), tuple(m.Name(a, span) for a in axes),
                         _number(init, span), span)

    if r.merged is not None:
        return []
    if r.value:  # the index starts at 0, pointing at the picked reduction's identity
        value = m.Declare(m.Name(r.value, span), m.Name(r.value_dtype, span), tuple(m.Name(a, span) for a in r.axes),
                          _number(_identity(_picks(r.func)), span), span)
        return [declare(r.acc, r.axes, "0"), value]
    if r.merge is not None:
        g = r.merge
        return [declare(g.count, (), "0"), declare(g.mean, r.axes, "0"), declare(g.m2, r.axes, "0")]
    return [declare(r.acc, r.axes, LOWEST[r.dtype] if r.fused else _identity(r.func))]

def _merge_step(r: _Reduction, c: str, dim: str, fresh: Callable[[str], str]) -> list[m.Stmt]:
    """One step of a mean's loop merged with the sum of squares about it (Chan, Golub and
    LeVeque's parallel form of Welford's algorithm, as Apex and PyTorch merge per-thread
    statistics): the tile's count of valid lanes, its mean and its sum of squares about its
    own mean, merged into the running ones. Every step has a valid lane (the kernel's loops
    run over the tiles that start inside ``N``), so the counts are never 0."""
    g = r.merge
    assert g is not None, f"'{r.acc}' is not a merged mean"
    span, squares = r.span, g.squares.span

    def ref(name: str) -> m.Ref:
        return m.Ref(m.Name(name, span), span)

    def num(text: str) -> m.Number:
        return m.Number(text, span)

    def call(func: str, *args: m.Expr, dim: bool = False) -> m.Call:
        kwargs = ((m.Name("dim", span), ref(c)),) if dim else ()
        return m.Call(m.Name(func, span), args, kwargs, span)

    def op(symbol: str, left: m.Expr, right: m.Expr) -> m.BinOp:
        return m.BinOp(symbol, left, right, span)

    def assign(name: str, value: m.Expr, where: m.Span = span) -> m.Assign:
        return m.Assign(m.Name(name, where), value, where)

    count, mean, m2 = ref(g.count), ref(g.mean), ref(g.m2)
    tile_count, tile_mean, tile_dev, tile_m2, delta, count_new = (
        fresh(n) for n in ("tile_count", "tile_mean", "tile_dev", "tile_m2", "delta", f"{g.count}_new"))
    valid = call("where", op("<", ref(c), ref(dim)), num("1.0"), num("0.0"))  # 0 on padding lanes
    share = op("/", op("*", count, ref(tile_count)), ref(count_new))  # n_a * n_b / n
    # a row mean that went infinite stays so (what the sum of one tile gives), not inf - inf = NaN
    infinite = op("==", call("abs", mean), num("inf"))
    moved = op("+", mean, op("/", op("*", ref(delta), ref(tile_count)), ref(count_new)))
    return [
        assign(tile_count, call("sum", valid, dim=True)),
        assign(tile_mean, op("/", call("sum", r.operand, dim=True), ref(tile_count))),
        assign(tile_dev, op("-", r.operand, ref(tile_mean)), squares),
        assign(tile_m2, call("sum", op("*", ref(tile_dev), ref(tile_dev)), dim=True), squares),
        assign(delta, op("-", ref(tile_mean), mean), squares),
        assign(count_new, op("+", count, ref(tile_count)), squares),
        # delta * (delta * ...): a first step (n_a = 0) adds 0 even where delta * delta overflows
        assign(g.m2, op("+", op("+", m2, ref(tile_m2)), op("*", ref(delta), op("*", ref(delta), share))), squares),
        assign(g.mean, call("where", infinite, op("+", mean, ref(tile_mean)), moved), squares),
        assign(g.count, ref(count_new), squares),
    ]

def _step(r: _Reduction, c: str, fresh: Callable[[str], str]) -> list[m.Stmt]:
    """The statements of one step of the loop that accumulate ``r`` (and, for a max, the
    sums computed online with it)."""
    span = r.span

    def ref(name: str) -> m.Ref:
        return m.Ref(m.Name(name, span), span)

    def call(func: str, *args: m.Expr, dim: bool = False) -> m.Call:
        kwargs = ((m.Name("dim", span), ref(c)),) if dim else ()
        return m.Call(m.Name(func, span), args, kwargs, span)

    function = function_of(r.func)
    if function.picks is not None:
        return _pick_step(r, c, fresh)
    part = call(partial_reduction(function).name, r.operand, dim=True)
    if function.combine == "+":
        return [m.Accumulate(m.Name(r.acc, span), part, span)]
    if not r.fused:
        combine = _combine(function)
        combined = (m.BinOp(combine, ref(r.acc), part, span) if not combine.isidentifier()
                    else call(combine, ref(r.acc), part))
        return [m.Assign(m.Name(r.acc, span), combined, span)]
    new = fresh(f"{r.acc}_new")
    steps: list[m.Stmt] = [m.Assign(m.Name(new, span), call("maximum", ref(r.acc), part), span)]
    for s in r.fused:  # l = l * exp(m - m_new) + sum(exp(x - m_new), dim=c)
        shifted = call("exp", m.BinOp("-", r.operand, ref(new), s.span))
        rescale = m.BinOp("*", ref(s.acc), call("exp", m.BinOp("-", ref(r.acc), ref(new), span)), s.span)
        steps.append(m.Assign(m.Name(s.acc, s.span), m.BinOp("+", rescale, call("sum", shifted, dim=True), s.span),
                              s.span))
    steps.append(m.Assign(m.Name(r.acc, span), ref(new), span))
    return steps

def _declare_carry(s: _Scan) -> m.Declare:
    """A scan's carry, declared before the stores' loop at the scan's identity (0, or 1 for ``cumprod``)."""
    span = s.span
    return m.Declare(m.Name(s.carry, span), m.Name(s.dtype, span), tuple(m.Name(a, span) for a in s.axes),
                     _number(_identity(s.func), span), span)


def _carry_step(s: _Scan, c: str, dim: str) -> m.Assign:
    """The end of a step of the stores' loop: the carry merged with the tile's whole scan, the
    reduction that combines as the scan does: ``row_cumsum = row_cumsum + sum(where(c < N, x, 0),
    dim=c)``. The ``where`` changes no lane (padding lanes take the identity anyway); it keeps the
    sum from reducing a load directly, the form in which Triton 3.6's thread-locality pass
    (TritonGPUOptimizeThreadLocality) defers a carried sum's cross-thread reduction past the
    loop although the carry is read in the same step (the store): a miscompile, every tile after
    the first wrong on the H100 (c43ff28:benchmarks/explore/dbg_scan_loops_before_h100.log), which later Tritons
    fix by leaving such a carry alone."""
    span = s.span
    function = function_of(s.func)
    whole = next(f for f in combining(_combine(function)) if f.kind == "reduction" and not f.averages)

    def ref(name: str) -> m.Ref:
        return m.Ref(m.Name(name, span), span)

    inside = m.Call(m.Name("where", span), (m.BinOp("<", ref(c), ref(dim), span), s.operand,
                                             _number(_identity(s.func), span)), (), span)
    part = m.Call(m.Name(whole.name, span), (inside,), ((m.Name("dim", span), ref(c)),), span)
    return m.Assign(m.Name(s.carry, span), m.BinOp(_combine(function), ref(s.carry), part, span), span)


def _pick_step(r: _Reduction, c: str, fresh: Callable[[str], str]) -> list[m.Stmt]:
    """One step of an arg-reduction's loop (``argmax``): the tile's index along the dimension
    and its value (the picked reduction, ``max``) replace the running ones where the tile's
    value is strictly better (an equal value keeps the earlier index, torch's first) or the
    tile holds a NaN, unless the running value is already NaN (torch's first NaN); a NaN taken
    makes the running value NaN (``inf - inf``), so no later tile replaces it."""
    span = r.span
    picked = function_of(_picks(r.func))

    def ref(name: str) -> m.Ref:
        return m.Ref(m.Name(name, span), span)

    def call(func: str, *args: m.Expr, dim: bool = False) -> m.Call:
        kwargs = ((m.Name("dim", span), ref(c)),) if dim else ()
        return m.Call(m.Name(func, span), args, kwargs, span)

    def op(symbol: str, left: m.Expr, right: m.Expr) -> m.BinOp:
        return m.BinOp(symbol, left, right, span)

    def assign(name: str, value: m.Expr) -> m.Assign:
        return m.Assign(m.Name(name, span), value, span)

    tile_value, tile_nan, take = fresh(f"tile_{picked.name}"), fresh("tile_nan"), fresh("take")
    assert picked.identity is not None, f"'{picked.name}' has no identity"
    better = ">" if picked.identity < 0 else "<"  # max starts at -inf: a larger value is better
    value = ref(r.value)
    inf = m.Number("inf", span)
    return [
        assign(tile_value, call(picked.name, r.operand, dim=True)),
        assign(tile_nan, call("any", op("!=", r.operand, r.operand), dim=True)),
        assign(take, op("&", op("|", ref(tile_nan), op(better, ref(tile_value), value)), op("==", value, value))),
        assign(r.acc, call("where", ref(take), call(r.func, r.operand, dim=True), ref(r.acc))),
        assign(r.value, call("where", ref(take), call("where", ref(tile_nan), op("-", inf, inf), ref(tile_value)),
                             value)),
    ]


def _restore(r: _Reduction) -> list[m.Stmt]:
    """After an online max's loop: a row of ``-inf`` alone (its sums stayed 0) gets a max of
    ``-inf`` and NaN sums, what one tile gives (``exp(-inf - -inf)``)."""
    if not r.fused:
        return []
    span, first = r.span, r.fused[0].acc

    def ref(name: str) -> m.Ref:
        return m.Ref(m.Name(name, span), span)

    def where(cond: m.Expr, a: m.Expr, b: m.Expr) -> m.Call:
        return m.Call(m.Name("where", span), (cond, a, b), (), span)

    inf = m.Number("inf", span)
    out: list[m.Stmt] = [m.Assign(m.Name(r.acc, span), where(
        m.BinOp("==", ref(first), m.Number("0", span), span), m.Neg(inf, span), ref(r.acc)), span)]
    for s in r.fused:
        nan = m.BinOp("-", inf, inf, span)
        out.append(m.Assign(m.Name(s.acc, span), where(
            m.BinOp("==", ref(r.acc), m.Neg(inf, span), span), nan, ref(s.acc)), span))
    return out

def _row_tune(spec: m.Spec, dim: m.Name, rows: tuple[str, ...]) -> m.Tune | None:
    """The spec's configs with the fewest rows per program (a long row is work enough for a
    program, and more rows only multiply its tiles), keyed on the extent too."""
    tune = spec.tune
    if tune is None:
        return None
    defaults = {p.name.id: p.default for p in spec.params}

    def count(config: m.Config) -> int:
        total = 1
        for block in rows:
            value = config.get(block) or defaults.get(block)
            total *= int(value.text) if value is not None else 1
        return total

    fewest = min(count(c) for c in tune.configs)
    configs = [c for c in tune.configs if count(c) == fewest]
    if not any(c.default for c in configs):
        configs[0] = dataclasses.replace(configs[0], default=True)
    key = tune.key
    if dim.id not in {k.id for k in key}:
        key = (*key, dim)
    return dataclasses.replace(tune, key=key, configs=tuple(configs))


def _squared(expr: m.Expr) -> m.Expr | None:
    """``e`` where ``expr`` is ``e * e``, ``e ** 2`` or ``pow(e, 2)``, else None."""
    if isinstance(expr, m.BinOp) and expr.op == "*" and m.expr_key(expr.left) == m.expr_key(expr.right):
        return expr.left
    if (isinstance(expr, m.Call) and expr.func.id == "pow" and len(expr.args) == 2 and not expr.kwargs
            and isinstance(expr.args[1], m.Number) and expr.args[1].value == 2):
        return expr.args[0]
    return None


def _number(text: str, span: m.Span) -> m.Expr:
    if text.startswith("-"):
        return m.Neg(m.Number(text[1:], span), span)
    return m.Number(text, span)


def _identifiers(spec: m.Spec) -> set[str]:
    """Every name the spec defines or writes (a generated local must take none of them)."""
    names = {spec.name.id, *(t.name.id for t in spec.tensors), *(p.name.id for p in spec.params)}
    names |= {d.id for t in spec.tensors for d in t.dims if isinstance(d, m.Name)}
    names |= {a.name.id for a in spec.axes()} | {v.name.id for v in spec.dtype_vars}
    names |= {c.name.id for c in spec.choices}
    for stmt in m.statements(spec.body):
        if (name := m.local_name(stmt)) is not None:
            names.add(name)
        names |= {part.name.id for v in m.values(stmt) for part in m.subexpressions(v) if isinstance(part, m.Ref)}
    return names


def whole_limit(spec: m.Spec, rows: tuple[str, ...]) -> tuple[int, int]:
    """(the longest row the one-tile kernel holds by default, Triton's limit): the longest whose
    tile some config holds at :data:`THREAD_ELEMENTS` per thread (a power of two; Triton's
    default of 4 warps where the spec is not tuned), and the longest whose tile, times the
    largest rows per program, Triton takes at all (``MAX_TILE`` elements)."""
    defaults = {p.name.id: p.default for p in spec.params}

    def count(config: m.Config | None) -> int:
        total = 1
        for block in rows:
            value = (config.get(block) if config is not None else None) or defaults.get(block)
            total *= int(value.text) if value is not None else 1
        return total

    configs = list(spec.tune.configs) if spec.tune is not None else [None]
    def warps_of(config: m.Config | None) -> int:
        number = config.get("num_warps") if config is not None else None
        return int(number.text) if number is not None else 4

    warps = [warps_of(c) for c in configs]
    held = max(THREAD_ELEMENTS * 32 * w // count(c) for c, w in zip(configs, warps, strict=True))
    largest = max([count(c) for c in configs] + [count(None)])
    hard = MAX_TILE // largest
    return min(1 << max(held.bit_length() - 1, 0), hard), hard
