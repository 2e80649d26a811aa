"""A session's decisions outside its launch rounds, as pure steps (issue 30, step 3): what the
previous session left (its pause file, the attempts a dead driver left open), the circuit's
health recoveries, the account probes, the nodes' checks, the preflight gate and the final audit.

The two that come before the run's books exist (the run state is read from the ledger after
the stale attempts are marked) are functions of their event, :func:`pause_left` and
:func:`stale_end`; the others are steps of :class:`~ray_bench.scheduler.runcore.RunCore`,
built from what is here. No I/O: the driver reads the pause file, the account store, the pool
and the nodes, and executes the commands (tests/scheduler/test_session_core.py plays its part).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ray_bench.accounts.health import probe_due, probe_effect, probe_event_kind
from ray_bench.cells.nodes import NodeCheck, summary_line
from ray_bench.evidence.circuit import RecoveryCircuit, scope_account
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import STALE_CLASS, STALE_FINGERPRINT, STALE_STATUS, stale_summary
from ray_bench.models.accounts import Account
from ray_bench.scheduler import stops
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.commands import (
    ArchivePause,
    Audited,
    Command,
    EnablesRead,
    PauseFound,
    Probe,
    Probed,
    RecordEnd,
    RecordHealth,
    RunLoop,
    StaleFound,
    StopRun,
    stopping,
)
from ray_bench.scheduler.finish import Append, Record
from ray_bench.scheduler.runstate import PreflightGate, RunState


def pause_left(event: PauseFound) -> list[Command]:
    """A pause left by the previous session is archived (this session is its resume); one
    requested since this session started (Ray takes 10-20 s to start) stays, and stops the
    first round. An unreadable request, or an unknown start, is the previous session's."""
    started, requested = event.session_started, event.requested_at
    if started is not None and requested is not None and requested >= started:
        return []
    return [ArchivePause(), Append(ev.Resumed(after="pause"))]


def stale_end(event: StaleFound) -> list[Command]:
    """An attempt with no terminal record belongs to a driver that died: it is stale. Its agent
    ran for a while and its usage died with the runner: the cost is unknown (NULL), never $0, so
    the resumed run's spend charges it its cell's expected cost (:meth:`SpendBook.of`)."""
    row = event.row
    return [RecordEnd(row.attempt_id, Record(STALE_STATUS, False, None, STALE_CLASS, STALE_FINGERPRINT, False,
                                             None, None, stale_summary(row, event.removed)))]


def nodes_checked(checks: Sequence[NodeCheck] | None) -> list[Command]:
    """Every node's check is recorded; the run stops when no node passed (no runner could take a cell)."""
    if checks is None:
        return []
    line = summary_line(checks)
    recorded: list[Command] = [Append(ev.NodeCheck(nodes=[c.to_json() for c in checks], summary=line))]
    if any(c.ok for c in checks):
        return recorded
    return recorded + stopping(
        ev.StopReason.NODES, f"no node can run cells: {line}; fix the nodes (credentials, backend), then resume"
    )


def preflight_judged(gate: PreflightGate, state: RunState, preflight: Iterable[str], run_root: Path) -> list[Command]:
    """A preflight cell without a valid row fails the gate, closed; a gate passed is recorded,
    and the fan-out runs."""
    halt = stops.preflight_halt(gate, state, run_root)
    if halt is not None:
        return [
            Append(ev.Stop(reason=halt.reason, detail=halt.detail, cells=list(gate.failed))),
            StopRun(halt.reason, halt.detail),
        ]
    return [Append(ev.PreflightPassed(cells=sorted(preflight))), RunLoop()]


def audited(event: Audited, run_root: Path) -> list[Command]:
    """The final audit's record (a node that died idle is a node event, not residue); residue
    stops a run that had not stopped already."""
    commands: list[Command] = [Append(ev.NodeLost(node=node, while_="idle")) for node in event.lost_nodes]
    commands.append(Append(ev.Audit(removed=event.removed, residue=event.residue)))
    if event.residue and not event.stopped:
        commands += stopping(
            ev.StopReason.AUDIT,
            f"cleanup audit found {event.residue} sandboxes it could not "
            f"remove; run `ray-bench audit {run_root} --cleanup`",
        )
    return commands


def recovering(circuit: RecoveryCircuit) -> tuple[tuple[str, str], ...]:
    """The account scopes, open or on probation, that a recorded health recovery may reopen."""
    scopes = [*circuit.open_scopes, *circuit.probing]
    return tuple((s, account) for s in scopes if (account := scope_account(s)))


def health_recoveries(circuit: RecoveryCircuit, scopes: Sequence[tuple[str, str]], event: EnablesRead) -> list[Command]:
    """An account scope reopens on a recorded health recovery: an operator's ``enable`` in the
    account store after its circuit opened."""
    commands: list[Command] = []
    for scope, account in scopes:
        enable = next(
            (e for e in event.events.get(account, ()) if e.kind == "enable" and e.at > event.opened_at.get(scope, 0.0)),
            None,
        )
        if enable is not None and circuit.recover(scope):
            commands.append(Append(ev.CircuitReopened(scope=scope, via="enable", who=enable.who, reason=enable.reason)))
    return commands


class AccountProbes:
    """Which accounts' ``probe_command`` runs when, and what a result comes to: each account
    that has one before the fan-out, then a held or cooling one when due (health.probe_due)."""

    def __init__(self, accounts: Sequence[Account], circuit: RecoveryCircuit) -> None:
        self.with_command = {a.name for a in accounts if a.probe_command}
        self.circuit = circuit
        #: Account -> when its probe last ended (the core's clock).
        self.probed: dict[str, float] = {}
        self._queue: list[str] = []
        self._when = ""

    def due(self, views: Sequence[AccountView], now: float) -> list[str]:
        return [v.name for v in views if probe_due(v.state, self.probed.get(v.name), now)]

    def begin(self, names: Iterable[str], when: str) -> None:
        self._queue = [n for n in names if n in self.with_command]
        self._when = when

    def next(self) -> list[Command]:
        """The next probe to run ([] when none is left)."""
        return [Probe(self._queue.pop(0), self._when)] if self._queue else []

    def result(self, event: Probed) -> list[Command]:
        """The probe's record, what the account's actor is told, and a passing probe's health
        recovery: it reopens the account's circuit."""
        self.probed[event.account] = event.now
        effect = probe_effect(event.verdict)
        commands: list[Command] = [
            Append(
                ev.AccountProbe(
                    account=event.account, verdict=event.verdict, effect=effect, detail=event.detail, when=self._when
                )
            ),
            RecordHealth(event.account, probe_event_kind(effect), event.detail[:500]),
        ]
        if event.verdict == "ok" and self.circuit.recover(f"account:{event.account}"):
            commands.append(
                Append(ev.CircuitReopened(scope=f"account:{event.account}", via="account_probe", detail=event.detail))
            )
        return commands
