"""A discrete-event simulation on a virtual clock.

The *provider* side (:class:`Provider`) plays the accounts' real behaviour: it enforces
each account's true concurrency and rolling-window quota (a start over either comes back
rate-limited within seconds), rate-limits every start made during a storm (after 5-30 s,
with a Retry-After), fails every attempt with an auth error once an account has lost its
credentials (attempts in flight at that moment fail too), and otherwise finishes the cell
after its true duration. Running cells ride through a storm: agents retry single requests.

The *policy* side is anything with the :class:`SimPolicy` shape: the baselines the scheduler
is compared with (:mod:`ray_bench.sim.baselines`). The scheduler itself is simulated by
running the real driver (:mod:`ray_bench.sim.driven`), not here.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ray_bench.accounts.core import Lease
from ray_bench.accounts.limits import window_seconds
from ray_bench.accounts.outcome import Outcome
from ray_bench.scheduler.order import CellRef
from ray_bench.sim.workload import AuthLossEvent, SimSpec, StormEvent, Workload

DONE, REQUEUED, LOST = "done", "requeued", "lost"


class SimPolicy(Protocol):
    name: str

    def pending(self) -> int: ...

    def dispatch(self, now: float, free_slots: int | None) -> list[tuple[CellRef, Lease]]: ...

    def finish(self, now: float, lease: Lease, outcome: Outcome) -> str:
        """Return DONE, REQUEUED or LOST."""
        ...

    def next_wakeup(self, now: float) -> float | None: ...


@dataclass(slots=True)
class _Attempt:
    cell: CellRef
    lease: Lease
    start: float
    end: float
    outcome: Outcome
    counts: bool
    """Holds one of the provider's true slots (and a window start)."""
    version: int = 0


class Provider:
    """The accounts as the world sees them (see the module docstring)."""

    def __init__(self, spec: SimSpec, workload: Workload, rng: np.random.Generator) -> None:
        self.rng = rng
        self.workload = workload
        self.limit = {a.name: a.limits.max_concurrent for a in spec.accounts}
        self.usd_per_s = {a.name: a.usd_per_hour / 3600 for a in spec.accounts}
        self.window = {a.name: (window_seconds(a.limits), cells) for a in spec.accounts
                       if (cells := a.limits.window and a.limits.window.max_cells)}
        self.starts: dict[str, deque[float]] = {a.name: deque() for a in spec.accounts}
        self.inflight = {a.name: 0 for a in spec.accounts}
        self.storms = [e for e in spec.events if isinstance(e, StormEvent)]
        self.auth_loss = {e.account: e for e in spec.events if isinstance(e, AuthLossEvent)}

    def _delay(self, lo_hi: tuple[float, float]) -> float:
        return float(self.rng.uniform(*lo_hi))

    def refusal(self, now: float, acct: str) -> tuple[float, Outcome] | None:
        """How a start on ``acct`` now fails (after how long, with what), or None: it runs.
        A start that runs takes one of the account's true slots (and a window start)."""
        loss = self.auth_loss.get(acct)
        if loss is not None and now >= loss.at_h * 3600:
            return self._delay(loss.signal_delay_s), Outcome.auth_failed("401 invalid credentials")
        if self.inflight[acct] >= self.limit[acct]:
            return self._delay((1.0, 5.0)), Outcome.rate_limited(30.0, "429 too many concurrent")
        if acct in self.window:
            span, cap = self.window[acct]
            q = self.starts[acct]
            while q and q[0] + span <= now:
                q.popleft()
            if len(q) >= cap:
                return self._delay((1.0, 5.0)), Outcome.rate_limited(q[len(q) - cap] + span - now,
                                                                      "usage limit reached")
        for s in self.storms:
            t0 = s.start_h * 3600
            if s.account == acct and t0 <= now < t0 + s.length_min * 60:
                if s.answer == "server_error":
                    return self._delay(s.signal_delay_s), Outcome.server_error("500 internal server error")
                return self._delay(s.signal_delay_s), Outcome.rate_limited(s.retry_after_s, "429 rate limit")
        self.inflight[acct] += 1
        if acct in self.window:
            self.starts[acct].append(now)
        return None

    def start(self, now: float, cell: CellRef, lease: Lease) -> _Attempt:
        refused = self.refusal(now, lease.account)
        if refused is not None:
            return _Attempt(cell, lease, now, now + refused[0], refused[1], False)
        d = self.workload.duration[cell.cell_id]
        return _Attempt(cell, lease, now, now + d, Outcome.success(d * self.usd_per_s[lease.account]), True)

    def release(self, att: _Attempt) -> None:
        if att.counts:
            self.inflight[att.lease.account] -= 1
            att.counts = False


