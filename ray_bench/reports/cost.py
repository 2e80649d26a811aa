"""Tokens and cost as a report shows them.

Per attempt its cost is ``settled`` (the provider's charge, from the latest settlement),
``estimated`` (the figure in its usage record: the CLI's own, or its tokens at list price when the
CLI printed none, ``cost_basis: estimated``, :mod:`ray_bench.agents.prices`) or ``unknown`` (no
usage record, or one without a cost: a stale runner, an agent that wrote nothing, a model with no
price). Unknown is never shown as $0
or 0 tokens: the attempt's cost and tokens are missing values, the sums cover what is known,
and every table says how many attempts each sum leaves out. An attempt whose CLI was cut
mid-turn (a message unfinished, a tool of its own running, a call to come) has usage that is a
lower bound (``usage_bound``): it is in the sums, and every sum it is in reads ``>=``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ray_bench.ledger.cost import TOKEN_FIELDS, UsageFacts, usage_facts
from ray_bench.models.attempt import AttemptSummary

COST_STATUSES = ("settled", "estimated", "unknown")
#: Token counts an adapter records in ``usage.json`` (cache reads and writes apart from fresh input).
TOKEN_COLUMNS = TOKEN_FIELDS
#: Per attempt: the agent's estimate (NaN when unknown), the settled charge (NaN unless settled).
#: ``cost_basis``: ``reported`` (the CLI's figure), ``estimated`` (tokens at list price), None.
#: ``usage_bound``: ``exact``, ``lower_bound`` (the CLI was cut mid-turn: its tokens and the
#: estimate from them are at least these; a settled charge is still exact), None when unknown.
COST_COLUMNS = ("cost_usd", "settled_usd", "cost_status", "cost_basis", "usage_bound")
USAGE_COLUMNS = ["account", "arm", "attempts", *TOKEN_COLUMNS, "cost_usd", "settled_usd",
                 *(f"{s}_attempts" for s in COST_STATUSES), "priced_attempts", "lower_bound_attempts"]


def attempt_usage(summary: AttemptSummary | None, settled_usd: float | None) -> dict[str, Any]:
    """The token and cost fields of one attempt's report record."""
    facts = usage_facts(summary.usage) if summary is not None else None
    return dict(zip(USAGE_FIELDS, usage_values(facts, settled_usd), strict=True))


#: The fields :func:`usage_values` gives, in its order.
USAGE_FIELDS = (*TOKEN_COLUMNS, *COST_COLUMNS)


def usage_values(usage: UsageFacts | None, settled_usd: float | None) -> tuple[Any, ...]:
    """The token and cost fields of one attempt (:data:`USAGE_FIELDS`), as a tuple, from its
    usage as the ledger read it (:attr:`ray_bench.ledger.store.AttemptRow.usage`; None: no
    record, or ``source: unknown``, so no number is shown): a report of 100,000 attempts builds
    its columns from them (a dict and a ``model_dump`` each was 5 %)."""
    if usage is None:
        return (*(None,) * len(TOKEN_COLUMNS), math.nan, math.nan if settled_usd is None else float(settled_usd),
                "settled" if settled_usd is not None else "unknown", None, None)
    cost = math.nan if usage.cost_usd is None else usage.cost_usd
    status = "settled" if settled_usd is not None else "estimated" if not math.isnan(cost) else "unknown"
    basis = usage.cost_basis
    return (*usage.tokens, cost, math.nan if settled_usd is None else float(settled_usd), status,
            basis if isinstance(basis, str) and not math.isnan(cost) else None,
            "lower_bound" if usage.lower_bound else "exact")


def typed(att: pd.DataFrame) -> pd.DataFrame:
    """Token columns as nullable integers (an unknown count stays missing, in parquet too)."""
    return att.astype({c: "Int64" for c in TOKEN_COLUMNS})


def usage_table(att: pd.DataFrame) -> pd.DataFrame:
    """Per account and arm: attempts, known token sums, estimated and settled cost, and how
    many attempts are settled, estimated only, or of unknown cost."""
    if not len(att):
        return pd.DataFrame(columns=USAGE_COLUMNS)
    records: list[dict[str, Any]] = []
    for (account, arm), group in att.groupby(["account", "arm"]):
        record: dict[str, Any] = {"account": account, "arm": arm, "attempts": len(group)}
        record.update(sums(group))
        records.append(record)
    return pd.DataFrame(records, columns=USAGE_COLUMNS)


def sums(group: pd.DataFrame) -> dict[str, Any]:
    """Known token sums (missing when none is known), estimated and settled USD, status counts."""
    out: dict[str, Any] = {c: group[c].sum(min_count=1) for c in TOKEN_COLUMNS}
    out["cost_usd"] = float(group.cost_usd.sum())  # of the attempts with an estimate
    out["settled_usd"] = group.settled_usd.sum(min_count=1)
    out.update({f"{s}_attempts": int((group.cost_status == s).sum()) for s in COST_STATUSES})
    # Estimated attempts whose figure is their tokens at list price, not the CLI's own.
    out["priced_attempts"] = int(((group.cost_status == "estimated") & (group.cost_basis == "estimated")).sum())
    # Attempts cut mid-turn: their tokens and estimates are in the sums as lower bounds.
    out["lower_bound_attempts"] = int((group.usage_bound == "lower_bound").sum()) if "usage_bound" in group else 0
    return out


def at_least(value: str, lower_bound: bool) -> str:
    """A figure a lower bound is in (an attempt cut mid-turn, or one of unknown cost left
    out), shown as one: ``>= 0.0400``."""
    return f">= {value}" if lower_bound and value != "-" else value


def split_line(frame: pd.DataFrame) -> str:
    """``3 settled, 12 estimated (4 from tokens at list price), 1 unknown``: the cost status
    counts of a usage table."""
    priced = int(frame["priced_attempts"].sum()) if "priced_attempts" in frame else 0
    least = int(frame["lower_bound_attempts"].sum()) if "lower_bound_attempts" in frame else 0
    return ", ".join(f"{int(frame[f'{s}_attempts'].sum())} {s}"
                     + (f" ({priced} from tokens at list price)" if s == "estimated" and priced else "")
                     for s in COST_STATUSES) + (
        f"; {least} cut mid-turn, whose usage is a lower bound" if least else "")
