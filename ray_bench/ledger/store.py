"""The ledger: SQLite (WAL) in the run root, written by the driver alone.

Every table is insert-only. An attempt is inserted into ``attempts`` before its sandbox is
created; its terminal record goes into ``results`` after (``finished``, ``stale``,
``cancelled``); ``events`` is the append-only story of the run (drift, halts, hypotheses,
pauses, circuits). Nothing is ever updated or deleted, so a crash at any point leaves a ledger
that explains itself, and reports are rebuilt from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_bench import runroot
from ray_bench.errors import LedgerDamagedError, LedgerError, PlanError
from ray_bench.ledger.cost import UsageFacts, attempt_cost, stored_usage_facts
from ray_bench.ledger.events import KINDS, EventPayload, RunEvent, UnknownEvent, event_of, parse_event
from ray_bench.ledger.wal import wal_adds_nothing
from ray_bench.models.attempt import AttemptSummary
from ray_bench.numbers import MAX_AMOUNT

LEDGER_FILE = runroot.LEDGER_FILE  # the run-root layout has one definition (ray_bench.runroot)

#: 2: ``results.cost_usd`` is NULL for an unknown cost (1 stored it as 0, so a resumed run's spend
#: limit read an unknown-cost attempt as free) and ``results.charged_usd`` holds what the run's
#: spend admission charged such an attempt. 3: ``attempts.kind`` (``run``, or ``regrade``: only the
#: verifier ran, on ``attempts.source_attempt``'s kept workspace). An older ledger is migrated when
#: ``execute`` or ``regrade`` opens it (:func:`_migrate`) and read as the current version by readers
#: that leave it as it is.
SCHEMA_VERSION = "3"
#: Every version this code reads (the readers that refuse others: exports).
READ_SCHEMAS = frozenset({"1", "2", "3"})
#: ``attempts.kind``: an execution of the cell's agent and verifier, or a regrade of one.
RUN, REGRADE = "run", "regrade"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id    TEXT PRIMARY KEY,
    cell_id       TEXT NOT NULL,
    task          TEXT NOT NULL,
    task_checksum TEXT NOT NULL,
    arm           TEXT NOT NULL,
    rep           INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    account       TEXT NOT NULL,
    backend       TEXT NOT NULL,
    epoch         TEXT NOT NULL,
    preflight     INTEGER NOT NULL,
    started_at    REAL NOT NULL,
    kind          TEXT NOT NULL DEFAULT 'run',  -- run | regrade
    source_attempt TEXT,                        -- regrade: the attempt whose workspace it graded
    UNIQUE (cell_id, seq)
);
CREATE TABLE IF NOT EXISTS results (
    attempt_id    TEXT PRIMARY KEY REFERENCES attempts (attempt_id),
    status        TEXT NOT NULL,          -- finished | stale | cancelled
    finished_at   REAL NOT NULL,
    valid         INTEGER NOT NULL,
    reward        REAL,
    failure_class TEXT,
    fingerprint   TEXT,
    counts        INTEGER NOT NULL,       -- counts against the cell's max_attempts
    cost_usd      REAL,                   -- NULL: unknown (usage with no cost, or no usage record)
    summary       TEXT NOT NULL,
    charged_usd   REAL                    -- an unknown cost: what the run's spend admission charged
);
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    ts         REAL NOT NULL,
    kind       TEXT NOT NULL,
    attempt_id TEXT,
    cell_id    TEXT,
    data       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_cell ON attempts (cell_id);
CREATE INDEX IF NOT EXISTS events_kind ON events (kind);
"""

#: A result's validity as :meth:`Ledger.attempts` reads it: stored valid, and a reward that is
#: finite or none (an infinite one, stored before issue 58, is no row; SQLite stores NaN as NULL).
_VALID = "({r}.valid != 0 AND ({r}.reward IS NULL OR abs({r}.reward) <= 1.7976931348623157e308))"

