"""What ``status --watch`` says, as a pure function of what it saw before and what it sees now.

One view is what one refresh read (the run's status, its accounts' durable state, the attempts
in flight); :func:`changed_lines` gives the lines that say what changed between two views (issue
56: a researcher's watch printed each progress line 2-4 times, as the pace's "in 3 min" moved,
and no account's state): the progress line once per change of the counts or the state, each
new note once, each account's state (healthy / cooling until 18:03:10 (rate_limited) /
disabled (auth) / held (operator)) when it changes, never a countdown.

A run that is planned but not begun yet, or paused or stopped with a resume to run
(``execute`` verifies the plan, then takes the lock, then starts Ray, then writes the ledger),
is waited for: :func:`awaits_start` says so,
:func:`waiting_line` says it once, :func:`never_started` says why the watch gave up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ray_bench.accounts.health import reason_class
from ray_bench.clock import human_span
from ray_bench.errors import UserInputError
from ray_bench.status.read import RunStatus
from ray_bench.status.text import headline, pace_line, status_lines

if TYPE_CHECKING:
    from ray_bench.accounts.status import AccountStatus

#: How long a watch waits for a planned run's driver (Ray's start on a loaded host takes
#: minutes: ray_bench.onray.start), before it exits 2.
START_TIMEOUT_SEC = 300.0


@dataclass(frozen=True)
class AccountMark:
    """One account's state as the watch shows it: what it is and until when, and why, as a
    class (:func:`ray_bench.accounts.health.reason_class`, the exporter's reason label)."""

    name: str
    state: str
    #: When a cooling account admits again, to the whole second (what the line shows).
    until: int | None
    reason: str

    @classmethod
    def of(cls, account: AccountStatus) -> AccountMark:
        until = round(account.cooling_until) if account.state == "cooling" and account.cooling_until else None
        reason = reason_class(account.state, account.last_error) if account.state != "healthy" else ""
        return cls(account.name, account.state + (" (enable pending)" if account.enable_pending else ""),
                   until, reason)

    def words(self) -> str:
        """``account a cooling until 18:03:10 (rate_limited)``; ``account b healthy``."""
        what = self.state if self.until is None else f"cooling until {_clock(self.until)}"
        return f"account {self.name} {what}" + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True)
class WatchView:
    """What one refresh of the watch read."""

    at: float
    status: RunStatus
    #: account -> (in flight, max concurrent)
    accounts: dict[str, tuple[int, int]]
    marks: tuple[AccountMark, ...]
    #: (task, arm, rep, class, account) of the last failed attempts
    recent_failures: list[tuple[str, str, int, str | None, str]]


def progress_line(status: RunStatus) -> str:
    """The run's counts, with the pace while it runs (why it ended is in :func:`end_lines`)."""
    if status.pace is not None and status.state == "running":
        return f"{headline(status)} | {pace_line(status.pace)}"
    return headline(status)


def changed_lines(before: WatchView | None, now: WatchView) -> list[str]:
    """The lines that say what changed from ``before`` (``None``: the first view, all of it)."""
    stamp = _clock(now.at)
    lines = []
    if before is None or headline(before.status) != headline(now.status):
        lines.append(progress_line(now.status))
    seen = set(before.status.notes) if before is not None else set()
    lines += [note for note in now.status.notes if note not in seen]
    marks = {m.name: m for m in before.marks} if before is not None else {}
    lines += [m.words() for m in now.marks if marks.get(m.name) != m]
    return [f"{stamp} | {line}" for line in lines]


def end_lines(view: WatchView) -> list[str]:
    """What the watch says when the run is no longer running: why, spend, the next command."""
    return [line for line in status_lines(view.status)[1:] if not line.startswith("account ")]


def awaits_start(status: RunStatus) -> bool:
    """A run a driver may be about to take up: planned, or paused or stopped with a resume to
    run (``execute`` verifies the plan and its inputs, seconds to minutes, before it takes the
    lock; until then the run reads as it was)."""
    return status.state == "planned" or (status.state in ("paused", "stopped") and _resumes(status))


def _resumes(status: RunStatus) -> bool:
    return status.next_action is not None and status.next_action.startswith("ray-bench execute ")


def waiting_line(status: RunStatus, at: float, timeout: float) -> str:
    what = "start" if status.state == "planned" else "resume"
    return (f"{_clock(at)} | waiting for run {status.run_id} to {what} ({status.state}, no driver holds its lock "
            f"yet); gives up at {_clock(at + timeout)}")


def never_started(status: RunStatus, timeout: float) -> UserInputError:
    """The one line a watch exits 2 with when the run it waited for did not start."""
    what = "start" if status.state == "planned" else "resume"
    fix = (f"{what} it with `{status.next_action}`" if status.next_action else
           f"`ray-bench status {status.run_root}` says what it needs")
    return UserInputError(f"run {status.run_id} did not {what} within {human_span(timeout)} (still {status.state})",
                          where=str(status.run_root), fix=fix)


def left_before_start(status: RunStatus) -> str:
    """A driver that held the lock and let it go before its loop wrote the ledger."""
    return (f"run {status.run_id}: its driver exited before the run began (Ray or the node check "
            "failed?): execute's output says why")


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))
