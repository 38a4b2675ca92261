"""The registry of stored measurements (``tailtheory/experiments/measures.py``) and ``tailtheory
measure``: a name registered once, an unknown name listing the valid ones, the listing (rows, and
the models and machines each convention of the stores names), the staleness check and a dry run
on a temporary ``results/``, every file of the repository's ``results/`` registered, every
registered measurement shown to name its model and machine (or excepted, with the reason), and the
change that rewrote the stores' commands (5520d97 to 710ac87) changing nothing else of them."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from provenance_check import NAMED_BY, UNNAMED
from tailtheory import cli
from tailtheory.core.measurements import RESULTS_ENV, fingerprint
from tailtheory.experiments import measures as ms
from tailtheory.experiments.study import Study, studies

REPO = Path(__file__).resolve().parents[2]

BEFORE = "5520d97"
"""The commit before the stores' ``command`` fields named ``tailtheory measure``."""

AFTER = "710ac87"
"""The commit that rewrote the stores' ``command`` fields, and nothing else of them."""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A temporary ``results/`` and a registry holding only a few made-up stores (no study);
    yields ``(results folder, calls of the measurement's remake, its config today)``."""
    ms.measures()                      # the catalog registers into the real registry first
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    monkeypatch.setattr(ms, "_MEASURES", {})
    monkeypatch.setattr(ms, "studies", lambda: {})
    config, calls = {"size": 3}, []

    def remake():
        calls.append(1)
        _store(tmp_path / "probe.json", config, {"warm": [{"x": 1}, {"x": 2}], "mid": {"y": 3}})

    ms.register_measure(ms.Measure("probe", "a made-up probe", "about a second",
                                   lambda: dict(config), remake))
    ms.register_measure(ms.Measure("old_runs", "a made-up superseded store",
                                   superseded="study probe_learn"))
    ms.register_measure(ms.Measure("notes", "made-up exploratory rows"))
    yield tmp_path, calls, config


def _store(path: Path, config: dict, data, command: str = "tailtheory measure probe") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": path.stem, "fingerprint": fingerprint(config),
                                "command": command, "config": config, "data": data}))


def test_register_refuses_a_name_that_exists_and_bad_entries(fake):
    with pytest.raises(ValueError, match="'probe' is already registered"):
        ms.register_measure(ms.Measure("probe", "again"))
    with pytest.raises(ValueError, match="letters, digits"):
        ms.Measure("../x", "a path")
    with pytest.raises(ValueError, match="word of `tailtheory measure`"):
        ms.Measure("list", "a reserved word")
    with pytest.raises(ValueError, match="both config and remake"):
        ms.Measure("half", "config only", config=dict)
    with pytest.raises(ValueError, match="never made again"):
        ms.Measure("sup", "remade", config=dict, remake=dict, superseded="study x")
    with pytest.raises(ValueError, match="resume must be one of"):
        ms.Measure("r", "resumes how?", config=dict, remake=dict, resume="maybe")


def test_a_name_registered_as_a_study_too_is_refused(fake, monkeypatch):
    monkeypatch.setattr(ms, "studies", lambda: {"probe": object()})
    with pytest.raises(ValueError, match="both as a measurement and as a study: probe"):
        ms.measures()


