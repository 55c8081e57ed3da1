"""The layout's rules, read from the source: no import cycle between project modules (imports inside
functions count too), the core's layers import only downwards, no role imports another, and imports
inside functions are kept for heavy libraries and the CLI's lazily loaded commands.

Shown failing on a reintroduced cycle by `test_a_reintroduced_cycle_is_found`, which adds the old
`artifacts/fetch.py` → `artifacts/relay.py` edge (the upload message imported back from the relay) to
the real graph; by hand, adding `from protocol.artifacts.relay import create_app` to
`protocol/artifacts/fetch.py` makes `test_no_import_cycles` fail naming both modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "node", "validator", "auditor", "explorer", "cli", "demo", "bench")

# The core's layers, lowest first: a module may import its own layer and those below it.
LAYERS = (
    (
        "protocol.errors",
        "protocol.config",
        "protocol.values",
        "protocol.files",
        "protocol.accounts",
        "protocol.processes",
    ),
    ("protocol.chain",),
    ("protocol.artifacts",),
    ("protocol.ml",),
    ("protocol.work",),
    ("protocol.runtime",),
)
ROLES = ("node", "validator", "auditor")
# Who may import a module inside a function: the CLI (each command loads its role when it runs, so
# `crucible --help` does not import torch) and nobody else, for project modules.
LAZY_IMPORTERS = ("cli",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


class Import:
    def __init__(self, target: str, line: int, in_function: bool) -> None:
        self.target, self.line, self.in_function = target, line, in_function


def imports_of(module: str, modules: dict[str, Path]) -> list[Import]:
    """The project modules `module` imports, each with its line and whether it is inside a function."""
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # annotations only: never executed
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                # `from package import module` imports the module; `from module import name` the module.
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in child.names]
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != module:
                    found.append(Import(target, child.lineno, in_function))
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {module: {i.target for i in imports_of(module, modules)} for module in modules}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(_within(module, prefix) for prefix in prefixes):
            return rank
    return None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_a_reintroduced_cycle_is_found() -> None:
    graph = import_graph()
    assert "protocol.artifacts.fetch" in graph["protocol.artifacts.relay"]
    graph["protocol.artifacts.fetch"].add("protocol.artifacts.relay")
    cycle = find_cycle(graph)
    assert cycle is not None and {"protocol.artifacts.fetch", "protocol.artifacts.relay"} <= set(cycle)


def test_the_core_imports_only_downwards_and_no_role() -> None:
    modules = project_modules()
    wrong = []
    for module in modules:
        rank = layer_of(module)
        if rank is None:
            continue
        for imported in imports_of(module, modules):
            target_rank = layer_of(imported.target)
            if target_rank is None or target_rank > rank:
                wrong.append(f"{module}:{imported.line} imports {imported.target}")
    assert not wrong, "\n".join(wrong)


def test_no_role_imports_another() -> None:
    modules = project_modules()
    wrong = [
        f"{module}:{imported.line} imports {imported.target}"
        for module in modules
        for role in ROLES
        if _within(module, role)
        for imported in imports_of(module, modules)
        if any(_within(imported.target, other) for other in ROLES if other != role)
    ]
    assert not wrong, "\n".join(wrong)


def test_imports_inside_functions_are_for_heavy_libraries_only() -> None:
    modules = project_modules()
    wrong = [
        f"{module}:{imported.line} imports {imported.target} inside a function"
        for module in modules
        if not any(_within(module, lazy) for lazy in LAZY_IMPORTERS)
        for imported in imports_of(module, modules)
        if imported.in_function
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_is_scanned(package: str) -> None:
    assert any(_within(module, package) for module in project_modules())
