"""The stops a run's own books decide and a session's exit code (scheduler/stops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.launch_world import a_plan

from ray_bench.ledger import events as ev
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.scheduler.stops import Seen, exit_code, preflight_halt, session_end, spend_halt, world_stop

EXITS = [
    ("every cell valid", None, 6, 6, None, 0),
    ("cells failed", None, 5, 6, None, 1),
    ("paused by the operator", "paused", 2, 6, None, 0),
    ("drift", "drift", 6, 6, None, 1),
    ("SIGINT", "signal", 2, 6, "SIGINT", 130),
    ("a signal without a name", "signal", 2, 6, None, 143),
]


@pytest.mark.parametrize(("case", "stopped", "valid", "cells", "signal", "code"), EXITS, ids=[e[0] for e in EXITS])
def test_a_session_exits_with(case: str, stopped: str | None, valid: int, cells: int, signal: str | None,
                              code: int) -> None:
    assert exit_code(stopped, valid, cells, signal) == code


@pytest.mark.parametrize(("spent", "limit", "stops"), [(0.9, 1.0, False), (1.0, 1.0, True), (5.0, None, False)])
def test_the_runs_spend_limit_stops_it_once_reached(spent: float, limit: float | None, stops: bool) -> None:
    halt = spend_halt(SpendBook(limit, spent=spent))
    assert (halt is not None) == stops
    if halt is not None:
        assert halt.reason == "spend" and halt.detail == f"run spend ${spent:.2f} reached the run's limit $1.00"


def test_the_preflight_gate_fails_closed_and_says_when_a_resume_cannot_pass_it(tmp_path: Path) -> None:
    plan = a_plan(max_attempts=1)
    first = plan.cells[0].id
    state = RunState(plan, [])
    assert preflight_halt(state.preflight([first]), state, tmp_path) is not None  # no valid row yet
    state.cells[first].failed, state.cells[first].last_failure = True, "task"
    halt = preflight_halt(state.preflight([first]), state, tmp_path)
    assert halt is not None and halt.reason == "preflight"
    assert f"cell {first}" in halt.detail and "(last failure: task)" in halt.detail
    assert f"`ray-bench rerun {tmp_path} --failed" in halt.detail  # spent: only a new plan passes it
    state.cells[first].failed, state.cells[first].valid = False, True
    assert preflight_halt(state.preflight([first]), state, tmp_path) is None


RESUME = "ray-bench execute --plan runs/r/plan.json --confirm r"
PAUSE = {"requested_at": 1.0, "now": True, "reason": "lunch", "resume_action": "check the key"}
WORLD = [
    ("a full disk before a signal", Seen(disk_full="disk full: 0 MB free", signal="SIGTERM", pause=PAUSE),
     "disk_full", True),
    ("a signal before a pause", Seen(signal="SIGINT", pause=PAUSE), "signal", True),
    ("pause --now cancels", Seen(pause=PAUSE), "paused", True),
    ("a pause lets cells finish", Seen(pause={"resume_action": "wait"}), "paused", False),
    ("every node halted", Seen(halted=["n1 low memory", "n2 low disk"], node_count=2), "halt", False),
    ("one node of two halted", Seen(halted=["n1 low memory"], node_count=2), None, False),
    ("nothing", Seen(), None, False),
]


@pytest.mark.parametrize(("case", "seen", "reason", "cancels"), WORLD, ids=[w[0] for w in WORLD])
def test_what_the_world_says_stops_the_run_first(case: str, seen: Seen, reason: str | None, cancels: bool) -> None:
    decision = world_stop(seen, RESUME)
    assert (decision.reason if decision else None) == reason
    assert (decision.cancel_running if decision else False) == cancels
    if decision is not None:
        assert decision.event.kind == ("paused" if reason == "paused" else "stop")


def test_each_world_stop_says_how_to_go_on(tmp_path: Path) -> None:
    signal = world_stop(Seen(signal="SIGTERM"), RESUME)
    assert signal is not None and signal.detail.endswith(f"resume: {RESUME}")
    assert isinstance(signal.event, ev.Stop) and signal.event.signal == "SIGTERM"
    pause = world_stop(Seen(pause=PAUSE), RESUME)
    assert pause is not None and pause.detail == "paused by operator; first safe resume action: check the key"
    assert isinstance(pause.event, ev.Paused) and pause.event.reason == "lunch" and pause.event.now
    unreadable = world_stop(Seen(pause={}), RESUME)
    assert unreadable is not None and unreadable.detail.endswith("execute again") and not unreadable.cancel_running
    file = tmp_path / "resource-halt.json"
    halt = world_stop(Seen(halted=["n1 low memory"], node_count=1, halt_file=file), RESUME)
    assert halt is not None and halt.detail == ("resource halt: n1 low memory; running cells finish. Resume needs "
                                                f"--clear-halt {file} --clearance-reason TEXT")


def test_a_session_ends_with_its_stops_words_or_which_cells_failed_when_none_stopped_it() -> None:
    plan = a_plan()
    state = RunState(plan, [])
    assert session_end(("drift", "inputs changed"), state, None) == ("drift", 1, "inputs changed")
    assert session_end(("paused", "paused by operator"), state, None) == ("paused", 0, "paused by operator")
    assert session_end(("signal", "SIGINT received"), state, "SIGINT") == ("signal", 130, "SIGINT received")
    for cell in plan.cells:
        state.cells[cell.id].failed = True
    stopped, code, detail = session_end(None, state, None)
    assert (stopped, code) == (None, 1) and detail == state.failure_detail() and "failed" in detail
