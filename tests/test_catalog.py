"""The catalog (``tailtheory/catalog.py``): every registration module of every section, found
through the package's entry point group, and nothing below the sections naming one."""

import ast
import functools
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from tailtheory import catalog
from tailtheory.core.registry import CATALOG_GROUP
from registrations_check import registering_modules

PACKAGE = Path(__file__).resolve().parents[1] / "tailtheory"


@functools.lru_cache(maxsize=1)
def _fresh_interpreter() -> tuple[list[str], list[str]]:
    """In a fresh interpreter with nothing imported but the three registries: the first lookups
    (which load the catalog) and then every module loaded. One process serves both tests."""
    code = ("import sys; from tailtheory.core.registry import all_claims; "
            "from tailtheory.engine.registry import registered; "
            "from tailtheory.experiments.study import studies; "
            "print(len(all_claims()), 'V6' in all_claims(), 'lopti' in registered(), "
            "'mismatch_dose' in studies(), 'learn_curve' in studies(), "
            "'dose_ladder' in studies()); print(' '.join(sorted(sys.modules)))")
    first, modules = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True, cwd=PACKAGE.parent).stdout.splitlines()
    return first.split(), modules.split()


def _registering_modules() -> set[str]:
    """Modules of the sections and of the size axis whose code registers a claim, a method, a
    study or a stored measurement."""
    return set().union(*(registering_modules(p) for p in (*catalog.SECTIONS, "ladder")))


def test_every_section_is_a_package_with_a_paper_card():
    for section in catalog.SECTIONS:
        assert (PACKAGE / section / "__init__.py").exists(), section
        assert (importlib.import_module(f"tailtheory.{section}").__doc__ or "").strip(), section


def test_the_catalog_imports_every_registering_module():
    """A section module that registers something and is missing from the catalog would leave
    its claims, methods or studies unfound."""
    found = _registering_modules()
    assert {"tailtheory.lopti.claims", "tailtheory.tim.dose", "tailtheory.otb.methods",
            "tailtheory.lopti.decisive.store", "tailtheory.ladder.dose"} <= found
    # in a fresh interpreter: here other tests may already have imported a module it misses
    missing = sorted(found - set(_fresh_interpreter()[1]))
    assert not missing, f"registering modules the catalog does not import: {missing}"


def test_the_entry_point_group_names_the_catalog():
    names = {e.value for e in importlib.metadata.entry_points(group=CATALOG_GROUP)}
    assert "tailtheory.catalog" in names


def test_a_fresh_interpreter_finds_every_claim_method_and_study_without_naming_a_section():
    """From Python, with nothing imported but the three registries: the first lookups load the
    catalog, and every claim, method and study is there."""
    out = _fresh_interpreter()[0]
    assert int(out[0]) > 40 and out[1:] == ["True"] * 5


def test_no_module_below_the_sections_names_one():
    """No string constant in code (docstrings aside) of ``core``, ``engine`` or ``experiments``
    is, or starts with, ``tailtheory.<section>``."""
    bad = []
    for floor in ("core", "engine", "experiments"):
        for path in sorted((PACKAGE / floor).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                    and isinstance(n.body[0], ast.Expr)}
            for n in ast.walk(tree):
                if (isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                        and any(n.value.startswith(f"tailtheory.{s}") for s in catalog.SECTIONS)):
                    bad.append(f"{path.relative_to(PACKAGE)}: {n.value!r}")
    assert not bad, bad
