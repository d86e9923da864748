"""The engine's layers, read from the source with ``ast``: nothing imports upward, no cycles.

core -> modeling -> transform -> inference -> front ends (magics, widgets, examples,
the package's own ``__init__``). A module may import from its own layer or any layer
below it. Imports inside functions count too: a lazy import that reaches upward is the
same dependency, only hidden. ``ARCHITECTURE.md`` describes the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "imcmc_lab"
#: where each installed package's source lives (pyproject's package-dir)
SOURCES = {PACKAGE: ROOT / "imcmc_lab", f"{PACKAGE}.magics": ROOT / "magics",
           f"{PACKAGE}.widgets": ROOT / "widgets"}

#: layer of a module: the longest matching prefix decides
LAYERS = {
    f"{PACKAGE}.errors": 0,
    f"{PACKAGE}.core": 0,
    f"{PACKAGE}.modeling": 1,
    f"{PACKAGE}.transform": 2,
    f"{PACKAGE}.inference": 3,
    f"{PACKAGE}.examples": 4,
    f"{PACKAGE}.magics": 4,
    f"{PACKAGE}.widgets": 4,
    PACKAGE: 4,
}
LAYER_NAMES = {0: "core", 1: "modeling", 2: "transform", 3: "inference", 4: "front ends"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.startswith(".") or p == "_build" for p in parts):
                continue
            name = ".".join([package, *parts])
            if name.startswith(tuple(f"{PACKAGE}.{sub}" for sub in ("magics", "widgets"))) \
                    and package == PACKAGE:
                continue        # only through their own package-dir entry
            found[name] = path
    return found


MODULES = _modules()


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported imcmc_lab module, line) for every import statement in the file."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    found.append((_known(alias.name), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in MODULES else _known(target), node.lineno))
    return found


def _known(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_the_layers_are_found():
    assert len(MODULES) > 30
    for expected in ("imcmc_lab.core.address", "imcmc_lab.modeling.gen", "imcmc_lab.magics",
                     "imcmc_lab.widgets.stream", "imcmc_lab.inference.chains"):
        assert expected in MODULES


def test_no_module_imports_a_higher_layer():
    upward = []
    for module, imports in GRAPH.items():
        for target, line in imports:
            if layer(target) > layer(module):
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line} ({LAYER_NAMES[layer(module)]}) "
                              f"imports {target} ({LAYER_NAMES[layer(target)]})")
    assert not upward, "imports that reach up a layer:\n" + "\n".join(sorted(upward))


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return result


def test_no_import_cycles():
    graph = {m: sorted({t for t, _ in imports if t != m}) for m, imports in GRAPH.items()}


    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", ["imcmc_lab.examples.coal"])
def test_examples_import_no_private_names(module):
    private = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("__"):
            private += [f"line {node.lineno}: {alias.name}" for alias in node.names
                        if alias.name.startswith("_")]
    assert not private, f"{module} imports private names: {private}"
