"""Durable account state: what an account has used and how it is, in the state root
(``accounts.sqlite``), so that a Ray restart, a pause and resume or a second cluster on the same
host do not hand every account a fresh rolling window, forget a cooldown or revive a disabled
login.

One writer per account: its ``AccountActor`` (the CLI writes only ``operator_events``, which the
actor applies). Tables are insert-only except ``health``, one row per account overwritten by
its actor, and ``leases``, the slots held right now (a row from each start until its finish),
which a restarted actor takes up so that it does not admit the held slots a second time.
``pool_slots`` is the same for a backend pool's ``CapacityActor`` (its sandbox slots).
Time is epoch seconds.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray_bench.accounts.core import AccountCore, Running
from ray_bench.accounts.limits import window_seconds
from ray_bench.models.accounts import AccountLimits

FILE = "accounts.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS window_starts (account TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS window_starts_at ON window_starts (account, at);
CREATE TABLE IF NOT EXISTS spend (account TEXT NOT NULL, at REAL NOT NULL, usd REAL NOT NULL);
CREATE INDEX IF NOT EXISTS spend_at ON spend (account, at);
CREATE TABLE IF NOT EXISTS health (
    account TEXT PRIMARY KEY, state TEXT NOT NULL, cooling_until REAL NOT NULL, episodes INTEGER NOT NULL,
    auth_failures INTEGER NOT NULL, last_error TEXT NOT NULL, updated_at REAL NOT NULL,
    events_seen INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS leases (
    account TEXT NOT NULL, lease_id TEXT NOT NULL, run_id TEXT NOT NULL, started_at REAL NOT NULL,
    inflight_at_start INTEGER NOT NULL, probe INTEGER NOT NULL, PRIMARY KEY (account, lease_id));
CREATE TABLE IF NOT EXISTS pool_slots (
    pool TEXT NOT NULL, lease_id TEXT NOT NULL, run_id TEXT NOT NULL, since REAL NOT NULL,
    PRIMARY KEY (pool, lease_id));
CREATE TABLE IF NOT EXISTS operator_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, account TEXT NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL,
    who TEXT NOT NULL, at REAL NOT NULL);
"""


@dataclass
class Saved:
    """What an account had when its actor last wrote."""

    starts: list[float] = field(default_factory=list)
    spend: list[tuple[float, float]] = field(default_factory=list)
    spent_usd: float = 0.0
    state: str | None = None
    cooling_until: float = float("-inf")
    episodes: int = 0
    auth_failures: int = 0
    last_error: str = ""
    #: The last operator event the actor applied (later ones are still to apply).
    events_seen: int = 0
    leases: list[HeldLease] = field(default_factory=list)


@dataclass(frozen=True)
class HeldLease:
    """A slot held when the account's actor last wrote (see ``AccountCore.adopt``)."""

    lease_id: str
    run_id: str
    held: Running


@dataclass(frozen=True)
class OperatorEvent:
    seq: int
    account: str
    kind: str
    reason: str
    who: str
    at: float


