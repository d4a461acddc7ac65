"""The import graph of simmoe/, solvers/ and hwprobe/: no import cycle beyond the known ones.

Every ``import`` and ``from ... import`` statement counts, wherever it stands
(inside a function or under ``TYPE_CHECKING`` too): a lazy import still makes
one module depend on the other.  ``from pkg import name`` is an edge to the
submodule ``pkg.name`` when there is one, else to ``pkg`` (its ``__init__``).
The parent packages Python imports implicitly are not edges.  The layers
between packages are import-linter's contracts in pyproject.toml.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simmoe", "solvers", "hwprobe")

# The cycles (strongly connected modules) allowed to exist: none.  The test requires exactly
# this set: a new cycle fails it, and so does removing one without deleting it here.
KNOWN_CYCLES: set[frozenset[str]] = set()


def modules(root: Path, packages) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:          # relative: from the package, up level - 1 packages
                base_parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in known else base
                if target in known:
                    out.add(target)
    out.discard(name)
    return out


def import_graph(root: Path, packages) -> nx.DiGraph:
    known = modules(root, packages)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        graph.add_edges_from((name, target) for target in imported_modules(name, path, known))
    return graph


def cycles(graph: nx.DiGraph) -> set[frozenset[str]]:
    """The import cycles as strongly connected components of more than one module."""
    return {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}


def test_no_import_cycles_but_the_known_ones():
    found = cycles(import_graph(ROOT, PACKAGES))
    new = [sorted(c) for c in found - KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not new, f"new import cycles (make the dependency point one way): {new}"
    assert not gone, f"cycles no longer there (delete them from KNOWN_CYCLES): {gone}"


def test_the_packages_have_modules():
    known = modules(ROOT, PACKAGES)
    assert "solvers.exact" in known and "simmoe.replay.engine" in known
    assert all(m in known for c in KNOWN_CYCLES for m in c)


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_lazy_relative_and_package_imports_are_edges(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\n\ndef make():\n    from pkg import e\n    return e\n",
        "pkg/a.py": "class A:\n    pass\n\ndef f():\n    from . import b\n",      # lazy, relative
        "pkg/b.py": "import pkg.c\n",
        "pkg/c.py": "from pkg import a\n",                                        # a submodule via its package
        "pkg/d.py": "from pkg import A\n",                                        # the package __init__
        "pkg/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import A\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/f.py": "from ..a import A\nfrom .. import d\nimport os\n",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert set(graph.successors("pkg.sub.f")) == {"pkg.a", "pkg.d"}
    assert set(graph.successors("pkg.d")) == {"pkg"}
    assert cycles(graph) == {frozenset({"pkg.a", "pkg.b", "pkg.c"}), frozenset({"pkg", "pkg.e"})}


def test_one_way_dependencies_make_no_cycle(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "X = 1\n",
        "pkg/mid.py": "from pkg.low import X\n",
        "pkg/high.py": "def f():\n    from pkg import mid, low\n",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert set(graph.successors("pkg.high")) == {"pkg.mid", "pkg.low"}
    assert cycles(graph) == set()
