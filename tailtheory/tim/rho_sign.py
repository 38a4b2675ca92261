"""V3's sign-free formalisation, reported beside V3's verdict (not replacing it): do the rollout's
importance ratios ``rho = pi_train / pi_roll`` of sampled tokens differ between tokens with a
positive and a negative advantage?

Source: TIM (Zhong et al., arXiv 2605.14220), V3. V3 as registered asks whether the
contribution ``C = -(r - 1) A`` *skews by the sign of A*; a skew of ``C`` needs the ratios
themselves to depend on the sign of ``A``. This asks that directly, without a direction:
per run, ``d = mean(log rho | A > 0) - mean(log rho | A < 0)`` over its dumped tokens, and the
two-sample Kolmogorov-Smirnov distance of the two samples of ``log rho``. Rule (fixed before the
learning testbed's runs were read): the distributions *differ* on a path when the seed mean of
``d`` is more than 2 standard errors from 0; the KS distance is reported beside it (tokens of
one response are not independent, so its p-value is not used).
"""

from __future__ import annotations

from tailtheory.experiments.comparison import Z_CRIT, mean_se


def rho_sign_numbers(df) -> dict:
    """A token table's ``log rho`` split by the sign of the advantage: count and mean of each
    part, their difference ``d`` and the two-sample KS distance (NaN when a part is empty)."""
    import numpy as np

    log_rho, adv = df["log_rho"].to_numpy(), df["adv"].to_numpy()
    pos, neg = np.sort(log_rho[adv > 0]), np.sort(log_rho[adv < 0])
    out = {"n_pos": int(len(pos)), "n_neg": int(len(neg))}
    if not len(pos) or not len(neg):
        return {**out, "mean_pos": float("nan"), "mean_neg": float("nan"), "d": float("nan"),
                "ks": float("nan")}
    grid = np.concatenate([pos, neg])
    cdf = lambda x: np.searchsorted(x, grid, side="right") / len(x)  # noqa: E731
    return {**out, "mean_pos": float(pos.mean()), "mean_neg": float(neg.mean()),
            "d": float(pos.mean() - neg.mean()), "ks": float(np.abs(cdf(pos) - cdf(neg)).max())}


def rho_sign_table(data, labels) -> dict:
    """Per label of ``labels`` (arms whose rows carry ``rho_sign``): the seed mean of ``d``, its
    standard error, the KS distances' mean and whether the two distributions differ; a label
    with fewer than 2 such rows (or none in ``data``) is left out."""
    out = {}
    for label in labels:
        rows = [r["rho_sign"] for r in data[label] if "rho_sign" in r] if label in data else []
        if len(rows) < 2:
            continue
        d, se = mean_se([r["d"] for r in rows])
        out[label] = {"d": d, "se": se, "ks": sum(r["ks"] for r in rows) / len(rows),
                      "seeds": len(rows), "differ": abs(d) > Z_CRIT * se}
    return out
