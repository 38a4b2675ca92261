"""Verdicts of LOPTI's training claims from run numbers (``tailtheory/lopti/training.py``), on
hand-made numbers; the study's arms and its curves figure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.lopti import training as lt


def _data(**means):
    """Three seeds per label at mean +- 0.01 on final reward and held-out accuracy."""
    return {label: [{"final_reward": m + d, "final_eval": m + d} for d in (-0.01, 0.0, 0.01)]
            for label, m in means.items()}


def test_l2_l3_l6_follow_the_orderings():
    good = _data(GRPO=0.2, AR=0.4, Lopti=0.4, **{"Lopti reversed": 0.2, "AR+Lopti": 0.5})
    assert lt.l2_evidence(good).verdict == Verdict.TOY_SCALE
    assert lt.l3_evidence(good).verdict == Verdict.TOY_SCALE
    assert lt.l6_evidence(good).verdict == Verdict.TOY_SCALE
    # Lopti beats GRPO but not its reversed order: both parts are needed
    half = _data(GRPO=0.2, AR=0.2, Lopti=0.4, **{"Lopti reversed": 0.4, "AR+Lopti": 0.1})
    assert lt.l3_evidence(half).verdict == Verdict.NOT_REPRODUCED
    assert lt.l2_evidence(half).verdict == Verdict.NOT_REPRODUCED
    assert lt.l6_evidence(half).verdict == Verdict.REFUTED
    worse = _data(GRPO=0.4, AR=0.2, Lopti=0.1, **{"Lopti reversed": 0.4, "AR+Lopti": 0.2})
    assert lt.l3_evidence(worse).verdict == Verdict.REFUTED
    assert lt.l2_evidence(good).numbers["delta_final_reward"] == pytest.approx(0.2)


def test_lopti_study_has_every_method_and_seed(monkeypatch, tmp_path):
    from tailtheory.experiments import presets

    monkeypatch.setattr(presets, "warm_model", lambda preset, progress=True: tmp_path)
    plan = lt.STUDY.configs("quick")
    assert list(plan) == list(lt.LOPTI_METHODS)
    assert {len(v) for v in plan.values()} == {len(presets.SEEDS["quick"])}
    assert [c.method for c in plan["Lopti reversed"]] == ["lopti_reversed"] * 2
    assert {a.label: dict(a.tags) for a in lt.lopti_arms("quick")}["AR+Lopti"] == {
        "method": "ar+lopti"}
    with pytest.raises(ValueError, match="valid presets"):
        lt.lopti_arms("huge")


def test_evidence_selects_arms_by_method_tag_not_by_label():
    """Relabelled arms (same tags) give the same verdicts: no label is parsed."""
    from tailtheory.experiments.comparison import Measurement
    from tailtheory.experiments.study import Arm

    data = _data(GRPO=0.2, AR=0.4, Lopti=0.4, **{"Lopti reversed": 0.2, "AR+Lopti": 0.5})
    arms = [Arm(f"arm {i}", (None,), {"method": m}) for i, m in enumerate(lt.LOPTI_METHODS.values())]
    renamed = Measurement({f"arm {i}": data[k] for i, k in enumerate(lt.LOPTI_METHODS)}, arms)
    for fn in (lt.l2_evidence, lt.l3_evidence, lt.l6_evidence):
        assert fn(renamed).verdict == fn(data).verdict == Verdict.TOY_SCALE


def _curves():
    """Two labels, three seeds: reward per step, held-out accuracy at steps 0 and 2."""
    return {label: [{"seed": s, "reward": [shift + 0.1 * t + 0.01 * s for t in range(4)],
                     "eval_steps": [0, 2], "eval": [shift + 0.02 * s, shift + 0.2 + 0.02 * s]}
                    for s in range(3)] for label, shift in (("GRPO", 0.0), ("Lopti", 0.3))}


def test_plot_curves_draws_seed_bands_of_the_smoothed_reward_and_of_accuracy():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from plotting import lines_and_bands

    data = _curves()
    fig, df = lt.plot_curves(data, labels=["GRPO", "Lopti"], smooth=2)
    assert set(df.columns) == {"label", "seed", "step", "metric", "value"}   # the stored table
    reward, acc = fig.axes
    (x, y, band), (_, y2, _) = lines_and_bands(reward)
    # seed 0 of GRPO: rewards 0, .1, .2, .3 smoothed over 2 steps; the mean adds .01 (seed 1)
    assert list(x) == [0, 1, 2, 3] and y == pytest.approx([0.01, 0.06, 0.16, 0.26])
    assert band[1.0] == pytest.approx((0.05, 0.07)) and y2[0] == pytest.approx(0.31)
    (x, y, band), _ = lines_and_bands(acc)
    assert list(x) == [0, 2] and y == pytest.approx([0.02, 0.22])
    assert band[2.0] == pytest.approx((0.2, 0.24))
    assert [t.get_text() for t in reward.get_legend().get_texts()] == ["GRPO", "Lopti"]
    assert "3 seeds" in reward.get_legend().get_title().get_text()
    plt.close(fig)


def test_stored_learn_measurement_is_complete_and_current():
    """The committed ``results/lopti_learn.json``: 25 runs, each the code's config today."""
    m = lt.STUDY.data("quick")
    assert set(m) == set(lt.LOPTI_METHODS) and {len(rows) for rows in m.values()} == {5}


