"""The README's ```python snippets run as written (in order, sharing one namespace).

Blocks fenced as ```py are illustrations (templates with ``...``) and are not run.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippets_run(monkeypatch):
    from tailtheory.experiments import study

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
    from tailtheory.experiments import study
    from tailtheory.experiments.presets import SEEDS

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
    assert study.get_study("tis_learn") is ns["STUDY"]
    rows = lambda m: [{"seed": s, "final_reward": m + 0.01 * s} for s in range(3)]  # noqa: E731
    m = study.Measurement({"GRPO": rows(0.3), "TIS": rows(0.5)}, arms)
    assert ns["tis_evidence"](m).verdict == Verdict.TOY_SCALE


BAD_INPUTS = README.parent / "docs" / "bad_inputs.md"


def test_bad_inputs_table_names_existing_tests():
    """Every ``tests/...py::name`` in ``docs/bad_inputs.md`` is a test function of that file (so
    the table of bad inputs stays current), and README links the table."""
    import ast

    text = BAD_INPUTS.read_text(encoding="utf-8")
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(named) > 40, "docs/bad_inputs.md names too few tests"
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert all(re.search(r"`tests/[\w/]+\.py::\w+`", ln.rsplit("|", 2)[1]) for ln in rows), \
        "a row of docs/bad_inputs.md names no test in its last column"
    root, missing = README.parent, []
    for path, name in named:
        f = root / path
        tree = ast.parse(f.read_text(encoding="utf-8")) if f.exists() else ast.Module(body=[])
        if name not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert not missing, "docs/bad_inputs.md names tests that do not exist: " + ", ".join(missing)
    assert "(docs/bad_inputs.md)" in README.read_text(encoding="utf-8")
