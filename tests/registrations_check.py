"""The check behind every ``tests/<package>/test_registrations.py``: a package's
``registrations.py`` imports each of its modules that registers something, and nothing else.

A module registers when its code calls ``register`` (claims, methods), ``register_study`` or
``register_measure`` (read with ``ast``, nothing imported), other than inside the function of
that name it defines itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tailtheory"

REGISTER_CALLS = {"register", "register_study", "register_measure"}
"""The calls that add to a registry (claims and methods; studies; stored measurements)."""


def registering_modules(package: str, root: Path = PACKAGE) -> set[str]:
    """Dotted names of the modules under ``root/package`` whose code registers something."""
    out = set()
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {getattr(n.func, "id", getattr(n.func, "attr", None))
                 for n in ast.walk(tree) if isinstance(n, ast.Call)}
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if (calls & REGISTER_CALLS) - defined:
            rel = path.relative_to(root).with_suffix("").parts
            out.add(".".join(("tailtheory", *rel)))
    return out


def imported_modules(path: Path) -> set[str]:
    """Dotted names of the modules ``from X import Y`` statements of ``path`` import."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def check_registrations(package: str, root: Path = PACKAGE) -> None:
    """Fail unless ``root/package/registrations.py`` imports exactly the registering modules."""
    want = registering_modules(package, root)
    got = imported_modules(root / package / "registrations.py")
    assert want, f"tailtheory.{package} registers nothing: it needs no registrations module"
    assert not want - got, f"registering modules missing from registrations: {sorted(want - got)}"
    assert not got - want, f"registrations imports modules that register nothing: {sorted(got - want)}"
