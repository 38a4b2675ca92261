"""Build the static report site: every claim with its verdict, numbers, figures and command, and
the seven notebooks as executed, readable in a browser without installing anything.

    python docs/site/build.py                   # into build/site/ (what `make site` runs)
    python docs/site/build.py --out DIR

Sources, all committed: the ledger ``paper_repro.md`` (each claim's statement, verdict, numbers
in prose, command and deviations; its figures table says which figures show which claim), the
verdicts and numbers of ``figures/claims.json`` (``tailtheory verify``), the figures in
``figures/`` and the notebooks' renders in ``docs/notebooks/`` (``make render``). Nothing is
executed: the site shows what the repository holds.

Tool: nbconvert's HTML exporter with its ``lab`` template, already installed with Jupyter (no
new dependency; a render's outputs and images go in as they were executed, images embedded), and
mistune, which nbconvert itself uses, for the ledger's Markdown. Math is typeset by MathJax in
the reader's browser (loaded from its CDN: without a network the pages still show every figure,
table and verdict, with the formulas as TeX source). Figures are numbered in the order the index
shows them; every image carries alternative text.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATHJAX = ('<script>window.MathJax = {tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]]}};'
           '</script><script async src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/'
           'tex-chtml.js"></script>')
STYLE = """body{font-family:system-ui,sans-serif;max-width:72em;margin:2em auto;padding:0 1em;
line-height:1.45;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;
padding:3px 8px;vertical-align:top;text-align:left}code{background:#f4f4f4;padding:0 3px}
figure{margin:1em 0}figcaption{font-size:.9em;color:#444}img{max-width:100%}
.v{font-weight:bold;padding:1px 6px;border-radius:3px;white-space:nowrap}
section.claim{border-top:1px solid #ddd;padding-top:.6em;margin-top:1.2em}"""
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


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
            f'{html.escape(title)}</title><style>{STYLE}</style>{MATHJAX}</head><body>'
            f"{body}</body></html>\n")


def build_index(out: Path, markdown) -> int:
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
            "<code>figures/claims.json</code>). The notebooks, as executed on their quick "
            f"preset:</p><ul>{notebooks}</ul><h2>Verdicts</h2><table id=\"verdicts\"><tr><th>id"
            "</th><th>paper</th><th>claim</th><th>verdict</th></tr>" + "".join(toc)
            + "</table><h2>Claims</h2>" + "".join(sections))
    (out / "index.html").write_text(_page("tailtheory: claims and verdicts", body),
                                    encoding="utf-8")
    for path in number:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, out / path)
    return len(toc)


def _plain(markdown_text: str) -> str:
    return re.sub(r"[`*]", "", markdown_text)


def build_notebooks(out: Path) -> list[Path]:
    """Each render of ``docs/notebooks/`` as ``notebooks/NAME.html`` (images embedded)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    pages = []
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    for src in sorted((ROOT / "docs" / "notebooks").glob("[0-9]*.ipynb")):
        body, _ = exporter.from_notebook_node(nbformat.read(src, as_version=4))
        page = out / "notebooks" / f"{src.stem}.html"
        page.write_text(body, encoding="utf-8")
        pages.append(page)
    return pages


def build(out: Path) -> tuple[int, list[Path]]:
    """Build the site into ``out`` (a new or empty folder, or a site built before, emptied
    first; any other folder is refused); ``(claims, notebook pages)``."""
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
    return build_index(out, markdown), build_notebooks(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "site",
                    help="where to write the site: a new or empty folder, or a site built before "
                         "(emptied first); default: build/site/")
    args = ap.parse_args(argv)
    claims, pages = build(args.out.resolve())
    print(f"wrote {args.out / 'index.html'} ({claims} claims) and {len(pages)} notebook pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
