"""The README and the guide pages of ``docs/``, read as a user reads them: their ```python snippets
run as written (in order, sharing one namespace per page), every command of their ```bash blocks
names a Makefile target, a ``tailtheory`` subcommand and options, a notebook and its parameters or
an extra that exist, and every relative link leads to a file (and a heading) that exists. The
README is the front door: at most 200 lines, opening with the two commands that work on a fresh
machine, and linking every page of ``docs/``.

Blocks fenced as ```py are illustrations (templates with ``...``) and are not run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FRONT_DOOR = ["make repro", "make test"]
"""The README's first commands: the main job (verify every claim, regenerate every figure) and
the tests; CI calls ``make test``."""
GUIDES = ("evidence", "usage", "own_model", "engine", "benchmarks", "integrations", "contributing")
"""The guide pages the README's content moved to: each opens with a title and a summary."""


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def _prose(text: str) -> str:
    """The page without its fenced blocks (whose brackets are code, not links)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


# ---------------------------------------------------------------------------- python snippets

SNIPPET_PAGES = [p for p in PAGES if _blocks(p.read_text(encoding="utf-8"), "python")]


def test_some_pages_have_python_snippets():
    assert {_name(p) for p in SNIPPET_PAGES} >= {"docs/usage.md", "docs/contributing.md"}


@pytest.mark.parametrize("page", SNIPPET_PAGES, ids=_name)
def test_python_snippets_run(page, monkeypatch, tmp_path):
    from tailtheory.experiments import study

    monkeypatch.setattr(study, "_STUDIES", dict(study.studies()))  # the example registers one
    monkeypatch.chdir(tmp_path)                                      # what a snippet writes
    ns: dict = {}
    for i, code in enumerate(_blocks(page.read_text(encoding="utf-8"), "python")):
        try:
            exec(compile(code, f"{_name(page)} block {i}", "exec"), ns)
        except Exception as exc:  # name the block in the failure
            raise AssertionError(f"{_name(page)} python block {i} failed: {exc!r}\n{code}") \
                from exc


def test_study_example_is_a_complete_study(monkeypatch):
    """The "Adding a training study" example: two arms over the seeds, and a verdict from a
    measurement (hand-made numbers here; ``STUDY.data`` reads or measures real ones)."""
    from tailtheory.core.registry import Verdict
    from tailtheory.experiments import study
    from tailtheory.experiments.presets import SEEDS

    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    part = text[text.index("## Adding a training study"):]
    code = _blocks(part, "python")[0]
    assert len(code.strip().splitlines()) < 30
    monkeypatch.setattr(study, "_STUDIES", dict(study.studies()))
    ns: dict = {}
    exec(compile(code, "docs/contributing.md study example", "exec"), ns)
    arms = ns["STUDY"].plan("full")
    assert [a.label for a in arms] == ["GRPO", "TIS"]
    assert [c.seed for c in arms[1].configs] == list(SEEDS["full"])
    assert study.get_study("tis_learn") is ns["STUDY"]
    rows = lambda m: [{"seed": s, "final_reward": m + 0.01 * s} for s in range(3)]  # noqa: E731
    m = study.Measurement({"GRPO": rows(0.3), "TIS": rows(0.5)}, arms)
    assert ns["tis_evidence"](m).verdict == Verdict.TOY_SCALE


# ---------------------------------------------------------------------------- commands


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """``(line, words)`` of every command of the page's ```bash blocks, comments and leading
    ``NAME=value`` assignments dropped."""
    out = []
    for block in _blocks(text, "bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words.pop(0)
            if words:
                out.append((line.strip(), words))
    return out


def _cli_problem(args: list[str]) -> str | None:
    from tailtheory.cli import build_parser

    parser = build_parser()
    if not args or args[0].startswith("-"):
        known = {o for a in parser._actions for o in a.option_strings}
        bad = [a for a in args if a.startswith("-") and a not in known]
        return f"tailtheory has no option {bad}" if bad else None
    subs = parser._subparsers._group_actions[0].choices
    if args[0] not in subs:
        return f"tailtheory has no subcommand {args[0]!r}"
    sub = subs[args[0]]
    known = {o for a in sub._actions for o in a.option_strings}
    bad = [a.split("=")[0] for a in args[1:] if a.startswith("--") and a.split("=")[0] not in known]
    return f"tailtheory {args[0]} has no option {bad}" if bad else None


def _command_problem(words: list[str]) -> str | None:
    """What is wrong with a documented command, or ``None``: every program a page shows has a
    check here (a new one needs its own)."""
    prog, args = Path(words[0]).name, words[1:]
    if prog == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        bad = [a for a in args if not a.startswith("-") and "=" not in a and a not in targets]
        return f"the Makefile has no target {bad}" if bad else None
    if prog == "tailtheory":
        return _cli_problem(args)
    if prog == "papermill":
        notebook = ROOT / args[0]
        if not notebook.is_file():
            return f"no notebook {args[0]}"
        source = notebook.with_suffix(".py").read_text(encoding="utf-8")
        names = [args[i + 1] for i, a in enumerate(args) if a == "-p"]
        bad = [n for n in names if not re.search(rf"^{n} = ", source, re.M)]
        return f"{args[0]} has no parameter {bad}" if bad else None
    if prog in ("jupyter", "pytest"):  # Jupyter's executors and nbmake: the paths they name
        if prog == "jupyter" and (not args or args[0] not in ("nbconvert", "execute")):
            return f"jupyter {args[:1]}: only nbconvert and execute are documented"
        bad = [a for a in args if not a.startswith("-") and "/" in a and not (ROOT / a).exists()]
        return f"no such path {bad}" if bad else None
    if prog == "pip" and args[:2] == ["install", "-e"]:
        extras = re.findall(r"\[([\w,]+)\]", args[2])
        declared = (ROOT / "pyproject.toml").read_text()
        bad = [e for group in extras for e in group.split(",")
               if not re.search(rf"^{e} = \[", declared, re.M)]
        return f"pyproject.toml has no extra {bad}" if bad else None
    return f"no check for the program {prog!r}: add one to tests/test_readme.py"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_commands_name_what_exists(page):
    problems = [f"{line}: {problem}" for line, words in _commands(page.read_text(encoding="utf-8"))
                if (problem := _command_problem(words))]
    assert not problems, "\n".join(problems)


def test_the_command_checks_catch_what_does_not_exist():
    assert _command_problem(["make", "repro", "test"]) is None
    assert "no target" in _command_problem(["make", "reproduce"])
    assert _command_problem([".venv/bin/tailtheory", "probe", "pruning", "--model", "P"]) is None
    assert "no subcommand" in _command_problem(["tailtheory", "fit"])
    assert "no option" in _command_problem(["tailtheory", "train", "--stepz", "3"])
    assert "no parameter" in _command_problem(
        ["papermill", "notebooks/01_token_tail.ipynb", "o.ipynb", "-p", "MODELS", "x"])
    assert "no extra" in _command_problem(["pip", "install", "-e", ".[gpu]"])
    assert "no check" in _command_problem(["curl", "-O", "x"])


# ---------------------------------------------------------------------------- links


def _anchor(heading: str) -> str:
    """A Markdown heading's anchor, as code hosts and ``docs/site/build.py`` make it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").replace("*", "").strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(page.read_text(encoding="utf-8")), re.M):
        base = _anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_lead_to_files_and_headings_that_exist(page):
    broken = []
    for url in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", url):
            continue
        path, _, fragment = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(url)
        elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
            broken.append(url)
    assert not broken, f"{_name(page)} links to what does not exist: {broken}"


