"""Front end: ``.tile`` text -> :class:`tilegen.model.Spec`.

The grammar is ``grammars/tile.lark`` (LALR, positions kept, built once). A
:class:`lark.Transformer` turns every rule into a frozen model dataclass carrying its span, so
no Lark tree leaves this module. Syntax errors become :class:`~tilegen.errors.SpecError` with
the expected tokens named in words (``a name``, ``end of line``), not Lark terminal names.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterable
from typing import Any, ClassVar

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.indenter import DedentError, Indenter
from lark.tree import Meta

from tilegen import model as m
from tilegen.errors import Diagnostic, SpecError
from tilegen.functions import FUNCTIONS
from tilegen.resources import data_path


class TileIndenter(Indenter):
    """Turns leading whitespace after newlines into ``_INDENT``/``_DEDENT`` tokens."""

    NL_type = "_NL"
    OPEN_PAREN_types: ClassVar[list[str]] = ["LPAR", "LSQB"]
    CLOSE_PAREN_types: ClassVar[list[str]] = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@functools.lru_cache(maxsize=1)
def get_parser() -> Lark:
    """The LALR parser for ``grammars/tile.lark``, built once per process."""
    return Lark(
        data_path("grammars", "tile.lark").read_text(encoding="utf-8"),
        parser="lalr",
        postlex=TileIndenter(),
        propagate_positions=True,
        maybe_placeholders=False,
    )


def _span(meta_or_token: Meta | Token) -> m.Span:
    """The span of a rule (its ``meta``, positions propagated) or of a token. Raises ValueError for
    a token without a position (the lexer gives every token one)."""
    line, column = meta_or_token.line, meta_or_token.column
    end_line, end_column = meta_or_token.end_line, meta_or_token.end_column
    if line is None or column is None or end_line is None or end_column is None:
        raise ValueError(f"token {meta_or_token!r} has no position")
    return m.Span(line, column, end_line, end_column)


def _name(token: Token) -> m.Name:
    return m.Name(str(token), _span(token))


def _number(token: Token) -> m.Number:
    text = str(token)
    if text.isdigit():  # Python refuses leading zeros in integer literals (007): write 7
        text = str(int(text))
    return m.Number(text, _span(token))


@dataclasses.dataclass(frozen=True)
class _Packed:
    """``packed [KH, KW, O, C]`` after an input's shape: the memory order the launcher gives it."""

    order: tuple[m.Name, ...]
    span: m.Span


@dataclasses.dataclass(frozen=True)
class _InPlace:
    """``in place of x`` after an output's shape: the input it may be written over."""

    name: m.Name


@dataclasses.dataclass(frozen=True)
class _Extent:
    """A dimension written as an expression of sizes (``B1 - 1``), and the name a spec gives it
    (``H_out = (H - K) / S + 1``), if any."""

    expr: m.Expr
    name: m.Name | None = None

    @property
    def size(self) -> str:
        """The size symbol naming it: the spec's name, else :func:`~tilegen.model.derived_name`."""
        return self.name.id if self.name is not None else m.derived_name(self.expr)


@dataclasses.dataclass(frozen=True)
class _Guard:
    """``where c < n`` after a store's value: the mask of the lanes it stores."""

    mask: m.Expr


@dataclasses.dataclass(frozen=True)
class _Initial:
    """``= 0`` after an output's shape: the number it starts filled with."""

    number: m.Number


@dataclasses.dataclass(frozen=True)
class _Params:
    """``block BM = 64, BN``: block parameters."""

    params: tuple[m.Param, ...]


@dataclasses.dataclass(frozen=True)
class _Grid:
    """``grid [flat | persistent] axes``: the axes, and whether the grid is flat and persistent."""

    axes: tuple[m.Axis, ...]
    flat: bool
    persistent: bool


@dataclasses.dataclass(frozen=True)
class _Access:
    """``access STYLE``."""

    style: m.Name


@dataclasses.dataclass(frozen=True)
class _Tail:
    """``split tail``, at ``span``."""

    span: m.Span


@dataclasses.dataclass(frozen=True)
class _Deterministic:
    """``deterministic``, at ``span``."""

    span: m.Span


@dataclasses.dataclass(frozen=True)
class _Backward:
    """``backward k1, k2``: the backward kernels' names (``deterministic``: ``backward
    deterministic k``, run instead under torch's deterministic algorithms)."""

    names: tuple[m.Name, ...]
    deterministic: bool = False


