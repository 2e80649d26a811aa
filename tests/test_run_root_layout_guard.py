"""No module hand-builds a path of the run-root layout: `run_root / PLAN_FILE` or
`run_root / "ledger.sqlite"` is `RunPaths(run_root).plan` / `.ledger` (`ray_bench.runroot`), so a
rename is one edit (issue #30, step 5).

Parsed with `ast`, not imported. A hand-built path is a `/` whose right side is one of the
layout's names (`PLAN_FILE`, `LEDGER_FILE`, ...) or its literal file name. An attempt
directory's own `result.json` (`attempt_dir / RESULT_FILE`) is not the run root's: attempt
directories may live on another node.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ray_bench
from ray_bench import runroot

PACKAGE_ROOT = Path(ray_bench.__file__).parent

LAYOUT = {
    name: getattr(runroot, name)
    for name in (
        "PLAN_FILE",
        "RECEIPT_FILE",
        "LEDGER_FILE",
        "LOCK_FILE",
        "PAUSE_FILE",
        "SUMMARY_FILE",
        "ATTEMPTS_DIR",
        "HALT_FILE",
        "HALTS_DIR",
        "PAUSES_DIR",
    )
}
def hand_built(source: str) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
            continue
        right = node.right
        named = (isinstance(right, ast.Name) and right.id in LAYOUT) or (
            isinstance(right, ast.Attribute) and right.attr in LAYOUT
        )
        literal = isinstance(right, ast.Constant) and right.value in LAYOUT.values()
        if named or literal:
            lines.append(node.lineno)
    return lines


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def found_in_package() -> dict[str, list[int]]:
    found = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        module = module_name(path)
        if module != "ray_bench.runroot" and (lines := hand_built(path.read_text())):
            found[module] = lines
    return found


def test_no_module_hand_builds_a_run_root_path() -> None:
    found = found_in_package()
    assert found == {}, f"use ray_bench.runroot.RunPaths: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "p = run_root / PLAN_FILE",
        "p = (root / runroot.LEDGER_FILE).exists()",
        'p = run_root / "receipt.md"',
        "p = self.run_root / HALT_FILE",
        'p = self.run_root / "pauses"',
    ],
)
def test_a_hand_built_path_is_found(source: str) -> None:
    assert hand_built(source) == [1]


@pytest.mark.parametrize(
    "source",
    [
        "p = RunPaths(run_root).plan",
        "p = attempt_dir / RESULT_FILE",
        'roots = path.glob(f"*/{LEDGER_FILE}")',
        'p = out / "result.json"',
    ],
)
def test_other_joins_are_not(source: str) -> None:
    assert hand_built(source) == []
