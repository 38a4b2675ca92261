"""The regime of each training claim: its driving quantities, the papers' values, the ratio rule.

Source: LOPTI (arXiv 2505.12929), DVP (arXiv 2512.23087), TRM (arXiv 2512.23075), OTB (arXiv
2602.07078), TIM (arXiv 2605.14220); the values the project quotes from them (``docs/claims.md``,
``paper_repro.md``).

A :class:`Quantity` is a dimensionless number that drives a claim (``claims``): the share of
sampled response tokens in a ``pi_old`` bin, the pruned mass, the mismatch ``k3``, the response
length. ``paper`` is the paper's value where the project has one, with where it comes from
(``cite``); ``None`` where it has none, shown as :data:`NOT_STATED` and never filled in by
guess. The testbed's value over the paper's is :func:`ratio`; a quantity is in the paper's
regime when that ratio lies within :data:`BAND` ("within 2x"), and a claim whose
verdict is negative (NOT-REPRODUCED or REFUTED) while one of its quantities lies outside is
*regime-limited* (:func:`reading`): the verdict cannot be told apart from "not in this regime".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailtheory.core.registry import Verdict
from tailtheory.engine.types import MethodParams
from tailtheory.lopti.probes import LOPTI_FIG1A  # noqa: F401 (LOPTI's numbers live with LOPTI)
from tailtheory.pruning.training import P5_RHOS
from tailtheory.tim.training import PATHS as TIM_PATHS

NOT_STATED = "not stated"
"""The paper cell of a quantity without a paper value: no value the project has read in the paper
(the stored copies of the papers reachable here are their opening pages only, so a value in a
figure the claims and the ledger do not quote stays unread)."""

BAND = (0.5, 2.0)
"""Testbed / paper within this band counts as the paper's regime ("within 2x" of the paper)."""

NEGATIVE = (Verdict.NOT_REPRODUCED, Verdict.REFUTED)
"""Verdicts that a quantity outside :data:`BAND` makes regime-limited."""

LOPTI_FIG1D = (0.71, 0.36, 0.23, 0.15)
"""LOPTI Fig. 1(d): ``||grad L_b||`` with only bin ``b``'s advantages kept (the claim L4)."""

LOPTI_FIG1D_ALL = 0.82
"""LOPTI Fig. 1(d): ``||grad L||`` with every token's advantage kept (the claim L4)."""

LOPTI_GROUP_SIZE = 8
"""LOPTI's K&K run scripts (AR-Lopti, ``ROLLOUT_N``; ``paper_repro.md``, constants)."""

LOPTI_TEMPERATURE = 0.7
"""LOPTI's K&K rollout temperature (``paper_repro.md``, constants: "LOPTI: 0.7")."""

LOPTI_ETA = MethodParams.eta
"""Lopti's threshold on K&K (the claim L3; the engine's default): the low group is
``pi_old < eta``."""

RHOS = P5_RHOS
"""The min-p thresholds the project trains DVP with (P5)."""

PATHS = tuple(p for p in TIM_PATHS if p != "exact")
"""The real rollout paths of the learning testbed's mismatch study (V3; T14 reads its runs)."""

DECISIVE_SHARE = "lopti/decisive_share_b0"
"""The share of the lowest bin's tokens that decide the answer (:mod:`tailtheory.lopti.decisive.branches`);
no paper states it for its models."""

LOPTI_TRAINING = ("L2", "L3", "L6")
LOPTI_ONE_STEP = ("L1", "L4", "L5")
TIM_CLAIMS = ("M7", "V2", "V3", "V4", "V5", "V6")
LONG_RESPONSES = ("L4", "L5", "L6", "P5", "T14", "O6", "V3", "V4", "V5")
"""The papers' setting: these claims concern long responses (hundreds of tokens)."""


@dataclass(frozen=True)
class Quantity:
    """One dimensionless quantity that drives ``claims``, with the paper's value if known."""

    key: str
    """Its name in the measurements (``lopti/tok_frac_b0``, ``mismatch/k3_tok:bf16``)."""
    claims: tuple[str, ...]
    """The claim ids it drives."""
    label: str
    """What it is, in words."""
    paper: float | None = None
    """The paper's value; ``None``: :data:`NOT_STATED`."""
    cite: str = ""
    """Where the paper's value comes from (arXiv id, figure)."""


def _bin(b: int) -> str:
    lo, hi = ((0, .25), (.25, .5), (.5, .75), (.75, 1))[b]
    return f"[{lo:g}, {hi:g}]" if b == 0 else f"({lo:g}, {hi:g}]"


