"""What the driver tells the outside world (the terminal, the metrics exporter): one stream of
events. The ledger's events (:data:`~ray_bench.ledger.events.RunEvent`) reach an observer as
they are appended (:meth:`Ledger.subscribe`); the three below are the loop's live facts, which
the ledger keeps as attempt rows (or not at all, a tick) and which carry in-process objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.events import RunEvent
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.scheduler.admission import AccountView


@dataclass(frozen=True)
class AttemptStarted:
    row: AttemptRow


@dataclass(frozen=True)
class AttemptFinished:
    """``verdict`` None: cancelled, or the host's disk was full (judged by no one, the cell runs
    again); ``cell_state`` after it; ``status`` and ``failure_class``: its terminal record's (a
    full disk is ``finished``, ``stack``: ray_bench.scheduler.finish)."""

    row: AttemptRow
    verdict: Verdict | None
    summary: AttemptSummary
    cell_state: str
    status: str = "finished"
    failure_class: str | None = None

    @property
    def outcome(self) -> tuple[str, str | None]:
        """``valid``, ``failed`` or ``cancelled``, and the failure class: what the progress line
        and the metrics label the attempt (a full disk failed, ``stack``; never valid, never
        cancelled)."""
        if self.verdict is not None:
            return ("valid", None) if self.verdict.valid else ("failed", self.verdict.failure_class)
        if self.status == "cancelled":
            return "cancelled", None
        return "failed", self.failure_class


class CellCounts(Protocol):
    def counts(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Tick:
    """One turn of the loop: the run state, the accounts, what the loop waits for."""

    state: CellCounts  # the run state (ray_bench.scheduler.runstate.RunState)
    accounts: list[AccountView]
    note: str | None

    @property
    def counts(self) -> dict[str, int]:
        # Counted when an observer asks, not per turn: O(cells), and the fuzz's counted-lines
        # guard (tests/sim/test_driven_scale.py) sees a per-turn count grow with cells in flight.
        return self.state.counts()


@dataclass(frozen=True)
class BuildProgress:
    """A line of the build phase before the fan-out (ray_bench.scheduler.builds)."""

    line: str


LiveEvent = AttemptStarted | AttemptFinished | Tick | BuildProgress
Observed = RunEvent | LiveEvent


class RunObserver(Protocol):
    def on_event(self, event: Observed) -> None: ...


class NullObserver:
    def on_event(self, event: Observed) -> None:
        pass


class Observers:
    """Several observers as one (terminal progress and metrics, say)."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = observers

    def on_event(self, event: Observed) -> None:
        for o in self.observers:
            o.on_event(event)
