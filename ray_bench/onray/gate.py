"""The driver's side of admission on Ray (:class:`ActorGate`): the health gate, the backend
pools and the accounts' actors of :mod:`ray_bench.accounts.keepers`, with the one account
choice of :mod:`ray_bench.scheduler.core` in between.

An admission actor's process can die with a call in flight; Ray restarts it (``max_restarts``)
and the call raises :class:`~ray.exceptions.RayActorError`. The gate survives that: a read is
asked again; an acquire that died is taken as granting nothing, and the leases it asked for,
and the finishes and releases that rode along, are sent again to the restarted actor (a lease
it may have started before dying is freed, never used; a finish it may already have learnt
from is learnt twice, which errs towards caution: spend counted twice, never missed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from ray_bench.accounts.core import AccountSnapshot, Admit, RefusalReason
from ray_bench.accounts.keepers import RENEW_SEC
from ray_bench.accounts.outcome import Outcome
from ray_bench.errors import AdmissionActorError, UserInputError
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.models.plan import Plan
from ray_bench.onray.admission import account_member, admission_actor, capacity_member, health_member
from ray_bench.scheduler.admission import (
    AccountView,
    ExpiryWatch,
    blocked_until,
    candidate_of,
    judges_of,
    judges_stalled,
    live_accounts,
    released_outcome,
    stalled,
    typical_sec,
    view_of,
)
from ray_bench.scheduler.core import Candidate, LeaseRequest, assign, judge_lease, judge_leases
from ray_bench.state import default_state_root

log = logging.getLogger(__name__)

#: Account snapshots are refreshed at most this often while launching.
SNAPSHOT_TTL_SEC = 0.5
#: How long a read waits for an actor that died on it to be back (Ray restarts it; a new
#: process takes seconds on a loaded machine).
RESTART_WAIT_SEC = 60.0


def settle(refs: list[Any]) -> list[Any]:
    """Every call's answer, or the :class:`RayActorError` of an actor that died holding it."""
    out: list[Any] = []
    for ref in refs:
        try:
            out.append(ray.get(ref))
        except RayActorError as exc:
            out.append(exc)
    return out


def ask(calls: list[tuple[str, Any]]) -> list[Any]:
    """Answers to ``(what, call)`` reads (``call()`` submits one), each asked again while its
    actor is dead, for up to :data:`RESTART_WAIT_SEC`."""
    answers = settle([call() for _, call in calls])
    pauses = backoff()
    while again := [i for i, a in enumerate(answers) if isinstance(a, RayActorError)]:
        if not next(pauses):
            raise AdmissionActorError(
                f"the {calls[again[0]][0]} actor was not back {RESTART_WAIT_SEC:g} s after it died "
                f"({type(answers[again[0]]).__name__}); resume the run once the cluster is healthy")
        for i, answer in zip(again, settle([calls[i][1]() for i in again]), strict=True):
            answers[i] = answer
    return answers


def backoff() -> Iterator[bool]:
    """Sleeps of 0.2 s doubling to 2 s, each yielding True, until :data:`RESTART_WAIT_SEC`
    have passed; then False (give up)."""
    deadline = time.monotonic() + RESTART_WAIT_SEC
    pause = 0.2
    while time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(2 * pause, 2.0)
        yield True
    while True:
        yield False


def refuse_other_hosts(answers: list[list[str]], state_root: Path) -> None:
    """Refuse to run where the limits cannot be shared: account leases are granted through the
    state root's SQLite file, whose locks hold between processes of one host only, and another
    host's Ray is granting through it now (the state root is on a network filesystem). Runs on
    several hosts share limits by joining one cluster, whose account actors grant for all."""
    hosts = sorted({host for answer in answers for host in answer})
    if hosts:
        raise UserInputError(
            f"the state root is used right now by a Ray instance on another host ({hosts[0].split(':')[0]}): "
            "account limits cannot be shared across hosts through its accounts.sqlite",
            where=str(state_root),
            fix="join that host's cluster (`ray-bench execute ... --address ADDR`), so that one cluster grants "
                "every run's leases")


