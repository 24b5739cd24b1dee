"""No import circles among the project's modules (analyze/, profiler_kit/, workloads/), read from the source.

Every import counts, at module level or inside a function (a deferred import still ties the two modules
together); imports under ``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

# folder -> the package it installs as (setup.cfg maps analyze/ and workloads/ under profiler_kit)
PACKAGES = {"analyze": "profiler_kit.analyze", "profiler_kit": "profiler_kit", "workloads": "profiler_kit.workloads"}

# Known circles, none now (early_read <-> nsys_schema was broken by moving the prefetch to analyze/nsys_prefetch.py).
KNOWN: set[frozenset[str]] = set()


def _modules() -> dict[str, tuple[ast.Module, str]]:
    """Each module's syntax tree and the package its relative imports start from."""
    found = {}
    for folder, installed in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if installed == "profiler_kit" and path.relative_to(ROOT / folder).parts[0] in PACKAGES:
                continue
            parts = (*installed.split("."), *path.relative_to(ROOT / folder).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = (ast.parse(path.read_text(), filename=str(path)), ".".join(parts[:-1]))
    return found


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, tree: ast.Module, package: str, known: set[str]) -> set[str]:
    """The project modules that ``name`` imports anywhere in its source."""
    out: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            stack.extend(ast.iter_child_nodes(node))
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` names a.b.c, or the module holding it
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imported(name, tree, package, known) for name, (tree, package) in modules.items()}


def test_the_check_finds_a_circle():
    """The checker itself: a two-module circle and a three-module one are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(map(sorted, _circles(graph))) == [["a", "b"], ["c", "d", "e"]]


def test_imports_are_read_from_functions_and_packages():
    graph = import_graph()
    assert "profiler_kit.workloads.triton_launch" in graph["profiler_kit.workloads.flash_gluon_ws"]
    assert (
        "profiler_kit.workloads.flash_gluon_ws" in graph["profiler_kit.workloads.flash_triton"]
    )  # imported in a function
    assert "profiler_kit.analyze.early_read" in graph["profiler_kit.analyze.nsys_prefetch"]  # imported in a method


def test_no_import_circles():
    circles = [c for c in _circles(import_graph()) if frozenset(c) not in KNOWN]
    assert not circles, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)
