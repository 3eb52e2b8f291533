"""Imports go one way: schemas ← database, agent ← graph (the machine) ← graph/kernel ← its transports."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str):
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield path.relative_to(ROOT), node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.relative_to(ROOT), alias.name


def _ours(module: str) -> str | None:
    top = module.split(".")[0]
    if top == "graph" and module.startswith("graph.kernel"):
        return "graph.kernel"
    return top if top in ("schemas", "database", "agent", "graph") else None


ALLOWED = {"schemas": {"schemas"}, "database": {"schemas", "database"}, "agent": {"schemas", "agent"}}


def test_lower_layers_import_only_what_is_below_them():
    bad = [(str(path), module) for package, allowed in ALLOWED.items() for path, module in _imports(package)
           if _ours(module) and _ours(module) not in allowed]
    assert bad == []


def test_the_machine_never_imports_the_kernel_or_its_transports():
    bad = [(str(path), module) for path, module in _imports("graph")
           if not str(path).startswith("graph/kernel") and _ours(module) == "graph.kernel"]
    assert bad == []
