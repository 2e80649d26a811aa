"""The recovery circuit: when the same failure signature repeats in a scope with no success
between, that scope stops launching. It reopens only through a bounded probe: a recorded
changed hypothesis lets one cell (the smallest slice) run in the scope; the scope reopens when
that probe yields a valid row and closes again when it fails with the same signature (the
failure is recorded against the hypothesis). An account scope also reopens on a recorded
health recovery (a passing account probe, an operator ``enable``).

Scopes are strings: ``run``, ``backend:<name>``, ``account:<name>``. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ray_bench.ledger.events import CircuitOpen, CircuitReopened, Hypothesis, RunEvent, UnknownEvent

#: Repeats of one signature (with no success between) that open a scope. Three: two can be
#: chance on a busy provider; a third identical failure is a pattern worth a human.
DEFAULT_THRESHOLD = 3

#: Classes whose repetition says something about a scope rather than a task.
_SCOPED = {
    "stack": ("backend", "run"),
    "executor": ("backend",),
    "capacity": ("backend",),
    "auth": ("account",),
    "tool": ("run",),
    "evaluator": ("run",),
}

#: What a probe's result did to its scope: reopened it, closed it again (same signature), or
#: said nothing about the hypothesis (another failure: the next probe may go).
ProbeVerdict = Literal["reopened", "closed", "inconclusive"]


@dataclass
class _Streak:
    fingerprint: str
    count: int


@dataclass
class Probe:
    """A scope on probation under a hypothesis: at most one cell of it runs at a time."""

    fingerprint: str
    hypothesis: str
    attempt_id: str | None = None  # the probe in flight, if any


def scope_account(scope: str) -> str | None:
    return scope.removeprefix("account:") if scope.startswith("account:") else None


def next_probe(scope: str, probe: Probe | None) -> str:
    """The next probe of ``scope`` in words (status, the alert's runbook)."""
    where = ("one cell on that account" if scope.startswith("account:")
             else "one cell on that backend" if scope.startswith("backend:") else "one cell")
    if probe is None:
        account = scope_account(scope)
        recovery = (f"; or a passing `accounts probe`/`accounts enable {account}` reopens it"
                    if account else "")
        return f"{where}, after `execute --hypothesis TEXT` records what changed{recovery}"
    if probe.attempt_id:
        return f"probe {probe.attempt_id} running on hypothesis {probe.hypothesis!r}"
    return f"{where} on hypothesis {probe.hypothesis!r}, at the next execute"


@dataclass
class RecoveryCircuit:
    threshold: int = DEFAULT_THRESHOLD
    _streaks: dict[str, _Streak] = field(default_factory=dict)
    open_scopes: dict[str, str] = field(default_factory=dict)  # scope -> fingerprint
    probing: dict[str, Probe] = field(default_factory=dict)  # scope -> its probe

    def scopes_for(self, failure_class: str, account: str, backend: str) -> list[str]:
        names = {"run": "run", "backend": f"backend:{backend}", "account": f"account:{account}"}
        return [names[s] for s in _SCOPED.get(failure_class, ())]

    def record_failure(self, failure_class: str, fp: str, *, account: str, backend: str) -> list[str]:
        """Record a failure; return the scopes this failure opened. A probing scope is judged by
        its probe (:meth:`probe_finished`), not by streaks."""
        opened: list[str] = []
        for scope in self.scopes_for(failure_class, account, backend):
            if scope in self.probing:
                continue
            streak = self._streaks.get(scope)
            if streak is None or streak.fingerprint != fp:
                streak = self._streaks[scope] = _Streak(fp, 0)
            streak.count += 1
            if streak.count >= self.threshold and scope not in self.open_scopes:
                self.open_scopes[scope] = fp
                opened.append(scope)
        return opened

    def record_success(self, *, account: str, backend: str) -> None:
        for scope in _scopes(account, backend):
            self._streaks.pop(scope, None)

    def blocks(self, *, account: str, backend: str) -> str | None:
        """The open scope (no hypothesis yet) that stops a cell here, if any."""
        for scope in _scopes(account, backend):
            if scope in self.open_scopes:
                return scope
        return None

    def probing_for(self, *, account: str, backend: str) -> list[str]:
        """The probing scopes a cell here falls in: it may start only as their probe."""
        return [s for s in _scopes(account, backend) if s in self.probing]

    def probe_free(self, scopes: Iterable[str]) -> bool:
        """Whether a probe may start in every one of ``scopes`` (none is in flight)."""
        return all(self.probing[s].attempt_id is None for s in scopes)

    def hypothesis(self, text: str) -> list[str]:
        """A changed hypothesis is recorded: every open scope goes on probation (one probe
        cell), none reopens yet. Returns those scopes."""
        scopes = sorted(self.open_scopes)
        for scope in scopes:
            self.probing[scope] = Probe(self.open_scopes.pop(scope), text)
            self._streaks.pop(scope, None)
        return scopes

    def probe_started(self, scopes: Iterable[str], attempt_id: str) -> None:
        for scope in scopes:
            self.probing[scope].attempt_id = attempt_id

    def probe_finished(self, attempt_id: str, *, valid: bool, fingerprint: str | None,
                       counted: bool = True) -> dict[str, ProbeVerdict]:
        """Judge the probe ``attempt_id`` in every scope it was sent for. A valid row reopens
        the scope; the same signature closes it again; anything else (another signature, a
        cancelled or lost attempt) frees the scope for the next probe."""
        verdicts: dict[str, ProbeVerdict] = {}
        for scope, probe in list(self.probing.items()):
            if probe.attempt_id != attempt_id:
                continue
            if valid:
                del self.probing[scope]
                verdicts[scope] = "reopened"
            elif counted and fingerprint == probe.fingerprint:
                del self.probing[scope]
                self.open_scopes[scope] = probe.fingerprint
                verdicts[scope] = "closed"
            else:
                probe.attempt_id = None
                verdicts[scope] = "inconclusive"
        return verdicts

    def recover(self, scope: str) -> bool:
        """A recorded health recovery of an account (a passing probe, an operator enable)
        reopens its scope; True if it was open or probing."""
        was = scope in self.open_scopes or scope in self.probing
        self.open_scopes.pop(scope, None)
        self.probing.pop(scope, None)
        self._streaks.pop(scope, None)
        return was


def _scopes(account: str, backend: str) -> tuple[str, str, str]:
    return ("run", f"backend:{backend}", f"account:{account}")


class _Row(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def event(self) -> RunEvent | UnknownEvent: ...


def circuit_from(rows: Iterable[_Row]) -> RecoveryCircuit:
    """The one replay rule: the circuit a ledger's events leave. ``circuit_open`` opens a
    scope, a ``hypothesis`` puts every open scope on probation, ``circuit_reopened`` (a valid
    probe, a health recovery) reopens one. A probe in flight when its driver ended is free
    again (the resume marks it stale). The driver replays this on resume."""
    circuit = RecoveryCircuit()
    for row in sorted(rows, key=lambda r: r.seq):
        match row.event:
            case CircuitOpen(scope=scope, fingerprint=fingerprint):
                circuit.probing.pop(scope, None)
                circuit.open_scopes[scope] = fingerprint
            case Hypothesis(text=text):
                circuit.hypothesis(text)
            case CircuitReopened(scope=scope):
                circuit.recover(scope)
    return circuit


def open_scopes_from(rows: Iterable[_Row]) -> dict[str, str]:
    """scope -> fingerprint of the circuits a ledger's events leave not reopened: open, or on
    probation under a hypothesis whose probe has not yet given a valid row. ``promote``
    refuses a run while it is not empty; the circuit gauge is 1 for each."""
    circuit = circuit_from(rows)
    return {**circuit.open_scopes, **{s: p.fingerprint for s, p in circuit.probing.items()}}


def circuit_scopes(rows: Iterable[_Row]) -> dict[str, str | None]:
    """scope -> fingerprint of every scope a ledger's events ever opened, None once reopened
    (the durable gauge keeps the scopes it has seen, at 0 when reopened)."""
    rows = list(rows)
    left = open_scopes_from(rows)
    seen = {row.event.scope for row in rows if isinstance(row.event, CircuitOpen)}
    return {scope: left.get(scope) for scope in sorted(seen)}
