"""``docs/claims.md`` and the paper cards (tailtheory.docs): current, complete, resolvable."""

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
    for section in SECTIONS:
        card = docs.section_card(section)
        stated = set()
        for a, i, b, j in re.findall(r"\*\*([A-Z])(\d+)(?:-([A-Z])(\d+))?\*\*", card):
            stated |= {f"{a}{n}" for n in range(int(i), int(j or i) + 1)}
        mapped = docs.card_map(card)
        for claim in docs.section_claims(section):
            assert claim.id in stated, f"{claim.id} is not stated in the {section} card"
            assert claim.id in mapped, f"{claim.id} has no row in the {section} card's map"


@pytest.mark.parametrize("section", SECTIONS)
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
    for section in SECTIONS:
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