def test_unknown_name_lists_the_valid_ones(fake, capsys):
    with pytest.raises(ValueError, match="unknown stored measurement 'nope'; valid: notes, "
                                         "old_runs, probe"):
        ms.get("nope")
    assert cli.main(["measure", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "valid: notes, old_runs, probe" in err


def test_row_count_and_models():
    prov = {"provenance": {"start": "k", "weights": "aaaa", "cpu": "c"}}
    assert ms.row_count({"A": [{"seed": 1, **prov}, {"seed": 2}], "B": [{"seed": 1}]}) == 3
    assert ms.row_count({"warm": {"x": 1}, "mid": {"x": 2}}) == 2          # one row per policy
    assert ms.row_count({"seeds": [0, 1], "batches": [{"b": 0}] * 4}) == 4  # records only
    assert ms.row_count({"mean": 0.1, "max": 0.3}) == 1                     # one flat record
    assert ms.models({"A": [{"seed": 1, **prov}, {"seed": 2, **prov}]}) == ["aaaa"]
    assert ms.models({"base": {"tail": {"1": {"warm_key": "k", "weights": "bbbb"}}},
                      "w192": {"warm_weights": "cccc"}}) == ["bbbb", "cccc"]
    assert ms.models({"A": [{"seed": 1}]}) == []


CONVENTIONS = {
    "a study's provenance": ({"A": [{"seed": 1, "provenance": {"start": "k", "weights": "aaaa",
                                                               "cpu": "CPU A"}}]},
                             ["aaaa"], ["CPU A"]),
    "a run resumed on another CPU": ({"A": [{"provenance": {
        "start": "k", "weights": "aaaa", "cpu": "CPU A", "resumed_on": ["CPU B"]}}]},
        ["aaaa"], ["CPU A", "CPU B"]),
    "weights beside warm_key": ({"base": {"tail": {"1": {"warm_key": "k", "weights": "bbbb",
                                                         "cpu": "CPU A"}}}}, ["bbbb"], ["CPU A"]),
    "weights beside machine": ({"base.b0-0910fc60": {"p4": {"1": {
        "model": "base.b0-0910fc60", "weights": "cccc", "machine": "GPU (cuda)"}}}},
        ["cccc"], ["GPU (cuda)"]),
    "warm_weights": ({"w192": {"warm_weights": "dddd", "cpu": "CPU A"}}, ["dddd"], ["CPU A"]),
    "corpus_weights": ({"base.b1-8f362256": {"rows": [{"over_1e3": 0.1}],
                                             "corpus_weights": "eeee", "machine": "CPU A"}},
                       ["eeee"], ["CPU A"]),
    "a model's warm start and corpus LM": ({"base.b1-8f362256": {
        "warm": {"key": "k", "weights": "ffff", "cpu": "CPU A"},
        "corpus": {"key": "c", "weights": "0000", "cpu": "CPU B"}, "recorded_on": "CPU C"}},
        ["0000", "ffff"], ["CPU A", "CPU B"]),
}
"""Convention -> (a store's ``data`` written in it, the models and machines it names)."""


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_models_and_machines_are_read_in_every_convention(convention):
    data, want_models, want_machines = CONVENTIONS[convention]
    assert ms.models(data) == want_models and ms.machines(data) == want_machines


def test_a_weights_field_alone_names_no_model():
    """``weights`` names a model only beside a warm-start key or a machine: elsewhere it may be
    anything (a mixture's weights); a field that is not a string is never a model or machine."""
    data = {"x": {"weights": "aaaa", "cpu_seconds": 3.0}, "y": {"machine": 1, "cpu": None},
            "z": {"weights": [0.5, 0.5], "machine": "CPU A"}}
    assert ms.models(data) == [] and ms.machines(data) == ["CPU A"]
    assert ms.models(None) == ms.machines(None) == [] == ms.models([1, 2]) == ms.machines(3.0)


def test_list_names_every_file_with_its_kind_rows_models_and_machines(fake, capsys):
    results, _, config = fake
    weights = ("0910fc60bac33f64", "e9b84e2989f69569")
    _store(results / "probe.json", config,
           {"warm": [{"seed": 1, "provenance": {"start": "k", "weights": weights[0],
                                                "cpu": "CPU A (AVX512)"}}],
            "mid": [{"seed": 1, "weights": weights[1], "machine": "GPU B (cuda)"}]})
    _store(results / "superseded" / "old_runs.json", config, {"A": [{"x": 1}] * 3},
           "tailtheory measure old_runs")
    (results / "stray.json").write_text("{}")
    rows = {r["name"]: r for r in ms.listing()}
    assert rows["probe"] == {"name": "probe", "kind": "measurement", "rows": 2,
                             "models": ", ".join(weights),
                             "machines": "CPU A (AVX512), GPU B (cuda)",
                             "command": "tailtheory measure probe"}
    assert rows["old_runs"]["kind"] == "superseded" and rows["old_runs"]["rows"] == 3
    assert rows["stray"]["kind"] == "unregistered" and rows["stray"]["rows"] == "-"
    assert rows["notes"]["kind"] == "record" and rows["notes"]["rows"] == "missing"
    assert (rows["notes"]["models"], rows["notes"]["machines"]) == ("-", "-")
    assert cli.main(["measure", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["name", "kind", "rows", "models", "machines", "command"]
    line = next(x for x in out if x.startswith("probe "))        # fingerprints cut to 8 digits
    assert re.match(r"probe\s+measurement\s+2\s+0910fc60, e9b84e29\s+CPU A \(AVX512\), "
                    r"GPU B \(cuda\)\s+tailtheory measure probe$", line)
    starts = {out[0].index(c) for c in ("models", "machines", "command")}
    assert all({x.index(v) for v in ("0910fc60", "CPU A", "tailtheory")} == starts
               for x in out if x.startswith("probe "))          # aligned under their heads
    assert any(re.match(r"stray\s+unregistered\s+-\s+unrecorded\s+unrecorded\s+-$", x)
               for x in out)
    assert out[-1] == cli.UNRECORDED_LEGEND and "PENDING" in out[-1]     # what unrecorded means


def test_a_store_naming_no_model_reads_unrecorded(fake, capsys):
    """A store whose rows name neither model nor machine (a bare ``weights`` names none), or
    one of numbers only, lists both as ``unrecorded``; one naming a machine only, the machine."""
    results, _, config = fake
    _store(results / "probe.json", config, {"warm": [{"seed": 1, "weights": "abcd", "x": 1}]})
    _store(results / "superseded" / "old_runs.json", config, {"mean": 0.1},
           "tailtheory measure old_runs")
    _store(results / "notes.json", config, {"A": [{"cpu": "CPU A"}]}, "tailtheory measure notes")
    rows = {r["name"]: r for r in ms.listing()}
    for name in ("probe", "old_runs"):
        assert (rows[name]["models"], rows[name]["machines"]) == ("unrecorded", "unrecorded")
    assert (rows["notes"]["models"], rows["notes"]["machines"]) == ("unrecorded", "CPU A")


def test_stale_exit_status(fake, capsys):
    results, _, config = fake
    assert cli.main(["measure", "stale"]) == 1                     # missing
    assert "probe: missing" in capsys.readouterr().out
    _store(results / "probe.json", config, {"warm": [{"x": 1}]})
    assert cli.main(["measure", "stale"]) == 0
    assert "1 of 1 stores current" in capsys.readouterr().out
    config["size"] = 4                                              # the code asks for another
    assert cli.main(["measure", "stale"]) == 1
    out = capsys.readouterr().out
    assert f"probe: stale (stored fingerprint {fingerprint({'size': 3})}" in out
    assert "make it again: tailtheory measure probe" in out
    (results / "probe.json").write_text("{not json")
    assert cli.main(["measure", "stale"]) == 2
    assert "probe: unreadable" in capsys.readouterr().out


def test_dry_run_prints_cost_and_stops_then_measure_stores(fake, capsys):
    results, calls, _ = fake
    assert cli.main(["measure", "probe", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cost: about a second" in out and "starts over if stopped" in out and not calls
    assert cli.main(["measure", "probe"]) == 0
    assert calls == [1] and f"stored {results / 'probe.json'}" in capsys.readouterr().out
    assert cli.main(["measure", "stale"]) == 0                      # now current


def test_a_store_not_made_again_says_why(fake, capsys):
    assert cli.main(["measure", "old_runs", "--dry-run"]) == 0
    assert "not made again: superseded by study probe_learn" in capsys.readouterr().out
    assert cli.main(["measure", "old_runs"]) == 2
    assert "old_runs is not made again" in capsys.readouterr().err


def test_a_study_is_made_by_its_own_command(fake, monkeypatch, capsys):
    study = Study("probe_learn", lambda preset: [])
    monkeypatch.setattr(ms, "studies", lambda: {"probe_learn": study})
    seen = []
    monkeypatch.setattr(cli, "_study", lambda args: seen.append(args) or 0)
    assert cli.main(["measure", "probe_learn", "--dry-run"]) == 0
    assert "`tailtheory study probe_learn` trains what the run cache lacks" in \
        capsys.readouterr().out
    assert seen[0].name == "probe_learn" and seen[0].dry_run and not seen[0].store_done


def test_the_help_names_the_stores_that_resume_or_store_per_part():
    by = {how: {n for n, m in ms.measures().items() if m.resume == how}
          for how in ("yes", "parts")}
    epilog = " ".join(cli.MEASURE_EPILOG.split())
    resumes, per_part = epilog.split("; ")[0], epilog.split("; ")[1]
    assert set(re.findall(r"`(\w+)`", resumes)) == by["yes"]
    assert set(re.findall(r"`(\w+)`", per_part)) == by["parts"]


def test_every_stored_file_of_the_repository_is_registered(monkeypatch):
    monkeypatch.setenv(RESULTS_ENV, str(REPO / "results"))
    rows = ms.listing()
    assert not [r["name"] for r in rows if r["kind"] == "unregistered"]
    assert not [r["name"] for r in rows if r["rows"] in ("missing", "unreadable")]
    known = {**studies(), **ms.measures()}
    for path in [*(REPO / "results").glob("*.json"), *(REPO / "results/superseded").glob("*.json")]:
        record = json.loads(path.read_text())
        if "command" in record:
            assert record["command"] == known[path.stem].command, path.name


def _test_names(path: Path) -> set[str]:
    """The top-level test functions defined in the file ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name.startswith("test_")}


def test_every_measurement_names_its_model_and_machine_or_says_why_not():
    """Every registered measurement is shown, by a test of the function that makes it, to name
    in its rows the model it measured and the machine it ran on (``provenance_check.NAMED_BY``),
    or is excepted with its reason (``UNNAMED``: only a store never made again). A measurement
    registered in neither fails here, and so does a named test that does not exist."""
    registered = ms.measures()
    assert not set(NAMED_BY) & set(UNNAMED)
    assert sorted(set(registered) - set(NAMED_BY) - set(UNNAMED)) == [], \
        "registered measurements whose rows no test shows naming their model and machine"
    assert sorted((set(NAMED_BY) | set(UNNAMED)) - set(registered)) == []
    for name, why in UNNAMED.items():
        assert registered[name].remake is None and why, name
    for name, where in NAMED_BY.items():
        path, test = where.split("::")
        assert test in _test_names(REPO / path), f"{name}: no test {where}"


def test_every_store_of_the_repository_is_current(monkeypatch):
    """Each store's fingerprint is that of the config today's code asks for: the config
    functions registered are the ones the stores were keyed by."""
    monkeypatch.setenv(RESULTS_ENV, str(REPO / "results"))
    assert [(r["name"], r["state"]) for r in ms.staleness() if r["state"] != "current"] == []


def _at(commit: str, path: Path) -> dict | None:
    """The JSON of ``path`` at ``commit``; None outside a git checkout holding it."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path.relative_to(REPO)}"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return json.loads(out.stdout) if out.returncode == 0 else None


def _stores_at(commit: str) -> list[str]:
    """The stores' paths (relative to the repository) at ``commit``; [] outside a git checkout
    holding it."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", commit,
                              "results/"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(n for n in out.stdout.split() if n.endswith(".json")) if out.returncode == 0 else []


def test_the_command_change_changed_nothing_else():
    """Giving every store its ``tailtheory measure`` / ``study`` command (commit :data:`AFTER`)
    changed nothing but the ``command`` fields: every store there equals the one of
    :data:`BEFORE` without that field. Both are fixed commits, so a store that gains rows later
    leaves this check true."""
    names = _stores_at(AFTER)
    if not names:
        pytest.skip(f"not in a git checkout holding {AFTER}")
    assert names == _stores_at(BEFORE)
    changed = 0
    for name in names:
        before, after = _at(BEFORE, REPO / name), _at(AFTER, REPO / name)
        assert {k: v for k, v in after.items() if k != "command"} == \
            {k: v for k, v in before.items() if k != "command"}, name
        changed += after.get("command") != before.get("command")
    assert changed >= 20          # the change is there: most stores' commands were rewritten
