"""``ray-bench settle runs/ID --usage FILE``: reconcile each attempt's estimated cost with the
provider's own charges, matched by request id (or session id).

An attempt's ids come from its usage record (``usage.json`` written by the agent adapter:
``request_ids`` / ``request_id``, ``session_id`` / ``session_ids``). Its request ids are the
ones that must be found (its session ids when it recorded no request id). Per attempt:

- ``settled``: every required id names a charge of the export, and no charge it matched is
  claimed by another attempt; the settled cost is the sum of the charges matched.
- ``missing``: some required id is not in the export (charges not final yet, or the wrong
  export), or the attempt has an estimated cost but recorded no id to settle it by.
- ``disputed``: a charge it matched is also matched by another attempt (a duplicate request
  id: which attempt spent it is ambiguous).
- ``n/a``: no id and no estimated cost (a stale runner, an agent without a model).

The calls a provider refused (``refused``: a 429, a 5xx, a 401, each with its request id and
class) are not billed: their ids are never required, and a charge that does name one is still
the attempt's (matched, summed, never a stranger's). An attempt with neither answered request ids
nor anything spent (refused throughout) is ``n/a``. An attempt whose usage is ``unknown`` (cut
before anything recorded what it spent) is ``missing`` unless request ids it recorded settle it:
an unknown is never taken for $0.

The result is a ``settlement`` event in the ledger (append-only; the latest one counts) with
who, when, the export's file name, format and sha256. Nothing else changes: estimated costs
stay what the agent reported, and reports show both.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_bench.errors import UserInputError
from ray_bench.evidence.decisions import operator, read_events, refuse_official
from ray_bench.evidence.usage_export import UsageExport, read_usage_export
from ray_bench.ledger.events import SettlementData
from ray_bench.ledger.store import AttemptRow, Event, Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths

SETTLEMENT = "settlement"
STATUSES = ("settled", "missing", "disputed", "n/a")


@dataclass(frozen=True)
class SettledAttempt:
    status: str
    estimated_usd: float | None
    """None: the attempt's cost is unknown (never $0)."""
    settled_usd: float | None
    detail: str
    lower_bound: bool = False
    """The estimate is at least what was spent (its CLI was cut mid-turn or SIGKILLed in its
    grace): a charge the estimate misses is no dispute of the estimate."""


@dataclass(frozen=True)
class Settlement:
    run_id: str
    by: str
    at: float
    source: str
    sha256: str
    format: str
    attempts: dict[str, SettledAttempt]
    unmatched_charges: int
    unmatched_usd: float

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for a in self.attempts.values():
            out[a.status] = out.get(a.status, 0) + 1
        return out

    def estimated(self) -> tuple[float, int]:
        """(USD of the attempts whose cost is known, attempts of unknown cost)."""
        known = [a.estimated_usd for a in self.attempts.values() if a.estimated_usd is not None]
        return sum(known), len(self.attempts) - len(known)

    def lower_bounds(self) -> int:
        """Attempts of known cost whose estimate is only a lower bound."""
        return sum(1 for a in self.attempts.values() if a.lower_bound and a.estimated_usd is not None)

    def charged(self) -> dict[str, float]:
        """attempt id -> the provider's charge, for the attempts this settled (what every reader
        counts instead of the estimate: the report, ``status``)."""
        return {k: a.settled_usd or 0.0 for k, a in self.attempts.items() if a.status == "settled"}

    @property
    def complete(self) -> bool:
        """Every attempt that spent money is settled."""
        return all(a.status in ("settled", "n/a") for a in self.attempts.values())

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "source": self.source, "sha256": self.sha256, "format": self.format,
                "unmatched_charges": self.unmatched_charges, "unmatched_usd": self.unmatched_usd,
                "attempts": {k: a.__dict__ for k, a in sorted(self.attempts.items())}}