@dataclass(slots=True)
class PolicyResult:
    """What one policy did with the workload."""

    policy: str
    makespan_s: float
    attempts: int
    wasted_attempts: int
    cells_lost: int
    duplicate_rows: int
    rows: int
    pair_start_gap_s: dict[str, float] = field(default_factory=dict)


_FINISH, _WAKE, _AUTH_LOSS = 0, 1, 2


def run(spec: SimSpec, workload: Workload, policy: SimPolicy) -> PolicyResult:
    """Drive ``policy`` over ``workload`` until no work or event is left."""
    rng = np.random.default_rng([spec.seed, 1])
    provider = Provider(spec, workload, rng)
    seq = itertools.count()
    heap: list[tuple[float, int, int, object]] = []
    running: dict[str, _Attempt] = {}
    for loss in provider.auth_loss.values():
        heapq.heappush(heap, (loss.at_h * 3600, next(seq), _AUTH_LOSS, loss))
    rows: dict[str, int] = {}
    first_start: dict[str, float] = {}
    attempts = wasted = lost = 0
    last_end = 0.0
    wakes: set[float] = set()
    slots = spec.backend_slots

    def dispatch(now: float) -> None:
        nonlocal attempts
        free = None if slots is None else slots - len(running)
        for cell, lease in policy.dispatch(now, free):
            att = provider.start(now, cell, lease)
            running[lease.lease_id] = att
            attempts += 1
            first_start.setdefault(cell.cell_id, now)
            heapq.heappush(heap, (att.end, next(seq), _FINISH, (lease.lease_id, att.version)))
        if policy.pending():
            wake = policy.next_wakeup(now)
            if wake is not None and wake not in wakes:
                wakes.add(wake)
                heapq.heappush(heap, (wake, next(seq), _WAKE, None))

    dispatch(0.0)
    while heap:
        now = heap[0][0]
        while heap and heap[0][0] == now:
            _, _, kind, data = heapq.heappop(heap)
            if kind == _WAKE:
                wakes.discard(now)
            elif kind == _AUTH_LOSS:
                assert isinstance(data, AuthLossEvent)
                for doomed in running.values():
                    if doomed.lease.account == data.account and doomed.end > now:
                        doomed.version += 1
                        doomed.end = now + float(rng.uniform(*data.signal_delay_s))
                        doomed.outcome = Outcome.auth_failed("401 credentials revoked")
                        heapq.heappush(heap, (doomed.end, next(seq), _FINISH,
                                              (doomed.lease.lease_id, doomed.version)))
            else:
                assert isinstance(data, tuple)
                lease_id, version = data
                found = running.get(lease_id)
                if found is None or found.version != version:
                    continue
                att = found
                del running[lease_id]
                provider.release(att)
                last_end = max(last_end, now)
                if att.outcome.wasted:
                    wasted += 1
                else:
                    rows[att.cell.cell_id] = rows.get(att.cell.cell_id, 0) + 1
                if policy.finish(now, att.lease, att.outcome) == LOST:
                    lost += 1
        dispatch(now)
    stranded = policy.pending()
    missing = sum(1 for c in workload.cells if c.cell_id not in rows)
    return PolicyResult(
        policy=policy.name, makespan_s=last_end, attempts=attempts, wasted_attempts=wasted,
        cells_lost=max(missing, lost + stranded), rows=sum(rows.values()),
        duplicate_rows=sum(n - 1 for n in rows.values() if n > 1),
        pair_start_gap_s=pair_gaps(workload.cells, first_start))


def pair_gaps(cells: Sequence[CellRef], first_start: dict[str, float]) -> dict[str, float]:
    pairs: dict[tuple[str, int], list[float]] = {}
    for c in cells:
        if c.cell_id in first_start:
            pairs.setdefault(c.pair, []).append(first_start[c.cell_id])
    gaps = sorted(max(v) - min(v) for v in pairs.values() if len(v) > 1)
    if not gaps:
        return {"mean": 0.0, "p95": 0.0, "max": 0.0}
    return {"mean": round(statistics.fmean(gaps), 1),
            "p95": round(gaps[int(0.95 * (len(gaps) - 1))], 1), "max": round(gaps[-1], 1)}