class _Stored:
    """A study whose stored data are ``data`` (the rest is the study's own)."""

    def __init__(self, study, data):
        self.study, self.stored = study, data

    def data(self, profile):
        return self.stored

    def __getattr__(self, name):
        return getattr(self.study, name)


def test_l2_l3_l6_are_judged_on_the_matched_study_with_the_learn_verdict_beside(monkeypatch):
    """The claims read ``lopti_matched`` for the verdict and ``lopti_learn`` for the number beside
    it: a matched study that orders the arms differently from the learn one decides."""
    from tailtheory.lopti import claims

    matched = _data(GRPO=0.2, AR=0.4, Lopti=0.4, **{"Lopti reversed": 0.2, "AR+Lopti": 0.5})
    learn = _data(GRPO=0.4, AR=0.4, Lopti=0.4, **{"Lopti reversed": 0.4, "AR+Lopti": 0.4})
    monkeypatch.setattr(lt, "MATCHED_STUDY", _Stored(lt.MATCHED_STUDY, matched))
    monkeypatch.setattr(lt, "STUDY", _Stored(lt.STUDY, learn))
    for fn in (claims._l2, claims._l3, claims._l6):
        ev = fn("quick")
        assert ev.verdict == Verdict.TOY_SCALE
        assert ev.numbers["measured on"].startswith("matched")
        assert ev.numbers["learn recipe: verdict"] == str(Verdict.NOT_REPRODUCED)


# ---- the opposite claims (L7, L8, L9) ------------------------------------------------------------

def _opposite_rows(final_eval, final_reward, gain=0.2):
    """One run's stored numbers: 40 steps of reward rising by 0.1, held-out accuracy from
    ``final_eval - gain`` at step 0 to ``final_eval`` (the learning criterion reads both)."""
    return {"final_eval": final_eval, "final_reward": final_reward,
            "reward": [0.1] * 20 + [0.2] * 20, "eval_steps": [0, 10, 20],
            "eval": [final_eval - gain, final_eval, final_eval]}


def _opposite_data(method, grpo, other, gain=0.2):
    """Label -> three seeds at GRPO's and the method's (final_eval, final_reward) +- 0.01."""
    label = lt.OPPOSITE_METHODS[method]
    return {lb: [{"seed": s, **_opposite_rows(e + d, r + d, gain)}
                 for s, d in zip((1, 2, 3), (-0.01, 0.0, 0.01))]
            for lb, (e, r) in (("GRPO", grpo), (label, other))}


