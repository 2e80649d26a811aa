"""What the admission actor of a state root keeps (:class:`~ray_bench.onray.admission.AdmissionActor`,
the Ray shell: one per state root, detached, in namespace ``ray-bench``, named
``admission@<state root>``, placed on the head node). Plain classes, testable without Ray (as
Ray's own ``util/queue.py`` keeps its actor a plain class). Three kinds of keeper, each made on
the first call that names it:

- :class:`AccountGrants`, one per account: wraps one :class:`~ray_bench.accounts.AccountCore`,
  so every run started on the same accounts shares one budget and the combined in-flight count
  never exceeds a limit. Check and start happen in one actor call, so two drivers on one
  cluster cannot both take the last slot; and every grant is one transaction on the state
  root's ``accounts.sqlite`` (:meth:`~ray_bench.accounts.store.AccountStore.granting`), so runs
  on two Ray instances share the limits too (tests/accounts/test_two_rays_share_limits.py).
  Leases are kept per run; a run that stops renewing them (its driver died) loses them after
  :data:`LEASE_TTL_SEC`, and a resumed run abandons its own old leases at once. Because held
  leases live in the state root, a keeper remade after the actor's process died still holds
  their slots (tests/onray/test_gate_restart_ray.py).
- :class:`Holds`: the operator's word on accounts (hold / release), remembered across runs; it
  gates admission before any account is asked.
- :class:`PoolSlots`, one per backend: sandbox slots of a backend pool, shared across runs;
  held slots are written to the state root too.

One process for all of them, not one per account: each Ray actor is a Python process that
imports Ray and ray-bench before its first answer, and a run's start waited for every one of
them (35 s of an 87 s one-task ``execute`` at load 5, py-spy; four such processes took 9.5 s
against 1.1 s for one at load 10). Every keeper's state is in the state root, so one process
loses nothing by serving them all, and its calls, each a short SQLite transaction, are served
in the order each driver sent them.

The keepers use wall-clock time: they outlive any driver and are shared by several. The
driver's side of them is :class:`~ray_bench.onray.gate.ActorGate`, which calls a keeper
through a :class:`~ray_bench.onray.admission.Member` as it would call an actor.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from ray_bench.accounts.core import (
    AccountCore,
    AccountSnapshot,
    AdmissionRefused,
    Lease,
)
from ray_bench.accounts.health import PROBE_EVENT_PREFIX, probe_effect_of
from ray_bench.accounts.holds import read_holds, write_hold
from ray_bench.accounts.limits import window_seconds
from ray_bench.accounts.outcome import Outcome
from ray_bench.accounts.store import AccountStore, HeldLease, restored_core
from ray_bench.models.accounts import AccountLimits

#: A run that has not renewed its leases for this long is presumed dead; its slots free up.
#: A lease ends with its cell (the finish deletes it); this is only for a driver that died
#: holding some. Its gate renews every :data:`RENEW_SEC` and its loop reaches the gate at least
#: once a second, so 30 s is six renewals missed: a live driver keeps its leases through a
#: loaded host's pauses, and a dead one's slots are back within half a minute (it was 120 s,
#: and a second run on another Ray waited that long with the account idle).
LEASE_TTL_SEC = 30.0
#: How often a gate renews its run's leases.
RENEW_SEC = 5.0


class AccountGrants:
    """One account's admission on a state root: its :class:`AccountCore`, granting through the
    state root's ``accounts.sqlite``."""

    def __init__(self, name: str, limits: AccountLimits, state_root: str | None = None) -> None:
        self.name = name
        self._runs: dict[str, float] = {}  # run id -> last renewal
        # The one writer of this account's durable state (windows, cooldowns, disabled, spend, leases).
        self.store = AccountStore(state_root) if state_root else None
        self._events_seen = 0
        self._events_checked = 0.0
        #: This keeper, as the health rows it writes name it: another run's are taken up.
        self._writer = uuid.uuid4().hex
        self.core = self._new_core(limits)

    def _new_core(self, limits: AccountLimits) -> AccountCore:
        now = time.time()
        core, saved = restored_core(self.name, limits, self.store, now)
        if self.store is not None:
            # Slots held when the earlier actor died are in the state root: held still, until
            # their run finishes, abandons or stops renewing them (renewed_at + LEASE_TTL_SEC).
            self._events_seen = saved.events_seen
        return core

    def _since(self, now: float) -> float:
        return now - window_seconds(self.core.limits)

    def _share(self, now: float) -> None:
        """Take up what every run on the state root holds of the account now (a read)."""
        if self.store is not None:
            self.core.share(self.store.shared(self.name, now, since=self._since(now), ttl=LEASE_TTL_SEC))
            self._take_up_health(now)

    def _take_up_health(self, now: float) -> None:
        """Health is shared through the state root as limits are: a cooldown or a disabled login
        another run's keeper of this account saved (another Ray on the same state root) holds
        here too, where it is stricter (:meth:`~ray_bench.accounts.health.AccountHealth.adopt`)."""
        row = self.store.stored_health(self.name) if self.store is not None else None
        if row is None or row.writer in ("", self._writer):
            return
        self.core.health.tick(now)
        self.core.health.adopt(row.state, row.cooling_until, row.last_error, now,
                               inert_too=row.events_seen >= self._events_seen)

    def _save_health(self) -> None:
        if self.store is not None:
            self._take_up_health(time.time())  # never overwrite a stricter word with a laxer one
            h = self.core.health
            self.store.save_health(self.name, state=str(h.state), cooling_until=h.cooling_until,
                                   episodes=h.episodes, auth_failures=h.auth_failures, last_error=h.last_error,
                                   events_seen=self._events_seen, writer=self._writer)

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
            elif event.kind.startswith(PROBE_EVENT_PREFIX):  # a driver's account probe
                effect = probe_effect_of(event.kind)
                if effect is not None and self.core.health.on_probe(now, effect, detail=event.reason):
                    self._save_health()

    def configure(self, limits: AccountLimits) -> bool:
        """Adopt new limits when nothing runs on the account; returns whether it did."""
        if limits == self.core.limits:
            return True
        self._share(time.time())
        if self.core.inflight:
            return False
        self.core = self._new_core(limits)
        return True

    def acquire_many(self, run_id: str, leases: list[tuple[str, str, float]],
                     finished: list[tuple[str, Outcome | None]] | None = None,
                     ) -> tuple[list[str], AccountSnapshot]:
        """Record the run's ``finished`` leases, then start ``leases`` (lease, cell, expected
        cost) in order while the account admits; return the started ones and the fresh snapshot. One call per batch
        and account keeps the actor off the per-cell path (an actor call costs ~1.3 ms of the
        actor's CPU, whatever it carries)."""
        if finished:
            self.finish_many(run_id, finished)
        now = time.time()
        self._expire(now)
        self._apply_operator_events(now)
        self._runs[run_id] = now
        if self.store is None:
            return self._start(now, leases), self.core.snapshot(now)
        store = self.store
        # One grant, one transaction: what every run on the state root holds, the core's
        # decision on it, and the starts written down, before any other grantor may look.
        with store.granting(self.name, now, since=self._since(now), ttl=LEASE_TTL_SEC) as shared:
            self.core.share(shared)
            self._take_up_health(now)
            store.renew(self.name, run_id, now)
            started = self._start(now, leases)
            if self.core.window is not None:
                for _ in started:
                    store.record_start(self.name, now)
            store.hold_leases(self.name, [HeldLease(lease, run_id, held) for lease in started
                                          if (held := self.core.running(lease)) is not None], now)
            if started and not self.core.bucket.unlimited:
                store.save_bucket(self.name, *self.core.bucket.level())
        return started, self.core.snapshot(now)

    def _start(self, now: float, leases: list[tuple[str, str, float]]) -> list[str]:
        """Start ``leases`` in order while the core admits them (the core's one step)."""
        started: list[str] = []
        for lease_id, cell_id, usd in leases:
            try:
                self.core.on_start(now, Lease(lease_id, cell_id, self.name, usd))
            except AdmissionRefused:
                break
            started.append(lease_id)
        return started

    def finish_many(self, run_id: str, finished: list[tuple[str, Outcome | None]]) -> None:
        for lease_id, outcome in finished:
            self._finish(run_id, lease_id, outcome)
        if self.store is not None:
            self.store.drop_leases(self.name, [lease for lease, _ in finished])

    def _finish(self, run_id: str, lease_id: str, outcome: Outcome | None) -> None:
        now = time.time()
        self._runs[run_id] = now
        if outcome is None:
            self.core.abandon(lease_id)
        else:
            self.core.on_finish(now, Lease(lease_id, "", self.name), outcome)
            if self.store is not None:
                self.store.record_spend(self.name, now, outcome.usd, outcome.usd_bound)
                self._save_health()

    def renew(self, run_id: str) -> None:
        now = time.time()
        self._runs[run_id] = now
        if self.store is not None:
            self.store.renew(self.name, run_id, now)

    def abandon_run(self, run_id: str) -> int:
        """Free every lease of ``run_id`` (its driver died; it is being resumed)."""
        mine = [lease for lease in self.core.leases() if lease.startswith(f"{run_id}/")]
        for lease in mine:
            self.core.abandon(lease)
        if self.store is not None:  # also those another Ray's actor granted the run
            return self.store.drop_run(self.name, run_id)
        return len(mine)

    def other_hosts(self) -> list[str]:
        """Other machines whose Ray grants this account's leases through this state root right
        now (see :meth:`AccountStore.other_hosts`); the gate refuses to run beside them."""
        return self.store.other_hosts(time.time(), LEASE_TTL_SEC) if self.store is not None else []

    def _expire(self, now: float) -> None:
        """Without a state root, a run silent for :data:`LEASE_TTL_SEC` loses its leases here
        (with one, the grant expires them by their ``renewed_at``: every run's, not only the
        ones this actor heard from)."""
        if self.store is not None:
            return
        for run_id, seen in list(self._runs.items()):
            if now - seen > LEASE_TTL_SEC:
                self.abandon_run(run_id)
                del self._runs[run_id]

    def snapshot(self) -> AccountSnapshot:
        now = time.time()
        self._expire(now)
        self._apply_operator_events(now)
        self._share(now)
        return self.core.snapshot(now)


