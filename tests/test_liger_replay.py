"""Liger-Kernel's own correctness tests replayed through tilegen's ops (docs/liger.md).

Every parameterization of Liger-Kernel's tests of rms_norm, fused_add_rms_norm, layer_norm,
swiglu, geglu, cross_entropy, fused_linear_cross_entropy, rope, kl_div, jsd, embedding, softmax and
group_norm (the data: :mod:`tests.liger_cases`) runs here as one case: inputs drawn as Liger's test
draws them, the torch answer computed as Liger's test computes it (torch's functions, Hugging
Face's modules' math written out), tilegen's answer from the launchers of the committed build
(``tilegen.nn.kernel``) and ``tilegen.nn.linear_cross_entropy``, gradients through torch's
autograd, compared at Liger's tolerances (``|tilegen - torch| <= atol + rtol * |torch|``, in
float64, NaN and infinities where torch has them).

Between a Liger option and tilegen's op sits one adapter per op (:func:`rms_norm`,
:func:`cross_entropy`, ...): it reduces a per-row loss as the option asks (``reduction``, kl_div's
``batchmean``, jsd's mean over the rows not ignored), reshapes and broadcasts, and raises
:class:`Missing` naming each option the op lacks; the case is then skipped with that reason. An
adapter looks for an option in the launcher's signature (an optional ``weight``, an ``offset``) or
the spec's dtypes, so that a case runs once tilegen has the option. An option no value Liger's
test checks depends on (``in_place``; a casting mode, at bf16, whose rounding stays within Liger's
tolerance) is run without and noted in the test's ``liger_notes`` property
(:mod:`tests.liger_summary` counts them); ``TILEGEN_LIGER_STRICT=1`` counts such an option missing
instead.

In Triton's interpreter (the default) the cases run at the small sizes of :mod:`tests.liger_cases`,
each tuned launcher at its config of the largest blocks (fewest programs: the interpreter runs each
program's tiles as numpy arrays, so a program costs about the same whatever its block), in every
dtype Liger tests, bf16 included: the interpreter rounds float32 to bf16 toward zero where a GPU
rounds to nearest, so its bf16 values may be one unit further from torch's. Liger's tolerances are
made for its sizes: at the small ones a gradient no longer shrinks under Liger's atol, and torch's
own bf16 answer may be further from the exact one than the tolerance; there a value also passes
that is no further from the float64 answer than torch's (:func:`check`, noted). On a GPU, Liger's
own sizes and Liger's tolerances alone::

    python -m pytest -n 2 tests/test_liger_replay.py                                  # interpreter
    TILEGEN_TEST_GPU=1 python -m pytest -n 0 tests/test_liger_replay.py              # GPU, full sizes
    python tests/liger_summary.py                                         # counts per op and reason

``TILEGEN_LIGER_SHAPES=full`` (or ``small``) picks the sizes whatever the device.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import force_config
from tests.liger_cases import BF16, GRIDS, Case, all_cases, representative, shrunk_properly
from tilegen.nn import kernel, module
from tilegen.nn import linear_cross_entropy as lce
from tilegen.nn.cross_entropy import CrossEntropyOutput
from tilegen.nn.cross_entropy import cross_entropy as nn_cross_entropy

ROOT = Path(__file__).resolve().parent.parent
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
FULL = os.environ.get("TILEGEN_LIGER_SHAPES", "small" if INTERPRET else "full") == "full"
DEVICE = "cpu" if INTERPRET else "cuda"

if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("TILEGEN_TEST_GPU=1 needs CUDA", allow_module_level=True)

class Missing(Exception):
    """An adapter's refusal: the case needs these options (``"op: option"``), which tilegen's op lacks."""

    def __init__(self, options: list[str]):
        super().__init__("; ".join(options))
        self.options = options


#: What the adapters ran without (value-neutral options), for the case's ``liger_notes``.
NOTES: list[str] = []

#: ``TILEGEN_LIGER_STRICT=1``: an option Liger's test checks no value of (``in_place``, a casting
#: mode within tolerance) is missing too, its case skipped.
STRICT = os.environ.get("TILEGEN_LIGER_STRICT") == "1"


def _note(text: str) -> None:
    if text not in NOTES:
        NOTES.append(text)


def _without(need: list[str], text: str) -> None:
    """An option the adapter runs without, tilegen lacking it, where no value Liger's test checks
    depends on it: noted, or, under :data:`STRICT`, missing."""
    if STRICT:
        need.append(text)
    else:
        _note(f"ran without {text}")


# --- what tilegen's launchers take ----------------------------------------------------------------

def _takes(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` has a parameter ``name``."""
    return name in inspect.signature(function).parameters


def _optional(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function``'s parameter ``name`` may be left out (None: an optional input)."""
    parameter = inspect.signature(function).parameters.get(name)
    return parameter is not None and parameter.default is None


_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}


@functools.cache
def _spec_dtypes(name: str, tensor: str) -> frozenset[torch.dtype]:
    """The dtypes input ``tensor`` of specs/<name>.tile may have (its dtype variable's options)."""
    from tilegen.check import check
    from tilegen.parser import parse

    path = ROOT / "specs" / f"{name}.tile"
    spec = check(parse(path.read_text(encoding="utf-8"), f"specs/{path.name}"))
    declared = next(t.dtype.id for t in spec.tensors if t.name.id == tensor)
    options = next((tuple(o.id for o in v.options) for v in spec.dtype_vars if v.name.id == declared), (declared,))
    return frozenset(_TORCH_DTYPES[o] for o in options if o in _TORCH_DTYPES)


def _need_dtype(need: list[str], op: str, name: str, tensor: str, dtype: torch.dtype) -> None:
    if dtype not in _spec_dtypes(name, tensor):
        need.append(f"{op}: {str(dtype).removeprefix('torch.')} {tensor}")


def _refuse(need: list[str]) -> None:
    if need:
        raise Missing(need)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as [rows, last dimension] (a view where the strides allow)."""
    return x.reshape(-1, x.shape[-1])


# --- adapters: a Liger op's options on tilegen's op -------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float, offset: float = 0.0,
             casting_mode: str = "llama", in_place: bool = False) -> torch.Tensor:
    """LigerRMSNorm / liger_rms_norm: tilegen's rms_norm over the last dimension."""
    launcher = kernel("rms_norm")
    need: list[str] = []
    if weight is None and not _optional(launcher, "weight"):
        need.append("rms_norm: no weight (elementwise_affine=False)")
    _need_dtype(need, "rms_norm", "rms_norm", "x", x.dtype)
    if casting_mode != "gemma" and x.dtype != torch.float32:  # in float32 every mode is the same arithmetic
        _without(need, f"rms_norm: casting_mode={casting_mode!r} (tilegen rounds x * rstd * weight once, "
                       "as 'gemma')")
    if in_place:
        _without(need, "rms_norm: in_place (dx written over dy; tilegen's backward makes a new dx)")
    _refuse(need)
    return launcher(_rows(x), weight, eps, offset).reshape(x.shape)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float,
                       offset: float = 0.0, casting_mode: str = "llama",
                       in_place: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """LigerFusedAddRMSNorm: tilegen's fused_add_rms_norm, (normalised sum, sum)."""
    launcher = kernel("fused_add_rms_norm")
    need: list[str] = []
    offsets = {"offset": offset} if _takes(launcher, "offset") else {}
    if offset != 0.0 and not offsets:
        need.append("fused_add_rms_norm: offset (Gemma's 1 + weight)")
    _need_dtype(need, "fused_add_rms_norm", "fused_add_rms_norm", "x", x.dtype)
    if casting_mode != "llama" and x.dtype != torch.float32:
        _without(need, f"fused_add_rms_norm: casting_mode={casting_mode!r} (tilegen normalises in float32 and "
                       "rounds before the weight, as 'llama')")
    if in_place:
        _without(need, "fused_add_rms_norm: in_place (gradients written over the output's; tilegen's backward "
                       "makes new ones)")
    _refuse(need)
    y, total = launcher(_rows(x), _rows(residual), weight, eps, **offsets)
    return y.reshape(x.shape), total.reshape(x.shape)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, eps: float) -> torch.Tensor:
    """LigerLayerNorm / liger_layer_norm: tilegen's layer_norm over the last dimension (its y)."""
    need: list[str] = []
    _need_dtype(need, "layer_norm", "layer_norm", "x", x.dtype)
    _refuse(need)
    y, _mean, _rstd = kernel("layer_norm")(_rows(x), weight, bias, eps)
    return y.reshape(x.shape)


