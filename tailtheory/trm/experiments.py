"""Experiments behind TRM's claims: exact errors of tabular pairs next to every bound.

Source: TRM (T1-T8, T10-T13). Pure functions returning pandas DataFrames, shared by the
claim checks (:mod:`tailtheory.trm.claims`) and notebook 02.

A *pair* is ``pi_roll`` (random logits of a given sharpness) and ``pi_theta`` (its logits plus
Gaussian noise of a given scale on all contexts, ``dense``, or on a small fraction, ``sparse``).
Unless a reward is given, each pair is scored with :func:`worst_case_reward`, the reward in
``[0, 1]`` that maximises ``|Error|``: a bound that holds there holds for every reward.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pandas as pd
import torch

from tailtheory.core.registry import pick
from tailtheory.core.tabular import TabularPolicy, random_rewards
from tailtheory.trm.exact import divergences, exact_report, worst_case_reward
from tailtheory.trm.bounds import BOUND_KEYS, tightest_bound, trust_region_bounds
from tailtheory.trm.mask import acceptance_prob, simulate_acceptance

SPARSE_FRAC = 0.02
"""Fraction of contexts perturbed in a sparse pair (few, mostly rare, contexts)."""

ROUNDING_RTOL = 1e-12
"""``Error`` is a difference of sums of size ``1 + |J| + |L'|``; rounding allows this relative
slack (``num_tol`` of a row) before a bound counts as violated."""

RATIO_FLOOR = 1e-9
"""Bounds below this are left out of the tightness ratio ``|Error| / bound`` (rounding noise)."""


T10_WITNESSES = {
    "classical": (0.6311, 0.6156, 0.4757, -1.8234, 1.3796, 0.7307,
                  -0.7653, 1.0330, 0.6082, 0.4196, 0.0424, 0.9138),
    "adaptive": (0.2596, -0.3758, -0.6749, -5.0080, 3.2963, 3.0233,
                 -0.3326, 0.6423, 0.2366, -0.1526, 2.3835, -0.7636),
    "pm_tv": (2.6891, 2.6959, 0.8429, 0.3436, -1.3920, -1.1800,
              2.3414, 2.3887, 2.4340, 1.9766, -0.0242, 0.2286),
}
"""Pairs (``V = T = 2``) where ``|Error|`` (worst-case reward) nearly equals the *halved* bound
named by the key; found by Nelder-Mead on ``|Error| / halved bound`` from random starts and
rounded to 4 decimals. Logits of ``pi_roll`` (rows: empty prefix, ``(0,)``, ``(1,)``) then of
``pi_theta``. At the classical witness the coupling bound (T6) equals the classical one."""


def witness_pair(x) -> tuple[TabularPolicy, TabularPolicy]:
    """``(pi_roll, pi_theta)`` over ``V = T = 2`` from 12 logits (roll's 3 rows, then theta's)."""
    z = torch.as_tensor(x, dtype=torch.float64).reshape(2, 3, 2)
    roll = TabularPolicy(z[0], V=2, T=2)
    return roll, roll.with_logits(z[1])


def witness_ratio(key: str, bound: str | None = None, prefix: str = "half") -> float:
    """``|Error| / bound`` at the pinned witness ``T10_WITNESSES[key]`` (worst-case reward).

    Source: TRM (T10). ``bound`` defaults to ``key``; ``prefix`` is ``half`` (the halved bounds of
    T10) or ``bound`` (the stated ones). A ratio near 1 shows the bound is attained there.
    """
    row = pair_record(*witness_pair(T10_WITNESSES[key]))
    return row["abs_error"] / row[f"{prefix}/{bound or key}"]


def one_thread(fn):
    """Run ``fn`` with one intra-op torch thread, restoring the setting after: these tensors are
    tiny, and on a loaded machine thread hand-offs cost ten times the arithmetic."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(before)
    return wrapped