#: One row per cell with an attempt, kept by triggers in the transaction of each attempt's start
#: and end (issue 57: ``status`` counts cells from it instead of folding every attempt row), the
#: one table that is updated: an index of ``attempts`` and ``results``, never evidence of its own.
#: ``open``: attempts of any kind without a terminal record; ``valid``, ``failures`` (finished and
#: invalid), ``counted`` (of those, counted against ``max_attempts``): of ``run`` attempts, as
#: :class:`ray_bench.scheduler.runstate.RunState` folds them; ``accepted``: the valid ``run``
#: attempt that started first (``accepted_rows``' order: started, epoch, id) and its reward.
#: Created, and filled from the rows already there, when a writer opens a ledger without it
#: (:func:`_keep_cells`); a reader of a ledger without it reads every attempt, as before.
_CELLS = f"""
CREATE TABLE IF NOT EXISTS cells (
    cell_id          TEXT PRIMARY KEY,
    open             INTEGER NOT NULL DEFAULT 0,
    valid            INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    counted          INTEGER NOT NULL DEFAULT 0,
    accepted         TEXT,
    accepted_started REAL,
    accepted_epoch   TEXT,
    accepted_reward  REAL
);
CREATE TRIGGER IF NOT EXISTS cells_started AFTER INSERT ON attempts BEGIN
    INSERT INTO cells (cell_id, open) VALUES (NEW.cell_id, 1)
    ON CONFLICT (cell_id) DO UPDATE SET open = open + 1;
END;
CREATE TRIGGER IF NOT EXISTS cells_ended AFTER INSERT ON results BEGIN
    UPDATE cells SET
        open = open - 1,
        valid = valid + (a.run AND {_VALID.format(r="NEW")}),
        failures = failures + (a.run AND NEW.status = 'finished' AND NOT {_VALID.format(r="NEW")}),
        counted = counted + (a.run AND NEW.status = 'finished' AND NOT {_VALID.format(r="NEW")} AND NEW.counts != 0),
        accepted = CASE WHEN a.first THEN NEW.attempt_id ELSE accepted END,
        accepted_started = CASE WHEN a.first THEN a.started_at ELSE accepted_started END,
        accepted_epoch = CASE WHEN a.first THEN a.epoch ELSE accepted_epoch END,
        accepted_reward = CASE WHEN a.first THEN NEW.reward ELSE accepted_reward END
    FROM (SELECT x.cell_id, x.started_at, x.epoch, x.kind = 'run' AS run,
                 x.kind = 'run' AND {_VALID.format(r="NEW")} AND (c.accepted IS NULL OR
                     (x.started_at, x.epoch, x.attempt_id) < (c.accepted_started, c.accepted_epoch, c.accepted))
                     AS first
          FROM attempts x JOIN cells c USING (cell_id) WHERE x.attempt_id = NEW.attempt_id) AS a
    WHERE cells.cell_id = a.cell_id;
END;
"""

#: The cells of the rows already there (:func:`_keep_cells`): the same fold as the triggers'.
_CELLS_FILL = f"""
INSERT INTO cells (cell_id, open, valid, failures, counted)
SELECT a.cell_id,
       sum(r.attempt_id IS NULL),
       sum(coalesce(a.kind = 'run' AND {_VALID.format(r="r")}, 0)),
       sum(coalesce(a.kind = 'run' AND r.status = 'finished' AND NOT {_VALID.format(r="r")}, 0)),
       sum(coalesce(a.kind = 'run' AND r.status = 'finished' AND NOT {_VALID.format(r="r")} AND r.counts != 0, 0))
FROM attempts a LEFT JOIN results r USING (attempt_id) GROUP BY a.cell_id;
UPDATE cells SET (accepted, accepted_started, accepted_epoch, accepted_reward) = (
    SELECT a.attempt_id, a.started_at, a.epoch, r.reward FROM attempts a JOIN results r USING (attempt_id)
    WHERE a.cell_id = cells.cell_id AND a.kind = 'run' AND {_VALID.format(r="r")}
    ORDER BY a.started_at, a.epoch, a.attempt_id LIMIT 1)
WHERE valid > 0;
"""