_GATED = {"silu": "swiglu", "gelu_tanh": "geglu"}


def gated(activation: str, a: torch.Tensor, b: torch.Tensor, *, gate_multiplier: float = 1.0,
          down_multiplier: float = 1.0) -> torch.Tensor:
    """LigerSiLUMulFunction / LigerGELUMulFunction: act(a * gate_multiplier) * b * down_multiplier
    through tilegen's swiglu or geglu (a and b of the same shape, any strides)."""
    name = _GATED[activation]
    launcher = kernel(name)
    need: list[str] = []
    multipliers = {}
    for option, value in (("gate_multiplier", gate_multiplier), ("down_multiplier", down_multiplier)):
        if _takes(launcher, option):
            multipliers[option] = value
        elif value != 1.0 and not need:
            need.append(f"{name}: gate and down multipliers (Falcon H1's mlp_multipliers)")
    _need_dtype(need, name, name, "a", a.dtype)
    _refuse(need)
    return launcher(_rows(a), _rows(b), **multipliers).reshape(a.shape)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, weight: torch.Tensor | None = None,
                  ignore_index: int = -100, label_smoothing: float = 0.0, softcap: float | None = None,
                  lse_square_scale: float = 0.0, reduction: str = "mean", return_z_loss: bool = False,
                  return_token_accuracy: bool = False, return_predicted_tokens: bool = False) -> Any:
    """LigerCrossEntropyLoss: tilegen.nn.cross_entropy (the per-row kernel reduced as ``reduction``
    asks: the mean over the rows not ignored, torch's). Returns the loss, or a CrossEntropyOutput
    (loss, z_loss, token_accuracy, predicted_tokens) where a statistic is asked for."""
    need: list[str] = []
    _need_dtype(need, "cross_entropy", "cross_entropy", "logits", logits.dtype)
    _refuse(need)
    return nn_cross_entropy(logits, target, weight, ignore_index=ignore_index, label_smoothing=label_smoothing,
                            softcap=softcap or 0.0, lse_square_scale=lse_square_scale, reduction=reduction,
                            return_z_loss=return_z_loss, return_token_accuracy=return_token_accuracy,
                            return_predicted_tokens=return_predicted_tokens)


def fused_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None = None, *, ce_weight: torch.Tensor | None = None,
                               ignore_index: int = -100, lse_square_scale: float = 0.0,
                               label_smoothing: float = 0.0, reduction: str = "mean", softcap: float | None = None,
                               return_z_loss: bool = False, accum_dtype: torch.dtype | None = None,
                               return_token_accuracy: bool = False, return_predicted_tokens: bool = False,
                               use_token_scaling: bool = False) -> Any:
    """LigerFusedLinearCrossEntropyLoss: tilegen.nn.linear_cross_entropy; the loss, or a
    CrossEntropyOutput where a statistic is asked for."""
    function = lce.linear_cross_entropy
    need: list[str] = []
    extra: dict[str, Any] = {}
    if ce_weight is not None:
        if "ce_weight" in inspect.signature(function).parameters:
            extra["ce_weight"] = ce_weight
        else:
            need.append("fused_linear_cross_entropy: per-class weight (ce_weight)")
    if reduction not in typing.get_args(getattr(lce, "Reduction", typing.Literal["mean", "sum"])):
        need.append(f"fused_linear_cross_entropy: reduction={reduction!r}")
    if use_token_scaling:
        if _takes(function, "use_token_scaling"):
            extra["use_token_scaling"] = True
        else:
            need.append("fused_linear_cross_entropy: use_token_scaling")
    _refuse(need)
    return function(h, weight, target, bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
                    softcap=softcap or 0.0, lse_square_scale=lse_square_scale, reduction=reduction,
                    accum_dtype=accum_dtype, return_z_loss=return_z_loss, return_token_accuracy=return_token_accuracy,
                    return_predicted_tokens=return_predicted_tokens, **extra)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """liger_rotary_pos_emb: tilegen's rope, the tables ([S, D], [1, S, D] or [B, S, D]) broadcast
    to [B, S, D] (stride 0, no copy)."""
    batch, _, seq, dim = q.shape
    table = (batch, seq, dim)
    cos = cos.unsqueeze(0) if cos.dim() == 2 else cos
    sin = sin.unsqueeze(0) if sin.dim() == 2 else sin
    return kernel("rope")(q, k, cos.expand(table), sin.expand(table))


def kl_div(student: torch.Tensor, target: torch.Tensor, *, reduction: str, log_target: bool) -> torch.Tensor:
    """LigerKLDIVLoss: tilegen's kl_div_rows (the loss per row), reduced as ``reduction`` asks
    (batchmean: / rows, mean: / elements); ``reduction="none"``: tilegen's kl_div_elementwise (the
    loss of each element, the target in its own dtype, float32 cast to the dtype torch's loss has)."""
    need: list[str] = []
    if reduction == "none":
        _need_dtype(need, "kl_div", "kl_div_elementwise", "student", student.dtype)
        _need_dtype(need, "kl_div", "kl_div_elementwise", "teacher", target.dtype)
        _refuse(need)
        loss = kernel("kl_div_elementwise")(_rows(student), _rows(target), int(log_target))
        return loss.to(torch.promote_types(student.dtype, target.dtype)).reshape(student.shape)
    _need_dtype(need, "kl_div", "kl_div_rows", "student", student.dtype)
    _need_dtype(need, "kl_div", "kl_div_rows", "teacher", target.dtype)
    _refuse(need)
    rows = kernel("kl_div_rows")(_rows(student), _rows(target), int(log_target))
    total = rows.sum()
    if reduction == "batchmean":
        return total / rows.shape[0]
    if reduction == "mean":
        return total / student.numel()
    return total


def jsd(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor | None = None, *, beta: float,
        ignore_index: int = -100) -> torch.Tensor:
    """LigerJSD: tilegen's jsd (the loss per row), averaged over the rows, or over those whose label
    is not ``ignore_index`` (0 where none is)."""
    need: list[str] = []
    _need_dtype(need, "jsd", "jsd", "student", student.dtype)
    _refuse(need)
    rows = kernel("jsd")(_rows(student), _rows(teacher), beta)
    if labels is None:
        return rows.sum() / rows.shape[0]
    kept = labels != ignore_index
    return torch.where(kept, rows, 0.0).sum() / kept.sum().clamp(min=1)


def embedding(ids: torch.Tensor, weight: torch.Tensor, *, padding_idx: int | None) -> torch.Tensor:
    """LigerEmbedding: tilegen's embedding (padding_idx None: -1, none)."""
    launcher = kernel("embedding")
    if padding_idx is not None and not _takes(launcher, "padding_idx"):
        raise Missing(["embedding: padding_idx"])
    pad = {} if padding_idx is None else {"padding_idx": padding_idx}
    return launcher(ids.reshape(-1), weight, **pad).reshape(*ids.shape, weight.shape[1])


def softmax(x: torch.Tensor) -> torch.Tensor:
    """LigerSoftmax / liger_softmax: tilegen's softmax over the last dimension."""
    need: list[str] = []
    _need_dtype(need, "softmax", "softmax", "x", x.dtype)
    _refuse(need)
    return kernel("softmax")(_rows(x)).reshape(x.shape)


def group_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, *, eps: float) -> torch.Tensor:
    """LigerGroupNorm on [B, C, hidden]: tilegen's group_norm on [B, C, 1, hidden]."""
    need: list[str] = []
    _need_dtype(need, "group_norm", "group_norm", "x", x.dtype)
    _refuse(need)
    batch, channels, hidden = x.shape
    return kernel("group_norm")(x.reshape(batch, channels, 1, hidden), weight, bias, groups, eps).reshape(x.shape)


# --- comparing ---------------------------------------------------------------------------------------

#: The note of a case whose tilegen value missed Liger's tolerance of torch's at the interpreter's
#: sizes but is no further from the float64 answer than torch's own (see :func:`check`).
AS_ACCURATE = "passed as close to float64's answer as torch's (Liger's tolerance misses at the small sizes)"


