"""The table of formats (``tailtheory.diagnose.formats.registry``): a name taken once, an unknown
name answered with the valid ones, and a new format added in one file, listed by
``tailtheory diagnose --help`` and read end to end by ``--format`` and by detection."""

import importlib.util
import json
import textwrap

import pytest

from tailtheory.cli import main
from tailtheory.diagnose.formats import (TABLE, get_reader, reader_names, register_reader,
                                         search_order, unregister_reader)
from tailtheory.diagnose.read import detect, expand_dumps, format_lines, format_names
from tests.diagnose.formats.framework_dumps import (_fails, _report, _responses, nemo_rl_dump,
                                                   prime_rl_dump, slime_dump)

THROWAWAY = '''
"""A throwaway format: tab-separated token rows with a header, in the generic names."""

from pathlib import Path

import numpy as np
import pyarrow as pa

from tailtheory.diagnose.formats.base import Dump, batch_of, natural
from tailtheory.diagnose.formats.registry import Reader

NAME = "tsv-rows"
COLUMNS = ("sample_id", "position", "token_id", "logp_train", "logp_rollout", "step")


def check(path):
    head = path.read_text().splitlines()[0].split("\\t")
    missing = [c for c in COLUMNS if c not in head]
    if missing:
        raise ValueError(f"{path}: not a {NAME} dump: lacks {', '.join(missing)}")
    return Dump(path, "tsv", NAME, None, ())


def rows(dump, file, batch_rows):
    lines = [ln.split("\\t") for ln in dump.path.read_text().splitlines()]
    head, body = lines[0], lines[1:]
    for i in range(0, len(body), batch_rows):
        part = body[i:i + batch_rows]
        tbl = pa.table({c: np.array([float(r[j]) for r in part]) for j, c in enumerate(head)})
        yield batch_of(tbl, dump, file)


READER = Reader(NAME, "tab-separated token rows", (".tsv",), ("*.tsv",),
                lambda folder: natural(folder.glob("*.tsv")), lambda path: True, check, rows,
                required=COLUMNS)
'''


@pytest.fixture
def throwaway(tmp_path):
    """The format of :data:`THROWAWAY`, written as one file, imported and registered; removed
    from the table afterwards."""
    src = tmp_path / "tsv_rows.py"
    src.write_text(textwrap.dedent(THROWAWAY))
    spec = importlib.util.spec_from_file_location("tsv_rows", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    register_reader(module.READER)
    yield module.READER
    unregister_reader(module.READER.name)


def _tsv(path, n_seq=30, n_tok=6):
    rows = ["\t".join(("sample_id", "position", "token_id", "logp_train", "logp_rollout",
                       "step"))]
    for s in range(n_seq):
        for t in range(n_tok):
            lp = -0.05 - 0.4 * t
            rows.append(f"{s}\t{t}\t{t + 3}\t{lp}\t{lp + 0.01 * (-1) ** (s + t)}\t{s % 3}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.slow  # make test-thorough: a long check (make test stays under 15 minutes)
def test_a_new_format_is_one_file_listed_and_read(throwaway, tmp_path, capsys):
    assert reader_names()[-1] == "tsv-rows" and format_names()[-1] == "tsv-rows"
    assert any(line.startswith("tsv-rows") for line in format_lines())
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    assert "tsv-rows" in capsys.readouterr().out.replace("\n", "")
    dump = _tsv(tmp_path / "run" / "a.tsv")
    assert expand_dumps([dump.parent]) == [dump] and detect(dump) == "tsv-rows"
    for args in ([dump.parent, "--format", "tsv-rows"], [dump]):
        out = tmp_path / "out"
        assert main(["diagnose", *map(str, args), "--out", str(out), "--quiet"]) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["tokens"] == 180 and s["sequences"] == 30 and s["steps"] == 3
    bad = tmp_path / "bad" / "b.tsv"
    bad.parent.mkdir()
    bad.write_text("sample_id\tposition\n0\t0\n")
    _fails(capsys, tmp_path, bad, match="not a tsv-rows dump: lacks token_id")
    _fails(capsys, tmp_path, _tsv(tmp_path / "x" / "c.tsv"), "--format", "slime",
           match="--format slime, but this file is a tsv-rows dump")


def test_removed_format_is_gone(throwaway):
    unregister_reader("tsv-rows")
    register_reader(throwaway)                       # the fixture removes it again
    assert reader_names().count("tsv-rows") == 1


def test_names_are_taken_once_and_unknown_names_listed():
    assert reader_names() == ("generic", "engine", "nemo-rl", "prime-rl", "slime")
    assert [r.name for r in TABLE] == list(reader_names())
    with pytest.raises(ValueError, match="'slime' is registered already"):
        register_reader(get_reader("slime"))
    with pytest.raises(ValueError, match="'auto' is registered already"):
        register_reader(get_reader("slime").__class__(**{**get_reader("slime").__dict__,
                                                         "name": "auto"}))
    with pytest.raises(ValueError, match="unknown format 'csv' .*generic, engine, nemo-rl"):
        get_reader("csv")
    with pytest.raises(ValueError, match="unknown format"):
        unregister_reader("csv")
    assert [r.name for r in search_order()][-1] == "generic"          # the fallback last
    with pytest.raises(ValueError, match="fallback reader already"):
        register_reader(get_reader("generic").__class__(**{**get_reader("generic").__dict__,
                                                           "name": "second"}))


@pytest.mark.parametrize("fmt", [pytest.param("nemo-rl", marks=pytest.mark.slow),
                                 pytest.param("prime-rl", marks=pytest.mark.slow), "slime"])
def test_end_to_end(tmp_path, fmt):
    """A dump of each format read end to end, report and command (one format in ``make test``,
    every one in ``make test-thorough``; each reader's parsing has its own tests)."""
    resps = _responses(8, steps=(1, 2, 3), n=16)
    write = {"nemo-rl": nemo_rl_dump, "prime-rl": prime_rl_dump, "slime": slime_dump}[fmt]
    run = write(tmp_path / "run", resps)
    s = _report(tmp_path, run)
    assert s["steps"] == 3 and s["tokens"] > 0
    out = tmp_path / "diag2"
    assert main(["diagnose", str(run), "--format", fmt, "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["tokens"] == s["tokens"]


def test_unknown_format_named(capsys, tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"a": 1, "b": [1, 2]}) + "\n")
    err = _fails(capsys, tmp_path, f, match="missing column(s)")
    assert "generic, engine, nemo-rl, prime-rl, slime" in err


def test_docs_list_the_table():
    """docs/diagnose.md shows the table as :func:`format_lines` gives it, and the choices."""
    from tailtheory.core.io import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "diagnose.md").read_text()
    assert "\n".join(format_lines()) in doc
    assert "{" + ",".join(format_names()) + "}" in doc