@dataclass(frozen=True)
class AttemptRow:
    attempt_id: str
    cell_id: str
    task: str
    task_checksum: str
    arm: str
    rep: int
    seq: int
    account: str
    backend: str
    epoch: str
    preflight: bool
    started_at: float
    status: str | None = None  # None: no terminal record yet
    finished_at: float | None = None
    valid: bool = False
    reward: float | None = None
    failure_class: str | None = None
    fingerprint: str | None = None
    counts: bool = False
    cost_usd: float | None = 0.0
    """None: unknown (never read as $0); 0 until the attempt has a terminal record."""
    charged_usd: float | None = None
    """An unknown cost: what the run's spend admission charged it (None: not recorded)."""
    kind: str = RUN
    """``run``, or ``regrade`` (only the verifier ran, on ``source_attempt``'s kept workspace)."""
    source_attempt: str | None = None
    regraded_by: str | None = None
    """An accepted row whose reward (and task checksum) came from this regrade attempt
    (:func:`ray_bench.ledger.rows.accepted_rows`); never stored."""
    lower_bound: bool = False
    """Its known cost (and tokens) are a lower bound: read from its summary's usage
    (:func:`ray_bench.ledger.cost.cost_is_lower_bound`), so a ledger older than the field reads too."""
    usage: UsageFacts | None = None
    """Its usage record's tokens and cost (None: none, or of unknown spend), read once here for
    every reader (the report's token and cost columns among them)."""

    @property
    def terminal(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class CostRow:
    """An attempt's cost as :class:`AttemptRow` reads it (what the spend readers need of a row)."""

    attempt_id: str
    cost_usd: float | None
    lower_bound: bool = False


@dataclass(frozen=True)
class CellGroup:
    """Cells alike in what decides their state (:meth:`Ledger.tally`): ``valid`` (a valid ``run``
    attempt), ``counted`` and ``failures`` (finished invalid ``run`` attempts, and of those the
    counted ones), ``open`` (an attempt without a terminal record); ``solved``: of them, those
    whose accepted row's reward reached the ``solved_at`` asked."""

    valid: bool
    counted: int
    failures: int
    open: bool
    cells: int
    solved: int


@dataclass(frozen=True)
class LedgerTally:
    """What ``status`` counts of a ledger, read without its attempt rows (:meth:`Ledger.tally`):
    the cells that have an attempt, grouped; every attempt's number, failure classes and cost; the
    valid rows' finish times (the pace); the latest start and finish."""

    groups: list[CellGroup]
    attempts: int
    failures: dict[str, int]
    #: The attempts whose cost is not a plain known figure, and the plain figures of the others.
    costs: list[CostRow]
    plain_costs: list[float]
    valid_finished: list[float]
    last_started: float | None
    last_finished: float | None


#: How an attempt its driver gave up on is recorded: ``stale``, invalid, this class and
#: fingerprint, not counted against its cell, of unknown cost (its usage died with its runner;
#: never $0). Written by the resume (ray_bench.scheduler.session.stale_end) and by
#: ``ledger rebuild`` for an attempt a later one of its cell superseded.
STALE_STATUS, STALE_CLASS, STALE_FINGERPRINT = "stale", "executor", "stale-runner"


def stale_summary(row: AttemptRow, removed: int | None) -> AttemptSummary:
    """The terminal summary of a stale attempt (``removed``: its sandboxes removed by label)."""
    return AttemptSummary(attempt_id=row.attempt_id, cell_id=row.cell_id, task=row.task, arm=row.arm, rep=row.rep,
                          account=row.account, backend=row.backend, started_at=row.started_at, stale=True,
                          sandboxes_removed=removed)


@dataclass(frozen=True)
class Event:
    seq: int
    ts: float
    kind: str
    attempt_id: str | None
    cell_id: str | None
    data: dict[str, Any]  # as stored; readers use :attr:`event`
    #: The row as its typed event (an UnknownEvent for a kind or shape this version cannot type).
    event: RunEvent | UnknownEvent


#: Hears every event appended, after it is committed (the run's observers: ray_bench.scheduler.observers).
Listener = Callable[[RunEvent], None]


def connect_readonly(path: Path, probe: str) -> sqlite3.Connection:
    """A read-only connection to a WAL database that leaves nothing behind (see
    :meth:`Ledger.open_readonly`): ``immutable=1`` when there is no ``-wal``, else ``mode=ro``.
    ``probe`` is a query that must answer; raises ``sqlite3.DatabaseError`` when none does."""
    modes = ["immutable=1", "mode=ro"] if not Path(f"{path}-wal").exists() else ["mode=ro"]
    for i, mode in enumerate(modes):
        try:
            return _probed(path, mode, probe)
        except sqlite3.DatabaseError:
            # mode=ro only if a writer started between the check and the read (its -wal is
            # there now): on a damaged file it would create the -wal and -shm and leave them
            if i == len(modes) - 1 or not Path(f"{path}-wal").exists():
                raise
    raise AssertionError("unreachable")


def _probed(path: Path, mode: str, probe: str) -> sqlite3.Connection:
    """``path`` opened with the URI parameter ``mode`` (``immutable=1``: the file alone, without
    locks, exact when no writer writes it and its WAL adds nothing; ``mode=ro``), once ``probe``
    answered; closed again when it does not."""
    conn = sqlite3.connect(f"file:{urllib.parse.quote(str(path.resolve()))}?{mode}", uri=True,
                           check_same_thread=False)
    try:
        conn.execute(probe).fetchall()
    except BaseException:
        conn.close()
        raise
    return conn


def _snapshot(path: Path, probe: str) -> tuple[sqlite3.Connection, tempfile.TemporaryDirectory[str]]:
    """The database and its ``-wal`` read from a copy in a private directory (SQLite applies the
    WAL there), so nothing is created beside ``path``; the directory lives as long as the
    connection (:meth:`Ledger.close` removes it). For a ledger no driver writes whose ``-wal``
    holds commits the file lacks (its ``-shm`` lost). The copy stays on disk: read into memory
    (serialized, then deserialized) it was three times the ledger there, 320 MiB of ``status``
    on the 75 MB ledger of 100,000 rows (tests/perf/README.md)."""
    scratch = tempfile.TemporaryDirectory(prefix="ray-bench-ledger-")
    try:
        copy = Path(scratch.name) / path.name
        shutil.copyfile(path, copy)
        with contextlib.suppress(FileNotFoundError):  # checkpointed by a writer meanwhile
            shutil.copyfile(f"{path}-wal", f"{copy}-wal")
        conn = _probed(copy, "mode=ro", probe)
    except BaseException:
        scratch.cleanup()
        raise
    return conn, scratch


def use_wal(conn: sqlite3.Connection, within: float = 30.0) -> None:
    """Put ``conn``'s database in WAL mode. Switching needs the file's exclusive lock, and
    SQLite answers ``database is locked`` at once, without its busy timeout, while another
    process opens the same new file (two drivers' first grants on a fresh state root: measured
    here in 1 of 3 tries of two spawned processes); the switch is tried again ``within``
    seconds. An existing WAL database needs no lock to stay one."""
    deadline = time.monotonic() + within
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


#: How long a writer's close waits for a reader to let it remove the -wal and -shm files.
WAL_SETTLE_SEC = 1.0


class Ledger:
    """One run's ledger. Open with :meth:`create` (execute) or :meth:`open_readonly`."""

    def __init__(self, conn: sqlite3.Connection, path: Path, *, writer: bool = False,
                 scratch: tempfile.TemporaryDirectory[str] | None = None) -> None:
        self._conn = conn
        self.path = path
        self._writer = writer
        self._scratch = scratch  # a private copy read instead of path (:func:`_snapshot`)
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with every event appended from now on: the append is the notification."""
        self._listeners.append(listener)

    @classmethod
    def create(cls, run_root: Path, *, run_id: str, plan_identity: str) -> Ledger:
        path = runroot.RunPaths(run_root).ledger
        conn = _connect(path)
        try:
            with conn:
                conn.executescript(_SCHEMA)
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
                if meta and meta.get("plan_identity") == plan_identity:
                    _migrate(conn, meta.get("schema", "1"))
                if not meta:
                    conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                        ("schema", SCHEMA_VERSION), ("run_id", run_id), ("plan_identity", plan_identity),
                        ("created_at", repr(time.time()))])
            if not meta or meta.get("plan_identity") == plan_identity:
                _keep_cells(conn)
        except BaseException:
            conn.close()  # no handle left open on the run root (a full disk, a damaged file)
            raise
        if meta and meta.get("plan_identity") != plan_identity:
            conn.close()
            raise PlanError(f"this run root belongs to plan {meta.get('plan_identity')}",
                            where=str(run_root), fix="execute that plan, or plan a new run id")
        return cls(conn, path, writer=True)

    @classmethod
    def open_readonly(cls, run_root: Path) -> Ledger:
        """Read the ledger and leave nothing behind. ``mode=ro`` on a WAL database creates the
        ``-wal`` and ``-shm`` files when they are absent (and leaves them); ``immutable=1`` reads
        the file alone without locks, which is exact when there is no ``-wal`` (no writer since
        the last clean close). When a ``-wal`` exists (a live or crashed driver) its commits
        matter, so ``mode=ro`` reads them; the files exist already, except a ``-wal`` without its
        ``-shm`` (a driver killed at its close): ``mode=ro`` would create the ``-shm`` and leave
        it (SQLite https://sqlite.org/wal.html#readonly: a reader needs the wal-index, and
        ``nolock``, ``immutable`` or exclusive locking read no WAL read-only; measured). With no
        driver holding the run's lock: when the WAL holds no commit the file lacks (a driver killed
        at its close checkpointed it before removing the ``-shm``; SQLite removes both on a clean
        close, measured), the file alone is read (``immutable=1``); else the ledger and its WAL
        are read from a private copy on disk."""
        path = runroot.RunPaths(run_root).ledger
        if not path.is_file():
            raise LedgerError(f"no ledger at {path}: the run has not started")
        probe = "SELECT 1 FROM meta"
        try:
            if Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists() \
                    and not runroot.lock_holder(run_root).held:
                if wal_adds_nothing(path):
                    return cls(_probed(path, "immutable=1", probe), path)
                conn, scratch = _snapshot(path, probe)
                return cls(conn, path, scratch=scratch)
            return cls(connect_readonly(path, probe), path)
        except sqlite3.DatabaseError as exc:
            raise LedgerDamagedError(f"is not a readable ledger ({exc})", where=str(path),
                                     fix="restore it from a copy, or move it aside and rebuild it from the "
                                         f"attempts: ray-bench ledger rebuild {run_root}") from None

    @classmethod
    @contextlib.contextmanager
    def reading(cls, run_root: Path) -> Iterator[Ledger]:
        """The ledger opened as :meth:`open_readonly` does, closed when the block ends: the one
        way a reader reads a ledger (a handle left open keeps a writer's ``-wal`` for good)."""
        ledger = cls.open_readonly(run_root)
        try:
            yield ledger
        finally:
            ledger.close()

    @classmethod
    def read_attempts(cls, run_root: Path) -> list[AttemptRow]:
        """Every attempt of the run root's ledger (:meth:`attempts`), read and closed."""
        with cls.reading(run_root) as ledger:
            return ledger.attempts()

    def close(self) -> None:
        """Close; a writer's close also leaves no ``-wal``/``-shm`` beside the ledger. SQLite
        removes them when the last connection closes, so a reader open at that moment (a
        ``status --watch``, a scrape) kept them for good (issue 58): the close is tried again
        for up to :data:`WAL_SETTLE_SEC` while that reader finishes."""
        self._conn.close()
        if self._scratch is not None:
            self._scratch.cleanup()
        if not self._writer:
            return
        wal = Path(f"{self.path}-wal")
        deadline = time.monotonic() + WAL_SETTLE_SEC
        while wal.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(sqlite3.Error):
                again = sqlite3.connect(self.path, timeout=0.1)
                try:
                    again.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # it opens the file; a query must
                finally:
                    again.close()  # the last connection to close removes the -wal and -shm

    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    # -- writes (the driver alone) -------------------------------------------------------

    def start_attempt(self, *, cell_id: str, task: str, task_checksum: str, arm: str, rep: int,
                      account: str, backend: str, epoch: str, preflight: bool,
                      now: float | None = None, taken: Callable[[int], bool] | None = None,
                      kind: str = RUN, source_attempt: str | None = None) -> AttemptRow:
        """Record an attempt as started. Called before its sandbox exists. An attempt number that
        ``taken`` says is in use (its directory exists: an older ledger, a partial copy) is
        skipped, so that no attempt writes into another's directory. ``kind`` ``regrade``: a
        verifier run on ``source_attempt``'s kept workspace (an attempt of the same cell)."""
        started = time.time() if now is None else now
        with self._conn:
            (seq,) = self._conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE cell_id = ?", (cell_id,)).fetchone()
            while taken is not None and taken(seq):
                seq += 1
            attempt_id = runroot.attempt_id_of(cell_id, seq)
            self._conn.execute(
                "INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (attempt_id, cell_id, task, task_checksum, arm, rep, seq, account, backend, epoch,
                 int(preflight), started, kind, source_attempt))
        return AttemptRow(attempt_id, cell_id, task, task_checksum, arm, rep, seq, account, backend,
                          epoch, preflight, started, kind=kind, source_attempt=source_attempt)

    def restore_attempt(self, row: AttemptRow) -> None:
        """Record a started attempt as it was (its seq included): ``ledger rebuild`` only."""
        with self._conn:
            self._conn.execute(
                "INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (row.attempt_id, row.cell_id, row.task, row.task_checksum, row.arm, row.rep, row.seq, row.account,
                 row.backend, row.epoch, int(row.preflight), row.started_at, row.kind, row.source_attempt))

    def finish_attempt(self, attempt_id: str, *, status: str, valid: bool, reward: float | None,
                       failure_class: str | None, fingerprint: str | None, counts: bool,
                       cost_usd: float | None, summary: AttemptSummary, now: float | None = None,
                       charged_usd: float | None = None) -> None:
        """``cost_usd`` None: unknown; ``charged_usd``: what the run's spend admission charged it."""
        finished = time.time() if now is None else now
        try:
            with self._conn:
                self._conn.execute(
                    "INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (attempt_id, status, finished, int(valid), reward, failure_class, fingerprint,
                     int(counts), cost_usd, summary.dumps(), charged_usd if cost_usd is None else None))
        except sqlite3.IntegrityError as exc:
            raise LedgerError(f"attempt {attempt_id} already has a terminal record") from exc

    def append(self, event: RunEvent, *, attempt_id: str | None = None, cell_id: str | None = None,
               now: float | None = None) -> None:
        """Append a typed event (:mod:`ray_bench.ledger.events`), then tell the listeners."""
        with self._conn:
            self._conn.execute(
                "INSERT INTO events (ts, kind, attempt_id, cell_id, data) VALUES (?,?,?,?,?)",
                (time.time() if now is None else now, event.kind, attempt_id, cell_id,
                 json.dumps(event.to_json(), sort_keys=True)))
        for listener in self._listeners:
            listener(event)

    def event(self, kind: str, data: dict[str, Any] | EventPayload | None = None, *, attempt_id: str | None = None,
              cell_id: str | None = None, now: float | None = None) -> None:
        """The old ``(kind, data)`` API, kept for branches written before the typed events: a known
        kind is validated into its model (a misspelt field raises); a kind not yet in
        :data:`~ray_bench.ledger.events.RunEvent` is stored as given and reads back as an
        UnknownEvent (listeners do not hear it). New code calls :meth:`append`."""
        if isinstance(data, EventPayload):
            if data.kind != kind:
                raise ValueError(f"a {type(data).__name__} is not a {kind!r} event")
            data = data.to_json()
        if kind in KINDS:
            self.append(event_of(kind, data), attempt_id=attempt_id, cell_id=cell_id, now=now)  # type: ignore[arg-type]  # a member of RunEvent
            return
        with self._conn:
            self._conn.execute(
                "INSERT INTO events (ts, kind, attempt_id, cell_id, data) VALUES (?,?,?,?,?)",
                (time.time() if now is None else now, kind, attempt_id, cell_id,
                 json.dumps(data or {}, sort_keys=True)))

    # -- reads -----------------------------------------------------------------------------

    def attempts(self) -> list[AttemptRow]:
        schema = self.meta().get("schema", "1")
        old = schema == "1"  # read-only on a version-1 ledger: no charged_usd
        kinds = "'run', NULL" if schema in ("1", "2") else "a.kind, a.source_attempt"  # read-only: no kind
        rows = self._conn.execute(
            "SELECT a.attempt_id, a.cell_id, a.task, a.task_checksum, a.arm, a.rep, a.seq, a.account,"
            " a.backend, a.epoch, a.preflight, a.started_at, r.status, r.finished_at, r.valid, r.reward,"
            " r.failure_class, r.fingerprint, r.counts, r.cost_usd, "
            + ("r.summary, NULL" if old else f"{_CANCELLED_AT_ZERO}, r.charged_usd") + f", {kinds}, {_USAGE}"
            + " FROM attempts a LEFT JOIN results r USING (attempt_id) ORDER BY a.started_at, a.attempt_id")
        out = []
        # one object per distinct task, arm, account, epoch... (SQLite gives a new str per row):
        # ~500 bytes a row, 50 MB of a report's 100,000 rows (issue 57)
        same: dict[Any, Any] = {}
        one = same.setdefault
        for r in rows:
            cost = _stored_cost(r[12], r[19], r[20]) if r[12] is not None else 0.0
            usage = stored_usage_facts(r[24])
            # a reward an older ray-bench stored that is not finite (inf read as solved) is no row
            reward, finite_reward = r[15], r[15] is None or math.isfinite(r[15])
            out.append(AttemptRow(r[0], r[1], one(r[2], r[2]), one(r[3], r[3]), one(r[4], r[4]), r[5], r[6],
                                  one(r[7], r[7]), one(r[8], r[8]), one(r[9], r[9]), bool(r[10]), r[11],
                                  one(r[12], r[12]), r[13],
                                  bool(r[14]) and finite_reward if r[14] is not None else False,
                                  reward if finite_reward else None, one(r[16], r[16]), one(r[17], r[17]),
                                  bool(r[18]) if r[18] is not None else False, cost, r[21], one(r[22], r[22]), r[23],
                                  lower_bound=cost is not None and r[12] is not None and _lower(usage),
                                  usage=usage))
        return out

    def tally(self, solved_at: float) -> LedgerTally | None:
        """What ``status`` counts, without reading every attempt row: the cells from the ``cells``
        table (grouped), the rest from one table at a time. ``None`` where it cannot be exact, and
        the caller reads :meth:`attempts`: a ledger without the table, of an older schema (its
        costs are read otherwise), or with a regrade (which re-scores an accepted row)."""
        # one read transaction: a driver writing meanwhile is seen at one moment by every query
        self._conn.execute("BEGIN")
        try:
            return self._tally(solved_at)
        finally:
            self._conn.execute("ROLLBACK")

    def _tally(self, solved_at: float) -> LedgerTally | None:
        if self.meta().get("schema") != SCHEMA_VERSION or not _keeps_cells(self._conn) or \
                self._conn.execute("SELECT 1 FROM attempts WHERE kind != 'run' LIMIT 1").fetchone():
            return None
        groups = [CellGroup(bool(r[0]), r[1], r[2], bool(r[3]), r[4], r[5]) for r in self._conn.execute(
            "SELECT valid > 0, counted, failures, open > 0, count(*), sum(valid > 0 AND coalesce(accepted_reward, 0.0)"
            " >= ?) FROM cells GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4", (solved_at,))]
        failures = dict(self._conn.execute(
            f"SELECT failure_class, count(*) FROM results r WHERE status = 'finished' AND NOT {_VALID.format(r='r')}"
            " AND failure_class IS NOT NULL AND failure_class != '' GROUP BY failure_class ORDER BY failure_class"
        ).fetchall())
        # a row whose cost is a plain known figure is summed from its column; the others (unknown, out of
        # range, cancelled at $0, a usage that may be a lower bound) are read as :meth:`attempts` reads them
        plain = (f"r.cost_usd IS NOT NULL AND r.cost_usd BETWEEN 0 AND {MAX_AMOUNT!r} AND NOT (r.status = 'cancelled'"
                 f" AND r.cost_usd = 0) AND NOT {_MAYBE_LOWER}")
        plain_costs = [r[0] for r in self._conn.execute(f"SELECT r.cost_usd FROM results r WHERE {plain}")]
        query = (f"SELECT r.attempt_id, r.status, r.cost_usd, {_CANCELLED_AT_ZERO}, {_USAGE} FROM results r"
                 f" WHERE NOT ({plain})")
        costs = [CostRow(r[0], cost := _stored_cost(r[1], r[2], r[3]),
                         cost is not None and _lower(stored_usage_facts(r[4]))) for r in self._conn.execute(query)]
        # attempts without a terminal record cost $0 until they have one (as :meth:`attempts` reads them)
        costs += [CostRow(r[0], 0.0, False) for r in self._conn.execute(
            "SELECT attempt_id FROM attempts WHERE cell_id IN (SELECT cell_id FROM cells WHERE open > 0)"
            " AND attempt_id NOT IN (SELECT attempt_id FROM results)")]
        return LedgerTally(
            groups=groups, attempts=self._conn.execute("SELECT count(*) FROM attempts").fetchone()[0],
            failures=failures, costs=costs, plain_costs=plain_costs,
            valid_finished=[r[0] for r in self._conn.execute(
                f"SELECT finished_at FROM results r WHERE {_VALID.format(r='r')}")],
            last_started=self._conn.execute("SELECT max(started_at) FROM attempts").fetchone()[0],
            last_finished=self._conn.execute("SELECT max(finished_at) FROM results").fetchone()[0])

    def summary(self, attempt_id: str) -> AttemptSummary | None:
        row = self._conn.execute("SELECT summary FROM results WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return AttemptSummary.loads(row[0]) if row else None

    def summaries(self, fields: Collection[str] | None = None) -> Iterator[tuple[str, AttemptSummary]]:
        """Every terminal summary (``fields``: only these read, as :meth:`AttemptSummary.loads`
        reads them; SQLite takes them out of the text, so the rest is never decoded)."""
        if fields is None:
            for attempt_id, text in self._conn.execute("SELECT attempt_id, summary FROM results"):
                yield attempt_id, AttemptSummary.loads(text)
            return
        names = list(fields)
        picked = ", ".join("CASE WHEN json_valid(summary) THEN summary -> ? END" for _ in names)
        for attempt_id, *texts in self._conn.execute(f"SELECT attempt_id, {picked} FROM results",
                                                     [f"$.{n}" for n in names]):
            yield attempt_id, AttemptSummary.parse({n: json.loads(t) for n, t in zip(names, texts, strict=True)
                                                    if t is not None})

    def events(self, kind: str | type[EventPayload] | None = None, *,
               exclude: str | type[EventPayload] | None = None) -> list[Event]:
        """Every event in order, or those of one kind (a model of :mod:`ray_bench.ledger.events`),
        or every event but those of kind ``exclude`` (left out by the query, never parsed)."""
        query = "SELECT seq, ts, kind, attempt_id, cell_id, data FROM events"
        args: tuple[str, ...] = ()
        if kind is not None:
            query += " WHERE kind = ?"
            args = (_kind_name(kind),)
        elif exclude is not None:
            query += " WHERE kind != ?"
            args = (_kind_name(exclude),)
        return [_event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]))
                for r in self._conn.execute(query + " ORDER BY seq", args)]

    def last_ts(self, kind: str | type[EventPayload], *, after: int) -> float | None:
        """The latest time of an event of one kind after the event ``after`` (a seq), from the
        kind's index: a heartbeat every 30 s for days is not read to find the last one."""
        row = self._conn.execute("SELECT max(ts) FROM events WHERE kind = ? AND seq > ?",
                                 (_kind_name(kind), after)).fetchone()
        return None if row is None or row[0] is None else float(row[0])