def close(what: str, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> None:
    """``actual`` (tilegen's) within ``atol + rtol * |expected|`` of torch's ``expected``, in float64;
    NaN and infinities exactly where torch has them."""
    assert actual is not None, f"{what}: tilegen gave no value (torch's is {expected})"
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)}, torch's {tuple(e.shape)}"
    good = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bool(good.all()):
        error = torch.where(good, 0.0, (a - e).abs().nan_to_num(nan=float("inf")))
        at = int(error.flatten().argmax())
        raise AssertionError(
            f"{what}: {int((~good).sum())} of {good.numel()} elements differ from torch's beyond atol {atol:g} + rtol "
            f"{rtol:g}; the worst at flat index {at}: tilegen {a.flatten()[at].item():.6g}, torch "
            f"{e.flatten()[at].item():.6g}")


def check(what: str, actual: torch.Tensor, expected: torch.Tensor, case: Case,
          exact: Callable[[], torch.Tensor] | None = None) -> None:
    """:func:`close` at the case's tolerances. At the interpreter's sizes, where Liger's tolerance,
    made for its own sizes, misses (its atol no longer covers gradients that grow as rows and classes
    shrink; torch's own bf16 answer may be far from the exact one), a value also passes that is no
    further from the float64 answer (``exact()``: torch's computation on the same inputs in
    float64) than torch's is, plus one unit of the value's dtype at the answer's largest magnitude
    (the interpreter rounds bf16 toward zero); the case is noted (:data:`AS_ACCURATE`)."""
    try:
        close(what, actual, expected, case.atol, case.rtol)
    except AssertionError as failure:
        if FULL or exact is None:
            raise
        truth = exact().detach().double().cpu()
        ours = (actual.detach().double().cpu() - truth).abs().max().item()
        theirs = (expected.detach().double().cpu() - truth).abs().max().item()
        slack = torch.finfo(actual.dtype).eps * truth.abs().max().item()
        if not ours <= theirs + slack:
            raise AssertionError(f"{failure}; against float64: tilegen's largest error {ours:.3g}, torch's "
                                 f"{theirs:.3g}") from None
        _note(AS_ACCURATE)


class Side:
    """The dtypes the torch side computes in: the case's (Liger's reference), or, ``exact``, float64
    throughout (the float64 answer of :func:`check`)."""

    def __init__(self, exact: bool):
        self.exact = exact

    def f32(self, t: torch.Tensor) -> torch.Tensor:
        """Liger's ``.float()``: float32, or float64 for the exact answer."""
        return t.double() if self.exact else t.float()

    def cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Liger's ``.to(dtype)``, or float64 for the exact answer."""
        return t.double() if self.exact else t.to(dtype)


Values = dict[str, Any]
Outputs = dict[str, torch.Tensor]


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _backward(outputs: Outputs, grads: dict[str, torch.Tensor | None]) -> None:
    """Backward of the outputs named in ``grads`` that require grad (a None grad: of a scalar)."""
    names = [n for n in grads if outputs[n].requires_grad]
    if names:
        torch.autograd.backward([outputs[n] for n in names], [grads[n] for n in names])


def replay(case: Case, leaves: Values, trained: list[str], tilegen_side: Callable[[Values], Outputs],
           torch_side: Callable[[Values, Side], Outputs],
           grads: Callable[[Outputs], dict[str, torch.Tensor | None]] | None,
           context: Callable[[], Any] = contextlib.nullcontext, exact: bool = True) -> Outputs:
    """One case: tilegen's outputs and torch's from copies of ``leaves`` (floating tensors copied per
    side; ``trained`` ones require grad), compared by name; then, unless ``grads`` is None (a forward
    under no_grad, whose outputs must not require grad), the backward of each side's outputs with
    ``grads(torch's outputs)`` and the gradients of ``trained`` compared (a torch gradient that does
    not exist is 0). ``context`` wraps each side's forward and backward (``torch.autocast``);
    ``exact``: whether :func:`check` may fall back on the float64 answer. Returns tilegen's outputs."""
    forward = grads is not None
    trained = [name for name in trained if leaves[name] is not None]

    def copies(dtype: torch.dtype | None = None) -> Values:
        return {k: (v.detach().to(dtype or v.dtype).clone().requires_grad_(forward and k in trained)
                    if _floating(v) else v) for k, v in leaves.items()}

    ours, theirs = copies(), copies()
    with torch.set_grad_enabled(forward), context():
        got = tilegen_side(ours)
        expected = torch_side(theirs, Side(False))
    given: dict[str, torch.Tensor | None] = grads(expected) if forward else {}  # type: ignore[misc]
    cache: dict[str, Any] = {}

    def truth() -> dict[str, Any]:
        if not cache:
            exacts = copies(torch.float64)
            with torch.set_grad_enabled(forward):
                cache["outputs"] = torch_side(exacts, Side(True))
                _backward(cache["outputs"], {k: None if g is None else g.double() for k, g in given.items()})
            cache["grads"] = {k: exacts[k].grad for k in trained}
        return cache

    def exact_output(name: str) -> Callable[[], torch.Tensor] | None:
        return (lambda: truth()["outputs"][name]) if exact else None

    def exact_grad(name: str) -> Callable[[], torch.Tensor] | None:
        return (lambda: _or_zeros(truth()["grads"][name], leaves[name])) if exact else None

    for name, value in got.items():
        check(name, value, expected[name], case, exact_output(name))
    if not forward:
        assert not any(v.requires_grad for v in got.values()), "a forward under no_grad made outputs requiring grad"
        return got
    with context():
        _backward(expected, given)
        _backward(got, {k: None if g is None else g.clone() for k, g in given.items()})
    for name in trained:
        check(f"d{name}", ours[name].grad, _or_zeros(theirs[name].grad, leaves[name]), case, exact_grad(name))
    return got


def _or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad


def _randn_grads(outputs: Outputs) -> dict[str, torch.Tensor | None]:
    """A random gradient of each output (Liger's ``torch.randn_like``)."""
    return {name: torch.randn_like(value) for name, value in outputs.items()}


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _ignore_some(target: torch.Tensor, ignore_index: int) -> None:
    """Set a random number (1 to rows / 2) of random targets to ``ignore_index``, as Liger's tests do."""
    rows = target.shape[0]
    count = int(torch.randint(1, max(rows // 2, 2), (1,)).item())
    target[torch.randperm(rows)[:count].to(target.device)] = ignore_index


# --- rms_norm and fused_add_rms_norm ------------------------------------------------------------------

def _llama_rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float, side: Side) -> torch.Tensor:
    """Liger's LlamaRMSNorm (Hugging Face's): normalised in float32, cast, times the weight."""
    h = side.f32(x)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(x.dtype) if weight is None else weight * h.to(x.dtype)


def _gemma_rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float, side: Side) -> torch.Tensor:
    """Liger's GemmaRMSNorm: in float32, times (1 + weight), cast once."""
    h = side.f32(x)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h if weight is None else h * (1.0 + side.f32(weight))).type_as(x)


def _base_rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float, side: Side) -> torch.Tensor:
    """Liger's BaseRMSNorm: in the input's dtype throughout."""
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(x.dtype) if weight is None else weight * h.to(x.dtype)


_RMS = {"llama": _llama_rms, "gemma": _gemma_rms, "base": _base_rms}
EPS = 1e-6


def _norm_weight(case: Case, size: int) -> tuple[torch.Tensor, list[str]]:
    """The weight of Liger's module (ones, a parameter: trained) or of its functional test (randn)."""
    if case.weight == "ones":
        return torch.ones(size, device=DEVICE, dtype=case.dtype), ["weight"]
    return _randn(size, dtype=case.dtype), []


def run_rms_norm(case: Case, s: dict[str, int]) -> None:
    x = _randn(s["bs"], s["sl"], s["hd"], dtype=case.dtype)
    weight, trained = _norm_weight(case, s["hd"])
    replay(case, {"x": x, "weight": weight if case.elementwise_affine else None}, [*trained, "x"],
           lambda v: {"y": rms_norm(v["x"], v["weight"], eps=EPS, offset=case.offset, casting_mode=case.casting_mode,
                                    in_place=case.in_place)},
           lambda v, side: {"y": _RMS[case.reference](v["x"], v["weight"], EPS, side)},
           _randn_grads)


