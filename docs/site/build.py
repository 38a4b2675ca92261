"""Build the static report site: every claim with its verdict, numbers, figures and command, the
seven notebooks as executed, and the guide pages of ``docs/``, readable in a browser without
installing anything and without a network.

    python docs/site/build.py                   # into build/site/ (what `make site` runs)
    python docs/site/build.py --out DIR

Sources, all committed: the ledger ``paper_repro.md`` (each claim's statement, verdict, numbers
in prose, command and deviations; its figures table says which figures show which claim), the
verdicts and numbers of ``figures/claims.json`` (``tailtheory verify``), the figures in
``figures/``, the notebooks' renders in ``docs/notebooks/`` (``make render``) and the Markdown
pages ``docs/*.md``. Nothing is executed: the site shows what the repository holds.

Tool: nbconvert's HTML exporter with its ``lab`` template, already installed with Jupyter (no
new dependency; a render's outputs and images go in as they were executed, images embedded), and
mistune, which nbconvert itself uses, for the ledger's and the guide pages' Markdown. Every page
has the site's navigation (the verdicts, the guide pages, the notebooks). Math is typeset by
MathJax 2 from a copy inside the site (``mathjax/``, the static files of the pinned
``jupyter-server-mathjax`` package of the ``dev`` extra), referenced by a relative path: no page
loads a script, style or font from another host (the notebook pages' require.js, widget manager
and mermaid, which nbconvert would take from a CDN, are left out: the renders hold no live
widgets and no diagrams). Figures are numbered in the order the index shows them; every image
carries alternative text.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import posixpath
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATHJAX_DIR = "mathjax"
"""Where the site keeps its copy of MathJax (the static files of ``jupyter-server-mathjax``)."""
MATHJAX_CONFIG = ('<script type="text/x-mathjax-config">MathJax.Hub.Config({tex2jax: {inlineMath: '
                  '[["$", "$"], ["\\\\(", "\\\\)"]], processEscapes: true}, "HTML-CSS": '
                  '{availableFonts: [], imageFont: null, preferredFont: null, webFont: '
                  '"STIX-Web"}, messageStyle: "none"});</script>')
"""MathJax 2's settings: ``$...$`` inline; the package ships the STIX-Web fonts only, so the
HTML-CSS output is told to use those (no image fonts, no fonts looked up on the reader's
machine)."""
MATHJAX_SRC = "MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
"""The script and the combined configuration the package ships (``config/...-full.js``)."""
GUIDES = ("evidence", "usage", "own_model", "engine", "ladder", "benchmarks", "integrations",
          "contributing", "claims", "regime", "diagnose", "bad_inputs")
"""The order of ``docs/*.md`` in the navigation; a page not named here follows, by name."""
STYLE = """body{font-family:system-ui,sans-serif;max-width:86em;margin:2em auto;padding:0 1em;
line-height:1.45;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;
padding:3px 8px;vertical-align:top;text-align:left}code{background:#f4f4f4;padding:0 3px}
figure{margin:1em 0}figcaption{font-size:.9em;color:#444}img{max-width:100%}
.v{font-weight:bold;padding:1px 6px;border-radius:3px;white-space:nowrap}
section.claim{border-top:1px solid #ddd;padding-top:.6em;margin-top:1.2em}
.layout{display:flex;gap:2em;align-items:flex-start}.layout>main{flex:1;min-width:0}
nav.site{flex:0 0 13em;position:sticky;top:1em;font-size:.9em}nav.site ul{list-style:none;
padding-left:0;margin:.2em 0 .8em}nav.site li{margin:.15em 0}nav.site b{color:#555}
nav.site a.here{font-weight:bold}pre{background:#f4f4f4;padding:.5em;overflow-x:auto}
pre code{padding:0}"""
NAV_TOP_STYLE = """nav.site-top{max-width:72em;margin:1em auto 0;padding:0 1em;font:14px/1.6
system-ui,sans-serif}nav.site-top ul{display:inline;list-style:none;padding:0;margin:0 .8em 0 .3em}
nav.site-top li{display:inline;margin-right:.7em}nav.site-top a.here{font-weight:bold}"""
"""The navigation above a notebook page, styled on its own (nbconvert's styles stay as they are)."""
VERDICT_STYLE = {"HOLDS": "#d8f0dc", "HOLDS-UNDER": "#d8f0dc", "TOY-SCALE": "#e6f2d6",
                 "REFUTED": "#f9d6d5", "NOT-REPRODUCED": "#fdebc8"}
MARKER = ".tailtheory-site"
"""The file that marks a folder as a site this builder wrote (and may empty on its next build)."""
_FIG = re.compile(r"`(figures/[\w/.-]+\.png)`")
_CLAIM_RANGE = re.compile(r"\b([A-Z])(\d{1,2})\s*-\s*(?:\1)?(\d{1,2})\b")


def claims_of(cell: str) -> set[str]:
    """Claim ids named in a figures-table cell: ``M3, M7``, ``T1-T8`` (a range), ``V3``."""
    ids = set(re.findall(r"\b[A-Z]\d{1,2}\b", cell))
    for letter, lo, hi in _CLAIM_RANGE.findall(cell):
        ids |= {f"{letter}{i}" for i in range(int(lo), int(hi) + 1)}
    return ids


def figure_rows(ledger: str) -> list[tuple[list[str], str, set[str]]]:
    """The ledger's figures table: ``(figure paths, description, claim ids)`` per row; superseded
    figures keep their place under ``figures/superseded/``."""
    out = []
    part = ledger[ledger.index("## Figures"):]
    part = part[:part.index("\n## ", 3)] if "\n## " in part[3:] else part
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`figures/"):
            continue
        out.append((_FIG.findall(cells[0]), cells[0], claims_of(cells[1])))
    return out


def build_index(out: Path, markdown, nav) -> int:
    """Write ``index.html``: each claim with its verdict, the ledger's numbers and command, its
    figures (numbered, with alternative text). Returns the number of claims."""
    from tailtheory.core.readme import ledger_rows

    ledger = (ROOT / "paper_repro.md").read_text(encoding="utf-8")
    measured = {c["id"]: c for c in json.loads((ROOT / "figures" / "claims.json").read_text())
                ["claims"]}
    figures = figure_rows(ledger)
    number, sections, toc = {}, [], []
    for row in ledger_rows(ledger):
        cid, paper, statement, verdict, numbers, command = row[:6]
        deviations = row[6] if len(row) > 6 else ""
        got = measured.get(cid, {}).get("verdict", "not measured")
        colour = VERDICT_STYLE.get(got, "#eeeeee")
        figs = []
        for paths, desc, ids in figures:
            if cid not in ids:
                continue
            for path in paths:
                if not (ROOT / path).exists():
                    continue
                n = number.setdefault(path, len(number) + 1)
                figs.append(f'<figure><img src="{html.escape(path)}" alt="Figure {n}: '
                            f'{html.escape(_plain(desc))}"><figcaption><b>Figure {n}.</b> '
                            f"{markdown(desc)}</figcaption></figure>")
        toc.append(f'<tr><td><a href="#{cid}">{cid}</a></td><td>{html.escape(paper)}</td><td>'
                   f"{markdown(statement)}</td><td><span class=v style=\"background:{colour}\">"
                   f"{html.escape(got)}</span></td></tr>")
        sections.append(
            f'<section class="claim" id="{cid}"><h3>{cid} ({html.escape(paper)}): '
            f'{markdown(statement)}</h3><p>Verdict: <span class=v style="background:{colour}">'
            f"{html.escape(got)}</span> (ledger: {html.escape(verdict.replace('*', ''))})</p>"
            f"<p>{markdown(numbers)}</p><p>Regenerate: {markdown(command)}</p>"
            + (f"<p>Deviations from the paper: {markdown(deviations)}</p>" if deviations else "")
            + "".join(figs) + "</section>")
    notebooks = "".join(f'<li><a href="notebooks/{p.stem}.html">{p.stem}</a></li>'
                        for p in sorted((ROOT / "docs" / "notebooks").glob("[0-9]*.ipynb")))
    body = (f"<h1>tailtheory: the claims and their verdicts</h1><p>{len(toc)} claims of the "
            "token-tail papers, each with its verdict, the numbers behind it, the figures that "
            "show it and the command that regenerates it (<code>paper_repro.md</code>, "
            "<code>figures/claims.json</code>). The guide pages are listed beside; the "
            f"notebooks, as executed on their quick preset:</p><ul>{notebooks}</ul>"
            "<h2>Verdicts</h2><table id=\"verdicts\"><tr><th>id"
            "</th><th>paper</th><th>claim</th><th>verdict</th></tr>" + "".join(toc)
            + "</table><h2>Claims</h2>" + "".join(sections))
    (out / "index.html").write_text(
        _page("tailtheory: claims and verdicts", body, "index.html", nav("index.html")),
        encoding="utf-8")
    for path in number:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, out / path)
    return len(toc)


def _plain(markdown_text: str) -> str:
    return re.sub(r"[`*]", "", markdown_text)


def mathjax(prefix: str) -> str:
    """The script tags that typeset a page's math, ``prefix`` leading from the page to the site's
    root (``""`` or ``"../"``)."""
    return f'{MATHJAX_CONFIG}<script src="{prefix}{MATHJAX_DIR}/{MATHJAX_SRC}"></script>'


def copy_mathjax(out: Path) -> Path:
    """Copy MathJax's static files into ``out/mathjax/``; returns the script's path there."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise SystemExit("the site serves MathJax from the package jupyter-server-mathjax, which "
                         "is missing: pip install -e '.[dev]' (or make site)") from None
    src = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(src, out / MATHJAX_DIR)
    return out / MATHJAX_DIR / MATHJAX_SRC.split("?")[0]


def _title(markdown_text: str) -> str:
    """A Markdown page's title: its first ``# `` heading, without markup."""
    first = re.search(r"^# (.+)$", markdown_text, re.M)
    return _plain(first.group(1)).strip() if first else "untitled"


def guide_sources() -> list[Path]:
    """``docs/*.md`` in the navigation's order (``GUIDES``, then any other page by name)."""
    pages = sorted((ROOT / "docs").glob("*.md"))
    rank = {name: i for i, name in enumerate(GUIDES)}
    return sorted(pages, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


def navigation(here: str, guides: list[tuple[str, str]], notebooks: list[str],
               css: str = "site") -> str:
    """The site's navigation for the page at ``here`` (a path inside the site, such as
    ``docs/usage.html``): the verdicts, every guide page (``(site path, title)``) and every
    notebook, each link relative to that page; ``css`` is its class (``site``: a column beside
    the page, ``site-top``: a band above it)."""
    def link(path: str, text: str) -> str:
        rel = posixpath.relpath(path, posixpath.dirname(here) or ".")
        mark = ' class="here"' if path == here else ""
        return f'<li><a href="{html.escape(rel)}"{mark}>{html.escape(text)}</a></li>'

    return (f'<nav class="{css}" aria-label="site"><b>tailtheory</b><ul>'
            + link("index.html", "Claims and verdicts") + "</ul><b>Guides</b><ul>"
            + "".join(link(path, title) for path, title in guides) + "</ul><b>Notebooks</b><ul>"
            + "".join(link(f"notebooks/{name}.html", name) for name in notebooks)
            + "</ul></nav>")


def _page(title: str, body: str, here: str, nav: str) -> str:
    prefix = "../" * here.count("/")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
            f"{html.escape(title)}</title><style>{STYLE}</style>{mathjax(prefix)}</head><body>"
            f'<div class="layout">{nav}<main>{body}</main></div></body></html>\n')


def slug(text: str, seen: dict[str, int]) -> str:
    """A heading's anchor as code hosts make it (lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2`` ... for repeats), so ``page.md#anchor`` links work on both."""
    base = re.sub(r"[^\w\- ]", "", html.unescape(re.sub(r"<[^>]+>", "", text)).strip().lower())
    base = base.replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def site_target(source: str, url: str) -> str | None:
    """Where a link of the Markdown page ``source`` (a path in the repository) points inside the
    site: ``docs/NAME.html`` for a guide page, ``notebooks/NAME.html`` for a render, the same path
    for a figure, ``index.html`` for the README and the ledger (which the index shows); ``None``
    for anything else (a source file, a stored measurement), shown as its text alone."""
    path, _, fragment = url.partition("#")
    if not path:
        return url                                     # an anchor on the same page
    if re.match(r"^[a-z][a-z0-9+.-]*:", path):
        return url                                     # another site: left as it is
    target = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    anchor = f"#{fragment}" if fragment else ""
    if target in ("README.md", "paper_repro.md"):
        return "index.html"
    if re.fullmatch(r"docs/[\w-]+\.md", target) and (ROOT / target).is_file():
        return target[:-3] + ".html" + anchor
    if re.fullmatch(r"docs/notebooks/[\w-]+\.ipynb", target) and (ROOT / target).is_file():
        return "notebooks/" + posixpath.basename(target)[:-6] + ".html"
    if target.startswith("figures/") and (ROOT / target).is_file():
        return target
    return None


def render_markdown(source: str, text: str, here: str) -> tuple[str, set[str]]:
    """A Markdown page of the repository as HTML for the site page at ``here``: headings with
    anchors, links and images rewritten to the site's copies (``site_target``). Returns the HTML
    and the figures it shows (paths in the repository, to copy)."""
    import mistune

    figures: set[str] = set()
    seen: dict[str, int] = {}

    def rel(url: str) -> str | None:
        target = site_target(source, url)
        if target is None or target.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return target
        return posixpath.relpath(target, posixpath.dirname(here) or ".")

    class Renderer(mistune.HTMLRenderer):
        def heading(self, text, level, **attrs):
            return f'<h{level} id="{slug(text, seen)}">{text}</h{level}>\n'

        def link(self, text, url, title=None):
            target = rel(url)
            return text if target is None else super().link(text, target, title)

        def image(self, text, url, title=None):
            target = site_target(source, url)
            if target is None or not target.startswith("figures/"):
                return html.escape(text)
            figures.add(target)
            return super().image(text, rel(url), title)

    md = mistune.create_markdown(renderer=Renderer(escape=False), plugins=["table"])
    return md(text), figures


def build_guides(out: Path, nav) -> list[Path]:
    """Each page of ``docs/*.md`` as ``docs/NAME.html`` with the site's navigation, its figures
    copied beside the index's."""
    pages = []
    (out / "docs").mkdir(parents=True, exist_ok=True)
    for src in guide_sources():
        here = f"docs/{src.stem}.html"
        text = src.read_text(encoding="utf-8")
        body, figures = render_markdown(f"docs/{src.name}", text, here)
        (out / here).write_text(_page(f"tailtheory: {_title(text)}", body, here, nav(here)),
                                encoding="utf-8")
        for path in figures:
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, out / path)
        pages.append(out / here)
    return pages


OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}{{ resources.offline_mathjax }}{%- endblock -%}
"""
"""nbconvert's ``lab`` template without what it would load from a CDN (require.js, the widget
manager, mermaid), and with the site's own MathJax."""


def build_notebooks(out: Path, nav) -> list[Path]:
    """Each render of ``docs/notebooks/`` as ``notebooks/NAME.html`` (images embedded), with the
    site's navigation above it."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    offline = jinja2.DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})
    exporter = HTMLExporter(template_name="lab", template_file="offline.html.j2",
                            extra_loaders=[offline])
    pages = []
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    for src in sorted((ROOT / "docs" / "notebooks").glob("[0-9]*.ipynb")):
        here = f"notebooks/{src.stem}.html"
        body, _ = exporter.from_notebook_node(nbformat.read(src, as_version=4),
                                              resources={"offline_mathjax": mathjax("../")})
        top = f"<style>{NAV_TOP_STYLE}</style>{nav(here, 'site-top')}"
        body = body.replace("<main>", top + "<main>", 1)
        page = out / here
        page.write_text(body, encoding="utf-8")
        pages.append(page)
    return pages


def build(out: Path) -> tuple[int, list[Path], list[Path]]:
    """Build the site into ``out`` (a new or empty folder, or a site built before, emptied
    first; any other folder is refused); ``(claims, notebook pages, guide pages)``."""
    import mistune

    md = mistune.create_markdown(escape=True)

    def markdown(text: str) -> str:  # one table cell: inline Markdown, no wrapping paragraph
        return re.sub(r"^<p>|</p>\s*$", "", md(text.replace("<br>", "\n")).strip())

    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():  # a folder this builder did not write is never emptied
            raise SystemExit(f"{out} holds files this builder did not write: choose a new or "
                             f"empty folder, or a site built before")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by docs/site/build.py; emptied by its next build\n")
    copy_mathjax(out)
    guides = [(f"docs/{p.stem}.html", _title(p.read_text(encoding="utf-8")))
              for p in guide_sources()]
    notebooks = [p.stem for p in sorted((ROOT / "docs" / "notebooks").glob("[0-9]*.ipynb"))]

    def nav(here: str, css: str = "site") -> str:
        return navigation(here, guides, notebooks, css)

    claims = build_index(out, markdown, nav)
    return claims, build_notebooks(out, nav), build_guides(out, nav)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "site",
                    help="where to write the site: a new or empty folder, or a site built before "
                         "(emptied first); default: build/site/")
    args = ap.parse_args(argv)
    claims, pages, guides = build(args.out.resolve())
    print(f"wrote {args.out / 'index.html'} ({claims} claims), {len(pages)} notebook pages and "
          f"{len(guides)} guide pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
