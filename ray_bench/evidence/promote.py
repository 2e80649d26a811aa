"""``ray-bench promote runs/ID``: a staging run becomes official, once, with who and why.

Every run is *staging* until promoted. Promotion covers the run's family (the run root and
its reruns, the cohort its report is built from) and checks, in order:

1. ``finished``: no driver holds the run and every attempt has a terminal record;
2. ``pairs``: every planned cell has an accepted valid row or a recorded exclusion, so every
   planned pair is complete in both arms or explained;
3. ``circuit``: no recovery circuit left open (a ``circuit_open`` after the last hypothesis);
4. ``cleanup``: the run's last recorded audit found no residue, and a fresh audit of every
   backend it used finds nothing labelled with it;
5. ``settlement``: where a settlement exists, every attempt that spent money is settled
   (with ``--require-settlement``, a settlement must exist for every run that spent money or
   has an attempt whose usage is unknown, and such an attempt must be settled by its ids);
6. ``invalid-rate``: invalid attempts (finished without a valid row, or stale) over all
   terminal attempts at most ``--max-invalid-rate``.

A failed gate is a result (exit 1) and records nothing. A pass records a ``promotion`` event
in the ledger of every run of the family. ``demote_run`` takes the family back to staging with
a recorded reason (a ``demotion`` event; the promotion stays in the ledger), which is the only
way to settle, exclude or rerun an official run again (see :mod:`ray_bench.evidence.decisions`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ray_bench.config.secrets import refuse_operator_text, refuse_secret_text
from ray_bench.errors import UserInputError
from ray_bench.evidence.circuit import open_scopes_from
from ray_bench.evidence.decisions import operator, refuse_official
from ray_bench.evidence.family import run_family
from ray_bench.evidence.rows import Epoch, build_evidence, load_epoch
from ray_bench.evidence.settle import settlement_of, usage_unknown
from ray_bench.ledger.events import Audit, DemotionData, PromotionData
from ray_bench.ledger.store import Ledger
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths, lock_holder
from ray_bench.sandboxes.audit import audit_plan

#: Invalid attempts over terminal attempts a run may have and still be promoted. A quarter:
#: above it, the valid rows are a filtered sample of what the agents did, and a reader should
#: see the failures first (the operator can raise it with a recorded reason).
DEFAULT_MAX_INVALID_RATE = 0.25
SHOWN = 5


@dataclass(frozen=True)
class Gate:
    name: str
    ok: bool
    detail: str


@dataclass
class PromotionResult:
    run_id: str
    family: list[str]
    gates: list[Gate]
    promoted: bool
    by: str


def _driver_running(run_root: Path) -> bool:
    return lock_holder(run_root).held


def live_audit(run_root: Path) -> int:
    """Resources still labelled with the run, on every backend it used (nothing is removed)."""
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    report = audit_plan(plan, cleanup=False)
    return len(report.residue) + len(report.errors)  # a backend that did not answer is not clean


def _names(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def check_gates(epochs: list[Epoch], *, max_invalid_rate: float, require_settlement: bool,
                audit: Callable[[Path], int]) -> list[Gate]:
    evidence = build_evidence(epochs)
    members = [e for e in epochs if e.identity in evidence.cohort.epochs]
    attempts = [a for e in members for a in e.attempts]
    gates: list[Gate] = []

    running = [e.run_id for e in members if _driver_running(e.run_root)]
    open_attempts = [a.attempt_id for a in attempts if not a.terminal]
    gates.append(Gate("finished", not running and not open_attempts,
                      f"driver running on {_names(running)}" if running else
                      f"{len(open_attempts)} attempts without a terminal record" if open_attempts else
                      f"{len(attempts)} attempts, all terminal"))

    missing = [f"{c.task}/{c.arm}/{c.rep}" for c in evidence.missing()]
    gates.append(Gate("pairs", not missing,
                      f"{len(missing)} planned cells with neither a valid row nor an exclusion: "
                      f"{_names(missing)}" if missing else
                      f"{len(evidence.rows)} valid rows, {len(evidence.excluded)} exclusions"))

    circuits = [f"{e.run_id} {scope} ({fp})" for e in members
                for scope, fp in open_scopes_from(e.events).items()]
    gates.append(Gate("circuit", not circuits,
                      f"open: {_names(circuits)}" if circuits else "no open circuit"))

    residue: list[str] = []
    for e in members:
        audits = [row.event for row in e.events if isinstance(row.event, Audit)]
        if audits and audits[-1].residue:
            residue.append(f"{e.run_id}: last audit left {audits[-1].residue}")
        if e.attempts:
            found = audit(e.run_root)
            if found:
                residue.append(f"{e.run_id}: {found} labelled resources now")
    gates.append(Gate("cleanup", not residue, _names(residue) if residue else "audit at zero"))

    problems: list[str] = []
    for e in members:
        settlement = settlement_of(e.run_id, e.events)
        spent = sum(a.cost_usd or 0.0 for a in e.attempts)  # unknown ones are counted apart below
        summaries = e.summaries() if require_settlement else {}
        unknown = [a.attempt_id for a in e.attempts if a.terminal and usage_unknown(summaries.get(a.attempt_id))]
        if settlement is None:
            if require_settlement and (spent > 0 or unknown):
                problems.append(f"{e.run_id}: no settlement (${spent:.4f} estimated"
                                f"{f', {len(unknown)} attempts with unknown usage' if unknown else ''})")
            continue
        counts = settlement.counts()
        unsettled = [k for k in e.attempts if k.terminal and k.attempt_id not in settlement.attempts]
        if not settlement.complete or unsettled:
            problems.append(f"{e.run_id}: {counts['missing'] + len(unsettled)} missing, "
                            f"{counts['disputed']} disputed")
    gates.append(Gate("settlement", not problems, "; ".join(problems) if problems else
                      "settled" if any(settlement_of(e.run_id, e.events) for e in members) else
                      "no settlement recorded (not required)"))

    terminal = [a for a in attempts if a.terminal and a.status != "cancelled"]
    invalid = [a for a in terminal if not a.valid]
    rate = len(invalid) / len(terminal) if terminal else 0.0
    gates.append(Gate("invalid-rate", rate <= max_invalid_rate,
                      f"{len(invalid)} of {len(terminal)} attempts invalid ({rate:.1%}; "
                      f"limit {max_invalid_rate:.1%})"))
    return gates


def promote_run(run_root: Path, *, reason: str, by: str | None = None,
                max_invalid_rate: float = DEFAULT_MAX_INVALID_RATE, require_settlement: bool = False,
                audit: Callable[[Path], int] = live_audit) -> PromotionResult:
    if not reason.strip():
        raise UserInputError("a reason is required", where="--reason",
                             fix="say why this run is fit to be official; it is recorded with your name")
    refuse_secret_text(reason, "--reason")
    operator(by)  # a key in --by is refused before the gates run
    if not 0.0 <= max_invalid_rate <= 1.0:
        raise UserInputError(f"--max-invalid-rate {max_invalid_rate} is not a fraction",
                             where="--max-invalid-rate", fix="use a number from 0 to 1")
    family = run_family(run_root)
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    refuse_operator_text({"--reason": reason, "--by": by}, [a.route.env for a in plan.accounts])
    for root in family:
        refuse_official(root, "promoted again")
    epochs = [load_epoch(p) for p in family]
    gates = check_gates(epochs, max_invalid_rate=max_invalid_rate,
                        require_settlement=require_settlement, audit=audit)
    who = operator(by)
    result = PromotionResult(epochs[0].run_id, [e.run_id for e in epochs], gates,
                             all(g.ok for g in gates), who)
    if not result.promoted:
        return result
    data = PromotionData(by=who, reason=reason.strip(), family=result.family,
                         gates=[(g.name, g.ok, g.detail) for g in gates], max_invalid_rate=max_invalid_rate,
                         require_settlement=require_settlement)
    now = time.time()
    for epoch in epochs:
        ledger = Ledger.create(epoch.run_root, run_id=epoch.run_id, plan_identity=epoch.identity)
        try:
            ledger.append(data.model_copy(update={"identity": epoch.identity}), now=now)
        finally:
            ledger.close()
    return result


@dataclass(frozen=True)
class DemotionResult:
    run_id: str
    family: list[str]
    by: str
    reason: str


def demote_run(run_root: Path, *, reason: str, by: str | None = None) -> DemotionResult:
    """Take an official run and the official runs of its family back to staging, recorded
    with who and why. Bad input (no reason, a run that is not official) writes nothing."""
    if not reason.strip():
        raise UserInputError("a reason is required", where="--reason",
                             fix="say why the official evidence must change; it is recorded with your name")
    epochs = [load_epoch(p) for p in run_family(run_root)]
    official = [e for e in epochs if e.promotion is not None]
    if epochs[0].promotion is None:
        raise UserInputError(f"run {epochs[0].run_id} is not official: nothing to demote",
                             where=str(run_root), fix="`demote` undoes a `promote`; a staging run "
                             "can be settled, excluded or rerun as it is")
    who = operator(by)
    data = DemotionData(by=who, reason=reason.strip(), family=[e.run_id for e in official])
    now = time.time()
    for epoch in official:
        ledger = Ledger.create(epoch.run_root, run_id=epoch.run_id, plan_identity=epoch.identity)
        try:
            ledger.append(data, now=now)
        finally:
            ledger.close()
    return DemotionResult(epochs[0].run_id, data.family, who, data.reason)


def run_category(run_root: Path) -> str:
    """``official`` or ``staging``: what a report's title says."""
    if not RunPaths(run_root).ledger.is_file():
        return "staging"
    epoch = load_epoch(run_root)
    return "official" if epoch.promotion is not None else "staging"