def run_fused_add_rms_norm(case: Case, s: dict[str, int]) -> None:
    shape = (s["bs"], s["sl"], s["hd"])
    x, residual = _randn(*shape, dtype=case.dtype), _randn(*shape, dtype=case.dtype)
    weight, trained = _norm_weight(case, s["hd"])

    def tilegen_side(v: Values) -> Outputs:
        y, total = fused_add_rms_norm(v["x"], v["residual"], v["weight"], eps=EPS, offset=case.offset,
                                      casting_mode=case.casting_mode, in_place=case.in_place)
        return {"y": y, "residual_out": total}

    def torch_side(v: Values, side: Side) -> Outputs:
        total = v["x"] + v["residual"]  # Liger's *AddRMSNorm modules: the sum is the next residual
        return {"y": _RMS[case.reference](total, v["weight"], EPS, side), "residual_out": total}

    replay(case, {"x": x, "residual": residual, "weight": weight}, [*trained, "x", "residual"], tilegen_side,
           torch_side, _randn_grads)


# --- layer_norm, group_norm, softmax, embedding ----------------------------------------------------------

def run_layer_norm(case: Case, s: dict[str, int]) -> None:
    hidden = s["H"]
    x = _randn(s["B"], s["T"], hidden, dtype=case.dtype)
    if case.params["params"] == "init":  # LigerLayerNorm's and nn.LayerNorm's: ones and zeros
        weight = torch.ones(hidden, device=DEVICE, dtype=case.dtype)
        bias = torch.zeros(hidden, device=DEVICE, dtype=case.dtype)
    else:
        weight, bias = _randn(hidden, dtype=case.dtype), _randn(hidden, dtype=case.dtype)
    replay(case, {"x": x, "weight": weight, "bias": bias}, ["x", "weight", "bias"],
           lambda v: {"y": layer_norm(v["x"], v["weight"], v["bias"], eps=EPS)},
           lambda v, side: {"y": F.layer_norm(v["x"], (hidden,), v["weight"], v["bias"], EPS)},
           _randn_grads)


def run_group_norm(case: Case, s: dict[str, int]) -> None:
    channels, groups = s["num_channels"], s["num_groups"]
    x = _randn(s["batch_size"], channels, s["hidden_size"], dtype=case.dtype)
    # LigerGroupNorm's parameters (ones, zeros), copied into nn.GroupNorm
    weight = torch.ones(channels, device=DEVICE, dtype=case.dtype)
    bias = torch.zeros(channels, device=DEVICE, dtype=case.dtype)
    replay(case, {"x": x, "weight": weight, "bias": bias}, ["x", "bias", "weight"],
           lambda v: {"y": group_norm(v["x"], v["weight"], v["bias"], groups, eps=EPS)},
           lambda v, side: {"y": F.group_norm(v["x"], groups, v["weight"], v["bias"], EPS)},
           _randn_grads)


def run_softmax(case: Case, s: dict[str, int]) -> None:
    replay(case, {"x": _randn(*s.values(), dtype=case.dtype)}, ["x"],
           lambda v: {"y": softmax(v["x"])}, lambda v, side: {"y": torch.softmax(v["x"], dim=-1)}, _randn_grads)


