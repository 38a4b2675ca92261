"""Checks of LOPTI's claims (Yang et al., arXiv 2505.12929) and of the field's opposite ones
(L7-L9: arXiv 2603.22117, 2506.01939, 2605.07660).

L2, L3 and L6 compare training runs (``tailtheory.lopti.training``), five arms of five seeds, on
the papers' regime (study ``lopti_matched``: the ``matched`` recipe, ``results/lopti_matched.json``)
with the same rule on the learning testbed beside it (study ``lopti_learn``: the ``learn``
recipe, ``results/lopti_learn.json``). Under the ``quick`` profile they read the stores; under
``thorough`` they train (or find in the run cache) what is missing and store it.

Each verdict rests on the ``matched`` recipe's stores; what stands beside it (the ``learn``
recipe's verdict, the ``decide`` recipe's, the decisive shares) is read as context
(:func:`~tailtheory.core.measurements.as_context`): a store of an unrecorded model there is
named in the note and does not set the verdict aside, while one the verdict rests on does
(:func:`~tailtheory.core.registry.set_aside`).
"""

from __future__ import annotations

from tailtheory.core.io import REPO_ROOT
from tailtheory.core.measurements import StaleMeasurement, as_context
from tailtheory.core.registry import Evidence, Verdict, register
from tailtheory.experiments import learning
from tailtheory.experiments.incremental import load_done
from tailtheory.lopti import learn_probes, measurement, training
from tailtheory.lopti.decisive import designs, gate
from tailtheory.lopti.decisive import store as decisive_store

SHARE = "decisive share"
"""The number beside each recipe's verdict: the share of its warm start's lowest-bin tokens
that decide the answer (:func:`tailtheory.lopti.decisive.store.decisive_share`)."""


def _share(recipe: str):
    """The stored decisive share of ``recipe`` (context beside a verdict, never remeasured by a
    check: ``tailtheory measure decisive_RECIPE`` measures it again)."""
    try:
        with as_context():
            data = decisive_store.decisive_data("quick", recipe)
    except StaleMeasurement:
        return "not measured"
    return decisive_store.share_text(recipe, data)


def _at_both_ends(main: Evidence, decide, profile: str) -> Evidence:
    """``main`` (the ``matched`` recipe's verdict, the ``learn`` recipe's beside) with the
    ``decide`` recipe's verdict beside them (``decide``: a function of the profile returning its
    evidence; a store that lacks runs says so instead), each with its decisive share. The
    claim's verdict stays ``matched``'s; the note says whether the two ends of the decisive
    share agree."""
    try:
        with as_context():
            d = decide(profile)
        theirs = {"decide recipe: verdict": str(d.verdict),
                  **{f"decide recipe: {k}": v for k, v in d.key_items()}}
        agree = ("the verdict is the same where low-probability tokens decide the answer"
                 if d.verdict == main.verdict else "the verdict differs where low-probability "
                 "tokens decide the answer: it depends on what they do")
    except StaleMeasurement as exc:
        reason = str(exc).split(";")[0]
        theirs = {"decide recipe: verdict": reason if reason.startswith("no training")
                  else "not yet measured"}
        agree = f"decide recipe: {reason}"
    nums = {**main.numbers, SHARE: _share("matched"), f"learn recipe: {SHARE}": _share("learn"),
            **theirs, f"decide recipe: {SHARE}": _share("decide")}
    key = (tuple(main.key)[:2] + (SHARE, "learn recipe: verdict", f"learn recipe: {SHARE}",
                                  "decide recipe: verdict", f"decide recipe: {SHARE}"))
    return Evidence(main.verdict, nums, f"{main.note}; {agree}", key)


def _matched_first(evidence, claim: str, profile: str) -> Evidence:
    """``claim`` judged on the papers' regime (study ``lopti_matched``: the ``matched`` recipe's
    five arms, five seeds each) with the learning testbed's verdict beside it (study
    ``lopti_learn``, and the no-learning regime's recorded verdict), as P5 is; the rule is the
    same on both."""
    with as_context():
        today = evidence(training.STUDY.data(profile)).superseding(claim)
    main = evidence(training.MATCHED_STUDY.data(profile), training.MATCHED_STUDY).beside(today)
    return _at_both_ends(main, _decide_baseline, profile)


def _decide_baseline(profile: str) -> Evidence:
    """No training verdict on the ``decide`` recipe: its GRPO does not learn by the rule (study
    ``decide_curve``), and a training comparison counts only where the baseline learns. Raises
    :class:`StaleMeasurement` with the reason and the gains, which the row shows instead."""
    m = learning.DECIDE_STUDY.data(profile)
    rows = [learning.summarize(r) for r in m[m.label(method="grpo")]]
    verdict, why = learning.verdict(rows, learning.MATCHED_GAIN)
    if verdict == "LEARNS":  # the five arms would be the next measurement; none is stored
        raise StaleMeasurement("GRPO learns on decide, the five arms are not measured yet")
    raise StaleMeasurement(f"no training verdict: GRPO {verdict} on decide ({why}), and the "
                           f"design search: {_design_search()}")


def _design_search() -> str:
    """Where the search for a recipe that learns with decisive low-probability tokens stands
    (study ``decide_designs`` and its gate, ``results/decide_design_gate.json``)."""
    name, why = designs.chosen(designs.design_table(load_done(designs.STUDY)),
                               gate.failed_designs(gate.matched_excess()))
    if name is None:
        return (f"{why.split(':')[0]} (results/decide_designs.json, "
                f"results/decide_design_gate.json)")
    return f"design {name} chosen, its arms not measured yet"


@register("L2", paper="LOPTI", statement="Advantage Reweighting (alpha 0.3) trains better than "
          "GRPO", expected=Verdict.NOT_REPRODUCED)
