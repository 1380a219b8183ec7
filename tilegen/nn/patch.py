"""``tilegen.patch(model)``: a Hugging Face causal LM's RMSNorm, rotary embedding, MLP gate and
loss run on tilegen's kernels (the committed build, through :func:`tilegen.nn.kernel`).

What is patched, for a Llama, Mistral, Qwen2 or Gemma model of ``transformers``:

- ``rms_norm``: each of the model's ``<Family>RMSNorm`` modules gets its own ``forward`` (an
  instance attribute; the class is untouched): ``rms_norm(x, weight, eps, offset)``, offset 1.0
  for Gemma's ``(1 + weight)``, the row normalised in float32 and rounded once.
- ``rope``: Hugging Face's attention calls the module-level function ``apply_rotary_pos_emb`` of
  its modeling module. That name is replaced, once per family, by a dispatcher that runs
  tilegen's ``rope`` only while the attention module of a patched model runs (a forward pre-hook
  and hook on each of its ``<Family>Attention`` modules count it in and out, per thread) and calls
  the original function otherwise, so other models of the family are unaffected. ``cos`` and
  ``sin`` come as [B, S, D] or [1, S, D] (expanded, no copy).
- ``mlp``: each ``<Family>MLP`` gets its own ``forward``: ``down_proj(swiglu(gate_proj(x),
  up_proj(x)))`` for ``hidden_act`` silu (Llama, Mistral, Qwen2), ``geglu`` for the tanh GELU
  (Gemma's ``gelu_pytorch_tanh``). The three projections stay ``nn.Linear``.
- ``loss``: ``model.loss_function`` (this instance's) becomes :func:`causal_lm_loss`, the
  ``ForCausalLMLoss`` of ``transformers`` on tilegen's ``cross_entropy``.

Dtypes: float32, bfloat16 and float16. A norm whose weight's dtype is not its input's (torch
promotes, the kernel takes one dtype) and a rope or MLP call the kernels cannot take (mixed
dtypes, tables of another shape) run the original torch code. What stays torch: the embedding,
the linear layers (q/k/v/o, gate/up/down, lm_head), attention, the residual adds and the
rotary embedding's tables (``<Family>RotaryEmbedding``). Kernels launch on a CUDA device or in
Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import functools
import importlib
import threading
import types
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F

from tilegen.nn import kernel

#: ``config.model_type`` -> (the ``transformers`` modeling module, its classes' prefix)
FAMILIES: dict[str, tuple[str, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", "Llama"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "Mistral"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2"),
    "gemma": ("transformers.models.gemma.modeling_gemma", "Gemma"),
}

#: ``hidden_act`` -> the gated kernel of the MLP: act(gate) * up
GATES: dict[str, str] = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu_pytorch_tanh": "geglu",
    "gelu_python_tanh": "geglu",
    "gelu_new": "geglu",
}

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def patch(
    model: torch.nn.Module, *, rms_norm: bool = True, rope: bool = True, mlp: bool = True, loss: bool = True,
    linear_cross_entropy: bool = True,
) -> torch.nn.Module:
    """Swap ``model``'s RMSNorm, rotary embedding, MLP gate and causal-LM loss for tilegen's
    kernels, in place (see the module docstring for exactly what is patched and its scope);
    returns ``model``. Each keyword set to False leaves that piece as it is. Patching again
    patches nothing twice. With ``linear_cross_entropy`` (and ``loss``), a ``*ForCausalLM``'s
    forward in training (``model.training``, grad enabled, ``labels`` given) fuses ``lm_head`` with
    the loss (:func:`tilegen.nn.linear_cross_entropy.linear_cross_entropy`: the [B, S, V] logits
    never exist) and returns ``logits=None``, as Liger-Kernel's patch does; otherwise it is the
    model's own forward.

    ``model``: a ``transformers`` Llama, Mistral, Qwen2 or Gemma model (``config.model_type``
    llama, mistral, qwen2 or gemma), a ``*ForCausalLM`` or its base model (which has no loss).
    Its parameters may be float32, bfloat16 or float16.

    Raises ValueError naming the model type for a family not supported, and naming
    ``hidden_act`` where ``mlp`` is on and the activation has no kernel (silu and the tanh GELU
    have); ImportError where ``transformers`` is not installed.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise ValueError(
            f"tilegen.patch: model type {model_type!r} ({type(model).__name__}) is not supported; "
            f"supported: {', '.join(FAMILIES)}"
        )
    where, prefix = FAMILIES[model_type]
    modeling = importlib.import_module(where)
    gate = ""
    if mlp:
        act = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None)
        gate = GATES.get(str(act), "")
        if not gate:
            raise ValueError(
                f"tilegen.patch: {type(model).__name__}'s hidden_act {act!r} has no gated kernel (supported: "
                f"{', '.join(GATES)}); pass mlp=False to leave the MLP as it is"
            )
    norm_class, mlp_class = getattr(modeling, f"{prefix}RMSNorm"), getattr(modeling, f"{prefix}MLP")
    attention_class = getattr(modeling, f"{prefix}Attention")
    offset = 1.0 if model_type == "gemma" else 0.0
    used = {"rms_norm": rms_norm, gate: mlp, "rope": rope, "cross_entropy": loss}
    for name in (name for name, on in used.items() if on):  # found now: a trace under torch.compile reads the cache
        kernel(name)
    for module in model.modules():
        if rms_norm and isinstance(module, norm_class) and "forward" not in vars(module):
            # a method of a Python function, its option an attribute: torch.compile traces it (a method
            # over functools.partial is C code to dynamo, a graph break at every call)
            module._tilegen_offset = offset
            module.forward = types.MethodType(_rms_norm_forward, module)
        elif mlp and isinstance(module, mlp_class) and "forward" not in vars(module):
            module._tilegen_gate = gate
            module.forward = types.MethodType(_mlp_forward, module)
        elif rope and isinstance(module, attention_class) and not getattr(module, "_tilegen_rope", False):
            module.register_forward_pre_hook(_rope_enter)
            module.register_forward_hook(_rope_leave, always_call=True)
            module._tilegen_rope = True
    if rope:
        _install_rope(modeling)
    if loss and hasattr(type(model), "loss_function") and hasattr(model, "lm_head"):
        cast(Any, model).loss_function = causal_lm_loss  # the instance's (PreTrainedModel's setter)
        if linear_cross_entropy and "forward" not in vars(model):
            importlib.import_module("tilegen.nn.linear_cross_entropy")  # imported now, not inside a trace
            model.forward = types.MethodType(_causal_lm_forward, model)
    return model


