"""The README's ```python snippets run as written (in order, sharing one namespace).

Blocks fenced as ```py are illustrations (templates with ``...``) and are not run.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippets_run(monkeypatch):
    from tailtheory.engine import study

    monkeypatch.setattr(study, "_STUDIES", dict(study.studies()))  # the example registers one
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has no python snippets"
    ns: dict = {}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"README.md block {i}", "exec"), ns)
        except Exception as exc:  # name the block in the failure
            raise AssertionError(f"README python block {i} failed: {exc!r}\n{code}") from exc


def test_readme_study_example_is_a_complete_study(monkeypatch):
    """The "Adding a training study" example: two arms over the seeds, and a verdict from a
    measurement (hand-made numbers here; ``STUDY.data`` reads or measures real ones)."""
    from tailtheory.core.registry import Verdict
    from tailtheory.engine import study
    from tailtheory.engine.presets import SEEDS

    text = README.read_text(encoding="utf-8")
    part = text[text.index("## Adding a training study"):]
    code = re.search(r"```python\n(.*?)```", part, re.S).group(1)
    assert len(code.strip().splitlines()) < 30
    monkeypatch.setattr(study, "_STUDIES", dict(study.studies()))
    ns: dict = {}
    exec(compile(code, "README.md study example", "exec"), ns)
    arms = ns["STUDY"].plan("full")
    assert [a.label for a in arms] == ["GRPO", "TIS"]
    assert [c.seed for c in arms[1].configs] == list(SEEDS["full"])
    assert study.get_study("tis_training") is ns["STUDY"]
    rows = lambda m: [{"seed": s, "final_reward": m + 0.01 * s} for s in range(3)]  # noqa: E731
    m = study.Measurement({"GRPO": rows(0.3), "TIS": rows(0.5)}, arms)
    assert ns["tis_evidence"](m).verdict == Verdict.TOY_SCALE
