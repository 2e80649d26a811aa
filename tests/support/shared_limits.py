"""Readings of account limits shared by two runs on one state root (issue 29): the leases
live in ``accounts.sqlite`` and both ledgers' attempt intervals. Used by
``tests/accounts/test_two_rays_share_limits.py`` and ``tests/perf/bench_ops.py``; ``drive_grants``,
a driver's grants in a process of its own, by ``tests/accounts/test_shared_grants.py``."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ray_bench.accounts.keepers import LEASE_TTL_SEC, AccountGrants
from ray_bench.accounts.outcome import Outcome
from ray_bench.models.accounts import AccountLimits
from support.driver_process import ledger_query


def sample_leases(state: Path, stop: threading.Event, out: list[dict[str, int]]) -> None:
    """Live leases per account, every 50 ms until ``stop``: an upper bound of what ran (a lease
    is granted before its cell's sandbox and released after it)."""
    path = state / "accounts.sqlite"
    while not stop.is_set():
        if path.exists():
            try:
                db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                try:
                    rows = db.execute("SELECT account, COUNT(*) FROM leases WHERE renewed_at >= ? GROUP BY account",
                                      (time.time() - LEASE_TTL_SEC,)).fetchall()
                finally:
                    db.close()
                out.append({str(a): int(n) for a, n in rows})
            except sqlite3.OperationalError:
                pass  # created, no schema yet
        time.sleep(0.05)


def intervals(root: Path) -> list[tuple[str, float, float]]:
    """(account, started_at, finished_at) of every finished attempt in a run's ledger."""
    return [(str(a), float(s), float(f)) for a, s, f in ledger_query(
        root, "SELECT a.account, a.started_at, r.finished_at FROM attempts a JOIN results r USING (attempt_id)")]


def peak(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])  # a finish before a start
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def idle_gaps(runs: dict[str, list[tuple[str, float, float]]], account: str,
              limit: int) -> tuple[list[float], list[float]]:
    """For each finish on ``account`` that left it below ``limit`` while cells were still to
    start on it, the time to its next start: (any run's, the other run's start). The time the
    account sat idle with cells waiting."""
    cells = [(run, s, f) for run, rows in runs.items() for a, s, f in rows if a == account]
    starts = sorted((s, run) for run, s, _ in cells)
    gaps, crossed = [], []
    for run, _, finished in cells:
        later = [(s, r) for s, r in starts if s >= finished]
        if not later:
            continue
        busy = sum(1 for _, s, f in cells if s <= finished < f)
        if busy >= limit:
            continue  # another finish freed the slot that the next start took
        at, who = later[0]
        gaps.append(at - finished)
        if who != run:
            crossed.append(at - finished)
    return gaps, crossed


def drive_grants(root: str, account: str, run: str, cells: int, limits: dict[str, Any], out: Any) -> None:
    """A driver in its own process: its own account actor (as its own Ray would have) granting
    through ``root``; each cell holds its lease 0.3 s. Puts (run, granted_at, released_at) per
    cell, and the starts it was refused by the window. Here, not in the test module, so that a
    spawned process imports only this (the test module brings pytest and the Ray wing's gate:
    ~1.5 s more per process, twice per test, loaded)."""
    actor = AccountGrants(account, AccountLimits.model_validate(limits), root)
    held: dict[str, float] = {}
    done, i, deadline = 0, 0, time.time() + 60
    rows: list[tuple[str, float, float]] = []
    while done < cells and time.time() < deadline:
        now = time.time()
        for lease, at in list(held.items()):
            if now - at >= 0.3:
                actor.finish_many(run, [(lease, Outcome.success())])
                rows.append((run, at, time.time()))
                del held[lease]
                done += 1
        if done + len(held) < cells:
            started, snap = actor.acquire_many(run, [(f"{run}/c{i}#{i}", f"c{i}", 0.0)])
            if started:
                held[started[0]] = time.time()
                i += 1
            elif snap.window_used >= limits.get("window", {}).get("max_cells", 10**9) and not held:
                break  # the window is spent: nothing of this run can start for hours
        time.sleep(0.02)
    out.put(rows)
