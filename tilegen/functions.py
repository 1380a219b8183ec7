"""The functions a spec may call: one table, read by the checker and by both lowerings.

Each :class:`Function` says how it is called (positional and keyword arguments, the checker's
business), what it computes to (its result's dtype, the lowering's business) and how it is
written in Triton and in torch. Names and defaults are torch's (``torch.nn.functional`` for
the activations), so a spec reads like the torch code its author knows; docs/language.md lists
them, and its "Adding an operation" says what an entry holds.

Kinds:

* ``math``: elementwise, computed in float32 for f16/bf16 (and integer) operands, as torch
  computes them; the result stays float32 (a store casts it to the output's dtype);
* ``activation``: like ``math``, written as a ``@triton.jit`` helper of the generated module
  (:data:`HELPERS`) so the kernel reads ``elu(x, 1.0)``;
* ``elementwise``: computed in the operands' dtype (``maximum``, ``minimum``, ``where``,
  ``abs``, ``clamp``, ``relu``, ``leaky_relu``, ``hardtanh``);
* ``reduction``: ``sum``, ``max``, ``min``, ``mean``, ``prod``, ``argmax``, ``argmin``, ``any``, ``all`` over one
  axis (``dim=``); each
  entry says what a masked lane holds (``identity``), how two partial results merge
  (``combine``: what a loop over tiles, a long row's chunks or a carried value uses), whether
  f16/bf16 accumulate in float32 (``widens``) and whether the result rounds with the length;
* ``scan``: ``cumsum``, ``cumprod`` along one axis (``dim=``, ``reverse=true`` from the end),
  as torch.cumsum/cumprod; the result spans the operand's axes. They take ``identity``,
  ``combine``, ``widens`` and ``rounds`` as reductions do;
* ``random``: ``rand(seed, offset)``, ``randn(seed, offset)``: float32 numbers of Triton's Philox
  (``tl.randint4x``; four consecutive offsets share one evaluation, see the runtime's ``tile_rand``)
  for an integer scalar input ``seed`` and an integer expression of axes ``offset``, the same for an
  element at every block size; the torch reference computes the same numbers
  (:func:`tilegen.runtime.philox_rand`);
* ``cast``: a dtype's name converts (``f16(p)``);
* ``dot``: the accumulate-dot of a ``for`` loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tilegen import model as m


@dataclass(frozen=True)
class Function:
    """One spec function.

    ``params`` names the arguments after the first, in order, with their defaults as spec
    number text (``None``: required; :data:`OMITTED`: may be left out, as torch's ``None``);
    each can be given by position or by keyword. ``one_of`` names params of which at least one
    must be given (``clamp``'s ``min`` and ``max``).
    ``choices`` are keyword arguments taking a word (``approximate=tanh``). Params in
    ``numbers`` take a number (a literal or a scalar input), not a tile, as torch's do
    (``negative_slope``, ``alpha``). ``triton`` and
    ``torch`` are format strings over ``x`` (the first argument) and the params' names;
    an empty ``triton`` means a helper of that name (``elu(x, alpha)``); ``helpers`` names
    the :data:`HELPERS` a ``triton`` text calls (``prod``'s combine function); ``tensors``
    the params torch takes only as tensors (``torch.maximum``'s ``other``), which the
    reference passes as tensors even where the spec gives a number. ``selects``: the first
    argument is a mask choosing between the others (``where``), so the result has their
    shape and dtype, and only there may a mask be an argument. ``f64_triton``: the Triton text for an
    f64 operand where ``triton`` takes float32 only (``sqrt``: ``tl.sqrt_rn`` is float32's correctly
    rounded square root, ``tl.sqrt`` f64's). ``promotes``: its arguments
    (by position or keyword) promote to one dtype, the result's, as torch's (``maximum``,
    ``minimum``, ``clamp``). ``floats``: its operand must be a float tile (``prod``: an integer
    product would wrap in the kernel's dtype where torch's goes to int64; ``leaky_relu``: torch
    has no integer one). ``unsigned_limits``: the parameters that may not be negative where the
    operand is unsigned (``hardtanh``'s ``min_val``: torch refuses "hardtanh on an unsigned type
    with negative limits").

    What the lowerings ask of an operation instead of testing its name (a new reduction is one
    entry with these filled in):

    * ``identity``: the value a masked lane takes, so it changes nothing (``sum`` 0, ``max``
      -inf, ``prod`` 1; ``maximum``'s -inf too);
    * ``combine``: how two partial results merge, a binary operator (``"+"``, ``"*"``) or an
      elementwise function's name (``"maximum"``): a reduction over tiles in a loop, over a long
      row's chunks, or a value carried across steps is this of its parts;
    * ``averages``: divides the combined partials by the count (``mean``: a ``sum`` per tile);
    * ``widens``: f16/bf16 operands accumulate in float32, as torch's do (``sum``, ``mean``,
      ``prod``); an ``averages`` reduction of integers is float32 too;
    * ``rounds``: the result's rounding error grows with the reduced length
      (:mod:`tilegen.tolerance`); ``max``/``min`` are exact;
    * ``mirror``: ``f(x * c)`` is exactly ``f(x) * c`` for ``c >= 0`` and ``mirror(x) * c`` for
      ``c < 0`` (``max`` and ``min``, ``maximum`` and ``minimum``), which lets a scale move out;
    * ``masks``: its operand is a mask (a comparison or a ``bool`` tile), as ``any`` and ``all``
      take; every other reduction takes numbers;
    * ``result``: the result's dtype where it is not the operand's (``argmax``: ``i64``, torch's
      index dtype);
    * ``picks``: for an arg-reduction, the reduction whose value its index points at (``argmax``:
      ``max``). Its partials merge as (value, index) pairs, which no ``combine`` says: inside a
      loop over its axis it gives the index along the whole dimension (the tile's start added),
      and a long row's chunks merge by the pairs (:mod:`tilegen.row_loops`). A reduction with
      neither ``combine`` nor ``picks`` reduces a ``whole`` axis only.

    ``grad``: its gradient rule, for :mod:`tilegen.grad`: per differentiable argument (``x``,
    or a param's name), the adjoint of that argument as spec text over ``{g}`` (the adjoint of the
    call's result, float32), ``{y}`` (its result), ``{x}`` and the params' texts, each in
    parentheses where it is not one term; ``{g_}``, ``{x_}``, ... are the texts as they are, for a
    whole argument of a call. A reduction's or scan's rule also reads ``{axis}``, ``{size}`` (the
    axis's extent) and ``{flip}`` (the other direction of a scan). A callable takes those values
    and gives the text. Rules follow torch's autograd formulas (``tools/autograd/derivatives.yaml``),
    ties included (``maximum`` splits a tie's gradient in halves; ``max`` over an axis among its
    maxima). An operation without a rule has no derived backward. ``flat``: piecewise constant, its
    gradient 0 wherever it has one (``round``, ``floor``, ``ceil``, ``trunc``, ``sign``, as torch's):
    no gradient flows through it, as through ``detach``.
    """

    name: str
    kind: str
    params: tuple[tuple[str, str | None], ...] = ()
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    numbers: tuple[str, ...] = ()
    triton: str | Callable[[dict[str, str]], str] = ""
    torch: str | Callable[[dict[str, str]], str] = ""
    one_of: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()
    tensors: tuple[str, ...] = ()
    selects: bool = False
    promotes: bool = False
    f64_triton: str = ""
    floats: bool = False
    unsigned_limits: tuple[str, ...] = ()
    identity: float | None = None
    combine: str | None = None
    averages: bool = False
    widens: bool = False
    rounds: bool = False
    mirror: str | None = None
    result: str | None = None
    masks: bool = False
    picks: str | None = None
    flat: bool = False
    grad: Mapping[str, str | Callable[[dict[str, str]], str]] = field(default_factory=dict)

    def grad_text(self, operand: str, values: dict[str, str]) -> str | None:
        """The adjoint of argument ``operand`` by :attr:`grad` (None: no rule), from the texts
        ``values`` (``g``, ``y``, ``x``, the params', each also as ``g_``, ...: see :attr:`grad`)."""
        rule = self.grad.get(operand)
        if rule is None:
            return None
        return rule(values) if callable(rule) else rule.format(**values)

    def triton_text(self, **values: str) -> str:
        """The Triton text of a call, from the Triton texts of its arguments (omitted: ``""``)."""
        return self.triton(values) if callable(self.triton) else self.triton.format(**values)

    def torch_text(self, **values: str) -> str:
        """The torch text of a call, from the torch texts of its arguments (omitted: ``""``)."""
        return self.torch(values) if callable(self.torch) else self.torch.format(**values)

    @property
    def identity_text(self) -> str:
        """``identity`` as Triton text (``float("-inf")``, ``0.0``)."""
        if self.identity is None or math.isnan(self.identity):
            raise ValueError(f"{self.name} has no identity")
        return f'float("{self.identity}")' if math.isinf(self.identity) else repr(float(self.identity))

    @property
    def idempotent(self) -> bool:
        """Combining a value with itself gives it back (``max``, ``min``, ``mean``): a reduction
        of a tile of one value is that value."""
        return self.combine in ("maximum", "minimum") or self.averages

    @property
    def min_args(self) -> int:
        """Positional arguments it needs: ``x`` and every param without a default."""
        return 1 + sum(1 for _, default in self.params if default is None)

    @property
    def max_args(self) -> int:
        """Positional arguments it takes at most."""
        return 1 + len(self.params)


#: The default of a parameter that may be left out (torch's ``None``): its value text is empty.
OMITTED = ""


#: The argument of ``tl.maximum``/``tl.minimum`` that makes a NaN operand win, as torch's maximum,
#: minimum and clamp do (Triton's default drops it).
NAN = "propagate_nan=tl.PropagateNan.ALL"


def _clamp_triton(v: dict[str, str]) -> str:
    """``clamp(x, min, max)`` with either bound alone, as torch.clamp (NaN in, NaN out)."""
    x = v["x"]
    if v["min"]:
        x = f"tl.maximum({x}, {v['min']}, {NAN})"
    return f"tl.minimum({x}, {v['max']}, {NAN})" if v["max"] else x


def _atom(text: str) -> str:
    """Triton text that a method call may follow: ``text`` itself where it is a name or one call
    (``x``, ``tl.where(m, a, b)``), else in parentheses (``(x != x)``)."""
    head = text.split("(", 1)[0]
    if head.replace(".", "").replace("_", "").isalnum() and "(" not in text:
        return text
    if head and head.replace(".", "").replace("_", "").isalnum() and text.endswith(")"):
        depth = 0
        for i, char in enumerate(text):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and char == ")":
                if i == len(text) - 1:
                    return text
                break
    return f"({text})"


def _torch_scan(name: str, v: dict[str, str]) -> str:
    """``torch.cumsum(x, dim=a)``; from the end (``reverse``) it flips ``x`` and the result."""
    if v["reverse"] != "True":
        return f"torch.{name}({v['x']}, dim={v['axis']})"
    return f"torch.flip(torch.{name}(torch.flip({v['x']}, ({v['axis']},)), dim={v['axis']}), ({v['axis']},))"


def _math(name: str, triton: str, torch: str, grad: str) -> Function:
    return Function(name, "math", triton=triton, torch=torch, grad={"x": grad})


def _activation(name: str, torch: str, grad: str, *params: tuple[str, str | None]) -> Function:
    return Function(name, "activation", params=params, numbers=tuple(p for p, _ in params), torch=torch,
                    grad={"x": grad})


def _pow_grad(v: dict[str, str]) -> str:
    """torch's pow_backward for the base: ``g * p * x ** (p - 1)``, 0 where ``p == 0``; a literal
    exponent is folded (``2``: ``g * 2.0 * x``)."""
    try:
        p = float(v["exponent_"])
    except ValueError:
        return f"where({v['exponent_']} == 0, 0.0, {v['g']} * {v['exponent']} * pow({v['x_']}, {v['exponent']} - 1.0))"
    if p == 0:
        return f"0.0 * {v['g']}"
    if p == 1:
        return v["g_"]
    if p == 2:
        return f"{v['g']} * 2.0 * {v['x']}"
    return f"{v['g']} * {p!r} * pow({v['x_']}, {p - 1!r})"


def _clamp_grad(v: dict[str, str]) -> str:
    """torch's clamp_backward: the gradient where ``min <= x <= max``, else 0."""
    inside = [f"{v['x']} >= {v['min']}" if v["min_"] else "", f"{v['x']} <= {v['max']}" if v["max_"] else ""]
    return f"where({' & '.join(c for c in inside if c)}, {v['g_']}, 0.0)"


def _gelu_grad(v: dict[str, str]) -> str:
    """torch's gelu_backward: ``Phi(x) + x * phi(x)``; the tanh form's derivative as torch writes it."""
    g, x = v["g"], v["x"]
    if v["approximate_"] != "tanh":
        return f"{g} * (0.5 * (1.0 + erf({x} * 0.7071067811865476)) + {x} * 0.3989422804014327 * exp(-0.5 * {x} * {x}))"
    t = f"tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))"
    slope = f"0.7978845608028654 * (1.0 + 0.134145 * {x} * {x})"
    return f"{g} * (0.5 * (1.0 + {t}) + 0.5 * {x} * (1.0 - {t} * {t}) * {slope})"


def _extreme_grad(sign: str) -> dict[str, str]:
    """``maximum``/``minimum`` (``sign`` ``>``/``<``): the larger (smaller) operand takes the
    gradient; a tie splits it in halves, as torch's."""
    def rule(mine: str, theirs: str) -> str:
        return (f"where({{{mine}}} {sign} {{{theirs}}}, {{g_}}, where({{{mine}}} == {{{theirs}}}, 0.5 * {{g}}, 0.0))")
    return {"x": rule("x", "other"), "other": rule("other", "x")}


#: A reduction over an axis whose gradient goes to its extreme lanes, split among ties (torch's amax/amin).
_AMONG_EXTREMES = {"x": "where({x} == {y}, {g_}, 0.0) / sum(where({x} == {y}, 1.0, 0.0), dim={axis})"}


#: Every function, by name. The activations' torch forms take ``x`` in float32, as the helpers do.
FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("dot", "dot", choices={"precision": m.PRECISIONS}),
        # reductions over one axis
        Function("sum", "reduction", triton="tl.sum({x}, axis={axis})", torch="torch.sum({x}, dim={axis})",
                 identity=0.0, combine="+", widens=True, rounds=True, grad={"x": "{g_}"}),
        Function("max", "reduction", triton="amax({x}, {axis})", helpers=("amax",),
                 torch="torch.amax({x}, dim={axis})",
                 identity=-math.inf, combine="maximum", mirror="min", grad=_AMONG_EXTREMES),
        Function("min", "reduction", triton="amin({x}, {axis})", helpers=("amin",),
                 torch="torch.amin({x}, dim={axis})",
                 identity=math.inf, combine="minimum", mirror="max", grad=_AMONG_EXTREMES),
        Function("mean", "reduction", triton="tl.sum({x}, axis={axis}) / {size}", torch="torch.mean({x}, dim={axis})",
                 identity=0.0, combine="+", averages=True, widens=True, rounds=True, grad={"x": "{g} / {size}"}),
        Function("argmax", "reduction", triton="first_argmax({x}, {axis})", torch="torch.argmax({x}, dim={axis})",
                 helpers=("first_argmax",), floats=True, identity=-math.inf, result="i64", picks="max"),
        Function("argmin", "reduction", triton="first_argmin({x}, {axis})", torch="torch.argmin({x}, dim={axis})",
                 helpers=("first_argmin",), floats=True, identity=math.inf, result="i64", picks="min"),
        Function("prod", "reduction", triton="tl.reduce({x}, {axis}, multiply)", torch="torch.prod({x}, dim={axis})",
                 helpers=("multiply",), floats=True, identity=1.0, combine="*", widens=True, rounds=True),
        Function("any", "reduction", triton=lambda v: f"tl.max({_atom(v['x'])}.to(tl.int8), axis={v['axis']}) != 0",
                 torch="torch.any({x}, dim={axis})", identity=0.0, combine="|", masks=True, result="bool"),
        Function("all", "reduction", triton=lambda v: f"tl.min({_atom(v['x'])}.to(tl.int8), axis={v['axis']}) != 0",
                 torch="torch.all({x}, dim={axis})", identity=1.0, combine="&", masks=True, result="bool"),
        # scans along one axis
        Function("cumsum", "scan", choices={"reverse": ("false", "true")},
                 triton="tl.cumsum({x}, axis={axis}, reverse={reverse})", torch=lambda v: _torch_scan("cumsum", v),
                 floats=True, identity=0.0, combine="+", widens=True, rounds=True,
                 grad={"x": "cumsum({g_}, dim={axis}, reverse={flip})"}),
        Function("cumprod", "scan", choices={"reverse": ("false", "true")},
                 triton="tl.cumprod({x}, axis={axis}, reverse={reverse})", torch=lambda v: _torch_scan("cumprod", v),
                 floats=True, identity=1.0, combine="*", widens=True, rounds=True),
        # elementwise in the operands' dtype
        Function("maximum", "elementwise", (("other", None),), triton=f"tl.maximum({{x}}, {{other}}, {NAN})",
                 torch="torch.maximum({x}, {other})", tensors=("other",), promotes=True, identity=-math.inf,
                 mirror="minimum",
                 grad=_extreme_grad(">")),
        Function("minimum", "elementwise", (("other", None),), triton=f"tl.minimum({{x}}, {{other}}, {NAN})",
                 torch="torch.minimum({x}, {other})", tensors=("other",), promotes=True, identity=math.inf,
                 mirror="maximum",
                 grad=_extreme_grad("<")),
        Function("where", "elementwise", (("input", None), ("other", None)), triton="tl.where({x}, {input}, {other})",
                 torch="torch.where({x}, {input}, {other})", selects=True,
                 grad={"input": "where({x_}, {g_}, 0.0)", "other": "where({x_}, 0.0, {g_})"}),
        Function("detach", "elementwise", triton=lambda v: _atom(v["x"]), torch="torch.detach({x})"),
        Function("abs", "elementwise", triton="tl.abs({x})", torch="torch.abs({x})",
                 grad={"x": "where({x} > 0, {g_}, where({x} < 0, -{g}, 0.0))"}),
        Function("clamp", "elementwise", (("min", OMITTED), ("max", OMITTED)), one_of=("min", "max"),
                 tensors=("min", "max"), promotes=True, triton=_clamp_triton,
                 torch=lambda v: f"torch.clamp({v['x']}, min={v['min'] or None}, max={v['max'] or None})",
                 grad={"x": _clamp_grad}),
        # rounding, in the operand's dtype (an integer is its own); their gradient is 0 (``flat``)
        Function("round", "elementwise", triton='torch_rounding({x}, "round")', helpers=("torch_rounding",),
                 torch="torch.round({x})", flat=True),
        Function("floor", "elementwise", triton='torch_rounding({x}, "floor")', helpers=("torch_rounding",),
                 torch="torch.floor({x})", flat=True),
        Function("ceil", "elementwise", triton='torch_rounding({x}, "ceil")', helpers=("torch_rounding",),
                 torch="torch.ceil({x})", flat=True),
        Function("trunc", "elementwise", triton='torch_rounding({x}, "trunc")', helpers=("torch_rounding",),
                 torch="torch.trunc({x})", flat=True),
        Function("sign", "elementwise", triton="torch_sign({x})", helpers=("torch_sign",),
                 torch="torch.sign({x})", flat=True),
        Function("fmod", "elementwise", (("other", None),), triton="torch_fmod({x}, {other})",
                 helpers=("torch_fmod",), torch="torch.fmod({x}, {other})", tensors=("other",), promotes=True,
                 grad={"x": "{g_}", "other": "-{g} * trunc({x} / {other})"}),
        Function("remainder", "elementwise", (("other", None),), triton="torch_remainder({x}, {other})",
                 helpers=("torch_remainder",), torch="torch.remainder({x}, {other})", tensors=("other",),
                 promotes=True, grad={"x": "{g_}", "other": "-{g} * floor({x} / {other})"}),
        Function("relu", "elementwise", triton="relu({x})", torch="torch.relu({x})",
                 grad={"x": "where({x} > 0, {g_}, 0.0)"}),
        Function("leaky_relu", "elementwise", (("negative_slope", "0.01"),), numbers=("negative_slope",), floats=True,
                 triton="leaky_relu({x}, {negative_slope})",
                 torch="torch.nn.functional.leaky_relu({x}, {negative_slope})",
                 grad={"x": "where({x} > 0, {g_}, {g} * {negative_slope})"}),
        Function("hardtanh", "elementwise", (("min_val", "-1.0"), ("max_val", "1.0")), numbers=("min_val", "max_val"),
                 unsigned_limits=("min_val", "max_val"),
                 triton=f"tl.minimum(tl.maximum({{x}}, {{min_val}}, {NAN}), {{max_val}}, {NAN})",
                 torch="torch.nn.functional.hardtanh({x}, {min_val}, {max_val})",
                 grad={"x": "where({x} > {min_val} & {x} < {max_val}, {g_}, 0.0)"}),
        # math, in float32
        _math("opmath", "{x}", "{x}", "{g}"),  # the value in the dtype torch computes it in (at::opmath_type)
        _math("exp", "tl.exp({x})", "torch.exp({x})", "{g} * {y}"),
        _math("exp2", "tl.exp2({x})", "torch.exp2({x})", "{g} * {y} * 0.6931471805599453"),
        _math("log", "tl.log({x})", "torch.log({x})", "{g} / {x}"),
        _math("log2", "tl.log2({x})", "torch.log2({x})", "{g} / ({x} * 0.6931471805599453)"),
        Function("sqrt", "math", triton="tl.sqrt_rn({x})", f64_triton="tl.sqrt({x})", torch="torch.sqrt({x})",
                 grad={"x": "{g} / (2.0 * {y})"}),
        _math("rsqrt", "tl.rsqrt({x})", "torch.rsqrt({x})", "-0.5 * {g} * {y} * {y} * {y}"),
        _math("erf", "tl.erf({x})", "torch.erf({x})", "{g} * 1.1283791670955126 * exp(-{x} * {x})"),
        Function("pow", "math", (("exponent", None),), torch="torch.pow({x}, {exponent})", grad={"x": _pow_grad}),
        # random numbers: Triton's Philox, one number per (seed, offset); the reference computes the same (runtime)
        Function("rand", "random", (("offset", None),), triton="tile_rand({x}, {offset})", helpers=("tile_rand",),
                 torch="_rt.philox_rand({x}, {offset})"),
        Function("randn", "random", (("offset", None),), triton="tile_randn({x}, {offset})", helpers=("tile_randn",),
                 torch="_rt.philox_randn({x}, {offset})"),
        # activations (helpers), in float32
        _activation("tanh", "torch.tanh({x})", "{g} * (1.0 - {y} * {y})"),
        _activation("sigmoid", "torch.sigmoid({x})", "{g} * {y} * (1.0 - {y})"),
        _activation("silu", "torch.nn.functional.silu({x})",
                    "{g} * sigmoid({x_}) * (1.0 + {x} * (1.0 - sigmoid({x_})))"),
        Function("gelu", "activation", choices={"approximate": ("none", "tanh")},
                 torch='torch.nn.functional.gelu({x}, approximate="{approximate}")', grad={"x": _gelu_grad}),
        _activation("elu", "torch.nn.functional.elu({x}, {alpha})", "where({x} > 0, {g_}, {g} * {alpha} * exp({x_}))",
                    ("alpha", "1.0")),
        _activation("selu", "torch.nn.functional.selu({x})",
                    "where({x} > 0, {g} * 1.0507009873554805, {g} * 1.7580993408473766 * exp({x_}))"),
        _activation("softplus", "torch.nn.functional.softplus({x}, {beta}, {threshold})",
                    "where({x} * {beta} > {threshold}, {g_}, {g} * sigmoid({x} * {beta}))",
                    ("beta", "1.0"), ("threshold", "20.0")),
        _activation("softsign", "torch.nn.functional.softsign({x})", "{g} / ((1.0 + abs({x_})) * (1.0 + abs({x_})))"),
        _activation("hardsigmoid", "torch.nn.functional.hardsigmoid({x})",
                    "where({x} > -3.0 & {x} < 3.0, {g} / 6.0, 0.0)"),
        _activation("hardswish", "torch.nn.functional.hardswish({x})",
                    "where({x} < -3.0, 0.0, where({x} <= 3.0, {g} * ({x} / 3.0 + 0.5), {g_}))"),
        _activation("mish", "torch.nn.functional.mish({x})",
                    "{g} * (tanh(softplus({x_})) + {x} * sigmoid({x_})"
                    " * (1.0 - tanh(softplus({x_})) * tanh(softplus({x_}))))"),
    )
}

#: Casts: every dtype's name is a function converting to it (``f16(p)``); not ``bool``, a mask,
#: which a comparison makes (``x != 0``).
CASTS = tuple(d for d in m.DTYPES if d != "bool")


def combining(name: str) -> tuple[Function, ...]:
    """The reductions whose partial results ``name`` merges (``maximum``: ``max``; ``+``:
    ``sum`` and ``mean``)."""
    return tuple(f for f in FUNCTIONS.values() if f.kind == "reduction" and f.combine == name)


def partial_reduction(function: Function) -> Function:
    """What one tile of ``function`` contributes before its partials combine: itself, or for
    an ``averages`` reduction the one that combines alike without dividing (``mean``: ``sum``)."""
    if not function.averages:
        return function
    assert function.combine is not None  # an averages reduction combines its partials
    return next(f for f in combining(function.combine) if not f.averages)


def _called(expr: m.Expr, kind: str) -> Function | None:
    """The function of ``kind`` that ``expr`` calls, or None for anything else."""
    if isinstance(expr, m.Call) and not isinstance(expr.func, m.BoundDtype):
        function = FUNCTIONS.get(expr.func.id)
        if function is not None and function.kind == kind:
            return function
    return None


def scan(expr: m.Expr) -> Function | None:
    """The scan ``expr`` calls (``cumsum(x, dim=c)``), or None for anything else."""
    return _called(expr, "scan")


def reduction(expr: m.Expr) -> Function | None:
    """The reduction ``expr`` calls (``sum(x, dim=c)``), or None for anything else."""
    return _called(expr, "reduction")


#: Functions a ``choose`` line may offer (besides ``none``): the one-argument activations.
CHOICE_OPTIONS = ("none", "relu", "leaky_relu", "gelu", "sigmoid", "silu")


#: The ``@triton.jit`` helpers a kernel may call by name (activations, the combine functions of
#: reductions, torch's amax/amin/argmax/argmin and pow): tilegen's runtime defines them
#: (tilegen/runtime.py), and a generated module binds those its kernels call (``amax = _rt.amax``).
HELPERS: tuple[str, ...] = (
    "multiply", "maximum_nan", "minimum_nan", "amax", "amin", "first_argmax", "first_argmin", "relu", "leaky_relu",
    "gelu", "gelu_tanh", "tanh", "sigmoid", "silu", "elu", "selu", "softplus", "softsign", "hardsigmoid",
    "hardswish", "power", "mish", "torch_rounding", "torch_sign", "torch_fmod", "torch_remainder",
    "floor_divide", "tile_rand", "tile_randn",
)


#: Integral exponents up to this size are multiplications (by squaring); larger ones go through
#: exp2/log2 with torch's sign rule (the ``power`` helper).
MAX_MULTIPLIED_EXPONENT = 64


def literal_value(expr: m.Expr) -> float | None:
    """The value of a literal number, negated or not (``3.0``, ``-2``), or None for anything else."""
    if isinstance(expr, m.Number):
        return expr.value
    if isinstance(expr, m.Neg) and isinstance(expr.operand, m.Number):
        return -expr.operand.value
    return None


def folded(expr: m.Expr) -> int | float | None:
    """The number an expression of literals alone stands for, computed as Python does (``0.5 - 0``:
    ``0.5``; ``clamp(0.1, 0, 2)``: ``0.1``; NaN wins in ``maximum``, ``minimum`` and ``clamp``, as
    torch's), or None where ``expr`` is not one (a load, a name, ``pow``, any other call) or Python
    raises (a division by 0). Such an expression is a literal to the dtype rules: it takes its
    context's dtype."""
    if isinstance(expr, m.Number):
        return int(expr.text) if expr.is_int else expr.value
    if isinstance(expr, m.Neg):
        inner = folded(expr.operand)
        return None if inner is None else -inner
    if isinstance(expr, m.BinOp) and expr.op in ("+", "-", "*", "/"):
        left, right = folded(expr.left), folded(expr.right)
        if left is None or right is None or (expr.op == "/" and right == 0):
            return None
        return {"+": left + right, "-": left - right, "*": left * right, "/": left / right if right else 0.0}[expr.op]
    if not isinstance(expr, m.Call):
        return None
    function = lookup(expr.func)
    if function is None or not function.promotes:
        return None
    values = [folded(a) for a in expr.args]
    bounds = dict(zip([p for p, _ in function.params], values[1:], strict=False))
    bounds.update((key.id, folded(value)) for key, value in expr.kwargs)
    numbers = [v for v in values if v is not None]
    given = {name: v for name, v in bounds.items() if v is not None}
    if len(numbers) < len(values) or len(given) < len(bounds):  # a part that is not a number
        return None
    x, others = numbers[0], list(given.values())
    if any(math.isnan(v) for v in (x, *others)):
        return math.nan
    if function.name in ("fmod", "remainder"):  # C's and Python's %, as torch's
        a, b = x, others[0]
        if b == 0 or math.isinf(a):  # by 0 (an integer's is undefined), or of inf: computed by the kernel
            return None
        if function.name == "remainder":
            return a % b
        return int(math.fmod(a, b)) if isinstance(a, int) and isinstance(b, int) else math.fmod(a, b)
    if function.name == "clamp":
        low, high = given.get("min"), given.get("max")
        x = x if low is None else max(x, low)
        return x if high is None else min(x, high)
    return (max if function.name == "maximum" else min)(x, *others)


def stops_gradient(expr: m.Expr) -> bool:
    """True for a call through which no gradient flows: ``detach``, or a ``flat`` function
    (``floor(x)``), whose gradient is 0 wherever it has one."""
    if m.is_detach(expr):
        return True
    function = lookup(expr.func) if isinstance(expr, m.Call) else None
    return function is not None and function.flat


def lookup(name: str | m.Name) -> Function | None:
    """The function called ``name`` (casts included), or None. A cast to a dtype variable (a
    :class:`~tilegen.model.BoundDtype`, ``T(p)``) writes the variable: ``p.to(T)``."""
    if isinstance(name, m.BoundDtype):
        return Function(name.id, "cast", triton=f"{{x}}.to({name.var})", torch=f"{{x}}.to({name.var})")
    if isinstance(name, m.Name):
        name = name.id
    if name in CASTS:
        return Function(name, "cast", triton=f"{{x}}.to({m.DTYPES[name][0]})", torch=f"{{x}}.to({m.DTYPES[name][1]})")
    return FUNCTIONS.get(name)


def function_of(name: str | m.Name) -> Function:
    """The function a checked spec calls as ``name`` (casts included, as
    :func:`~tilegen.functions.lookup` gives them)."""
    found = lookup(name)
    assert found is not None, f"'{name if isinstance(name, str) else name.id}' is not a function"
    return found


def spanned_axes(expr: m.Expr, own: Callable[[m.Expr], tuple[str, ...] | None]) -> tuple[str, ...]:
    """The axes a tile expression spans, in order of first appearance (a ``where``'s values
    before its condition).

    ``own(expr)`` gives the axes a load's own index, a name or a ``dot`` spans (each lowering
    knows its own: the kernel's tile axes, the reference's whole-tensor axes), or None for a
    composite expression. A gather adds its index tile's axes, arithmetic and calls unite their
    parts' axes, and a reduction drops the axis it reduces.
    """
    axes = own(expr)
    if axes is not None and not isinstance(expr, m.Load):
        return axes
    parts: list[m.Expr] = []
    if isinstance(expr, m.Load):
        parts = [item for item in expr.index if isinstance(item, m.Load)]
    elif isinstance(expr, m.Neg):
        parts = [expr.operand]
    elif isinstance(expr, m.BinOp):
        parts = [expr.left, expr.right]
    elif isinstance(expr, m.Call):
        parts = list(expr.args)
        if (function := lookup(expr.func)) is not None and function.selects:  # shaped like its values; mask last
            parts = parts[1:] + parts[:1]
        if function is not None:  # a parameter given by keyword (clamp(x, max=hi)); not a word (dim=c)
            params = {p for p, _ in function.params}
            parts += [value for key, value in expr.kwargs if key.id in params]
    axes = axes or ()
    for part in parts:
        axes += tuple(a for a in spanned_axes(part, own) if a not in axes)
    if isinstance(expr, m.Call) and reduction(expr) is not None:
        axes = tuple(a for a in axes if a != expr.word("dim"))
    return axes
