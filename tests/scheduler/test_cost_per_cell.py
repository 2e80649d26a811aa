"""What one no-op cell costs the driver and the runner, counted, not timed (issue #30, step 7).

A timer flakes on a shared machine; a count does not. 40 no-op cells run through the real driver,
runner and local backend in this process (``support.runs.execute_here``), and every operation
whose number per cell decides the cost of a large run is counted: the ledger's SQL statements and
transactions, the admission gate's calls, the sandbox operations and processes, the files each
attempt leaves. The bounds are today's counts (measured 2026-12-03 on 40 cells: 7.5 statements per cell in 2.1
transactions, one lease asked and one released, 25 acquire calls in all as launches batch, per
cell one create, two uploads, two execs, one download and one delete, and two files: the reward
and ``result.json``; since 2026-12-04 also the processes each cell starts, two, and its
file-system calls: ``FS_PER_CELL``), so a change that adds per-cell work
fails here and has to say why in this file.
"""

from __future__ import annotations

import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.local_pool import ConcurrentPool
from support.ray_local import set_test_routes
from support.runs import ledger_rows
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import store
from ray_bench.plan.store import confirm_plan
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.local import LocalBackend, LocalSandbox
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions

CELLS = 40
#: File-system calls per cell with a Python audit event, driver and runner together, bounded a
#: little above the counts of 2026-12-04 (main bd2fd1a -> now): ``open`` 24.5 -> 18.5 (the
#: sandbox's record read back twice, rmtree's opens), ``os.scandir`` 33.1 -> 17.9 (every tree
#: walked to see whether it was small, then walked again to copy, move or remove it; a round's
#: drift check walking its one task once per cell), ``os.mkdir`` 16.25 -> 12.25 (each copied
#: directory made twice), ``os.rmdir`` 4, ``os.remove`` 3, ``os.rename`` 3 (the sandbox into place,
#: its logs out, result.json). ``open`` leaves out /proc (since 2026-12-06: 14.5 per cell, quiet
#: or under two busy loops; their count grows with the host's other processes), nor a descriptor
#: wrapped in a file object (since 2026-12-07, when files.write_whole made one per file written
#: whole: 12.3 per cell).
FS_PER_CELL = {"open": 13.0, "os.scandir": 19.5, "os.mkdir": 12.5, "os.rmdir": 4.0, "os.remove": 3.1,
               "os.rename": 3.0}
#: File-system calls a run makes once whatever its cells (the run summary written whole: a
#: rename), beside FS_PER_CELL: a per-cell call still adds one per cell, 40 here.
FS_PER_RUN = 4
#: Opens under /proc per cell, at most: :func:`_audit`.
PROC_OPENS_PER_CELL = 20.0
NOOP_ARMS = [
    {"name": "baseline", "role": "baseline", "command": "true"},
    {"name": "mcp", "role": "variant", "command": "true"},
]


