"""Admission: which account takes a cell now.

The driver talks to a :class:`Gate`. :class:`CoreGate` keeps one
:class:`~ray_bench.accounts.AccountCore` per account in this process;
:class:`~ray_bench.onray.gate.ActorGate` keeps them in named, detached Ray actors so that
every run on the same accounts shares one budget. Both translate a finished attempt's
:class:`~ray_bench.evidence.Verdict` into the account's :class:`~ray_bench.accounts.Outcome`
the same way (:func:`outcome_of`), and both refuse an account whose HOME login expires before
the cell could finish.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ray_bench.accounts import (
    AccountCore,
    AccountSnapshot,
    AdmissionRefused,
    Admit,
    Lease,
    Outcome,
    RefusalReason,
)
from ray_bench.accounts.credentials import login_expiry
from ray_bench.accounts.limits import window_rate
from ray_bench.accounts.outcome import unjudged_outcome
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.scheduler.core import Candidate, LeaseRequest, assign, judge_lease, judge_leases

#: How long a login-expiry reading is trusted before the file is read again.
_EXPIRY_RECHECK_SEC = 60.0


@dataclass(frozen=True)
class AccountView:
    name: str
    state: str  # healthy | degraded | cooling | expired | held | disabled
    inflight: int
    limit: int
    cooldown_left: float = 0.0
    last_error: str | None = None
    #: Cells it may start now (0 unless its state admits).
    headroom: int = 0


class Gate(Protocol):
    def acquire_many(self, requests: list[LeaseRequest], now: float,
                     exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
        """Admit what can start now, in order: lease id -> account. ``exclude``: accounts
        not to use (their recovery circuit is open)."""
        ...

    def release(self, account: str, lease_id: str, verdict: Verdict | None, usd: float, now: float,
                usd_bound: str = "exact") -> None:
        """Buffer a finished lease; the next ``acquire_many`` or ``flush`` delivers it."""
        ...

    def flush(self) -> None:
        """Deliver buffered releases now (the driver calls it when it will not acquire next)."""
        ...

    def blocked_until(self, now: float) -> tuple[float, str] | None: ...
    def stalled(self, now: float, horizon_sec: float = 0.0, exclude: set[str] | frozenset[str] = frozenset(),
                judges: frozenset[str] = frozenset()) -> str | None:
        """Why no account can admit a cell of ``horizon_sec`` without an operator (None: one can,
        or will by itself). ``exclude``: accounts whose recovery circuit is open; ``judges``: the
        judge accounts every waiting cell needs a lease on too (:func:`judges_stalled`)."""
        ...

    def views(self, now: float) -> list[AccountView]: ...
    def close(self) -> None: ...


#: Account states whose slots will run cells again without an operator.
LIVE_STATES = frozenset({"healthy", "degraded", "cooling"})


def live_accounts(states: Mapping[str, str], usable: Callable[[str], bool]) -> list[str]:
    """The accounts that will take cells again without an operator (for ``LeaseRequest.shun``):
    a live state, and ``usable`` (no open circuit, hold or expiring login)."""
    return [name for name, state in states.items() if state in LIVE_STATES and usable(name)]


def outcome_of(verdict: Verdict, usd: float, usd_bound: str = "exact") -> Outcome:
    """The catalog decided what a failure means for the account; this only restates it
    (``usd_bound``: what the charge is, :attr:`Outcome.usd_bound`)."""
    return dataclasses.replace(_outcome_of(verdict, usd), usd_bound=usd_bound)


def released_outcome(verdict: Verdict | None, usd: float, usd_bound: str) -> Outcome | None:
    """What a gate tells the account of a released lease: its verdict restated, or for one no
    one judged its spend alone (None: nothing charged, the lease is only abandoned)."""
    return unjudged_outcome(usd, usd_bound) if verdict is None else outcome_of(verdict, usd, usd_bound)


def _outcome_of(verdict: Verdict, usd: float) -> Outcome:
    if verdict.effect == "success":
        return Outcome.success(usd=usd)
    if verdict.effect == "rate_limited":
        return Outcome.rate_limited(verdict.retry_after, detail=verdict.message[:200], usd=usd)
    if verdict.effect == "auth_failed":
        return Outcome.auth_failed(verdict.message[:200], expired=verdict.expired)
    if verdict.effect == "server_error":
        return Outcome.server_error(verdict.message[:200], usd=usd)
    return Outcome.failure(verdict.message[:200], usd=usd)


def candidate_of(snapshot: AccountSnapshot, account: Account, headroom: int | None = None) -> Candidate:
    """The account choice's view of an account (``headroom``: when the gate knows better than
    the snapshot, e.g. cells finished since it was taken)."""
    rate = window_rate(account.limits)
    probe = isinstance(snapshot.admit, Admit) and snapshot.admit.probe
    return Candidate(snapshot.name, snapshot.headroom if headroom is None else headroom,
                     max(1, snapshot.limit), probe, rate)


def judges_of(requests: Iterable[LeaseRequest]) -> set[str]:
    """The accounts the requests name as their verifier's judge."""
    return {r.judge for r in requests if r.judge is not None}


