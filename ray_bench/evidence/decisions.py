"""Operator decisions, recorded in a run's ledger with who, when and why.

Decisions are ledger events (append-only, like everything in the ledger), written by the
operator's command rather than by the driver:

- ``exclusion`` / ``inclusion``: ``ray-bench exclude runs/ID --cell C --reason TEXT`` takes a
  planned cell out of both denominators (its attempts stay in the ledger, nothing is deleted);
  ``include`` undoes it, with its own reason. A cell's state is the last of these events.
- ``promotion``: ``ray-bench promote`` (see :mod:`ray_bench.evidence.promote`) makes a run
  *official*: an official run cannot be executed, rerun, settled or have its exclusions changed.
- ``demotion``: ``ray-bench demote runs/ID --reason TEXT`` takes an official run back to staging
  on the record (the promotion stays in the ledger); a later promotion makes it official again.
  The run's state is the last of these two events.

Who is ``--by`` or the operating-system user; when is the event's time.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ray_bench.config.secrets import refuse_operator_text, refuse_secret_text
from ray_bench.errors import UserInputError
from ray_bench.ledger.events import DemotionData, ExclusionData, InclusionData, PromotionData
from ray_bench.ledger.store import Event, Ledger
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths

EXCLUSION = "exclusion"
INCLUSION = "inclusion"
PROMOTION = "promotion"
DEMOTION = "demotion"
#: A cell id prefix this long is unambiguous in practice and still short enough to type.
MIN_PREFIX = 8


@dataclass(frozen=True)
class Exclusion:
    run_id: str
    cell_id: str
    task: str
    arm: str
    rep: int
    reason: str
    by: str
    at: float


@dataclass(frozen=True)
class Promotion:
    run_id: str
    by: str
    at: float
    reason: str
    family: tuple[str, ...]
    gates: tuple[tuple[str, bool, str], ...]


@dataclass(frozen=True)
class Demotion:
    run_id: str
    by: str
    at: float
    reason: str


def operator(by: str | None = None) -> str:
    """Who made a decision: ``--by``, else the operating-system user."""
    refuse_secret_text(by, "--by")
    if by and by.strip():
        return by.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER") or "unknown"


def exclusions_of(run_id: str, events: Iterable[Event]) -> dict[str, Exclusion]:
    """cell id -> its exclusion, replaying exclusion and inclusion events in ledger order."""
    out: dict[str, Exclusion] = {}
    for e in events:
        if isinstance(d := e.event, ExclusionData) and e.cell_id:
            out[e.cell_id] = Exclusion(run_id, e.cell_id, d.task, d.arm, d.rep, d.reason, d.by, e.ts)
        elif isinstance(e.event, InclusionData) and e.cell_id:
            out.pop(e.cell_id, None)
    return out


def promotion_of(run_id: str, events: Iterable[Event]) -> Promotion | None:
    """The promotion in force: the last one, unless a demotion came after it."""
    return _standing(run_id, events)[0]


def demotion_of(run_id: str, events: Iterable[Event]) -> Demotion | None:
    """The last demotion, unless a promotion came after it (the run is staging because of it)."""
    return _standing(run_id, events)[1]


def _standing(run_id: str, events: Iterable[Event]) -> tuple[Promotion | None, Demotion | None]:
    promotion: Promotion | None = None
    demotion: Demotion | None = None
    for e in events:
        if isinstance(p := e.event, PromotionData):
            promotion, demotion = Promotion(run_id, p.by, e.ts, p.reason, tuple(p.family), tuple(p.gates)), None
        elif isinstance(d := e.event, DemotionData):
            promotion, demotion = None, Demotion(run_id, d.by, e.ts, d.reason)
    return promotion, demotion


def read_events(run_root: Path) -> list[Event]:
    if not RunPaths(run_root).ledger.is_file():
        return []
    with Ledger.reading(run_root) as ledger:
        return ledger.events()


def refuse_official(run_root: Path, action: str,
                    fix: str = "") -> None:
    """Bad input: ``action`` on a promoted run. Nothing is written."""
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    promotion = promotion_of(plan.run_id, read_events(run_root))
    if promotion is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(promotion.at))
        raise UserInputError(
            f"run {plan.run_id} is official (promoted by {promotion.by} at {when} UTC); "
            f"it cannot be {action}", where=str(run_root),
            fix=fix or f"plan a new run, or demote it first on the record: ray-bench demote {run_root} "
                        "--reason TEXT")


def resolve_cell(plan: Plan, text: str) -> PlanCell:
    """A planned cell named by its id, an unambiguous id prefix, or ``task/arm/rep``."""
    wanted = text.strip()
    for cell in plan.cells:
        if wanted in (cell.id, f"{cell.task}/{cell.arm}/{cell.rep}"):
            return cell
    matches = [c for c in plan.cells if len(wanted) >= MIN_PREFIX and c.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    raise UserInputError(
        f"cell {wanted!r} is not in the plan of run {plan.run_id}"
        + (f" ({len(matches)} cells start with it)" if matches else ""),
        where="--cell",
        fix="name a cell id from launch-plan.json, or task/arm/rep as in `ray-bench status`")


def record_exclusion(run_root: Path, cell: str, reason: str, *, include: bool = False,
                     by: str | None = None) -> Exclusion:
    """Exclude (or include again) one planned cell. Bad input writes nothing."""
    verb = "include" if include else "exclude"
    plan, identity = load_plan_file(RunPaths(run_root).plan)
    if not reason.strip():
        raise UserInputError("a reason is required", where="--reason",
                             fix=f"say why you {verb} the cell; it is recorded with your name")
    refuse_operator_text({"--reason": reason, "--by": by}, [a.route.env for a in plan.accounts])
    operator(by)  # a key in --by is refused before anything is read or written
    refuse_official(run_root, f"changed by `{verb}`")
    target = resolve_cell(plan, cell)
    current = exclusions_of(plan.run_id, read_events(run_root))
    if include and target.id not in current:
        raise UserInputError(f"cell {target.task}/{target.arm}/{target.rep} is not excluded",
                             where="--cell", fix="`include` undoes an earlier `exclude`")
    if not include and target.id in current:
        prior = current[target.id]
        raise UserInputError(
            f"cell {target.task}/{target.arm}/{target.rep} is already excluded by {prior.by}: "
            f"{prior.reason}", where="--cell", fix="`include` it first to change the decision")
    who = operator(by)
    kind = InclusionData if include else ExclusionData
    data: InclusionData | ExclusionData = kind(task=target.task, arm=target.arm, rep=target.rep,
                                               reason=reason.strip(), by=who)
    now = time.time()
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    try:
        ledger.append(data, cell_id=target.id, now=now)
    finally:
        ledger.close()
    return Exclusion(plan.run_id, target.id, target.task, target.arm, target.rep, reason.strip(), who, now)
