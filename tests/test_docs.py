"""``docs/claims.md`` and the paper cards (tailtheory.docs): current, complete, resolvable; the
module maps of ``docs/contributing.md``: current, one table per package."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tailtheory import docs
from tailtheory.catalog import SECTIONS
from tailtheory.core.registry import all_claims

ROOT = Path(__file__).resolve().parents[1]


def test_docs_claims_md_is_current():
    """docs/claims.md equals what the registry and the cards give; regenerate with
    ``python -m tailtheory.docs``."""
    assert docs.DOCS.read_text(encoding="utf-8") == docs.render(), (
        "docs/claims.md is out of date: run `python -m tailtheory.docs`")


def test_every_registered_claim_has_a_card_entry():
    """Each registered claim is stated (**ID** or a range **T1-T8**) and mapped in its section's
    paper card."""
    for section in docs.DOC_SECTIONS:
        card = docs.section_card(section)
        stated = set()
        for a, i, b, j in re.findall(r"\*\*([A-Z])(\d+)(?:-([A-Z])(\d+))?\*\*", card):
            stated |= {f"{a}{n}" for n in range(int(i), int(j or i) + 1)}
        mapped = docs.card_map(card)
        for claim in docs.section_claims(section):
            assert claim.id in stated, f"{claim.id} is not stated in the {section} card"
            assert claim.id in mapped, f"{claim.id} has no row in the {section} card's map"


@pytest.mark.parametrize("section", docs.DOC_SECTIONS)
def test_card_names_resolve(section):
    """Every function and test file a card names exists."""
    for cid, names in docs.card_map(docs.section_card(section)).items():
        for name in names:
            if name.endswith(".py"):
                path = ROOT / name if "/" in name else ROOT / "tests" / section / name
                assert path.exists(), f"{section} card, {cid}: no test file {name}"
                continue
            full = name if name.startswith("tailtheory.") else f"tailtheory.{section}.{name}"
            module, attr = full.rsplit(".", 1)
            assert hasattr(importlib.import_module(module), attr), (
                f"{section} card, {cid}: {full} does not exist")


def test_card_checks_are_the_registered_ones():
    """The check a card names for a registered claim is the function the registry runs."""
    claims = all_claims()
    for section in docs.DOC_SECTIONS:
        for cid, names in docs.card_map(docs.section_card(section)).items():
            if cid not in claims:
                continue
            fn = getattr(claims[cid].check, "func", claims[cid].check)
            assert f"claims.{fn.__qualname__}" in names, (cid, names)


def test_section_packages_import_light():
    """Importing a section package (its card) pulls in neither matplotlib nor its submodules."""
    code = ("import sys, tailtheory.softmax, tailtheory.mismatch, tailtheory.pruning, "
            "tailtheory.lopti, tailtheory.trm, tailtheory.otb, tailtheory.core; "
            "print('matplotlib' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_card_map_reads_names_only():
    card = "| M3 | `logprob.mismatch_bound` (order `exact`) | `p = softmax(z)` | `test_logprob.py` |"
    assert docs.card_map(card) == {"M3": ["logprob.mismatch_bound", "test_logprob.py"]}


# ---- the module maps of docs/contributing.md --------------------------------------------------

def test_contributing_module_maps_are_current():
    """The tables between the markers of docs/contributing.md are the package docstrings' module
    maps; regenerate with ``python -m tailtheory.docs``."""
    text = docs.CONTRIBUTING.read_text(encoding="utf-8")
    assert text.count(docs.MAPS_START) == 1 and text.count(docs.MAPS_END) == 1
    assert text == docs.splice_module_maps(text, docs.module_maps_block()), (
        "docs/contributing.md's module maps are out of date: run `python -m tailtheory.docs`")


def test_a_stale_module_map_in_the_page_is_caught():
    """A row dropped from (or left in) the page's block makes it differ from the maps."""
    text = docs.CONTRIBUTING.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `reference` |"))
    stale = text.replace(row + "\n", "")
    assert stale != docs.splice_module_maps(stale, docs.module_maps_block())
    extra = text.replace(row, row + "\n| `gone` | a module that moved. |")
    assert extra != docs.splice_module_maps(extra, docs.module_maps_block())


def test_contributing_module_maps_show_every_package():
    """Each package of ``tailtheory/`` has its table (a subpackage its parent's map leaves out
    would be missing; tests/test_layout.py fails on that map too)."""
    block = docs.module_maps_block()
    for init in sorted(docs.PACKAGE.rglob("__init__.py")):
        path = init.parent.relative_to(ROOT).as_posix()
        assert f"**`{path}/`**" in block, f"no module map table for {path}/"


def _made_up_package(root):
    files = {
        "tailtheory/__init__.py": '"""Top.\n\nSecond paragraph.\n\n- ``core/``: what is shared.\n'
                                  '- ``cli``: the command, with its\n  continuation line.\n"""\n',
        "tailtheory/cli.py": "",
        "tailtheory/core/__init__.py": '"""Core, in two\nlines.\n\n- ``a``: the ``|x|`` of '
                                       ':func:`~tailtheory.core.a.f` and :mod:`tailtheory.b`.\n'
                                       '\nNot an item: ``b``.\n"""\n',
        "tailtheory/core/a.py": ""}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "tailtheory"


def test_module_maps_block_renders_each_map(tmp_path):
    block = docs.module_maps_block(_made_up_package(tmp_path))
    assert block == (
        "**`tailtheory/`**: Top.\n\n| module | what it does |\n|---|---|\n"
        "| `core/` | what is shared. |\n| `cli` | the command, with its continuation line. |\n\n"
        "**`tailtheory/core/`**: Core, in two lines.\n\n| module | what it does |\n|---|---|\n"
        "| `a` | the `\\|x\\|` of `f` and `tailtheory.b`. |\n")


def test_a_stale_module_map_block_is_caught_and_rewritten(tmp_path):
    """A page whose block differs from the maps fails the check; ``update_contributing`` rewrites
    only what lies between the markers; a page without them is an error."""
    pkg = _made_up_package(tmp_path)
    page = tmp_path / "contributing.md"
    stale = (f"# Title\n\nBefore.\n\n{docs.MAPS_START}\n\n| old | table |\n\n{docs.MAPS_END}"
             "\n\nAfter.\n")
    page.write_text(stale)
    assert stale != docs.splice_module_maps(stale, docs.module_maps_block(pkg))
    assert docs.update_contributing(page, pkg)
    block = docs.module_maps_block(pkg).strip()
    assert page.read_text() == (f"# Title\n\nBefore.\n\n{docs.MAPS_START}\n\n{block}\n\n"
                                f"{docs.MAPS_END}\n\nAfter.\n")
    assert not docs.update_contributing(page, pkg)                  # current: nothing to write
    page.write_text("# No markers\n")
    with pytest.raises(ValueError, match="module-map markers"):
        docs.update_contributing(page, pkg)
