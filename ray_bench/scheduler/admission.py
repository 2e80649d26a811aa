"""Admission: which account takes a cell now. The driver talks to a :class:`Gate`; the Ray
shell (account actors shared across runs) and the in-process gate both implement it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.models.plan import PlanCell

#: How long an account cools after a rate limit that named no Retry-After.
DEFAULT_COOLDOWN_SEC = 60.0
#: Auth failures in a row that disable an account.
AUTH_FAILURES_TO_DISABLE = 2


@dataclass(frozen=True)
class AccountView:
    name: str
    state: str  # healthy | degraded | cooling | expired | held | disabled
    inflight: int
    limit: int
    cooldown_left: float = 0.0
    last_error: str | None = None


class Gate(Protocol):
    def acquire(self, cell: PlanCell, now: float) -> str | None: ...
    def release(self, account: str, verdict: Verdict | None, now: float) -> None: ...
    def blocked_until(self, now: float) -> tuple[float, str] | None: ...
    def views(self, now: float) -> list[AccountView]: ...
    def close(self) -> None: ...


@dataclass
class _Slot:
    account: Account
    inflight: int = 0
    cooling_until: float = 0.0
    auth_failures: int = 0
    disabled: bool = False
    held: bool = False
    last_error: str | None = None


class LocalGate:
    """An in-process gate: concurrency limits, cooldown on rate limits, disable on repeated
    auth failures; the account with the most free slots wins."""

    def __init__(self, accounts: list[Account]) -> None:
        self._slots = {a.name: _Slot(a) for a in accounts}

    def acquire(self, cell: PlanCell, now: float) -> str | None:
        best: _Slot | None = None
        for slot in self._slots.values():
            if slot.disabled or slot.held or slot.cooling_until > now:
                continue
            free = slot.account.limits.max_concurrent - slot.inflight
            if free > 0 and (best is None or free > best.account.limits.max_concurrent - best.inflight):
                best = slot
        if best is None:
            return None
        best.inflight += 1
        return best.account.name

    def release(self, account: str, verdict: Verdict | None, now: float) -> None:
        slot = self._slots[account]
        slot.inflight = max(0, slot.inflight - 1)
        if verdict is None:
            return
        if verdict.effect == "rate_limited":
            slot.cooling_until = max(slot.cooling_until, now + (verdict.retry_after or DEFAULT_COOLDOWN_SEC))
            slot.last_error = verdict.message
        elif verdict.effect == "auth_failed":
            slot.auth_failures += 1
            slot.last_error = verdict.message
            if slot.auth_failures >= AUTH_FAILURES_TO_DISABLE:
                slot.disabled = True
        elif verdict.effect == "success":
            slot.auth_failures = 0

    def blocked_until(self, now: float) -> tuple[float, str] | None:
        usable = [s for s in self._slots.values() if not s.disabled and not s.held]
        if not usable:
            return None
        if all(s.cooling_until > now for s in usable):
            return min(s.cooling_until for s in usable), "every account is cooling"
        return None

    def views(self, now: float) -> list[AccountView]:
        out = []
        for s in self._slots.values():
            state = ("disabled" if s.disabled else "held" if s.held else
                     "cooling" if s.cooling_until > now else "healthy")
            out.append(AccountView(s.account.name, state, s.inflight, s.account.limits.max_concurrent,
                                   max(0.0, s.cooling_until - now), s.last_error))
        return out

    def close(self) -> None:
        return None
