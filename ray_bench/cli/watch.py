"""`ray-bench status runs/ID --watch`: a live view rebuilt from the ledger every few seconds.

Everything it shows comes from :func:`ray_bench.status.read.read_status` (the same state,
counts and pace as `status` and the exporter). On a terminal it redraws in place; when
stdout is a pipe or a file it writes one plain line per change, so `watch ... | tee log`
and CI logs get something to read."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ray_bench.ledger.store import Ledger
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths
from ray_bench.status.read import RunStatus, read_status
from ray_bench.status.text import headline, pace_line, status_lines


@dataclass(frozen=True)
class WatchView:
    status: RunStatus
    #: account -> (in flight, configured max concurrent)
    accounts: dict[str, tuple[int, int]]
    #: (task, arm, rep, class, account) of the last failed attempts
    recent_failures: list[tuple[str, str, int, str | None, str]]


def snapshot(run_root: Path, now: float | None = None) -> WatchView:
    status = read_status(run_root, now)
    plan, _ = load_plan_file(RunPaths(run_root).plan)
    attempts = []
    if RunPaths(run_root).ledger.exists():
        ledger = Ledger.open_readonly(run_root)
        try:
            attempts = ledger.attempts()
        finally:
            ledger.close()
    live = status.state == "running"
    inflight = Counter(a.account for a in attempts if not a.terminal) if live else Counter[str]()
    failures = [a for a in attempts if a.status == "finished" and not a.valid][-5:]
    return WatchView(status, {a.name: (inflight.get(a.name, 0), a.limits.max_concurrent) for a in plan.accounts},
                     [(a.task, a.arm, a.rep, a.failure_class, a.account) for a in failures])


def plain_line(view: WatchView) -> str:
    """One line per refresh when stdout is not a terminal."""
    s = view.status
    parts = [time.strftime("%H:%M:%S"), headline(s)]
    if s.pace is not None and s.state == "running":
        parts.append(pace_line(s.pace))
    if s.reason:
        parts.append(s.reason)
    return " | ".join(parts)


def render(view: WatchView) -> Any:
    s = view.status
    done = s.counts["valid"] + s.counts["failed"]
    lines = status_lines(s)
    accounts = Table(title="accounts", show_edge=False)
    for col in ("account", "in flight", "max concurrent"):
        accounts.add_column(col)
    for name, (inflight, limit) in view.accounts.items():
        accounts.add_row(name, str(inflight), str(limit))
    parts: list[Any] = [Text(lines[0]), ProgressBar(total=max(1, s.cells), completed=done),
                        *(Text(line) for line in lines[1:]), accounts]
    if view.recent_failures:
        failures = Table(title="recent failed attempts", show_edge=False)
        for col in ("task", "arm", "rep", "class", "account"):
            failures.add_column(col)
        for row in view.recent_failures:
            failures.add_row(*(str(x) for x in row))
        parts.append(failures)
    return Group(*parts)


def watch_run(run_root: Path, *, every: float = 2.0, iterations: int | None = None,
              stream: TextIO | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
    """Until the run is no longer running (or ``iterations`` refreshes)."""
    stream = sys.stdout if stream is None else stream
    if not stream.isatty():
        _watch_plain(run_root, every, iterations, stream, sleep)
        return
    count = 0
    with Live(render(snapshot(run_root)), refresh_per_second=4) as live:
        while iterations is None or count < iterations:
            view = snapshot(run_root)
            live.update(render(view))
            count += 1
            if view.status.state != "running" and iterations is None:
                break
            sleep(every)


def _watch_plain(run_root: Path, every: float, iterations: int | None, stream: TextIO,
                 sleep: Callable[[float], None]) -> None:
    last = ""
    count = 0
    while iterations is None or count < iterations:
        view = snapshot(run_root)
        line = plain_line(view)
        if line.split(" | ", 1)[1] != last:  # the time alone changing is not news
            stream.write(line + "\n")
            stream.flush()
            last = line.split(" | ", 1)[1]
        count += 1
        if view.status.state != "running" and iterations is None:
            for extra in status_lines(view.status)[1:]:
                stream.write(extra + "\n")
            stream.flush()
            return
        sleep(every)
