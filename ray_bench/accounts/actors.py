"""The Ray shell around the admission core.

- ``AccountActor`` (one per account, named ``account:<name>``, detached, namespace
  ``ray-bench``): wraps one :class:`~ray_bench.accounts.AccountCore`, so every run started on
  the same accounts shares one budget and the combined in-flight count never exceeds a limit.
  Check and start happen in one actor call, so two drivers cannot both take the last slot.
  Leases are kept per run; a run that stops renewing them (its driver died) loses them after
  :data:`LEASE_TTL_SEC`, and a resumed run abandons its own old leases at once.
- ``HealthActor`` (named ``health``): the operator's word on accounts (hold / release),
  remembered across runs; it gates admission before any account is asked.
- ``CapacityActor`` (one per backend, named ``capacity:<backend>``): sandbox slots of a backend
  pool on this cluster, shared across runs.

The actors use wall-clock time: they outlive any driver and are shared by several.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ray

from ray_bench.accounts.core import (
    AccountCore,
    AccountLimits,
    AccountSnapshot,
    AdmissionRefused,
    Admit,
    Lease,
    RefusalReason,
)
from ray_bench.accounts.holds import read_holds, write_hold
from ray_bench.accounts.outcome import Outcome
from ray_bench.accounts.store import AccountStore
from ray_bench.cells.pool import NAMESPACE
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

#: A run that has not renewed its leases for this long is presumed dead; its slots free up.
LEASE_TTL_SEC = 120.0
#: Driver-side: account snapshots are refreshed at most this often while launching.
SNAPSHOT_TTL_SEC = 0.5


@ray.remote(num_cpus=0, max_restarts=-1)
class AccountActor:
    def __init__(self, name: str, limits: dict[str, Any], state_root: str | None = None) -> None:
        self.name = name
        self._limits_doc = limits
        self._runs: dict[str, float] = {}  # run id -> last renewal
        # The one writer of this account's durable state (windows, cooldowns, disabled, spend).
        self.store = AccountStore(state_root) if state_root else None
        self._events_seen = 0
        self._events_checked = 0.0
        self.core = self._new_core(limits)

    def _new_core(self, limits: dict[str, Any]) -> AccountCore:
        now = time.time()
        core = AccountCore(self.name, _limits(limits), now=now)
        if self.store is not None:
            window = core.limits.window
            saved = self.store.load(self.name, since=now - (window.hours * 3600 if window else 0.0))
            core.spent_usd = saved.spent_usd
            if core.window is not None:
                core.window.restore(saved.starts, saved.spend)
            self._events_seen = saved.events_seen
            if saved.state is not None:
                core.health.restore(saved.state, saved.cooling_until, saved.episodes, saved.auth_failures,
                                    saved.last_error)
        return core

    def _save_health(self) -> None:
        if self.store is not None:
            h = self.core.health
            self.store.save_health(self.name, state=str(h.state), cooling_until=h.cooling_until,
                                   episodes=h.episodes, auth_failures=h.auth_failures, last_error=h.last_error,
                                   events_seen=self._events_seen)

    def _apply_operator_events(self, now: float) -> None:
        """``accounts enable`` writes an event; the actor, the one writer, applies it."""
        if self.store is None or now - self._events_checked < 1.0:
            return
        self._events_checked = now
        for event in self.store.events_after(self.name, self._events_seen):
            self._events_seen = event.seq
            if event.kind == "enable":
                self.core.health.enable()
                self.core.health.refresh()
                self.core.health.last_error = f"enabled by {event.who}: {event.reason}"
                self._save_health()

    def configure(self, limits: dict[str, Any]) -> bool:
        """Adopt new limits when nothing runs on the account; returns whether it did."""
        if limits == self._limits_doc:
            return True
        if self.core.inflight:
            return False
        self._limits_doc = limits
        self.core = self._new_core(limits)
        return True

    def acquire_many(self, run_id: str, leases: list[tuple[str, str]],
                     finished: list[tuple[str, Outcome | None]] | None = None,
                     ) -> tuple[list[str], AccountSnapshot]:
        """Record the run's ``finished`` leases, then start ``leases`` in order while the
        account admits; return the started ones and the fresh snapshot. One call per batch
        and account keeps the actor off the per-cell path (an actor call costs ~1.3 ms of the
        actor's CPU, whatever it carries)."""
        if finished:
            self.finish_many(run_id, finished)
        now = time.time()
        self._expire(now)
        self._apply_operator_events(now)
        self._runs[run_id] = now
        started: list[str] = []
        for lease_id, cell_id in leases:
            try:
                self.core.on_start(now, Lease(lease_id, cell_id, self.name))
            except AdmissionRefused:
                break
            started.append(lease_id)
            if self.store is not None and self.core.window is not None:
                self.store.record_start(self.name, now)
        return started, self.core.snapshot(now)

    def finish_many(self, run_id: str, finished: list[tuple[str, Outcome | None]]) -> None:
        for lease_id, outcome in finished:
            self.finish(run_id, lease_id, outcome)

    def finish(self, run_id: str, lease_id: str, outcome: Outcome | None) -> None:
        now = time.time()
        self._runs[run_id] = now
        if outcome is None:
            self.core.abandon(lease_id)
        else:
            self.core.on_finish(now, Lease(lease_id, "", self.name), outcome)
            if self.store is not None:
                self.store.record_spend(self.name, now, outcome.usd)
                self._save_health()

    def renew(self, run_id: str) -> None:
        self._runs[run_id] = time.time()

    def abandon_run(self, run_id: str) -> int:
        """Free every lease of ``run_id`` (its driver died; it is being resumed)."""
        return sum(self.core.abandon(lease) for lease in self.core.leases() if lease.startswith(f"{run_id}/"))

    def _expire(self, now: float) -> None:
        for run_id, seen in list(self._runs.items()):
            if now - seen > LEASE_TTL_SEC:
                self.abandon_run(run_id)
                del self._runs[run_id]

    def snapshot(self) -> AccountSnapshot:
        now = time.time()
        self._expire(now)
        self._apply_operator_events(now)
        return self.core.snapshot(now)


@ray.remote(num_cpus=0, max_restarts=-1)
class HealthActor:
    """The operator's word on accounts (holds), checked before any account is asked. Holds
    live in the state root's file, so they survive this actor, clusters and restarts."""

    def __init__(self, state_root: str) -> None:
        self.state_root = Path(state_root)

    def hold(self, account: str, reason: str) -> None:
        write_hold(self.state_root, account, hold=True, reason=reason)

    def release(self, account: str) -> bool:
        return write_hold(self.state_root, account, hold=False)

    def holds(self) -> dict[str, dict[str, Any]]:
        return read_holds(self.state_root)


@ray.remote(num_cpus=0, max_restarts=-1)
class CapacityActor:
    """Slots of one backend pool, shared by every run on the cluster."""

    def __init__(self, backend: str, size: int) -> None:
        self.backend = backend
        self.size = size
        self._leases: dict[str, tuple[str, float]] = {}  # lease -> (run, since)
        self._runs: dict[str, float] = {}

    def resize(self, size: int) -> None:
        self.size = size

    def acquire_many(self, run_id: str, lease_ids: list[str], released: list[str] | None = None) -> list[str]:
        """Free ``released`` first, then take a slot for each of ``lease_ids`` while any is left
        (runs silent for LEASE_TTL_SEC lose theirs first)."""
        self.release_many(released or [])
        now = time.time()
        for run, seen in list(self._runs.items()):
            if now - seen > LEASE_TTL_SEC:
                self.abandon_run(run)
        self._runs[run_id] = now
        taken = lease_ids[: max(0, self.size - len(self._leases))]
        self._leases.update((lease, (run_id, now)) for lease in taken)
        return taken

    def release_many(self, lease_ids: list[str]) -> None:
        for lease in lease_ids:
            self._leases.pop(lease, None)

    def renew(self, run_id: str) -> None:
        self._runs[run_id] = time.time()

    def abandon_run(self, run_id: str) -> int:
        mine = [lease for lease, (run, _) in self._leases.items() if run == run_id]
        for lease in mine:
            del self._leases[lease]
        self._runs.pop(run_id, None)
        return len(mine)

    def usage(self) -> tuple[int, int]:
        return len(self._leases), self.size


def _limits(doc: dict[str, Any]) -> AccountLimits:
    from ray_bench.models.accounts import AccountLimits as LimitsModel

    return AccountLimits.from_config(LimitsModel.model_validate(doc))


#: Admission actors live on the head node. Anywhere else, losing that worker node made every
#: admission call fail (ActorUnavailableError) until Ray restarted the actor elsewhere, with
#: its leases and cooldowns lost; the head's loss ends the cluster anyway.
#: (tests/reliability/test_node_loss.py)
ON_HEAD = {"node:__internal_head__": 0.001}


def account_actor(account: Account, state_root: Path | None = None) -> Any:
    return AccountActor.options(  # type: ignore[attr-defined]
        name=f"account:{account.name}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        resources=ON_HEAD,
    ).remote(account.name, account.limits.model_dump(mode="json"), str(state_root or default_state_root()))


def health_actor(state_root: Path) -> Any:
    return HealthActor.options(  # type: ignore[attr-defined]
        name=f"health:{state_root}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        resources=ON_HEAD,
    ).remote(str(state_root))


def capacity_actor(backend: str, size: int) -> Any:
    return CapacityActor.options(  # type: ignore[attr-defined]
        name=f"capacity:{backend}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        resources=ON_HEAD,
    ).remote(backend, size)


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
