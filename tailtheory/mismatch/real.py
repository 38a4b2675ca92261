"""Real training-inference mismatch on a small transformer (TIM; DVP's (1-p) law, claim M7).

Source: TIM (Zhong et al., arXiv 2605.14220) for the sources of mismatch; DVP (Li et al.,
arXiv 2512.23087) for the (1-p) envelope they should follow (M2, M3 of ``tailtheory.mismatch.logprob``).

The trainer is the float32 full forward of a causal LM; the inference engine is one of:

- ``bf16`` / ``fp16``: a copy of the model in bfloat16 / float16 (rounding in every matmul);
- ``kv``: float32 incremental decoding, one token at a time with the KV cache, against the
  full forward (a different reduction order, as in a serving engine).

No noise is injected: every ``delta`` measured here comes from real arithmetic. Sign convention
as in ``tailtheory.mismatch.logprob``: ``Delta = log p_infer - log p_train`` (TIM's ``delta_t = -Delta``).

Claims: M7.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from tailtheory.core.checks import check_finite, check_positive_int
from tailtheory.mismatch.logprob import logprob_mismatch, mismatch_bound, mismatch_eps

PATHS = ("bf16", "fp16", "kv")
"""The inference paths :func:`paired_logits` knows."""

SHARPEN_SCALE = 40.0
"""lm_head scale of M7's model: some positions reach p > 0.9, ~99% of tokens fall below 1e-3
(random init, V = 512, hidden 128)."""


def _check_input_ids(input_ids, vocab_size: int) -> torch.Tensor:
    t = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
    if t.is_floating_point() or t.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {t.dtype}")
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"input_ids must have shape (B, T) with B, T >= 1; got {tuple(t.shape)}")
    if t.min() < 0 or t.max() >= vocab_size:
        raise ValueError(f"input_ids must lie in [0, {vocab_size}) (the model's vocabulary); "
                         f"got range [{int(t.min())}, {int(t.max())}]")
    return t.long()


def _check_model(model) -> None:
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(f"model must be the float32 trainer (its parameters are "
                         f"{sorted(str(d) for d in dtypes)}); inference copies are made here")


@torch.no_grad()
def _full_forward(model, input_ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=input_ids, use_cache=False).logits  # (B, T, V)


@torch.no_grad()
def _lowp_forward(model, input_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    engine = copy.deepcopy(model).to(dtype)
    return engine(input_ids=input_ids, use_cache=False).logits.float()  # (B, T, V)


@torch.no_grad()
def _kv_forward(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Decode one token at a time, reusing the KV cache: position t sees keys 0..t."""
    out = model(input_ids=input_ids[:, :1], use_cache=True)
    cache, steps = out.past_key_values, [out.logits]
    for t in range(1, input_ids.shape[1]):
        out = model(input_ids=input_ids[:, t:t + 1], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        steps.append(out.logits)
    return torch.cat(steps, dim=1)  # (B, T, V)


_ENGINES: dict[str, Callable[[object, torch.Tensor], torch.Tensor]] = {
    "bf16": lambda m, ids: _lowp_forward(m, ids, torch.bfloat16),
    "fp16": lambda m, ids: _lowp_forward(m, ids, torch.float16),
    "kv": _kv_forward,
}


def paired_logits(model, input_ids, path: str = "bf16") -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer and inference logits of the same tokens: the real mismatch source of M7.

    Source: TIM (M7). ``delta = inference_logits - trainer_logits`` is the logit perturbation of
    M1-M3, produced by arithmetic, not injected.

    The trainer is ``model``'s float32 full forward. ``path``: ``"bf16"`` / ``"fp16"`` run a copy
    of ``model`` in that dtype; ``"kv"`` runs float32 incremental decoding with the KV cache.
    ``model`` is left unchanged (eval mode, float32).

    Shapes: input_ids (B, T) -> (trainer_logits, inference_logits), both float64 (B, T, V).
    """
    if path not in _ENGINES:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    _check_model(model)
    ids = _check_input_ids(input_ids, model.config.vocab_size)
    model.eval()
    z_train = _full_forward(model, ids).double()
    z_infer = _ENGINES[path](model, ids).double()
    check_finite(z_infer, f"inference_logits ({path})")  # fp16 can overflow on sharp models
    return z_train, z_infer


def sharpen(model, scale: float):
    """A copy of ``model`` whose lm_head weights are multiplied by ``scale``.

    A random-init LM is nearly uniform (logit std ~0.2); scaling the output layer spreads the
    logits so that some tokens reach p > 0.9 while most of the vocabulary falls below 1e-3:
    a real low-probability tail, as a trained LLM has. This is a deviation from training a
    model, recorded in ``paper_repro.md`` (M7).
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    sharp = copy.deepcopy(model)
    with torch.no_grad():
        sharp.get_output_embeddings().weight.mul_(float(scale))
    return sharp.eval()


def random_input_ids(vocab_size: int, B: int, T: int, seed: int = 0) -> torch.Tensor:
    """Uniform random token ids ``(B, T)``, reproducible from ``seed``."""
    V = check_positive_int(vocab_size, "vocab_size", 2)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (check_positive_int(B, "B"), check_positive_int(T, "T")),
                         generator=g)


