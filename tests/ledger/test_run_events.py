"""The run-event log: every kind the package writes is one model of the RunEvent union, rows
as the dict-writing code stored them read as typed events, a row this version cannot type
comes back as an UnknownEvent (never a crash), writing validates, and the append is the
notification."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

import ray_bench
from ray_bench.evidence.circuit import circuit_scopes, open_scopes_from
from ray_bench.ledger import Ledger
from ray_bench.ledger import events as ev
from ray_bench.metrics.lasting import ledger_totals

#: Rows exactly as the driver wrote them while events were dicts (before this module typed them).
OLD_ROWS: list[tuple[str, dict[str, object]]] = [
    ("hypothesis", {"text": "pinned the image"}),
    ("run_started", {"identity": "sha256:p", "resumed_stale": 1, "deadline": None,
                     "counts": {"pending": 3, "running": 0, "valid": 1, "failed": 0},
                     "options": {"parallel": None, "runners_per_node": 4, "address": "local", "artifacts": "auto",
                                 "backend_pools": {"docker": None}, "plan_parallel_cap": 8,
                                 "effective_concurrency": 4}}),
    ("heartbeat", {"pid": 42, "inflight": 2}),
    ("drift", {"kind": "task", "name": "hello-world", "path": "tasks/hello-world", "detail": "tests/test.sh"}),
    ("circuit_open", {"scope": "backend:docker", "fingerprint": "fp1", "class": "stack", "message": "boom"}),
    ("quota", {"backend": "daytona", "running": 3, "limit": 3, "message": "quota"}),
    ("node_check", {"nodes": [{"node_id": "n1", "address": "10.0.0.1", "problems": ["no key"], "ok": False}],
                    "summary": "1 of 2 nodes failed"}),
    ("node_halt", {"kind": "resource-halt", "run_id": "r", "reason": "memory low", "available_mb": 100,
                   "reserve_mb": 512, "at": "2026-12-01T00:00:00Z", "containers": [], "node": "n2",
                   "address": "10.0.0.2", "free_disk_mb": 9000, "disk_reserve_mb": 1024}),
    ("paused", {"requested_at": 5.0, "now": False, "reason": "lunch", "resume_action": "ray-bench execute"}),
    ("stop", {"reason": "signal", "signal": "SIGTERM", "detail": "SIGTERM received"}),
    ("stop", {"reason": "preflight", "detail": "preflight gate failed", "cells": ["c1"]}),
    ("audit", {"removed": 2, "residue": 0}),
    ("run_finished", {"run_id": "r", "exit_code": 1, "counts": {"valid": 1}, "stopped": "signal",
                      "detail": "SIGTERM received", "stale_recovered": 1, "attempts_run": 3, "wall_sec": 1.5}),
    ("resumed", {"after": "pause"}),
    ("halt_cleared", {"archived": "halts/1.json", "reason": "freed memory"}),
]


def _raw_ledger(tmp_path: Path, rows: list[tuple[str, dict[str, object]]]) -> Ledger:
    """A ledger whose events table holds ``rows`` byte for byte (no model on the way in)."""
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    with ledger._conn:
        for i, (kind, data) in enumerate(rows):
            ledger._conn.execute("INSERT INTO events (ts, kind, attempt_id, cell_id, data) VALUES (?,?,?,?,?)",
                                 (float(i), kind, None, None, json.dumps(data)))
    return ledger


def test_every_kind_the_package_writes_is_in_the_union() -> None:
    """A kind written through the old ``ledger.event("kind", ...)`` API must have its model: add
    it to ray_bench.ledger.events.RunEvent (the one list)."""
    root = Path(ray_bench.__file__).parent
    written = {m for p in root.rglob("*.py") for m in re.findall(r'\.event\(\s*"([a-z_]+)"', p.read_text())}
    assert "halt_cleared" in written  # the scan sees a call split over lines
    assert not written - set(ev.KINDS), f"kinds without a model: {sorted(written - set(ev.KINDS))}"
    assert len(ev.KINDS) >= 23


def test_rows_as_the_dict_writers_stored_them_read_as_typed_events(tmp_path: Path) -> None:
    ledger = _raw_ledger(tmp_path, OLD_ROWS)
    try:
        events = ledger.events()
    finally:
        ledger.close()
    typed = [e.event for e in events]
    assert not [e for e in typed if isinstance(e, ev.UnknownEvent)]
    assert [e.kind for e in typed] == [k for k, _ in OLD_ROWS]
    started = typed[1]
    assert isinstance(started, ev.RunStarted) and started.options is not None
    assert started.options.effective_concurrency == 4 and started.options.parallel is None
    drift, circuit, halt = typed[3], typed[4], typed[7]
    assert isinstance(drift, ev.DriftSeen) and drift.input == "task"
    assert isinstance(circuit, ev.CircuitOpen) and circuit.failure_class == "stack"
    assert isinstance(halt, ev.NodeHalt) and halt.node == "n2" and halt.reason == "memory low"
    stop, finished = typed[9], typed[12]
    assert isinstance(stop, ev.Stop) and stop.reason is ev.StopReason.SIGNAL and stop.signal == "SIGTERM"
    assert isinstance(finished, ev.RunFinished) and finished.stopped is ev.StopReason.SIGNAL
    # and a typed event stores what the dict writer stored (the same keys, the same values)
    for (_, data), event in zip(OLD_ROWS, typed, strict=True):
        if not isinstance(event, ev.NodeHalt):  # its halt's own constant "kind" tag is not kept
            assert event.to_json() == json.loads(json.dumps(data)), event.kind


def test_a_row_from_before_a_field_takes_its_default_and_unknown_stays_unknown(tmp_path: Path) -> None:
    ledger = _raw_ledger(tmp_path, [
        ("run_started", {"identity": "sha256:p", "counts": {"pending": 2}}),  # before options, deadline
        ("audit", {"removed": 1}),  # an audit without its residue: unknown, never 0
        ("daytona_build", {"image": "x"}),  # a kind this version does not know
        ("run_finished", {"stopped": "sabotage", "detail": "?"}),  # a stop reason it does not know
        ("stop", {"detail": "no reason"}),  # a required field missing
        ("circuit_open", {"scope": "run", "fingerprint": "fp", "class": 7, "extra": True}),  # bad, extra keys
    ])
    try:
        started, audit, build, finished, stop, circuit = (e.event for e in ledger.events())
    finally:
        ledger.close()
    assert isinstance(started, ev.RunStarted) and started.options is None and started.resumed_stale is None
    assert isinstance(audit, ev.Audit) and audit.residue is None
    assert build == ev.UnknownEvent(kind="daytona_build", data={"image": "x"})
    assert isinstance(finished, ev.UnknownEvent) and finished.data["stopped"] == "sabotage"
    assert isinstance(stop, ev.UnknownEvent)
    assert isinstance(circuit, ev.CircuitOpen) and circuit.failure_class == "" and circuit.scope == "run"
    totals = ledger_totals(tmp_path)
    assert totals.residue is None and totals.audited_at is None


def test_writing_validates_and_the_append_is_the_notification(tmp_path: Path) -> None:
    heard: list[object] = []
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    try:
        ledger.subscribe(heard.append)
        with pytest.raises(ValidationError):
            ledger.event("stop", {"reasn": "halt", "detail": "x"})  # a misspelt field
        with pytest.raises(ValidationError):
            ev.Stop(reason="halted")  # type: ignore[arg-type]  # a reason that is not a StopReason
        with pytest.raises(ValidationError):
            ev.Audit(removed=1, residu=0)  # type: ignore[call-arg]
        ledger.append(ev.Stop(reason=ev.StopReason.HALT, detail="memory"))
        ledger.event("audit", {"removed": 1, "residue": 0})  # the old API, validated into its model
        ledger.event("not_yet_typed", {"a": 1})  # a branch's new kind: stored, read back as unknown
        events = ledger.events()
    finally:
        ledger.close()
    assert heard == [ev.Stop(reason=ev.StopReason.HALT, detail="memory"), ev.Audit(removed=1, residue=0)]
    assert [e.kind for e in events] == ["stop", "audit", "not_yet_typed"]
    assert events[0].data == {"reason": "halt", "detail": "memory"}
    assert isinstance(events[2].event, ev.UnknownEvent) and events[2].event.data == {"a": 1}


def test_one_circuit_replay_rule_for_the_driver_promote_and_the_gauges(tmp_path: Path) -> None:
    def opened(scope: str, fp: str) -> tuple[str, dict[str, object]]:
        return "circuit_open", {"scope": scope, "fingerprint": fp, "class": "stack", "message": ""}

    ledger = _raw_ledger(tmp_path, [opened("run", "a"), ("hypothesis", {"text": "fixed"}),
                                    opened("backend:docker", "b"), ("heartbeat", {})])
    try:
        events = ledger.events()
    finally:
        ledger.close()
    # a hypothesis puts "run" on probation (one probe cell), it does not reopen it (#29.2) ...
    assert circuit_scopes(events) == {"run": "a", "backend:docker": "b"}
    assert open_scopes_from(events) == {"run": "a", "backend:docker": "b"}
    assert ledger_totals(tmp_path).circuits == {"run": True, "backend:docker": True}
    # ... a valid probe's circuit_reopened does, for the driver, promote and the gauges alike
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")  # the same run's ledger again
    try:
        ledger.append(ev.CircuitReopened(scope="run", via="probe", attempt_id="c-a1", hypothesis="fixed"))
        events = ledger.events()
    finally:
        ledger.close()
    assert circuit_scopes(events) == {"run": None, "backend:docker": "b"}
    assert open_scopes_from(events) == {"backend:docker": "b"}
    assert ledger_totals(tmp_path).circuits == {"run": False, "backend:docker": True}
