"""Console progress is a fold over the run's events: the ledger's typed events and the loop's
live ones reach it through one ``on_event``."""

from __future__ import annotations

import io

from rich.console import Console

from ray_bench.cli.progress import ConsoleProgress
from ray_bench.ledger import events as ev
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.launch import waiting_note
from ray_bench.scheduler.observers import Observers, Tick


class Counts:
    def counts(self) -> dict[str, int]:
        return {"pending": 2, "running": 1, "valid": 1, "failed": 0}


def test_console_progress_prints_what_the_events_say() -> None:
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, width=200), every_sec=0.0)
    fanout = Observers(progress)
    fanout.on_event(ev.RunStarted(run_id="pilot", resumed_stale=2,
                                  counts={"pending": 3, "running": 0, "valid": 1, "failed": 0},
                                  options=ev.RunOptionsRecord(effective_concurrency=4)))
    fanout.on_event(ev.CircuitOpen(scope="backend:docker", fingerprint="fp", failure_class="stack", message="boom"))
    fanout.on_event(ev.Stop(reason=ev.StopReason.SPEND, detail="spend reached"))  # the final line says it
    fanout.on_event(ev.Stop(reason=ev.StopReason.HALT, detail="resource halt: memory"))
    fanout.on_event(ev.NodeCheck(nodes=[{"ok": True}], summary="all nodes fine"))  # nothing to say
    fanout.on_event(ev.NodeCheck(nodes=[{"ok": True}, {"ok": False}], summary="1 of 2 nodes failed"))
    fanout.on_event(ev.Heartbeat(pid=1, inflight=0))
    fanout.on_event(Tick(Counts(), [], "waiting: cooling"))
    lines = out.getvalue().splitlines()
    assert lines == [
        "executing pilot: 4 cells, capacity 4 (resuming: 1 valid already, 2 stale attempts recovered)",
        "  recovery circuit OPEN for backend:docker: stack (boom)",
        "  stopping: resource halt: memory",
        "  node check: 1 of 2 nodes failed",
        "  waiting: cooling",
        "[1/4] valid 1 failed 0 running 1 pending 2 | ",
    ]


def test_a_wait_is_said_once_not_counted_down_and_unchanged_counts_once() -> None:
    """Issue 56: a cooling account printed a countdown line every second (118 lines in 2 minutes),
    and the same counts were printed again every five seconds."""
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, width=200), every_sec=0.0)
    cooling = [AccountView("a", "cooling", 0, 3, cooldown_left=float(s)) for s in range(118, 0, -1)]
    for view in cooling:
        progress.on_event(Tick(Counts(), [view], waiting_note("every account is cooling", view.cooldown_left)))
    progress.on_event(Tick(Counts(), [AccountView("a", "healthy", 1, 3)], None))
    progress.on_event(Tick(Counts(), [AccountView("a", "cooling", 0, 3)],
                           waiting_note("every account is cooling", 60)))  # a new episode: said again
    assert out.getvalue().splitlines() == [
        "  waiting: every account is cooling (next in 118 s)",
        "[1/0] valid 1 failed 0 running 1 pending 2 | a 0/3 cooling",
        "[1/0] valid 1 failed 0 running 1 pending 2 | a 1/3",
        "  waiting: every account is cooling (next in 1 min)",
        "[1/0] valid 1 failed 0 running 1 pending 2 | a 0/3 cooling",
    ]
