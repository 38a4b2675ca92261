"""The package's structure, read from its source with ``ast`` (no module of it is imported).

- **floors**: ``core`` < ``engine`` < ``experiments`` < the paper sections < the front ends
  (``cli``, ``catalog``, ``docs``, ``diagnose``, ``integrations``, ``ladder``, ``probe``,
  ``regime``). A
  module imports only its own floor or lower ones: ``core`` imports neither the engine nor a
  section, the engine nothing of the experiments floor, a section no front end. Sections may
  import each other, and no module of the package may sit on an import cycle. Every import
  counts: an ``import`` statement at the top of a file or inside a function, relative or
  absolute, and a module named to ``importlib.import_module`` or ``__import__`` (an f-string
  names every module its pattern matches). The registries find the sections through the
  package's entry point group, which names no module in the code.
- **rooms**: inside every package, its modules and subpackages (each subpackage one room) import
  each other without a circle, so no arrow runs back up inside a folder (the engine's wings never
  import the engine room's modules that import them).
- **imports inside functions**: each section (and each floor below) holds at most the count of
  :data:`IN_FUNCTION_MAX`; front ends, where start-up time matters, are free.
- **size**: every module of ``tailtheory/`` holds at most :data:`MAX_LINES` lines; the tracked
  tree at most :data:`TREE_MAX_MIB` MiB and ``weights/`` :data:`WEIGHTS_MAX_MB` MB, so a GPU run's
  copy of the tree (64 MiB at most) always fits.
- **mirrors**: ``tailtheory/<folder>/<module>.py`` is tested by ``tests/<folder>/test_<module>.py``
  (``tailtheory/<module>.py`` by ``tests/test_<module>.py``), save the few of :data:`UNMIRRORED`.
- **names**: no public function (a top-level ``def`` without a leading ``_``) of one section has
  the name of another section's public function.
- **module maps**: every package of ``tailtheory/`` (the top level included: :data:`MAPPED`)
  names in its ``__init__.py`` docstring every module and subpackage it holds, one line each
  (``- ``name``: ...``, a subpackage ``- ``name/``: ...``), and nothing it does not hold.
  ``python -m tailtheory.docs`` renders these maps into ``docs/contributing.md``.

Each checker takes the folders it reads, so the tests at the bottom feed it small made-up
packages and see it catch what it is meant to catch.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tailtheory"
TESTS = ROOT / "tests"

MAX_LINES = 400

TREE_MAX_MIB = 56
"""The most the tracked tree may hold, in MiB: a GPU run copies the working tree and refuses one
over 64 MiB, which must leave room for the wheels such a run carries."""

WEIGHTS_MAX_MB = 30
"""The most the committed weights (``weights/``) may hold, in MB (10^6 bytes)."""
"""The most lines a module of the package may hold."""

SECTIONS = ("softmax", "mismatch", "pruning", "lopti", "trm", "otb", "tim")
"""The paper sections, one folder each."""

FRONT_ENDS = ("cli", "catalog", "docs", "diagnose", "integrations", "ladder", "probe", "regime")
"""The top floor: what a user runs, and the catalog that collects the sections."""

FLOORS = {"core": 0, "engine": 1, "experiments": 2, **{s: 3 for s in SECTIONS},
          **{f: 4 for f in FRONT_ENDS}}
"""The floor of each top-level folder (or module) of the package: imports run down or
sideways, never up."""

IN_FUNCTION_MAX = {"core": 4, "engine": 5, "experiments": 3, "softmax": 0, "mismatch": 0,
                   "pruning": 5, "lopti": 2, "trm": 3, "otb": 0, "tim": 0}
"""The most imports of the package inside functions each floor below the front ends may hold:
the counts when they were first held. An import belongs at the top of its module; lower a
count when you move one up, never raise it."""

UNMIRRORED: dict[str, str] = {}
"""Modules without a mirrored test file, and why (kept as short as possible)."""

MAPPED = (".",)
"""Folders (relative to the package) whose packages, each one under them and the folder's own,
carry a module map in their docstring: ``"."`` is the whole package, its top level included."""


# ---- reading a package ---------------------------------------------------------------------

def module_files(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package`` (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, level: int, here: str, is_package: bool) -> str:
    """The absolute module name of ``from <level dots><name> import ...`` in module ``here``."""
    if not level:
        return name
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, anywhere in it.

    ``from a.b import c`` imports ``a.b.c`` when that is a module, else ``a.b``; each import
    names its deepest module of ``known`` (a package's ``__init__`` it passes through is not
    counted, as its own imports are none of the importer's choosing).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    out = set()

    def deepest(dotted: str) -> str | None:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in known:
                return ".".join(parts[:i])
        return None

    for node in ast.walk(tree):
        named = _named_import(node)
        if named is not None:
            out |= {m for m in known if named.fullmatch(m) and m != name}
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, name, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        out |= {t for t in map(deepest, targets) if t is not None and t != name}
    return out


def _named_import(node: ast.AST) -> re.Pattern | None:
    """The modules a call ``import_module(X)`` / ``importlib.import_module(X)`` / ``__import__(X)``
    names, as a pattern: a string constant names itself, an f-string every module matching it
    (each ``{...}`` standing for a dotted name)."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    fn = node.func
    called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
    if called not in ("import_module", "__import__"):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return re.compile(re.escape(arg.value))
    if isinstance(arg, ast.JoinedStr):
        return re.compile("".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[\w.]+"
                                  for v in arg.values))
    return None


