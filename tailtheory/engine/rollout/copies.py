"""Low-precision inference copies of a float32 trainer: the weights an inference engine serves.

Source: TIM (Zhong et al., arXiv 2605.14220; claims M7, V2) for the rounding of the inference
engine's weights as a mismatch source. One machinery for ``tailtheory.mismatch.real`` (M7's
paired logits) and ``tailtheory.engine.rollout.engine`` (the rollout paths, synced every step):

- ``bf16`` / ``fp16``: every parameter cast to that dtype; the forward runs in it.
- ``fp8``: the weights of the ``nn.Linear`` layers of the transformer blocks (attention and MLP
  projections) quantised to float8 e4m3 (``torch.float8_e4m3fn``) with a scale, then
  dequantised to bfloat16; embeddings, norms and the output layer (``lm_head``, which serving
  engines keep in 16 bits) are plain bfloat16 casts. The forward runs in bfloat16: weight-only
  FP8 (W8A16), emulated on CPU, the setting of FP8 rollouts in large RL runs. The emulation is
  exact about the weights' values (each is ``q * scale`` with ``q`` an e4m3 number, rounded once
  to bfloat16); only the matmul kernel differs from a real FP8 engine.
"""

from __future__ import annotations

import copy

import torch

COPY_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
"""Rollout paths that serve an inference copy, and the dtype its forward runs in."""

FP8_SCALINGS = ("channel", "tensor")
"""``channel``: one scale per output row of a weight; ``tensor``: one scale per weight."""

FP8_SCALING = "channel"
"""Default fp8 scaling. Per channel, because the e4m3 step is relative to the scale: with one
scale per tensor, rows much smaller than the tensor's largest weight fall towards e4m3's
subnormal range (below 2^-6 of the scale) and lose relative precision; a scale per row keeps
every row in the normal range for one float per row. Per-tensor scaling (one float per weight,
the simplest FP8 checkpoint format) is the cruder option, available as ``"tensor"``."""


def fp8_dtype() -> torch.dtype:
    """``torch.float8_e4m3fn``, or a ``ValueError`` naming the requirement on older builds."""
    dtype = getattr(torch, "float8_e4m3fn", None)
    if dtype is None:
        raise ValueError(f"the fp8 path needs a torch build with float8 dtypes "
                         f"(torch.float8_e4m3fn, torch >= 2.1); this is torch {torch.__version__}")
    return dtype


def _check_scaling(scaling: str) -> str:
    if scaling not in FP8_SCALINGS:
        raise ValueError(f"fp8 scaling must be one of {FP8_SCALINGS}, got {scaling!r}")
    return scaling


def fp8_quantize(w: torch.Tensor, scaling: str = FP8_SCALING) -> tuple[torch.Tensor, torch.Tensor]:
    """Float8 e4m3 codes ``q`` and float32 ``scale`` with ``w ~ q * scale`` (absmax scaling).

    ``scale = max|w| / 448`` (448 = e4m3's largest finite value) over each output row
    (``channel``) or the whole tensor (``tensor``); an all-zero row or tensor gets scale 1.
    ``q = round_e4m3(w / scale)``: relative error at most 2^-4 for values in e4m3's normal range.

    Shapes: w (out, in) -> q (out, in) float8_e4m3fn, scale (out, 1) or () float32.
    """
    dtype = fp8_dtype()
    if _check_scaling(scaling) == "channel" and w.ndim != 2:
        raise ValueError(f"per-channel fp8 scaling needs a 2-D weight (out, in), got shape "
                         f"{tuple(w.shape)}")
    fmax = torch.finfo(dtype).max
    w = w.detach().float()
    amax = w.abs().amax(-1, keepdim=True) if scaling == "channel" else w.abs().amax()
    scale = torch.where(amax > 0, amax / fmax, torch.ones_like(amax))
    q = (w / scale).clamp(-fmax, fmax).to(dtype)  # clamp: w / scale may round just above 448
    return q, scale


def fp8_dequantize(q: torch.Tensor, scale: torch.Tensor,
                   dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``q * scale`` in float32, rounded once to ``dtype``. Shapes: as :func:`fp8_quantize`'s."""
    return (q.float() * scale).to(dtype)


def fp8_weight_names(model) -> set[str]:
    """Parameter names of the weights the ``fp8`` path quantises: every ``nn.Linear`` weight but
    the output layer's (and so never a tied embedding)."""
    head = model.get_output_embeddings()
    skip = {id(head.weight)} if head is not None else set()
    return {f"{name}.weight" for name, mod in model.named_modules()
            if isinstance(mod, torch.nn.Linear) and id(mod.weight) not in skip}


def check_trainer(model) -> None:
    """Refuse a model that is not the float32 trainer: copies are made from it, never of it."""
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(f"model must be the float32 trainer (its parameters are "
                         f"{sorted(str(d) for d in dtypes)}); inference copies are made from it")


def _check_path(path: str) -> None:
    if path not in COPY_DTYPES:
        raise ValueError(f"path must be one of {tuple(COPY_DTYPES)} to make an inference copy, "
                         f"got {path!r}")
    if path == "fp8":
        fp8_dtype()


def inference_copy(model, path: str, scaling: str = FP8_SCALING):
    """The inference engine's copy of the float32 trainer ``model`` on ``path`` (eval mode).

    ``bf16`` / ``fp16``: ``model`` cast to that dtype. ``fp8``: cast to bfloat16, then the
    weights of :func:`fp8_weight_names` replaced by their e4m3 round trip at ``scaling``.
    ``model`` is left unchanged.
    """
    _check_path(path)
    if path == "fp8":
        _check_scaling(scaling)
    check_trainer(model)
    infer = copy.deepcopy(model).to(COPY_DTYPES[path]).eval()
    if path == "fp8":
        sync_copy(infer, model, path, scaling)
    return infer


@torch.no_grad()
def sync_copy(infer, model, path: str, scaling: str = FP8_SCALING) -> None:
    """Refresh the inference copy ``infer`` in place from the trainer ``model``'s weights.

    The same rounding as :func:`inference_copy`: a cast on ``bf16`` / ``fp16``, the e4m3 round
    trip of the Linear weights on ``fp8`` (re-quantised from the new weights: fresh scales).
    """
    _check_path(path)
    src = dict(model.named_parameters())
    fp8 = fp8_weight_names(model) if path == "fp8" else set()
    for name, p in infer.named_parameters():
        if name not in src or src[name].shape != p.shape:
            raise ValueError(f"model does not match the inference copy at parameter {name!r}")
        w = src[name]
        p.copy_(fp8_dequantize(*fp8_quantize(w, scaling), dtype=p.dtype) if name in fp8 else w)
