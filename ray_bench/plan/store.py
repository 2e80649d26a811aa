"""Writing and reading plan files; the identity check that `execute` relies on."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from ray_bench import runroot
from ray_bench.config.bounded import MAX_PLAN_BYTES, read_bounded
from ray_bench.errors import ConfirmationError, PlanError
from ray_bench.files import write_whole
from ray_bench.heap import kept
from ray_bench.models.plan import PLAN_SCHEMA, Plan
from ray_bench.plan.identity import canonical_bytes, identity_of, identity_of_canonical

PLAN_FILE = runroot.PLAN_FILE  # the run-root layout has one definition (ray_bench.runroot)
RECEIPT_FILE = runroot.RECEIPT_FILE  # the run-root layout has one definition (ray_bench.runroot)

_IDENTITY = re.compile(r"^sha256:[0-9a-f]{64}$")


def plan_bytes(plan: Plan) -> bytes:
    return canonical_bytes(plan.model_dump(mode="json")) + b"\n"


def plan_identity(plan: Plan) -> str:
    return identity_of(plan.model_dump(mode="json"))


def sealed_plan(plan: Plan) -> tuple[bytes, str]:
    """The plan file's bytes and the plan's identity, from one dump: the canonical form of the
    file's own parse is the file without its newline (``load_plan_file`` refuses any file for
    which it is not), so its identity is their hash (a dump, a parse and a second dump of ~9 MiB
    at 100,000 cells were 2 s of ``plan``'s CPU; issue 57)."""
    data = plan_bytes(plan)
    return data, identity_of_canonical(data[:-1])


def write_plan(plan: Plan, run_root: Path, receipt: str, data: bytes | None = None) -> str:
    """Write the plan and its receipt into a new run root; return the identity. Refuses to
    overwrite another plan: a run root belongs to one plan. The same plan again writes nothing
    (its files are frozen; only a missing receipt is put back). ``data``: the plan's bytes, when
    the caller has them (:func:`sealed_plan`)."""
    data = plan_bytes(plan) if data is None else data
    # the canonical form of its own parse is itself: no second parse and dump of ~9 MiB at 100,000 cells
    identity = identity_of_canonical(data[:-1])
    target = runroot.RunPaths(run_root).plan
    same = False
    if target.exists():
        existing = load_plan_file(target)[1]
        if existing != identity:
            raise PlanError(f"run root already holds plan {existing}", where=str(run_root),
                            fix="choose another --run-id")
        same = True
    if plan.run_root != str(run_root.resolve()):
        raise PlanError(f"plan is bound to {plan.run_root or 'no run root'}", where=str(run_root),
                        fix="compile it with this run root")
    try:
        run_root.mkdir(parents=True, exist_ok=True)
        if not same:
            write_whole(target, data)
        receipt_path = runroot.RunPaths(run_root).receipt
        if not same or not receipt_path.exists():
            write_whole(receipt_path, receipt)
        if not same or not runroot.RunPaths(run_root).plan_brief.exists():
            from ray_bench.plan.brief import write_brief

            write_brief(plan, identity, run_root)
    except OSError as exc:
        raise PlanError(f"cannot write the plan: {exc.strerror or exc}", where=str(run_root),
                        fix="choose a writable --runs-dir") from None
    return identity


def load_plan_file(path: Path) -> tuple[Plan, str]:
    """Read a plan and compute its identity from its canonical content. Bounded in size; a
    file that is not byte for byte the canonical form `plan` writes is refused."""
    data = read_bounded(path, PlanError, MAX_PLAN_BYTES)
    with kept():  # its parse and its models live on: the collector's passes over them were 1.1 s of 1.9 s
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise PlanError(f"not a plan file: {str(exc)[:120]}", where=str(path),
                            fix="pass runs/ID/launch-plan.json") from None
        if not isinstance(raw, dict) or raw.get("format") != PLAN_SCHEMA:
            raise PlanError(f"not a {PLAN_SCHEMA} plan", where=str(path), fix="re-plan with this version")
        try:
            plan = Plan.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise PlanError(f"plan field {field}: {first['msg']}", where=str(path),
                            fix="plans are written by `ray-bench plan`; do not edit them") from None
        canonical = canonical_bytes(raw)  # once: at 100,000 cells one form of the plan is ~9 MiB of JSON
    if canonical + b"\n" != data:
        raise PlanError("the plan file was edited (it is not in the form `ray-bench plan` writes)",
                        where=str(path), fix="make a new plan with `ray-bench plan`")
    return plan, identity_of_canonical(canonical)


def check_confirmation_form(confirm: str | None, path: Path) -> str:
    if not confirm:
        raise ConfirmationError("--confirm is required", where=str(path),
                                fix="pass --confirm with the identity `ray-bench plan` printed")
    if not _IDENTITY.match(confirm):
        raise ConfirmationError("that is not a plan identity", where="--confirm",
                                fix="pass sha256:<64 hex digits> as printed by `ray-bench plan`")
    return confirm


def check_confirmation(path: Path, identity: str, confirm: str) -> None:
    """The plan must be the one confirmed. The refusal shows no identity to paste: the
    receipt is what is reviewed, and its identity is the one to confirm."""
    if identity != confirm:
        receipt = runroot.RunPaths(path.resolve().parent).receipt
        raise ConfirmationError(
            f"this plan is not the one confirmed ({confirm[:15]}...)", where=str(path),
            fix=f"review {receipt} and confirm the identity it states, or make a new plan with `ray-bench plan`")


def confirm_plan(path: Path, confirm: str | None) -> tuple[Plan, str]:
    confirmed = check_confirmation_form(confirm, path)
    plan, identity = load_plan_file(path)
    check_confirmation(path, identity, confirmed)
    return plan, identity