def pair_record(roll: TabularPolicy, theta: TabularPolicy, R=None) -> dict[str, object]:
    """One row: the exact ``error`` (worst-case reward unless ``R``), the divergences, every
    bound of T1-T8 (``bound/KEY``) and their halved versions (``half/KEY``, T10)."""
    R = worst_case_reward(roll, theta) if R is None else R
    rep = exact_report(roll, theta, R)
    mean_tv = rep.pop("mean_tv")
    T = roll.T
    args = dict(delta=rep["delta"], eps=rep["eps"], seq_kl=min(rep["seq_kl"], T * rep["delta"]),
                seq_tv=rep["seq_tv"], mean_tv=mean_tv)
    full = trust_region_bounds(T, **args)
    half = trust_region_bounds(T, halved=True, **args)
    no_adaptive = {k: v for k, v in full.items() if k != "adaptive"}
    size = 1.0 + abs(rep["J_roll"]) + abs(rep["J_theta"]) + abs(rep["surrogate"])
    row = {"V": roll.V, "T": T, "eos": -1 if roll.eos is None else roll.eos, **rep,
           "abs_error": abs(rep["error"]), "num_tol": ROUNDING_RTOL * size,
           "tightest": tightest_bound(full), "tightest_T2_T6": tightest_bound(no_adaptive)}
    row.update({f"bound/{k}": v for k, v in full.items()})
    row.update({f"half/{k}": v for k, v in half.items()})
    return row


def make_pair(V: int, T: int, eos: int | None, sharpness: float, scale: float, frac: float,
              seed: int) -> tuple[TabularPolicy, TabularPolicy]:
    """``(pi_roll, pi_theta)``: random logits, then noise on a fraction ``frac`` of contexts."""
    roll = TabularPolicy.random(V, T, eos=eos, sharpness=sharpness, seed=seed)
    return roll, roll.perturbed(scale, frac=frac, seed=seed + 7919)


def make_stationary_pair(V: int, T: int, sharpness: float, scale: float,
                         seed: int) -> tuple[TabularPolicy, TabularPolicy]:
    """``(pi_roll, pi_theta)`` with the same logits in every context: the per-step divergences
    (``delta``, ``eps``) do not depend on ``T`` and ``D^seq_KL = T delta``, so each bound grows
    with its nominal exponent in ``T``."""
    g = torch.Generator().manual_seed(seed)
    z0 = torch.randn(V, generator=g, dtype=torch.float64) * sharpness
    z1 = z0 + torch.randn(V, generator=g, dtype=torch.float64) * scale
    roll = TabularPolicy.random(V, T, sharpness=0.0)
    P = roll.logits.shape[0]
    return roll.with_logits(z0.expand(P, V).clone()), roll.with_logits(z1.expand(P, V).clone())


