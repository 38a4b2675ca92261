"""The model families the ``fast`` inference engine runs, and the config fields it checks.

The engine (:mod:`tailtheory.engine.rollout.fast`) follows the Hugging Face eager forward of a
few causal-LM families op for op. This module decides which models it runs (:func:`unsupported`)
and computes their rotary frequencies (:func:`rope_frequencies`). A family or a rope type joins
only with its own test against the Hugging Face model (``tests/engine/rollout``):

- **Families** (:data:`ARCHS`, ``config.model_type``): Qwen2 (q/k/v biases), Llama 1-3.x
  (``attention_bias``: q/k/v/o biases; ``mlp_bias``: gate/up/down biases) and Qwen3
  (``attention_bias``: q/k/v/o biases; ``q_norm`` / ``k_norm``, an RMSNorm over ``head_dim``
  of each query and key head, before the rotary embedding: :data:`QK_NORM`). Biases are read
  from the modules, so every bias these fields create runs. ``head_dim`` may differ from
  ``hidden_size / num_attention_heads``; the head may be tied or untied.
- **Fields that change the forward**, allowed only at the values the engine runs: rope type
  default or ``llama3`` (:data:`ROPE_TYPES`), full rotary (``partial_rotary_factor`` 1),
  ``hidden_act`` silu, full attention in every layer (no ``use_sliding_window``, every
  ``layer_types`` entry ``full_attention``), ``pretraining_tp`` 1.
- **Refused by name** (:data:`REFUSED`): fields of other families that scale or soft-cap the
  embeddings, residuals, attention scores or logits, or add q/k norms or norm biases; set to a
  value other than their neutral one, the config is refused even though these families' own
  code ignores them: a checkpoint that sets them expects a forward that code does not compute.
- **Norms**: each RMSNorm module is the family's own class (``w * x / rms(x)``, :data:`NORMS`);
  any other (Gemma's ``(1 + w) * x / rms(x)``, say) is refused by its class name. The checks
  read the config and the module tree only: a model on the ``meta`` device is checked too.
"""

from __future__ import annotations

import copy

import torch

from tailtheory.core.forward import logit_transforms

ARCHS = ("qwen2", "llama", "qwen3")
"""``config.model_type`` values the engine runs."""

QK_NORM = ("qwen3",)
"""Families whose attention normalises each query and key head (``self_attn.q_norm`` /
``self_attn.k_norm``, RMSNorm over ``head_dim``) before the rotary embedding."""

NORMS = {"qwen2": "Qwen2RMSNorm", "llama": "LlamaRMSNorm", "qwen3": "Qwen3RMSNorm"}
"""The RMSNorm class of each family in ``transformers`` (``w * x / rms(x)``, in float32 then
cast): the norm the engine computes."""

ROPE_TYPES = ("default", "llama3")
"""Rotary embeddings the engine runs: ``default`` (``inv_freq = theta^(-2i/d)``) and ``llama3``
(Llama 3.1's frequency-dependent interpolation of it, ``transformers``' own initialiser)."""

_SCALE, _CAP, _FLAG = (None, 1, 1.0), (None,), (None, False)

REFUSED = {
    "embedding_multiplier": (_SCALE, "scales the embeddings"),
    "scale_emb": (_SCALE, "scales the embeddings"),
    "embedding_scale": (_SCALE, "scales the embeddings"),
    "rescale_embeddings": (_FLAG, "scales the embeddings"),
    "residual_multiplier": (_SCALE, "scales each block's residual branch"),
    "scale_depth": (_SCALE, "scales each block's residual branch"),
    "residual_scale": (_SCALE, "scales each block's residual branch"),
    "attention_multiplier": (_CAP, "replaces the 1/sqrt(head_dim) attention scale"),
    "query_pre_attn_scalar": (_CAP, "replaces the 1/sqrt(head_dim) attention scale"),
    "softmax_scale": (_CAP, "replaces the 1/sqrt(head_dim) attention scale"),
    "attn_logit_softcapping": (_CAP, "soft-caps the attention scores"),
    "final_logit_softcapping": (_CAP, "soft-caps the logits"),
    "output_logit_soft_cap": (_CAP, "soft-caps the logits"),
    "logits_scaling": (_SCALE, "scales the logits"),
    "logit_scale": (_SCALE, "scales the logits"),
    "output_multiplier": (_SCALE, "scales the logits"),
    "lm_head_multiplier": (_SCALE, "scales the logits"),
    "dim_model_base": (_CAP, "scales the logits by dim_model_base / hidden_size"),
    "use_qk_norm": (_FLAG, "normalises queries and keys"),
    "qk_layernorm": (_FLAG, "normalises queries and keys"),
    "norm_bias": (_FLAG, "adds a bias to the norms"),
}
"""Config fields that change the forward in the families that have them, refused by name when
set to other than their neutral values: field -> (neutral values, what it does)."""

_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
_QK_NORMS = ("self_attn.q_norm", "self_attn.k_norm")