def in_function_imports(package: Path) -> dict[str, int]:
    """Top-level folder (or module) -> how many imports of the package sit inside a function."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, inside: bool, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, where)
                continue
            if inside and isinstance(child, ast.ImportFrom) and (
                    child.level or (child.module or "").startswith("tailtheory")):
                out[where] = out.get(where, 0) + 1
            elif inside and isinstance(child, ast.Import):
                out[where] = out.get(where, 0) + sum(a.name.startswith("tailtheory")
                                                     for a in child.names)
            visit(child, inside, where)

    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).parts
        where = rel[0] if len(rel) > 1 else path.stem
        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False, where)
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    files = module_files(package)
    known = set(files)
    return {name: imports(name, path, known) for name, path in files.items()}


def floor_of(module: str, floors: dict[str, int] = FLOORS) -> int | None:
    """The floor of ``module`` (``tailtheory.engine.trainer`` -> that of ``engine``)."""
    parts = module.split(".")
    return floors.get(parts[1]) if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], floors: dict[str, int] = FLOORS) -> dict:
    """Module -> the modules on a higher floor than its own that it imports."""
    out = {}
    for name, targets in graph.items():
        mine = floor_of(name, floors)
        if mine is None:
            continue
        up = sorted(t for t in targets if (floor_of(t, floors) or 0) > mine)
        if up:
            out[name] = up
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: every strongly connected set of two or more modules (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def room_cycles(graph: dict[str, set[str]]) -> dict[str, list[list[str]]]:
    """Package -> the circles among its rooms. A package's rooms are its own modules and its
    subpackages, each subpackage one room with everything under it (``engine``'s rooms are
    ``trainer``, ``config``, ... and the wings ``rollout/``, ``tasks/``, ``start/``): an import
    from a wing back into a module of the room that imports the wing is a circle here, even when
    no single module sits on an import cycle."""
    packages = {m.rsplit(".", 1)[0] for m in graph if "." in m}
    out = {}
    for pkg in sorted(packages):
        pre = pkg + "."

        def room(m: str, pre: str = pre) -> str | None:
            return pre + m[len(pre):].split(".")[0] if m.startswith(pre) else None

        rooms: dict[str, set[str]] = {}
        for m, targets in graph.items():
            r = room(m)
            if r is not None:
                rooms.setdefault(r, set()).update(
                    rt for rt in map(room, targets) if rt is not None and rt != r)
        found = cycles(rooms)
        if found:
            out[pkg] = found
    return out


def line_counts(package: Path) -> dict[str, int]:
    """File (relative to the package's parent) -> its number of lines."""
    return {str(p.relative_to(package.parent)): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(package.rglob("*.py"))}


def mirror_of(package: Path, path: Path, tests: Path) -> Path:
    """Where the test file of module ``path`` belongs."""
    rel = path.relative_to(package)
    return tests / rel.parent / f"test_{rel.name}"


def unmirrored(package: Path, tests: Path, allowed=()) -> list[str]:
    """Modules (relative to ``package``) with no mirrored test file and not in ``allowed``."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if path.name == "__init__.py" or rel in allowed:
            continue
        if not mirror_of(package, path, tests).exists():
            out.append(rel)
    return out


def public_functions(path: Path) -> set[str]:
    """Names of the top-level ``def``s of ``path`` that do not start with ``_``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not n.name.startswith("_")}


