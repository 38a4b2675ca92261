"""The design search (``tailtheory/lopti/decisive/designs.py``): each design's config, the
learning rule with its format check, and the rule that picks the first design that learns."""

from __future__ import annotations

import pytest

from tailtheory.experiments.presets import train_config
from tailtheory.experiments.study import get_study
from tailtheory.lopti.decisive import designs as dd


def test_each_design_changes_only_what_it_names():
    base = train_config("decide")
    assert len(dd.DESIGNS) <= 6 and len({d.name for d in dd.DESIGNS}) == len(dd.DESIGNS)
    for d in dd.DESIGNS:
        cfg = dd.design_config(d.name, 21)
        changed = {k for k in vars(cfg) if getattr(cfg, k) != getattr(base, k)}
        assert changed == set(d.changes) | {"seed"}, d.name
    assert dd.design_config("people2", 22).n_people == 2
    with pytest.raises(ValueError, match="unknown design"):
        dd.design_config("g64", 21)


def test_study_is_registered_on_the_decide_preset_only():
    study = get_study("decide_designs")
    arms = study.plan("decide")
    assert [a.label for a in arms] == [d.name for d in dd.DESIGNS]
    assert all(tuple(c.seed for c in a.configs) == dd.TUNING_SEEDS for a in arms)
    assert not set(dd.TUNING_SEEDS) & set(dd.FRESH_SEEDS)
    with pytest.raises(ValueError, match="decide"):
        dd.design_arms("matched")


def _row(seed=21, gain=0.2, rise=0.1, fmt_first=0.98, fmt_last=0.98, steps=200, responses=256):
    evals = [0.3] + [0.3 + gain] * 19
    reward = [0.4] * (steps // 2) + [0.4 + rise] * (steps // 2)
    fmt = [fmt_first] * (steps // 2) + [fmt_last] * (steps // 2)
    return {"seed": seed, "eval": evals, "eval_steps": list(range(0, 200, 10)),
            "reward": reward, "format": fmt, "responses": responses}


def test_format_check_allows_only_its_sampling_noise():
    # 20 steps x 256 responses a window: the se of the difference is about
    # sqrt(2 x 0.98 x 0.02 / 5120) near 0.98 (the lower share has the larger variance)
    se = (2 * 0.98 * 0.02 / 5120) ** 0.5
    assert dd.format_holds(_row(fmt_last=0.98 - 1.5 * se))[0]
    assert not dd.format_holds(_row(fmt_last=0.98 - 2.5 * se))[0]
    assert dd.format_holds(_row(fmt_first=0.9, fmt_last=1.0))[0]
    with pytest.raises(ValueError, match="needs >= 40 steps"):
        dd.format_holds(_row(steps=30))


def test_a_seed_learns_only_with_gain_rising_reward_and_format():
    assert dd.seed_summary(_row())["learns"]
    assert not dd.seed_summary(_row(gain=0.14))["learns"]
    assert not dd.seed_summary(_row(rise=-0.01))["learns"]
    assert not dd.seed_summary(_row(fmt_last=0.9))["learns"]


def _table(learns: dict) -> list[dict]:
    return [{"design": name, "seed": s, "gain": 0.2 if ok else 0.1, "learns": ok}
            for name, per_seed in learns.items() for s, ok in zip(dd.TUNING_SEEDS, per_seed)]


def test_the_first_design_in_order_that_learns_on_both_seeds_is_chosen():
    names = [d.name for d in dd.DESIGNS]
    got, why = dd.chosen(_table({names[0]: (True, False), names[1]: (True, True),
                                 names[2]: (True, True)}))
    assert got == names[1] and "learns" in why
    # an earlier design still missing a seed: nothing is chosen yet
    got, why = dd.chosen(_table({names[0]: (True,), names[1]: (True, True)}))
    assert got is None and names[0] in why
    got, why = dd.chosen(_table({n: (False, True) for n in names}))
    assert got is None and "frontier" in why


def test_a_design_that_failed_the_gate_is_passed_over():
    names = [d.name for d in dd.DESIGNS]
    table = _table({names[0]: (False, False), names[1]: (True, True), names[2]: (True, True)})
    assert dd.chosen(table)[0] == names[1]
    assert dd.chosen(table, failed=(names[1],))[0] == names[2]
    got, why = dd.chosen(table, failed=(names[1], names[2]))
    assert got is None and names[3] in why


def test_plot_designs_draws_each_design_and_seed():
    import matplotlib

    matplotlib.use("Agg")
    names = [d.name for d in dd.DESIGNS]
    table = [{**r, "gain": 0.2 if r["learns"] else 0.05}
             for r in _table({names[0]: (True, False), names[1]: (True, True)})]
    fig, df = dd.plot_designs(table)
    assert len(fig.axes[0].patches) == 4 and list(df["design"]) == [names[0]] * 2 + [names[1]] * 2
    assert [p.get_alpha() for p in fig.axes[0].patches] == [1.0, 1.0, 0.35, 1.0]