class AccountStore:
    def __init__(self, state_root: str | Path, *, readonly: bool = False) -> None:
        root = Path(state_root)
        self.path = root / FILE
        if readonly:  # a reader beside the actors: never creates, migrates or writes (no -wal/-shm)
            from ray_bench.errors import UserInputError
            from ray_bench.ledger.store import connect_readonly

            try:
                self._db = connect_readonly(self.path, "SELECT 1 FROM health LIMIT 1")
            except sqlite3.DatabaseError as exc:
                raise UserInputError(f"cannot read the accounts' state ({exc})", where=str(self.path),
                                     fix="name a ray-bench state root with --state-root") from exc
            return
        root.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    @classmethod
    def open_readonly(cls, state_root: str | Path) -> AccountStore | None:
        """The state root's store for reading, or ``None`` when no actor ever wrote one."""
        if not (Path(state_root) / FILE).is_file():
            return None
        return cls(state_root, readonly=True)

    def close(self) -> None:
        self._db.close()

    # -- the actor's writes -----------------------------------------------------------------
    def record_start(self, account: str, at: float) -> None:
        self._db.execute("INSERT INTO window_starts VALUES (?, ?)", (account, at))

    def record_spend(self, account: str, at: float, usd: float) -> None:
        if usd > 0:
            self._db.execute("INSERT INTO spend VALUES (?, ?, ?)", (account, at, usd))

    def hold_leases(self, account: str, leases: list[HeldLease]) -> None:
        with self._db:  # one transaction
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)",
                                 [(account, h.lease_id, h.run_id, h.held.started_at, h.held.inflight_at_start,
                                   int(h.held.probe)) for h in leases])

    def drop_leases(self, account: str, lease_ids: list[str]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM leases WHERE account = ? AND lease_id = ?",
                                 [(account, lease) for lease in lease_ids])

    def hold_slots(self, pool: str, run_id: str, lease_ids: list[str], since: float) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO pool_slots VALUES (?, ?, ?, ?)",
                                 [(pool, lease, run_id, since) for lease in lease_ids])

    def drop_slots(self, pool: str, lease_ids: list[str]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM pool_slots WHERE pool = ? AND lease_id = ?",
                                 [(pool, lease) for lease in lease_ids])

    def slots(self, pool: str) -> dict[str, tuple[str, float]]:
        """lease -> (run, since) of the slots a pool held when its actor last wrote."""
        return {r[0]: (r[1], r[2]) for r in self._db.execute(
            "SELECT lease_id, run_id, since FROM pool_slots WHERE pool = ? ORDER BY since", (pool,))}

    def save_health(self, account: str, *, state: str, cooling_until: float, episodes: int, auth_failures: int,
                    last_error: str, events_seen: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO health VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (account, state, max(cooling_until, -1e18), episodes, auth_failures, last_error,
                          time.time(), events_seen))

    # -- reads ------------------------------------------------------------------------------
    def load(self, account: str, since: float) -> Saved:
        """Starts and spend at or after ``since`` (the rolling window), all-time spend, health."""
        saved = Saved()
        saved.starts = [r[0] for r in self._db.execute(
            "SELECT at FROM window_starts WHERE account = ? AND at >= ? ORDER BY at", (account, since))]
        saved.spend = [(r[0], r[1]) for r in self._db.execute(
            "SELECT at, usd FROM spend WHERE account = ? AND at >= ? ORDER BY at", (account, since))]
        saved.spent_usd = float(self._db.execute(
            "SELECT COALESCE(SUM(usd), 0) FROM spend WHERE account = ?", (account,)).fetchone()[0])
        row = self._db.execute("SELECT state, cooling_until, episodes, auth_failures, last_error, events_seen "
                               "FROM health WHERE account = ?", (account,)).fetchone()
        if row is not None:
            (saved.state, saved.cooling_until, saved.episodes, saved.auth_failures, saved.last_error,
             saved.events_seen) = row
        saved.leases = [HeldLease(r[0], r[1], Running(r[2], r[3], bool(r[4]))) for r in self._db.execute(
            "SELECT lease_id, run_id, started_at, inflight_at_start, probe FROM leases WHERE account = ? "
            "ORDER BY started_at", (account,))]
        return saved

    def restore(self, core: AccountCore, now: float) -> Saved:
        """Give a new ``core`` what an earlier holder of its account left here: lifetime spend,
        its rolling window, its health and the slots held (what an ``AccountActor`` starts from)."""
        saved = self.load(core.name, since=now - window_seconds(core.limits))
        core.spent_usd = saved.spent_usd
        if core.window is not None:
            core.window.restore(saved.starts, saved.spend)
        if saved.state is not None:
            core.health.restore(saved.state, saved.cooling_until, saved.episodes, saved.auth_failures,
                                saved.last_error)
        for lease in saved.leases:
            core.adopt(lease.lease_id, lease.held)
        return saved

    def events_after(self, account: str, seq: int) -> list[OperatorEvent]:
        return [OperatorEvent(*r) for r in self._db.execute(
            "SELECT seq, account, kind, reason, who, at FROM operator_events WHERE account = ? AND seq > ? "
            "ORDER BY seq", (account, seq))]

    # -- the operator's write -----------------------------------------------------------------
    def add_event(self, account: str, kind: str, reason: str, who: str) -> int:
        cur = self._db.execute("INSERT INTO operator_events (account, kind, reason, who, at) VALUES (?, ?, ?, ?, ?)",
                               (account, kind, reason, who, time.time()))
        return int(cur.lastrowid or 0)

    def pending_events(self, account: str) -> list[OperatorEvent]:
        """Operator events the account's actor has not applied yet."""
        row = self._db.execute("SELECT events_seen FROM health WHERE account = ?", (account,)).fetchone()
        return self.events_after(account, int(row[0]) if row is not None else 0)

    def health_state(self, account: str) -> str | None:
        row = self._db.execute("SELECT state FROM health WHERE account = ?", (account,)).fetchone()
        return None if row is None else str(row[0])


def restored_core(name: str, limits: AccountLimits, store: AccountStore | None, now: float,
                  ) -> tuple[AccountCore, Saved]:
    """An account's admission state as its last writer left it (:meth:`AccountStore.restore`):
    the one restoration, used by the account's actor when it is (re)created and by
    ``accounts status`` / ``status`` without a cluster."""
    core = AccountCore(name, limits, now=now)
    if store is None:
        return core, Saved()
    return core, store.restore(core, now)
