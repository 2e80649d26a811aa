"""No module branches on a sandbox backend's name: what a backend can enforce or provide is asked
of its capabilities (`ray_bench.sandboxes.capabilities`), which with the registry
(`ray_bench.sandboxes`) and each backend's own package are the only places a name means
something (issue #30, step 5).

Every module is parsed with `ast`, not imported. A name check is a comparison with a built-in
backend's name (`backend == "daytona"`, `name in ("docker", "daytona")`), or a lookup by one
(`backends.get("docker")`, `backends["daytona"]`). A name as data (a default, a message, a
`register("docker", ...)`) is not a check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import ray_bench
from ray_bench.sandboxes.capabilities import BUILTIN

PACKAGE_ROOT = Path(ray_bench.__file__).parent

#: Where a backend's name is what the code is about: the registry, the capabilities, and each
#: backend's own modules.
OWNERS = (
    "ray_bench.sandboxes",
    "ray_bench.sandboxes.capabilities",
    "ray_bench.sandboxes.local",
    "ray_bench.sandboxes.docker",
    "ray_bench.sandboxes.daytona",
)
#: The same words that name something else: Ray's address "local" (start a Ray instance here),
#: and the supervisor's name for the driver's own host (``LOCAL_NODE``).
OTHER_MEANINGS = {
    "ray_bench.onray.start": {"local"},
    "ray_bench.options": {"local"},
    "ray_bench.sandboxes.supervisor": {"local"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def owned(module: str) -> bool:
    return any(module == o or (o != "ray_bench.sandboxes" and module.startswith(f"{o}.")) for o in OWNERS)


def names_in(node: ast.AST, backends: set[str], aliases: dict[str, set[str]]) -> set[str]:
    """The backend names ``node`` is, or holds as a set, tuple or list of constants, or is
    bound to at the module's top (``BUILD_BACKEND = "daytona"``)."""
    if isinstance(node, ast.Constant) and node.value in backends:
        return {node.value}
    if isinstance(node, ast.Name):
        return aliases.get(node.id, set())
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return set().union(*(names_in(e, backends, aliases) for e in node.elts))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset"):
        return set().union(*(names_in(a, backends, aliases) for a in node.args))
    return set()


def top_aliases(tree: ast.Module, backends: set[str]) -> dict[str, set[str]]:
    aliases: dict[str, set[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        found = names_in(value, backends, {})
        for target in targets:
            if found and isinstance(target, ast.Name):
                aliases[target.id] = found
    return aliases


def name_checks(tree: ast.Module, backends: set[str]) -> Iterator[tuple[int, str]]:
    aliases = top_aliases(tree, backends)
    for node in ast.walk(tree):
        found: set[str] = set()
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found |= names_in(side, backends, aliases)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            found |= names_in(node.args[0], backends, aliases) if node.args else set()
        elif isinstance(node, ast.Subscript) and not (isinstance(node.value, ast.Name) and node.value.id == "Literal"):
            found |= names_in(node.slice, backends, aliases)  # Literal["api", "local"] is a type, not a lookup
        for name in sorted(found):
            yield node.lineno, name


def checks_in(source: str, module: str) -> list[str]:
    backends = set(BUILTIN) - OTHER_MEANINGS.get(module, set())
    return [f"{module}:{line}: {name!r}" for line, name in name_checks(ast.parse(source), backends)]


def test_no_module_outside_the_registry_checks_a_backend_name() -> None:
    found = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        module = module_name(path)
        if not owned(module):
            found += checks_in(path.read_text(), module)
    assert found == [], "ask ray_bench.sandboxes.capabilities instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'if suite.backend != "daytona":\n    pass',
        'ok = name in ("docker", "daytona")',
        'ok = cell.backend in {"docker"}',
        'config = plan.backends.get("docker")',
        'pool = suite.backends["daytona"].options',
        'ok = "local" == backend',
        'BUILD_BACKEND = "daytona"\nskip = cell.backend != BUILD_BACKEND',
        'KNOWN = frozenset({"docker", "daytona"})\nok = backend in KNOWN',
    ],
)
def test_a_name_check_is_found(source: str) -> None:
    assert checks_in(source, "ray_bench.plan.example") != []


@pytest.mark.parametrize(
    "source",
    [
        'backend: str = "local"',
        'register("docker", DockerBackend)',
        'msg = f"backend {name} cannot"',
        "ok = capabilities(backend).quota_pool",
        'ok = data["backend"] != backend',
        'Billing = Literal["subscription", "api", "local"]',
    ],
)
def test_a_name_as_data_is_not_a_check(source: str) -> None:
    assert checks_in(source, "ray_bench.plan.example") == []


def test_rays_address_local_is_not_a_backend() -> None:
    source = 'if address != "local":\n    pass'
    assert checks_in(source, "ray_bench.onray.start") == []
    assert checks_in(source, "ray_bench.plan.example") != []


def test_the_owners_are_real_modules() -> None:
    """An owner renamed away would silently stop being exempt, or exempt nothing."""
    modules = {module_name(p) for p in PACKAGE_ROOT.rglob("*.py")}
    assert set(OWNERS) | set(OTHER_MEANINGS) <= modules
