"""Liger-Kernel's correctness tests as data: the parameterizations of each test of
``test/transformers/test_<op>.py`` in Liger-Kernel (forward and backward against a torch
reference), for :mod:`tests.test_liger_replay`, which replays each case through tilegen's ops.

Each :class:`Grid` is one Liger test function: its ``@pytest.mark.parametrize`` lists (``axes``,
each a list of dicts, one per parameter set of that decorator) and the values its body fixes
(``fixed``). Its cases are the product of the lists, as Liger's pytest counts them (minus Liger's
own skips, said where a grid leaves some out). ``kind`` names the replay function of
:mod:`tests.test_liger_replay` that runs the grid's cases.

Shapes are :func:`shape` pairs: Liger's own sizes (run on a GPU, ``TILEGEN_TEST_GPU=1``) and
smaller ones for Triton's CPU interpreter, each dimension scaled down under a cap of a few hundred
(rows of at most 15) keeping its character: an odd size stays odd, a power of two stays one and a
size that is not one stays not one (a tail past every block), a group count still divides its
channels. :func:`shrunk_properly` states the rule and the test of this module checks it.

Not replayed: Liger's tests of its DTensor support across 4 or 8 GPUs
(``test_rms_norm.py::test_dtensor_rms_norm``, 8 cases; ``test_swiglu.py::
test_dtensor_liger_silumul``, 4 cases), which compare a sharded call with an unsharded one of the
same Liger op; the Gemma 4 MLP tests of ``test_geglu.py`` (6 unparameterized tests of a module's
sizes and construction); and ``test_swiglu.py::test_correctness_mixtralblocksparsetop2mlp``, the
twin for ``transformers`` before 5.0 of ``test_correctness_mixtralexperts`` (Liger runs one of
the two, by the installed version; the replay takes the current one).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


@dataclass(frozen=True)
class Shape:
    """A case's sizes: ``full`` (Liger's) and ``small`` (the interpreter's), named by ``names``."""

    names: tuple[str, ...]
    full: tuple[int, ...]
    small: tuple[int, ...]

    def sizes(self, full: bool) -> dict[str, int]:
        """The sizes by name, Liger's where ``full``, else the interpreter's."""
        return dict(zip(self.names, self.full if full else self.small, strict=True))

    def __str__(self) -> str:
        return "x".join(map(str, self.full))


def shape(names: str, full: tuple[int, ...], small: tuple[int, ...]) -> dict[str, Shape]:
    """One parameter set of sizes: ``shape("B T V", (2, 4096, 32000), (2, 4, 300))``."""
    return {"shape": Shape(tuple(names.split()), full, small)}


def shapes(names: str, *pairs: tuple[tuple[int, ...], tuple[int, ...]]) -> list[dict[str, Any]]:
    """A parametrize list of sizes, each pair (Liger's, the interpreter's)."""
    return [shape(names, full, small) for full, small in pairs]


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def shrunk_properly(full: int, small: int, cap: int = 300) -> bool:
    """The rule of the interpreter's sizes: a size at most ``cap`` becomes one no larger; a larger
    one becomes one at most ``cap`` of the same parity and, for a width (``cap`` over 5: rows have
    at most 5, where 2 and 4 are the only even sizes), a power of two exactly where the size is one.
    Liger's wide-row swiglu test keeps widths up to 1100."""
    if full <= cap:
        return small <= full
    pow2_kept = cap <= 5 or _pow2(small) == _pow2(full)
    return small <= cap and small % 2 == full % 2 and pow2_kept


@dataclass(frozen=True)
class Case:
    """One of Liger's parameterizations: the op, the Liger test (file::function), the replay
    function (``kind``) and the parameters (the grid's ``fixed`` values under this case's)."""

    op: str
    test: str
    kind: str
    params: Mapping[str, Any]
    id: str

    def __getattr__(self, name: str) -> Any:
        try:
            return self.params[name]
        except KeyError:
            raise AttributeError(name) from None


def _text(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _word(key: str, value: Any) -> str:
    """A parameter in a case's id: sizes, dtypes and words as they are, other values as key=value."""
    if key == "shape" or isinstance(value, (torch.dtype, str)):
        return _text(value)
    return f"{key}={_text(value)}"


#: Parameters left out of a case's id (tolerances, which follow from the dtype).
_QUIET = {"atol", "rtol", "scalar"}


@dataclass(frozen=True)
class Grid:
    """One Liger test function's parameterizations: the product of ``axes``, each with ``fixed``."""

    op: str
    test: str
    kind: str
    axes: tuple[list[dict[str, Any]], ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def cases(self) -> list[Case]:
        """Every combination, in the order of Liger's decorators (the first list varies slowest)."""
        out = []
        for combination in itertools.product(*self.axes) if self.axes else [()]:
            params = dict(self.fixed)
            for values in combination:
                params.update(values)
            words = [_word(k, v) for combo in combination for k, v in combo.items() if k not in _QUIET]
            name = self.test.split("::")[1]
            out.append(Case(self.op, self.test, self.kind, params, "-".join([self.op, name, *words])))
        return out


def _dtypes(*rows: tuple[torch.dtype, float, float]) -> list[dict[str, Any]]:
    """A parametrize list of (dtype, atol, rtol)."""
    return [{"dtype": d, "atol": a, "rtol": r} for d, a, r in rows]


def _each(name: str, *values: Any) -> list[dict[str, Any]]:
    """A parametrize list of one parameter."""
    return [{name: v} for v in values]


def _sets(names: str, *rows: tuple[Any, ...]) -> list[dict[str, Any]]:
    """A parametrize list of several parameters together."""
    keys = names.split()
    return [dict(zip(keys, row, strict=True)) for row in rows]


# --- rms_norm: test/transformers/test_rms_norm.py --------------------------------------------------
_RMS_REFS = _sets("reference offset casting_mode", ("llama", 0.0, "llama"), ("gemma", 1.0, "gemma"))
RMS_NORM = [
    # test_correctness: LigerRMSNorm (weight all ones) against the reference module, eps 1e-6
    Grid("rms_norm", "test_rms_norm.py::test_correctness", "rms_norm", (
        shapes("bs sl hd", ((2, 128, 512), (2, 2, 256)), ((5, 123, 123), (3, 3, 123))),
        _dtypes((F32, 1e-4, 1e-6), (BF16, 2e-1, 2e-2)),
        [*_RMS_REFS, {"reference": "base", "offset": 0.0, "casting_mode": "none"}],
        _each("in_place", True, False),
        _each("elementwise_affine", True, False),
    ), {"weight": "ones"}),
    # test_correctness_functional: liger_rms_norm with a random weight (no gradient), eps 1e-6
    Grid("rms_norm", "test_rms_norm.py::test_correctness_functional", "rms_norm", (
        shapes("bs sl hd", ((2, 2, 8), (2, 2, 8)), ((9, 7, 41), (3, 5, 41))),
        _dtypes((F32, 1e-4, 1e-6), (BF16, 2e-1, 2e-2)),
        _RMS_REFS,
        _each("elementwise_affine", True, False),
    ), {"weight": "randn", "in_place": False}),
]

# --- fused_add_rms_norm: test/transformers/test_fused_add_rms_norm.py -------------------------------
FUSED_ADD_RMS_NORM = [
    # test_correctness: LigerFusedAddRMSNorm (weight all ones), gradients of both outputs; Liger marks
    # (base, none, bf16, 5x123x123) xfail, not strict (its bf16 variance in bf16)
    Grid("fused_add_rms_norm", "test_fused_add_rms_norm.py::test_correctness", "fused_add_rms_norm", (
        shapes("bs sl hd", ((2, 128, 512), (2, 2, 256)), ((5, 123, 123), (3, 3, 123))),
        _dtypes((F32, 1e-4, 1e-6), (BF16, 2e-1, 2e-2)),
        [*_RMS_REFS, {"reference": "base", "offset": 0.0, "casting_mode": "none"}],
        _each("in_place", True, False),
    ), {"weight": "ones"}),
    # test_correctness_functional: liger_fused_add_rms_norm with a random weight (no gradient)
    Grid("fused_add_rms_norm", "test_fused_add_rms_norm.py::test_correctness_functional", "fused_add_rms_norm", (
        shapes("bs sl hd", ((2, 2, 8), (2, 2, 8)), ((9, 7, 41), (3, 5, 41))),
        _dtypes((F32, 1e-4, 1e-6), (BF16, 2e-1, 2e-2)),
        _RMS_REFS,
        _each("in_place", True, False),
    ), {"weight": "randn"}),
]

# --- layer_norm: test/transformers/test_layer_norm.py ----------------------------------------------
_LN_DTYPES = _dtypes((F32, 1e-5, 1e-5), (BF16, 2e-2, 2e-2))
LAYER_NORM = [
    # test_liger_layer_norm: LigerLayerNorm (weight ones, bias zeros) against nn.LayerNorm, eps 1e-6
    Grid("layer_norm", "test_layer_norm.py::test_liger_layer_norm", "layer_norm", (
        shapes("B T H", ((2, 8, 64), (2, 4, 64)), ((4, 16, 128), (2, 4, 128)), ((1, 1, 1023), (1, 1, 255)),
               ((3, 7, 256), (3, 5, 256)), ((1, 1, 1500), (1, 1, 300))),
        _LN_DTYPES,
    ), {"params": "init"}),
    # test_liger_layer_norm_functional: random weight and bias, with gradients
    Grid("layer_norm", "test_layer_norm.py::test_liger_layer_norm_functional", "layer_norm", (
        shapes("B T H", ((2, 8, 64), (2, 4, 64)), ((4, 16, 128), (2, 4, 128)), ((3, 512, 128), (3, 4, 128))),
        _LN_DTYPES,
    ), {"params": "randn"}),
]

# --- swiglu: test/transformers/test_swiglu.py ------------------------------------------------------
_MLP_SHAPES = shapes("bsz seq_len hidden_size intermediate_size",
                     ((2, 256, 256, 512), (2, 4, 64, 128)), ((6, 42, 123, 431), (2, 4, 123, 131)))
_MLP_DTYPES = _dtypes((F32, 1e-0, 1e-5), (BF16, 1e4, 1e-2))
_SMALL_SHAPES = shapes("bsz seq_len size", ((2, 8, 8), (2, 4, 8)), ((9, 7, 41), (3, 5, 41)))
SWIGLU = [
    # test_correctness_llamamlp: LlamaMLP, down(silu(gate(x)) * up(x)), weights randn
    Grid("swiglu", "test_swiglu.py::test_correctness_llamamlp", "gated_mlp", (_MLP_SHAPES, _MLP_DTYPES),
         {"layout": "llama", "activation": "silu"}),
    # test_correctness_mixtralexperts (transformers >= 5): MixtralExperts, 8 experts (4 in the interpreter), top 2
    Grid("swiglu", "test_swiglu.py::test_correctness_mixtralexperts", "mixtral_experts", (
        _MLP_SHAPES, _dtypes((F32, 30, 5e-2), (BF16, 100.0, 5e-2)),
    ), {"experts": Shape(("experts",), (8,), (4,)), "top_k": 2}),
    # test_correctness_phi3mlp: Phi3MLP, one gate_up projection chunked in two
    Grid("swiglu", "test_swiglu.py::test_correctness_phi3mlp", "gated_mlp", (_MLP_SHAPES, _MLP_DTYPES),
         {"layout": "phi3", "activation": "silu"}),
    # test_correctness_functional: liger_swiglu(a, b)
    Grid("swiglu", "test_swiglu.py::test_correctness_functional", "gated", (_SMALL_SHAPES, _MLP_DTYPES),
         {"activation": "silu", "gate_multiplier": 1.0, "down_multiplier": 1.0}),
    # test_correctness_silumul_with_multipliers: silu(a * gate) * b * down
    Grid("swiglu", "test_swiglu.py::test_correctness_silumul_with_multipliers", "gated", (
        _SMALL_SHAPES,
        _sets("gate_multiplier down_multiplier", (0.7, 1.3), (1.5, 0.5), (1.0, 1.0)),
        _dtypes((F32, 1e-3, 1e-5), (BF16, 1e-1, 1e-2)),
    ), {"activation": "silu"}),
    # test_silumul_default_multipliers_backward_compat: one call of 4x16x32 float32, default
    # multipliers; torch.testing.assert_close's float32 tolerances
    Grid("swiglu", "test_swiglu.py::test_silumul_default_multipliers_backward_compat", "gated", (
        shapes("bsz seq_len size", ((4, 16, 32), (2, 4, 32))),
    ), {"activation": "silu", "gate_multiplier": 1.0, "down_multiplier": 1.0, "dtype": F32, "atol": 1e-5,
        "rtol": 1.3e-6}),
    # test_correctness_falcon_h1_mlp: down(silu(gate(x) * g) * up(x)) * d
    Grid("swiglu", "test_swiglu.py::test_correctness_falcon_h1_mlp", "gated_mlp", (
        _MLP_SHAPES,
        _sets("gate_multiplier down_multiplier", (0.7, 1.3), (1.5, 0.5)),
        _MLP_DTYPES,
    ), {"layout": "llama", "activation": "silu"}),
    # test_swiglu_blackwell_tiled_matches_original: rows wider than Liger's 1024-column tile (a ragged
    # last tile); Liger compares two of its kernels bit for bit, the replay compares with torch at the
    # tolerances of test_correctness_silumul_with_multipliers
    Grid("swiglu", "test_swiglu.py::test_swiglu_blackwell_tiled_matches_original", "gated", (
        shapes("rows size", ((4, 11009), (4, 1033)), ((3, 14337), (3, 1025)), ((4, 16384), (4, 1024))),
        _each("gate_multiplier", 1.0, 1.3),
        _dtypes((F32, 1e-3, 1e-5), (BF16, 1e-1, 1e-2)),
    ), {"activation": "silu", "down_multiplier": 1.0}),
]

# --- geglu: test/transformers/test_geglu.py --------------------------------------------------------
GEGLU = [
    # test_correctness: LlamaMLP with hidden_act gelu_pytorch_tanh (direct comparison, as on a GPU)
    Grid("geglu", "test_geglu.py::test_correctness", "gated_mlp", (
        shapes("bsz seq_len hidden_size intermediate_size",
               ((2, 2048, 2048, 4096), (2, 4, 256, 256)), ((9, 41, 341, 4231), (3, 5, 241, 231))),
        _dtypes((F32, 1e-0, 2e-6), (BF16, 1e-2, 1e-2)),
    ), {"layout": "llama", "activation": "gelu_tanh"}),
    # test_correctness_functional: liger_geglu(a, b)
    Grid("geglu", "test_geglu.py::test_correctness_functional", "gated", (
        shapes("bsz seq_len size", ((2, 2, 8), (2, 2, 8)), ((9, 7, 41), (3, 5, 41))),
        _dtypes((F32, 1e-5, 1e-5), (BF16, 1e-2, 1e-2)),
    ), {"activation": "gelu_tanh", "gate_multiplier": 1.0, "down_multiplier": 1.0}),
]

# --- cross_entropy: test/transformers/test_cross_entropy.py ----------------------------------------
_CE_DTYPES = [{"scalar": 1.0, "dtype": BF16, "atol": 1e-8, "rtol": 5e-2},
              {"scalar": 1.0, "dtype": F32, "atol": 1e-8, "rtol": 1e-6}]
_LLAMA_V = ((2, 4096, 32000), (2, 2, 300))
_WEIRD_V = ((3, 423, 32000), (3, 1, 300))
_BTV = shapes("B T V", _LLAMA_V, _WEIRD_V)
_REDUCTIONS = _each("reduction", "sum", "mean", "none")


def _btv(*rows: tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]) -> list[dict[str, Any]]:
    """A parametrize list of sizes with other parameters in the same tuple (``"B, T, V, ignore_index"``)."""
    return [{**shape("B T V", full, small), **extra} for full, small, extra in rows]


# ``reference``: how the Liger helper computes torch's answer ("ce": CrossEntropyLoss on the logits as
# they are; "softcap": CrossEntropyLoss of softcap * tanh(x.float() / softcap), cast back; "z_loss":
# the test's CrossEntropyWithZLoss, in float32, on the (soft-capped) logits); ``ignored``: some targets
# set to ignore_index; ``grad``: "ones" (backward of ones_like), "plain" (backward()), "times3" (the
# loss times 3, backward of rand_like: test_correctness_not_last_layer*), "none" (forward only)
_CE = {"reduction": "mean", "ignore_index": -100, "ignored": False, "label_smoothing": 0.0, "softcap": None,
       "lse_square_scale": 0.0, "return_z_loss": False, "weight": None, "grad": "ones", "reference": "ce"}
CROSS_ENTROPY = [
    # test_correctness -> _test_correctness_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness", "cross_entropy",
         (_BTV, _REDUCTIONS, _CE_DTYPES), _CE),
    # test_correctness_functional -> _test_correctness_functional: every option at once, z-loss returned
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_functional", "cross_entropy", (
        shapes("B T V", ((2, 2, 8), (2, 2, 8)), ((9, 7, 41), (3, 5, 41))),
        [{"scalar": 1.0, "dtype": BF16, "atol": 1e-8, "rtol": 5e-2}, {"scalar": 1.0, "dtype": F32, "atol": 1e-8,
                                                                      "rtol": 1e-6}],
    ), {**_CE, "ignore_index": 0, "lse_square_scale": 1e-4, "label_smoothing": 0.1, "softcap": 30.0,
        "return_z_loss": True, "grad": "randn", "reference": "z_loss"}),
    # test_correctness_with_ignore_index -> _test_correctness_with_ignore_index_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_ignore_index", "cross_entropy", (
        _btv((*_LLAMA_V, {"ignore_index": 2}), (*_WEIRD_V, {"ignore_index": -123})), _REDUCTIONS, _CE_DTYPES,
    ), {**_CE, "ignored": True}),
    # test_correctness_with_label_smoothing_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_label_smoothing_once", "cross_entropy", (
        _btv((*_LLAMA_V, {"label_smoothing": 0.1}), (*_WEIRD_V, {"label_smoothing": 0.1})), _CE_DTYPES,
    ), {**_CE, "grad": "plain"}),
    # test_correctness_with_label_smoothing_with_ignore_index_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_label_smoothing_with_ignore_index_once",
         "cross_entropy", (
             _btv((*_LLAMA_V, {"ignore_index": 1, "label_smoothing": 0.1}),
                  (*_WEIRD_V, {"ignore_index": -300, "label_smoothing": 0.2})), _CE_DTYPES,
         ), {**_CE, "ignored": True, "grad": "plain"}),
    # test_correctness_with_softcap_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_softcap_once", "cross_entropy", (
        _btv((*_LLAMA_V, {"softcap": 30.0}), (*_WEIRD_V, {"softcap": 30.0})), _REDUCTIONS, _CE_DTYPES,
    ), {**_CE, "reference": "softcap"}),
    # test_correctness_with_z_loss_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_z_loss_once", "cross_entropy", (
        _BTV, _CE_DTYPES, _each("return_z_loss", True, False), _each("lse_square_scale", 1e-4, 1e-5),
    ), {**_CE, "grad": "plain", "reference": "z_loss"}),
    # test_correctness_with_z_loss_with_other_params_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_z_loss_with_other_params_once",
         "cross_entropy", (
             _BTV, _CE_DTYPES,
             _sets("return_z_loss lse_square_scale", (True, 1e-4), (False, 1e-5)),
             _sets("label_smoothing ignore_index reduction", (0.1, 42, "mean"), (0.2, -42, "sum")),
         ), {**_CE, "ignored": True, "grad": "plain", "reference": "z_loss"}),
    # test_correctness_with_weight_once: per-class weight torch.rand(V) of the logits' dtype
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_weight_once", "cross_entropy",
         (_BTV, _REDUCTIONS, _CE_DTYPES), {**_CE, "weight": "rand"}),
    # test_correctness_with_weight_with_other_params_once: float32 weight, every option
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_weight_with_other_params_once",
         "cross_entropy", (
             _BTV, _REDUCTIONS,
             _sets("ignore_index lse_square_scale label_smoothing softcap", (-100, 1e-4, 0.1, 30.0),
                   (42, 1e-5, 0.2, 40.0)),
             _CE_DTYPES,
         ), {**_CE, "weight": "rand_f32", "ignored": True, "reference": "z_loss"}),
    # test_correctness_not_last_layer -> _test_correctness_not_last_layer_once
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_not_last_layer", "cross_entropy", (
        _BTV, _each("reduction", "sum", "mean"), _CE_DTYPES,
    ), {**_CE, "grad": "times3"}),
    # test_correctness_not_last_layer_with_other_params (float32 rtol 1e-5 here)
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_not_last_layer_with_other_params",
         "cross_entropy", (
             shapes("B T V", ((2, 1024, 32000), (2, 2, 300)), _WEIRD_V),
             _sets("ignore_index lse_square_scale label_smoothing softcap", (-100, 1e-4, 0.1, 30.0),
                   (42, 1e-5, 0.2, 40.0)),
             _each("reduction", "sum", "mean"),
             [{"scalar": 1.0, "dtype": BF16, "atol": 1e-8, "rtol": 5e-2},
              {"scalar": 1.0, "dtype": F32, "atol": 1e-8, "rtol": 1e-5}],
         ), {**_CE, "ignored": True, "grad": "times3", "reference": "z_loss", "z_loss_in_f32": True}),
    # test_float32_internal: Liger's kernel on bf16 logits and on their float32 values, 4 x 128256,
    # mean; the replay asserts what it computes (equal losses, gradients one bf16 rounding apart)
    Grid("cross_entropy", "test_cross_entropy.py::test_float32_internal", "ce_float32_internal", (
        shapes("B V", ((4, 128256), (4, 264))),
    )),
    # test_correctness_with_out_of_bounds_target_once: targets in [V, 2V) must raise
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_out_of_bounds_target_once",
         "ce_out_of_bounds", (_btv((*_LLAMA_V, {"ignore_index": 2}), (*_WEIRD_V, {"ignore_index": -123})),)),
    # test_correctness_with_forward_only: under no_grad; torch's loss without ignore_index, Liger's with it
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_forward_only", "cross_entropy", (
        _btv(((2, 4096, 32000), (2, 2, 300), {"ignore_index": -100}), (*_WEIRD_V, {"ignore_index": 2})),
        _each("reduction", "mean", "sum", "none"),
        [{"dtype": F32, "scalar": 1.0, "atol": 1e-4, "rtol": 1e-4},
         {"dtype": F16, "scalar": 1.0, "atol": 1e-2, "rtol": 1e-2},
         {"dtype": BF16, "scalar": 1.0, "atol": 1e-2, "rtol": 1e-2}],
    ), {**_CE, "grad": "none", "reference": "ce_no_ignore"}),
    # test_liger_cross_entropy_structured_output: 3 x 3 logits, mean, the optional outputs asked for
    Grid("cross_entropy", "test_cross_entropy.py::test_liger_cross_entropy_structured_output", "ce_structured", (
        _sets("return_z_loss return_token_accuracy return_predicted_tokens",
              *itertools.product((False, True), repeat=3)),
    )),
    # test_correctness_with_predicted_tokens: argmax per row (-1 where ignored)
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_with_predicted_tokens", "ce_predicted_tokens", (
        shapes("B T V", ((2, 128, 512), (2, 4, 64)), ((3, 47, 31), (3, 5, 31))),
        _each("ignore_index", -100, 2),
        _each("dtype", F32, BF16),
    )),
    # test_correctness_true_class_grad_confident_predictions: 2 x 64 x 4096, the target's logit the
    # row's max + 10; the target's gradient no further from float32's than 4x torch's own
    Grid("cross_entropy", "test_cross_entropy.py::test_correctness_true_class_grad_confident_predictions",
         "ce_confident", (
             _each("dtype", BF16, F16), _each("label_smoothing", 0.0, 0.1), _each("reduction", "sum", "mean"),
         ), {"shape": Shape(("B", "T", "V"), (2, 64, 4096), (2, 2, 256))}),
]

