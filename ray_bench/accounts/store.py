"""Durable account state: what an account has used and how it is, in the state root
(``accounts.sqlite``), so that a Ray restart, a pause and resume or a second cluster on the same
host do not hand every account a fresh rolling window, forget a cooldown or revive a disabled
login.

It is also where limits are shared. Every ``AccountGrants`` keeper that opens the same file (two
``execute``s with their own local Ray, or one cluster's actor restarted) grants leases through
it: :meth:`AccountStore.granting` is one ``BEGIN IMMEDIATE`` transaction that reads what every
run holds of the account (live leases, window starts, spend, the start bucket), lets the pure
core decide, and writes the starts down before it commits, so two grantors cannot both take the
last slot. A lease is deleted when its cell ends; a lease whose run stopped renewing it
(``renewed_at``) for the TTL its grantor passes is expired by the next grant.

Tables are insert-only except ``health``, one row per account overwritten by its actor,
``leases``, the slots held right now (a row from each start until its finish), ``buckets``
(the start bucket's level), and ``pool_slots``, the same as ``leases`` for a backend pool's
``PoolSlots`` (its sandbox slots). The CLI writes only ``operator_events``, which the actor
applies. Time is epoch seconds.
"""

from __future__ import annotations

import contextlib
import math
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ray_bench.accounts.core import AccountCore, Running, Shared
from ray_bench.accounts.limits import window_seconds
from ray_bench.errors import UserInputError
from ray_bench.models.accounts import AccountLimits
from ray_bench.numbers import MAX_AMOUNT

