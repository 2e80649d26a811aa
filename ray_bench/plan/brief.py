"""The plan's brief: what ``status`` and ``pause`` read of a plan, beside it in a small file
(``plan-brief.json``), so that they do not parse the whole plan (~9 MiB of JSON at 100,000
cells: 1.5 s of CPU to parse, validate and hash; issue 57).

``plan`` writes it with the plan. A brief is trusted only when its identity is the identity of
the plan file beside it (the SHA-256 of the file's bytes, which ``plan`` writes in canonical
form: :func:`ray_bench.plan.store.load_plan_file`) and its plan format is this version's; a
brief that is missing (a run planned before it existed), unreadable, stale or of another format
is not used, and the reader parses the whole plan as before."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ray_bench import runroot
from ray_bench.config.bounded import MAX_PLAN_BYTES, read_bounded
from ray_bench.errors import PlanError
from ray_bench.files import write_whole
from ray_bench.models._base import FrozenModel
from ray_bench.models.accounts import Account
from ray_bench.models.plan import PLAN_SCHEMA, Plan
from ray_bench.plan.identity import identity_of_canonical

BRIEF_SCHEMA = "ray-bench/plan-brief/v1"  # the format field's one value
#: A brief holds a few accounts and counts: anything larger is not one.
MAX_BRIEF_BYTES = 4 << 20


class PlanBrief(FrozenModel):
    """The plan's identity, run id, cell count, attempt limit and accounts."""

    format: Literal["ray-bench/plan-brief/v1"] = "ray-bench/plan-brief/v1"
    plan_format: str
    identity: str
    run_id: str
    cell_count: int
    max_attempts: int
    accounts: list[Account]

    @classmethod
    def of(cls, plan: Plan, identity: str) -> PlanBrief:
        return cls(plan_format=plan.format, identity=identity, run_id=plan.run_id, cell_count=len(plan.cells),
                   max_attempts=plan.max_attempts, accounts=list(plan.accounts))


def write_brief(plan: Plan, identity: str, run_root: Path) -> None:
    write_whole(runroot.RunPaths(run_root).plan_brief, PlanBrief.of(plan, identity).model_dump_json(indent=1))


def read_brief(run_root: Path) -> PlanBrief | None:
    """The brief beside the run's plan, when it is the plan's (see the module); else ``None``."""
    paths = runroot.RunPaths(run_root)
    try:
        brief = PlanBrief.model_validate_json(read_bounded(paths.plan_brief, PlanError, MAX_BRIEF_BYTES))
        data = read_bounded(paths.plan, PlanError, MAX_PLAN_BYTES)
    except (PlanError, OSError, ValidationError, ValueError):
        return None
    if brief.plan_format != PLAN_SCHEMA or not data.endswith(b"\n"):
        return None
    # the identity is the hash of the canonical form, which is the file without its last newline
    return brief if identity_of_canonical(data[:-1]) == brief.identity else None