def _kind_name(kind: str | type[EventPayload]) -> str:
    return str(kind.model_fields["kind"].default) if isinstance(kind, type) else kind


def _event(seq: int, ts: float, kind: str, attempt_id: str | None, cell_id: str | None, data: Any) -> Event:
    data = data if isinstance(data, dict) else {"value": data}
    return Event(seq, ts, kind, attempt_id, cell_id, data, parse_event(kind, data))


#: The summary of a row whose stored $0 may be wrong in a version-2+ ledger: a cancelled
#: attempt, which drivers before issue 25 recorded at $0 whatever its agent had spent.
_CANCELLED_AT_ZERO = "CASE WHEN r.status = 'cancelled' AND r.cost_usd = 0 THEN r.summary END"


#: A result whose usage may be a lower bound (:attr:`Usage.lower_bound`: its ``bound`` says so, or,
#: without one, it names an unfinished message or a call under way); a superset, read in full.
_MAYBE_LOWER = ("coalesce(json_valid(r.summary) AND (json_extract(r.summary, '$.usage.bound') IS 'lower_bound' OR"
                " (json_extract(r.summary, '$.usage.bound') IS NULL AND"
                " (json_extract(r.summary, '$.usage.unfinished_messages') IS NOT NULL OR"
                " json_extract(r.summary, '$.usage.call_under_way') IS NOT NULL))), 1)")