# --- fused_linear_cross_entropy: test/transformers/test_fused_linear_cross_entropy.py ---------------
_FLCE_SHAPES = shapes("B T H V", ((8, 128, 1024, 4096), (2, 2, 64, 256)), ((4, 47, 31, 123), (2, 3, 31, 123)))
_FLCE_TOL = [{"reduction": r, "scalar": 1.0, "dtype": d, "atol": a, "rtol": t}
             for r, d, a, t in (("mean", BF16, 5e-3, 5e-2), ("mean", F32, 1e-5, 5e-4),
                                ("sum", BF16, 5e-0, 5e1), ("sum", F32, 1e-3, 5e-2))]
_FLCE_OPTIONS = _sets("has_ce_weight label_smoothing ignore_index lse_square_scale softcap return_z_loss accum_dtype",
                      (False, 0.0, -100, 0.0, None, False, None), (True, 0.1, 42, 1e-4, 30.0, True, F32))
# TorchLMHeadCE: Linear(H, V) with weight torch.rand(V, H) and bias torch.rand(V), its logits in float32,
# soft-capped, into CrossEntropyWithZLoss; inputs randn; some targets ignored
_FLCE = {"has_ce_weight": False, "label_smoothing": 0.0, "ignore_index": -100, "lse_square_scale": 0.0,
         "softcap": None, "return_z_loss": False, "accum_dtype": None, "return_token_accuracy": False,
         "return_predicted_tokens": False, "use_token_scaling": False, "reduction": "mean", "ignored": True,
         "grad": "ones", "autocast": None, "bias": False}
