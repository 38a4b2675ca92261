"""Notebook output outside a kernel (files and text, as before) and the notebooks' verdict report."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tailtheory.core import display, io  # noqa: E402
from tailtheory.core.registry import Evidence, Verdict  # noqa: E402


def test_outside_a_kernel_show_figure_saves_and_closes(tmp_path, capsys):
    assert not io.in_kernel()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert display.show_figure(fig, "demo", pd.DataFrame({"x": [0, 1]}), "Evidence: x.",
                               directory=tmp_path) is None
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "demo.csv").exists()
    assert not plt.fignum_exists(fig.number)
    assert capsys.readouterr().out == ""


def test_provenance_says_what_a_figure_shows():
    assert display.provenance("runs", "quick").startswith("Quick pipeline check:")
    assert display.provenance("stored", "quick", "results/a.json").startswith("Stored evidence:")
    assert "results/a.json" in display.provenance("stored", "full", "results/a.json")
    assert display.provenance("measured", "full").startswith("Evidence:")
    with pytest.raises(ValueError, match="kind"):
        display.provenance("guess", "quick")


def test_verdict_report_prints_and_asserts_the_ledger_verdict(monkeypatch, capsys):
    """The notebooks' closing cell: prints theory next to measurement, fails on a verdict that
    differs from the ledger's."""
    from tailtheory.core import registry

    out = display.verdict_report(["S2"], "quick")
    assert [r.claim.id for r in out] == ["S2"]
    assert "S2  theory:" in capsys.readouterr().out
    asked = ["P1", "M1", "S2"]                               # rows in the order asked
    assert [r.claim.id for r in display.verdict_report(asked, "quick")] == asked
    claim = registry.all_claims()["S2"]
    wrong = registry.Claim(claim.id, claim.paper, claim.statement,
                           lambda profile: Evidence(Verdict.REFUTED, {"x": 1.0}), claim.expected)
    monkeypatch.setattr(registry, "select", lambda ids: [wrong])
    with pytest.raises(AssertionError, match="differ from the ledger"):
        display.verdict_report(["S2"], "quick")


def test_figures_are_numbered_once_and_carry_alternative_text():
    """A figure keeps its number when its cell runs again; its alternative text names it and
    says what each panel plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = display.figure_number("demo_fig_a")
    assert display.figure_number("demo_fig_b") == first + 1
    assert display.figure_number("demo_fig_a") == first
    fig, (ax, empty) = plt.subplots(1, 2)
    ax.set(title="reward", xlabel="step", ylabel="mean reward")
    fig.suptitle("GRPO")
    assert display.figure_alt(fig, "demo") == "figure demo; GRPO; reward / mean reward against step"
    plt.close(fig)


def test_setup_notebook_sets_the_small_model_thread_rule(monkeypatch):
    import torch

    from tailtheory.core import display
    from tailtheory.core.models import TORCH_DEFAULT
    from tailtheory.engine.threads import default_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(max(2, before))
        assert display.setup_notebook() is False
        assert torch.get_num_threads() == display.NOTEBOOK_THREADS == 1 == default_threads(10_000)
        assert TORCH_DEFAULT >= 1                        # large models keep torch's own count
    finally:
        torch.set_num_threads(before)
