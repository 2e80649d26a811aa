"""Resume at scale (issue 8): loading the resume state from a ledger with 100,000 attempts,
as ``execute`` does when it resumes a run: open the ledger, read every attempt
(``Ledger.attempts()``, which the driver calls for stale recovery and again for history) and
rebuild ``RunState`` from the plan and the history. The plan is the 100,000-cell plan of
``bench_plan.py``; the ledger is filled with one attempt per cell (90% valid, 8% failed,
2% left without a terminal record, as after a crash) by direct inserts.

    .venv/bin/python tests/perf/bench_resume.py [--attempts 100000] [--profile]

Goal: ``Ledger.attempts()`` + ``RunState`` under 5 s. Exits 1 if it is missed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_support import peak_rss_mb, write_suite

from ray_bench.ledger.store import Ledger
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.scheduler.runstate import RunState

GOAL_SEC = 5.0


def fill(ledger_root: Path, plan_cells: list[tuple[str, str, int, str]], n: int) -> None:
    """``n`` attempts over the plan's cells, inserted in bulk through the ledger's own schema."""
    ledger_root.mkdir(parents=True, exist_ok=True)
    ledger = Ledger.create(ledger_root, run_id="resume", plan_identity="sha256:" + "0" * 64)
    conn = ledger._conn  # bulk inserts: the per-attempt API would take minutes to fill it
    summary = json.dumps({"reward": 1.0, "phases": {"agent": 1.0, "verifier": 0.2},
                          "agent": {"exit_code": 0}, "verifier": {"exit_code": 0}})
    now = time.time() - 86_400
    attempts, results = [], []
    for i in range(n):
        cell, task, rep, arm = plan_cells[i % len(plan_cells)]
        seq = i // len(plan_cells) + 1
        attempt_id = f"{cell}-a{seq}"
        attempts.append((attempt_id, cell, task, "c" * 64, arm, rep, seq, "bench-a" if i % 2 else "bench-b",
                         "local", "sha256:" + "0" * 64, 0, now + i * 0.5))
        kind = i % 50
        if kind == 49:
            continue  # 2%: no terminal record (stale after a crash)
        valid = kind < 45
        results.append((attempt_id, "finished", now + i * 0.5 + 30, int(valid), 1.0 if valid else None,
                        None if valid else "task", None if valid else "f" * 12, int(not valid), 0.01,
                        summary))
    with conn:
        conn.executemany("INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", attempts)
        conn.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", results)
    ledger.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rb-bench-resume-") as tmp:
        root = Path(tmp)
        suite, accounts = write_suite(root / "suite", tasks=500, reps=100, concurrency=16)
        plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="resume"))
        cells = [(c.id, c.task, c.rep, c.arm) for c in plan.cells]
        t = time.perf_counter()
        fill(root / "run", cells, args.attempts)
        size = (root / "run" / "ledger.sqlite").stat().st_size
        print(f"filled a ledger with {args.attempts:,} attempts ({size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - t:.1f} s")

        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        t0 = time.perf_counter()
        ledger = Ledger.create(root / "run", run_id="resume", plan_identity="sha256:" + "0" * 64)
        t_open = time.perf_counter() - t0
        t = time.perf_counter()
        history = ledger.attempts()
        t_attempts = time.perf_counter() - t
        t = time.perf_counter()
        state = RunState(plan, history)
        t_state = time.perf_counter() - t
        t = time.perf_counter()
        ledger.attempts()  # the driver reads them twice (stale recovery, then history)
        t_second = time.perf_counter() - t
        ledger.close()
        if profiler:
            profiler.disable()
        counts = state.counts()

    total = t_attempts + t_state
    print(f"  open ledger           {t_open:6.2f} s")
    print(f"  Ledger.attempts()     {t_attempts:6.2f} s   ({len(history):,} rows)")
    print(f"  RunState(plan, hist)  {t_state:6.2f} s   ({counts})")
    print(f"  attempts + RunState   {total:6.2f} s   goal < {GOAL_SEC:.0f} s")
    print(f"  second attempts()     {t_second:6.2f} s   (the driver's stale-recovery read)")
    print(f"  peak RSS              {peak_rss_mb():6.0f} MiB")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
    if total > GOAL_SEC:
        print(f"MISSED: {total:.2f} s > {GOAL_SEC:.0f} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
