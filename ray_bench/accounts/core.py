"""``AccountCore``: one account's admission, composed from the pieces of this package.

It answers "may this account start one more cell now?" (:meth:`AccountCore.can_admit`),
and learns from every start and finish. It is plain Python on an injected clock: the Ray
``AccountGrants`` (in the admission actor) wraps one instance, and the simulator drives the same class on virtual time.

Order of the checks in :meth:`AccountCore.can_admit` (the first that fails is the reason):
health state, spend budget, in-flight vs. the adaptive limit, rolling-window cells, rolling-
window dollars, starts per minute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from ray_bench.accounts.concurrency import AimdLimit
from ray_bench.accounts.health import AccountHealth, HealthState
from ray_bench.accounts.limits import Tuning, health_policy, window_seconds
from ray_bench.accounts.outcome import Outcome, OutcomeKind
from ray_bench.accounts.quota import RollingWindowQuota
from ray_bench.accounts.ratelimit import TokenBucket
from ray_bench.errors import RayBenchError
from ray_bench.models.accounts import AccountLimits


class AdmissionRefused(RayBenchError):
    """:meth:`AccountCore.on_start` was called while the account refuses admission."""

    def __init__(self, account: str, refusal: Refusal) -> None:
        self.account = account
        self.refusal = refusal
        super().__init__(f"{account}: {refusal.reason}")


class RefusalReason(StrEnum):
    HELD = "held"
    DISABLED = "disabled"
    EXPIRED = "expired"
    COOLING = "cooling"
    PROBING = "probing"
    BUDGET = "budget"
    CONCURRENCY = "concurrency"
    WINDOW_CELLS = "window_cells"
    WINDOW_USD = "window_usd"
    RATE = "rate"


@dataclass(frozen=True, slots=True)
class Admit:
    """The account may start a cell now, and up to ``headroom`` cells in a row (free slots,
    capped by the window's cells and the bucket's tokens; this one included)."""

    headroom: int
    probe: bool = False
    """The start would be the one probe of a degraded account."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """The account refuses now. ``until``: when to ask again; ``None``: on a finish or an
    operator action only (``concurrency`` waits for a finish, ``disabled`` for an operator)."""

    reason: RefusalReason
    until: float | None = None

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Lease:
    """One attempt holding one slot of one account; ``usd``: what it is expected to cost,
    reserved against the account's budget while it runs."""

    lease_id: str
    cell_id: str
    account: str
    usd: float = 0.0


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """What an account looks like at one instant (metrics, status, account choice)."""

    name: str
    state: HealthState
    inflight: int
    limit: int
    tokens: float
    cooldown_left: float
    window_used: int
    window_usd: float
    spent_usd: float
    last_error: str
    recommended_parallelism: int
    """Slots the account can use now: the adaptive limit, 0 when its state admits nothing
    or its spend budget is gone."""
    admit: Admit | Refusal

    @property
    def headroom(self) -> int:
        return self.admit.headroom if isinstance(self.admit, Admit) else 0


@dataclass(frozen=True, slots=True)
class Running:
    """A slot held by a started lease: when it started, how many ran then, whether it was
    a degraded account's probe."""

    started_at: float
    inflight_at_start: int
    probe: bool
    reserved_usd: float = 0.0
    """The lease's expected cost, held against the budget until its real cost is known (the
    state root keeps it with the lease, so every holder of the account counts it)."""


@dataclass(frozen=True, slots=True)
class Shared:
    """What every run on a state root holds and has used of one account at one instant, read
    from ``accounts.sqlite`` (:mod:`ray_bench.accounts.store`) inside the transaction that
    grants: the live leases of every run, whatever Ray instance granted them, the rolling
    window's starts and spend, the lifetime spend and the start bucket's level."""

    leases: dict[str, Running]
    starts: list[float]
    spend: list[tuple[float, float]]
    spent_usd: float
    #: (tokens, at) of the starts-per-minute bucket as the last grant left it; None: never used.
    bucket: tuple[float, float] | None = None


_STATE_REASON = {
    HealthState.HELD: RefusalReason.HELD,
    HealthState.DISABLED: RefusalReason.DISABLED,
    HealthState.EXPIRED: RefusalReason.EXPIRED,
    HealthState.COOLING: RefusalReason.COOLING,
    HealthState.DEGRADED: RefusalReason.PROBING,
}


