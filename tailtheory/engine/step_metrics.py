"""The numbers of one training step that no method reports: the keys of ``metrics.jsonl``.

Source: GRPO's step (``engine/trainer.py``). :data:`METRIC_KEYS` names every key a line has
besides its methods' own; :func:`monitor_metrics` computes the monitors of a step's record
(rewards, lengths, entropy, the mismatch ``log rho = log pi_train - log pi_roll`` of TIM V2 and
TRM T12, TRM's acceptance, DVP's pruned mass), :func:`pass_mean` averages the update passes'
loss metrics, :func:`rel_change` measures the update's size.

Shapes: ``B`` responses of ``T`` tokens; per-token ``(B, T)``.
"""

from __future__ import annotations

import torch

from tailtheory.core.estimators import k1, k3
from tailtheory.core.stats import masked_mean
from tailtheory.engine.methods import LOSS_METRICS

METRIC_KEYS = {
    "step": "0-based step index",
    "reward/mean": "mean task reward of the step's responses",
    "reward/accuracy": "fraction of responses with the correct answer",
    "reward/format": "fraction of responses in the task's answer format",
    "rollout/tokens": "response tokens of the step (up to and including EOS)",
    "rollout/len_mean": "mean response tokens per sequence",
    "rollout/len_max": "max response tokens of a sequence",
    "rollout/len_median": "median response tokens per sequence",
    "policy/entropy": "mean entropy of pi_old over response tokens",
    "mismatch/abs_mean": "mean |log rho| over response tokens, log rho = log pi_train - "
                         "log pi_roll (V2)",
    "mismatch/abs_max": "max of the same",
    "mismatch/k1": "mean k1 = -log rho, rho = pi_train / pi_roll (T12)",
    "mismatch/k3": "mean k3 = rho - 1 - log rho (T12)",
    "trm/accept_rate": "TRM's acceptance as a monitor (k2/k3 of log pi_train / pi_roll); the trm "
                       "correction's own rate is trm/kept_frac",
    "dvp/pruned_mass": "mean pruned mass of the trainer's distribution (0 without dvp)",
    "adv/abs_mean": "mean |advantage| over response tokens (before reweighting)",
    "loss/policy": "clipped-surrogate loss (mean over passes)",
    "loss/clipfrac": "fraction of active tokens where the clip binds (mean over passes)",
    "loss/ratio_mean": "mean pi_new / pi_old over active tokens (mean over passes)",
    "loss/approx_kl": "mean k3 of log pi_new / pi_old over active tokens (mean over passes)",
    "loss/active_frac": "fraction of response tokens in the pass with a non-zero weight",
    "grad/norm": "parameter-gradient norm before clipping (mean over passes)",
    "adv/zero_var_frac": "fraction of groups whose G rewards are all equal (no group-baseline "
                         "signal)",
    "update/rel_size": "relative size of the step's update, ||theta_after - theta_before|| / "
                       "||theta_before||",
    "eval/accuracy": "sampled accuracy on eval_n held-out problems before the step's update "
                     "(every eval_every steps from step 0; null otherwise)",
    "time/rollout_s": "wall-clock seconds of the rollout",
    "time/step_s": "wall-clock seconds of the step",
}
"""Keys every line of ``metrics.jsonl`` has; a line has exactly these plus the keys its methods
declare (:attr:`~tailtheory.engine.registry.MethodSpec.metric_keys`)."""



def monitor_metrics(rec, flat: torch.Tensor) -> dict:
    """The step's metrics that no stage reports: rewards, lengths, entropy, mismatch, TRM.

    ``rec``: the step's :class:`~tailtheory.engine.trainer.StepRecord`; ``flat (n_groups,)``:
    :func:`zero_variance_groups` of its rewards (computed once per step by the trainer).
    """
    b, rb, rw = rec.b, rec.rb, rec.rewards
    m, log_rho = b.mask, b.log_rho.double()                           # log pi_train / pi_roll
    lens = m.sum(-1)                                                    # (B,)
    return {"reward/mean": float(b.rewards.mean()),
            "reward/accuracy": sum(r.correct for r in rw) / len(rw),
            "reward/format": sum(r.format_ok for r in rw) / len(rw),
            "rollout/tokens": int(rb.mask.sum()), "rollout/len_mean": float(lens.double().mean()),
            "rollout/len_max": int(lens.max()),
            "rollout/len_median": float(lens.double().median()),
            "policy/entropy": masked_mean(rec.stats["entropy"], m),
            "mismatch/abs_mean": masked_mean(log_rho.abs(), m),
            "mismatch/abs_max": float((log_rho.abs() * m).max()),
            "mismatch/k1": masked_mean(k1(log_rho), m), "mismatch/k3": masked_mean(k3(log_rho), m),
            "trm/accept_rate": float(b.trm_accept.double().mean()),
            "dvp/pruned_mass": 0.0 if b.keep is None else masked_mean(rec.stats["pruned_mass"], m),
            "adv/zero_var_frac": float(flat.double().mean())}


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``(n_groups,)`` bool: the groups whose rewards are all equal (a group baseline gives them
    zero advantage). Shapes: rewards (B,), group_ids (B,) with ids ``0 .. n_groups - 1``."""
    n = int(group_ids.max()) + 1
    lo = torch.full((n,), float("inf"), dtype=rewards.dtype, device=rewards.device)
    hi = torch.full((n,), float("-inf"), dtype=rewards.dtype, device=rewards.device)
    lo = lo.scatter_reduce(0, group_ids, rewards, "amin")
    hi = hi.scatter_reduce(0, group_ids, rewards, "amax")
    return lo == hi


def rel_change(before: list[torch.Tensor], model) -> float:
    """``||theta - before|| / ||before||`` over every parameter (float64 sums)."""
    num = sum(float((p.detach().double() - b.double()).square().sum())
              for p, b in zip(model.parameters(), before))
    den = sum(float(b.double().square().sum()) for b in before)
    return (num / den) ** 0.5 if den > 0 else 0.0


def pass_mean(per_pass: list[dict]) -> dict:
    """Loss metrics averaged over the passes with a non-zero weight on some token; grad norm
    over every pass run (empty passes are never run); zeros when no pass ran."""
    if not per_pass:
        return {**{k: 0.0 for k in LOSS_METRICS}, "grad/norm": 0.0}
    live = [m for m in per_pass if m["loss/active_frac"] > 0] or per_pass
    out = {k: sum(m[k] for m in live) / len(live) for k in live[0]}
    out["grad/norm"] = sum(m["grad/norm"] for m in per_pass) / len(per_pass)
    return out
