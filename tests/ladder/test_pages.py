"""The size axis's numbers on the pages (``tailtheory/ladder/pages.py``): each block of
``README.md``, ``paper_repro.md`` and ``docs/evidence.md`` is what the stores give today (a stale
number fails here), and a page without its markers is an error, never a silent skip."""

from __future__ import annotations

import pytest

from tailtheory.core.io import REPO_ROOT
from tailtheory.ladder import pages

PAGES = sorted({page for page, _ in pages.BLOCKS})


@pytest.mark.parametrize("page", PAGES)
def test_every_size_block_of_the_page_is_current(page):
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    assert text == pages.render(page), (
        f"{page}'s size blocks differ from the stores: run `python -m tailtheory.docs`")


def test_a_changed_number_in_a_block_is_caught():
    text = (REPO_ROOT / "paper_repro.md").read_text(encoding="utf-8")
    start, end = pages.marker("first builds")
    block = text[text.index(start):text.index(end)]
    stale = text.replace(block, block.replace("0.601", "0.61", 1))
    assert stale != text
    assert pages.splice(stale, "first builds", pages.first_builds_table()) == text


@pytest.mark.parametrize("text", ["no markers", "<!-- end size: summary -->\n" +
                                  pages.marker("summary")[0]])
def test_a_page_without_its_markers_is_refused(text):
    with pytest.raises(ValueError, match="markers of block 'summary'"):
        pages.splice(text, "summary", "x")


def test_the_ledger_names_the_model_of_each_size_row():
    text = (REPO_ROOT / "paper_repro.md").read_text(encoding="utf-8")
    start, end = pages.marker("models")
    block = text[text.index(start):text.index(end)]
    assert "committed" in block and "unrecorded" in block
    for row in block.splitlines()[3:]:
        name = row.split("`")[1]
        assert ".b" in name or (name.endswith("(first build)") and "| unrecorded |" in row)
