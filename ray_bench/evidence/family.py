"""A run's *family*: its run root and the reruns planned from it (``ID-rerun-1``, ...), whose
epochs form one cohort. Read by reports, promotion and exports; ``ray-bench rerun``
(:mod:`ray_bench.commands.rerun`) names the next member."""

from __future__ import annotations

import re
from pathlib import Path

from ray_bench.errors import PlanError
from ray_bench.runroot import RunPaths

RERUN_NAME = re.compile(r"^(?P<base>.+)-rerun-(?P<n>\d+)$")


def run_family(run_root: Path) -> list[Path]:
    """The base run root and its reruns, oldest first."""
    root = run_root.resolve()
    if not RunPaths(root).plan.is_file():
        raise PlanError("no plan in this run root", where=str(run_root), fix="pass runs/ID")
    base = root
    match = RERUN_NAME.match(root.name)
    if match and RunPaths(root.parent / match["base"]).plan.is_file():
        base = root.parent / match["base"]
    reruns: list[tuple[int, Path]] = []
    for path in base.parent.glob(f"{base.name}-rerun-*"):
        found = RERUN_NAME.match(path.name)
        if found and found["base"] == base.name and RunPaths(path).plan.is_file():
            reruns.append((int(found["n"]), path))
    return [base, *(p for _, p in sorted(reruns))]
