"""A state root's lifetime spend: what one grant's read of an account costs (``AccountStore.shared``,
which every acquire and every snapshot of the account makes) as the charges the state root has
recorded grow. A team's state root lives for months; before the running totals each read summed
every charge the account was ever given.

    .venv/bin/python tests/perf/bench_spend_history.py [--charges 0 10000 100000 300000] [--reads 50]

Exits 1 when a read at the largest history costs more than 5x a read at the smallest (the
totals make it flat; summing every charge made it grow with them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from ray_bench.accounts.store import AccountStore

GOAL_GROWTH = 5.0


def read_ms(charges: int, reads: int) -> float:
    """Milliseconds per ``shared()`` of one account with ``charges`` past charges."""
    with tempfile.TemporaryDirectory(prefix="rb-bench-spend-") as tmp:
        store = AccountStore(tmp)
        past = time.time() - 30 * 86400
        store.record_spend("a", time.time(), 1.0)
        store._db.execute("BEGIN")
        store._db.executemany("INSERT INTO spend (account, at, usd, bound) VALUES ('a', ?, 0.5, 'exact')",
                              [(past + i,) for i in range(charges)])
        store._db.execute("COMMIT")
        now = time.time()
        t = time.perf_counter()
        for _ in range(reads):
            shared = store.shared("a", now, since=now, ttl=30.0)
        elapsed = time.perf_counter() - t
        assert shared.spent_usd == 1.0 + 0.5 * charges, shared.spent_usd
        store.close()
    return 1000 * elapsed / reads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, nargs="+", default=[0, 10_000, 100_000, 300_000])
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    figures = {n: read_ms(n, args.reads) for n in args.charges}
    for n, ms in figures.items():
        print(f"  {n:>9,} past charges: {ms:7.3f} ms per grant read")
    growth = figures[max(figures)] / max(figures[min(figures)], 1e-3)
    print(f"  largest / smallest history: {growth:.1f}x (goal <= {GOAL_GROWTH:g}x)")
    return 0 if growth <= GOAL_GROWTH else 1


if __name__ == "__main__":
    sys.exit(main())
