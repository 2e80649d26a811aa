"""The cleanup audit: every resource labelled with a run, on every backend, and what remains.

``ray-bench audit runs/ID [--cleanup]`` prints :meth:`AuditReport.lines` (or
:meth:`AuditReport.to_json`); a run whose audit does not reach zero is a hard stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ray_bench.errors import SandboxError
from ray_bench.sandboxes.base import LABEL_RUN, SandboxBackend, SandboxRef

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
            "errors": list(self.errors),
        }

    def lines(self) -> list[str]:
        verdict = "clean" if self.clean else "NOT clean"
        out = [
            f"audit of run {self.run_id}: {verdict} - found {len(self.found)}, "
            f"removed {len(self.removed)}, residue {len(self.residue)}"
        ]
        out += [f"  residue {r.backend} {r.kind} {r.id[:12]} ({r.state})" for r in self.residue]
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


async def audit(backends: Sequence[SandboxBackend], run_id: str, cleanup: bool) -> AuditReport:
    """List every resource labelled ``ray-bench.run=<run_id>`` on each backend; with
    ``cleanup``, remove them and list again, so that the residue is observed, not assumed."""
    report = AuditReport(run_id=run_id, cleanup=cleanup)
    for backend in backends:
        refs = await _list(backend, run_id, report)
        if refs is None:
            continue
        report.found += refs
        if not cleanup:
            report.residue += refs
            continue
        for ref in sorted(refs, key=lambda r: _REMOVAL_ORDER.get(r.kind, 0)):
            try:
                await backend.remove(ref)
            except SandboxError as exc:
                report.errors.append(
                    f"{backend.name}: removing {ref.kind} {ref.id[:12]} failed: {exc}"
                )
            else:
                report.removed.append(ref)
        after = await _list(backend, run_id, report)
        if after is not None:
            report.residue += after
    return report