FUSED_LINEAR_CROSS_ENTROPY = [
    # test_correctness
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_correctness", "flce", (
        _FLCE_SHAPES, _FLCE_TOL, _each("bias", True, False), _FLCE_OPTIONS), _FLCE),
    # test_correctness_with_forward_only: under no_grad
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_correctness_with_forward_only",
         "flce", (_FLCE_SHAPES, _FLCE_TOL, _each("bias", True, False), _FLCE_OPTIONS), {**_FLCE, "grad": "none"}),
    # test_correctness_functional: every option at once, z-loss returned; weight and bias randn, no
    # targets ignored, ce_weight randn
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_correctness_functional", "flce", (
        shapes("B T H V", ((2, 2, 8, 8), (2, 2, 8, 8)), ((9, 7, 41, 41), (3, 5, 41, 41))),
        [{"scalar": 1.0, "dtype": BF16, "atol": 5e-3, "rtol": 5e-2}, {"scalar": 1.0, "dtype": F32, "atol": 1e-5,
                                                                       "rtol": 5e-4}],
        _each("has_ce_weight", True, False), _each("bias", True, False),
    ), {**_FLCE, "ignored": False, "lse_square_scale": 1e-4, "label_smoothing": 0.1, "softcap": 30.0,
        "return_z_loss": True, "accum_dtype": F32, "grad": "randn", "init": "randn"}),
    # test_correctness_with_token_accuracy (mean only)
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_correctness_with_token_accuracy",
         "flce", (_FLCE_SHAPES, _FLCE_TOL[:2], _each("bias", True, False), _each("return_token_accuracy", True, False)),
         _FLCE),
    # test_amp: float32 modules under torch.autocast to bf16 / f16, mean, nothing ignored; the replay gives
    # both sides the same bias (Liger's test leaves each module's bias at its own random init)
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_amp", "flce", (
        _FLCE_SHAPES,
        [{"bias": b, "autocast": c, "atol": 5e-3, "rtol": 5e-2} for b, c in
         ((True, BF16), (True, F16), (False, BF16), (False, F16))],
        _each("accum_dtype", None, F32),
    ), {**_FLCE, "dtype": F32, "scalar": 1.0, "ignored": False, "grad": "plain"}),
    # test_correctness_token_scaling, _consistency, _functional, _module and
    # test_token_scaling_with_ignore_index: the loss of each token scaled by its predicted probability
    *[Grid("fused_linear_cross_entropy", f"test_fused_linear_cross_entropy.py::{name}", "flce", (
        shapes("B T H V", (full, small)),), {**_FLCE, "dtype": F32, "atol": a, "rtol": a, "scalar": 1.0,
                                             "use_token_scaling": True, "reduction": r, "bias": True,
                                             "ignored": "ignore" in name, "init": "randn",
                                             "grad": "ones" if r == "none" else "plain"})
      for name, full, small, r, a in (
          ("test_correctness_token_scaling", (2, 4, 8, 16), (2, 4, 8, 16), "none", 1e-4),
          ("test_correctness_token_scaling_consistency", (2, 4, 8, 16), (2, 4, 8, 16), "sum", 1e-6),
          ("test_correctness_token_scaling_functional", (2, 4, 8, 16), (2, 4, 8, 16), "sum", 1e-5),
          ("test_correctness_token_scaling_module", (2, 4, 8, 16), (2, 4, 8, 16), "sum", 1e-5),
          ("test_token_scaling_with_ignore_index", (1, 6, 8, 1000), (1, 4, 8, 300), "sum", 1e-5))],
    # test_liger_fused_linear_cross_entropy_structured_output: 3 x 2 hidden states, 3 classes, with bias
    Grid("fused_linear_cross_entropy",
         "test_fused_linear_cross_entropy.py::test_liger_fused_linear_cross_entropy_structured_output",
         "flce_structured",
         (_sets("return_z_loss return_token_accuracy", *itertools.product((False, True), repeat=2)),)),
    # test_correctness_with_predicted_tokens (mean; weight and bias randn)
    Grid("fused_linear_cross_entropy", "test_fused_linear_cross_entropy.py::test_correctness_with_predicted_tokens",
         "flce", (
             _FLCE_SHAPES,
             [{"reduction": "mean", "dtype": d, "atol": a, "rtol": r} for d, a, r in ((BF16, 5e-3, 5e-2),
                                                                                    (F32, 1e-5, 5e-4))],
             _each("bias", True, False), _each("ignore_index", -100, 2),
         ), {**_FLCE, "scalar": 1.0, "return_predicted_tokens": True, "init": "randn", "grad": "plain"}),
    # test_correctness_reduction_none_per_token_grad_output: reduction none, grad_output rand + 0.5
    Grid("fused_linear_cross_entropy",
         "test_fused_linear_cross_entropy.py::test_correctness_reduction_none_per_token_grad_output", "flce", (
             shapes("B T H V", ((2, 16, 32, 64), (2, 4, 32, 64)), ((1, 32, 64, 128), (1, 4, 64, 128))),
             _each("bias", True, False),
             _dtypes((F32, 1e-4, 1e-4)),
         ), {**_FLCE, "reduction": "none", "ignored": False, "scalar": 0.1, "init": "randn_tenth",
             "grad": "per_token"}),
]