class ActorGate:
    """The driver's side of admission on Ray: health gate, then the backend pool, then the
    accounts chosen from fresh snapshots by the one account choice
    (:func:`~ray_bench.scheduler.core.assign`); one actor call per account starts its share
    atomically."""

    def __init__(self, run_id: str, accounts: list[Account], pools: dict[str, int],
                 state_root: Path | None = None) -> None:
        self.run_id = run_id
        self.accounts_cfg = {a.name: a for a in accounts}
        admission = admission_actor(state_root)  # the state root's one actor process
        self.actors = {a.name: account_member(admission, a, state_root) for a in accounts}
        self.health = health_member(admission, state_root or default_state_root())
        self.pools = {name: capacity_member(admission, name, size, state_root) for name, size in pools.items()}
        # configure() answers False when the account is busy: it keeps its limits until idle.
        ask([(f"account:{a.name}", lambda actor=actor, a=a: actor.configure.remote(a.limits))
             for a, actor in zip(accounts, self.actors.values(), strict=True)]
            + [(f"capacity:{b}", lambda pool=pool, size=size: pool.resize.remote(size))
               for (b, pool), size in zip(self.pools.items(), pools.values(), strict=True)])
        refuse_other_hosts(ask([(f"account:{n}", actor.other_hosts.remote) for n, actor in self.actors.items()]),
                           state_root or default_state_root())
        # A resumed run's old leases belong to a dead driver.
        self._abandon_all()
        self.expiry = ExpiryWatch(accounts)
        self._snaps: dict[str, AccountSnapshot] = {}
        self._holds: dict[str, Any] = {}
        self._fetched = 0.0
        self._renewed = 0.0
        self._pool_of: dict[str, str] = {}
        self._judges: dict[str, str] = {}  # lease -> the judge account it holds a lease on too
        self._freed: dict[str, int] = {}  # account -> finishes since its last snapshot
        self._finishes: dict[str, list[tuple[str, Outcome | None]]] = {}
        self._pool_releases: dict[str, list[str]] = {}
        self._unconfirmed: list[tuple[Any, str, Any]] = []  # (ref, account or capacity:<backend>, payload)

    def _refresh(self, now: float, force: bool = False) -> None:
        if not force and time.monotonic() - self._fetched < SNAPSHOT_TTL_SEC:
            return
        self.flush()  # the snapshots must include what this driver has released
        names = list(self.actors)
        snaps = ask([(f"account:{n}", self.actors[n].snapshot.remote) for n in names]
                    + [("health", self.health.holds.remote)])
        self._freed = {}
        self._holds = snaps.pop()
        self._snaps = dict(zip(names, snaps, strict=True))
        self._fetched = time.monotonic()
        if now - self._renewed > RENEW_SEC:
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
            if name in exclude or not self.expiry.admits(name, horizon, now):
                continue
            if (room := self._room(name)) > 0:
                candidates.append(candidate_of(snap, self.accounts_cfg[name], room))
        # a shunning request may wait for a busy account: it holds no account's room
        wanted = requests[: sum(c.headroom for c in candidates) + sum(r.shun for r in requests)]
        if not wanted:
            self.flush()
            return {}
        by_backend: dict[str, list[str]] = {}
        for r in wanted:
            by_backend.setdefault(r.cell.backend, []).append(r.lease_id)
        # Buffered releases and finishes ride along with the acquire calls of the same actor
        # (applied before the acquire); flush() sends what is left to the others.
        sent_releases = {b: self._pool_releases.pop(b, None) for b in by_backend if b in self.pools}
        pool_refs = {b: self.pools[b].acquire_many.remote(self.run_id, by_backend[b], released)
                     for b, released in sent_releases.items()}
        pooled: set[str] = set()
        for b, answer in zip(pool_refs, settle(list(pool_refs.values())), strict=True):
            if isinstance(answer, RayActorError):  # nothing taken; whatever it took, freed again
                self._pool_releases.setdefault(b, []).extend([*(sent_releases[b] or []), *by_backend[b]])
            else:
                pooled.update(answer)
        pooled |= {lease for b, ids in by_backend.items() if b not in self.pools for lease in ids}
        inpool = [r for r in wanted if r.lease_id in pooled]
        live = live_accounts({n: str(s.state) for n, s in self._snaps.items()}, lambda n: n not in exclude
                             and n not in self._holds and self.expiry.admits(n, horizon, now))
        judge_room = {j: self._room(j) for j in judges_of(inpool) if j in self._snaps}
        shares = assign(inpool, candidates, typical_sec(inpool), live, judge_room)
        judged = self._start_judges(judge_leases(shares))  # first: a cell starts with both or neither
        shares = {n: [r for r in share if r.judge in (None, n) or r.lease_id in judged]
                  for n, share in shares.items()}
        names = [n for n, share in shares.items() if share]
        sent = {n: self._finishes.pop(n, None) for n in names}
        answers = settle([self.actors[n].acquire_many.remote(
            self.run_id, [(r.lease_id, r.cell.id, r.expected_usd) for r in shares[n]], sent[n]) for n in names])
        granted: dict[str, str] = {}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, RayActorError):
                # Nothing started; what it may have started is freed, what rode along is sent again.
                self._finishes.setdefault(name, []).extend(
                    [*(sent[name] or []), *((r.lease_id, None) for r in shares[name])])
                self._fetched = 0.0  # its snapshot is stale: ask the restarted actor
                continue
            started, snap = answer
            self._snaps[name] = snap
            self._freed.pop(name, None)
            granted.update({lease: name for lease in started})
        for lease, judge in judged.items():
            if lease in granted:
                self._judges[lease] = judge
            else:  # its own account refused it after all: the judge's slot is given back
                self._finish(judge, judge_lease(lease), None)
        self.flush()
        by_lease = {r.lease_id: r for r in wanted}
        unused = [lease for lease in pooled if lease not in granted]
        for lease in unused:
            backend = by_lease[lease].cell.backend
            if backend in self.pools:
                self._pool_releases.setdefault(backend, []).append(lease)
        for lease in granted:
            self._pool_of[lease] = by_lease[lease].cell.backend
        return granted

    def _room(self, name: str) -> int:
        """The slots ``name`` has free as the cached snapshot and the finishes since say (none
        while the operator holds it)."""
        snap = self._snaps[name]
        if name in self._holds:
            return 0
        if not isinstance(snap.admit, Admit) and snap.admit.reason is RefusalReason.CONCURRENCY:
            return self._freed.get(name, 0)  # full at the snapshot; cells finished since
        return snap.headroom

    def _start_judges(self, wanted: dict[str, list[LeaseRequest]]) -> dict[str, str]:
        """Start the judge leases of ``wanted`` (judge account -> requests), one call per
        account, in order while it admits; lease id -> judge account of those started."""
        names = list(wanted)
        sent = {n: self._finishes.pop(n, None) for n in names}
        answers = settle([self.actors[n].acquire_many.remote(
            self.run_id, [(judge_lease(r.lease_id), r.cell.id, 0.0) for r in wanted[n]], sent[n]) for n in names])
        judged: dict[str, str] = {}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, RayActorError):  # as for a cell's own lease: freed, sent again
                self._finishes.setdefault(name, []).extend(
                    [*(sent[name] or []), *((judge_lease(r.lease_id), None) for r in wanted[name])])
                self._fetched = 0.0
                continue
            started, snap = answer
            self._snaps[name] = snap
            self._freed.pop(name, None)
            by_id = {judge_lease(r.lease_id): r.lease_id for r in wanted[name]}
            judged.update({by_id[lease]: name for lease in started})
        return judged

    def _finish(self, account: str, lease_id: str, outcome: Outcome | None) -> None:
        self._finishes.setdefault(account, []).append((lease_id, outcome))
        self._freed[account] = self._freed.get(account, 0) + 1

    def release(self, account: str, lease_id: str, verdict: Verdict | None, usd: float, now: float,
                usd_bound: str = "exact") -> None:
        self._finish(account, lease_id, released_outcome(verdict, usd, usd_bound))
        judge = self._judges.pop(lease_id, None)
        if judge is not None:  # its verifier's slot: judged by no one, charged nothing
            self._finish(judge, judge_lease(lease_id), None)
        backend = self._pool_of.pop(lease_id, None)
        if backend is not None and backend in self.pools:
            self._pool_releases.setdefault(backend, []).append(lease_id)

    def flush(self, wait: bool = False) -> None:
        """Send buffered finishes and pool releases (calls from one caller to one actor run in
        order, so a later acquire sees them). They are not waited for; one whose actor died
        holding it is sent again at a later flush (:meth:`_confirm`). ``wait``: until every
        send is acknowledged, sending again while an actor restarts."""
        self._confirm()
        self._send()
        pauses = backoff()
        while wait:
            self._confirm(wait=True)
            if not (self._finishes or self._pool_releases):
                return
            if not next(pauses):
                raise AdmissionActorError(f"finishes not acknowledged {RESTART_WAIT_SEC:g} s after an admission "
                                          "actor died; resume the run once the cluster is healthy")
            self._send()

    def _send(self) -> None:
        for name, finished in self._finishes.items():
            self._unconfirmed.append((self.actors[name].finish_many.remote(self.run_id, finished), name, finished))
        for backend, leases in self._pool_releases.items():
            self._unconfirmed.append((self.pools[backend].release_many.remote(leases), f"capacity:{backend}", leases))
        self._finishes = {}
        self._pool_releases = {}

    def _confirm(self, wait: bool = False) -> None:
        """Look at the sends not yet confirmed: a done one is forgotten, one whose actor died
        holding it goes back to its buffer (``wait``: wait for all of them first)."""
        if not self._unconfirmed:
            return
        refs = [ref for ref, _, _ in self._unconfirmed]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=None if wait else 0, fetch_local=False)
        finished = set(done)
        pending = []
        for item in self._unconfirmed:
            ref, target, payload = item
            if ref not in finished:
                pending.append(item)
            elif isinstance(settle([ref])[0], RayActorError):
                if target.startswith("capacity:"):
                    self._pool_releases.setdefault(target.removeprefix("capacity:"), []).extend(payload)
                else:
                    self._finishes.setdefault(target, []).extend(payload)
        self._unconfirmed = pending

    def blocked_until(self, now: float) -> tuple[float, str] | None:
        self._refresh(now)
        usable = [s for n, s in self._snaps.items() if n not in self._holds]
        return blocked_until(usable, now)

    def stalled(self, now: float, horizon_sec: float = 0.0, exclude: set[str] | frozenset[str] = frozenset(),
                judges: frozenset[str] = frozenset()) -> str | None:
        self._refresh(now, force=True)
        unusable = self.expiry.refusals(self._snaps, horizon_sec, now)
        held = {n: f"held ({self._holds[n].get('reason', 'operator')})" for n in self._snaps if n in self._holds}
        return (stalled(list(self._snaps.values()), unusable | held, exclude)
                or judges_stalled(self._snaps, judges, held))

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

    def _abandon_all(self) -> None:
        ask([(f"account:{n}", lambda a=a: a.abandon_run.remote(self.run_id)) for n, a in self.actors.items()]
            + [(f"capacity:{b}", lambda p=p: p.abandon_run.remote(self.run_id)) for b, p in self.pools.items()])

    def close(self) -> None:
        """Every finish learnt (spend recorded), then the run's leases let go. An actor that
        does not come back is logged, not raised: the run's ledger is whole, and leases the
        run stops renewing free themselves after :data:`~ray_bench.accounts.keepers.LEASE_TTL_SEC`."""
        try:
            self.flush(wait=True)
            self._abandon_all()
        except AdmissionActorError as exc:
            log.warning("closing admission for run %s: %s", self.run_id, exc)


def actor_gate(plan: Plan, state_root: Path | None = None) -> ActorGate:
    """The gate of a run of ``plan`` on the cluster this process joined: its accounts and its
    backends' pools, admitted by the admission actor of ``state_root``."""
    return ActorGate(plan.run_id, plan.accounts, dict(plan.capacity.backend_pools), state_root=state_root)
