"""Where each number of the regime table comes from: stored studies where a recipe has them, the
regime probe for the rest.

Source: the quantities of :mod:`tailtheory.regime.quantities` (LOPTI, DVP, TRM, OTB, TIM).

:func:`regime_values` gives, per policy (``warm``, ``mid``), every quantity's value and the stored
measurement it was read from:

1. the regime probe of the recipe (``results/regime_<recipe>.json``,
   :mod:`tailtheory.regime.measure`): every quantity, for any recipe (:func:`probe_values`);
2. the recipe's own config: temperature and group size;
3. where :data:`STORED` names readers for the recipe, the stored measurements its verdicts rest
   on replace the probe's values (the ``learn`` recipe: :func:`learn_stored`). The probe draws
   the same batches as the stored LOPTI probes (its bins equal theirs, tested); the DVP and
   mismatch numbers of the studies are their runs' own steps ``0`` and ``steps / 2`` over 5
   seeds (the probe: 3 seeds x 4 batches of the one half-way policy).

A recipe added later (``matched``, the papers' regime) is one more column by its name: its probe
(an entry of :data:`tailtheory.regime.measure.COSTS`, stored by ``tailtheory measure
regime_NAME``), and a reader in :data:`STORED` once its studies are stored.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tailtheory.core.measurements import StaleMeasurement
from tailtheory.experiments.policies import grpo_config
from tailtheory.lopti.decisive.store import RECIPES as DECISIVE_RECIPES
from tailtheory.lopti.decisive.store import decisive_data, decisive_share
from tailtheory.regime.quantities import DECISIVE_SHARE, PATHS, RHOS

BIN_KEYS = ("tok_frac", "adv_abs")


def bin_values(count, tokens: int, adv_abs_sum) -> dict[str, float]:
    """LOPTI's bin quantities from pooled sums: token share per bin, the share below ``eta``
    (the first two bins: their upper edge is ``eta = 0.5``, tested), mean ``|A|`` per bin
    (``nan`` for an empty bin). Shapes: count (4,), adv_abs_sum (4,)."""
    count, adv = np.asarray(count, float), np.asarray(adv_abs_sum, float)
    out = {f"lopti/tok_frac_b{b}": float(count[b] / tokens) for b in range(4)}
    out["lopti/tok_frac_below_eta"] = float(count[:2].sum() / tokens)
    out.update({f"lopti/adv_abs_b{b}": float(adv[b] / count[b]) if count[b] else float("nan")
                for b in range(4)})
    return out


def group_reward_stats(rows: list[dict]) -> dict[str, float]:
    """Mean within-group reward variance (population variance of a group's ``G`` rewards) and
    the share of groups whose rewards are all equal, over every group of ``rows``."""
    groups = np.concatenate([np.asarray(r["reward"], float).reshape(-1, r["group_size"])
                             for r in rows])                                 # (groups, G)
    return {"reward/group_var": float(groups.var(1).mean()),
            "reward/zero_var_frac": float((groups.max(1) == groups.min(1)).mean())}


def probe_values(rows: list[dict]) -> dict[str, float]:
    """Every quantity from one policy's probe rows (:func:`tailtheory.regime.measure.batch_row`),
    pooled over rows: per-token quantities over all response tokens, per-response ones over all
    responses."""
    tokens = sum(r["tokens"] for r in rows)
    responses = sum(len(r["len"]) for r in rows)
    out = bin_values(np.sum([r["count"] for r in rows], 0), tokens,
                     np.sum([r["adv_abs_sum"] for r in rows], 0))
    out["rollout/len_mean"] = tokens / responses
    out.update(group_reward_stats(rows))
    for rho in RHOS:
        pruned = sum(r["pruned_sum"][str(rho)] for r in rows)
        out[f"dvp/pruned_mass_tok@{rho:g}"] = pruned / tokens
        out[f"dvp/pruned_mass_seq@{rho:g}"] = pruned / responses
    for path in PATHS:
        k3 = sum(r[f"k3_sum:{path}"] for r in rows)
        out[f"mismatch/k3_tok:{path}"] = k3 / sum(r[f"tokens:{path}"] for r in rows)
        out[f"mismatch/k3_seq:{path}"] = k3 / sum(r[f"responses:{path}"] for r in rows)
    return out


def lopti_values(data: dict, responses_per_batch: int) -> dict[str, float]:
    """Bin quantities, response length and the gradient shares of LOPTI Fig. 1(d) from one
    policy's stored LOPTI probes (``results/lopti_probes_learn.json``): ``||grad L_b|| /
    ||grad L_all||`` of the seed means, as the L4 check reports them."""
    from tailtheory.lopti.measurement import seed_values

    rows = data["batches"]
    tokens = sum(r["tokens"] for r in rows)
    adv_abs = np.sum([np.subtract(r["adv_sum_pos"], r["adv_sum_neg"]) for r in rows], 0)
    out = bin_values(np.sum([r["count"] for r in rows], 0), tokens, adv_abs)
    out["rollout/len_mean"] = tokens / (responses_per_batch * len(rows))
    sv = seed_values(data).values()
    norm_all = np.mean([v["norm_all"] for v in sv])
    norms = np.mean([v["norm_bins"] for v in sv], 0)
    out["lopti/grad_share_low"] = float(norms[0] / norm_all)
    out["lopti/grad_share_high"] = float(norms[-1] / norm_all)
    return out


def study_mean(m, label: str, step: int, fn: Callable[[dict, int], float]) -> float:
    """Mean over a study arm's seeds of ``fn(row, step)`` (a per-step series at ``step``)."""
    return float(np.mean([fn(r, step) for r in m[label]]))


def learn_stored() -> tuple[dict, dict]:
    """``({policy: {key: value}}, {key: source})`` from the ``learn`` recipe's stored
    measurements: the LOPTI probes (both policies), DVP's study (P5; its runs at step 0 and 60,
    5 seeds per rho) and the mismatch study (V3; the bf16 and fp8 recompute runs at step 0 and
    60, 5 seeds)."""
    from tailtheory.experiments.study import get_study
    from tailtheory.experiments.policies import MID_STEP
    from tailtheory.lopti import learn_probes

    probes, cfg = learn_probes.learn_probe_data("quick"), learn_probes.probe_config()
    steps = {"warm": 0, "mid": MID_STEP}
    dvp = get_study("dvp_learn").data("quick")
    mism = get_study("mismatch_learn").data("quick")
    values, source = {}, {}
    for policy, step in steps.items():
        v = lopti_values(probes[policy], cfg["prompts_per_step"] * cfg["group_size"])
        source.update(dict.fromkeys(v, "lopti_probes_learn"))
        for rho in RHOS:
            label = dvp.label(method="dvp", rho=rho)
            v[f"dvp/pruned_mass_tok@{rho:g}"] = study_mean(dvp, label, step,
                                                            lambda r, s: r["pruned_mass"][s])
            v[f"dvp/pruned_mass_seq@{rho:g}"] = study_mean(dvp, label, step,
                                                            lambda r, s: r["bias_bound"][s])
        for path in PATHS:
            label = mism.label(path=path, pi_old="recompute")
            v[f"mismatch/k3_tok:{path}"] = study_mean(mism, label, step, lambda r, s: r["k3"][s])
            v[f"mismatch/k3_seq:{path}"] = study_mean(
                mism, label, step, lambda r, s: r["k3"][s] * r["len_mean"][s])
        source.update({k: "dvp_learn" for k in v if k.startswith("dvp/")})
        source.update({k: "mismatch_learn" for k in v if k.startswith("mismatch/")})
        values[policy] = v
    return values, source


STORED: dict[str, Callable[[], tuple[dict, dict]]] = {"learn": learn_stored}
"""Recipe -> the reader of its stored studies (:func:`learn_stored`'s shape); a recipe without
one takes every value from its regime probe."""


def regime_values(recipe: str) -> dict[str, dict[str, tuple[float, str]]]:
    """``{policy: {key: (value, source)}}`` of ``recipe`` (module docstring). An unknown recipe
    is a ``ValueError`` listing the valid ones; a recipe not probed yet is a
    :class:`~tailtheory.core.measurements.StaleMeasurement` naming the command that probes it."""
    from tailtheory.experiments.recipes import check_recipe, recipe_config
    from tailtheory.regime.measure import POLICIES, regime_data

    check_recipe(recipe)
    probe, cfg = regime_data(recipe, "quick"), recipe_config(recipe)
    out = {p: {k: (v, f"regime_{recipe}") for k, v in probe_values(probe[p]).items()}
           for p in POLICIES}
    for p in POLICIES:
        out[p]["recipe/temperature"] = (float(cfg.temperature), f"recipe {recipe}")
        out[p]["recipe/group_size"] = (float(cfg.group_size), f"recipe {recipe}")
    if recipe in STORED:
        values, source = STORED[recipe]()
        for p in POLICIES:
            out[p].update({k: (v, source[k]) for k, v in values[p].items()})
    for p, share in decisive_values(recipe).items():
        out[p][DECISIVE_SHARE] = (share, f"decisive_{recipe}")
    return out


def decisive_values(recipe: str) -> dict[str, float]:
    """Policy -> the stored decisive share of ``recipe``'s lowest bin
    (``results/decisive_<recipe>.json``); empty where it is not measured."""
    if recipe not in DECISIVE_RECIPES:
        return {}
    try:
        data = decisive_data("quick", recipe)
    except StaleMeasurement:
        return {}
    return {p: v["decisive_share"]
            for p, v in decisive_share(data, grpo_config(recipe).group_size).items()}