def _l2(profile: str) -> Evidence:
    return _matched_first(training.l2_evidence, "L2", profile)


@register("L3", paper="LOPTI", statement="Lopti (low-probability tokens first, eta 0.5) trains "
          "better than GRPO and than its reversed order", expected=Verdict.NOT_REPRODUCED)
def _l3(profile: str) -> Evidence:
    return _matched_first(training.l3_evidence, "L3", profile)


@register("L6", paper="LOPTI", statement="GRPO -> +AR+Lopti raises held-out K&K accuracy "
          "(0.39 -> 0.57 at 3B)", expected=Verdict.NOT_REPRODUCED)
def _l6(profile: str) -> Evidence:
    return _matched_first(training.l6_evidence, "L6", profile)


# L1, L4, L5: one SGD step on GRPO batches (tailtheory.lopti.onestep, judged by
# tailtheory.lopti.measurement). They are judged on the matched recipe (the papers' regime:
# tailtheory.lopti.learn_probes, results/lopti_probes_matched.json: its warm start and GRPO
# half-way, the worst of the two), with the same check on today's testbed beside it: L4 and L5 on
# the learn recipe (results/lopti_probes_learn.json, the superseded verdict kept), L1 on the
# kk_trace warm start (results/lopti_probes.json). The quick profile reads them; thorough
# measures again.


@register("L1", paper="LOPTI", statement="A token's gradient magnitude scales with 1 - p (through "
          "the network, not only at the logits)", expected=Verdict.NOT_REPRODUCED)
def _l1(profile: str) -> Evidence:
    with as_context():
        today = measurement.l1_evidence(measurement.probe_data(profile))
    main = learn_probes.l1_learn_evidence(learn_probes.learn_probe_data(profile, "matched"),
                                          "matched").beside(today, today_name="kk_trace warm start")
    return _at_both_ends(main, lambda p: learn_probes.l1_learn_evidence(
        learn_probes.learn_probe_data(p, "decide"), "decide"), profile)


@register("L4", paper="LOPTI", statement="Figure 1: per-bin gradient norms decrease with pi_old; "
          "updating only the lowest bin moves every bin like updating all, the highest alone "
          "moves little", expected=Verdict.NOT_REPRODUCED)
def _l4(profile: str) -> Evidence:
    return _regimes(learn_probes.l4_learn_evidence, "L4", profile)


@register("L5", paper="LOPTI", statement="Figure 3: among A > 0 tokens of the top pi_old bin, "
          "AR and Lopti raise the probability of more tokens than GRPO (~0.5)",
          expected=Verdict.NOT_REPRODUCED)
def _l5(profile: str) -> Evidence:
    return _regimes(learn_probes.l5_learn_evidence, "L5", profile)


def _regimes(evidence, claim: str, profile: str) -> Evidence:
    """``evidence`` on the matched recipe, with the learn recipe's beside it."""
    with as_context():
        today = evidence(learn_probes.learn_probe_data(profile)).superseding(claim)
    main = evidence(learn_probes.learn_probe_data(profile, "matched"), "matched").beside(today)
    return _at_both_ends(main, lambda p: evidence(learn_probes.learn_probe_data(p, "decide"),
                                                  "decide"), profile)


# L7, L8, L9: the field's opposite claims, each its method against GRPO. With no recipe where
# low-probability tokens decide (the ledger's design search), each is judged on the matched
# recipe, the free end (tailtheory.lopti.training.MATCHED_OPPOSITE_STUDIES, three seeds an arm,
# Welch's t), with the decide recipe's "no training verdict" beside it, as L2, L3 and L6 are.

def _opposite(method: str, profile: str) -> Evidence:
    """``method``'s ``matched`` study judged by
    :func:`tailtheory.lopti.training.opposite_matched_evidence`, the decisive shares and the
    ``decide`` recipe's status beside it; PENDING with the command that trains it while its store
    lacks runs (the quick profile never trains)."""
    study = training.MATCHED_OPPOSITE_STUDIES[method]
    try:
        data = study.data(profile)
    except StaleMeasurement as exc:
        why = str(exc).split(";")[0].replace(f"{REPO_ROOT}/", "")
        return Evidence(Verdict.PENDING, {"study": study.name, "why": why},
                        f"not yet measured: `{study.command}`", ("study",))
    main = training.opposite_matched_evidence(method, data)
    main = Evidence(main.verdict, {"measured on": "matched recipe (the papers' pi_old histogram; "
                                                  "its low-probability tokens mostly free "
                                                  "choices), weights/base, seeds 1-3",
                                   **main.numbers}, main.note, main.key)
    return _at_both_ends(main, _decide_baseline, profile)


@register("L7", paper="RLVR-DIR", statement="Upweighting low-probability tokens, A x (1 + c - c "
          "pi_old) with c 0.2 (after arXiv 2603.22117, on GRPO), trains better than GRPO",
          expected=Verdict.NOT_REPRODUCED)
def _l7(profile: str) -> Evidence:
    return _opposite("upweight", profile)


@register("L8", paper="80/20", statement="Policy gradient on the top 20% of tokens by pi_old's "
          "entropy is no worse than GRPO on final held-out accuracy (margin 0.05)",
          expected=Verdict.REFUTED)
def _l8(profile: str) -> Evidence:
    return _opposite("top_entropy", profile)


@register("L9", paper="RAND-20", statement="Policy gradient on a random 20% of tokens is no "
          "worse than GRPO on final held-out accuracy (margin 0.05)", expected=Verdict.REFUTED)
def _l9(profile: str) -> Evidence:
    return _opposite("random_tokens", profile)
