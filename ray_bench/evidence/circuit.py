"""The recovery circuit: when the same failure signature repeats in a scope with no success
between, that scope stops launching. It reopens only with a recorded changed hypothesis, or,
for an account, when its health recovers.

Scopes are strings: ``run``, ``backend:<name>``, ``account:<name>``. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ray_bench.ledger.events import CircuitOpen, Hypothesis, RunEvent, UnknownEvent

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


@dataclass
class _Streak:
    fingerprint: str
    count: int


@dataclass
class RecoveryCircuit:
    threshold: int = DEFAULT_THRESHOLD
    _streaks: dict[str, _Streak] = field(default_factory=dict)
    open_scopes: dict[str, str] = field(default_factory=dict)  # scope -> fingerprint

    def scopes_for(self, failure_class: str, account: str, backend: str) -> list[str]:
        names = {"run": "run", "backend": f"backend:{backend}", "account": f"account:{account}"}
        return [names[s] for s in _SCOPED.get(failure_class, ())]

    def record_failure(self, failure_class: str, fp: str, *, account: str, backend: str) -> list[str]:
        """Record a failure; return the scopes this failure opened."""
        opened: list[str] = []
        for scope in self.scopes_for(failure_class, account, backend):
            streak = self._streaks.get(scope)
            if streak is None or streak.fingerprint != fp:
                streak = self._streaks[scope] = _Streak(fp, 0)
            streak.count += 1
            if streak.count >= self.threshold and scope not in self.open_scopes:
                self.open_scopes[scope] = fp
                opened.append(scope)
        return opened

    def record_success(self, *, account: str, backend: str) -> None:
        for scope in ("run", f"backend:{backend}", f"account:{account}"):
            self._streaks.pop(scope, None)

    def blocks(self, *, account: str, backend: str) -> str | None:
        for scope in ("run", f"backend:{backend}", f"account:{account}"):
            if scope in self.open_scopes:
                return scope
        return None

    def reopen(self, scope: str | None = None) -> list[str]:
        """Close the circuit of ``scope`` (every scope if None) after a changed hypothesis."""
        scopes = list(self.open_scopes) if scope is None else [scope]
        for name in scopes:
            self.open_scopes.pop(name, None)
            self._streaks.pop(name, None)
        return scopes


class _Row(Protocol):
    @property
    def event(self) -> RunEvent | UnknownEvent: ...


def circuit_scopes(rows: Iterable[_Row]) -> dict[str, str | None]:
    """scope -> fingerprint of every scope a ledger's events opened, None once closed. The one
    replay rule: a ``circuit_open`` opens its scope, a recorded ``hypothesis`` closes them all."""
    scopes: dict[str, str | None] = {}
    for row in rows:
        match row.event:
            case Hypothesis():
                scopes = dict.fromkeys(scopes)
            case CircuitOpen(scope=scope, fingerprint=fingerprint):
                scopes[scope] = fingerprint
    return scopes


def open_scopes_from(rows: Iterable[_Row]) -> dict[str, str]:
    """scope -> fingerprint of the circuits a ledger's events leave open. The driver replays
    this on resume; ``promote`` refuses a run while it is not empty."""
    return {scope: fp for scope, fp in circuit_scopes(rows).items() if fp is not None}
