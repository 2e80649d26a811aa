"""The cleanup audit: every resource labelled with a run, on every backend, and what remains.

``ray-bench audit runs/ID [--cleanup]`` prints :meth:`AuditReport.lines` (or
:meth:`AuditReport.to_json`); a run whose audit does not reach zero is a hard stop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ray_bench.errors import SandboxDeleteRefusedError, SandboxError
from ray_bench.models.plan import Plan
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import LABEL_RUN, SandboxBackend, SandboxRef

#: How long the audit waits for resources whose deletion is under way (Daytona deletes
#: asynchronously and its listing lags) before it counts them as residue.
SETTLE_SEC = 60.0

# Containers hold networks and volumes: remove them first.
_REMOVAL_ORDER = {"sandbox": 0, "container": 0, "network": 1, "volume": 2}


def _ref_json(ref: SandboxRef) -> dict[str, Any]:
    return {
        "backend": ref.backend,
        "kind": ref.kind,
        "id": ref.id,
        "state": ref.state,
        "labels": dict(ref.labels),
    }


@dataclass
class AuditReport:
    run_id: str
    cleanup: bool
    found: list[SandboxRef] = field(default_factory=list)
    removed: list[SandboxRef] = field(default_factory=list)
    residue: list[SandboxRef] = field(default_factory=list)
    #: "backend: what failed" for backends that could not be listed or resources not removed.
    errors: list[str] = field(default_factory=list)
    #: Deletes asked for that the provider still refuses (a Daytona sandbox still coming up:
    #: the service destroys it by its TTL, a later ``audit --cleanup`` asks again): residue.
    pending: list[SandboxRef] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Zero residue, and every backend answered."""
        return not self.residue and not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "cleanup": self.cleanup,
            "clean": self.clean,
            "found": [_ref_json(r) for r in self.found],
            "removed": [_ref_json(r) for r in self.removed],
            "residue": [_ref_json(r) for r in self.residue],
            "pending_delete": [_ref_json(r) for r in self.pending],
            "errors": list(self.errors),
        }

    def lines(self) -> list[str]:
        verdict = "clean" if self.clean else "NOT clean"
        out = [
            f"audit of run {self.run_id}: {verdict} - found {len(self.found)}, "
            f"removed {len(self.removed)}, residue {len(self.residue)}"
        ]
        pending = {r.id for r in self.pending}
        out += [f"  residue {r.backend} {r.kind} {r.id[:12]} ({r.state}"
                + (", pending delete: still coming up; asked again until its TTL destroys it; "
                   "`audit --cleanup` again removes it once it is up" if r.id in pending else "") + ")"
                for r in self.residue]
        out += [f"  error {e}" for e in self.errors]
        if self.residue and not self.cleanup:
            out.append("  (run with --cleanup to remove them)")
        return out


async def _list(
    backend: SandboxBackend, run_id: str, report: AuditReport
) -> list[SandboxRef] | None:
    try:
        return await backend.list({LABEL_RUN: run_id})
    except SandboxError as exc:
        report.errors.append(f"{backend.name}: listing failed: {exc}")
        return None


async def settled(
    backend: SandboxBackend, run_id: str, report: AuditReport, settle_sec: float
) -> list[SandboxRef] | None:
    """The run's resources once those being removed are gone, or ``settle_sec`` has passed:
    what is still being removed by then counts too (a deletion stuck for minutes is residue).
    A pending delete (still coming up) is not waited for: it may take an hour."""
    deadline = time.monotonic() + settle_sec
    delay = 0.25
    pending = {r.id for r in report.pending}
    while True:
        refs = await _list(backend, run_id, report)
        if (refs is None or not any(r.removing and r.id not in pending for r in refs)
                or time.monotonic() >= deadline):
            return refs
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


async def audit(
    backends: Sequence[SandboxBackend],
    run_id: str,
    cleanup: bool,
    *,
    settle_sec: float = SETTLE_SEC,
) -> AuditReport:
    """List every resource labelled ``ray-bench.run=<run_id>`` on each backend; with
    ``cleanup``, remove them and list again, so that the residue is observed, not assumed.
    Resources whose deletion is under way are waited for, at most ``settle_sec``."""
    report = AuditReport(run_id=run_id, cleanup=cleanup)
    for backend in backends:
        refs = await settled(backend, run_id, report, settle_sec)
        if refs is None:
            continue
        report.found += refs
        if not cleanup:
            report.residue += refs
            continue
        for order in sorted({_REMOVAL_ORDER.get(r.kind, 0) for r in refs}):
            # One kind at a time (containers before their networks), each of a kind at once: a
            # delete still refused waits its bound (Daytona's REMOVE_WAIT_SEC) beside the others.
            group = [r for r in refs if _REMOVAL_ORDER.get(r.kind, 0) == order]
            done = await asyncio.gather(*(backend.remove(r) for r in group), return_exceptions=True)
            for ref, outcome in zip(group, done, strict=True):
                if isinstance(outcome, SandboxDeleteRefusedError):
                    report.pending.append(ref)
                elif isinstance(outcome, SandboxError):
                    report.errors.append(f"{backend.name}: removing {ref.kind} {ref.id[:12]} failed: {outcome}")
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    report.removed.append(ref)
        after = await settled(backend, run_id, report, settle_sec)
        if after is not None:
            report.residue += after
    return report


def audit_plan(plan: Plan, *, cleanup: bool) -> AuditReport:
    """Every sandbox, volume and network labelled with the plan's run, on each backend it used."""
    names = sorted({c.backend for c in plan.cells})

    async def go() -> AuditReport:
        backends = [make_backend(n, **(dict(plan.backends[n].options) if n in plan.backends else {}))
                    for n in names]
        try:
            return await audit(backends, plan.run_id, cleanup)
        finally:
            for backend in backends:
                await backend.close()

    return asyncio.run(go())
