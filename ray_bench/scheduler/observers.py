"""What the driver tells the outside world (the terminal, the metrics exporter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.runstate import RunState

if TYPE_CHECKING:
    from ray_bench.scheduler.driver import RunOutcome


class RunObserver(Protocol):
    """What the driver tells the outside world (terminal, metrics)."""

    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None: ...
    def attempt_started(self, row: AttemptRow) -> None: ...
    def attempt_finished(self, row: AttemptRow, verdict: Verdict | None, summary: AttemptSummary,
                         cell_state: str) -> None: ...
    def tick(self, state: RunState, accounts: list[AccountView], note: str | None) -> None: ...
    def note_event(self, kind: str, data: dict[str, Any]) -> None: ...
    def run_finished(self, outcome: RunOutcome) -> None: ...


class NullObserver:
    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None:
        pass

    def attempt_started(self, row: AttemptRow) -> None:
        pass

    def attempt_finished(self, row: AttemptRow, verdict: Verdict | None, summary: AttemptSummary,
                         cell_state: str) -> None:
        pass

    def tick(self, state: RunState, accounts: list[AccountView], note: str | None) -> None:
        pass

    def note_event(self, kind: str, data: dict[str, Any]) -> None:
        pass

    def run_finished(self, outcome: RunOutcome) -> None:
        pass


class Observers:
    """Several observers as one (terminal progress and metrics, say)."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = observers

    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None:
        for o in self.observers:
            o.run_started(plan, state, resumed)

    def attempt_started(self, row: AttemptRow) -> None:
        for o in self.observers:
            o.attempt_started(row)

    def attempt_finished(self, row: AttemptRow, verdict: Verdict | None, summary: AttemptSummary,
                         cell_state: str) -> None:
        for o in self.observers:
            o.attempt_finished(row, verdict, summary, cell_state)

    def tick(self, state: RunState, accounts: list[AccountView], note: str | None) -> None:
        for o in self.observers:
            o.tick(state, accounts, note)

    def note_event(self, kind: str, data: dict[str, Any]) -> None:
        for o in self.observers:
            o.note_event(kind, data)

    def run_finished(self, outcome: RunOutcome) -> None:
        for o in self.observers:
            o.run_finished(outcome)