@dataclasses.dataclass(frozen=True)
class _Key:
    """One size of ``tune key``; ``rounded`` for ``next_power_of_2(M)``."""

    name: m.Name
    rounded: bool


@dataclasses.dataclass(frozen=True)
class _Kwarg:
    """``key=value`` in a call; ``dim=(r, c)`` gives the axes as a tuple of references."""

    key: m.Name
    value: m.Expr | tuple[m.Ref, ...]


def _marked_once(configs: tuple[m.Config, ...]) -> tuple[m.Config, ...]:
    """``configs`` without the plain configs a ``default`` or ``interpreter`` config repeats: that
    line marks a config the others list (``config BM in [64, 128]`` then ``default config BM = 64``),
    which is timed once, where the marked line stands."""
    def values(config: m.Config) -> frozenset[tuple[str, str]]:
        return frozenset((s.name.id, s.default.text if s.default else "") for s in config.settings)

    marked = {values(c) for c in configs if c.default or c.interpreter}
    return tuple(c for c in configs if c.default or c.interpreter or values(c) not in marked)


@v_args(meta=True)
class ToModel(Transformer[Token, m.Spec]):
    """One method per grammar rule; each returns a model node (or a tuple of them, or one of this
    module's records of a declaration, which :meth:`kernel` reads). A rule's ``items`` are its
    children, transformed: tokens and model nodes."""

    def __init__(self, path: str, source: str):
        super().__init__()
        self.path = path
        self.source = source

    # declarations --------------------------------------------------------------
    def tensor_decl(self, meta: Meta, items: list[Any]) -> m.Tensor:
        role, name, dtype, *dims = items
        initial = dims.pop().number if dims and isinstance(dims[-1], _Initial) else None  # `= 0`
        in_place = dims.pop().name if dims and isinstance(dims[-1], _InPlace) else None  # `in place of x`
        sample = dims.pop() if dims and isinstance(dims[-1], tuple) else None  # `in [low, high]`
        packed = dims.pop() if dims and isinstance(dims[-1], _Packed) else None  # `packed [KH, KW, O, C]`
        zero_dim = bool(dims) and isinstance(dims[0], m.Span)  # `f32[]`: the span of its brackets
        dims = dims[1:] if zero_dim else dims
        extents = tuple((d.size, d.expr) for d in dims if isinstance(d, _Extent))
        dims = [m.Name(d.size, d.name.span if d.name else d.expr.span) if isinstance(d, _Extent) else d for d in dims]
        return m.Tensor(role, _name(name), _name(dtype), tuple(dims), _span(meta), sample, zero_dim, in_place, initial,
                        extents, packed.order if packed else (), packed.span if packed else None)

    def packed(self, meta: Meta, items: list[Token]) -> _Packed:
        return _Packed(tuple(_name(t) for t in items), _span(meta))

    def in_place(self, meta: Meta, items: list[Token]) -> _InPlace:
        return _InPlace(_name(items[0]))

    def initial(self, meta: Meta, items: list[m.Number]) -> _Initial:
        return _Initial(items[0])

    def empty_shape(self, meta: Meta, items: list[Token]) -> m.Span:
        return _span(meta)

    def sample(self, meta: Meta, items: list[m.Number]) -> tuple[m.Number, m.Number]:
        return items[0], items[1]

    def bound_value(self, meta: Meta, items: list[Token]) -> m.Number:
        return _number(items[0])

    def bound_negated(self, meta: Meta, items: list[Token]) -> m.Number:
        return m.Number("-" + _number(items[0]).text, _span(meta))

    def role(self, meta: Meta, items: list[Token]) -> str:
        return str(items[0])

    def dim(self, meta: Meta, items: list[Any]) -> m.Name | m.Number | _Extent:
        """A tensor's dimension: a size (a :class:`~tilegen.model.Name`), a literal, or an expression
        of sizes (kept whole; :meth:`tensor_decl` names it as a derived size), named or not
        (``H_out = (H - K) / S + 1``)."""
        *named, item = items
        if named:
            return _Extent(item, _name(named[0]))
        if isinstance(item, m.Ref):
            return item.name
        if isinstance(item, m.Number):
            return item
        return _Extent(item)

    def param(self, meta: Meta, items: list[Token]) -> m.Param:
        return m.Param(_name(items[0]), _number(items[1]), _span(meta))

    def block_param(self, meta: Meta, items: list[Token]) -> m.Param:
        default = _number(items[1]) if len(items) > 1 else None
        return m.Param(_name(items[0]), default, _span(meta))

    def block_decl(self, meta: Meta, items: list[m.Param]) -> _Params:
        return _Params(tuple(items))

    def bounds(self, meta: Meta, items: list[Token]) -> str:
        return str(items[0])

    def axis(self, meta: Meta, items: list[Any]) -> m.Axis:
        name, extent, *rest = items
        block = [i for i in rest if isinstance(i, Token)]
        bounds = next((i for i in rest if isinstance(i, str) and not isinstance(i, Token)), None)
        if bounds is None:
            bounds = "masked" if block else "index"
        block_name = _name(block[0]) if block else None
        chunk = None
        if bounds == "whole" and block_name is not None:  # k over D1 by BK whole: all of D1, in tiles of BK
            chunk, block_name = block_name, None
        if isinstance(extent, m.Ref):  # a size symbol
            return m.Axis(_name(name), extent.name, block_name, bounds, _span(meta), chunk=chunk)
        if isinstance(extent, m.Number):  # a literal extent (k over 4): a dimension as a literal one is
            return m.Axis(_name(name), m.Name(extent.text, extent.span), block_name, bounds, _span(meta), chunk=chunk)
        # a derived extent (C / G): a size symbol of its own, which the launcher computes
        dim = m.Name(m.derived_name(extent), _span(meta) if not hasattr(extent, "span") else extent.span)
        return m.Axis(_name(name), dim, block_name, bounds, _span(meta), extent=extent, chunk=chunk)

    def grid_decl(self, meta: Meta, items: list[Any]) -> _Grid:
        kind = items[0].type if items and isinstance(items[0], Token) else None
        axes = tuple(i for i in items if isinstance(i, m.Axis))
        # a persistent grid of two tiled axes is flat (one launch over their tiles); one with whole
        # axes walks the tiles of its one tiled axis (rows), and is not
        rows = kind == "PERSISTENT" and any(a.bounds == "whole" for a in axes)
        return _Grid(axes, kind == "FLAT" or (kind == "PERSISTENT" and not rows), kind == "PERSISTENT")

    def param_values(self, meta: Meta, items: list[Token]) -> tuple[m.Param, ...]:
        name, *values = items
        return tuple(m.Param(_name(name), _number(value), _span(meta)) for value in values)

    def config(self, meta: Meta, items: list[Any]) -> tuple[m.Config, ...]:
        """One config, or for settings with ``in [...]`` one per combination of their values
        (``itertools.product`` in the order written: the first setting outermost)."""
        role = items[0].type if items and isinstance(items[0], Token) else None
        choices = [i if isinstance(i, tuple) else (i,) for i in items if isinstance(i, (m.Param, tuple))]
        return tuple(m.Config(settings, role == "DEFAULT", _span(meta), role == "INTERPRETER")
                     for settings in itertools.product(*choices))

    def tune_key(self, meta: Meta, items: list[Token]) -> _Key:
        return _Key(_name(items[0]), False)

    def rounded_key(self, meta: Meta, items: list[Token]) -> _Key:
        return _Key(_name(items[0]), True)

    def tune_decl(self, meta: Meta, items: list[_Key | tuple[m.Config, ...]]) -> m.Tune:
        keys = [i for i in items if isinstance(i, _Key)]
        configs = _marked_once(tuple(c for i in items if isinstance(i, tuple) for c in i))  # one tuple per line
        rounded = frozenset(key.name.id for key in keys if key.rounded)
        return m.Tune(tuple(key.name for key in keys), configs, _span(meta), rounded)

    def choose_decl(self, meta: Meta, items: list[Token]) -> m.Choice:
        name, *options = items
        return m.Choice(_name(name), tuple(_name(o) for o in options), _span(meta))

    def dtype_decl(self, meta: Meta, items: list[Token]) -> m.DtypeVar:
        name, *options = items
        return m.DtypeVar(_name(name), tuple(_name(o) for o in options), _span(meta))

    def access_decl(self, meta: Meta, items: list[Token]) -> _Access:
        return _Access(_name(items[0]))

    def tail_decl(self, meta: Meta, items: list[Token]) -> _Tail:
        return _Tail(_span(meta))

    def backward_decl(self, meta: Meta, items: list[Token]) -> _Backward:
        return _Backward(tuple(_name(item) for item in items))

    def deterministic_backward_decl(self, meta: Meta, items: list[Token]) -> _Backward:
        return _Backward(tuple(_name(item) for item in items), deterministic=True)

    def deterministic_decl(self, meta: Meta, items: list[Token]) -> _Deterministic:
        return _Deterministic(_span(meta))

    def group_size(self, meta: Meta, items: list[Token]) -> m.Number:
        return _number(items[0])

    def group_param(self, meta: Meta, items: list[m.Param]) -> m.Param:
        return items[0]

    def group_ref(self, meta: Meta, items: list[Token]) -> m.Name:
        return _name(items[0])

    def swizzle_decl(self, meta: Meta, items: list[Any]) -> m.Swizzle:
        first, second, group, *aliases = items
        alias = (_name(aliases[0]), _name(aliases[1])) if aliases else None
        return m.Swizzle((_name(first), _name(second)), group, alias, _span(meta))

    # statements ----------------------------------------------------------------
    def declare(self, meta: Meta, items: list[Any]) -> m.Declare:
        name, dtype, *axes, init = items
        return m.Declare(_name(name), _name(dtype), tuple(_name(a) for a in axes), init, _span(meta))

    def assign(self, meta: Meta, items: list[Any]) -> m.Assign:
        return m.Assign(_name(items[0]), items[1], _span(meta))

    def accumulate(self, meta: Meta, items: list[Any]) -> m.Accumulate:
        return m.Accumulate(_name(items[0]), items[1], _span(meta))

    def store(self, meta: Meta, items: list[Any], update: str = "") -> m.Store:
        guard = items.pop().mask if isinstance(items[-1], _Guard) else None
        name, *index, value = items
        return m.Store(_name(name), tuple(index), value, _span(meta), update=update, guard=guard)

    def scatter_add(self, meta: Meta, items: list[Any]) -> m.Store:
        return self.store(meta, items, update="add")

    def scatter_max(self, meta: Meta, items: list[Any]) -> m.Store:
        return self.store(meta, items, update="max")

    def scatter_min(self, meta: Meta, items: list[Any]) -> m.Store:
        return self.store(meta, items, update="min")

    def guard(self, meta: Meta, items: list[Any]) -> _Guard:
        return _Guard(items[0])

    def loop(self, meta: Meta, items: list[Any]) -> m.Loop:
        axis, *body = items
        split = bool(body) and isinstance(body[0], Token) and body[0].type == "SPLIT"
        return m.Loop(axis, tuple(body[1:] if split else body), _span(meta), split)

    def index(self, meta: Meta, items: list[m.Expr]) -> m.Name | m.Expr:
        """An index: an axis (a :class:`~tilegen.model.Name`), a constant, a gather (a
        :class:`~tilegen.model.Load`) or an offset axis (the arithmetic as written)."""
        (item,) = items
        if isinstance(item, m.Ref):
            return item.name
        return item

    # expressions ---------------------------------------------------------------
    def number(self, meta: Meta, items: list[Token]) -> m.Number:
        return _number(items[0])

    def ref(self, meta: Meta, items: list[Token]) -> m.Ref | m.Number:
        if str(items[0]) == "inf":  # the constant infinity (-inf is its negation)
            return m.Number("inf", _span(items[0]))
        return m.Ref(_name(items[0]), _span(meta))

    def load(self, meta: Meta, items: list[Any]) -> m.Load:
        name, *index = items
        return m.Load(_name(name), tuple(index), _span(meta))

    def binop(self, meta: Meta, items: list[Any]) -> m.BinOp:
        left, op, right = items
        return m.BinOp(str(op), left, right, _span(meta))

    def neg(self, meta: Meta, items: list[m.Expr]) -> m.Neg:
        return m.Neg(items[0], _span(meta))

    def power(self, meta: Meta, items: list[Any]) -> m.Call:
        """``x ** p`` is ``pow(x, p)``: one operation, one lowering (torch.pow's meaning)."""
        base, op, exponent = items
        return m.Call(m.Name("pow", _span(op)), (base, exponent), (), _span(meta))

    def kwarg(self, meta: Meta, items: list[Any]) -> _Kwarg:
        key, value = items
        return _Kwarg(_name(key), value)

    def kwarg_axes(self, meta: Meta, items: list[Token]) -> _Kwarg:
        key, *axes = items
        return _Kwarg(_name(key), tuple(m.Ref(_name(a), _span(a)) for a in axes))

    def call(self, meta: Meta, items: list[Any]) -> m.Call:
        """``f(args, key=value)``. ``dim=(r, c)`` reduces over each axis named, the first
        outermost: ``sum(x, dim=(r, c))`` is ``sum(sum(x, dim=c), dim=r)`` (a reduction whose
        partial results merge, so the order changes nothing but rounding)."""
        args: tuple[m.Expr, ...] = tuple(i for i in items[1:] if not isinstance(i, _Kwarg))
        given = [i for i in items[1:] if isinstance(i, _Kwarg)]
        kwargs = tuple((i.key, i.value) for i in given if not isinstance(i.value, tuple))
        several = [(i.key, i.value) for i in given if isinstance(i.value, tuple)]  # dim=(r, c)
        func, span = _name(items[0]), _span(meta)
        if not several:
            return m.Call(func, args, kwargs, span)
        function = FUNCTIONS.get(func.id)
        for key, _ in several:
            if key.id != "dim" or function is None or function.kind != "reduction" or function.combine is None:
                names = ", ".join(n for n, f in FUNCTIONS.items() if f.kind == "reduction" and f.combine is not None)
                raise SpecError(
                    [Diagnostic(f"a tuple of axes is dim= of a reduction ({names}), not {key.id}= of '{func.id}'",
                                key.span)],
                    self.path,
                    self.source,
                )
        key, axes = several[0]  # a keyword given twice: the first (as Call.kwarg reads it)
        innermost, *outer = reversed(axes)  # the last named innermost
        call = m.Call(func, args, ((key, innermost), *kwargs), span)
        for axis in outer:
            call = m.Call(func, (call,), ((key, axis), *kwargs), span)
        return call

    # the kernel ----------------------------------------------------------------
    def kernel(self, meta: Meta, items: list[Any]) -> m.Spec:
        name, *body = items
        tensors: list[m.Tensor] = []
        params: list[m.Param] = []
        stmts: list[m.Stmt] = []
        choices: list[m.Choice] = []
        dtype_vars: list[m.DtypeVar] = []
        grid: tuple[m.Axis, ...] = ()
        swizzle: m.Swizzle | None = None
        tune: m.Tune | None = None
        access: m.Name | None = None
        flat = persistent = False
        tails: list[m.Span] = []
        backwards: list[tuple[m.Name, ...]] = []
        ordered_backwards: list[tuple[m.Name, ...]] = []
        deterministic: m.Span | None = None
        for item in body:
            if isinstance(item, m.Tensor):
                tensors.append(item)
            elif isinstance(item, m.Swizzle):
                swizzle = item
                if isinstance(item.group, m.Param):
                    params.append(item.group)
            elif isinstance(item, m.Tune):
                tune = item
            elif isinstance(item, m.Choice):
                choices.append(item)
            elif isinstance(item, m.DtypeVar):
                dtype_vars.append(item)
            elif isinstance(item, _Params):
                params.extend(item.params)
            elif isinstance(item, _Grid):
                grid = grid + item.axes
                flat = flat or item.flat
                persistent = persistent or item.persistent
            elif isinstance(item, _Access):
                access = item.style
            elif isinstance(item, _Tail):
                tails.append(item.span)
            elif isinstance(item, _Backward) and item.deterministic:
                ordered_backwards.append(item.names)
            elif isinstance(item, _Backward):
                backwards.append(item.names)
            elif isinstance(item, _Deterministic):
                deterministic = item.span
            else:
                stmts.append(item)
        # `loss = value` where loss is a 0-dim output: its store (it has no index)
        scalars_out = {t.name.id for t in tensors if t.zero_dim and t.role == "out"}
        stmts = [
            m.Store(s.name, (), s.value, s.span) if isinstance(s, m.Assign) and s.name.id in scalars_out else s
            for s in stmts
        ]
        return m.Spec(
            _name(name),
            tuple(tensors),
            tuple(params),
            grid,
            swizzle,
            tuple(stmts),
            self.path,
            self.source,
            flat=flat,
            persistent=persistent,
            tune=tune,
            choices=tuple(choices),
            access=access,
            dtype_vars=tuple(dtype_vars),
            split_tail=tuple(tails),
            backward=tuple(name for names in backwards for name in names),
            deterministic=deterministic,
            deterministic_backward=tuple(name for names in ordered_backwards for name in names),
        )

    def start(self, meta: Meta, items: list[m.Spec]) -> m.Spec:
        return items[-1]

