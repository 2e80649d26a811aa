"""The report's record of decisions and conditions: staging or official, exclusions, settlement,
the execute options of every epoch, and the model roles of every arm. Each is a frame built
from the epochs' ledgers and plans (see :mod:`ray_bench.reports.build`)."""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from ray_bench.evidence.decisions import demotion_of
from ray_bench.evidence.rows import Evidence
from ray_bench.evidence.settle import settlement_of
from ray_bench.ledger.events import RunOptionsRecord, RunStarted
from ray_bench.textsafe import escape_controls, table_cell

EXCLUSION_COLUMNS = ["run_id", "task", "arm", "rep", "cell_id", "reason", "by", "at"]
SETTLEMENT_COLUMNS = ["run_id", "at", "by", "source", "format", "settled", "missing", "disputed",
                      "not_applicable", "estimated_usd", "settled_usd", "unmatched_charges"]
EXECUTION_COLUMNS = ["run_id", "started", "parallel", "runners_per_node", "backend_pools",
                     "address", "effective_concurrency"]
ROLE_COLUMNS = ["arm", "role", "name", "model", "route", "billing", "max_turns", "max_tokens",
                "max_spend_usd"]


def stamp(ts: float | None) -> str:
    return "-" if ts is None or pd.isna(ts) else time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def category(evidence: Evidence) -> str:
    """``official`` when every run the report draws from is promoted, else ``staging``."""
    members = [e for e in evidence.epochs if e.identity in evidence.cohort.epochs]
    return "official" if members and all(e.promotion is not None for e in members) else "staging"


def promotions(evidence: Evidence) -> list[str]:
    """The promotion in force of each run, or the demotion that made it staging again."""
    out = []
    for e in evidence.epochs:
        p = e.promotion
        d = demotion_of(e.run_id, e.events)
        if p is not None:
            out.append(escape_controls(f"{e.run_id} promoted by {p.by} at {stamp(p.at)} UTC: {p.reason}"))
        elif d is not None:
            out.append(escape_controls(f"{e.run_id} demoted by {d.by} at {stamp(d.at)} UTC: {d.reason}"))
    return out


def exclusions(evidence: Evidence) -> pd.DataFrame:
    records = [{"run_id": x.run_id, "task": x.task, "arm": x.arm, "rep": x.rep, "cell_id": x.cell_id,
                "reason": x.reason, "by": x.by, "at": stamp(x.at)}
               for x in sorted(evidence.excluded.values(), key=lambda x: (x.task, x.arm, x.rep))]
    return pd.DataFrame(records, columns=EXCLUSION_COLUMNS)


def settlements(evidence: Evidence) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for e in evidence.epochs:
        if e.identity not in evidence.cohort.epochs:
            continue
        s = settlement_of(e.run_id, e.events)
        if s is None:
            continue
        counts = s.counts()
        records.append({
            "run_id": e.run_id, "at": stamp(s.at), "by": s.by, "source": s.source, "format": s.format,
            "settled": counts["settled"], "missing": counts["missing"], "disputed": counts["disputed"],
            "not_applicable": counts["n/a"],
            "estimated_usd": s.estimated()[0],  # of the known costs (the cost table counts the unknown)
            "settled_usd": sum(a.settled_usd or 0.0 for a in s.attempts.values()),
            "unmatched_charges": s.unmatched_charges,
        })
    return pd.DataFrame(records, columns=SETTLEMENT_COLUMNS)


def settled_cost(evidence: Evidence) -> dict[str, float]:
    """attempt id -> settled USD, for attempts a recorded settlement settled."""
    out: dict[str, float] = {}
    for e in evidence.epochs:
        s = settlement_of(e.run_id, e.events)
        if s is not None and e.identity in evidence.cohort.epochs:
            out.update(s.charged())
    return out