class Holds:
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


class PoolSlots:
    """Slots of one backend pool, shared by every run on the state root: taken in one
    transaction on its ``pool_slots`` (:meth:`AccountStore.pool_granting`), as an account's
    leases are, so a restarted actor still counts the sandboxes running and the pool actor of
    another Ray instance sees them too, and frees them the moment their run releases them."""

    def __init__(self, backend: str, size: int, state_root: str | None = None) -> None:
        self.backend = backend
        self.size = size
        self.store = AccountStore(state_root) if state_root else None
        # lease -> (run, since): without a state root, runs silent for LEASE_TTL_SEC lose theirs
        self._leases: dict[str, tuple[str, float]] = {}
        self._runs: dict[str, float] = {}

    def resize(self, size: int) -> None:
        self.size = size

    def acquire_many(self, run_id: str, lease_ids: list[str], released: list[str] | None = None) -> list[str]:
        """Free ``released`` first, then take a slot for each of ``lease_ids`` while any is left
        (runs silent for LEASE_TTL_SEC lose theirs first)."""
        self.release_many(released or [])
        now = time.time()
        if self.store is None:
            for run, seen in list(self._runs.items()):
                if now - seen > LEASE_TTL_SEC:
                    self.abandon_run(run)
            self._runs[run_id] = now
            taken = lease_ids[: max(0, self.size - len(self._leases))]
            self._leases.update((lease, (run_id, now)) for lease in taken)
            return taken
        with self.store.pool_granting(self.backend, now, ttl=LEASE_TTL_SEC) as held:
            self.store.renew_slots(self.backend, run_id, now)
            taken = lease_ids[: max(0, self.size - len(held))]
            self.store.hold_slots(self.backend, run_id, taken, now)
        return taken

    def release_many(self, lease_ids: list[str]) -> None:
        for lease in lease_ids:
            self._leases.pop(lease, None)
        if self.store is not None and lease_ids:
            self.store.drop_slots(self.backend, lease_ids)

    def renew(self, run_id: str) -> None:
        now = time.time()
        self._runs[run_id] = now
        if self.store is not None:
            self.store.renew_slots(self.backend, run_id, now)

    def abandon_run(self, run_id: str) -> int:
        mine = [lease for lease, (run, _) in self._leases.items() if run == run_id]
        for lease in mine:
            self._leases.pop(lease, None)
        self._runs.pop(run_id, None)
        if self.store is not None:
            return self.store.drop_run_slots(self.backend, run_id)
        return len(mine)

    def usage(self) -> tuple[int, int]:
        if self.store is not None:
            return len(self.store.slots(self.backend, time.time() - LEASE_TTL_SEC)), self.size
        return len(self._leases), self.size


#: What an admission actor keeps, by kind; each is made from the arguments its calls carry.
KEEPERS: dict[str, type[AccountGrants] | type[Holds] | type[PoolSlots]] = {
    "account": AccountGrants, "health": Holds, "capacity": PoolSlots}