#: How terminals are named in syntax errors (those not listed are shown as their literal).
_TERMINAL_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "_NL": "end of line",
    "_INDENT": "an indented block",
    "_DEDENT": "end of the indented block",
    "$END": "end of file",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*' or '/'",
    "POW_OP": "'**'",
    "CMP_OP": "a comparison",
    "AND_OP": "'&'",
    "OR_OP": "'|'",
    "FLAT": "'flat'",
    "PERSISTENT": "'persistent'",
    "DEFAULT": "'default'",
    "INTERPRETER": "'interpreter'",
}


def _describe(terminal: str) -> str:
    if terminal in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[terminal]
    try:
        pattern = get_parser().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    return f"'{pattern.value}'"


def _expected(names: Iterable[str]) -> str:
    words = sorted({_describe(n) for n in names})
    if not words:
        return ""
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _found(token: Token) -> str:
    if token.type == "$END":
        return "end of file"
    if token.type == "_NL":
        return "end of line"
    if token.type in ("_INDENT", "_DEDENT"):
        return "a change of indentation"
    return f"'{token}'"


def _syntax_diagnostic(err: UnexpectedInput) -> Diagnostic:
    line = max(getattr(err, "line", 1) or 1, 1)
    column = max(getattr(err, "column", 1) or 1, 1)
    if isinstance(err, UnexpectedCharacters):
        message = f"unexpected character {err.char!r}"
        if err.allowed:
            message += f"; expected {_expected(err.allowed)}"
    elif isinstance(err, UnexpectedToken):
        token = err.token
        if token.type == "_NL" and "\n" in str(token):
            # Point at the end of the line, not at the next line's indentation.
            line, column = token.line, token.column
        message = f"unexpected {_found(token)}; expected {_expected(err.accepts or err.expected)}"
        if set(err.accepts or err.expected) == {"TAIL"}:  # `split` began a line: the keyword, not a name
            message = f"'split' is a keyword, not a name: a line that starts with it is 'split tail' ({message})"
    elif isinstance(err, UnexpectedEOF):
        message = f"unexpected end of file; expected {_expected(err.expected)}"
    else:  # pragma: no cover - lark has no other UnexpectedInput kinds today
        message = str(err).splitlines()[0]
    return Diagnostic(message, m.Span(line, column, line, column + 1))


