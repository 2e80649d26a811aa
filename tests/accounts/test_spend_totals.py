"""A state root's lifetime spend per account is kept as running totals beside its charges, so a
grant's read does not grow with every charge the state root ever recorded; a file written before
the totals existed gets them on its first writable open, and a read-only look at such a file
still sums its charges."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from ray_bench.accounts.store import FILE, AccountStore

CHARGES = [("a", 1.25, "exact"), ("a", 0.5, "lower_bound"), ("b", 2.0, "exact"), ("a", 0.75, "unknown"),
           ("a", 0.25, "lower_bound"), ("b", 0.125, "unknown")]


def _spent(store: AccountStore, account: str) -> tuple[float, dict[str, int]]:
    saved = store.load(account, since=time.time())
    return saved.spent_usd, saved.spent_not_exact


def _summed(path: Path, account: str) -> tuple[float, dict[str, int]]:
    """What the charges themselves add up to (the rows, read directly)."""
    db = sqlite3.connect(path)
    usd = db.execute("SELECT COALESCE(SUM(usd), 0) FROM spend WHERE account = ?", (account,)).fetchone()[0]
    counts = dict(db.execute("SELECT bound, COUNT(*) FROM spend WHERE account = ? AND bound != 'exact' "
                             "GROUP BY bound", (account,)).fetchall())
    db.close()
    return float(usd), counts


def test_totals_follow_every_charge_and_survive_a_new_opener(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    for account, usd, bound in CHARGES:
        store.record_spend(account, time.time(), usd, bound)
    store.record_spend("a", time.time(), 0.0)  # nothing charged: no row, no count
    for account in ("a", "b"):
        assert _spent(store, account) == _summed(tmp_path / FILE, account)
    assert _spent(store, "a") == (2.75, {"lower_bound": 2, "unknown": 1})
    assert _spent(store, "nobody") == (0.0, {})
    store.close()
    again = AccountStore(tmp_path)
    assert _spent(again, "a") == (2.75, {"lower_bound": 2, "unknown": 1})
    reader = AccountStore.open_readonly(tmp_path)
    assert reader is not None and _spent(reader, "b") == (2.125, {"unknown": 1})


def test_a_deleted_charge_leaves_the_totals(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    for account, usd, bound in CHARGES:
        store.record_spend(account, time.time(), usd, bound)
    store._db.execute("DELETE FROM spend WHERE account = 'a' AND bound = 'unknown'")
    assert _spent(store, "a") == (2.0, {"lower_bound": 2}) == _summed(tmp_path / FILE, "a")


def _old_file(root: Path) -> Path:
    """A state root as a ray-bench from before the totals left it: charges, no totals, no triggers."""
    root.mkdir()
    store = AccountStore(root)
    for account, usd, bound in CHARGES:
        store.record_spend(account, time.time(), usd, bound)
    store._db.execute("DROP TRIGGER spend_totals_add")
    store._db.execute("DROP TRIGGER spend_totals_drop")
    store._db.execute("DROP TABLE spend_totals")
    store.close()
    return root


def test_an_older_file_is_read_as_it_is_then_given_its_totals(tmp_path: Path) -> None:
    root = _old_file(tmp_path / "state")
    reader = AccountStore.open_readonly(root)
    assert reader is not None and _spent(reader, "a") == (2.75, {"lower_bound": 2, "unknown": 1})
    reader.close()
    store = AccountStore(root)  # the actor's writable open: totals summed once, triggers from now on
    assert _spent(store, "a") == (2.75, {"lower_bound": 2, "unknown": 1})
    store.record_spend("a", time.time(), 1.0, "exact")
    assert _spent(store, "a") == (3.75, {"lower_bound": 2, "unknown": 1}) == _summed(root / FILE, "a")


def _vm_steps(store: AccountStore, account: str) -> int:
    """SQLite virtual-machine steps (in hundreds) a grant's read of ``account`` takes: a count, not a time."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._db.set_progress_handler(tick, 100)
    try:
        store.load(account, since=time.time())
    finally:
        store._db.set_progress_handler(None, 100)
    return steps


@pytest.mark.parametrize("charges", [20_000])
def test_a_grants_read_does_not_grow_with_the_charges_of_the_past(tmp_path: Path, charges: int) -> None:
    store = AccountStore(tmp_path)
    store.record_spend("a", time.time(), 1.0)
    few = _vm_steps(store, "a")
    past = time.time() - 30 * 86400
    store._db.execute("BEGIN")
    store._db.executemany("INSERT INTO spend (account, at, usd, bound) VALUES ('a', ?, 0.5, 'exact')",
                          [(past + i,) for i in range(charges)])
    store._db.execute("COMMIT")
    assert _spent(store, "a") == (1.0 + 0.5 * charges, {})
    # Summing every charge took ~10 VM steps per row (2,000+ hundreds here); the totals, a handful.
    assert _vm_steps(store, "a") <= few + 2


def test_a_charge_that_is_not_finite_is_never_stored(tmp_path: Path) -> None:
    store = AccountStore(tmp_path)
    for usd in (float("inf"), float("nan"), -100.0, 1e300):
        store.record_spend("a", time.time(), usd)
    store.record_spend("a", time.time(), 0.5)
    assert _spent(store, "a") == (0.5, {}) == _summed(tmp_path / FILE, "a")


def test_a_state_root_poisoned_with_inf_reads_finite_and_is_repaired_on_the_record(tmp_path: Path) -> None:
    """Issue 58: a ray-bench before the fix wrote ``$inf`` into an account's lifetime spend, and
    every later run on the state root stopped before its first cell. The reader refuses the
    charge (not counted, counted apart) and ``repair_spend`` deletes it and sums again."""
    store = AccountStore(tmp_path)
    store.record_spend("a", time.time(), 0.25)
    store.record_spend("b", time.time(), 1.0)
    # as the old writer left it: the charge and, through the trigger, the total
    store._db.execute("INSERT INTO spend (account, at, usd, bound) VALUES ('a', ?, ?, 'exact')",
                      (time.time(), float("inf")))
    saved = store.load("a", since=0)
    assert saved.spent_usd == 0.25 and saved.spent_refused == 1 and saved.spend == [(saved.spend[0][0], 0.25)]
    reader = AccountStore.open_readonly(tmp_path)
    assert reader is not None and reader.load("a", since=0).spent_usd == 0.25
    reader.close()
    assert store.repair_spend("a") == 1 and store.repair_spend("b") == 0
    saved = store.load("a", since=0)
    assert (saved.spent_usd, saved.spent_refused) == (0.25, 0)
    assert _spent(store, "b") == (1.0, {})
    totals = store._db.execute("SELECT account, usd, n FROM spend_totals ORDER BY account").fetchall()
    assert totals == [("a", 0.25, 1), ("b", 1.0, 1)]
    store.close()