def shared_function_names(package: Path, sections=SECTIONS) -> dict[str, list[str]]:
    """Public function name -> the modules defining it, for names found in two sections."""
    where: dict[str, list[str]] = {}
    for section in sections:
        for path in sorted((package / section).glob("*.py")):
            for fn in public_functions(path):
                where.setdefault(fn, []).append(f"{section}/{path.name}")
    return {fn: mods for fn, mods in sorted(where.items())
            if len({m.split("/")[0] for m in mods}) > 1}


MAP_LINE = re.compile(r"^- ``(\w+/?)``")
"""A line of a module map: ``- ``name``:`` (a module) or ``- ``name/``:`` (a subpackage)."""


def module_map_gaps(package: Path, folders=MAPPED) -> dict[str, list[str]]:
    """Package (relative to ``package``; the top level is ``.``) -> what its docstring's module
    map gets wrong: each module or subpackage it holds and does not name (``missing x``), each
    name it holds not (``stale x``)."""
    out = {}
    for folder in folders:
        for init in sorted((package / folder).rglob("__init__.py")):
            here = init.parent
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            named = {m.group(1) for line in doc.splitlines() if (m := MAP_LINE.match(line))}
            held = {p.stem for p in here.glob("*.py") if p.name != "__init__.py"}
            held |= {f"{d.name}/" for d in here.iterdir() if (d / "__init__.py").is_file()}
            gaps = ([f"missing {n}" for n in sorted(held - named)]
                    + [f"stale {n}" for n in sorted(named - held)])
            if gaps:
                out[here.relative_to(package).as_posix()] = gaps
    return out


def tracked_sizes(root: Path) -> dict[str, int]:
    """Tracked file (relative to ``root``) -> its size in bytes on disk: git's list of tracked
    files (``git ls-files``), or, outside a git checkout, every file but the ignored folders."""
    import subprocess

    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                               check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".venv-verl", "cache", "build", "runs", "__pycache__",
                ".hypothesis", ".pytest_cache"}
        names = [p.relative_to(root).as_posix() for p in root.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(root).parts)]
    return {n: (root / n).stat().st_size for n in names if n and (root / n).is_file()}


# ---- the package as it is -------------------------------------------------------------------

GRAPH = import_graph(PACKAGE)
UPWARD = upward_imports(GRAPH)
IN_CYCLE = {m: c for c in cycles(GRAPH) for m in c}
ROOM_CYCLES = room_cycles(GRAPH)
LINES = line_counts(PACKAGE)
IN_FUNCTION = in_function_imports(PACKAGE)

SHARED = shared_function_names(PACKAGE)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_down_the_floors(module):
    assert module not in UPWARD, (
        f"{module} (floor {floor_of(module)}) imports higher floors: "
        + ", ".join(f"{t} (floor {floor_of(t)})" for t in UPWARD[module]))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_cycle(module):
    assert module not in IN_CYCLE, f"{module} is on an import cycle among {IN_CYCLE[module]}"