def run_embedding(case: Case, s: dict[str, int]) -> None:
    count, dim, pad = s["num_embeddings"], s["embedding_dim"], case.padding_idx
    # nn.Embedding's weight (its padding row 0), which Liger copies into LigerEmbedding
    weight = torch.nn.Embedding(count, dim, padding_idx=pad).weight.detach().to(case.dtype).to(DEVICE)
    rows, cols = case.tokens.sizes(FULL).values()
    tokens = rows * cols
    ids = torch.randint(0, count, (tokens,), device=DEVICE)
    if pad is not None:
        ids[torch.randint(0, tokens, (tokens // 10,), device=DEVICE)] = pad
    replay(case, {"weight": weight}, ["weight"],
           lambda v: {"y": embedding(ids, v["weight"], padding_idx=pad).view(rows, cols, -1)},
           lambda v, side: {"y": F.embedding(ids, v["weight"], padding_idx=pad).view(rows, cols, -1)},
           _randn_grads)


# --- swiglu and geglu --------------------------------------------------------------------------------

_ACTIVATIONS = {"silu": F.silu, "gelu_tanh": lambda a: F.gelu(a, approximate="tanh")}


def _torch_gated(activation: str, a: torch.Tensor, b: torch.Tensor, gate: float = 1.0,
                 down: float = 1.0) -> torch.Tensor:
    """Liger's reference: act(a * gate) * b * down (the multipliers left out where 1, as Liger's
    module references have none)."""
    act = _ACTIVATIONS[activation]
    y = act(a * gate if gate != 1.0 else a) * b
    return y * down if down != 1.0 else y


def run_gated(case: Case, s: dict[str, int]) -> None:
    shape = tuple(s.values())
    gate, down = case.gate_multiplier, case.down_multiplier
    replay(case, {"a": _randn(*shape, dtype=case.dtype), "b": _randn(*shape, dtype=case.dtype)}, ["a", "b"],
           lambda v: {"y": gated(case.activation, v["a"], v["b"], gate_multiplier=gate, down_multiplier=down)},
           lambda v, side: {"y": _torch_gated(case.activation, v["a"], v["b"], gate, down)},
           _randn_grads)


def run_gated_mlp(case: Case, s: dict[str, int]) -> None:
    """LlamaMLP, Phi3MLP and Falcon H1's MLP: torch's projections around the gated activation, the
    weights as the tests set them (G, U: [hidden, inter], D: [inter, hidden], the modules' weights
    their transposes)."""
    hidden, inter = s["hidden_size"], s["intermediate_size"]
    gate, down = case.params.get("gate_multiplier", 1.0), case.params.get("down_multiplier", 1.0)
    leaves = {"x": _randn(s["bsz"], s["seq_len"], hidden, dtype=case.dtype)}
    if case.layout == "phi3":
        leaves |= {"gate_up": _randn(hidden, 2 * inter, dtype=case.dtype).T, "down": _randn(inter, hidden,
                                                                                          dtype=case.dtype).T}
    else:
        leaves |= {"gate": _randn(hidden, inter, dtype=case.dtype).T, "up": _randn(hidden, inter, dtype=case.dtype).T,
                   "down": _randn(inter, hidden, dtype=case.dtype).T}

    def mlp(v: Values, act: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Outputs:
        if case.layout == "phi3":
            a, b = F.linear(v["x"], v["gate_up"]).chunk(2, dim=-1)
            return {"y": F.linear(act(a, b), v["down"])}
        return {"y": F.linear(act(F.linear(v["x"], v["gate"]), F.linear(v["x"], v["up"])), v["down"])}

    weights = [name for name in leaves if name != "x"]
    replay(case, leaves, [*weights, "x"],
           lambda v: mlp(v, lambda a, b: gated(case.activation, a, b, gate_multiplier=gate, down_multiplier=down)),
           lambda v, side: mlp(v, lambda a, b: _torch_gated(case.activation, a, b, gate, down)),
           _randn_grads)


def run_mixtral_experts(case: Case, s: dict[str, int]) -> None:
    """Hugging Face's MixtralExperts (transformers 5): each token through its top-2 experts,
    act(gate) * up of the expert's gate_up projection, down-projected, weighted by the router."""
    hidden, inter, top = s["hidden_size"], s["intermediate_size"], case.top_k
    experts = case.experts.sizes(FULL)["experts"]
    tokens = s["bsz"] * s["seq_len"]
    leaves = {"x": _randn(tokens, hidden, dtype=case.dtype), "gate_up_proj": _randn(experts, 2 * inter, hidden,
                                                                                   dtype=case.dtype),
              "down_proj": _randn(experts, hidden, inter, dtype=case.dtype)}
    router = _randn(tokens, experts, dtype=case.dtype).softmax(dim=-1)
    top_weights, top_index = router.topk(k=top, dim=-1)
    leaves["top_weights"] = top_weights / (top_weights.sum(dim=-1, keepdim=True) + 1e-9)
    mask = F.one_hot(top_index, num_classes=experts).permute(2, 1, 0)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist()

    def moe(v: Values, act: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Outputs:
        out = torch.zeros_like(v["x"])
        for expert in hit:
            position, token = torch.where(mask[expert])
            a, b = F.linear(v["x"][token], v["gate_up_proj"][expert]).chunk(2, dim=-1)
            h = F.linear(act(a, b), v["down_proj"][expert]) * v["top_weights"][token, position, None]
            out.index_add_(0, token, h.to(out.dtype))
        return {"y": out}

    replay(case, leaves, ["gate_up_proj", "down_proj", "x"], lambda v: moe(v, lambda a, b: gated("silu", a, b)),
           lambda v, side: moe(v, lambda a, b: F.silu(a) * b), _randn_grads)


# --- cross_entropy -----------------------------------------------------------------------------------

def _ce_with_z_loss(logits: torch.Tensor, target: torch.Tensor, side: Side, *, weight: torch.Tensor | None,
                    lse_square_scale: float, reduction: str, ignore_index: int, label_smoothing: float,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's CrossEntropyWithZLoss: torch's cross-entropy of the float32 logits plus
    lse_square_scale * logsumexp^2 over the rows not ignored, reduced alike; (total, z_loss)."""
    logits = side.f32(logits)
    kept = target != ignore_index
    ce = F.cross_entropy(logits, target, weight=weight, reduction=reduction, label_smoothing=label_smoothing,
                         ignore_index=ignore_index)
    lse = torch.logsumexp(logits, dim=-1)
    z = torch.where(kept, lse_square_scale * lse**2, 0.0)
    if reduction == "mean":
        z = z.sum() / kept.sum()
    elif reduction == "sum":
        z = z.sum()
    ce, z = side.cast(ce, dtype), side.cast(z, dtype)
    return ce + z, z


def _loss_grads(case: Case) -> Callable[[Outputs], dict[str, torch.Tensor | None]] | None:
    """The gradient of Liger's helper's backward: of ones ("ones"), none (backward() of a scalar:
    "plain"), 3 times a random one (the loss times 3, backward of rand_like: "times3"), a random one
    ("randn"); None: a forward only ("none")."""
    if case.grad == "none":
        return None
    make = {"ones": torch.ones_like, "plain": lambda t: None, "times3": lambda t: 3 * torch.rand_like(t),
            "randn": torch.randn_like}[case.grad]
    return lambda outputs: {"loss": make(outputs["loss"])}


def run_cross_entropy(case: Case, s: dict[str, int]) -> None:
    rows, vocab = s["B"] * s["T"], s["V"]
    weight = None
    if case.weight == "rand":
        weight = torch.rand(vocab, device=DEVICE, dtype=case.dtype)
    elif case.weight == "rand_f32":
        weight = torch.rand(vocab, device=DEVICE, dtype=torch.float32)
    x = _randn(rows, vocab, dtype=case.dtype) * case.scalar
    target = torch.randint(0, vocab, (rows,), device=DEVICE, dtype=torch.long)
    if case.ignored:
        _ignore_some(target, case.ignore_index)
    options = {"ignore_index": case.ignore_index, "label_smoothing": case.label_smoothing, "reduction": case.reduction}

    def tilegen_side(v: Values) -> Outputs:
        got = cross_entropy(v["logits"], target, weight=v["weight"], softcap=case.softcap,
                            lse_square_scale=case.lse_square_scale, return_z_loss=case.return_z_loss, **options)
        return {"loss": got[0], "z_loss": got[1]} if case.return_z_loss else {"loss": got}

    def torch_side(v: Values, side: Side) -> Outputs:
        x, cap = v["logits"], case.softcap
        if case.reference == "ce":
            return {"loss": F.cross_entropy(x, target, weight=v["weight"], **options)}
        if case.reference == "ce_no_ignore":  # test_correctness_with_forward_only: torch's loss ignores nothing
            return {"loss": F.cross_entropy(x, target, reduction=case.reduction)}
        if case.reference == "softcap":
            return {"loss": side.cast(F.cross_entropy(cap * torch.tanh(side.f32(x) / cap), target, **options),
                                      case.dtype)}
        # "z_loss": CrossEntropyWithZLoss, on the soft-capped logits where a softcap is given, cast back
        logits = x if cap is None else cap * torch.tanh(side.f32(x) / cap)
        total, z = _ce_with_z_loss(logits, target, side, weight=v["weight"], lse_square_scale=case.lse_square_scale,
                                   dtype=torch.float32 if case.params.get("z_loss_in_f32") else case.dtype, **options)
        return {"loss": side.cast(total, case.dtype), **({"z_loss": z} if case.return_z_loss else {})}

    replay(case, {"logits": x, "weight": weight}, ["logits"], tilegen_side, torch_side, _loss_grads(case))


def run_ce_float32_internal(case: Case, s: dict[str, int]) -> None:
    """The loss of bf16 logits is the loss of their float32 values (read into float32, not computed
    in bf16), and their gradients round the float32 ones once to bf16 (within one bf16 ulp: the
    interpreter rounds toward zero)."""
    rows, vocab = s["B"], s["V"]
    x = _randn(rows, vocab, dtype=BF16)
    target = torch.randint(0, vocab, (rows,), device=DEVICE)
    x16, x32 = x.clone().requires_grad_(True), x.float().requires_grad_(True)
    loss16, loss32 = cross_entropy(x16, target), cross_entropy(x32, target)
    close("loss", loss16, loss32, 0.0, 1e-6)
    loss16.backward()
    loss32.backward()
    close("dlogits", x16.grad, x32.grad.to(BF16), 1e-30, 2.0**-7)


def run_ce_out_of_bounds(case: Case, s: dict[str, int]) -> None:
    rows, vocab = s["B"] * s["T"], s["V"]
    x = _randn(rows, vocab, dtype=BF16)
    target = torch.randint(0, vocab, (rows,), device=DEVICE, dtype=torch.long)
    _ignore_some(target, case.ignore_index)
    count = int(torch.randint(1, max(rows // 2, 2), (1,)).item())
    target[torch.randperm(rows)[:count].to(DEVICE)] = torch.randint(vocab, 2 * vocab, (count,)).to(DEVICE)
    # Liger raises (a host sync it makes anyway); tilegen's loss is NaN there, its gradients too, and
    # with TILEGEN_CHECK_INDICES=1 it raises IndexError as torch's CPU cross-entropy does
    logits = x.clone().requires_grad_(True)
    loss = cross_entropy(logits, target, ignore_index=case.ignore_index)
    loss.backward()
    assert torch.isnan(loss) and logits.grad is not None
    outside = (target != case.ignore_index) & (target >= vocab)
    assert torch.isnan(logits.grad[outside].float()).all() and not torch.isnan(logits.grad[~outside].float()).any()
    with mock.patch.dict(os.environ, {"TILEGEN_CHECK_INDICES": "1"}), pytest.raises(IndexError, match="out of bounds"):
        cross_entropy(x, target, ignore_index=case.ignore_index)


def run_ce_structured(case: Case, s: dict[str, int]) -> None:
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.7, -0.2, 0.9]], device=DEVICE)
    targets = torch.tensor([0, 1, 2], device=DEVICE)
    x1, x2 = (logits.clone().requires_grad_(True) for _ in range(2))
    flags = (case.return_z_loss, case.return_token_accuracy, case.return_predicted_tokens)
    result = cross_entropy(x2, targets, reduction="mean", return_z_loss=flags[0], return_token_accuracy=flags[1],
                           return_predicted_tokens=flags[2])
    expected = F.cross_entropy(x1, targets)
    _check_structured(result, flags, logits, targets)
    got = result.loss if isinstance(result, CrossEntropyOutput) else result
    assert got.shape == ()
    close("loss", got, expected, 1e-6, 0.0)
    got.backward()
    expected.backward()
    close("dlogits", x2.grad, x1.grad, 1e-6, 0.0)


def _check_structured(result: Any, flags: tuple[bool, ...], logits: torch.Tensor, targets: torch.Tensor) -> None:
    """Liger's structured-output checks: the loss alone without a statistic asked for; else a
    CrossEntropyOutput holding just those asked for, the accuracy and predicted tokens those of
    torch.argmax, and the two consistent."""
    if not any(flags):
        assert isinstance(result, torch.Tensor)
        return
    assert isinstance(result, CrossEntropyOutput)
    predictions = logits.detach().argmax(dim=-1)
    for asked, value in zip(flags, (result.z_loss, result.token_accuracy, result.predicted_tokens), strict=True):
        assert (value is not None) == asked
    if result.token_accuracy is not None:
        close("token_accuracy", result.token_accuracy, (predictions == targets).float().mean(), 1e-6, 0.0)
    if result.predicted_tokens is not None:
        assert result.predicted_tokens.dtype == torch.int64 and torch.equal(result.predicted_tokens, predictions)
        if result.token_accuracy is not None:
            close("token_accuracy", result.token_accuracy, (result.predicted_tokens == targets).float().mean(),
                  1e-6, 0.0)


def run_ce_predicted_tokens(case: Case, s: dict[str, int]) -> None:
    """Each row's argmax of the float32 logits where not ignored, -1 where ignored; backward runs."""
    rows, vocab = s["B"] * s["T"], s["V"]
    x = _randn(rows, vocab, dtype=case.dtype)
    target = torch.randint(0, vocab, (rows,), device=DEVICE)
    target[torch.randperm(rows)[: rows // 4].to(DEVICE)] = case.ignore_index
    expected = x.float().argmax(dim=-1)
    x.requires_grad_(True)
    result = cross_entropy(x, target, ignore_index=case.ignore_index, return_predicted_tokens=True)
    assert isinstance(result, CrossEntropyOutput) and result.predicted_tokens is not None
    assert result.predicted_tokens.shape == (rows,) and result.predicted_tokens.dtype == torch.int64
    kept = target != case.ignore_index
    assert torch.equal(result.predicted_tokens[kept], expected[kept])
    assert (result.predicted_tokens[~kept] == -1).all()
    result.loss.backward()
    assert x.grad is not None


def run_ce_confident(case: Case, s: dict[str, int]) -> None:
    """The true class's gradient of confident rows (their logit 10 above the rest) from low-precision
    logits: no further from float32's (on the same logits) than 4 times torch's own low-precision
    backward's distance."""
    rows, vocab = s["B"] * s["T"], s["V"]
    logits = _randn(rows, vocab)
    target = torch.randint(0, vocab, (rows,), device=DEVICE)
    index = torch.arange(rows, device=DEVICE)
    logits[index, target] = logits.max(dim=-1).values + 10.0
    low = logits.to(case.dtype)
    x_torch, x_tilegen = (low.clone().requires_grad_(True) for _ in range(2))
    x_f32 = low.detach().float().requires_grad_(True)
    options = {"reduction": case.reduction, "label_smoothing": case.label_smoothing}
    cross_entropy(x_tilegen, target, **options).backward()
    F.cross_entropy(x_torch, target, **options).backward()
    F.cross_entropy(x_f32, target, **options).backward()
    exact = x_f32.grad[index, target].double()
    torch_error = (x_torch.grad[index, target].double() - exact).abs().max().item()
    tilegen_error = (x_tilegen.grad[index, target].double() - exact).abs().max().item()
    assert tilegen_error <= max(4 * torch_error, torch.finfo(case.dtype).tiny), (
        f"the true class's gradient is {tilegen_error:.3e} from float32's, torch's {torch_error:.3e}")


# --- fused_linear_cross_entropy ------------------------------------------------------------------------

def run_flce(case: Case, s: dict[str, int]) -> None:
    """TorchLMHeadCE (Linear, its logits in float32, soft-capped, CrossEntropyWithZLoss) against
    tilegen.nn.linear_cross_entropy. ``init``: "rand" (a module's weight and bias, trained: torch.rand),
    "randn" (the functional tests': randn, no gradient), "randn_tenth" (randn / 10, trained)."""
    rows, hidden, vocab = s["B"] * s["T"], s["H"], s["V"]
    dtype, init = case.dtype, case.params.get("init", "rand")
    ce_weight = None
    if case.has_ce_weight:
        ce_weight = _randn(vocab) if init == "randn" else torch.rand(vocab, device=DEVICE)

    def draw(*shape: int) -> torch.Tensor:
        if init == "rand":
            return torch.rand(*shape, device=DEVICE, dtype=dtype)
        return _randn(*shape, dtype=dtype) * (0.1 if init == "randn_tenth" else 1.0)

    weight = draw(vocab, hidden)
    bias = draw(vocab) if case.bias else None
    x = _randn(rows, hidden, dtype=dtype) * case.scalar
    target = torch.randint(0, vocab, (rows,), device=DEVICE, dtype=torch.long)
    if case.ignored:
        _ignore_some(target, case.ignore_index)
    options = {"ignore_index": case.ignore_index, "lse_square_scale": case.lse_square_scale,
               "label_smoothing": case.label_smoothing, "reduction": case.reduction}

    def tilegen_side(v: Values) -> Outputs:
        got = fused_linear_cross_entropy(
            v["h"], v["weight"], target, v["bias"], ce_weight=v["ce_weight"], softcap=case.softcap,
            return_z_loss=case.return_z_loss, accum_dtype=case.accum_dtype,
            return_token_accuracy=case.return_token_accuracy, return_predicted_tokens=case.return_predicted_tokens,
            use_token_scaling=case.use_token_scaling, **options)
        return {"loss": got.loss if isinstance(got, CrossEntropyOutput) else got}

    def torch_side(v: Values, side: Side) -> Outputs:
        logits = side.f32(F.linear(v["h"], v["weight"], v["bias"]))
        if case.softcap:
            logits = case.softcap * torch.tanh(logits / case.softcap)
        if case.use_token_scaling:
            return {"loss": _token_scaled_ce(logits, target, weight=v["ce_weight"], **options)}
        total, _z = _ce_with_z_loss(logits, target, side, weight=v["ce_weight"], dtype=torch.float32, **options)
        return {"loss": total}

    if case.grad == "per_token":  # a gradient per row of the per-row loss: rand + 0.5
        grads = lambda outputs: {"loss": torch.rand(rows, device=DEVICE, dtype=dtype) + 0.5}  # noqa: E731
    else:
        grads = _loss_grads(case)
    autocast = contextlib.nullcontext
    if case.autocast is not None:
        autocast = lambda: torch.autocast(device_type=DEVICE, dtype=case.autocast)  # noqa: E731
    trained = ["h", *(["weight", "bias"] if init != "randn" else [])]
    replay(case, {"h": x, "weight": weight, "bias": bias, "ce_weight": ce_weight}, trained, tilegen_side, torch_side,
           grads, context=autocast, exact=case.autocast is None)


def _token_scaled_ce(logits: torch.Tensor, target: torch.Tensor, *, weight: torch.Tensor | None,
                     lse_square_scale: float, reduction: str, ignore_index: int,
                     label_smoothing: float) -> torch.Tensor:
    """Liger's token scaling (its tests' manual answer, with the z-loss as Liger's kernel adds it):
    each row's cross-entropy plus z-loss times the softmax's probability of its target, detached,
    0 where ignored; reduced as torch's cross-entropy (the mean over the targets' weights, the
    z-loss's over the rows not ignored)."""
    kept = target != ignore_index
    safe = target.masked_fill(~kept, 0)
    probability = torch.where(kept, torch.softmax(logits.detach(), dim=-1).gather(1, safe[:, None])[:, 0], 0.0)
    ce = F.cross_entropy(logits, target, weight=weight, reduction="none", label_smoothing=label_smoothing,
                         ignore_index=ignore_index) * probability
    z = torch.where(kept, lse_square_scale * torch.logsumexp(logits, dim=-1) ** 2, 0.0) * probability
    if reduction == "none":
        return ce + z
    if reduction == "sum":
        return ce.sum() + z.sum()
    weights = kept.sum() if weight is None else (weight[safe] * kept).sum()
    return ce.sum() / weights + z.sum() / kept.sum()


def run_flce_structured(case: Case, s: dict[str, int]) -> None:
    h = torch.tensor([[0.2, -0.1], [1.0, 0.5], [-0.3, 0.7]], device=DEVICE)
    weight = torch.tensor([[0.5, -0.4], [-0.2, 0.3], [0.1, 0.6]], device=DEVICE)
    bias = torch.tensor([0.1, -0.2, 0.05], device=DEVICE)
    targets = torch.tensor([0, 1, 2], device=DEVICE)
    h1, h2 = (h.clone().requires_grad_(True) for _ in range(2))
    flags = (case.return_z_loss, case.return_token_accuracy, False)
    result = fused_linear_cross_entropy(h2, weight, targets, bias, return_z_loss=flags[0],
                                        return_token_accuracy=flags[1])
    expected = F.cross_entropy(h1 @ weight.t() + bias, targets)
    _check_structured(result, flags, h @ weight.t() + bias, targets)
    got = result.loss if isinstance(result, CrossEntropyOutput) else result
    assert got.shape == ()
    close("loss", got, expected, 1e-6, 0.0)
    got.backward()
    expected.backward()
    close("dh", h2.grad, h1.grad, 1e-6, 1e-5)


# --- rope ----------------------------------------------------------------------------------------------

def _llama_rotary(x: torch.Tensor, position_ids: torch.Tensor, dim: int,
                  base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's LlamaRotaryEmbedding (default rope, rope_theta 10000): cos and sin of
    [batch of position_ids, S, dim] in x's dtype, computed in float32."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(x.device, torch.float) / dim))
    expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (expanded @ position_ids[:, None, :].float()).transpose(1, 2)
    table = torch.cat((freqs, freqs), dim=-1)
    return table.cos().to(x.dtype), table.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def run_rope(case: Case, s: dict[str, int]) -> None:
    dtype = case.dtype
    if case.layout == "vision":
        batch, seq, heads, kv_heads, dim = 1, s["seq_len"], s["num_heads"], s["num_heads"], s["head_dim"]
    else:
        batch, seq, heads, kv_heads, dim = (s[k] for k in ("bsz", "seq_len", "num_q_heads", "num_kv_heads", "head_dim"))
    if dim % 2:
        pytest.skip(f"no torch reference: rope at an odd head_dim ({dim}); Hugging Face's rotary tables for it are "
                    f"{dim + 1} wide (Liger's test compares two Liger entry points)")
    if case.layout == "transposed":  # [B, S, H, D] transposed: not contiguous
        q = _randn(batch, seq, heads, dim).transpose(1, 2).to(dtype)
        k = _randn(batch, seq, kv_heads, dim).transpose(1, 2).to(dtype)
    elif case.layout == "contiguous":
        q, k = _randn(batch, heads, seq, dim, dtype=dtype), _randn(batch, kv_heads, seq, dim, dtype=dtype)
    else:
        q = _randn(seq, heads, dim).to(dtype).unsqueeze(0).transpose(1, 2).contiguous()
        k = _randn(seq, kv_heads, dim).to(dtype).unsqueeze(0).transpose(1, 2).contiguous()
    positions = torch.arange(seq, device=DEVICE, dtype=torch.long).unsqueeze(0)
    if case.expand_position_ids:
        positions = positions.expand(batch, -1)
    cos, sin = _llama_rotary(k, positions, dim)

    def tilegen_side(v: Values) -> Outputs:
        tables = (v["cos"][0], v["sin"][0]) if case.tables == "2d" else (v["cos"], v["sin"])
        q_out, k_out = rope(v["q"], v["k"], *tables)
        return {"q_out": q_out, "k_out": k_out}

    def torch_side(v: Values, side: Side) -> Outputs:  # Hugging Face's apply_rotary_pos_emb (unsqueeze_dim 1)
        c, n = v["cos"].unsqueeze(1), v["sin"].unsqueeze(1)
        return {"q_out": v["q"] * c + _rotate_half(v["q"]) * n, "k_out": v["k"] * c + _rotate_half(v["k"]) * n}

    def grads(outputs: Outputs) -> dict[str, torch.Tensor | None]:
        return {"q_out": torch.randn_like(outputs["q_out"]), "k_out": torch.randn_like(outputs["k_out"]).to(dtype)}

    replay(case, {"q": q, "k": k, "cos": cos, "sin": sin}, ["q", "k"], tilegen_side, torch_side, grads)


# --- kl_div and jsd ----------------------------------------------------------------------------------

def _scaled(factor: float | None) -> Callable[[Outputs], dict[str, torch.Tensor | None]]:
    """The gradient of backward() of a scalar loss (None), or of the loss times ``factor``."""
    return lambda outputs: {"loss": None if factor is None else torch.full_like(outputs["loss"], factor)}


def run_kl_div(case: Case, s: dict[str, int]) -> None:
    rows, vocab = s["B"] * s["T"], s["V"]
    x = _randn(rows, vocab, dtype=case.dtype).log_softmax(dim=-1)
    target = _randn(rows, vocab).softmax(dim=-1)  # float32, as the test draws it (log-probabilities or not)
    # Liger's test runs no backward of reduction="none"; the replay backs a random gradient through
    # the loss of each element (torch's gradient of it)
    grads = _randn_grads if case.reduction == "none" else _scaled(None if case.last_layer else 2.0)
    replay(case, {"x": x, "target": target}, ["x"],
           lambda v: {"loss": kl_div(v["x"], v["target"], reduction=case.reduction, log_target=case.log_target)},
           lambda v, side: {"loss": F.kl_div(v["x"], v["target"], reduction=case.reduction,
                                             log_target=case.log_target)},
           grads)


def _torch_jsd(log_q: torch.Tensor, log_p: torch.Tensor, labels: torch.Tensor | None, side: Side, *, beta: float,
               ignore_index: int, dtype: torch.dtype) -> torch.Tensor:
    """Liger's test's JSD module: KLDivLoss(log_target) sums, the mixture in float32 for 0 < beta < 1."""
    def kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.kl_div(a, b, reduction="none", log_target=True)

    if beta == 0.0:
        loss = kl(log_q, log_p).sum(dim=-1)
    elif beta == 1.0:
        loss = kl(log_p, log_q).sum(dim=-1)
    else:
        log_p, log_q = side.f32(log_p), side.f32(log_q)
        m = torch.lerp(torch.exp(log_q), torch.exp(log_p), beta)
        loss = beta * kl(torch.log(m), log_p).sum(dim=-1) + (1 - beta) * kl(torch.log(m), log_q).sum(dim=-1)
    if labels is None:
        return side.cast((loss / log_q.shape[0]).sum(), dtype)
    kept = labels != ignore_index
    count = int(kept.sum().item())
    if count == 0:
        return side.cast(torch.tensor(0.0, device=loss.device), dtype)
    return side.cast((torch.where(kept, loss, 0.0) / count).sum(), dtype)


def run_jsd(case: Case, s: dict[str, int]) -> None:
    rows, vocab = s["B"] * s["T"], s["V"]
    x = _randn(rows, vocab, dtype=case.dtype).log_softmax(dim=-1)
    target = _randn(rows, vocab, dtype=case.dtype).log_softmax(dim=-1)
    labels = None
    if case.labels == "all_ignored":
        labels = torch.full((rows,), case.ignore_index, device=DEVICE, dtype=torch.long)
    elif case.labels:
        labels = torch.randint(0, vocab, (rows,), device=DEVICE, dtype=torch.long)
        _ignore_some(labels, case.ignore_index)
    got = replay(case, {"x": x, "target": target}, ["x"],
                 lambda v: {"loss": jsd(v["x"], v["target"], labels, beta=case.beta, ignore_index=case.ignore_index)},
                 lambda v, side: {"loss": _torch_jsd(v["x"], v["target"], labels, side, beta=case.beta,
                                                     ignore_index=case.ignore_index, dtype=case.dtype)},
                 _scaled(None if case.last_layer else 2.0))
    if case.symmetry:  # at beta 0.5 the divergence is symmetric
        close("loss, student and teacher swapped", jsd(target, x, beta=case.beta), got["loss"], case.atol, case.rtol)
    if case.labels == "all_ignored":
        close("loss where every row is ignored", got["loss"], torch.zeros(()), case.atol, case.rtol)


RUNNERS: dict[str, Callable[[Case, dict[str, int]], None]] = {
    "rms_norm": run_rms_norm, "fused_add_rms_norm": run_fused_add_rms_norm, "layer_norm": run_layer_norm,
    "gated": run_gated, "gated_mlp": run_gated_mlp, "mixtral_experts": run_mixtral_experts,
    "cross_entropy": run_cross_entropy, "ce_float32_internal": run_ce_float32_internal,
    "ce_out_of_bounds": run_ce_out_of_bounds, "ce_structured": run_ce_structured,
    "ce_predicted_tokens": run_ce_predicted_tokens, "ce_confident": run_ce_confident, "flce": run_flce,
    "flce_structured": run_flce_structured, "rope": run_rope, "kl_div": run_kl_div, "jsd": run_jsd,
    "embedding": run_embedding, "softmax": run_softmax, "group_norm": run_group_norm,
}

# --- known bugs: strict xfails, each with its reproducer in the reason -----------------------------------

#: (predicate on a case, exception type, reason): tilegen's result is wrong or it fails where torch
#: does not. Strict: once fixed, the case passes and the mark must go. (None known now.)
KNOWN_BUGS: list[tuple[Callable[[Case], bool], type[BaseException], str]] = []


#: Cases where torch's rounding and Liger's differ beyond Liger's tolerance at Liger's sizes on the
#: GPU (the interpreter's small sizes stay inside it), and tilegen computes Liger's: strict xfails
#: there. geglu's bf16 MLP at (2, 2048, 2048, 4096) and (9, 41, 341, 4231): its weight gradients
#: (about 1e5) differ from torch's by two bf16 units in about 5% of elements, because da is rounded
#: to bf16 once from float32 (Liger's kernel, and tilegen's spec) where torch rounds dy * b first
#: and gelu's backward after; the same two formulas emulated in torch differ in 4.9% of them.
ROUNDING: list[tuple[Callable[[Case], bool], type[BaseException], str]] = [
    (lambda case: not INTERPRET and case.op == "geglu" and case.kind == "gated_mlp" and case.dtype == torch.bfloat16,
     AssertionError, "bf16 da rounded once (Liger's formula) where torch rounds twice: weight gradients of about "
     "1e5 two bf16 units apart in ~5% of elements, beyond atol = rtol = 1e-2"),
    # f16 cross-entropy summed over 2 x 4096 rows of 32000 classes: about 89,000, past f16's largest
    # number (65,504), so torch's f16 loss is inf, where tilegen's loss is float32 (documented so)
    (lambda case: not INTERPRET and case.id.startswith("cross_entropy-test_correctness_with_forward_only-2x4096x32000")
     and case.id.endswith("-sum-float16"),
     AssertionError, "the summed loss (~89,000) overflows torch's f16 loss to inf; tilegen's loss is float32"),
]


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, raises=error, reason=reason)
             for applies, error, reason in KNOWN_BUGS + ROUNDING if applies(case)]
    return pytest.param(case, id=case.id, marks=marks)


CASES = all_cases()
_PREFIXES = tuple({"fused_linear_cross_entropy": "cross_entropy"}.get(op, op) for op in GRIDS)
#: The generated modules the adapters launch (forwards and backwards).
GENERATED = sorted(p.stem for p in (ROOT / "generated").glob("*.py") if p.stem.startswith(_PREFIXES)
                   and not p.stem.startswith("rms_norm_channels"))


def _widest(configs: list[Any]) -> int:
    """The index of the config of the largest blocks (the product of its ``B*`` keywords), the first
    of equals."""
    def blocks(config: Any) -> int:
        return functools.reduce(lambda a, b: a * b, (v for k, v in config.kwargs.items()
                                                      if k.startswith("B") and isinstance(v, int)), 1)
    return max(range(len(configs)), key=lambda i: (blocks(configs[i]), -i))


@pytest.fixture
def fewest_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the interpreter, each tuned launcher of the replayed ops at its widest config."""
    if not INTERPRET:
        return
    for name in GENERATED:
        generated = module(name)
        if hasattr(generated, "_tuner"):
            force_config(monkeypatch, generated, _widest(generated._CONFIGS))


def run_case(case: Case, request: pytest.FixtureRequest) -> None:
    """One of Liger's cases through tilegen: torch's answer and tilegen's, forward and gradients, at
    Liger's tolerances; skipped naming each option tilegen's op lacks. The notes of what it ran
    without go to the test's ``liger_notes`` property."""
    NOTES.clear()
    torch.manual_seed(0)
    sizes = case.shape.sizes(FULL) if "shape" in case.params else {}
    try:
        RUNNERS[case.kind](case, sizes)
    except Missing as missing:
        pytest.skip(f"tilegen lacks: {missing}")
    finally:
        if NOTES:
            request.node.user_properties.append(("liger_notes", tuple(NOTES)))


#: The ops whose cases tests/test_liger_replay_losses.py replays (the rest run here): two files of
#: about equal time, so that pytest-xdist (``--dist loadfile``) runs the halves on two workers.
LOSSES = ("cross_entropy", "fused_linear_cross_entropy", "kl_div")


#: Under CI (``CI=true``) in the interpreter, the replay runs :func:`tests.liger_cases.representative`'s
#: subset of the cases (every value of every parameter of each Liger test at least once, about a fifth
#: of the cases); ``TILEGEN_LIGER_FULL=1`` runs every case there too.
SUBSET = (INTERPRET and os.environ.get("CI", "").lower() in ("true", "1")
          and os.environ.get("TILEGEN_LIGER_FULL") != "1")


def params(ops: Iterable[str]) -> list[Any]:
    """The cases of ``ops`` as pytest params (a known bug's case marked xfail): every case, or
    under :data:`SUBSET` the representative ones."""
    ops = set(ops)
    return [_param(case) for case in (representative(CASES) if SUBSET else CASES) if case.op in ops]


@pytest.mark.parametrize("case", params(op for op in GRIDS if op not in LOSSES))
def test_replay(case: Case, request: pytest.FixtureRequest, fewest_programs: None) -> None:
    """One of Liger's cases of the norms, activations, rope, jsd, embedding, softmax and group_norm."""
    run_case(case, request)


#: Liger's cases per op, as its pytest counts them (the product of each test's parametrize lists).
LIGER_COUNTS = {"rms_norm": 64, "fused_add_rms_norm": 40, "layer_norm": 16, "swiglu": 49, "geglu": 8,
                "cross_entropy": 185, "fused_linear_cross_entropy": 141, "rope": 69, "kl_div": 96, "jsd": 67,
                "embedding": 11, "softmax": 24, "group_norm": 5}


def test_the_grids_count_as_liger_does() -> None:
    """Every op's cases, by the product of its tests' lists, and each id once."""
    counts = {op: sum(len(grid.cases()) for grid in grids) for op, grids in GRIDS.items()}
    assert counts == LIGER_COUNTS
    assert len({case.id for case in CASES}) == len(CASES) == sum(LIGER_COUNTS.values())


def test_the_ci_subset_runs_every_value_of_every_test() -> None:
    """The representative subset (CI's): each Liger test with each value of each of its parameters,
    the same cases on every call, in the replay's order, far fewer than all."""
    subset = representative(CASES)
    assert subset == representative(list(CASES)) and len(subset) < len(CASES) / 3
    assert [case.id for case in subset] == [case.id for case in CASES if case in subset]
    for test in {case.test for case in CASES}:
        def values(cases: list[Case], test: str = test) -> set[tuple[str, str]]:
            return {(key, repr(value)) for case in cases if case.test == test for key, value in case.params.items()
                    if key not in ("atol", "rtol", "scalar")}
        assert values(subset) == values(CASES), test


def test_the_small_sizes_keep_each_sizes_character() -> None:
    """Each interpreter size is a scaled-down Liger size (:func:`tests.liger_cases.shrunk_properly`):
    rows of at most 5 per dimension, the rest at most 300, or 1100 for swiglu's wide-row test."""
    for case in CASES:
        for shape in [value for value in case.params.values() if hasattr(value, "small")]:
            for name, full, small in zip(shape.names, shape.full, shape.small, strict=True):
                rows = name in ("bs", "sl", "B", "T", "bsz", "seq_len", "batch_size", "rows", "cols", "d0", "d1")
                cap = 5 if rows else 1100 if "blackwell" in case.test else 300
                assert shrunk_properly(full, small, cap), f"{case.id}: {name} {full} -> {small}"


def test_an_adapter_names_the_option_it_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter refuses before launching, naming the option its op lacks (here a fused linear
    cross-entropy without token scaling), whatever other options the call also passes."""
    def without_token_scaling(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: Any = None,
                              **options: Any) -> torch.Tensor:
        raise AssertionError("launched")

    monkeypatch.setattr(lce, "linear_cross_entropy", without_token_scaling)
    h, w = torch.zeros(2, 3), torch.zeros(4, 3)
    with pytest.raises(Missing) as refused:
        fused_linear_cross_entropy(h, w, torch.zeros(2, dtype=torch.long), reduction="none", use_token_scaling=True,
                                   return_z_loss=True)
    assert refused.value.options == ["fused_linear_cross_entropy: use_token_scaling"]

