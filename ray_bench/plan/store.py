"""Writing and reading plan files; the identity check that `execute` relies on."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from ray_bench.errors import ConfirmationError, PlanError
from ray_bench.models.plan import PLAN_SCHEMA, Plan
from ray_bench.plan.identity import canonical_bytes, identity_of

PLAN_FILE = "launch-plan.json"
RECEIPT_FILE = "receipt.md"


def plan_bytes(plan: Plan) -> bytes:
    return canonical_bytes(plan.model_dump(mode="json")) + b"\n"


def plan_identity(plan: Plan) -> str:
    return identity_of(plan.model_dump(mode="json"))


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_plan(plan: Plan, run_root: Path, receipt: str) -> str:
    """Write the plan and its receipt into a new run root; return the identity. Refuses to
    overwrite another plan: a run root belongs to one plan."""
    data = plan_bytes(plan)
    identity = identity_of(json.loads(data))
    target = run_root / PLAN_FILE
    if target.exists():
        existing = load_plan_file(target)[1]
        if existing != identity:
            raise PlanError(f"run root already holds plan {existing}", where=str(run_root),
                            fix="choose another --run-id")
    run_root.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    atomic_write(run_root / RECEIPT_FILE, receipt.encode())
    return identity


def load_plan_file(path: Path) -> tuple[Plan, str]:
    """Read a plan and compute its identity from its canonical content."""
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise PlanError("plan file not found", where=str(path), fix="run `ray-bench plan` first") from None
    except (OSError, ValueError) as exc:
        raise PlanError(f"not a plan file: {exc}", where=str(path), fix="pass runs/ID/launch-plan.json") from None
    if not isinstance(raw, dict) or raw.get("format") != PLAN_SCHEMA:
        raise PlanError(f"not a {PLAN_SCHEMA} plan", where=str(path), fix="re-plan with this version")
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PlanError(f"plan field {field}: {first['msg']}", where=str(path),
                        fix="plans are written by `ray-bench plan`; do not edit them") from None
    return plan, identity_of(raw)


def confirm_plan(path: Path, confirm: str | None) -> tuple[Plan, str]:
    if not confirm:
        raise ConfirmationError("--confirm is required", where=str(path),
                                fix="pass --confirm with the identity `ray-bench plan` printed")
    if not confirm.startswith("sha256:") or len(confirm) != 71:
        raise ConfirmationError(f"{confirm!r} is not a plan identity", where="--confirm",
                                fix="pass sha256:<64 hex digits> as printed by `ray-bench plan`")
    plan, identity = load_plan_file(path)
    if identity != confirm:
        raise ConfirmationError(
            f"plan identity is {identity}, not the confirmed {confirm}", where=str(path),
            fix="the plan changed since it was reviewed: review its receipt and confirm the new identity")
    return plan, identity