def _rms_norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """An RMSNorm module's forward on tilegen's ``rms_norm`` (Llama's ``variance_epsilon``,
    Gemma's ``eps``, the weight's offset ``self._tilegen_offset``: Gemma's 1); the original where the
    weight's dtype is not the input's."""
    weight, x = self.weight, hidden_states
    if weight.dtype != x.dtype or x.dtype not in _FLOATS:
        original: torch.Tensor = type(self).forward(self, hidden_states)
        return original
    eps = getattr(self, "variance_epsilon", None)
    eps = self.eps if eps is None else eps
    y: torch.Tensor = kernel("rms_norm")(x.reshape(-1, x.shape[-1]), weight, eps, self._tilegen_offset)
    return y.view(x.shape)


def _mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """A gated MLP's forward with ``act(gate_proj(x)) * up_proj(x)`` on tilegen's kernel
    ``self._tilegen_gate`` (swiglu or geglu); the original where the projections' dtypes differ."""
    a, b = self.gate_proj(x), self.up_proj(x)
    if a.dtype != b.dtype or a.dtype not in _FLOATS:
        y: torch.Tensor = self.act_fn(a) * b
    else:
        y = kernel(self._tilegen_gate)(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])).view(a.shape)
    out: torch.Tensor = self.down_proj(y)
    return out


# ------------------------------------------------------------------------------------ rope


class _Inside(threading.local):
    """How many patched attention modules this thread is inside (nested calls count)."""

    depth = 0


_INSIDE = _Inside()
_ORIGINAL_ROPE: dict[str, Callable[..., Any]] = {}  # modeling module name -> its apply_rotary_pos_emb


def _rope_enter(module: torch.nn.Module, args: Any) -> None:
    _INSIDE.depth += 1


def _rope_leave(module: torch.nn.Module, args: Any, output: Any) -> None:
    _INSIDE.depth -= 1