# --- rope: test/transformers/test_rope.py ----------------------------------------------------------
_ROPE_DTYPES = _dtypes((F32, 1e-5, 1e-5), (BF16, 1e-1, 1e-5), (F16, 1e-2, 1e-5))
ROPE = [
    # test_correctness: q, k made [B, S, H, D] and transposed (non-contiguous), Llama's rotary tables of
    # positions 0..S-1 ([1, S, D], or expanded to [B, S, D]), against apply_rotary_pos_emb
    Grid("rope", "test_rope.py::test_correctness", "rope", (
        shapes("bsz seq_len num_q_heads num_kv_heads head_dim",
               ((1, 128, 32, 32, 64), (1, 2, 8, 8, 32)), ((2, 128, 32, 32, 64), (2, 2, 8, 8, 32)),
               ((1, 128, 32, 8, 64), (1, 2, 8, 2, 32)), ((2, 128, 32, 8, 64), (2, 2, 8, 2, 32)),
               ((3, 423, 73, 213, 92), (1, 3, 7, 21, 92)), ((3, 423, 73, 155, 92), (1, 3, 7, 15, 92)),
               ((1, 8192, 32, 8, 128), (1, 2, 8, 2, 128))),
        _ROPE_DTYPES,
        _each("expand_position_ids", True, False),
    ), {"layout": "transposed", "tables": "3d"}),
    # test_functional_correctness: q, k made [B, H, S, D]; Liger compares liger_rope with
    # LigerRopeFunction, the replay compares with apply_rotary_pos_emb
    Grid("rope", "test_rope.py::test_functional_correctness", "rope", (
        shapes("bsz seq_len num_q_heads num_kv_heads head_dim",
               ((1, 2, 2, 2, 8), (1, 2, 2, 2, 8)), ((1, 2, 1, 2, 8), (1, 2, 1, 2, 8)),
               ((9, 7, 41, 41, 41), (3, 3, 7, 7, 41))),
        _dtypes((F32, 1e-5, 1e-5), (BF16, 1e-1, 1e-5), (F16, 1e-2, 1e-5)),
        _each("expand_position_ids", True, False),
    ), {"layout": "contiguous", "tables": "3d"}),
    # test_vision_2d_cos_sin: one [S, D] table (no batch dimension), batch 1
    Grid("rope", "test_rope.py::test_vision_2d_cos_sin", "rope", (
        shapes("seq_len num_heads head_dim", ((128, 32, 64), (2, 8, 32)), ((256, 16, 128), (4, 8, 64)),
               ((423, 73, 92), (3, 7, 92))),
        _ROPE_DTYPES,
    ), {"layout": "vision", "tables": "2d", "expand_position_ids": False}),
]