def typical_sec(requests: list[LeaseRequest]) -> float:
    """The run's typical cell length as the driver saw it (else the batch's median), for
    telling window-bound accounts apart."""
    typical = max((r.typical_sec for r in requests), default=0.0)
    if typical > 0:
        return typical
    known = sorted(r.expected_sec for r in requests if r.expected_sec > 0)
    return known[len(known) // 2] if known else 0.0


def view_of(snapshot: AccountSnapshot) -> AccountView:
    return AccountView(snapshot.name, str(snapshot.state), snapshot.inflight, snapshot.limit,
                       snapshot.cooldown_left, snapshot.last_error or None, snapshot.headroom)


class ExpiryWatch:
    """Refuses accounts whose HOME login expires within the cell's horizon."""

    def __init__(self, accounts: list[Account], clock: Callable[[], float] = time.time) -> None:
        self._homes = {a.name: a.route.home for a in accounts if a.route.home}
        self._cache: dict[str, tuple[float, float | None]] = {}
        self._clock = clock

    def expires_at(self, account: str) -> float | None:
        home = self._homes.get(account)
        if home is None:
            return None
        now = self._clock()
        cached = self._cache.get(account)
        if cached is None or now - cached[0] > _EXPIRY_RECHECK_SEC:
            cached = (now, login_expiry(home))
            self._cache[account] = cached
        return cached[1]

    def admits(self, account: str, horizon_sec: float, now: float) -> bool:
        return self.refusal(account, horizon_sec, now) is None

    def refusals(self, accounts: Iterable[str], horizon_sec: float, now: float) -> dict[str, str]:
        """Account -> why, for the accounts a cell of ``horizon_sec`` cannot start on now."""
        return {name: why for name in accounts if (why := self.refusal(name, horizon_sec, now)) is not None}

    def refusal(self, account: str, horizon_sec: float, now: float) -> str | None:
        """Why a cell that may run ``horizon_sec`` cannot start on ``account`` now (None: it can)."""
        expires = self.expires_at(account)
        if expires is None or expires > now + horizon_sec:
            return None
        if expires <= now:  # what `plan` leaves out of capacity (cells.home_logins.expired_logins)
            return "login expired"
        return (f"login expires in {_duration(expires - now)}, within a cell's "
                f"{_duration(horizon_sec)} limit")


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min"
    return f"{seconds / 3600:.1f} h"


class CoreGate:
    """Admission in this process (one driver, no sharing across runs)."""

    def __init__(self, accounts: list[Account], now: float | None = None,
                 clock: Callable[[], float] = time.time, cores: dict[str, AccountCore] | None = None) -> None:
        """``cores``: account state shared with other gates (as named actors share it across
        runs); the simulator passes the same cores to the driver it resumes."""
        start = clock() if now is None else now
        self.accounts = {a.name: a for a in accounts}
        self.cores = cores if cores is not None else {
            a.name: AccountCore(a.name, a.limits, now=start) for a in accounts}
        self.expiry = ExpiryWatch(accounts, clock=clock)
        self._held: dict[str, str] = {}  # lease -> account, for close()
        self._judges: dict[str, str] = {}  # lease -> the judge account it holds a lease on too

    def acquire_many(self, requests: list[LeaseRequest], now: float,
                     exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
        if not requests:
            return {}
        horizon = max(r.horizon_sec for r in requests)
        candidates = [candidate_of(snap, self.accounts[name]) for name, core in self.cores.items()
                      if name not in exclude and self.expiry.admits(name, horizon, now)
                      and (snap := core.snapshot(now)).headroom > 0]
        live = live_accounts({n: str(c.health.tick(now)) for n, c in self.cores.items()},
                             lambda n: n not in exclude and self.expiry.admits(n, horizon, now))
        room = {j: self.cores[j].snapshot(now).headroom for j in judges_of(requests) if j in self.cores}
        shares = assign(requests, candidates, typical_sec(requests), live, room)
        judged: dict[str, str] = {}  # the judge's lease first: a cell starts with both or neither
        for judge, share in judge_leases(shares).items():
            for request in share:
                try:
                    self.cores[judge].on_start(now, Lease(judge_lease(request.lease_id), request.cell.id, judge))
                except AdmissionRefused:
                    break
                judged[request.lease_id] = judge
        granted: dict[str, str] = {}
        for name, share in shares.items():
            for request in share:
                if request.judge not in (None, name) and request.lease_id not in judged:
                    continue
                try:
                    self.cores[name].on_start(now, Lease(request.lease_id, request.cell.id, name,
                                                         request.expected_usd))
                except AdmissionRefused:
                    break
                granted[request.lease_id] = name
                self._held[request.lease_id] = name
        for lease, judge in judged.items():
            if lease in granted:
                self._judges[lease] = judge
            else:  # its own account refused it after all: the judge's slot is given back
                self.cores[judge].abandon(judge_lease(lease))
        return granted

    def flush(self) -> None:
        return None

    def release(self, account: str, lease_id: str, verdict: Verdict | None, usd: float, now: float,
                usd_bound: str = "exact") -> None:
        self._held.pop(lease_id, None)
        core = self.cores[account]
        outcome = released_outcome(verdict, usd, usd_bound)
        if outcome is None:
            core.abandon(lease_id)
        else:
            core.on_finish(now, Lease(lease_id, "", account), outcome)
        judge = self._judges.pop(lease_id, None)
        if judge is not None:  # its verifier's slot: judged by no one, charged nothing
            self.cores[judge].abandon(judge_lease(lease_id))

    def blocked_until(self, now: float) -> tuple[float, str] | None:
        return blocked_until([c.snapshot(now) for c in self.cores.values()], now)

    def stalled(self, now: float, horizon_sec: float = 0.0, exclude: set[str] | frozenset[str] = frozenset(),
                judges: frozenset[str] = frozenset()) -> str | None:
        unusable = self.expiry.refusals(self.cores, horizon_sec, now)
        snaps = {name: core.snapshot(now) for name, core in self.cores.items()}
        return stalled(list(snaps.values()), unusable, exclude) or judges_stalled(snaps, judges, {})

    def views(self, now: float) -> list[AccountView]:
        return [view_of(c.snapshot(now)) for c in self.cores.values()]

    def close(self) -> None:
        """Give back the leases still held (a driver that stops owns none afterwards)."""
        for lease, account in self._held.items():
            self.cores[account].abandon(lease)
        for lease, judge in self._judges.items():
            self.cores[judge].abandon(judge_lease(lease))
        self._held = {}
        self._judges = {}


def stalled(snapshots: list[AccountSnapshot], unusable: Mapping[str, str],
            exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Why no account will ever admit again by itself, or None. An account frees itself when
    time passes (a cooldown, a window) or when a cell running on it finishes (in any run); one
    refused for good with nothing running (disabled, out of budget) never does, nor one the
    operator must act on (``unusable``, name -> why: held, login expired or expiring)."""
    reasons = []
    for snap in snapshots:
        if snap.name in unusable:
            reasons.append(f"{snap.name} {unusable[snap.name]}")
            continue
        if isinstance(snap.admit, Admit) and snap.name in exclude:  # it would, but its circuit is open
            reasons.append(f"{snap.name} recovery circuit open")
            continue
        if isinstance(snap.admit, Admit) or snap.admit.until is not None or snap.inflight > 0:
            return None
        reasons.append(f"{snap.name} {snap.admit.reason}")
    return ", ".join(reasons) if reasons else None


def judges_stalled(snapshots: Mapping[str, AccountSnapshot], judges: Iterable[str],
                   unusable: Mapping[str, str]) -> str | None:
    """Why the judge accounts every waiting cell needs a lease on will not admit again without an
    operator (``unusable``: held), or None: while the cells' own accounts admit, the run would
    otherwise wait on them for ever. A judge's recovery circuit and login expiry do not count: the
    verifier only takes a key from its route."""
    chosen = [snapshots[j] for j in sorted(judges) if j in snapshots]
    if not chosen:
        return None
    why = stalled(chosen, {j: unusable[j] for j in judges if j in unusable})
    return None if why is None else f"the waiting cells' judge accounts: {why}"  # budget_only reads the ends


def budget_only(stalled: str) -> bool:
    """Whether every account named in a :func:`stalled` answer is out of its own budget (the
    run stops as ``budget``, apart from the run's limit, ``spend``)."""
    return all(part.endswith(f" {RefusalReason.BUDGET}") for part in stalled.split(", "))


def blocked_until(snapshots: list[AccountSnapshot], now: float) -> tuple[float, str] | None:
    """When every account that could ever admit again is waiting on time, say until when."""
    waits = []
    for snap in snapshots:
        if isinstance(snap.admit, Admit):
            return None
        if snap.admit.until is not None:
            waits.append((snap.admit.until, str(snap.admit.reason)))
    if not waits:
        return None
    until, _ = min(waits)
    reasons = sorted({reason for _, reason in waits})
    label = "every account is cooling" if reasons == ["cooling"] else f"accounts waiting ({', '.join(reasons)})"
    return until, label
