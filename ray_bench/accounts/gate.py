"""The driver's side of admission on Ray (:class:`ActorGate`): the health gate, the backend
pools and the accounts' actors of :mod:`ray_bench.accounts.actors`, with the one account
choice of :mod:`ray_bench.scheduler.core` in between."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray

from ray_bench.accounts.actors import LEASE_TTL_SEC, account_actor, capacity_actor, health_actor
from ray_bench.accounts.core import AccountSnapshot, Admit, RefusalReason
from ray_bench.accounts.outcome import Outcome
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.scheduler.admission import (
    AccountView,
    ExpiryWatch,
    blocked_until,
    candidate_of,
    outcome_of,
    stalled,
    typical_sec,
    view_of,
)
from ray_bench.scheduler.core import Candidate, LeaseRequest, assign
from ray_bench.state import default_state_root

#: Account snapshots are refreshed at most this often while launching.
SNAPSHOT_TTL_SEC = 0.5


class ActorGate:
    """The driver's side of admission on Ray: health gate, then the backend pool, then the
    accounts chosen from fresh snapshots by the one account choice
    (:func:`~ray_bench.scheduler.core.assign`); one actor call per account starts its share
    atomically."""

    def __init__(self, run_id: str, accounts: list[Account], pools: dict[str, int],
                 state_root: Path | None = None) -> None:
        self.run_id = run_id
        self.accounts_cfg = {a.name: a for a in accounts}
        self.actors = {a.name: account_actor(a, state_root) for a in accounts}
        self.health = health_actor(state_root or default_state_root())
        self.pools = {name: capacity_actor(name, size) for name, size in pools.items()}
        refs = [actor.configure.remote(a.limits.model_dump(mode="json"))
                for a, actor in zip(accounts, self.actors.values(), strict=True)]
        refs += [pool.resize.remote(size) for pool, size in zip(self.pools.values(), pools.values(), strict=True)]
        # configure() answers False when the account is busy: it keeps its limits until idle.
        ray.get(refs)
        # A resumed run's old leases belong to a dead driver.
        ray.get([a.abandon_run.remote(run_id) for a in self.actors.values()]
                + [p.abandon_run.remote(run_id) for p in self.pools.values()])
        self.expiry = ExpiryWatch(accounts)
        self._snaps: dict[str, AccountSnapshot] = {}
        self._holds: dict[str, Any] = {}
        self._fetched = 0.0
        self._renewed = 0.0
        self._pool_of: dict[str, str] = {}
        self._freed: dict[str, int] = {}  # account -> finishes since its last snapshot
        self._finishes: dict[str, list[tuple[str, Outcome | None]]] = {}
        self._pool_releases: dict[str, list[str]] = {}

    def _refresh(self, now: float, force: bool = False) -> None:
        if not force and time.monotonic() - self._fetched < SNAPSHOT_TTL_SEC:
            return
        self.flush()  # the snapshots must include what this driver has released
        names = list(self.actors)
        snaps = ray.get([self.actors[n].snapshot.remote() for n in names] + [self.health.holds.remote()])
        self._freed = {}
        self._holds = snaps.pop()
        self._snaps = dict(zip(names, snaps, strict=True))
        self._fetched = time.monotonic()
        if now - self._renewed > LEASE_TTL_SEC / 4:
            for actor in [*self.actors.values(), *self.pools.values()]:
                actor.renew.remote(self.run_id)
            self._renewed = now

    def acquire_many(self, requests: list[LeaseRequest], now: float,
                     exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
        """Backend pool slots first (one call per pool), then accounts: the cells are spread
        over the accounts by the one account choice from the cached snapshots (an account that finished a
        cell since counts as one slot freer), and each account is asked once for its share;
        what it refuses waits for the next round."""
        self._refresh(now)
        horizon = max(r.horizon_sec for r in requests)
        candidates: list[Candidate] = []
        for name, snap in self._snaps.items():
            if name in exclude or name in self._holds or not self.expiry.admits(name, horizon, now):
                continue
            room = snap.headroom
            if not isinstance(snap.admit, Admit) and snap.admit.reason is RefusalReason.CONCURRENCY:
                room = self._freed.get(name, 0)  # full at the snapshot; cells finished since
            if room > 0:
                candidates.append(candidate_of(snap, self.accounts_cfg[name], room))
        wanted = requests[: sum(c.headroom for c in candidates)]
        if not wanted:
            self.flush()
            return {}
        by_backend: dict[str, list[str]] = {}
        for r in wanted:
            by_backend.setdefault(r.cell.backend, []).append(r.lease_id)
        # Buffered releases and finishes ride along with the acquire calls of the same actor
        # (applied before the acquire); flush() sends what is left to the others.
        pool_refs = {b: self.pools[b].acquire_many.remote(self.run_id, ids, self._pool_releases.pop(b, None))
                     for b, ids in by_backend.items() if b in self.pools}
        pooled = {lease for ids in ray.get(list(pool_refs.values())) for lease in ids}
        pooled |= {lease for b, ids in by_backend.items() if b not in self.pools for lease in ids}
        inpool = [r for r in wanted if r.lease_id in pooled]
        shares = assign(inpool, candidates, typical_sec(inpool))
        names = list(shares)
        answers = ray.get([self.actors[n].acquire_many.remote(self.run_id, [(r.lease_id, r.cell.id) for r in shares[n]],
                                                              self._finishes.pop(n, None))
                           for n in names])
        self.flush()
        granted: dict[str, str] = {}
        for name, (started, snap) in zip(names, answers, strict=True):
            self._snaps[name] = snap
            self._freed.pop(name, None)
            granted.update({lease: name for lease in started})
        by_lease = {r.lease_id: r for r in wanted}
        unused = [lease for lease in pooled if lease not in granted]
        for lease in unused:
            backend = by_lease[lease].cell.backend
            if backend in self.pools:
                self._pool_releases.setdefault(backend, []).append(lease)
        for lease in granted:
            self._pool_of[lease] = by_lease[lease].cell.backend
        return granted

    def release(self, account: str, lease_id: str, verdict: Verdict | None, usd: float, now: float) -> None:
        outcome = None if verdict is None else outcome_of(verdict, usd)
        self._finishes.setdefault(account, []).append((lease_id, outcome))
        self._freed[account] = self._freed.get(account, 0) + 1
        backend = self._pool_of.pop(lease_id, None)
        if backend is not None and backend in self.pools:
            self._pool_releases.setdefault(backend, []).append(lease_id)

    def flush(self) -> None:
        """Send buffered finishes and pool releases (calls from one caller to one actor run in
        order, so a later acquire sees them)."""
        for name, finished in self._finishes.items():
            self.actors[name].finish_many.remote(self.run_id, finished)
        for backend, leases in self._pool_releases.items():
            self.pools[backend].release_many.remote(leases)
        self._finishes = {}
        self._pool_releases = {}

    def blocked_until(self, now: float) -> tuple[float, str] | None:
        self._refresh(now)
        usable = [s for n, s in self._snaps.items() if n not in self._holds]
        return blocked_until(usable, now)

    def stalled(self, now: float, horizon_sec: float = 0.0,
                exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
        self._refresh(now, force=True)
        unusable = self.expiry.refusals(self._snaps, horizon_sec, now)
        unusable |= {n: f"held ({self._holds[n].get('reason', 'operator')})" for n in self._snaps if n in self._holds}
        return stalled(list(self._snaps.values()), unusable, exclude)

    def views(self, now: float) -> list[AccountView]:
        self._refresh(now)
        out = []
        for name, snap in self._snaps.items():
            view = view_of(snap)
            if name in self._holds:
                view = AccountView(name, "held", view.inflight, view.limit, 0.0, self._holds[name]["reason"])
            elif not self.expiry.admits(name, 0.0, now):
                view = AccountView(name, "expired", view.inflight, view.limit, 0.0, "login expired")
            out.append(view)
        return out

    def close(self) -> None:
        self.flush()
        refs = [a.abandon_run.remote(self.run_id) for a in self.actors.values()]
        refs += [p.abandon_run.remote(self.run_id) for p in self.pools.values()]
        ray.get(refs)