# --- kl_div: test/transformers/test_kl_div.py ------------------------------------------------------
_KL_AXES = (
    shapes("B T V", ((1, 4096, 32000), (1, 4, 300)), ((41, 401, 1271), (3, 5, 271))),
    _each("log_target", True, False),
    _each("reduction", "batchmean", "sum", "mean", "none"),
    _dtypes((BF16, 1e-8, 5e-2), (F32, 1e-8, 1e-6), (F16, 1e-3, 1e-3)),
)
KL_DIV = [
    # test_correctness: input log_softmax(randn) of the dtype, target softmax(randn) in float32 (taken
    # as log-probabilities where log_target), KLDivLoss(reduction, log_target); no backward for "none"
    Grid("kl_div", "test_kl_div.py::test_correctness", "kl_div", _KL_AXES, {"last_layer": True}),
    # test_correctness_not_last: the loss times 2 before the backward
    Grid("kl_div", "test_kl_div.py::test_correctness_not_last", "kl_div", _KL_AXES, {"last_layer": False}),
]

# --- jsd: test/transformers/test_jsd.py ------------------------------------------------------------
_JSD_SHAPES = shapes("B T V", ((2, 1024, 3200), (2, 2, 300)), ((41, 401, 1271), (3, 3, 271)))
_JSD_DTYPES = _dtypes((BF16, 1e-7, 5e-2), (F32, 1e-7, 1e-6), (F16, 1e-3, 1e-3))
# the test's JSD module: beta * KL(P || M) + (1 - beta) * KL(Q || M) per row, the mean over the rows
# (over those whose label is not ignore_index where labels are given), cast to the dtype
_JSD = {"beta": 0.5, "ignore_index": -100, "labels": False, "last_layer": True, "symmetry": False}
JSD = [
    # test_correctness -> _test_correctness_once (also jsd(target, input) == jsd(input, target))
    Grid("jsd", "test_jsd.py::test_correctness", "jsd", (_JSD_SHAPES, _JSD_DTYPES), {**_JSD, "symmetry": True}),
    # test_correctness_not_last: the same, the loss times 2 before the backward
    Grid("jsd", "test_jsd.py::test_correctness_not_last", "jsd", (_JSD_SHAPES, _JSD_DTYPES),
         {**_JSD, "symmetry": True, "last_layer": False}),
    # test_correctness_with_beta
    Grid("jsd", "test_jsd.py::test_correctness_with_beta", "jsd", (
        _JSD_SHAPES, _JSD_DTYPES, _each("beta", 0.0, 0.1, 0.5, 0.9, 1.0)), _JSD),
    # test_correctness_with_ignore_index: labels, some of them ignore_index
    Grid("jsd", "test_jsd.py::test_correctness_with_ignore_index", "jsd", (
        _JSD_SHAPES, _JSD_DTYPES, _each("ignore_index", 2, 42)), {**_JSD, "labels": True}),
    # test_correctness_functional: Liger compares LigerJSDFunction with liger_jsd; the replay compares
    # with the test's JSD module
    Grid("jsd", "test_jsd.py::test_correctness_functional", "jsd", (
        _JSD_SHAPES, _JSD_DTYPES,
        _sets("beta ignore_index last_layer", (0.5, 2, False), (0.1, 42, True)),
    ), {**_JSD, "labels": True}),
    # test_correctness_with_all_indices_ignored: every label ignore_index: loss 0, gradient 0
    Grid("jsd", "test_jsd.py::test_correctness_with_all_indices_ignored", "jsd", (
        shapes("B T V", ((2, 10, 32), (2, 4, 32))),
    ), {**_JSD, "labels": "all_ignored", "dtype": BF16, "atol": 1e-3, "rtol": 1e-3}),
]

