"""Imports go one way: schemas ← database, agent ← graph.machine ← graph.services ← graph.kernel ← graph.transports.
And no module imports, through any chain, a module that imports it: imports inside functions count too (they only
hide a cycle, they do not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "database", "agent", "graph")
# a layer may import its own and those of a lower rank; database and agent share a rank and never import each other
RANK = {
    "schemas": 0,
    "database": 1,
    "agent": 1,
    "graph.machine": 2,
    "graph.services": 3,
    "graph.kernel": 4,
    "graph.transports": 5,
}


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(module: str, path: Path, known: set[str]):
    """Every module of ours `module` imports, wherever the import stands (top level, a function, TYPE_CHECKING)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule pkg.sub when there is one
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import graph.machine.runner as r`, `from x.y import z`
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _layer(module: str) -> str | None:
    for layer in sorted(RANK, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: set(_imports(m, p, known)) for m, p in mods.items()}


def test_every_module_has_a_layer():
    assert [m for m in _modules() if m != "graph" and _layer(m) is None] == []


def test_imports_go_down_the_layers_only():
    bad = []
    for module, targets in _graph().items():
        for target in targets:
            a, b = _layer(module), _layer(target)
            if a is None or b is None or a == b:
                continue
            if RANK[b] > RANK[a] or (RANK[a] == RANK[b]):
                bad.append(f"{module} ({a}) imports {target} ({b})")
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on:
                low[node] = min(low[node], index[child])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_counting_imports_inside_functions():
    cycles = _cycles(_graph())
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle_one_import_would_close():
    """The control: errors.py importing the runner (which imports it) is reported, with every module caught in it."""
    graph = _graph()
    graph["graph.machine.errors"] = graph["graph.machine.errors"] | {"graph.machine.runner"}
    assert any({"graph.machine.errors", "graph.machine.runner"} <= set(c) for c in _cycles(graph))


def test_an_import_inside_a_function_is_read():
    module, path = "graph.machine.runner", ROOT / "graph" / "machine" / "runner.py"
    source = path.read_text() + "\n\ndef _late():\n    from graph.kernel.core import Kernel  # noqa\n"
    tree_path = ROOT / "tests" / "unit" / "_layer_probe.py"
    try:
        tree_path.write_text(source)
        targets = set(_imports(module, tree_path, set(_modules())))
    finally:
        tree_path.unlink()
    assert "graph.kernel.core" in targets and RANK[_layer("graph.kernel.core")] > RANK[_layer(module)]
