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

from ray_bench.models.attempt import AttemptSummary


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