HEAD_P, TAIL_P = 0.9, 1e-3
"""Probability cut-offs of the head / tail summaries of :func:`mismatch_envelope`."""

BOUND_RTOL, BOUND_ATOL = 1e-9, 1e-15
"""Slack allowed when counting tokens under M3's bound: float64 rounding only."""


def mismatch_envelope(trainer_logits, inference_logits, n_bins: int = 24,
                      per: str = "position") -> tuple[dict[str, float], "pd.DataFrame"]:
    """``|Delta|`` of every token against ``p``, and M3's bounds at the measured ``eps`` (M7).

    Source: TIM (M7), DVP (M2, M3). ``delta = z_infer - z_train``; ``eps`` per position is
    ``max_{j,k} |delta_j - delta_k| / 2`` (``per="token"``: the tighter per-token value). Every
    token must lie under the exact bound (a theorem given ``eps``).

    Returns ``(summary, df)``: summary numbers (``mean_abs``, ``max_abs``, ``head_mean_abs``
    (p > 0.9), ``tail_mean_abs`` (p < 1e-3), ``frac_under_exact``, ``frac_under_first``,
    ``frac_under_linear`` (M2 without its O(eps^2)), ``max_ratio_exact``) and a DataFrame with
    one row per log10-p bin.

    Shapes: trainer_logits, inference_logits (B, T, V) -> (dict, DataFrame with <= n_bins
    rows; empty bins are left out).
    """
    Delta = logprob_mismatch(trainer_logits, inference_logits).abs()  # (B, T, V)
    z = torch.as_tensor(trainer_logits, dtype=torch.float64)
    p = torch.softmax(z, -1)
    eps = mismatch_eps(torch.as_tensor(inference_logits, dtype=torch.float64) - z, per)
    eps = eps if per == "token" else eps[..., None].expand_as(p)  # (B, T, V)
    exact, first = mismatch_bound(p, eps, "exact"), mismatch_bound(p, eps, "first")
    linear = mismatch_bound(p, eps, "linear")
    def under(bound):
        return float((Delta <= bound * (1 + BOUND_RTOL) + BOUND_ATOL).double().mean())

    ratio = torch.where(exact > 0, Delta / exact, torch.zeros_like(Delta))
    summary = dict(
        n_tokens=Delta.numel(), mean_abs=float(Delta.mean()), max_abs=float(Delta.max()),
        head_mean_abs=float(Delta[p > HEAD_P].mean()) if (p > HEAD_P).any() else float("nan"),
        tail_mean_abs=float(Delta[p < TAIL_P].mean()) if (p < TAIL_P).any() else float("nan"),
        frac_head=float((p > HEAD_P).double().mean()),
        frac_tail=float((p < TAIL_P).double().mean()),
        mean_eps=float(eps.mean()), frac_under_exact=under(exact), frac_under_first=under(first),
        frac_under_linear=under(linear), max_ratio_exact=float(ratio.max()))
    return summary, _binned(p, Delta, exact, first, n_bins)


def _binned(p, Delta, exact, first, n_bins: int):
    """Per log10-p bin: token count, mean and max ``|Delta|``, mean of both bounds."""
    import pandas as pd

    logp = torch.log10(p.clamp_min(1e-300)).flatten()
    edges = torch.linspace(float(logp.min()), 0.0, n_bins + 1, dtype=torch.float64)
    idx = torch.bucketize(logp, edges[1:-1])
    cols = {"abs_Delta": Delta.flatten(), "bound_exact": exact.flatten(),
            "bound_first": first.flatten(), "p": p.flatten()}
    df = pd.DataFrame({k: v.numpy() for k, v in cols.items()}).assign(bin=idx.numpy())
    out = df.groupby("bin").agg(p_mid=("p", "median"), count=("p", "size"),
                                mean_abs_Delta=("abs_Delta", "mean"),
                                max_abs_Delta=("abs_Delta", "max"),
                                mean_bound_exact=("bound_exact", "mean"),
                                mean_bound_first=("bound_first", "mean"))
    return out.reset_index()