FILE = "accounts.sqlite"
#: A stored charge that is an amount (ray_bench.numbers): ``inf`` fails it; NaN is stored as NULL.
_FINITE = f"usd BETWEEN {-MAX_AMOUNT!r} AND {MAX_AMOUNT!r}"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS window_starts (account TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS window_starts_at ON window_starts (account, at);
CREATE TABLE IF NOT EXISTS spend (account TEXT NOT NULL, at REAL NOT NULL, usd REAL NOT NULL,
    bound TEXT NOT NULL DEFAULT 'exact');
CREATE INDEX IF NOT EXISTS spend_at ON spend (account, at);
CREATE TABLE IF NOT EXISTS health (
    account TEXT PRIMARY KEY, state TEXT NOT NULL, cooling_until REAL NOT NULL, episodes INTEGER NOT NULL,
    auth_failures INTEGER NOT NULL, last_error TEXT NOT NULL, updated_at REAL NOT NULL,
    events_seen INTEGER NOT NULL DEFAULT 0, writer TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS leases (
    account TEXT NOT NULL, lease_id TEXT NOT NULL, run_id TEXT NOT NULL, started_at REAL NOT NULL,
    inflight_at_start INTEGER NOT NULL, probe INTEGER NOT NULL, reserved_usd REAL NOT NULL DEFAULT 0,
    renewed_at REAL NOT NULL DEFAULT 0, host TEXT NOT NULL DEFAULT '', PRIMARY KEY (account, lease_id));
CREATE TABLE IF NOT EXISTS buckets (account TEXT PRIMARY KEY, tokens REAL NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pool_slots (
    pool TEXT NOT NULL, lease_id TEXT NOT NULL, run_id TEXT NOT NULL, since REAL NOT NULL,
    renewed_at REAL NOT NULL DEFAULT 0, PRIMARY KEY (pool, lease_id));
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
    #: Of the lifetime spend, how many charges were not exact: ``lower_bound`` (a CLI cut before
    #: it recorded every call) and ``unknown`` (no cost known: charged at the cell's expected cost).
    spent_not_exact: dict[str, int] = field(default_factory=dict)
    #: Stored charges refused when read (not finite: ``$inf`` written by a ray-bench before issue
    #: 58 from an agent's ``"cost_usd": Infinity``): not counted, and cleared by ``accounts repair``.
    spent_refused: int = 0
    state: str | None = None
    cooling_until: float = float("-inf")
    episodes: int = 0
    auth_failures: int = 0
    last_error: str = ""
    #: The last operator event the actor applied (later ones are still to apply).
    events_seen: int = 0
    leases: list[HeldLease] = field(default_factory=list)


@dataclass(frozen=True)
class StoredHealth:
    """An account's health row: its state, cooldown end, last error, the operator events its
    writer had applied, and which keeper wrote it (``writer``, '' in files from before)."""

    state: str
    cooling_until: float
    last_error: str
    events_seen: int
    writer: str


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


#: Columns ``leases`` gained when grants went through the state root (an older file gets them).
_LEASE_COLUMNS = {"reserved_usd": "REAL NOT NULL DEFAULT 0", "renewed_at": "REAL NOT NULL DEFAULT 0",
                  "host": "TEXT NOT NULL DEFAULT ''"}
_NEW_COLUMNS = {"leases": _LEASE_COLUMNS, "pool_slots": {"renewed_at": "REAL NOT NULL DEFAULT 0"},
                "health": {"writer": "TEXT NOT NULL DEFAULT ''"},
                "spend": {"bound": "TEXT NOT NULL DEFAULT 'exact'"}}

#: Lifetime spend per account and bound, kept by triggers on ``spend`` (so every writer, an older
#: ray-bench's too, keeps it): a grant reads a few rows here instead of summing every charge the
#: state root ever recorded (100,000 charges made each grant's read 106 ms: tests/perf/README.md,
#: "A state root's lifetime spend").
_SPEND_TOTALS = (
    "CREATE TABLE IF NOT EXISTS spend_totals (account TEXT NOT NULL, bound TEXT NOT NULL, usd REAL NOT NULL, "
    "n INTEGER NOT NULL, PRIMARY KEY (account, bound))",
    "DELETE FROM spend_totals",
    "INSERT INTO spend_totals SELECT account, bound, SUM(usd), COUNT(*) FROM spend GROUP BY account, bound",
    "CREATE TRIGGER spend_totals_add AFTER INSERT ON spend BEGIN "
    "INSERT INTO spend_totals (account, bound, usd, n) VALUES (NEW.account, NEW.bound, NEW.usd, 1) "
    "ON CONFLICT (account, bound) DO UPDATE SET usd = usd + excluded.usd, n = n + 1; END",
    "CREATE TRIGGER spend_totals_drop AFTER DELETE ON spend BEGIN "
    "UPDATE spend_totals SET usd = usd - OLD.usd, n = n - 1 WHERE account = OLD.account AND bound = OLD.bound; END",
)


def host_id() -> str:
    """This machine, as the grantors on one state root tell each other apart: its name and
    boot id (two containers of one name on two machines differ; a reboot is another host,
    whose Ray is gone anyway)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}:{boot}" if boot else socket.gethostname()


class AccountStore:
    def __init__(self, state_root: str | Path, *, readonly: bool = False) -> None:
        root = Path(state_root)
        self.path = root / FILE
        if readonly:  # a reader beside the actors: never creates, migrates or writes (no -wal/-shm)
            from ray_bench.ledger.store import connect_readonly

            try:
                self._db = connect_readonly(self.path, "SELECT 1 FROM health LIMIT 1")
            except sqlite3.DatabaseError as exc:
                raise UserInputError(f"cannot read the accounts' state ({exc})", where=str(self.path),
                                     fix="name a ray-bench state root with --state-root") from exc
            self.host = host_id()
            # a file no shared grant wrote yet has no reservations nor renewals to read
            self._leases_shared = {r[1] for r in self._db.execute("PRAGMA table_info(leases)")} >= _LEASE_COLUMNS.keys()
            self._spend_bounds = "bound" in {r[1] for r in self._db.execute("PRAGMA table_info(spend)")}
            self._spend_totals = self._keeps_totals()
            return
        root.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        from ray_bench.ledger.store import use_wal

        use_wal(self._db)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self.host = host_id()
        self._migrate()
        self._keep_totals()
        self._leases_shared = True
        self._spend_bounds = True
        self._spend_totals = True

    def _keeps_totals(self) -> bool:
        return self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'spend_totals_add'").fetchone() is not None

    def _keep_totals(self) -> None:
        """Give a file without them the lifetime totals (summed once from its charges) and the
        triggers that keep them, in one transaction."""
        if self._keeps_totals():
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if not self._keeps_totals():  # again: another opener may have added them
                for statement in _SPEND_TOTALS:
                    self._db.execute(statement)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _migrate(self) -> None:
        """Give an older file's ``leases`` and ``pool_slots`` the columns of shared grants; what
        they hold counts as renewed now (their runs get one TTL to renew it or lose it)."""
        def missing() -> dict[str, dict[str, str]]:
            out = {}
            for table, columns in _NEW_COLUMNS.items():
                have = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if lacking := {c: d for c, d in columns.items() if c not in have}:
                    out[table] = lacking
            return out

        if not missing():
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for table, columns in missing().items():  # again: another opener may have added them
                for column, decl in columns.items():
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                if "renewed_at" in columns:
                    self._db.execute(f"UPDATE {table} SET renewed_at = ? WHERE renewed_at = 0", (time.time(),))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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

    def record_spend(self, account: str, at: float, usd: float, bound: str = "exact") -> None:
        """A charge to the account; ``bound``: ``exact``, ``lower_bound`` or ``unknown``
        (:attr:`ray_bench.accounts.outcome.Outcome.usd_bound`)."""
        if 0 < usd <= MAX_AMOUNT:  # never a charge that is not finite (NaN fails both)
            self._db.execute("INSERT INTO spend (account, at, usd, bound) VALUES (?, ?, ?, ?)",
                             (account, at, usd, bound))

    # -- shared grants --------------------------------------------------------------------------
    @contextlib.contextmanager
    def granting(self, account: str, now: float, *, since: float, ttl: float) -> Iterator[Shared]:
        """One grant: a ``BEGIN IMMEDIATE`` transaction (it waits for any other grantor's to end,
        up to the connection's 30 s) that expires the account's leases not renewed for ``ttl``,
        yields what every run holds and used since ``since`` (the rolling window's start), and
        commits what the caller wrote meanwhile (:meth:`hold_leases`, :meth:`record_start`,
        :meth:`save_bucket`); an exception rolls it all back."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM leases WHERE account = ? AND renewed_at < ?", (account, now - ttl))
            yield self._shared(account, since, now - ttl)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def shared(self, account: str, now: float, *, since: float, ttl: float) -> Shared:
        """What :meth:`granting` would yield, read in one (read) transaction and changing nothing:
        a snapshot's view of the account."""
        self._db.execute("BEGIN")
        try:
            return self._shared(account, since, now - ttl)
        finally:
            self._db.execute("COMMIT")

    def _shared(self, account: str, since: float, live_after: float) -> Shared:
        saved = self.load(account, since, live_after=live_after)
        row = self._db.execute("SELECT tokens, at FROM buckets WHERE account = ?", (account,)).fetchone()
        return Shared(leases={h.lease_id: h.held for h in saved.leases}, starts=saved.starts, spend=saved.spend,
                      spent_usd=saved.spent_usd, bucket=None if row is None else (float(row[0]), float(row[1])))

    def hold_leases(self, account: str, leases: list[HeldLease], now: float | None = None) -> None:
        """Write started leases down (inside :meth:`granting`: part of its transaction)."""
        at = time.time() if now is None else now
        self._db.executemany("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(account, h.lease_id, h.run_id, h.held.started_at, h.held.inflight_at_start,
                               int(h.held.probe), h.held.reserved_usd, at, self.host) for h in leases])

    def save_bucket(self, account: str, tokens: float, at: float) -> None:
        self._db.execute("INSERT OR REPLACE INTO buckets VALUES (?, ?, ?)", (account, tokens, at))

    def renew(self, account: str, run_id: str, now: float) -> None:
        """The run is alive: its leases on ``account`` live another TTL."""
        self._db.execute("UPDATE leases SET renewed_at = ? WHERE account = ? AND run_id = ?", (now, account, run_id))

    def drop_run(self, account: str, run_id: str) -> int:
        """Delete every lease of ``run_id`` on ``account`` (its driver died; it is being resumed)."""
        return self._db.execute("DELETE FROM leases WHERE account = ? AND run_id = ?", (account, run_id)).rowcount

    def other_hosts(self, now: float, ttl: float) -> list[str]:
        """Hosts other than this one that hold live leases here: another machine's Ray grants
        through this file (a network filesystem), which SQLite cannot lock across hosts."""
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT host FROM leases WHERE renewed_at >= ? AND host NOT IN ('', ?) ORDER BY host",
            (now - ttl, self.host))]

    def drop_leases(self, account: str, lease_ids: list[str]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM leases WHERE account = ? AND lease_id = ?",
                                 [(account, lease) for lease in lease_ids])

    @contextlib.contextmanager
    def pool_granting(self, pool: str, now: float, *, ttl: float) -> Iterator[dict[str, tuple[str, float]]]:
        """A pool's grant, as :meth:`granting` is an account's: one ``BEGIN IMMEDIATE``
        transaction that expires the slots not renewed for ``ttl`` and yields every run's live
        slots (lease -> (run, since)); :meth:`hold_slots` inside it is part of it."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM pool_slots WHERE pool = ? AND renewed_at < ?", (pool, now - ttl))
            yield self.slots(pool)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def hold_slots(self, pool: str, run_id: str, lease_ids: list[str], since: float) -> None:
        """Write taken slots down (inside :meth:`pool_granting`: part of its transaction)."""
        self._db.executemany("INSERT OR REPLACE INTO pool_slots VALUES (?, ?, ?, ?, ?)",
                             [(pool, lease, run_id, since, since) for lease in lease_ids])

    def drop_slots(self, pool: str, lease_ids: list[str]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM pool_slots WHERE pool = ? AND lease_id = ?",
                                 [(pool, lease) for lease in lease_ids])

    def renew_slots(self, pool: str, run_id: str, now: float) -> None:
        self._db.execute("UPDATE pool_slots SET renewed_at = ? WHERE pool = ? AND run_id = ?", (now, pool, run_id))

    def drop_run_slots(self, pool: str, run_id: str) -> int:
        return self._db.execute("DELETE FROM pool_slots WHERE pool = ? AND run_id = ?", (pool, run_id)).rowcount

    def slots(self, pool: str, live_after: float = float("-inf")) -> dict[str, tuple[str, float]]:
        """lease -> (run, since) of the pool's slots (renewed at or after ``live_after``)."""
        return {r[0]: (r[1], r[2]) for r in self._db.execute(
            "SELECT lease_id, run_id, since FROM pool_slots WHERE pool = ? AND renewed_at >= ? ORDER BY since",
            (pool, max(live_after, -1e18)))}

    def save_health(self, account: str, *, state: str, cooling_until: float, episodes: int, auth_failures: int,
                    last_error: str, events_seen: int, writer: str = "") -> None:
        """Overwrite the account's health row; ``writer`` names the keeper that wrote it (see
        :meth:`stored_health`)."""
        self._db.execute("INSERT OR REPLACE INTO health (account, state, cooling_until, episodes, auth_failures, "
                         "last_error, updated_at, events_seen, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (account, state, max(cooling_until, -1e18), episodes, auth_failures, last_error,
                          time.time(), events_seen, writer))

    def stored_health(self, account: str) -> StoredHealth | None:
        """The account's health row as its last writer left it: what another run's keeper of the
        account (another Ray on this state root) learned, for this one to take up."""
        row = self._db.execute("SELECT state, cooling_until, last_error, events_seen, writer FROM health "
                               "WHERE account = ?", (account,)).fetchone()
        return None if row is None else StoredHealth(str(row[0]), float(row[1]), str(row[2]), int(row[3]),
                                                     str(row[4]))

    # -- reads ------------------------------------------------------------------------------
    def load(self, account: str, since: float, *, live_after: float = float("-inf")) -> Saved:
        """Starts and spend at or after ``since`` (the rolling window), all-time spend, health,
        and the leases renewed at or after ``live_after``."""
        saved = Saved()
        saved.starts = [r[0] for r in self._db.execute(
            "SELECT at FROM window_starts WHERE account = ? AND at >= ? ORDER BY at", (account, since))]
        saved.spend = [(r[0], r[1]) for r in self._db.execute(
            f"SELECT at, usd FROM spend WHERE account = ? AND at >= ? AND {_FINITE} ORDER BY at", (account, since))]
        totals = self._db.execute("SELECT bound, usd, n FROM spend_totals WHERE account = ? ORDER BY bound",
                                  (account,)).fetchall() if self._spend_totals else []
        if self._spend_totals and all(usd is not None and math.isfinite(usd) for _, usd, _ in totals):
            saved.spent_usd = float(sum(usd for _, usd, _ in totals))
            saved.spent_not_exact = {str(bound): int(n) for bound, _, n in totals if bound != "exact" and n}
        else:  # a file no writer of today opened yet, or a charge not finite in its totals: summed here
            self._load_spent(saved, account)
        row = self._db.execute("SELECT state, cooling_until, episodes, auth_failures, last_error, events_seen "
                               "FROM health WHERE account = ?", (account,)).fetchone()
        if row is not None:
            (saved.state, saved.cooling_until, saved.episodes, saved.auth_failures, saved.last_error,
             saved.events_seen) = row
        query = ("SELECT lease_id, run_id, started_at, inflight_at_start, probe, reserved_usd FROM leases "
                 "WHERE account = ? AND renewed_at >= ? ORDER BY started_at" if self._leases_shared else
                 "SELECT lease_id, run_id, started_at, inflight_at_start, probe, 0.0 FROM leases "
                 "WHERE account = ? AND ? IS NOT NULL ORDER BY started_at")
        saved.leases = [HeldLease(r[0], r[1], Running(r[2], r[3], bool(r[4]), r[5])) for r in self._db.execute(
            query, (account, max(live_after, -1e18)))]
        return saved

    def _load_spent(self, saved: Saved, account: str) -> None:
        """The lifetime spend summed from the charges, those not finite refused (counted apart)."""
        saved.spent_usd = float(self._db.execute(
            f"SELECT COALESCE(SUM(usd), 0) FROM spend WHERE account = ? AND {_FINITE}", (account,)).fetchone()[0])
        saved.spent_refused = int(self._db.execute(
            f"SELECT COUNT(*) FROM spend WHERE account = ? AND NOT {_FINITE}", (account,)).fetchone()[0])
        if self._spend_bounds:  # a file from before the column holds exact charges only
            saved.spent_not_exact = {str(r[0]): int(r[1]) for r in self._db.execute(
                f"SELECT bound, COUNT(*) FROM spend WHERE account = ? AND bound != 'exact' AND {_FINITE} "
                "GROUP BY bound", (account,))}

    def repair_spend(self, account: str) -> int:
        """Delete the account's charges that are not finite and sum its totals again from the
        rest, in one transaction; returns how many were deleted (``accounts repair``)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            # the delete trigger subtracts each charge: inf - inf is NaN, which a NOT NULL column
            # refuses, so the totals are zeroed first and summed again after
            self._db.execute("UPDATE spend_totals SET usd = 0 WHERE account = ?", (account,))
            gone = self._db.execute(f"DELETE FROM spend WHERE account = ? AND NOT {_FINITE}", (account,)).rowcount
            self._db.execute("DELETE FROM spend_totals WHERE account = ?", (account,))
            self._db.execute("INSERT INTO spend_totals SELECT account, bound, SUM(usd), COUNT(*) FROM spend "
                             "WHERE account = ? GROUP BY account, bound", (account,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return int(gone)

    def restore(self, core: AccountCore, now: float) -> Saved:
        """Give a new ``core`` what an earlier holder of its account left here: lifetime spend,
        its rolling window, its health and the slots held (what an ``AccountGrants`` keeper starts from)."""
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
