"""`ray-bench status runs/ID --watch`: a live view rebuilt from the ledger every few seconds.

Everything it shows comes from :func:`ray_bench.status.read.read_status` (the same state,
counts and pace as `status` and the exporter) and the accounts' durable state under the state
root. On a terminal it redraws in place; when stdout is a pipe or a file it writes the lines
:func:`ray_bench.status.watchlines.changed_lines` gives (what changed, once), so
`watch ... | tee log` and CI logs get something to read. A run a driver may be about to take
up (planned, or paused or stopped with a resume to run) is waited for (one line), as long as
:data:`~ray_bench.status.watchlines.START_TIMEOUT_SEC`."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ray_bench.ledger.store import Ledger
from ray_bench.runroot import RunPaths
from ray_bench.status.read import read_status
from ray_bench.status.text import status_lines
from ray_bench.status.watchlines import (
    START_TIMEOUT_SEC,
    AccountMark,
    WatchView,
    awaits_start,
    changed_lines,
    end_lines,
    left_before_start,
    never_started,
    waiting_line,
)


def snapshot(run_root: Path, now: float | None = None, *, state_root: Path | None = None) -> WatchView:
    now = time.time() if now is None else now
    status = read_status(run_root, now, accounts=True, state_root=state_root)
    attempts = []
    if RunPaths(run_root).ledger.exists():
        attempts = Ledger.read_attempts(run_root)
    live = status.state == "running"
    inflight = Counter(a.account for a in attempts if not a.terminal) if live else Counter[str]()
    failures = [a for a in attempts if a.status == "finished" and not a.valid][-5:]
    accounts = status.accounts or []
    return WatchView(now, status, {a.name: (inflight.get(a.name, 0), a.limit) for a in accounts},
                     tuple(AccountMark.of(a) for a in accounts),
                     [(a.task, a.arm, a.rep, a.failure_class, a.account) for a in failures])


def render(view: WatchView) -> Any:
    s = view.status
    done = s.counts["valid"] + s.counts["failed"]
    lines = [line for line in status_lines(s) if not line.startswith("account ")]
    accounts = Table(title="accounts", show_edge=False)
    for col in ("account", "state", "in flight", "max concurrent"):
        accounts.add_column(col)
    for mark in view.marks:
        inflight, limit = view.accounts.get(mark.name, (0, 0))
        accounts.add_row(mark.name, mark.words().removeprefix(f"account {mark.name} "), str(inflight), str(limit))
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
              stream: TextIO | None = None, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.time, start_timeout: float = START_TIMEOUT_SEC,
              state_root: Path | None = None) -> int:
    """Until the run is no longer running (or ``iterations`` refreshes); the exit code (1: its
    driver left before the run began). A run not taken up yet is waited for up to ``start_timeout``
    seconds; :class:`~ray_bench.errors.UserInputError` if it does not start by then."""
    stream = sys.stdout if stream is None else stream

    def read() -> WatchView:
        return snapshot(run_root, clock(), state_root=state_root)

    view = read()
    if awaits_start(view.status):
        _say(stream, [waiting_line(view.status, view.at, start_timeout)])
        give_up = view.at + start_timeout
        while awaits_start(view.status):
            if view.at >= give_up:
                raise never_started(view.status, start_timeout)
            sleep(every)
            view = read()
    if not stream.isatty():
        return _watch_plain(view, read, every, iterations, stream, sleep)
    count = 0
    with Live(render(view), refresh_per_second=4) as live:
        while iterations is None or count < iterations:
            live.update(render(view))
            count += 1
            if view.status.state != "running" and iterations is None:
                break
            sleep(every)
            view = read()
    return 1 if view.status.state == "planned" else 0


def _watch_plain(view: WatchView, read: Callable[[], WatchView], every: float, iterations: int | None,
                 stream: TextIO, sleep: Callable[[float], None]) -> int:
    before: WatchView | None = None
    count = 0
    while True:
        if before is not None and view.status.state == "planned":  # the driver let the lock go unbegun
            _say(stream, [left_before_start(view.status)])
            return 1
        _say(stream, changed_lines(before, view))
        before = view
        count += 1
        if view.status.state != "running":
            _say(stream, end_lines(view))
            return 0
        if iterations is not None and count >= iterations:
            return 0
        sleep(every)
        view = read()


def _say(stream: TextIO, lines: list[str]) -> None:
    for line in lines:
        stream.write(line + "\n")
    stream.flush()
