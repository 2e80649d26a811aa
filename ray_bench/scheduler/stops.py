"""When a run stops on its own books, and what a session's end comes to, as pure decisions
(issue 30, step 3). The stops that read the world (a signal, the pause file, the nodes'
supervisors, a full disk) stay in the driver; these read only the run's state."""

from __future__ import annotations

from pathlib import Path

from ray_bench.ledger import events as ev
from ray_bench.scheduler.launch import Halt
from ray_bench.scheduler.runstate import PreflightGate, RunState
from ray_bench.scheduler.signals import exit_code_of
from ray_bench.scheduler.spend import SpendBook


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


def exit_code(stopped: str | None, valid: int, cells: int, signal: str | None) -> int:
    """0 when every cell has a valid row, or on an operator's pause (what they asked for: the
    final line says "paused"); a signal's own code; 1 otherwise."""
    if stopped == ev.StopReason.SIGNAL:
        return exit_code_of(signal or "SIGTERM")
    return 0 if stopped == ev.StopReason.PAUSED or (stopped is None and valid == cells) else 1