#: A result's usage record (its JSON text): its tokens, cost and bound, read once (:func:`stored_usage_facts`).
_USAGE = "CASE WHEN json_valid(r.summary) THEN json_extract(r.summary, '$.usage') END"


def _lower(usage: UsageFacts | None) -> bool:
    """A usage record is a lower bound (:attr:`Usage.lower_bound`); none is no bound at all."""
    return usage is not None and usage.lower_bound


def _stored_cost(status: str, cost: float | None, summary: str | None) -> float | None:
    """A row's cost. A stored $0 with its summary beside it (every version-1 row: version 1
    stored an unknown cost as 0; a cancelled one of any version: recorded at $0 before issue 25)
    is read again from the summary (:func:`ray_bench.ledger.cost.attempt_cost`): its usage, or
    whether its agent started, says whether the cost is known. Never a $0 that was not spent."""
    if cost is not None and not 0 <= cost <= MAX_AMOUNT:  # inf, -100: stored before issue 58, unknown
        return None
    if summary is None or (cost or 0.0) > 0:
        return cost
    return attempt_cost(AttemptSummary.loads(summary))


def _migrate(conn: sqlite3.Connection, schema: str) -> None:
    """Bring an existing ledger to :data:`SCHEMA_VERSION`, keeping every row, in one
    transaction (a crash leaves the old ledger as it was), when ``execute`` (or ``regrade``) opens
    it. Version 1 -> 2: SQLite cannot drop a NOT NULL in place, so ``results`` is copied into the
    new shape, an unknown cost read again from its summary (version 1 stored it as 0). Version
    2 -> 3: ``attempts`` gains ``kind`` (every older attempt is a ``run``) and ``source_attempt``."""
    if schema == SCHEMA_VERSION:
        return
    if schema not in READ_SCHEMAS:
        raise LedgerError(f"ledger schema {schema!r} is newer than this ray-bench reads ({SCHEMA_VERSION})")
    results = _SCHEMA.split("CREATE TABLE IF NOT EXISTS results")[1].split(";", maxsplit=1)[0]
    conn.execute("BEGIN IMMEDIATE")  # executescript committed; the copy is one transaction
    try:
        if schema == "1":
            old = conn.execute("SELECT attempt_id, status, finished_at, valid, reward, failure_class, fingerprint,"
                               " counts, cost_usd, summary FROM results").fetchall()
            conn.execute("CREATE TABLE results_v2" + results)
            conn.executemany("INSERT INTO results_v2 VALUES (?,?,?,?,?,?,?,?,?,?,NULL)",
                             [(*r[:8], _stored_cost(r[1], r[8], r[9]), r[9]) for r in old])
            conn.execute("DROP TABLE results")
            conn.execute("ALTER TABLE results_v2 RENAME TO results")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(attempts)")}
        if "kind" not in columns:
            conn.execute("ALTER TABLE attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'run'")
        if "source_attempt" not in columns:
            conn.execute("ALTER TABLE attempts ADD COLUMN source_attempt TEXT")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _keeps_cells(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN "
                         "('cells_started', 'cells_ended')").fetchone()[0]
    return int(found) == 2


def _keep_cells(conn: sqlite3.Connection) -> None:
    """Give a ledger the ``cells`` table and its triggers, filled from the rows already there, in
    one transaction (a crash leaves the ledger without them, and readers read every attempt).
    After :func:`_migrate`, whose copy of ``results`` would drop a trigger on it."""
    if _keeps_cells(conn):
        return
    try:
        conn.executescript(f"BEGIN IMMEDIATE; DROP TABLE IF EXISTS cells; {_CELLS} {_CELLS_FILL} COMMIT;")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, isolation_level="DEFERRED", check_same_thread=False)
        use_wal(conn)
        # NORMAL in WAL mode survives a process crash (SIGKILL); only power loss can drop the
        # last commits, and the sandbox audit covers what those would have described.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"cannot open ledger {path}: {exc}") from exc
    return conn
