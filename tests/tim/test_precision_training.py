"""V7 in training (``tailtheory/tim/precision_training.py``): the study's arms reuse the learning
curve's and ``dvp_matched``'s run keys, and the non-inferiority rule reaches each verdict on
runs built to reach it. Nothing is trained."""

from __future__ import annotations

import pytest

from tailtheory.experiments.comparison import Measurement
from tailtheory.experiments.learning import MATCHED_STUDY
from tailtheory.experiments.runs import run_key
from tailtheory.pruning.training import MATCHED_STUDY as DVP_MATCHED
from tailtheory.tim import precision_training as pt


def test_arms_share_the_run_keys_of_the_studies_they_repeat():
    arms = {a.label: a for a in pt.STUDY.plan("matched")}
    assert list(arms) == list(pt.ARMS) and all(len(a.configs) == 3 for a in arms.values())
    curve = MATCHED_STUDY.plan("matched")[0].configs
    grpo_bf16 = DVP_MATCHED.plan("matched")[0].configs[:3]
    assert [run_key(c) for c in arms["exact"].configs] == [run_key(c) for c in curve]
    assert [run_key(c) for c in arms["bf16"].configs] == [run_key(c) for c in grpo_bf16]
    assert {c.rollout for c in arms["fp16"].configs} == {"fp16"}
    assert {c.method for c in arms["bf16 + MIS"].configs} == {"mis"}
    with pytest.raises(ValueError, match="matched preset"):
        pt.v7_arms("learn")


def _row(seed: int, final: float, warm: float = 0.35) -> dict:
    evals = [warm] + [final] * 11
    return {"seed": seed, "final_eval": final, "eval": evals, "eval_steps": list(range(0, 120, 10)),
            "reward": [0.3] * 20 + [0.4] * 80 + [0.6] * 20}


def _m(finals: dict) -> Measurement:
    return Measurement({label: [_row(s, v + 0.01 * s) for s in (1, 2, 3)]
                        for label, v in finals.items()})


@pytest.mark.parametrize("finals, want", [
    (dict(exact=0.6, bf16=0.3, tis=0.55, mis=0.55, fp16=0.56), "HOLDS"),
    (dict(exact=0.6, bf16=0.6, tis=0.58, mis=0.58, fp16=0.58), "TOY-SCALE"),
    (dict(exact=0.6, bf16=0.3, tis=0.55, mis=0.45, fp16=0.40), "REFUTED"),
    (dict(exact=0.6, bf16=0.3, tis=0.55, mis=0.55, fp16=0.52), "NOT-REPRODUCED"),
    (dict(exact=0.40, bf16=0.3, tis=0.55, mis=0.55, fp16=0.56), "NOT-JUDGED (exact does not learn)"),
])
def test_the_rule_reaches_each_verdict(finals, want):
    names = {"tis": "bf16 + TIS", "mis": "bf16 + MIS"}
    out = pt.v7_training(_m({names.get(k, k): v for k, v in finals.items()}))
    assert out["verdict"] == want
    assert out["fp16 - bf16 + TIS"] == pytest.approx(finals["fp16"] - finals["tis"])


def test_a_study_not_stored_is_pending_and_names_its_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILTHEORY_RESULTS", str(tmp_path))
    out = pt.stored_v7_training()
    assert out["verdict"].startswith("PENDING (15 of 15 runs missing")
    assert "tailtheory study precision_matched" in out["verdict"]