def executions(evidence: Evidence) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for e in evidence.epochs:
        for row in e.events:
            if not isinstance(row.event, RunStarted):
                continue
            options = row.event.options or RunOptionsRecord()  # a ledger older than the options
            records.append({
                "run_id": e.run_id,
                "started": stamp(row.ts),
                "parallel": options.parallel or "-",
                "runners_per_node": _shown(options.runners_per_node),
                "backend_pools": ", ".join(f"{k} {v or 'default'}" for k, v in options.backend_pools.items()) or "-",
                "address": _shown(options.address),
                "effective_concurrency": _shown(options.effective_concurrency),
            })
    return pd.DataFrame(records, columns=EXECUTION_COLUMNS)


def _shown(value: object) -> object:
    """An option a ledger did not record is shown as unknown, never as 0."""
    return "-" if value is None else value


def roles(evidence: Evidence) -> pd.DataFrame:
    from ray_bench.plan.roles import role_rows

    seen: set[tuple[str, str, str]] = set()
    records: list[dict[str, Any]] = []
    for e in evidence.epochs:
        if e.identity not in evidence.cohort.epochs:
            continue
        for arm in e.plan.arms:
            for row in role_rows(arm):
                key = (arm.name, row["role"], row["name"])
                if key not in seen:
                    seen.add(key)
                    records.append({"arm": arm.name, **row})
    return pd.DataFrame(records, columns=ROLE_COLUMNS)


def _md_table(frame: pd.DataFrame, headers: dict[str, str]) -> list[str]:
    out = ["| " + " | ".join(headers.values()) + " |", "|" + "---|" * len(headers)]
    for record in frame.to_dict("records"):
        cells = []
        for key in headers:
            value = record.get(key)
            text = f"{value:.4f}" if isinstance(value, float) else str(value)
            cells.append(table_cell(text))
        out.append("| " + " | ".join(cells) + " |")
    return out


EXCLUSION_HEADERS = {"run_id": "run", "task": "task", "arm": "arm", "rep": "rep", "reason": "reason",
                     "by": "by", "at": "when (UTC)"}
SETTLEMENT_HEADERS = {"run_id": "run", "at": "when (UTC)", "by": "by", "source": "export",
                      "format": "format", "settled": "settled", "missing": "missing",
                      "disputed": "disputed", "estimated_usd": "estimated (USD)",
                      "settled_usd": "settled (USD)", "unmatched_charges": "charges matching no attempt"}
EXECUTION_HEADERS = {"run_id": "run", "started": "started (UTC)", "parallel": "--parallel",
                     "runners_per_node": "--runners-per-node", "backend_pools": "backend pools",
                     "address": "Ray", "effective_concurrency": "planned concurrency"}
ROLE_HEADERS = {"arm": "arm", "role": "role", "name": "name", "model": "model", "route": "route",
                "billing": "billing", "max_turns": "max turns", "max_tokens": "max tokens",
                "max_spend_usd": "max spend (USD)"}


def status_line(category: str, promotions: list[str]) -> str:
    if category == "official":
        return "**Official.** " + "; ".join(promotions) + "."
    demoted = [p for p in promotions if " demoted by " in p]
    if demoted:
        return "**Staging again.** " + "; ".join(demoted) + "."
    return ("**Staging.** Not promoted: `ray-bench promote runs/ID --reason TEXT` checks the gates "
            "(pairs complete or excluded, no open circuit, cleanup at zero, costs settled where a "
            "settlement exists, invalid attempts under the limit) and records who and why.")


def markdown_sections(exclusion: pd.DataFrame, settlement: pd.DataFrame, execution: pd.DataFrame,
                      role: pd.DataFrame) -> list[str]:
    out = ["", "## Executions (options that shape concurrency)", ""]
    out += _md_table(execution, EXECUTION_HEADERS) if len(execution) else ["not executed yet"]
    out += ["", "## Exclusions (out of both denominators; attempts kept in the ledger)", ""]
    out += _md_table(exclusion, EXCLUSION_HEADERS) if len(exclusion) else ["none"]
    out += ["", "## Settlement (provider charges matched by request id)", ""]
    out += (_md_table(settlement, SETTLEMENT_HEADERS) if len(settlement) else
            ["none recorded: costs are the agents' own estimates (`ray-bench settle runs/ID --usage FILE`)"])
    out += ["", "## Model roles", ""]
    out += _md_table(role, ROLE_HEADERS) if len(role) else ["none"]
    return out