def attempt_ids(summary: AttemptSummary | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(request ids, session ids) recorded in an attempt's usage (adapters write them as
    extra keys of the open usage record)."""
    if summary is None or summary.usage is None:
        return (), ()
    usage = summary.usage.model_dump()

    def names(*keys: str) -> tuple[str, ...]:
        found: list[str] = []
        for key in keys:
            value = usage.get(key)
            values = value if isinstance(value, list) else [value]
            found += [str(v) for v in values if isinstance(v, str | int) and str(v)]
        return tuple(dict.fromkeys(found))

    return names("request_ids", "request_id"), names("session_ids", "session_id")


def refused_ids(summary: AttemptSummary | None) -> tuple[str, ...]:
    """The request ids of the calls the provider refused (``usage.refused``): not on a bill."""
    if summary is None or summary.usage is None:
        return ()
    refused = summary.usage.model_dump().get("refused")
    calls = refused if isinstance(refused, list) else []
    return tuple(dict.fromkeys(str(c["request_id"]) for c in calls
                               if isinstance(c, dict) and isinstance(c.get("request_id"), str) and c["request_id"]))


def usage_unknown(summary: AttemptSummary | None) -> bool:
    """What the attempt cost is unknown: the adapter said it cannot know what it spent
    (``source: unknown``), or it spent tokens with no cost (a model with no list price)."""
    return summary is not None and summary.usage is not None and summary.spent_usd is None


def _spent(summary: AttemptSummary | None) -> bool:
    """Its usage says tokens were used, or cannot say (unknown)."""
    if summary is None or summary.usage is None:
        return False
    usage = summary.usage.model_dump()
    return not summary.usage.known or any(isinstance(usage.get(k), int | float) and usage[k] > 0
                                          for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                    "cache_write_tokens", "cost_usd"))


def _ids_missing(summary: AttemptSummary | None) -> int:
    """Calls whose request id was never recorded (answered, or started and never ended: the
    provider may have billed them): settling on the rest would be partial."""
    usage = summary.usage if summary is not None else None
    return (usage.request_ids_missing or 0) + (usage.calls_unfinished or 0) if usage is not None else 0


def reconcile(attempts: Iterable[AttemptRow], summaries: dict[str, AttemptSummary],
              export: UsageExport) -> tuple[dict[str, SettledAttempt], int, float]:
    """Pure: per attempt its settlement, and the export's charges no attempt claimed."""
    index: dict[str, list[int]] = {}
    for n, charge in enumerate(export.charges):
        for name in charge.ids:
            index.setdefault(name, []).append(n)
    matched: dict[str, set[int]] = {}
    required: dict[str, tuple[str, ...]] = {}
    listed = [a for a in attempts if a.terminal]
    unknown = {a.attempt_id for a in listed if usage_unknown(summaries.get(a.attempt_id))}
    for a in listed:
        summary = summaries.get(a.attempt_id)
        requests, sessions = attempt_ids(summary)
        refused = refused_ids(summary)
        billed = tuple(r for r in requests if r not in refused)
        # A session id stands in for request ids only where something was spent: an attempt
        # refused throughout (no request id, no tokens, no cost) has no charge to find.
        required[a.attempt_id] = billed or (sessions if (a.cost_usd or 0.0) > 0 or _spent(summary) else ())
        matched[a.attempt_id] = {n for name in (*requests, *refused, *sessions) for n in index.get(name, [])}
    claims: dict[int, int] = {}
    for charges in matched.values():
        for n in charges:
            claims[n] = claims.get(n, 0) + 1
    out: dict[str, SettledAttempt] = {}
    for a in listed:
        need, charges = required[a.attempt_id], matched[a.attempt_id]
        # Full precision (a call of a cheap model costs under a micro-dollar): rounded only where shown.
        estimated = a.cost_usd
        absent = [name for name in need if name not in index]
        shared = [n for n in charges if claims[n] > 1]
        settled = math.fsum(export.charges[n].cost_usd for n in charges) if charges else None
        if not need and not charges:
            status, detail = (("missing", "usage unknown and no request id recorded") if a.attempt_id in unknown
                              else ("missing", "no request id recorded") if estimated is None or estimated > 0
                              else ("n/a", ""))
        elif shared:
            status, detail = "disputed", f"{len(shared)} charge(s) also matched by another attempt"
        elif absent:
            status, detail = "missing", f"{len(absent)} of {len(need)} id(s) not in the export"
        elif lost := _ids_missing(summaries.get(a.attempt_id)):
            status, detail = "missing", f"{lost} call(s) with no request id recorded (partial ids)"
        else:
            status, detail = "settled", f"{len(charges)} charge(s)"
        summary = summaries.get(a.attempt_id)
        if refused := refused_ids(summary):
            detail = "; ".join(d for d in (detail, f"{len(refused)} refused call(s), not billed") if d)
        lower = summary is not None and summary.usage is not None and summary.usage.lower_bound
        out[a.attempt_id] = SettledAttempt(status, estimated, settled, detail, lower)
    unclaimed = [n for n in range(len(export.charges)) if n not in claims]
    return out, len(unclaimed), math.fsum(export.charges[n].cost_usd for n in unclaimed)