def test_non_inferiority_rule_at_the_margin():
    from tailtheory.experiments.comparison import Comparison

    c = lambda d, se: Comparison(d, se, Verdict.NOT_REPRODUCED)  # noqa: E731
    assert lt.non_inferiority(c(-0.02, 0.01)) == Verdict.HOLDS          # -0.04 > -0.05
    assert lt.non_inferiority(c(-0.03, 0.01)) == Verdict.UNRESOLVED     # -0.05 is not > -0.05
    assert lt.non_inferiority(c(-0.08, 0.01)) == Verdict.REFUTED        # -0.06 < -0.05
    assert lt.non_inferiority(c(-0.06, 0.01)) == Verdict.UNRESOLVED     # -0.08 .. -0.04
    assert lt.non_inferiority(c(+0.10, 0.10)) == Verdict.UNRESOLVED     # wide: -0.10 .. +0.30


def test_opposite_studies_pair_grpo_with_each_method_on_decide_five_seeds():
    from tailtheory.experiments.presets import SEEDS

    assert {m: s.name for m, s in lt.OPPOSITE_STUDIES.items()} == {
        "upweight": "upweight_decide", "top_entropy": "top_entropy_decide",
        "random_tokens": "random_tokens_decide"}
    for method, study in lt.OPPOSITE_STUDIES.items():
        assert study.measure_preset == "decide"
        assert study.command == f"tailtheory study {study.name}"
        arms = study.plan("decide")
        assert [dict(a.tags) for a in arms] == [{"method": "grpo"}, {"method": method}]
        assert [[c.seed for c in a.configs] for a in arms] == [list(SEEDS["decide"])] * 2 == [
            [1, 2, 3, 4, 5]] * 2
        grpo, other = (a.configs[0] for a in arms)
        assert replace(other, method="grpo") == grpo and grpo.task == "kk_knights"
    with pytest.raises(ValueError, match="unknown opposite method"):
        lt.opposite_arms("ar")


def test_opposite_verdicts_from_hand_made_runs():
    """L7 by L2's rule on final reward; L8, L9 by non-inferiority on final held-out accuracy;
    not judged (PENDING) where GRPO does not learn, the verdict it would have beside."""
    up = lt.opposite_evidence("upweight", _opposite_data("upweight", (0.5, 0.3), (0.5, 0.5)))
    assert up.verdict == Verdict.TOY_SCALE
    assert up.numbers["delta_final_reward"] == pytest.approx(0.2)
    down = lt.opposite_evidence("upweight", _opposite_data("upweight", (0.5, 0.5), (0.5, 0.3)))
    assert down.verdict == Verdict.REFUTED
    for method in ("top_entropy", "random_tokens"):
        close = lt.opposite_evidence(method, _opposite_data(method, (0.6, 0.5), (0.58, 0.1)))
        assert close.verdict == Verdict.HOLDS, close.numbers   # -0.02 - 2 * 0.0115 > -0.05
        far = lt.opposite_evidence(method, _opposite_data(method, (0.6, 0.5), (0.45, 0.5)))
        assert far.verdict == Verdict.REFUTED
        mid = lt.opposite_evidence(method, _opposite_data(method, (0.6, 0.5), (0.55, 0.5)))
        assert mid.verdict == Verdict.UNRESOLVED
        flat = lt.opposite_evidence(method, _opposite_data(method, (0.6, 0.5), (0.58, 0.5),
                                                           gain=0.05))
        assert flat.verdict == Verdict.PENDING and flat.numbers["verdict if judged"] == "HOLDS"
        assert flat.numbers["GRPO learns"] == "DOES-NOT-LEARN" and "not judged" in flat.note


def test_opposite_studies_on_matched_pair_grpo_with_each_method_three_seeds():
    assert {m: s.name for m, s in lt.MATCHED_OPPOSITE_STUDIES.items()} == {
        "upweight": "upweight_matched", "top_entropy": "top_entropy_matched",
        "random_tokens": "random_tokens_matched"}
    grpo_runs = set()
    for method, study in lt.MATCHED_OPPOSITE_STUDIES.items():
        assert study.measure_preset == "matched"
        arms = study.plan("matched")
        assert [dict(a.tags) for a in arms] == [{"method": "grpo"}, {"method": method}]
        assert [[c.seed for c in a.configs] for a in arms] == [[1, 2, 3]] * 2
        grpo, other = (a.configs[0] for a in arms)
        assert replace(other, method="grpo") == grpo and grpo.task == "kk_prose"
        grpo_runs.add(arms[0].configs)
    assert len(grpo_runs) == 1                      # one GRPO arm, shared by the three studies


