"""The static report site (``docs/site/build.py``, ``make site``), built into a temporary folder
and read back as HTML: every claim of ``figures/claims.json`` has its section with its verdict
and command, every figure it shows is there with a number and alternative text, every notebook
render has its page with its figures and its verdict table. Nothing is executed but the build.
(``tests/lab/test_site.py`` opens the same pages in a browser.)"""

from __future__ import annotations

import importlib.util
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
site = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(site)


class Page(HTMLParser):
    """The images (src, alt), section ids and the text of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.images, self.ids, self.words = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append((a.get("src", ""), a.get("alt", "")))
        if tag == "section" and a.get("id"):
            self.ids.append(a["id"])

    def handle_data(self, data):
        self.words.append(data)

    @property
    def text(self) -> str:
        return " ".join(self.words)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    claims, pages = site.build(out)
    return out, claims, pages


def test_every_claim_has_its_verdict_numbers_figures_and_command(built):
    out, claims, _ = built
    measured = json.loads((ROOT / "figures" / "claims.json").read_text())["claims"]
    index = Page((out / "index.html").read_text(encoding="utf-8"))
    assert claims == len(measured) and index.ids == [c["id"] for c in measured]
    for c in measured:
        assert c["verdict"] in index.text and f"--only {c['id']}" in index.text, c["id"]
    assert len(index.images) >= 40
    numbers = set()
    for src, alt in index.images:
        assert (out / src).is_file() and alt.startswith("Figure "), src
        numbers.add(int(alt.split()[1].rstrip(":")))
    assert numbers == set(range(1, len(numbers) + 1))       # numbered 1..n, none skipped


def test_every_notebook_render_has_its_page_with_figures_and_verdicts(built):
    out, _, pages = built
    renders = sorted((ROOT / "docs" / "notebooks").glob("[0-9]*.ipynb"))
    assert [p.stem for p in pages] == [r.stem for r in renders]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        parsed = Page(text)
        assert any(src.startswith("data:image/png") for src, _ in parsed.images), page.name
        assert "regenerate" in parsed.text and "key numbers" in parsed.text, page.name
        assert f'href="notebooks/{page.name}"' in (out / "index.html").read_text()


def test_every_ledger_row_has_its_seven_cells():
    """A ``|`` inside a cell would split it (on the site and on any Markdown host): write abs()."""
    from tailtheory.core.readme import ledger_rows

    bad = [r[0] for r in ledger_rows((ROOT / "paper_repro.md").read_text()) if len(r) != 7]
    assert not bad, f"ledger rows with a stray '|' in a cell: {bad}"


def test_figure_table_claims_read_ranges_and_lists():
    assert site.claims_of("T1-T8, T10") == {f"T{i}" for i in (*range(1, 9), 10)}
    assert site.claims_of("V3, O6") == {"V3", "O6"}
    assert site.claims_of("every training claim") == set()


def test_a_folder_the_builder_did_not_write_is_never_emptied(tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "draft.txt").write_text("mine")
    with pytest.raises(SystemExit, match="did not write"):
        site.build(mine)
    assert (mine / "draft.txt").read_text() == "mine"
    out = tmp_path / "site"
    site.build(out)
    (out / "stale.html").write_text("old")
    site.build(out)                                       # a site built before: rebuilt
    assert not (out / "stale.html").exists() and (out / "index.html").exists()