class CountingGate(CoreGate):
    """The in-process gate, counting the calls whose number grows with the cells."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    def acquire_many(self, requests: Any, now: float, *args: Any, **kwargs: Any) -> Any:
        self.calls["acquire_many"] += 1
        self.calls["lease requests"] += len(requests)
        return super().acquire_many(requests, now, *args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["release"] += 1
        return super().release(*args, **kwargs)


def _count_sql(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    statements: Counter[str] = Counter()
    opened = store._connect

    def traced(path: Path) -> sqlite3.Connection:
        conn = opened(path)
        last: list[str] = [""]

        def count(sql: str) -> None:
            # the statements of a trigger (the ledger's cells table) are traced as the statement
            # that fired them, again: SQLite's work inside the driver's statement, not another one
            if sql != last[0]:
                statements.update([sql.split(None, 1)[0].upper()])
            last[0] = sql

        conn.set_trace_callback(count)
        return conn

    monkeypatch.setattr(store, "_connect", traced)
    return statements


def _count_sandbox_ops(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    ops: Counter[str] = Counter()
    for cls, name in ((LocalBackend, "create"), (LocalSandbox, "exec"), (LocalSandbox, "delete"),
                      (LocalSandbox, "put_dir"), (LocalSandbox, "put_file"), (LocalSandbox, "take_dir"),
                      (LocalSandbox, "get_dir")):
        method = getattr(cls, name)

        async def counted(self: Any, *args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            ops[_name] += 1
            return await _method(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)
    return ops


#: Python's audit events (PEP 578) this module counts while :data:`_AUDIT` holds a counter: the
#: processes started and the file-system calls that have one (``open``, ``os.mkdir``, ``os.rmdir``,
#: ``os.remove`` for an unlink, ``os.rename``, ``os.scandir``, ``os.chmod``, ``os.killpg``, ...),
#: the driver's and the runner's alike (they share this process here). A hook cannot be removed:
#: outside the test it returns at once.
_AUDIT: list[Counter[str]] = []
_SPAWNED: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _AUDIT:
        return
    if event == "open" and isinstance(args[0], int):
        return  # an open descriptor wrapped in a file object (os.fdopen): no file-system call
    if event == "subprocess.Popen":
        _SPAWNED[0].append(Path(str(args[0])).name)
        _AUDIT[0][event] += 1
    elif event == "open" and str(args[0]).startswith("/proc/"):
        # The local sandbox's look for processes that left their group reads the environ of
        # every pid handed out since its create: as many as the host's other work started
        # meanwhile (19.5 opens per cell in a loaded CI run against 18.5 quiet), not a cost per cell.
        _AUDIT[0]["open /proc"] += 1
    elif event == "open" or event.startswith("os."):
        _AUDIT[0][event] += 1


sys.addaudithook(_audit)


def test_a_no_op_cell_costs_what_it_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=CELLS // 2, arms=NOOP_ARMS,
                                 preflight_cells=0)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="cost")
    set_test_routes()
    plan, identity = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
    (name, config), = plan.backends.items()
    statements = _count_sql(monkeypatch)  # the driver's own ledger connection, from its open on
    ops = _count_sandbox_ops(monkeypatch)
    gate = CountingGate(plan.accounts)
    pool = ConcurrentPool(make_backend(name, **config.options))
    audit: Counter[str] = Counter()
    _AUDIT.append(audit)
    _SPAWNED.append([])
    try:
        outcome = Driver(plan, identity, planned.run_root, pool, gate, HostSupervision.of(plan),
                         options=RunOptions(tick_sec=0.1)).run()
    finally:
        pool.close()
        _AUDIT.clear()
        spawned = _SPAWNED.pop()

    attempts, rows = ledger_rows(planned.run_root)
    assert outcome.exit_code == 0 and len(rows) == CELLS and len(attempts) == CELLS
    per_cell = {k: v / CELLS for k, v in statements.items()}
    # Per attempt: BEGIN, the next attempt number, INSERT, COMMIT; BEGIN, the result, COMMIT.
    # What is left over is the run's own (schema, meta, the run events): a few per run.
    assert statements["BEGIN"] <= 2 * CELLS + 10, per_cell
    assert statements["INSERT"] <= 2 * CELLS + 10, per_cell
    assert statements["SELECT"] <= CELLS + 10, per_cell
    assert sum(statements.values()) <= 7 * CELLS + 40, per_cell
    # one lease asked and one released per cell; acquires batch the launches of one tick
    assert gate.calls["lease requests"] == CELLS and gate.calls["release"] == CELLS, gate.calls
    assert gate.calls["acquire_many"] <= CELLS, gate.calls
    # one sandbox, the agent's and the verifier's exec, one delete; uploads are the task's own
    assert ops["create"] == CELLS and ops["delete"] == CELLS, ops
    assert ops["exec"] <= 2 * CELLS, ops
    assert ops["put_dir"] + ops["put_file"] <= 2 * CELLS and ops["take_dir"] + ops["get_dir"] <= CELLS, ops
    # two processes per cell: the agent's `sh -c true` and the verifier's bash, started as
    # itself (`bash /tests/test.sh`, as Harbor runs it): before, an `sh -c` chose and exec'd it
    assert len(spawned) == 2 * CELLS and Counter(spawned) == {"sh": CELLS, "bash": CELLS}, Counter(spawned)
    # file-system calls per cell (FS_PER_CELL): a new walk, file or directory per cell fails here
    fs = {k: v / CELLS for k, v in sorted(audit.items())}
    for event, most in FS_PER_CELL.items():
        assert audit[event] <= most * CELLS + FS_PER_RUN, (event, fs)
    # The look at /proc reads the pids handed out since each sandbox's create (2.7-4.2 per cell
    # here, quiet or under two busy loops), never every process on the host (~100 here).
    assert audit["open /proc"] <= PROC_OPENS_PER_CELL * CELLS, fs
    # every attempt leaves the same few files: a growth here is a growth of the run root
    dirs = RunPaths(planned.run_root).attempt_dirs()
    files = Counter(len([p for p in d.rglob("*") if p.is_file()]) for d in dirs)
    assert len(dirs) == CELLS and max(files) <= 2, files  # the reward and result.json