@one_thread
def random_pair_sweep(n: int, seed: int = 0, max_T: int = 12) -> pd.DataFrame:
    """``n`` random pairs, dense and sparse, ``V`` in 2..4 (``V=2`` up to ``T = max_T``), with
    and without EOS, sharpness 0.3..10, perturbation scale 0.01..8; one :func:`pair_record`
    each, with the arguments of :func:`make_pair` (``kind, sharpness, scale, frac, pair_seed``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        V = int(rng.integers(2, 5))
        T = int(rng.integers(1, max_T + 1)) if V == 2 else int(rng.integers(1, 7 if V == 3 else 6))
        eos = None if rng.random() < 0.5 else int(rng.integers(0, V))
        sharp = float(rng.choice([0.3, 1.0, 3.0, 10.0]))
        scale = float(rng.choice([0.01, 0.1, 0.5, 2.0, 8.0]))
        kind = "dense" if rng.random() < 0.5 else "sparse"
        frac = 1.0 if kind == "dense" else SPARSE_FRAC
        pair_seed = int(rng.integers(0, 2**31 - 1))
        roll, theta = make_pair(V, T, eos, sharp, scale, frac, pair_seed)
        rows.append({"kind": kind, "sharpness": sharp, "scale": scale, "frac": frac,
                     "pair_seed": pair_seed, **pair_record(roll, theta)})
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=2)
def sweep_table(profile: str) -> pd.DataFrame:
    """The random-pair sweep of a claims profile (``quick``: 80 pairs up to ``T = 12``;
    ``thorough``: 1500 up to 14), cached: T1-T8 and T10 read the same table. Source: TRM."""
    return random_pair_sweep(pick(profile, 80, 1500), seed=0, max_T=pick(profile, 12, 14))


def slack_table(df: pd.DataFrame, prefix: str = "bound") -> pd.DataFrame:
    """Per bound: ``violations`` (slack below ``-num_tol``), the minimum slack ``bound - |Error|``,
    the largest ratio ``|Error| / bound`` (tightness; bounds above ``RATIO_FLOOR``) and how often
    it is the smallest of T2-T7 (``share_min``) and of T2-T6 (``share_min_T2_T6``)."""
    out = []
    for k in BOUND_KEYS:
        b = df[f"{prefix}/{k}"]
        slack = b - df["abs_error"]
        big = b > RATIO_FLOOR
        ratio = (df["abs_error"][big] / b[big]).max() if big.any() else 0.0
        out.append({"bound": k, "violations": int((slack < -df["num_tol"]).sum()),
                    "min_slack": float(slack.min()), "max_ratio": float(ratio),
                    "share_min": float((df["tightest"] == k).mean()),
                    "share_min_T2_T6": float((df["tightest_T2_T6"] == k).mean())})
    return pd.DataFrame(out)


@one_thread
def error_vs_T(Ts, V: int = 2, sharpness: float = 1.0, scale: float = 0.3, frac: float = 1.0,
               seeds=range(3), reward: str = "worst", stationary: bool = False) -> pd.DataFrame:
    """T13: exact ``|Error|`` and every bound as ``T`` grows, for pairs of fixed perturbation
    scale (``stationary``: one logit pair shared by all contexts, see
    :func:`make_stationary_pair`). ``reward`` is ``"worst"`` (:func:`worst_case_reward`) or
    ``"random"``."""
    if reward not in ("worst", "random"):
        raise ValueError(f"reward must be 'worst' or 'random', got {reward!r}")
    rows = []
    for T, seed in itertools.product(Ts, seeds):
        roll, theta = (make_stationary_pair(V, T, sharpness, scale, seed) if stationary
                       else make_pair(V, T, None, sharpness, scale, frac, seed))
        R = None if reward == "worst" else random_rewards(roll, seed)
        rows.append({"seed": seed, "reward": reward, "frac": frac, "stationary": stationary,
                     **pair_record(roll, theta, R)})
    return pd.DataFrame(rows)


def growth_exponent(T, y) -> float:
    """Least-squares slope of ``log y`` against ``log T`` (the exponent ``a`` of ``y ~ T^a``)."""
    T, y = np.asarray(T, dtype=float), np.asarray(y, dtype=float)
    keep = y > 0
    if keep.sum() < 2:
        raise ValueError("growth_exponent needs at least two positive values of y")
    return float(np.polyfit(np.log(T[keep]), np.log(y[keep]), 1)[0])


def kl_gap(kl_target: float) -> float:
    """The logit gap ``g`` with ``KL(uniform || softmax(0, g)) = kl_target`` over two tokens:
    that KL is ``log(1 + e^g) - g/2 - log 2 = log cosh(g/2)``, so ``g = 2 acosh(e^kl_target)``."""
    if not kl_target >= 0:
        raise ValueError(f"kl_target must be >= 0, got {kl_target}")
    return 2.0 * math.acosh(math.exp(kl_target))


def uniform_kl_pair(T: int, delta: float) -> tuple[TabularPolicy, TabularPolicy]:
    """``(pi_roll, pi_theta)`` over ``V = 2``: ``pi_roll`` uniform in every context and
    ``pi_theta`` the same two logits ``(0, g)`` everywhere, ``KL(pi_roll || pi_theta) = delta``
    in each context (:func:`kl_gap`). So the per-step divergences are fixed (``delta``,
    ``eps = D_TV``), ``D^seq_KL = T delta``, and only ``T`` and ``delta`` set the bounds."""
    roll = TabularPolicy.random(2, T, sharpness=0.0)
    z = torch.zeros_like(roll.logits)
    z[:, 1] = kl_gap(delta)
    return roll, roll.with_logits(z)


@one_thread
def uniform_kl_table(Ts, delta: float) -> pd.DataFrame:
    """:func:`pair_record` (exact ``|Error|`` at the worst-case reward, every bound of T1-T8 and
    their halves) of :func:`uniform_kl_pair` for each ``T`` of ``Ts``. Source: TRM (T1-T8,
    T10, T13)."""
    return pd.DataFrame([{"delta_target": delta, **pair_record(*uniform_kl_pair(T, delta))}
                         for T in Ts])


def rare_context_pair(p_rare: float, kl_target: float = 1.0) -> tuple[TabularPolicy, TabularPolicy]:
    """T11's counterexample: ``V = 2``, ``T = 2``; under ``pi_roll`` the first token is 1 with
    probability ``p_rare``, and only after it does ``pi_theta`` differ, with
    ``KL(pi_roll || pi_theta) = kl_target`` there. So ``delta = kl_target`` while
    ``D^seq_KL = p_rare * kl_target -> 0``."""
    if not 0 < p_rare < 1:
        raise ValueError(f"p_rare must lie in (0, 1), got {p_rare}")
    # roll at the rare context is uniform; theta puts logit gap g there, KL(u || q) = kl_target
    g = kl_gap(kl_target)
    z_roll = torch.zeros(3, 2, dtype=torch.float64)
    z_roll[0, 1] = math.log(p_rare / (1 - p_rare))                     # row 0: empty prefix
    z_theta = z_roll.clone()
    z_theta[2, 1] = g                                                   # row 2: prefix (1,)
    roll = TabularPolicy(z_roll, V=2, T=2)
    return roll, roll.with_logits(z_theta)


def t11_family(ps) -> pd.DataFrame:
    """T11: ``delta`` and ``D^seq_KL`` along the rare-context family."""
    rows = []
    for p in ps:
        div = divergences(*rare_context_pair(p))
        rows.append({"p_rare": p, "delta": div["delta"], "seq_kl": div["seq_kl"]})
    return pd.DataFrame(rows)


def acceptance_table(qs, Ts, B: int, seed: int = 0) -> pd.DataFrame:
    """T12 length bias: TRM's max-filter acceptance ``(1 - q)^T`` next to its simulation.

    Source: TRM (T12). One row per ``(q, T)``: ``theory`` (:func:`~tailtheory.trm.mask.
    acceptance_prob`), ``simulated`` on ``B`` sequences (seed ``seed + T``) and ``z``, the
    deviation in standard errors ``sqrt(p (1 - p) / B)``.
    """
    rows = []
    for q, T in itertools.product(qs, Ts):
        p = acceptance_prob(q, T).item()
        sim = simulate_acceptance(q, T, B, seed=seed + T)
        rows.append({"q": q, "T": T, "theory": p, "simulated": sim,
                     "z": abs(sim - p) / math.sqrt(max(p * (1 - p), 1e-12) / B)})
    return pd.DataFrame(rows)


def bounds_vs_T(Ts, regimes: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Every bound of T1-T8 against ``T`` for named regimes of per-step divergences
    (``delta``, optional ``eps``, ``seq_kl_per_step``, ``mean_tv``: a constant per step)."""
    rows = []
    for (name, r), T in itertools.product(regimes.items(), Ts):
        seq_kl = r.get("seq_kl_per_step", r["delta"]) * T
        mean_tv = torch.full((T,), r["mean_tv"]) if "mean_tv" in r else None
        b = trust_region_bounds(T, r["delta"], r.get("eps"), seq_kl=seq_kl, mean_tv=mean_tv)
        rows += [{"regime": name, "T": T, "bound": k, "value": v} for k, v in b.items()]
    return pd.DataFrame(rows)


__all__ = ["SPARSE_FRAC", "ROUNDING_RTOL", "RATIO_FLOOR", "T10_WITNESSES", "witness_pair",
           "witness_ratio", "acceptance_table", "one_thread", "pair_record",
           "make_pair", "make_stationary_pair", "kl_gap", "uniform_kl_pair", "uniform_kl_table",
           "random_pair_sweep", "sweep_table", "slack_table", "error_vs_T",
           "growth_exponent", "rare_context_pair", "t11_family", "bounds_vs_T"]