def test_the_tracked_tree_fits_a_gpu_runs_copy():
    sizes = tracked_sizes(ROOT)
    total, weights = sum(sizes.values()), sum(s for n, s in sizes.items()
                                              if n.startswith("weights/"))
    assert total <= TREE_MAX_MIB * 2**20, (
        f"the tracked tree holds {total / 2**20:.1f} MiB (at most {TREE_MAX_MIB})")
    assert weights <= WEIGHTS_MAX_MB * 10**6, (
        f"weights/ holds {weights / 1e6:.1f} MB (at most {WEIGHTS_MAX_MB})")
    assert weights > 0 and total > weights      # it reads the tree: the committed warm start


def test_no_circle_among_the_rooms_of_any_package():
    """No arrow runs back up inside a folder either: the engine's wings never import a module of
    the engine room that imports them (``engine/start/load.py`` did; it is ``engine/load.py``)."""
    assert not ROOM_CYCLES, "circles among a package's rooms: " + "; ".join(
        f"{pkg}: {c}" for pkg, cs in ROOM_CYCLES.items() for c in cs)


@pytest.mark.parametrize("folder", sorted(IN_FUNCTION_MAX))
def test_imports_inside_functions_do_not_grow(folder):
    held, now = IN_FUNCTION_MAX[folder], IN_FUNCTION.get(folder, 0)
    assert now <= held, (f"{folder} holds {now} imports inside functions (at most {held}): "
                         "move the new ones to the top of their module")


def test_every_floor_below_the_front_ends_has_an_in_function_count():
    assert set(IN_FUNCTION_MAX) == {f for f, n in FLOORS.items() if n < FLOORS["cli"]}


@pytest.mark.parametrize("path", sorted(LINES))
def test_modules_are_at_most_max_lines(path):
    assert LINES[path] <= MAX_LINES, f"{path} has {LINES[path]} lines (at most {MAX_LINES})"


def test_every_module_has_a_mirrored_test_file():
    missing = unmirrored(PACKAGE, TESTS, UNMIRRORED)
    assert not missing, "no tests/<folder>/test_<module>.py for: " + ", ".join(missing)


def test_unmirrored_list_is_current():
    """An entry of :data:`UNMIRRORED` names a module that exists and still has no mirror."""
    for rel in UNMIRRORED:
        path = PACKAGE / rel
        assert path.exists(), f"UNMIRRORED names {rel}, which does not exist"
        assert not mirror_of(PACKAGE, path, TESTS).exists(), (
            f"{rel} has a mirrored test file now: drop it from UNMIRRORED")


def test_no_public_function_name_in_two_sections():
    assert not SHARED, "public functions of the same name in two sections: " + "; ".join(
        f"{fn} ({', '.join(mods)})" for fn, mods in SHARED.items())


def test_package_docstrings_map_their_modules():
    gaps = module_map_gaps(PACKAGE)
    assert not gaps, "module maps out of date: " + "; ".join(
        f"{(PACKAGE / pkg / '__init__.py').relative_to(ROOT)}: {', '.join(g)}"
        for pkg, g in gaps.items())


def test_every_package_is_mapped():
    """The maps cover the whole package: its top level and every package under it."""
    checked = {i.parent for f in MAPPED for i in (PACKAGE / f).resolve().rglob("__init__.py")}
    assert checked == {i.parent for i in PACKAGE.rglob("__init__.py")}
    assert PACKAGE in checked


def test_the_graph_sees_the_package():
    """The checks read something: the trainer imports the rollout, and claims' lazy imports
    inside functions are edges too."""
    assert "tailtheory.engine.rollout.engine" in GRAPH["tailtheory.engine.trainer"]
    assert "tailtheory.lopti.measurement" in GRAPH["tailtheory.lopti.claims"]  # inside _l1
    assert len(LINES) == len(GRAPH) > 50


# ---- each check catches what it should: made-up packages ------------------------------------

def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root / "tailtheory"