# ---------------------------------------------------------------------------- the front door


def test_readme_is_a_front_door():
    """At most 200 lines; the title, then the two commands that work on a fresh machine; every
    page of ``docs/`` one link away."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines"
    head = re.match(r"# tailtheory\n\n```bash\n(.*?)```", text, re.S)
    assert head, "README.md must open with its title and a ```bash block of commands"
    assert [" ".join(words) for _, words in _commands(f"```bash\n{head.group(1)}```")] \
        == FRONT_DOOR
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", text))
    assert linked >= {p.name for p in (ROOT / "docs").glob("*.md")}, "a docs/ page is not linked"


@pytest.mark.parametrize("name", GUIDES)
def test_guide_pages_open_with_a_title_and_a_summary(name):
    text = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")
    title, _, rest = text.partition("\n\n")
    summary = rest.split("\n\n")[0]
    assert title.startswith("# ") and "\n" not in title, name
    assert summary and not summary.startswith(("#", "```", "|", "-", "!")), name


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_pages_speak_of_the_project_only(page):
    """No issue or pull-request numbers in the reading material."""
    found = re.findall(r"(?<![\w&/])[\w.-]*#\d+\b", page.read_text(encoding="utf-8"))
    assert not found, f"{_name(page)}: {found}"


# ---------------------------------------------------------------------------- bad inputs

BAD_INPUTS = ROOT / "docs" / "bad_inputs.md"


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
    missing = []
    for path, name in named:
        f = ROOT / path
        tree = ast.parse(f.read_text(encoding="utf-8")) if f.exists() else ast.Module(body=[])
        if name not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert not missing, "docs/bad_inputs.md names tests that do not exist: " + ", ".join(missing)
    assert "(docs/bad_inputs.md)" in README.read_text(encoding="utf-8")
