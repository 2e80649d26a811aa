"""Progress on the terminal while `execute` runs."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from ray_bench.evidence.classify import Verdict
from ray_bench.evidence.rows import SOLVED_AT
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.driver import RunOutcome
from ray_bench.scheduler.runstate import RunState


class ConsoleProgress:
    def __init__(self, console: Console, quiet: bool = False, every_sec: float = 5.0) -> None:
        self.console = console
        self.quiet = quiet
        self.every = every_sec
        self._last = 0.0
        self._total = 0
        self._last_note: str | None = None

    def _print(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None:
        self._total = len(state.cells)
        c = state.counts()
        msg = f"executing {plan.run_id}: {self._total} cells, capacity {plan.capacity.effective}"
        if c["valid"] or resumed:
            msg += f" (resuming: {c['valid']} valid already, {resumed} stale attempts recovered)"
        self._print(msg)

    def attempt_started(self, row: AttemptRow) -> None:
        pass

    def attempt_finished(self, row: AttemptRow, verdict: Verdict | None, summary: AttemptSummary,
                         cell_state: str) -> None:
        if verdict is None:
            self._print(f"  cancelled {row.task}/{row.arm} rep {row.rep} ({row.attempt_id})")
            return
        if verdict.valid:
            # "valid" is about the evidence, "solved" about the reward: a valid row may score 0.
            flags = f" [{', '.join(verdict.flags)}]" if verdict.flags else ""
            reward = summary.reward
            solved = "solved" if (reward or 0.0) >= SOLVED_AT else "not solved"
            self._print(f"  valid row {row.task}/{row.arm} rep {row.rep}: reward {reward} ({solved}) "
                        f"on {row.account}{flags}")
        else:
            self._print(f"  FAIL {row.task}/{row.arm} rep {row.rep}: {verdict.failure_class} "
                        f"({verdict.message[:100]}) on {row.account} -> cell {cell_state}")

    def tick(self, state: RunState, accounts: list[AccountView], note: str | None) -> None:
        now = time.monotonic()
        if note and note != self._last_note:
            self._print(f"  {note}")
        self._last_note = note
        if now - self._last < self.every:
            return
        self._last = now
        c = state.counts()
        acc = ", ".join(f"{a.name} {a.inflight}/{a.limit}{'' if a.state == 'healthy' else ' ' + a.state}"
                        for a in accounts)
        self._print(f"[{c['valid'] + c['failed']}/{self._total}] valid {c['valid']} failed {c['failed']} "
                    f"running {c['running']} pending {c['pending']} | {acc}")

    def note_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "circuit_open":
            self._print(f"  recovery circuit OPEN for {data.get('scope')}: {data.get('class')} "
                        f"({str(data.get('message', ''))[:120]})")
        elif kind == "circuit_probe":
            self._print(f"  circuit probe for {data.get('scope')}: cell {data.get('cell_id')} on hypothesis "
                        f"{data.get('hypothesis')!r}")
        elif kind == "account_probe" and data.get("verdict") != "ok":
            self._print(f"  account {data.get('account')} probe {data.get('when')}: {data.get('verdict')} "
                        f"({str(data.get('detail', ''))[:200]}); effect: {data.get('effect')}")
        elif kind == "circuit_reopened":
            self._print(f"  recovery circuit reopened for {data.get('scope')} ({data.get('via')})")
        elif kind == "stop":
            self._print(f"  stopping: {data.get('detail') or data.get('reason')}")
        elif kind in ("node_halt", "node_check"):
            self._print(f"  {kind.replace('_', ' ')}: {data.get('reason') or data.get('summary')}")

    def run_finished(self, outcome: RunOutcome) -> None:
        pass