def _quantities() -> tuple[Quantity, ...]:
    fig1a = "LOPTI arXiv 2505.12929 Fig. 1(a), Qwen2.5-7B, K&K"
    fig1d = "LOPTI arXiv 2505.12929 Fig. 1(d), as quoted by the claim L4"
    scripts = "LOPTI arXiv 2505.12929, its K&K run scripts (paper_repro.md)"
    out = [Quantity(f"lopti/tok_frac_b{b}", LOPTI_ONE_STEP,
                    f"sampled response tokens with pi_old in {_bin(b)}", LOPTI_FIG1A[b], fig1a)
           for b in range(4)]
    out += [Quantity("lopti/tok_frac_below_eta", LOPTI_TRAINING,
                     f"sampled response tokens with pi_old < eta = {LOPTI_ETA:g} (Lopti's first "
                     "pass)", sum(LOPTI_FIG1A[:2]), fig1a + ", its first two bins")]
    out += [Quantity(DECISIVE_SHARE, LOPTI_ONE_STEP + LOPTI_TRAINING,
                     "sampled tokens with pi_old in [0, 0.25] called decisive (D - 2 se >= "
                     "tau; blank below 200 tokens of 40 prompts)")]
    out += [Quantity(f"lopti/adv_abs_b{b}", ("L4", "L5"),
                     f"mean |A| of response tokens with pi_old in {_bin(b)}") for b in range(4)]
    out += [Quantity("lopti/grad_share_low", ("L4",), "||grad L_[0,.25]|| / ||grad L_all||",
                     LOPTI_FIG1D[0] / LOPTI_FIG1D_ALL, fig1d),
            Quantity("lopti/grad_share_high", ("L4",), "||grad L_(.75,1]|| / ||grad L_all||",
                     LOPTI_FIG1D[3] / LOPTI_FIG1D_ALL, fig1d),
            Quantity("recipe/temperature", LOPTI_ONE_STEP + LOPTI_TRAINING,
                     "sampling temperature", LOPTI_TEMPERATURE, scripts),
            Quantity("recipe/group_size", LOPTI_TRAINING, "responses per prompt G",
                     LOPTI_GROUP_SIZE, scripts),
            Quantity("rollout/len_mean", LONG_RESPONSES, "response tokens per response (mean)"),
            Quantity("reward/group_var", LOPTI_TRAINING + ("O6",),
                     "reward variance within a group (mean over groups; R_max = 1)"),
            Quantity("reward/zero_var_frac", LOPTI_TRAINING + ("O6",),
                     "groups whose rewards are all equal (no group-baseline signal)")]
    out += [Quantity(f"dvp/pruned_mass_tok@{rho:g}", ("P4", "P5"),
                     f"pruned mass per response token, min-p rho = {rho:g}") for rho in RHOS]
    out += [Quantity(f"dvp/pruned_mass_seq@{rho:g}", ("P5",),
                     f"pruned mass summed over a response (P2 bound, R_max = 1), rho = {rho:g}")
            for rho in RHOS]
    out += [Quantity(f"mismatch/k3_tok:{path}", TIM_CLAIMS + ("T14",),
                     f"mismatch k3 per response token, {path} rollouts") for path in PATHS]
    out += [Quantity(f"mismatch/k3_seq:{path}", ("T14", "V4", "V5"),
                     f"mismatch k3 summed over a response (k3 x T), {path} rollouts")
            for path in PATHS]
    return tuple(out)


QUANTITIES: tuple[Quantity, ...] = _quantities()
"""Every quantity of the regime table, in its order (the training and trained-model claims:
L1-L6, P4, P5, M7, V2-V6, T14, O6)."""

CLAIMS = ("L1", "L4", "L5", "L2", "L3", "L6", "P4", "P5", "M7", "V2", "V3", "V4", "V5", "V6",
          "T14", "O6")
"""The training and trained-model claims the table covers."""


def quantity(key: str) -> Quantity:
    """The :class:`Quantity` named ``key``; an unknown key lists the valid ones."""
    found = {q.key: q for q in QUANTITIES}
    if key not in found:
        raise KeyError(f"unknown regime quantity {key!r}; quantities: {', '.join(found)}")
    return found[key]


def ratio(testbed: float | None, paper: float | None) -> float | None:
    """``testbed / paper``; ``None`` when either is missing (no paper value, not measured) or the
    paper's value is 0 (no ratio defined)."""
    if testbed is None or paper is None or paper == 0 or math.isnan(testbed):
        return None
    return testbed / paper


def in_band(r: float | None) -> bool | None:
    """Whether a ratio lies within :data:`BAND`; ``None`` for no ratio."""
    return None if r is None else BAND[0] <= r <= BAND[1]


def row_limited(judged: dict[str, list], verdicts: dict[str, Verdict]) -> str:
    """The "regime-limited?" cell of one quantity: ``judged`` maps each of its claims to the
    testbed / paper ratios (``None`` where not compared) of the recipe that claim's verdict is
    measured on, ``verdicts`` the claims' ledger verdicts. A claim is listed when its verdict is
    negative and one of its own ratios lies outside :data:`BAND`."""
    known = {c: [r for r in rs if r is not None] for c, rs in judged.items()}
    every = [r for rs in known.values() for r in rs]
    if not every:
        return "unknown: no paper value"
    if all(in_band(r) for r in every):
        return "no: within 2x"
    negative = [f"{c} {verdicts[c].value}" for c, rs in known.items()
                if verdicts[c] in NEGATIVE and not all(in_band(r) for r in rs)]
    return ("yes: " + ", ".join(negative)) if negative else "outside 2x; no negative verdict"


def reading(verdict: Verdict, outside: list[str], inside: list[str],
            unstated: bool = False) -> str:
    """How to read one claim's verdict given which of its quantities lie ``outside`` or
    ``inside`` :data:`BAND` (quantities without a paper value in neither); ``unstated``: a
    quantity that decides the claim's regime has no paper value (the decisive share of the
    low-probability tokens, :data:`DECISIVE_SHARE`). A PENDING verdict has nothing to read
    yet: its regime is said, not a reading of a verdict."""
    if verdict == Verdict.PENDING:
        return ("no verdict yet (PENDING); its regime: " +
                ("outside 2x of the paper in " + ", ".join(outside) if outside else
                 "within 2x where compared" if inside else "no paper value compared"))
    if outside and verdict in NEGATIVE:
        return "regime-limited: outside 2x of the paper in " + ", ".join(outside)
    if outside:
        return "reproduced although outside 2x in " + ", ".join(outside)
    if unstated:
        return ("regime unknown: decisive share not stated" +
                (" (the histogram within 2x where compared)" if inside else ""))
    if inside:
        return "in the paper's regime where compared"
    return "regime unknown: no paper value for its quantities"