def settle_run(run_root: Path, usage: Path, *, by: str | None = None) -> Settlement:
    """Read the export (bad input writes nothing), reconcile, and record the settlement."""
    plan, identity = load_plan_file(RunPaths(run_root).plan)
    export = read_usage_export(usage)
    if not RunPaths(run_root).ledger.is_file():
        raise UserInputError("the run has no attempts to settle", where=str(run_root),
                             fix="execute the run first")
    # An official run's costs are part of its evidence: a new settlement would change them.
    refuse_official(run_root, "settled again (its reported costs would change)",
                    fix=f"demote it first, on the record: ray-bench demote {run_root} --reason TEXT")
    with Ledger.reading(run_root) as ledger:
        attempts = ledger.attempts()
        summaries = dict(ledger.summaries())
    settled, unmatched, unmatched_usd = reconcile(attempts, summaries, export)
    if unmatched == len(export.charges):
        # Recording it would make a settlement of nothing the latest one, and mark every
        # charged attempt missing: the export is of another account, provider or period.
        known = sum(len(r) + len(s) for r, s in map(attempt_ids, summaries.values()))
        raise UserInputError(
            f"foreign usage export: none of its {len(export.charges)} charges names a request or "
            f"session id of run {plan.run_id} ({known} ids recorded)", where=str(usage),
            fix="export the charges of the accounts and days this run used")
    result = Settlement(plan.run_id, operator(by), time.time(), usage.name,
                        hashlib.sha256(usage.read_bytes()).hexdigest(), export.format, settled,
                        unmatched, unmatched_usd)
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    try:
        ledger.event(SETTLEMENT, result.to_json(), now=result.at)
    finally:
        ledger.close()
    return result


def settlement_of(run_id: str, events: Iterable[Event]) -> Settlement | None:
    """The latest settlement recorded in a ledger's events."""
    last = None
    for e in events:
        if isinstance(e.event, SettlementData):
            last = e.event, e.ts
    if last is None:
        return None
    d, ts = last
    attempts = {k: SettledAttempt(str(v["status"]),
                                  None if v.get("estimated_usd") is None else float(v["estimated_usd"]),
                                  None if v.get("settled_usd") is None else float(v["settled_usd"]),
                                  str(v.get("detail", "")), v.get("lower_bound") is True)
                for k, v in d.attempts.items()}
    return Settlement(run_id, d.by, ts, d.source, d.sha256, d.format, attempts, d.unmatched_charges,
                      d.unmatched_usd)


def read_settlement(run_root: Path) -> Settlement | None:
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    return settlement_of(plan.run_id, read_events(run_root))