# --- embedding: test/transformers/test_embedding.py ------------------------------------------------
EMBEDDING = [
    # test_embedding_correctness: nn.Embedding against LigerEmbedding, 320 tokens (10% of them
    # padding_idx where one is given) viewed as 32 x 10. Liger itself skips this test ("LigerEmbedding
    # is under experimentation"); the replay runs it.
    Grid("embedding", "test_embedding.py::test_embedding_correctness", "embedding", (
        [{**shape("num_embeddings embedding_dim", full, small), "padding_idx": pad} for full, small, pad in (
            ((100, 64), (100, 64), None), ((100, 64), (100, 64), None), ((1000, 128), (300, 128), None),
            ((100, 60), (100, 60), None), ((100, 60), (100, 60), None), ((1000, 120), (300, 120), None),
            ((1000, 500), (300, 300), None), ((30522, 768), (300, 192), None), ((100, 64), (100, 64), 0),
            ((1000, 128), (300, 128), 50), ((30522, 768), (300, 192), 1))],
        _dtypes((F32, 1e-6, 1e-5)),
    ), {"tokens": Shape(("rows", "cols"), (32, 10), (4, 4))}),
]

# --- softmax: test/transformers/test_softmax.py ----------------------------------------------------
_SOFTMAX_AXES = (
    [{"shape": Shape((*(f"d{i}" for i in range(len(full) - 1)), "N"), full, small)} for full, small in (
        ((2, 8), (2, 8)), ((4, 16), (4, 16)), ((1, 1023), (1, 255)), ((3, 7, 256), (3, 5, 256)),
        ((1, 4096), (1, 256)), ((1, 2, 4096), (1, 2, 256)))],
    _dtypes((F32, 1e-5, 1e-5), (BF16, 5e-2, 5e-2)),
)
SOFTMAX = [
    # test_liger_softmax: LigerSoftmax against nn.Softmax(dim=-1)
    Grid("softmax", "test_softmax.py::test_liger_softmax", "softmax", _SOFTMAX_AXES),
    # test_liger_softmax_functional: liger_softmax against F.softmax(dim=-1)
    Grid("softmax", "test_softmax.py::test_liger_softmax_functional", "softmax", _SOFTMAX_AXES),
]

