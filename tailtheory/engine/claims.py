"""Checks of the TIM claims that the rollout engine answers on its own (V1, V2; docs/claims.md).

V1: the ``exact`` rollout path reports log-probs bitwise equal to the trainer's, so the k3
mismatch KL is exactly 0. V2: the ``bf16`` / ``fp16`` copies and KV-cache decoding give a real
mismatch on the tokens the engine samples: small on average, with a heavy maximum.

Both run the engine on M7's model (random-init tiny LM, lm_head sharpened so it has a tail) with
random prompts; the training-run claims (V3-V5) need the GRPO notebooks.
"""

from __future__ import annotations

import torch

from tailtheory.mismatch.logprob import k3
from tailtheory.core.registry import Evidence, Verdict, pick, register

V2_MEAN_SMALL = 0.05
"""V2: mean |delta| over sampled tokens below this counts as small (fixed before measuring)."""
V2_MAX_HEAVY = 0.1
"""V2: a max |delta| above this counts as a heavy maximum (a tenth of O(1))."""


def _engine_batches(path: str, profile: str, **cfg) -> list[tuple]:
    """``(rollout logp, trainer logp, mask)`` of sampled responses on ``path``, per seed: the
    engine's measurement (:func:`tailtheory.engine.rollout.sampled_logprobs`) on M7's model."""
    from tailtheory.engine.rollout import RolloutConfig, sampled_logprobs
    from tailtheory.mismatch.real import M7_VOCAB, m7_model

    rc = RolloutConfig(path=path, max_new_tokens=pick(profile, 16, 48), **cfg)
    return sampled_logprobs(m7_model(M7_VOCAB), rc, seeds=range(pick(profile, 2, 6)),
                            n_prompts=pick(profile, 16, 64))


@register("V1", paper="TIM", statement="the exact rollout path's log-probs are bitwise the "
          "trainer's; k3 mismatch KL exactly 0", expected=Verdict.HOLDS)
def _v1(profile: str) -> Evidence:
    settings = [{}, {"temperature": 0.7}, {"prune_rule": "min_p", "rho": 1e-4}]
    n_tok = unequal = 0
    k3_max = 0.0
    for cfg in settings:
        for roll, train, mask in _engine_batches("exact", profile, **cfg):
            n_tok += int(mask.sum())
            unequal += int((roll != train)[mask].sum())
            k3_max = max(k3_max, float(k3(train - roll)[mask].abs().max()))
    ok = unequal == 0 and k3_max == 0.0
    return Evidence(Verdict.HOLDS if ok else Verdict.REFUTED,
                    {"tokens": n_tok, "tokens_not_bitwise_equal": unequal, "max_k3": k3_max,
                     "settings": len(settings)},
                    "torch.equal on every sampled token: plain, temperature 0.7, min-p pruning")


@register("V2", paper="TIM", statement="bf16 / fp16 rollout and KV-cache decoding against the "
          "fp32 trainer: mean abs(delta) small, max heavy", expected=Verdict.TOY_SCALE)
def _v2(profile: str) -> Evidence:
    numbers: dict[str, float] = {}
    for path in ("bf16", "fp16", "kv"):
        d = torch.cat([(roll - train)[mask] for roll, train, mask in
                       _engine_batches(path, profile)]).abs().double()
        numbers[f"{path}/mean_abs"] = float(d.mean())
        numbers[f"{path}/max_abs"] = float(d.max())
        numbers[f"{path}/tokens"] = int(d.numel())
    seen = (numbers["bf16/mean_abs"] < V2_MEAN_SMALL and numbers["bf16/max_abs"] > V2_MAX_HEAVY)
    return Evidence(Verdict.TOY_SCALE if seen else Verdict.NOT_REPRODUCED, numbers,
                    f"sampled tokens of a random-init V = 512 model with a sharpened head; small "
                    f"= mean < {V2_MEAN_SMALL}, heavy = max > {V2_MAX_HEAVY} (bf16)")
