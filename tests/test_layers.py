"""The arrows run one way: the imports between the product's modules, read from the source.

`lint-imports` (the ``[tool.importlinter]`` layers contract in pyproject.toml, run by `make test`
and `make lint`) checks the layers. These tests check, over every ``import`` of cnkispider/,
tasks/, errors/ and proxy/ including those inside functions (which close a cycle as surely as a
module-level one, only later), that no two modules import each other even through others, and
that flow control's Scrapy extension (tasks.feeder) is imported only from above flow control.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cnkispider", "tasks", "errors", "proxy")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The product modules ``name`` imports, anywhere in it, each with the line of one import.

    ``from package import name`` is an import of the submodule when there is one, else of the
    package; an import under ``if TYPE_CHECKING:`` counts too (it never runs, but it is the
    same arrow for the reader)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            wanted = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for dotted in wanted:
            target = known(dotted)
            if target is not None and target != name:
                targets.setdefault(target, node.lineno)
    return targets


def import_graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (depth-first, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_two_modules_import_each_other_even_inside_functions():
    graph = import_graph()
    cycle = find_cycle(graph)
    steps = (
        [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
        if cycle
        else []
    )
    assert cycle is None, "an import cycle:\n  " + "\n  ".join(steps)


def test_the_cycle_finder_finds_a_cycle():
    """(The test above would pass on a finder that never finds one.)"""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def _layers() -> list[list[str]]:
    """The layers contract of pyproject.toml, highest first, each a list of its modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    return [
        [m.strip() for m in layer.replace("|", ":").split(":") if m.strip()]
        for layer in contract["layers"]
    ]


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    for index, layer in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return index
    return None


def _imports_anything(path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(tree))


def test_every_product_module_has_its_layer():
    """A new module must be placed in the contract, or lint-imports would not check it."""
    layers = _layers()
    unplaced = [
        name
        for name, path in _modules().items()
        # (a package __init__ that imports nothing, such as the root packages' or a folder's
        # docstring, holds no import to check)
        if _layer_of(name, layers) is None
        and (path.name != "__init__.py" or _imports_anything(path))
    ]
    assert unplaced == []


def test_only_the_crawl_layer_and_the_entry_points_import_the_task_feeder():
    """The crawl context, the halt request and the drain answer live below flow control: nothing
    at or below it needs the feeder (tasks.feeder), the Scrapy extension on top of it."""
    layers = _layers()
    tasks_layer = _layer_of("tasks.feeder", layers)
    importers = [name for name, targets in import_graph().items() if "tasks.feeder" in targets]
    below = [
        name
        for name in importers
        if (layer := _layer_of(name, layers)) is None or layer >= tasks_layer
    ]
    assert below == []
