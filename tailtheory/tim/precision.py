"""FP16 against BF16 (claim V7): the same sampled tokens scored in float32 and in 16 bits.

Source: Qi et al. (arXiv 2510.26788) report that reverting RL rollouts from BF16 to FP16 removes
most of the training-inference mismatch BF16 creates. BF16 keeps 8 significand bits, FP16 11:
BF16's unit roundoff is 8x FP16's, so a mismatch KL that grows as the square of the rounding
error (k3 ~ eps^2 for small log-ratios) predicts a BF16 / FP16 ratio of about 64.

:func:`precision_mismatch` samples responses with the float32 ``kv`` path (so every comparison
scores the same tokens), then scores every response token with the float32 trainer (the model's
own forward), the model cast to bf16 and to fp16 (``copies.inference_copy``: the Hugging Face
forward in that dtype) and the engine's own forward in bf16 and fp16
(:class:`~tailtheory.engine.rollout.fast.InferenceEngine`), and measures the per-token
``k3 = exp(d) - 1 - d`` of two settings:

- ``vs_float32``: the 16-bit engine against the float32 trainer (the toolkit's rollout paths);
- ``same_dtype``: the engine against the model's own forward in the same dtype (the paper's
  setting: trainer and sampler both in the 16-bit dtype, two implementations of one forward).

Per setting: the mean k3 of each dtype, their ratio bf16 / fp16 with a percentile bootstrap
interval over responses (:func:`ratio_interval`), and the mean k3 within the bins of ``1 - p``
(``p`` the float32 probability of the token). Shapes: ``B`` responses, ``T`` response tokens.

On the model-size ladder: :func:`tailtheory.ladder.mismatch.measure_precision`
(``tailtheory ladder precision``).
"""

from __future__ import annotations

import torch

from tailtheory.core.checks import check_positive_int
from tailtheory.core.estimators import k3
from tailtheory.engine.devices import model_generator
from tailtheory.engine.policy_forward import response_logits
from tailtheory.engine.rollout.copies import inference_copy
from tailtheory.engine.rollout.engine import FAST, RolloutConfig, RolloutEngine
from tailtheory.engine.rollout.fast import InferenceEngine

DTYPES = ("bf16", "fp16")
SETTINGS = ("vs_float32", "same_dtype")
PREDICTED_RATIO = 64.0
"""``(2^-8 / 2^-11)^2``: the BF16 / FP16 ratio of a k3 that scales with the unit roundoff squared."""

ONE_MINUS_P_EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Bins of ``1 - p`` the k3 is split by (right-closed, 0 in the first)."""


def _logp(z: torch.Tensor, rb) -> torch.Tensor:
    """``(B, T)`` log-probs of the response tokens from their logits ``z (B, T, V)``."""
    return torch.log_softmax(z.float(), -1).gather(-1, rb.response[..., None])[..., 0]


@torch.no_grad()
def scored(model, rb) -> dict[str, torch.Tensor]:
    """The response tokens' log-probs ``(B, T)`` under ``float32`` (the trainer's own forward,
    ``response_logits``), ``hf_<dtype>`` (the same forward of the cast copy) and ``fast_<dtype>``
    for each of :data:`DTYPES`."""
    P, T = rb.prompt_len, rb.response.shape[1]
    out = {"float32": _logp(response_logits(model, rb), rb)}
    for d in DTYPES:
        out[f"hf_{d}"] = _logp(response_logits(inference_copy(model, d), rb), rb)
        z = InferenceEngine(model, d).full_logits(rb.input_ids, rb.attention_mask)
        out[f"fast_{d}"] = _logp(z[:, P - 1:P + T - 1], rb)
    return out


def ratio_interval(num: torch.Tensor, den: torch.Tensor, mask: torch.Tensor,
                   n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple:
    """``(ratio, low, high)``: the ratio of the mean per-token ``num`` to the mean ``den`` over
    ``mask`` (``(B, T)`` each), and its percentile bootstrap interval resampling responses
    (rows). ``nan`` when ``den`` sums to 0 (two forwards that agree bitwise), and ``nan`` bounds
    when it does in some resample."""
    check_positive_int(n_boot, "n_boot")
    sn, sd = (num * mask).sum(1).double().cpu(), (den * mask).sum(1).double().cpu()   # (B,)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(sn), (n_boot, len(sn)), generator=g)
    boot = sn[idx].sum(1) / sd[idx].sum(1)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(boot, q).tolist() if torch.isfinite(boot).all() else \
        (float("nan"), float("nan"))
    return float(sn.sum() / sd.sum()), low, high


def precision_mismatch(model, task, n_prompts: int = 64, seed: int = 0,
                       prompt_seed: int = 101, per_response: bool = False) -> dict:
    """V7's one-step numbers on ``model`` speaking ``task`` (module docstring): responses to
    ``n_prompts`` problems of generator seed ``prompt_seed`` sampled in float32 (temperature 1,
    generator seed ``seed``). -> JSON-ready dict. ``per_response``: each setting also holds
    every response's k3 sum per dtype and its token count (``sums``), from which any interval
    of the ratio is computed again without a forward."""
    problems = task.problems(check_positive_int(n_prompts, "n_prompts"), seed=prompt_seed)
    eng = RolloutEngine(model, RolloutConfig(path="kv", backend=FAST, temperature=1.0,
                                             max_new_tokens=task.max_response_len))
    rb = eng.generate([p.prompt_ids for p in problems], eos_id=task.stop_ids, pad_id=task.pad_id,
                      generator=model_generator(model, seed))
    lp = scored(model, rb)
    mask = rb.mask.double()
    one_minus_p = 1 - lp["float32"].exp().double()
    bins = torch.bucketize(one_minus_p, torch.tensor(ONE_MINUS_P_EDGES[1:-1], dtype=torch.float64,
                                                     device=one_minus_p.device))
    out = {"responses": int(rb.mask.shape[0]), "tokens": int(rb.mask.sum()),
           "bins": list(ONE_MINUS_P_EDGES), "settings": {}}
    for setting in SETTINGS:
        k = {d: k3((lp[f"fast_{d}"] - (lp["float32"] if setting == "vs_float32"
                                      else lp[f"hf_{d}"])).double()) for d in DTYPES}
        ratio, low, high = ratio_interval(k["bf16"], k["fp16"], mask, seed=seed)
        per_bin = {d: [float((k[d] * mask * (bins == b)).sum()
                             / ((mask * (bins == b)).sum().clamp_min(1)))
                       for b in range(len(ONE_MINUS_P_EDGES) - 1)] for d in DTYPES}
        out["settings"][setting] = {
            "k3": {d: float((k[d] * mask).sum() / mask.sum()) for d in DTYPES},
            "ratio": ratio, "low": low, "high": high, "k3_by_bin": per_bin,
            "tokens_by_bin": [int((mask * (bins == b)).sum())
                              for b in range(len(ONE_MINUS_P_EDGES) - 1)]}
        if per_response:
            out["settings"][setting]["sums"] = {
                **{d: (k[d] * mask).sum(1).tolist() for d in DTYPES},
                "tokens": mask.sum(1).long().tolist()}
    return out