# --- group_norm: test/transformers/test_group_norm.py ----------------------------------------------
GROUP_NORM = [
    # test_liger_group_norm: LigerGroupNorm (weight ones, bias zeros) against nn.GroupNorm on
    # [batch, channels, hidden], eps 1e-6
    Grid("group_norm", "test_group_norm.py::test_liger_group_norm", "group_norm", (
        shapes("batch_size num_channels num_groups hidden_size",
               ((1, 1, 1, 3), (1, 1, 1, 3)), ((1, 32, 32, 4), (1, 4, 4, 4)), ((16, 32, 1, 4096), (2, 8, 1, 256)),
               ((2, 63, 21, 2163), (2, 9, 3, 163)), ((16, 48, 12, 8192), (2, 12, 3, 256))),
        _dtypes((F32, 1e-4, 1e-4)),
    )),
]

#: Every grid, by op, in the order of the task's list of ops.
GRIDS: dict[str, list[Grid]] = {
    "rms_norm": RMS_NORM, "fused_add_rms_norm": FUSED_ADD_RMS_NORM, "layer_norm": LAYER_NORM, "swiglu": SWIGLU,
    "geglu": GEGLU, "cross_entropy": CROSS_ENTROPY, "fused_linear_cross_entropy": FUSED_LINEAR_CROSS_ENTROPY,
    "rope": ROPE, "kl_div": KL_DIV, "jsd": JSD, "embedding": EMBEDDING, "softmax": SOFTMAX, "group_norm": GROUP_NORM,
}