def head_dim(config) -> int:
    """Attention head size: ``config.head_dim``, else ``hidden_size // num_attention_heads``."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def rope(config) -> tuple[str, float | None, dict]:
    """``(rope type, theta, parameters)`` from a transformers 5 ``rope_parameters`` or a 4.x
    config's ``rope_scaling`` / ``rope_theta``."""
    params = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    return kind, theta, {**scaling, **params}


def rope_frequencies(config) -> tuple[torch.Tensor, float]:
    """``(inv_freq (head_dim / 2,) float32, attention scaling)``: what the model's rotary module
    computes when built; ``cos`` and ``sin`` are multiplied by the scaling (in float32, before
    the cast to the forward's dtype).

    ``default``: ``1 / theta^(2i / d)``, the formula of the families' own
    ``compute_default_rope_parameters`` (scaling 1). Any other of :data:`ROPE_TYPES`:
    ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[type](config, None)``, on a copy of
    the config (the initialiser standardises the config's rope fields in place).
    """
    kind, theta, _ = rope(config)
    if kind not in ROPE_TYPES or theta is None:
        raise ValueError(f"rope type {kind!r} (theta {theta}) is not one of {ROPE_TYPES}")
    if kind == "default":
        d = head_dim(config)
        return 1.0 / (float(theta) ** (torch.arange(0, d, 2, dtype=torch.float) / d)), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](copy.deepcopy(config), None)
    return inv_freq.float(), float(scaling)


def _config_refusal(config) -> str | None:
    """Why the forward-changing fields of ``config`` are not the engine's, or ``None``."""
    kind, theta, params = rope(config)
    if kind not in ROPE_TYPES or theta is None:
        return f"rope type {kind!r} (theta {theta}); only {ROPE_TYPES} run"
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    if partial not in (None, 1, 1.0):
        return f"partial_rotary_factor {partial} (partial rotary embeddings) is not supported"
    act = getattr(config, "hidden_act", None)
    if act != "silu":
        return f"hidden_act {act!r} is not silu"
    if getattr(config, "use_sliding_window", False):
        return "use_sliding_window is set: sliding-window attention is not supported"
    types = [t for t in getattr(config, "layer_types", None) or () if t != "full_attention"]
    if types:
        return f"layer_types holds {types[0]!r}: only full_attention (no sliding window) runs"
    tp = getattr(config, "pretraining_tp", 1)
    if tp not in (None, 1):
        return f"pretraining_tp {tp} is not 1 (sliced projections are not supported)"
    for name, (neutral, what) in REFUSED.items():
        value = getattr(config, name, None)
        if value not in neutral:
            return f"config field {name} = {value!r} {what}; the engine does not"
    return None


def _layout_refusal(model, arch: str) -> str | None:
    """Why the module tree of ``model`` is not the engine's, or ``None``."""
    c, qk = model.config, arch in QK_NORM
    try:
        backbone, norms = model.get_decoder(), {}
        for i, layer in enumerate(backbone.layers):
            for name in _LAYER:
                layer.get_submodule(name)
            for name in _QK_NORMS if not qk else ():
                if getattr(layer.self_attn, name[len("self_attn."):], None) is not None:
                    return f"layers.{i}.{name} is a norm a {arch!r} model does not run"
            norms.update({f"layers.{i}.{name}": layer.get_submodule(name)
                          for name in _LAYER_NORMS + (_QK_NORMS if qk else ())})
            rows = layer.self_attn.q_proj.weight.shape[0]
            if rows != c.num_attention_heads * head_dim(c):
                raise AttributeError(f"q_proj has {rows} outputs, not num_attention_heads x "
                                     f"head_dim = {c.num_attention_heads * head_dim(c)}")
        if backbone.norm is None or model.get_output_embeddings() is None:
            raise AttributeError("no final norm or no output layer")
        norms["norm"] = backbone.norm
    except AttributeError as exc:
        return f"unexpected module layout: {exc}"
    for where, norm in norms.items():
        if type(norm).__name__ != NORMS[arch] or getattr(norm, "bias", None) is not None:
            return (f"{where} is {type(norm).__name__}, not {NORMS[arch]} (w * x / rms(x), no "
                    f"bias): a norm the engine does not compute")
    return None


def unsupported(model) -> str | None:
    """Why the engine cannot run ``model``, one line, or ``None`` when it can: a causal LM of
    :data:`ARCHS` whose forward-changing config fields and modules are the engine's (module
    docstring) and whose logits are ``h W^T (+ b)``."""
    config = getattr(model, "config", None)
    arch = getattr(config, "model_type", None)
    if arch not in ARCHS:
        return f"model_type {arch!r} is not one of {ARCHS}"
    reason = _config_refusal(config)
    if reason:
        return reason
    if logit_transforms(model):
        return f"logits are not h W^T + b ({logit_transforms(model)})"
    return _layout_refusal(model, arch)


def supports(model) -> bool:
    """Whether the engine can run ``model`` (see :func:`unsupported`)."""
    return unsupported(model) is None
