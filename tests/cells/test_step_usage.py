"""A multi-step attempt's usage is the sum over its steps, every step's request ids kept, so
that settle expects (and settles) the whole charge (issue 54 item 9)."""

from __future__ import annotations

import pytest

from ray_bench.cells.steps import sum_usage
from ray_bench.evidence.settle import reconcile
from ray_bench.evidence.usage_export import Charge, UsageExport
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary, Usage


def _step(ids: list[str], **fields: object) -> Usage:
    return Usage.model_validate({"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 5,
                                 "cost_usd": 0.002, "cost_basis": "estimated", "source": "result",
                                 "bound": "exact", "request_ids": ids, **fields})


def test_every_steps_request_ids_settle_the_whole_charge() -> None:
    one = _step(["r1", "r2"], session_id="s1", refused=[{"request_id": "x1", "status": 429, "type": "rate_limit"}])
    two = _step(["r3", "r4"], session_id="s2")
    total = sum_usage([one, two])
    extra = total.model_extra or {}
    assert extra["request_ids"] == ["r1", "r2", "r3", "r4"] and extra["session_ids"] == ["s1", "s2"]
    assert extra["refused"] == [{"request_id": "x1", "status": 429, "type": "rate_limit"}]
    assert (total.input_tokens, total.output_tokens, extra["cache_read_tokens"]) == (200, 20, 10)
    assert total.cost_usd == pytest.approx(0.004) and total.bound == "exact" and total.cost_basis == "estimated"
    row = AttemptRow("a", "a", "t", "c", "a", 1, 1, "acc", "local", "e", False, 1.0, "finished", 2.0, True, 1.0,
                     cost_usd=0.004)
    export = UsageExport("csv", tuple(Charge((r,), 0.001) for r in ("r1", "r2", "r3", "r4")))
    out, unclaimed, _ = reconcile([row], {"a": AttemptSummary(usage=total)}, export)
    assert out["a"].status == "settled" and out["a"].settled_usd == pytest.approx(0.004) and unclaimed == 0


def test_one_steps_unknown_or_lower_bound_usage_is_the_attempts() -> None:
    cut = _step(["r3"], bound="lower_bound", stopped_in_turn=True)
    total = sum_usage([_step(["r1"]), cut])
    assert total.bound == "lower_bound" and (total.model_extra or {})["stopped_in_turn"] is True
    unknown = Usage.model_validate({"input_tokens": None, "output_tokens": None, "source": "unknown",
                                    "request_ids": ["r9"]})
    total = sum_usage([_step(["r1"]), unknown])
    assert not total.known and total.input_tokens is None and total.cost_usd is None and total.bound is None
    assert (total.model_extra or {})["request_ids"] == ["r1", "r9"]
    # tokens with no cost (a model with no price) in one step: the attempt's cost is unknown, not the rest's
    priceless = Usage.model_validate({"input_tokens": 50, "output_tokens": 5, "request_ids": ["r5"]})
    total = sum_usage([_step(["r1"]), priceless])
    assert total.cost_usd is None and total.input_tokens == 150