def test_checker_catches_an_upward_import_inside_a_function(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/__init__.py": "", "tailtheory/core/__init__.py": "",
        "tailtheory/core/a.py": "def f():\n    from tailtheory.engine import b\n",
        "tailtheory/engine/__init__.py": "", "tailtheory/engine/b.py": "import os\n",
        "tailtheory/engine/c.py": "from ..lopti.d import g\n",
        "tailtheory/lopti/__init__.py": "", "tailtheory/lopti/d.py": "from tailtheory import cli\n",
        "tailtheory/lopti/e.py": "from tailtheory.trm import f\n",
        "tailtheory/trm/__init__.py": "", "tailtheory/trm/f.py": "from . import g\n",
        "tailtheory/trm/g.py": "", "tailtheory/cli.py": "import tailtheory.core.a\n"})
    graph = import_graph(pkg)
    assert graph["tailtheory.engine.c"] == {"tailtheory.lopti.d"}          # relative, resolved
    assert graph["tailtheory.trm.f"] == {"tailtheory.trm.g"}
    assert upward_imports(graph) == {"tailtheory.core.a": ["tailtheory.engine.b"],
                                     "tailtheory.engine.c": ["tailtheory.lopti.d"],
                                     "tailtheory.lopti.d": ["tailtheory.cli"]}


def test_checker_catches_a_cycle_through_a_lazy_import(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/__init__.py": "", "tailtheory/lopti/__init__.py": "",
        "tailtheory/lopti/a.py": "from tailtheory.lopti.b import x\n",
        "tailtheory/lopti/b.py": "def x():\n    from tailtheory.trm import c\n",
        "tailtheory/trm/__init__.py": "",
        "tailtheory/trm/c.py": "import tailtheory.lopti.a as a\n",
        "tailtheory/trm/d.py": "from tailtheory.trm import c\n"})
    assert cycles(import_graph(pkg)) == [["tailtheory.lopti.a", "tailtheory.lopti.b",
                                          "tailtheory.trm.c"]]


def test_checker_catches_a_wing_importing_back_into_its_room(tmp_path):
    """The engine's former shape: ``config`` imports a wing's module, and another module of that
    wing imports ``config``: no module cycle, but a circle between the room and its wing."""
    files = {"tailtheory/__init__.py": "", "tailtheory/engine/__init__.py": "",
             "tailtheory/engine/config.py": "from tailtheory.engine.start import rungs\n",
             "tailtheory/engine/start/__init__.py": "",
             "tailtheory/engine/start/rungs.py": "x = 1\n",
             "tailtheory/engine/start/load.py": "from tailtheory.engine import config\n"}
    graph = import_graph(_write(tmp_path / "before", files))
    assert not cycles(graph)
    assert room_cycles(graph) == {"tailtheory.engine": [["tailtheory.engine.config",
                                                         "tailtheory.engine.start"]]}
    moved = {**files, "tailtheory/engine/load.py": files["tailtheory/engine/start/load.py"]}
    del moved["tailtheory/engine/start/load.py"]
    assert room_cycles(import_graph(_write(tmp_path / "after", moved))) == {}


def test_checker_catches_a_long_module(tmp_path):
    pkg = _write(tmp_path, {"tailtheory/core/a.py": "x = 1\n" * (MAX_LINES + 1),
                            "tailtheory/core/b.py": "x = 1\n" * MAX_LINES})
    counts = line_counts(pkg)
    assert [f for f, n in counts.items() if n > MAX_LINES] == ["tailtheory/core/a.py"]


def test_checker_catches_a_module_without_tests(tmp_path):
    pkg = _write(tmp_path, {"tailtheory/__init__.py": "", "tailtheory/cli.py": "",
                            "tailtheory/core/__init__.py": "", "tailtheory/core/a.py": "",
                            "tailtheory/core/b.py": "", "tailtheory/core/c.py": "",
                            "tests/core/test_a.py": "", "tests/test_cli.py": ""})
    tests = tmp_path / "tests"
    assert unmirrored(pkg, tests) == ["core/b.py", "core/c.py"]
    assert unmirrored(pkg, tests, {"core/c.py": "why"}) == ["core/b.py"]


