"""The static report site (``docs/site/build.py``, ``make site``), built into a temporary folder
and read back as HTML: every claim of ``figures/claims.json`` has its section with its verdict
and command, every figure it shows is there with a number and alternative text, every notebook
render has its page with its figures and its verdict table, every guide page of ``docs/`` has its
page with the navigation, and no page needs a network: every script, style, image and link it
loads is a file of the site, MathJax included. Nothing is executed but the build.
(``tests/lab/test_site.py`` opens the same pages in a browser.)"""

from __future__ import annotations

import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
site = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(site)


class Page(HTMLParser):
    """The images (src, alt), section ids, scripts' and stylesheets' sources, links (and those
    of the navigation), heading ids and the text of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.images, self.ids, self.words = [], [], []
        self.scripts, self.links, self.nav, self.headings = [], [], [], []
        self._in_nav = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append((a.get("src", ""), a.get("alt", "")))
        if tag == "section" and a.get("id"):
            self.ids.append(a["id"])
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "link" and a.get("href"):
            self.scripts.append(a["href"])            # a stylesheet loads as a script does
        if tag in ("h1", "h2", "h3", "h4") and a.get("id"):
            self.headings.append(a["id"])
        if tag == "nav":
            self._in_nav += 1
        if tag == "a" and a.get("href"):
            (self.nav if self._in_nav else self.links).append(a["href"])

    def handle_endtag(self, tag):
        if tag == "nav":
            self._in_nav -= 1

    def handle_data(self, data):
        self.words.append(data)

    @property
    def text(self) -> str:
        return " ".join(self.words)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    claims, pages, guides = site.build(out)
    return out, claims, pages, guides


def test_every_claim_has_its_verdict_numbers_figures_and_command(built):
    out, claims, _, _ = built
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
    out, _, pages, _ = built
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


@pytest.mark.slow  # make test-thorough: a long check (make test stays under 15 minutes)
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


def _site_pages(out: Path) -> list[Path]:
    return sorted(out.rglob("*.html"))


def _local(out: Path, page: Path, url: str) -> Path | None:
    """The file of the site that ``url`` (on ``page``) loads, or ``None`` for an in-page anchor."""
    path = url.split("#")[0].split("?")[0]
    return (page.parent / path).resolve() if path else None


def test_every_guide_page_has_its_page_with_the_navigation(built):
    out, _, notebooks, guides = built
    sources = sorted((ROOT / "docs").glob("*.md"))
    assert sorted(p.stem for p in guides) == sorted(p.stem for p in sources)
    assert {"evidence", "usage", "own_model", "engine", "integrations", "contributing"} \
        <= {p.stem for p in guides}
    everything = [out / "index.html", *notebooks, *guides]
    for page in everything:
        parsed = Page(page.read_text(encoding="utf-8"))
        reached = {_local(out, page, href) for href in parsed.nav}
        assert reached == {*everything}, f"{page.name}: the navigation misses pages"
    for page in guides:
        parsed = Page(page.read_text(encoding="utf-8"))
        title = site._title((ROOT / "docs" / f"{page.stem}.md").read_text(encoding="utf-8"))
        assert title in parsed.text and parsed.headings, page.name


def test_guide_links_lead_inside_the_site(built):
    """A guide page's links and images lead to pages, headings and figures of the site (a link to
    a source file is shown as its text)."""
    out, _, _, guides = built
    for page in guides:
        parsed = Page(page.read_text(encoding="utf-8"))
        for url in parsed.links + [src for src, _ in parsed.images]:
            if url.startswith("#"):
                assert url[1:] in parsed.headings, f"{page.name}: {url}"
                continue
            assert not url.startswith(("http:", "https:", "//")), f"{page.name}: {url}"
            target = _local(out, page, url)
            assert target.is_file(), f"{page.name}: {url}"
            fragment = url.partition("#")[2]
            if fragment:
                assert fragment in Page(target.read_text(encoding="utf-8")).headings, url
    evidence = Page((out / "docs" / "evidence.html").read_text(encoding="utf-8"))   # the recipes
    assert "../figures/learn_curve.png" in [src for src, _ in evidence.images]


def test_no_page_needs_a_network(built):
    """Every script and stylesheet a page loads is a file of the site: no CDN, MathJax served from
    the site's own copy, whose configuration and fonts are there too."""
    out, _, _, _ = built
    mathjax = set()
    for page in _site_pages(out):
        text = page.read_text(encoding="utf-8")
        parsed = Page(text)
        for src in parsed.scripts:
            assert not re.match(r"^(https?:)?//", src), f"{page.name} loads {src}"
            assert _local(out, page, src).is_file(), f"{page.name} loads {src}, not in the site"
            if "MathJax" in src:
                mathjax.add(_local(out, page, src))
        assert not re.search(r"https?://[^\"' ]*mathjax", text, re.I), page.name
        assert "MathJax" in text and "x-mathjax-config" in text, f"{page.name} typesets no math"
    assert mathjax == {(out / "mathjax" / "MathJax.js").resolve()}
    config = site.MATHJAX_SRC.split("config=")[1].split(",")
    for name in config:
        assert (out / "mathjax" / "config" / f"{name}.js").is_file(), name
    fonts = out / "mathjax" / "jax" / "output" / "HTML-CSS" / "fonts" / "STIX-Web"
    assert (fonts / "fontdata.js").is_file() and any((out / "mathjax" / "fonts").rglob("*.woff"))
