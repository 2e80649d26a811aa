"""The import graph between ray_bench's packages has no cycle, and Ray is imported only in its wing,
`ray_bench.onray`, which only the composition roots load (issue #30, step 4).

Every module is parsed with `ast`, not imported: the test needs no tool and no service. A node is a
subpackage (`ray_bench.accounts`, `ray_bench.scheduler`, ...) or a top-level module
(`ray_bench.errors`); an edge is any import from one node's module of another node's module, at the
top or indented inside a function, except those under `if TYPE_CHECKING:` (never run).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import ray_bench

PACKAGE_ROOT = Path(ray_bench.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def node_of(module: str) -> str:
    """`ray_bench.accounts.gate` -> `ray_bench.accounts`; `ray_bench.errors` stays itself."""
    return ".".join(module.split(".")[:2])


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@functools.cache
def parsed(path: Path) -> ast.Module:
    """One module's tree, parsed once per test process: the three checks below read the same
    ~250 files, and parsing them is most of their time (17 s of the fast tier's, loaded, 8 Dec)."""
    return ast.parse(path.read_text(), filename=str(path))


def runtime_imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import that can run, with whether it is indented (inside a function, class or block)."""

    def walk(node: ast.AST, depth: int) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child.test):
                for sub in child.orelse:
                    yield from walk_stmt(sub, depth + 1)
                continue
            yield from walk_stmt(child, depth)

    def walk_stmt(child: ast.AST, depth: int) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, depth > 0
            return
        yield from walk(child, depth + (1 if isinstance(child, ast.stmt) else 0))

    yield from walk(tree, 0)


def imported_modules(importer: str, is_package: bool, stmt: ast.Import | ast.ImportFrom) -> list[str]:
    """The ray_bench modules one import statement loads (a `from pkg import mod` names the module)."""
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names if alias.name.startswith("ray_bench")]
    base = stmt.module or ""
    if stmt.level:
        anchor = importer.split(".")
        if not is_package:
            anchor.pop()
        anchor = anchor[: len(anchor) - (stmt.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    if not base.startswith("ray_bench"):
        return []
    return [base, *(f"{base}.{alias.name}" for alias in stmt.names)]


def package_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]], int]:
    """Edges between nodes, the `module:line` of the imports behind each, and how many ray_bench
    imports are indented."""
    known = modules()
    graph: dict[str, set[str]] = {node_of(name): set() for name in known}
    where: dict[tuple[str, str], list[str]] = {}
    indented = 0
    for name, path in known.items():
        tree = parsed(path)
        for stmt, is_indented in runtime_imports(tree):
            targets = [target for target in imported_modules(name, path.name == "__init__.py", stmt) if target in known]
            indented += is_indented and bool(targets)
            for target in targets:
                if node_of(target) not in (node_of(name), "ray_bench"):
                    graph[node_of(name)].add(node_of(target))
                    where.setdefault((node_of(name), node_of(target)), []).append(f"{name}:{stmt.lineno}")
    return graph, where, indented


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one node (a node importing itself is no cycle here)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first node, by breadth-first search back to it."""
    start = component[0]
    inside = set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for succ in sorted(graph[node] & inside):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if succ not in came_from:
                    came_from[succ] = node
                    nxt.append(succ)
        frontier = nxt
    raise AssertionError(f"no cycle in component {component}")


def cycle_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    edges = []
    for component in strongly_connected(graph):
        inside = set(component)
        edges += [(a, b) for a in component for b in sorted(graph[a] & inside)]
    return edges


def test_the_checker_finds_a_cycle_and_its_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert len(cycle_edges(graph)) == 3
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_relative_indented_and_type_checking_imports() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from ..errors import X\n"
        "if TYPE_CHECKING:\n    from ray_bench.cells import pool\n"
        "def f():\n    import ray_bench.sim.fuzz\n"
    )
    found = [(imported_modules("ray_bench.scheduler.driver", False, s), i) for s, i in runtime_imports(tree)]
    assert found == [
        ([], False),
        (["ray_bench.errors", "ray_bench.errors.X"], False),
        (["ray_bench.sim.fuzz"], True),
    ]


def test_no_import_cycle_between_packages() -> None:
    graph, where, indented = package_graph()
    assert len(graph) > 10, sorted(graph)
    cycles = [" -> ".join(a_cycle(graph, component)) for component in strongly_connected(graph)]
    print(f"{len(cycle_edges(graph))} cycle edges, {indented} indented ray_bench imports")
    assert not cycles, (
        "import cycles between packages:\n"
        + "\n".join(cycles)
        + "\nedges inside them:\n"
        + "\n".join(f"{a} -> {b} ({', '.join(sorted(set(where[a, b])))})" for a, b in cycle_edges(graph))
    )


