"""When a run stops, and what a session's end comes to, as pure decisions (issue 30, step 3).

The driver reads the world once a round (a full disk it met, a signal, the pause file, the
nodes' supervisors, which :class:`~ray_bench.scheduler.runcore.RunCore` says when to ask) into
:class:`Seen`; :func:`world_stop` decides which of those stops the run, with what words and
whether the running cells are cancelled; the driver then only appends the event and cancels, as
the core commands. The stops on the run's own books (spend, preflight) read only its state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_bench.ledger import events as ev
from ray_bench.scheduler.launch import Halt
from ray_bench.scheduler.runstate import PreflightGate, RunState
from ray_bench.scheduler.signals import exit_code_of
from ray_bench.scheduler.spend import SpendBook


@dataclass(frozen=True)
class Seen:
    """What the driver read from the world this round. ``pause``: the pause file's request
    (``{}`` when unreadable), None when there is no pause file; ``halted``: the nodes under their
    reserve (their reasons), of ``node_count``; ``halt_file``: where the run's halt is written."""

    disk_full: str | None = None
    signal: str | None = None
    pause: Mapping[str, Any] | None = None
    halted: Sequence[str] = ()
    node_count: int = 0
    halt_file: Path | None = None


@dataclass(frozen=True)
class StopNow:
    """The run stops launching: ``event`` goes in the ledger; ``cancel_running``: the running
    cells are cancelled (their sandboxes deleted) rather than left to finish."""

    reason: ev.StopReason
    detail: str
    event: ev.Stop | ev.Paused
    cancel_running: bool


def world_stop(seen: Seen, resume_command: str) -> StopNow | None:
    """The first of: a full disk (nothing more can be written: cancel), a signal (as ``pause
    --now``: cancel; ``resume_command`` says how to go on), the operator's pause (cancel only when
    it says ``now``), every node under its reserve (running cells finish); else None."""
    if seen.disk_full is not None:
        return StopNow(ev.StopReason.DISK_FULL, seen.disk_full,
                       ev.Stop(reason=ev.StopReason.DISK_FULL, detail=seen.disk_full), True)
    if seen.signal is not None:
        detail = f"{seen.signal} received; running cells cancelled; resume: {resume_command}"
        return StopNow(ev.StopReason.SIGNAL, detail,
                       ev.Stop(reason=ev.StopReason.SIGNAL, signal=seen.signal, detail=detail), True)
    if seen.pause is not None:
        request = dict(seen.pause)
        detail = f"paused by operator; first safe resume action: {request.get('resume_action', 'execute again')}"
        return StopNow(ev.StopReason.PAUSED, detail, ev.Paused.read(request), bool(request.get("now")))
    if seen.halted and len(seen.halted) >= seen.node_count:
        detail = f"resource halt: {'; '.join(seen.halted)}; running cells finish."
        if seen.halt_file is not None:
            detail += f" Resume needs --clear-halt {seen.halt_file} --clearance-reason TEXT"
        return StopNow(ev.StopReason.HALT, detail, ev.Stop(reason=ev.StopReason.HALT, detail=detail), False)
    return None


def spend_halt(spend: SpendBook) -> Halt | None:
    """The run's own spend limit (an account's budget is the account's: the gate refuses it)."""
    limit = spend.limit_usd
    if limit is None or spend.spent < limit:
        return None
    return Halt(ev.StopReason.SPEND, f"run spend ${spend.spent:.2f} reached the run's limit ${limit:.2f}")


def preflight_halt(gate: PreflightGate, state: RunState, run_root: Path) -> Halt | None:
    """A preflight cell without a valid row fails the gate, closed; None: the gate passed."""
    if not gate.failed:
        return None
    cell = state.cells[gate.failed[0]]
    detail = (f"preflight gate failed: cell {cell.cell.id} ({cell.cell.task}, arm {cell.cell.arm}) "
              f"has no valid row (last failure: {cell.last_failure})")
    if gate.spent:
        detail += (f"; {len(gate.spent)} preflight cell{'s' if len(gate.spent) != 1 else ''} used "
                   f"every attempt, so a resume cannot pass it: `ray-bench rerun {run_root} "
                   "--failed --hypothesis TEXT` plans every cell without a valid row as a new run")
    return Halt(ev.StopReason.PREFLIGHT, detail)


def session_end(stop: tuple[str, str] | None, state: RunState, signal: str | None) -> tuple[str | None, int, str]:
    """Why the session stopped (None: it did not), its exit code (:func:`exit_code`) and its
    final words: the stop's, or, when cells failed with no stop, which and why."""
    stopped, detail = stop or (None, "")
    counts = state.counts()
    code = exit_code(stopped, counts["valid"], len(state.cells), signal)
    if stopped is None and code == 1:
        detail = state.failure_detail()
    return stopped, code, detail


def exit_code(stopped: str | None, valid: int, cells: int, signal: str | None) -> int:
    """0 when every cell has a valid row, or on an operator's pause (what they asked for: the
    final line says "paused"); a signal's own code; 1 otherwise."""
    if stopped == ev.StopReason.SIGNAL:
        return exit_code_of(signal or "SIGTERM")
    return 0 if stopped == ev.StopReason.PAUSED or (stopped is None and valid == cells) else 1
