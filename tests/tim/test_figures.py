"""The tables behind the mismatch-in-training figures (``tailtheory.tim.figures``, claims V3-V5),
on the hand-made numbers of ``test_training.py``: a row per run (and step), the exact runs kept
out of the mismatch views."""

from tailtheory.tim import figures
from tailtheory.tim import training as mt
from tests.tim.test_training import _data


def test_final_table_has_a_row_per_run():
    data = _data(mismatch_final=0.1)
    df = figures.final_table(data)
    assert len(df) == sum(len(runs) for runs in data.values())
    assert set(df["label"]) == set(data)
    exact = df[df["label"] == mt._label("exact", mt.MODES[0])]
    assert sorted(exact["final_reward"].round(6)) == [0.29, 0.3, 0.31]


def test_kl_table_and_harm_frame_leave_the_exact_runs_out():
    data = _data(mismatch_final=0.1)
    kl = figures.kl_table(data)
    assert not kl["label"].str.startswith("exact").any() and len(kl["label"].unique()) > 0
    steps = len(next(iter(data.values()))[0]["reward"])
    assert len(kl) == steps * sum(len(data[lb]) for lb in kl["label"].unique())
    assert set(kl.columns) == {"label", "seed", "step", "reward", "k1", "k3", "abs_mean"}
    harm = figures.harm_frame(data)
    assert set(harm["label"]) == set(kl["label"]) and harm["harmed"].all()