#: The Ray wing: every module that imports Ray, and only those (issue #30, step 4).
WING = "ray_bench.onray"
#: The composition roots, which build the Ray pieces and hand them to the pure packages: they may
#: import the wing (inside the command bodies that need Ray, for start-up time). No other module
#: may, directly or through another module.
MAY_IMPORT_THE_WING = ("ray_bench.api", "ray_bench.cli", "ray_bench.__main__")


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def imports_ray(stmt: ast.Import | ast.ImportFrom) -> bool:
    """Whether one import statement loads Ray (``import ray``, ``from ray.x import y``)."""
    if isinstance(stmt, ast.Import):
        return any(in_package(alias.name, "ray") for alias in stmt.names)
    return stmt.level == 0 and in_package(stmt.module or "", "ray")


def ray_imports_outside_the_wing() -> list[str]:
    """``module:line`` of every import of Ray outside the wing, even under ``TYPE_CHECKING``."""
    found = []
    for name, path in modules().items():
        if in_package(name, WING):
            continue
        tree = parsed(path)
        found += [f"{name}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Import | ast.ImportFrom) and imports_ray(node)]
    return found


def module_graph() -> dict[str, set[str]]:
    """Each module's ray_bench modules imported when it runs (top or indented; not TYPE_CHECKING)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = parsed(path)
        graph[name] = {target for stmt, _ in runtime_imports(tree)
                       for target in imported_modules(name, path.name == "__init__.py", stmt) if target in known}
    return graph


def paths_into_the_wing(graph: dict[str, set[str]]) -> list[str]:
    """For each module outside the wing and the composition roots that loads a wing module, directly
    or through others: the chain of imports, ``a -> b -> ray_bench.onray.x``."""
    outside = [m for m in sorted(graph) if not any(in_package(m, p) for p in (WING, *MAY_IMPORT_THE_WING))]
    chains = []
    for start in outside:
        came_from: dict[str, str] = {start: start}
        frontier = [start]
        hit = None
        while frontier and hit is None:
            nxt = []
            for node in frontier:
                for succ in sorted(graph[node]):
                    if succ not in came_from:
                        came_from[succ] = node
                        if in_package(succ, WING):
                            hit = succ
                            break
                        nxt.append(succ)
                if hit is not None:
                    break
            frontier = nxt
        if hit is not None:
            chain = [hit]
            while chain[-1] != start:
                chain.append(came_from[chain[-1]])
            chains.append(" -> ".join(reversed(chain)))
    return chains


def test_the_ray_checker_tells_ray_from_names_like_it() -> None:
    tree = ast.parse(
        "import ray\nfrom ray.exceptions import RayError\nimport rayleigh\nfrom .ray_start import x\n"
        "from ray_bench.onray import pool\ndef f():\n    import ray.util\n"
    )
    found = [imports_ray(s) for s in ast.walk(tree) if isinstance(s, ast.Import | ast.ImportFrom)]
    assert found == [True, True, False, False, False, True]


def test_the_wing_checker_follows_imports_through_other_modules() -> None:
    graph = {"ray_bench.scheduler.a": {"ray_bench.ledger.b"}, "ray_bench.ledger.b": {"ray_bench.api"},
             "ray_bench.api": {"ray_bench.onray.pool"}, "ray_bench.onray.pool": set(),
             "ray_bench.sim.c": {"ray_bench.models.d"}, "ray_bench.models.d": set()}
    assert paths_into_the_wing(graph) == [
        "ray_bench.ledger.b -> ray_bench.api -> ray_bench.onray.pool",
        "ray_bench.scheduler.a -> ray_bench.ledger.b -> ray_bench.api -> ray_bench.onray.pool",
    ]


def test_only_the_ray_wing_imports_ray() -> None:
    assert any(in_package(m, WING) for m in modules()), "the wing is gone: update WING"
    offenders = ray_imports_outside_the_wing()
    assert not offenders, f"Ray imported outside {WING} (move the Ray handle into the wing): {offenders}"


def test_no_package_but_the_composition_roots_loads_the_ray_wing() -> None:
    chains = paths_into_the_wing(module_graph())
    assert not chains, ("modules that load the Ray wing (inject what they need from api.py / the CLI instead):\n"
                        + "\n".join(chains))
