"""Progress on the terminal while `execute` runs."""

from __future__ import annotations

import time

from rich.console import Console

from ray_bench.evidence.rows import SOLVED_AT
from ray_bench.ledger import events as ev
from ray_bench.scheduler.launch import waiting_subject
from ray_bench.scheduler.observers import AttemptFinished, BuildProgress, Observed, Tick


class ConsoleProgress:
    def __init__(self, console: Console, quiet: bool = False, every_sec: float = 5.0) -> None:
        self.console = console
        self.quiet = quiet
        self.every = every_sec
        self._last = 0.0
        self._total = 0
        self._last_note: str | None = None
        self._last_line = ""

    def _print(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False)

    def on_event(self, event: Observed) -> None:
        match event:
            case ev.RunStarted():
                self._run_started(event)
            case AttemptFinished():
                self._attempt_finished(event)
            case Tick():
                self._tick(event)
            case BuildProgress():  # the build phase before the fan-out
                self._print(f"  {event.line}")
            case ev.CircuitOpen():
                self._print(f"  recovery circuit OPEN for {event.scope}: {event.failure_class} "
                            f"({event.message[:120]})")
            case ev.CircuitProbe():
                self._print(f"  circuit probe for {event.scope}: cell {event.cell_id} on hypothesis "
                            f"{event.hypothesis!r}")
            case ev.CircuitReopened():
                self._print(f"  recovery circuit reopened for {event.scope} ({event.via})")
            case ev.AccountProbe() if event.verdict != "ok":
                self._print(f"  account {event.account} probe {event.when}: {event.verdict} "
                            f"({event.detail[:200]}); effect: {event.effect}")
            case ev.Stop(reason=ev.StopReason.HALT):
                self._print(f"  stopping: {event.detail or event.reason}")
            case ev.NodeLost():
                self._print(f"  node lost while {event.while_}: {event.node} (not residue)")
            case ev.NodeHalt():
                self._print(f"  node halt: {event.reason}")
            case ev.NodeCheck() if not event.all_ok:
                self._print(f"  node check: {event.summary}")

    def _run_started(self, event: ev.RunStarted) -> None:
        c, resumed = event.counts, event.resumed_stale or 0
        self._total = sum(c.values())
        capacity = event.options.effective_concurrency if event.options else None
        msg = f"executing {event.run_id}: {self._total} cells, capacity {capacity}"
        if c.get("valid") or resumed:
            msg += f" (resuming: {c.get('valid', 0)} valid already, {resumed} stale attempts recovered)"
        self._print(msg)

    def _attempt_finished(self, event: AttemptFinished) -> None:
        row, verdict = event.row, event.verdict
        outcome, failure_class = event.outcome
        if outcome == "cancelled":
            self._print(f"  cancelled {row.task}/{row.arm} rep {row.rep} ({row.attempt_id})")
            return
        if verdict is not None and verdict.valid:
            # "valid" is about the evidence, "solved" about the reward: a valid row may score 0.
            flags = f" [{', '.join(verdict.flags)}]" if verdict.flags else ""
            reward = event.summary.reward
            solved = "solved" if (reward or 0.0) >= SOLVED_AT else "not solved"
            self._print(f"  valid row {row.task}/{row.arm} rep {row.rep}: reward {reward} ({solved}) "
                        f"on {row.account}{flags}")
        else:  # verdict None: judged by no one, the host's full disk (the cell runs again on resume)
            error = event.summary.error.message if event.summary.error is not None else ""
            message = verdict.message if verdict is not None else error
            self._print(f"  FAIL {row.task}/{row.arm} rep {row.rep}: {failure_class} "
                        f"({message[:100]}) on {row.account} -> cell {event.cell_state}")

    def _tick(self, event: Tick) -> None:
        """A wait once (not its countdown each turn), the counts at most every ``every`` seconds
        and only when they or an account's load or state changed."""
        now, note = time.monotonic(), event.note
        subject = waiting_subject(note) if note else None
        if note and subject != self._last_note:
            self._print(f"  {note}")
        self._last_note = subject
        if now - self._last < self.every:
            return
        c = event.counts
        acc = ", ".join(f"{a.name} {a.inflight}/{a.limit}{'' if a.state == 'healthy' else ' ' + a.state}"
                        for a in event.accounts)
        line = (f"[{c['valid'] + c['failed']}/{self._total}] valid {c['valid']} failed {c['failed']} "
                f"running {c['running']} pending {c['pending']} | {acc}")
        if line != self._last_line:
            self._last = now
            self._last_line = line
            self._print(line)
