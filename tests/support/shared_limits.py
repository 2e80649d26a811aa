"""Readings of account limits shared by two runs on one state root (issue 29): the leases
live in ``accounts.sqlite`` and both ledgers' attempt intervals. Used by
``tests/accounts/test_two_rays_share_limits.py`` and ``tests/perf/bench_ops.py``."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from ray_bench.accounts.keepers import LEASE_TTL_SEC
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