class AccountCore:
    """Admission state of one account. Not thread-safe: an actor serialises calls."""

    def __init__(self, name: str, limits: AccountLimits, *, tuning: Tuning | None = None,
                 now: float = 0.0) -> None:
        """``limits``: the account's as configured (the model read from accounts.yaml, as is)."""
        self.name = name
        self.limits = limits
        self.tuning = tuning = tuning or Tuning()
        self.health = AccountHealth(health_policy(limits, tuning))
        self.concurrency = AimdLimit(floor=limits.min_concurrent, ceiling=limits.max_concurrent,
                                     decrease=tuning.aimd_decrease, increase=tuning.aimd_increase,
                                     recovery_s=tuning.health.probe_window_s)
        self.bucket = TokenBucket(limits.starts_per_minute, burst=tuning.burst, now=now)
        w = limits.window
        self.window = (RollingWindowQuota(window_seconds(limits), max_cells=w.max_cells, max_usd=w.max_usd)
                       if w is not None else None)
        self.spent_usd = 0.0
        self._running: dict[str, Running] = {}
        #: The expected cost of the last lease asked for: what "can one more cell start?"
        #: weighs against the budget when no lease is at hand (snapshots, status).
        self._asked_usd = 0.0
        self._reserved_usd = 0.0  # the running leases' reservations, kept as a sum: O(1) a call

    @property
    def inflight(self) -> int:
        return len(self._running)

    @property
    def reserved_usd(self) -> float:
        return self._reserved_usd if self._running else 0.0  # no float residue once idle

    def _hold(self, lease_id: str, run: Running) -> None:
        self._running[lease_id] = run
        self._reserved_usd += run.reserved_usd

    def _drop(self, lease_id: str) -> Running | None:
        run = self._running.pop(lease_id, None)
        if run is not None:
            self._reserved_usd = self._reserved_usd - run.reserved_usd if self._running else 0.0
        return run

    def can_admit(self, now: float, usd: float | None = None) -> Admit | Refusal:
        """May one more cell, expected to cost ``usd`` (default: the last one asked for),
        start on this account at ``now``? Never changes state (beyond applying elapsed time).
        The budget admits it only if the spend so far, the reservations of the cells running
        and ``usd`` stay within it."""
        h = self.health
        if not h.admits(now):
            return Refusal(_STATE_REASON.get(h.state, RefusalReason.DISABLED),
                           h.blocked_until(now))
        budget = self.limits.spend_usd
        need = self._asked_usd if usd is None else usd
        if budget is not None and (self.spent_usd >= budget or
                                   self.spent_usd + self.reserved_usd + need > budget):
            return Refusal(RefusalReason.BUDGET, None)
        limit = self.concurrency.tick(now)
        if self.inflight >= limit:
            return Refusal(RefusalReason.CONCURRENCY, None)
        if self.window is not None:
            free_at = self.window.cells_free_at(now)
            if free_at > now:
                return Refusal(RefusalReason.WINDOW_CELLS, free_at)
            free_at = self.window.usd_free_at(now)
            if free_at > now:
                return Refusal(RefusalReason.WINDOW_USD, free_at)
        wait = self.bucket.wait_s(now)
        if wait > 0:
            return Refusal(RefusalReason.RATE, now + wait)
        probe = h.state is HealthState.DEGRADED
        headroom = 1 if probe else limit - self.inflight
        if self.window is not None and self.window.max_cells is not None:
            headroom = min(headroom, self.window.cells_left(now) or 0)
        if not self.bucket.unlimited:
            headroom = min(headroom, int(self.bucket.tokens(now) + 1e-9))
        return Admit(headroom=max(1, headroom), probe=probe)

    def on_start(self, now: float, lease: Lease) -> None:
        """Record a start. Raises :class:`AdmissionRefused` if :meth:`can_admit` refuses:
        check and start must happen in one step (the actor serialises them)."""
        self._asked_usd = lease.usd
        decision = self.can_admit(now, lease.usd)
        if isinstance(decision, Refusal):
            raise AdmissionRefused(self.name, decision)
        if lease.lease_id in self._running:
            raise ValueError(f"lease {lease.lease_id} already started")
        self.bucket.try_take(now)
        if self.window is not None:
            self.window.record_start(now)
        self.health.on_start(now)
        self._hold(lease.lease_id, Running(now, self.inflight, decision.probe, lease.usd))

    def on_finish(self, now: float, lease: Lease, outcome: Outcome) -> None:
        """Release the lease's slot and learn from its outcome. Unknown leases (from before
        a restart) still teach the health machine but free no slot."""
        run = self._drop(lease.lease_id)
        started_at = run.started_at if run is not None else -math.inf
        if outcome.usd > 0:
            self.spent_usd += outcome.usd
            if self.window is not None:
                self.window.record_usd(now, outcome.usd)
        h = self.health
        self.concurrency.tick(now)
        if outcome.kind is OutcomeKind.SUCCESS:
            h.on_success(now, started_at)
            if run is not None and h.state is HealthState.HEALTHY:
                self.concurrency.on_success(run.inflight_at_start)
        elif outcome.kind is OutcomeKind.RATE_LIMITED:
            h.on_rate_limited(now, started_at, outcome.retry_after, outcome.detail)
            # A probe hit by the same storm says the storm goes on, not that we ran too
            # many: shrinking again on every probe would leave the limit at its floor.
            if run is not None and not run.probe:
                self.concurrency.on_rate_limited(now, started_at)
            # Any signal, a probe's or a late one, restarts the quiet time the limit regrows
            # by (accounts/concurrency.py), from the end of the cooldown it imposed.
            self.concurrency.quiet_from(max(now, h.cooling_until))
        elif outcome.kind is OutcomeKind.AUTH_FAILED:
            h.on_auth_failed(now, expired=outcome.expired, detail=outcome.detail)
        elif outcome.kind is OutcomeKind.SERVER_ERROR:
            h.on_server_error(now, started_at, outcome.detail)
        # A failure blames the task (its tests, a missing file), an unjudged attempt blames no
        # one: neither is the account's error, so neither becomes its ``last_error``, which
        # `accounts status` shows beside its state ("healthy (: not found)" before).

    def share(self, shared: Shared) -> None:
        """Take up what every run on the state root holds of this account (:class:`Shared`):
        its slots, window, spend and bucket become theirs together, so the next
        :meth:`can_admit` / :meth:`on_start` weighs the other runs' cells too. The adaptive limit
        stays this core's own (learnt from finishes, not counted); health is taken up by the
        keeper where another's is stricter (``AccountGrants._take_up_health``)."""
        self._running = dict(shared.leases)
        self._reserved_usd = sum(run.reserved_usd for run in self._running.values())
        self.spent_usd = shared.spent_usd
        if self.window is not None:
            self.window.reset(shared.starts, shared.spend)
        if shared.bucket is not None:
            self.bucket.restore(*shared.bucket)

    def running(self, lease_id: str) -> Running | None:
        return self._running.get(lease_id)

    def adopt(self, lease_id: str, held: Running) -> None:
        """Hold a slot for a lease an earlier holder of this account started (its actor
        restarted): no admission check and no window start, both happened then."""
        if lease_id not in self._running:
            self._hold(lease_id, held)

    def abandon(self, lease_id: str) -> bool:
        """Free a lease's slot without learning from it: the attempt was cancelled, or the
        driver that held it died. Returns whether the lease was held."""
        return self._drop(lease_id) is not None

    def leases(self) -> list[str]:
        return list(self._running)

    def next_change(self, now: float) -> float | None:
        """The earliest time at which a refusal may lift by itself (``None``: only a
        finish or an operator can lift it). Drivers and the simulator sleep until then."""
        d = self.can_admit(now)
        return now if isinstance(d, Admit) else d.until

    def snapshot(self, now: float) -> AccountSnapshot:
        admit = self.can_admit(now)
        h = self.health
        state = h.state
        budget = self.limits.spend_usd
        usable = state in (HealthState.HEALTHY, HealthState.DEGRADED) and (
            budget is None or self.spent_usd < budget)
        return AccountSnapshot(
            name=self.name,
            state=state,
            inflight=self.inflight,
            limit=self.concurrency.limit,
            tokens=self.bucket.tokens(now),
            cooldown_left=h.cooldown_left(now),
            window_used=self.window.cells_used(now) if self.window else 0,
            window_usd=self.window.usd_used(now) if self.window else 0.0,
            spent_usd=self.spent_usd,
            last_error=h.last_error,
            recommended_parallelism=self.concurrency.limit if usable else 0,
            admit=admit,
        )