def _install_rope(modeling: Any) -> None:
    """Replace ``modeling.apply_rotary_pos_emb`` by the dispatcher, once per module."""
    if modeling.__name__ in _ORIGINAL_ROPE:
        return
    original = modeling.apply_rotary_pos_emb
    _ORIGINAL_ROPE[modeling.__name__] = original

    @functools.wraps(original)
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):  # type: ignore[no-untyped-def]
        """tilegen's rope inside a patched model's attention, Hugging Face's elsewhere."""
        plain = not args and kwargs in ({}, {"unsqueeze_dim": 1})
        if _INSIDE.depth > 0 and plain and _rope_fits(q, k, cos, sin):
            b, _, s, d = q.shape
            return kernel("rope")(q, k, cos.expand(b, s, d), sin.expand(b, s, d))
        return original(q, k, cos, sin, *args, **kwargs)

    modeling.apply_rotary_pos_emb = apply_rotary_pos_emb


def _rope_fits(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether the kernel takes these: q [B, H, S, D] and k [B, HK, S, D] of one float dtype,
    cos and sin of it, [B, S, D] or [1, S, D]."""
    if q.dim() != 4 or k.dim() != 4 or q.dtype not in _FLOATS:
        return False
    b, _, s, d = q.shape
    return all(t.dtype == q.dtype for t in (k, cos, sin)) and all(
        t.dim() == 3 and t.shape[0] in (1, b) and tuple(t.shape[1:]) == (s, d) for t in (cos, sin)
    )


# ------------------------------------------------------------------------------------ loss


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """``transformers``' ``ForCausalLMLoss`` on tilegen's ``cross_entropy``: token t predicts
    label t + 1 (``labels`` [B, S] shifted left, the last position ``ignore_index``; or
    ``shift_labels`` as given), the loss of each token in float32 (the logits, [B, S, V] in
    float32, bfloat16 or float16, are read into float32 by the kernel, not copied), summed and
    divided by ``num_items_in_batch`` where given, else averaged over the tokens whose label is
    not ``ignore_index`` (NaN where there are none, as torch's mean). Other keywords are ignored,
    as ``transformers`` ignores them. Returns a 0-dim float32 tensor."""
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    target = shift_labels.reshape(-1).to(device=logits.device, dtype=torch.int64)
    per_token: torch.Tensor = kernel("cross_entropy")(logits.reshape(-1, vocab_size), target, ignore_index)[0]
    if num_items_in_batch is None:
        return per_token.sum() / (target != ignore_index).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(per_token.device)
    return per_token.sum() / num_items_in_batch


def _causal_lm_forward(self: Any, *args: Any, labels: torch.Tensor | None = None, **kwargs: Any) -> Any:
    """A ``*ForCausalLM``'s forward whose head and loss are one fused call where a training step
    asks for the loss: the base model's last hidden states, then ``linear_cross_entropy`` with
    ``lm_head``'s weight and bias on the labels shifted as ``ForCausalLMLoss`` shifts them (or
    ``shift_labels``), summed over ``num_items_in_batch`` where given, else the mean over the
    tokens not ignored, soft-capped where the config has ``final_logit_softcapping``. Returns the
    model's output class with ``logits=None``. Anything else (no labels, eval mode, no grad, a
    ``logits_to_keep``) runs the model's own forward."""
    from tilegen.nn.linear_cross_entropy import linear_cross_entropy

    if labels is None or not (self.training and torch.is_grad_enabled()) or kwargs.get("logits_to_keep", 0):
        return type(self).forward(self, *args, labels=labels, **kwargs)
    shift_labels = kwargs.pop("shift_labels", None)
    num_items = kwargs.get("num_items_in_batch")
    ignore_index = kwargs.get("ignore_index", -100)
    return_dict = kwargs.pop("return_dict", None)
    kwargs.pop("logits_to_keep", None)
    outputs = self.model(*args, **kwargs)
    hidden = outputs.last_hidden_state
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    target = shift_labels.reshape(-1).to(device=hidden.device, dtype=torch.int64)
    head = self.lm_head
    softcap = getattr(self.config, "final_logit_softcapping", None) or 0.0
    loss = linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), head.weight, target, head.bias,
                                ignore_index=ignore_index, softcap=float(softcap),
                                reduction="mean" if num_items is None else "sum")
    assert isinstance(loss, torch.Tensor)  # no statistics asked for: the loss alone
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    fields = {k: v for k, v in outputs.items() if k != "last_hidden_state"}
    result = CausalLMOutputWithPast(loss=loss, logits=None, **fields)
    return result.to_tuple() if return_dict is False else result
