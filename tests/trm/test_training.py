"""TRM masking in training (``tailtheory/trm/training.py``, claim T14): the length law on i.i.d.
dumps, and the verdict rule on hand-made numbers (both ways)."""

from __future__ import annotations

import pytest

from tailtheory.core.registry import Verdict
from tailtheory.trm import figures as trm_figures
from tailtheory.tim.length_acceptance import T14_DELTAS, t14_token_numbers
from tailtheory.trm import training as tt
from tests.tim.test_length_acceptance import _dump



def test_iid_violations_follow_the_length_law():
    """With i.i.d. tokens the kept fraction per bin matches (1-q)^T (T12's law, here on dumps)."""
    lengths = [20] * 400 + [80] * 400 + [170] * 400
    df = _dump(lengths, lambda g: g.normal(0, 0.05))
    row = {"t14": t14_token_numbers(df)}
    table = tt.length_acceptance_table({"bf16 bypass": [row]})
    live = table[(table["q"] > 0) & (table["n"] >= tt.MIN_SEQS)]
    assert len(live) and (live["kept"] - live["predicted"]).abs().max() < 0.06
    # the law says longer responses are kept less
    mid = live[live["delta"] == 5e-4].sort_values("lo")
    assert mid["kept"].is_monotonic_decreasing


def _law(law_ok: bool = True) -> dict:
    """Numbers of V3's study: ``bf16 bypass`` with a token dump, 3 seeds."""
    t14 = {f"{d:g}": {"tokens": 1000, "violations": 10, "n": [100, 0, 0, 0, 0],
                      "kept": [90 if law_ok else 40, 0, 0, 0, 0], "pred": [90.0, 0, 0, 0, 0],
                      "bin_tokens": [1000, 0, 0, 0, 0], "bin_violations": [10, 0, 0, 0, 0],
                      "pred_bin_q": [90.0, 0, 0, 0, 0]}
           for d in T14_DELTAS}
    return {"bf16 bypass": [{"seed": s, "final_reward": 0.3, "t14": t14} for s in range(3)]}


def _data(trm_shift: float, base_gap: float, law_ok: bool = True, held_shift=0.0):
    """(law data of ``mismatch_learn``, base data of ``mismatch_dose``), 3 seeds each."""
    from tailtheory.tim.dose import REMEDY_SIGMA

    def runs(x, held=0.0):
        return [{"seed": s, "final_reward": x + d, "final_eval": 0.5 + held + d, "k3": [0.1],
                 "format": [1.0]} for s, d in enumerate((-0.01, 0.0, 0.01))]

    grpo = f"GRPO | logit sigma={REMEDY_SIGMA:g}"
    return _law(law_ok), {"GRPO | exact": runs(0.3), grpo: runs(0.3 - base_gap),
                          f"TRM | logit sigma={REMEDY_SIGMA:g}": runs(0.3 - base_gap + trm_shift,
                                                                      held_shift)}


def test_t14_rule_both_ways():
    """(a) on V3's dumps, (b) on V6's remedy base."""
    assert tt.t14_evidence(*_data(0.2, 0.2)).verdict == Verdict.TOY_SCALE
    assert tt.t14_evidence(*_data(-0.1, 0.2)).verdict == Verdict.REFUTED
    # no harm on the base: nothing for masking to stabilise
    assert tt.t14_evidence(*_data(0.2, 0.0)).verdict == Verdict.NOT_REPRODUCED
    # the length law fails (kept 0.4 against a predicted 0.9)
    assert tt.t14_evidence(*_data(0.2, 0.2, law_ok=False)).verdict == Verdict.REFUTED
    ev = tt.t14_evidence(*_data(-0.1, 0.2, held_shift=0.05))
    assert ev.numbers["base"].startswith("GRPO | logit sigma=")
    assert ev.numbers["base_harmed"] == "yes"
    assert ev.numbers["trm_minus_grpo"] == pytest.approx(-0.1)
    assert ev.numbers["length_law:max_abs_dev"] == pytest.approx(0.0)
    # held-out accuracy is reported beside the verdict, not in it
    assert ev.numbers["trm_minus_grpo:final_heldout"] == pytest.approx(0.05)


def test_plot_acceptance_draws_its_table():
    import matplotlib

    matplotlib.use("Agg")
    fig, df = trm_figures.plot_length_acceptance(_law())
    assert len(df) == len(T14_DELTAS) and fig.axes