def all_cases() -> list[Case]:
    """Every case of every grid, ids unique (a repeated parameter set, as Liger's embedding list
    has, gets pytest's suffix: ``...-1``)."""
    cases, seen = [], {}
    for grids in GRIDS.values():
        for grid in grids:
            for case in grid.cases():
                count = seen.get(case.id, 0)
                seen[case.id] = count + 1
                if count:
                    case = Case(case.op, case.test, case.kind, case.params, f"{case.id}-{count}")
                cases.append(case)
    return cases


def _values(case: Case) -> set[tuple[str, Any]]:
    """The parameters of ``case`` that say what it checks (tolerances left out: they follow the dtype)."""
    return {(key, value) for key, value in case.params.items() if key not in _QUIET}


def representative(cases: list[Case]) -> list[Case]:
    """A subset of ``cases`` in which every Liger test (``Case.test``) runs each value of each of
    its parameters at least once (every size, dtype, reduction, option value), in the order of
    ``cases``. A stable rule, the same subset on every run: per test, the case with the most values
    not yet taken, the first of equals, until every value is taken (the greedy cover). About a
    fifth of the cases; the rest combine values these run already."""
    by_test: dict[str, list[Case]] = {}
    for case in cases:
        by_test.setdefault(case.test, []).append(case)
    chosen: set[str] = set()
    for group in by_test.values():
        values = [_values(case) for case in group]
        needed = set().union(*values)
        while needed:
            best = max(range(len(group)), key=lambda i: (len(values[i] & needed), -i))
            chosen.add(group[best].id)
            needed -= values[best]
    return [case for case in cases if case.id in chosen]