def _matched_data(method, grpo, other, spread=(-0.01, 0.0, 0.01), gain=0.2):
    label = lt.OPPOSITE_METHODS[method]
    return {lb: [{"seed": s, **_opposite_rows(e + d, r + d, gain)}
                 for s, d in zip((1, 2, 3), spread)]
            for lb, (e, r) in (("GRPO", grpo), (label, other))}


def test_opposite_verdicts_on_matched_use_welchs_t_not_2_se():
    """Three seeds an arm, sd 0.01 each: se of the difference 0.0082, Welch's df 4, t 2.776. At
    d = -0.03 the t interval's lower end is -0.0527 (UNRESOLVED) where 2 se would give -0.0463
    (HOLDS); at d = -0.01 it is -0.0327 (HOLDS)."""
    for method in ("top_entropy", "random_tokens"):
        ev = lt.opposite_matched_evidence(method, _matched_data(method, (0.6, 0.5), (0.57, 0.5)))
        assert ev.numbers["df"] == pytest.approx(4.0)
        assert ev.verdict == Verdict.UNRESOLVED, ev.numbers
        assert ev.numbers["delta_final_eval"] - 2 * ev.numbers["se"] > -lt.NI_MARGIN
        near = lt.opposite_matched_evidence(method, _matched_data(method, (0.6, 0.5),
                                                                  (0.59, 0.5)))
        assert near.verdict == Verdict.HOLDS and near.numbers["low"] > -lt.NI_MARGIN
        far = lt.opposite_matched_evidence(method, _matched_data(method, (0.6, 0.5),
                                                                 (0.45, 0.5)))
        assert far.verdict == Verdict.REFUTED and far.numbers["high"] < -lt.NI_MARGIN
        flat = lt.opposite_matched_evidence(method, _matched_data(method, (0.6, 0.5),
                                                                  (0.59, 0.5), gain=0.05))
        assert flat.verdict == Verdict.PENDING and flat.numbers["verdict if judged"] == "HOLDS"
    up = lt.opposite_matched_evidence("upweight", _matched_data("upweight", (0.5, 0.3),
                                                                (0.5, 0.5)))
    assert up.verdict == Verdict.TOY_SCALE and up.numbers["delta_final_reward"] == pytest.approx(0.2)
    assert lt.opposite_matched_evidence("upweight", _matched_data(
        "upweight", (0.5, 0.5), (0.5, 0.3))).verdict == Verdict.REFUTED
    assert lt.opposite_matched_evidence("upweight", _matched_data(
        "upweight", (0.5, 0.5), (0.5, 0.51))).verdict == Verdict.NOT_REPRODUCED
    with pytest.raises(ValueError, match="unknown opposite method"):
        lt.opposite_matched_evidence("ar", {})


@pytest.mark.parametrize("claim", ["L7", "L8", "L9"])
def test_opposite_claims_read_pending_while_their_store_is_missing(claim, tmp_path, monkeypatch):
    from tailtheory.core.measurements import RESULTS_ENV
    from tailtheory.core.registry import all_claims, run_claim

    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))                  # no store there
    res = run_claim(all_claims()[claim], "quick")
    assert res.error is None, res.traceback
    method = {"L7": "upweight", "L8": "top_entropy", "L9": "random_tokens"}[claim]
    study = lt.MATCHED_OPPOSITE_STUDIES[method]
    assert res.evidence.verdict == Verdict.PENDING
    assert res.evidence.note == f"not yet measured: `tailtheory study {study.name}`"
    assert res.evidence.numbers == {"study": study.name, "why": "no stored measurement "
                                    f"{tmp_path}/{study.name}.json"}
