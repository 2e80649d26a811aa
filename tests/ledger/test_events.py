"""Typed event payloads: what the first ledgers stored (plain dicts) reads with the models, a
typed payload is written with the same keys, and a payload of another kind is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_bench.ledger import Ledger
from ray_bench.ledger.events import ExclusionData, InclusionData, PromotionData

#: As `ray-bench exclude` and `promote` wrote them before the models existed.
OLD_EXCLUSION = {"task": "hello-world", "arm": "mcp", "rep": 1, "reason": "MCP server down", "by": "ana"}
OLD_PROMOTION = {"by": "ana", "reason": "all pairs valid", "family": ["r1", "r1-rerun-1"],
                 "gates": [["pairs", True, "4/4"], ["circuit", True, "none open"]],
                 "max_invalid_rate": 0.25, "require_settlement": False, "identity": "sha256:p"}


def test_old_payloads_read_and_typed_ones_write_the_same_keys(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    try:
        ledger.event("exclusion", OLD_EXCLUSION, cell_id="c1", now=1.0)
        ledger.event("exclusion", ExclusionData.read(OLD_EXCLUSION), cell_id="c2", now=2.0)
        ledger.event("promotion", PromotionData.read(OLD_PROMOTION), now=3.0)
        with pytest.raises(ValueError, match="not a 'exclusion' event"):
            ledger.event("exclusion", InclusionData(reason="x"), cell_id="c1")
        events = ledger.events()
    finally:
        ledger.close()
    old, typed, promotion = events
    assert old.data == typed.data == OLD_EXCLUSION
    assert ExclusionData.read(old.data).rep == 1 and ExclusionData.read(old.data).by == "ana"
    assert promotion.data == json.loads(json.dumps(OLD_PROMOTION))
    assert PromotionData.read(promotion.data).gates[0] == ("pairs", True, "4/4")


def test_a_field_an_old_writer_got_wrong_takes_its_default() -> None:
    read = ExclusionData.read({**OLD_EXCLUSION, "rep": "first", "extra": 1})
    assert read.rep == 0 and read.reason == "MCP server down"
    assert PromotionData.read({}).family == []