def test_checker_catches_a_public_name_in_two_sections(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/lopti/a.py": "def measure():\n    pass\ndef _helper():\n    pass\n",
        "tailtheory/trm/b.py": "def measure():\n    pass\ndef _helper():\n    pass\n"
                               "class measure_too:\n    pass\n",
        "tailtheory/trm/c.py": "def only_here():\n    def measure():\n        pass\n",
        "tailtheory/otb/d.py": "def only_here():\n    pass\n",
        "tailtheory/engine/e.py": "def measure():\n    pass\n"})
    assert shared_function_names(pkg) == {"measure": ["lopti/a.py", "trm/b.py"],
                                          "only_here": ["trm/c.py", "otb/d.py"]}


def test_checker_follows_import_module_and_f_strings(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/__init__.py": "", "tailtheory/core/__init__.py": "",
        "tailtheory/core/a.py": "import importlib\nfor s in ('x',):\n"
                                "    importlib.import_module(f'tailtheory.{s}.claims')\n",
        "tailtheory/engine/__init__.py": "",
        "tailtheory/engine/b.py": "def f():\n    __import__('tailtheory.lopti.claims')\n",
        "tailtheory/lopti/__init__.py": "", "tailtheory/lopti/claims.py": "",
        "tailtheory/trm/__init__.py": "", "tailtheory/trm/claims.py": "",
        "tailtheory/trm/other.py": ""})
    graph = import_graph(pkg)
    assert graph["tailtheory.core.a"] == {"tailtheory.lopti.claims", "tailtheory.trm.claims"}
    assert graph["tailtheory.engine.b"] == {"tailtheory.lopti.claims"}
    assert set(upward_imports(graph)) == {"tailtheory.core.a", "tailtheory.engine.b"}


def test_checker_counts_imports_inside_functions(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/__init__.py": "", "tailtheory/lopti/__init__.py": "",
        "tailtheory/lopti/a.py": "from tailtheory.core import x\nimport os\n"
                                 "def f():\n    import os\n    from . import b\n"
                                 "    def g():\n        import tailtheory.trm.c\n",
        "tailtheory/lopti/b.py": "class K:\n    def m(self):\n        from tailtheory import y\n",
        "tailtheory/cli.py": "def main():\n    from tailtheory.lopti import a\n"})
    assert in_function_imports(pkg) == {"lopti": 3, "cli": 1}


def test_checker_catches_a_module_missing_from_its_package_map(tmp_path):
    pkg = _write(tmp_path, {
        "tailtheory/diagnose/__init__.py": '"""D.\n\n- ``a``: one.\n- ``gone``: moved.\n"""\n',
        "tailtheory/diagnose/a.py": "", "tailtheory/diagnose/b.py": "",
        "tailtheory/diagnose/sub/__init__.py": '"""S.\n\n- ``c``: ``c`` in a sentence.\n"""\n',
        "tailtheory/diagnose/sub/c.py": "", "tailtheory/other/__init__.py": "",
        "tailtheory/other/d.py": ""})
    assert module_map_gaps(pkg, ("diagnose",)) == {
        "diagnose": ["missing b", "missing sub/", "stale gone"]}
    assert module_map_gaps(pkg)["other"] == ["missing d"]      # the whole package by default


def test_checker_reads_the_top_level_map(tmp_path):
    """The top level is a package like the others: its map names its modules and folders (a
    folder without ``__init__.py`` is no package), keyed ``.``."""
    pkg = _write(tmp_path, {
        "tailtheory/__init__.py": '"""T.\n\n- ``core/``: below.\n- ``cli``: the command.\n'
                                  '- ``gone/``: moved.\n  - ``docs``: indented, no entry.\n"""\n',
        "tailtheory/cli.py": "", "tailtheory/docs.py": "",
        "tailtheory/core/__init__.py": '"""C.\n\n- ``a``: one.\n"""\n', "tailtheory/core/a.py": "",
        "tailtheory/engine/__init__.py": "", "tailtheory/data/notes.txt": ""})
    assert module_map_gaps(pkg) == {".": ["missing docs", "missing engine/", "stale gone/"]}
