"""Account limits shared through the state root, without Ray: two account actors (the plain
classes that Ray wraps, each with its own SQLite connection, as two ``execute``s with their own
local Ray have) grant through one ``accounts.sqlite`` and never exceed a limit together; a grant
that loses the race sees the winner's lease; a dead run's lease expires by its renewal time."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.shared_limits import drive_grants

from ray_bench.accounts import store as store_module
from ray_bench.accounts.core import Running
from ray_bench.accounts.keepers import LEASE_TTL_SEC, AccountGrants, PoolSlots
from ray_bench.accounts.outcome import Outcome
from ray_bench.accounts.store import AccountStore, HeldLease
from ray_bench.errors import UserInputError
from ray_bench.models.accounts import AccountLimits
from ray_bench.onray.gate import refuse_other_hosts

NAME = "acct-shared"


def _actor(root: Path, **limits: Any) -> Any:
    """An account actor as a Ray worker holds it (its own connection to the state root)."""
    cls = AccountGrants
    return cls(NAME, AccountLimits.model_validate({"max_concurrent": 2, **limits}), str(root))


def _take(actor: Any, run: str, n: int, usd: float = 0.0) -> list[str]:
    started, _ = actor.acquire_many(run, [(f"{run}/c{i}#{time.monotonic_ns()}", f"c{i}", usd) for i in range(n)])
    return list(started)


def test_two_grantors_on_one_state_root_share_the_slots(tmp_path: Path) -> None:
    one, two = _actor(tmp_path), _actor(tmp_path)
    first = _take(one, "run-a", 2)
    assert len(first) == 2
    assert _take(two, "run-b", 2) == []  # the other Ray's actor sees run-a's two leases
    assert two.snapshot().inflight == 2
    # The moment a cell ends its lease is free, for the other grantor too (no TTL to wait).
    one.finish_many("run-a", [(first[0], Outcome.success())])
    assert len(_take(two, "run-b", 2)) == 1
    assert one.snapshot().inflight == 2 and two.snapshot().inflight == 2


def test_racing_grantors_never_exceed_the_limit_together(tmp_path: Path) -> None:
    """Threads on their own connections, each granting and finishing as fast as it can: the
    leases held at any moment (read after every grant) never pass the limit."""
    actors = [_actor(tmp_path, max_concurrent=3) for _ in range(4)]
    peaks: list[int] = []
    errors: list[BaseException] = []

    def churn(i: int) -> None:
        try:
            mine: list[str] = []
            for _ in range(40):
                mine += _take(actors[i], f"run-{i}", 2)
                peaks.append(len(AccountStore(tmp_path).load(NAME, since=0.0).leases))
                if mine:
                    actors[i].finish_many(f"run-{i}", [(mine.pop(0), Outcome.success())])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert max(peaks) == 3  # the limit was reached, never passed
    assert all(p <= 3 for p in peaks)


def test_a_grant_that_loses_the_race_waits_and_sees_the_winners_lease(tmp_path: Path) -> None:
    winner, loser = AccountStore(tmp_path), AccountStore(tmp_path)
    now = time.time()
    seen: list[set[str]] = []
    with winner.granting(NAME, now, since=0.0, ttl=LEASE_TTL_SEC) as shared:
        assert shared.leases == {}
        winner.hold_leases(NAME, [HeldLease("run-a/c1#0", "run-a", Running(now, 0, False))], now)

        def grant() -> None:
            with loser.granting(NAME, time.time(), since=0.0, ttl=LEASE_TTL_SEC) as other:
                seen.append(set(other.leases))

        thread = threading.Thread(target=grant)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # BEGIN IMMEDIATE: the second grant waits for the first
    thread.join()
    assert seen == [{"run-a/c1#0"}]


def test_a_failed_grant_writes_nothing(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    now = time.time()

    def grant_then_die() -> None:
        with store.granting(NAME, now, since=0.0, ttl=LEASE_TTL_SEC):
            store.hold_leases(NAME, [HeldLease("run-a/c1#0", "run-a", Running(now, 0, False))], now)
            store.record_start(NAME, now)
            raise RuntimeError("the grantor died between grant and start")

    with pytest.raises(RuntimeError):
        grant_then_die()
    saved = AccountStore(tmp_path).load(NAME, since=0.0)
    assert saved.leases == [] and saved.starts == []


def test_a_dead_runs_lease_expires_by_its_renewal_not_before(tmp_path: Path) -> None:
    """A driver that was granted a lease and died before its cell started (or while it ran)
    renews nothing: the slot is back one TTL after its last renewal, and not while renewed."""
    store = AccountStore(tmp_path)
    actor = _actor(tmp_path, max_concurrent=1)
    now = time.time()
    store.hold_leases(NAME, [HeldLease("dead/c1#0", "dead", Running(now - 100, 0, False))],
                      now - LEASE_TTL_SEC + 5)  # granted 100 s ago, renewed until 25 s ago
    assert _take(actor, "live", 1) == []
    store.renew(NAME, "dead", now - LEASE_TTL_SEC - 1)  # as though its last renewal was 31 s ago
    assert len(_take(actor, "live", 1)) == 1
    assert [h.run_id for h in store.load(NAME, since=0.0).leases] == ["live"]


def test_a_live_runs_renewal_keeps_its_lease_past_the_ttl(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    old = time.time() - 10 * LEASE_TTL_SEC
    store.hold_leases(NAME, [HeldLease("slow/c1#0", "slow", Running(old, 0, False))], old)
    actor = _actor(tmp_path, max_concurrent=1)
    actor.renew("slow")  # its gate renews every RENEW_SEC
    assert _take(actor, "other", 1) == []
    assert actor.snapshot().inflight == 1


def test_window_starts_are_shared(tmp_path: Path) -> None:
    one, two = _actor(tmp_path, max_concurrent=4, window={"hours": 5, "max_cells": 3}), \
        _actor(tmp_path, max_concurrent=4, window={"hours": 5, "max_cells": 3})
    assert len(_take(one, "run-a", 2)) == 2
    assert len(_take(two, "run-b", 4)) == 1  # 3 starts in the window between them
    assert two.snapshot().window_used == 3 and one.snapshot().window_used == 3


def test_starts_per_minute_are_shared(tmp_path: Path) -> None:
    """The bucket (a minute of burst: 3 starts at 3 per minute) is one for both grantors."""
    one, two = _actor(tmp_path, max_concurrent=10, starts_per_minute=3), \
        _actor(tmp_path, max_concurrent=10, starts_per_minute=3)
    assert len(_take(one, "run-a", 2)) == 2
    assert len(_take(two, "run-b", 5)) == 1
    assert _take(one, "run-a", 1) == []


def test_spend_reservations_are_shared(tmp_path: Path) -> None:
    one, two = _actor(tmp_path, spend_usd=1.0), _actor(tmp_path, spend_usd=1.0)
    assert len(_take(one, "run-a", 1, usd=0.6)) == 1
    assert _take(two, "run-b", 1, usd=0.6) == []  # 0.6 reserved by run-a + 0.6 > $1
    assert len(_take(two, "run-b", 1, usd=0.3)) == 1


def test_a_resumed_run_drops_the_leases_another_ray_granted_it(tmp_path: Path) -> None:
    one, two = _actor(tmp_path), _actor(tmp_path)
    assert len(_take(one, "run-a", 2)) == 2
    assert two.abandon_run("run-a") == 2
    assert one.snapshot().inflight == 0


def test_another_hosts_live_leases_refuse_the_run(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    now = time.time()
    store.hold_leases(NAME, [HeldLease("far/c1#0", "far", Running(now, 0, False))], now)
    store._db.execute("UPDATE leases SET host = 'node-7:abc'")
    actor = _actor(tmp_path)
    assert actor.other_hosts() == ["node-7:abc"]
    with pytest.raises(UserInputError) as caught:
        refuse_other_hosts([actor.other_hosts()], tmp_path)
    line = caught.value.line()
    assert str(tmp_path) in line and "node-7" in line and "--address" in line and "\n" not in line
    refuse_other_hosts([[]], tmp_path)  # this host only: nothing to refuse
    store.renew(NAME, "far", now - LEASE_TTL_SEC - 1)
    assert actor.other_hosts() == []  # a dead host's leases refuse nothing


def test_an_older_state_root_gets_the_shared_columns(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "accounts.sqlite")
    db.execute("CREATE TABLE leases (account TEXT NOT NULL, lease_id TEXT NOT NULL, run_id TEXT NOT NULL, "
               "started_at REAL NOT NULL, inflight_at_start INTEGER NOT NULL, probe INTEGER NOT NULL, "
               "PRIMARY KEY (account, lease_id))")
    db.executescript(store_module._SCHEMA)  # the other tables as they are (leases exists: kept old)
    db.execute("INSERT INTO leases VALUES (?, 'old/c1#0', 'old', 1.0, 0, 0)", (NAME,))
    db.commit()
    db.close()
    reader = AccountStore.open_readonly(tmp_path)
    assert reader is not None
    assert [h.lease_id for h in reader.load(NAME, since=0.0).leases] == ["old/c1#0"]
    reader.close()
    actor = _actor(tmp_path, max_concurrent=1)
    assert actor.snapshot().inflight == 1  # the old lease counts: renewed as of the upgrade
    assert _take(actor, "new", 1) == []


def _pool(root: Path, size: int = 2) -> Any:
    return PoolSlots("local", size, str(root))


def test_a_backend_pools_slots_are_shared_and_free_when_released(tmp_path: Path) -> None:
    one, two = _pool(tmp_path), _pool(tmp_path)
    assert one.acquire_many("run-a", ["run-a/1", "run-a/2"]) == ["run-a/1", "run-a/2"]
    assert two.acquire_many("run-b", ["run-b/1"]) == []
    assert two.usage() == (2, 2)
    assert two.acquire_many("run-b", ["run-b/1"], released=[]) == []
    one.release_many(["run-a/1"])
    assert two.acquire_many("run-b", ["run-b/1", "run-b/2"]) == ["run-b/1"]  # at once, no TTL
    # a dead run's slot: back one TTL after its last renewal
    AccountStore(tmp_path).renew_slots("local", "run-a", time.time() - LEASE_TTL_SEC - 1)
    assert two.acquire_many("run-b", ["run-b/2"]) == ["run-b/2"]
    assert one.abandon_run("run-b") == 2 and two.usage() == (0, 2)


def _two_processes(root: Path, cells: int, limits: dict[str, Any]) -> list[tuple[str, float, float]]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=drive_grants, args=(str(root), NAME, run, cells, limits, out))
             for run in ("one", "two")]
    for p in procs:
        p.start()
    rows = [row for _ in procs for row in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
    return rows


def test_two_driver_processes_never_exceed_the_limit_and_hand_slots_over_at_once(tmp_path: Path) -> None:
    rows = _two_processes(tmp_path, 8, {"max_concurrent": 2})
    assert len(rows) == 16 and {r for r, _, _ in rows} == {"one", "two"}
    edges = sorted([(s, 1) for _, s, _ in rows] + [(f, -1) for _, _, f in rows])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak <= 2
    # a slot released by one process is granted to the other's waiting cell at its next poll
    handovers = [min(s2 - f for r2, s2, _ in rows if r2 != r and s2 >= f) for r, _, f in rows
                 if any(r2 != r and s2 >= f for r2, s2, _ in rows)]
    assert handovers and max(handovers) < LEASE_TTL_SEC
    print(f"\ntwo processes: peak {peak}/2, release->other's grant max {max(handovers):.3f} s, "
          f"median {sorted(handovers)[len(handovers) // 2]:.3f} s")


def test_two_driver_processes_share_one_window(tmp_path: Path) -> None:
    rows = _two_processes(tmp_path, 8, {"max_concurrent": 4, "window": {"hours": 5, "max_cells": 6}})
    assert len(rows) == 6  # 16 wanted between them, the window's 6 started
    assert len(AccountStore(tmp_path).load(NAME, since=0.0).starts) == 6


def test_a_charge_keeps_its_bound_in_the_lifetime_spend(tmp_path: Path) -> None:
    """What the driver's release says a charge is (the gates pass ``usd_bound`` on) reaches
    accounts.sqlite through the account's actor, for any later run's `accounts status`."""
    from dataclasses import replace

    actor = _actor(tmp_path)
    leases = _take(actor, "run-a", 2, usd=0.1)
    actor.finish_many("run-a", [(leases[0], replace(Outcome.success(usd=0.3), usd_bound="lower_bound")),
                                (leases[1], Outcome.success(usd=0.2))])
    store = AccountStore.open_readonly(tmp_path)
    assert store is not None
    try:
        saved = store.load(NAME, 0.0)
    finally:
        store.close()
    assert saved.spent_usd == pytest.approx(0.5) and saved.spent_not_exact == {"lower_bound": 1}
