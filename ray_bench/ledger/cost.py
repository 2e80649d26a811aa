"""What an attempt cost, from its terminal summary: the one reading the spend book, the
ledger, ``ledger rebuild`` and the metrics share (issue 25, "evidence true to the bill").

A finished attempt costs what its usage says (:attr:`AttemptSummary.spent_usd`). An attempt
that did not finish (cancelled: ``pause --now``, a signal stop, a runner cancelled with its
node; or lost with its runner) may still have spent money at the provider: it costs what its
usage says when its usage is known, exactly $0 only when its agent never started, and is
otherwise unknown (None), which is never read as $0 (the spend book charges it the cell's
expected cost; reports and exports count it apart).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from ray_bench.models.attempt import AttemptSummary, Usage

#: Token counts an adapter records in ``usage.json`` (cache reads and writes apart from fresh input).
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def attempt_cost(summary: AttemptSummary) -> float | None:
    """The attempt's cost in USD, None when it is unknown."""
    if not (summary.cancelled or summary.lost):
        return summary.spent_usd
    if summary.usage is not None and summary.usage.known:
        return summary.spent_usd
    if summary.agent_started is False:  # None: unknown (a summary older than the field, or the pool's)
        return 0.0
    return None


def cost_is_lower_bound(summary: AttemptSummary) -> bool:
    """The attempt's known cost (:func:`attempt_cost`) is only a lower bound: its usage is (its
    CLI cut with a message unfinished or a call under way, :attr:`AttemptSummary.usage_lower_bound`).
    It still counts in full, against the limits too, and is shown as at least that much."""
    return attempt_cost(summary) is not None and summary.usage_lower_bound


@dataclass(frozen=True, slots=True)
class UsageFacts:
    """What the ledger's readers keep of an attempt's known usage record: read once per attempt
    (:meth:`ray_bench.ledger.store.Ledger.attempts`), where the report and the ledger each parsed
    it (issue 57). Counts are None when the record has none."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    #: The record's figure (the CLI's, or its tokens at list price); None: it has none.
    cost_usd: float | None
    #: ``reported``, ``estimated`` or None (as the record says).
    cost_basis: str | None
    #: The figures are at least what was spent (:attr:`Usage.lower_bound`).
    lower_bound: bool

    @property
    def tokens(self) -> tuple[int | None, ...]:
        """The counts of :data:`TOKEN_FIELDS`, in order."""
        return self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_write_tokens


def usage_facts(usage: Usage | None) -> UsageFacts | None:
    """The facts of a usage record; None when there is none or it says its spend is unknown."""
    if usage is None or not usage.known:
        return None
    extra = usage.model_extra or {}  # the cache counts, as stored
    cost = float(usage.cost_usd) if isinstance(usage.cost_usd, int | float) else None
    return UsageFacts(_count(usage.input_tokens), _count(usage.output_tokens),
                      _count(extra.get("cache_read_tokens")), _count(extra.get("cache_write_tokens")),
                      cost, _BASES.get(usage.cost_basis, usage.cost_basis), usage.lower_bound)


#: One string per basis, not one per attempt (100,000 rows hold them).
_BASES: dict[str | None, str | None] = {b: b for b in ("reported", "estimated")}


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def stored_usage_facts(text: object) -> UsageFacts | None:
    """The facts of a stored summary's usage record (its JSON text, as SQLite's ``json_extract``
    gives it), read as the whole summary reads it: a record that does not validate is no record
    (:meth:`AttemptSummary.parse` drops the field)."""
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        return usage_facts(Usage.model_validate(json.loads(text)))
    except (ValidationError, ValueError):
        return None