def parse(source: str, path: str = "<spec>") -> m.Spec:
    """Parse one ``.tile`` text into a :class:`~tilegen.model.Spec`.

    ``path`` is only used in error messages and the generated header. Raises
    :class:`~tilegen.errors.SpecError` (with ``file:line:col``) on a syntax error; semantic
    problems are left to :mod:`tilegen.check`.
    """
    text = source if source.endswith("\n") else source + "\n"
    try:
        tree = get_parser().parse(text)
    except UnexpectedInput as err:
        raise SpecError([_syntax_diagnostic(err)], path, source) from None
    except DedentError as err:
        line = _dedent_line(text)
        span = m.Span(line, 1, line, 2)
        raise SpecError(
            [Diagnostic(f"indentation does not match any outer block ({err})", span)], path, source
        ) from None
    try:
        spec: m.Spec = ToModel(path, source).transform(tree)
    except VisitError as err:  # a construct the grammar accepts and the model cannot hold
        if isinstance(err.orig_exc, SpecError):
            raise err.orig_exc from None
        raise
    return m.index_locals(spec)


def _dedent_line(text: str) -> int:
    """The first line whose indentation matches no enclosing level (for DedentError)."""
    levels = [0]
    for number, line in enumerate(m.source_lines(text), 1):
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line.expandtabs(TileIndenter.tab_len)) - len(stripped.expandtabs(TileIndenter.tab_len))
        if indent > levels[-1]:
            levels.append(indent)
            continue
        while indent < levels[-1]:
            levels.pop()
        if indent != levels[-1]:
            return number
    return 1
