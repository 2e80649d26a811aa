"""Cells in flight at once in the deterministic simulation (issue 16): the real driver
(``run_driven``: the loop, SQLite ledger, run state, account choice, classifier) on a
virtual clock, with accounts whose slots hold every cell at once and cells that run for
hours, so that all ``--cells`` are in flight together before the first one finishes.

    .venv/bin/python tests/perf/bench_inflight.py --cells 100000
    .venv/bin/python tests/perf/bench_inflight.py --cells 10000 --trace   # memory by owner

Reports the CPU and wall time from the start of the run to ``--cells`` in flight and to
the end, the process's RSS when they are all in flight minus at the run's start, divided
by the cells in flight (driver and simulated world together), and that every cell ended
valid exactly once (0 lost, 0 duplicate rows, 0 attempts beyond one per cell, no invariant
broken). ``--trace`` (tracemalloc, ~3x slower) splits the memory: what the driver holds per
cell in flight, apart from what the simulated world holds (the runners' side in
production: a summary and a sandbox record per attempt). Exits 1 if a cell was lost or
duplicated, or if fewer than ``--cells`` were in flight at once.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import tracemalloc
from typing import Any

from ray_bench.ledger.events import RunStarted
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted, NullObserver, Observed, Tick
from ray_bench.sim.driven import run_driven
from ray_bench.sim.workload import SimSpec, build_workload, parse_spec

#: Allocations with a frame in the in-process pool are the simulated world's (its runners
#: and the providers it calls); the rest is the driver's (what ``execute`` holds: ledger
#: rows, leases, specs, run state). Frames kept per allocation: enough to reach the pool's.
WORLD_FILE = "ray_bench/cells/inprocess.py"
FRAMES = 8


def spec_for(cells: int, accounts: int) -> SimSpec:
    """``cells`` = tasks x 2 arms; ``accounts`` whose slots add up to at least ``cells``;
    cells of 1.5-5.5 h (within the plan's 6 h limit), so none finishes before all start."""
    per = -(-cells // accounts)
    return parse_spec({
        "seed": 16, "suite": {"tasks": cells // 2, "arms": ["baseline", "mcp"], "reps": 1},
        "durations": {"lognormal": {"median_s": 3 * 3600, "sigma": 0.25, "min_s": 1.5 * 3600,
                                    "max_s": 5.5 * 3600}, "cell_noise_sigma": 0.1},
        "accounts": [{"name": f"a{i:02d}", "max_concurrent": per} for i in range(accounts)],
        "policies": ["adaptive"]}, where="bench_inflight")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Probe(NullObserver):
    """Counts attempts in flight; notes the time when ``target`` are, and the memory at the
    driver's next tick (after its launch round, whose request lists are gone by then)."""

    def __init__(self, target: int, trace: bool) -> None:
        self.target = target
        self.trace = trace
        self.inflight = 0
        self.peak = 0
        self.marks: dict[str, dict[str, float]] = {}
        self.pending_memory = False

    def mark(self, name: str, memory: bool = False) -> None:
        m = {"cpu_s": time.process_time(), "wall_s": time.perf_counter(), "inflight": self.inflight}
        if memory:
            m["rss_mb"] = rss_mb()
            if self.trace:
                m.update(traced_mb(tracemalloc.take_snapshot()))
        self.marks[name] = m

    def on_event(self, event: Observed) -> None:
        if isinstance(event, RunStarted):
            self.mark("run_started", memory=True)
        elif isinstance(event, AttemptStarted):
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            if self.inflight == self.target and "reached" not in self.marks:
                self.mark("reached")
                self.pending_memory = True
        elif isinstance(event, AttemptFinished):
            self.inflight -= 1
        elif isinstance(event, Tick) and self.pending_memory:
            self.pending_memory = False
            self.mark("all_in_flight", memory=True)


def traced_mb(snapshot: tracemalloc.Snapshot) -> dict[str, float]:
    total = sum(s.size for s in snapshot.statistics("filename"))
    world = sum(s.size for s in snapshot.statistics("filename", cumulative=True)
                if s.traceback[0].filename.endswith(WORLD_FILE))
    return {"traced_mb": total / 2**20, "world_mb": world / 2**20, "driver_mb": (total - world) / 2**20}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=100_000)
    ap.add_argument("--accounts", type=int, default=10)
    ap.add_argument("--trace", action="store_true", help="split memory by owner (tracemalloc)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.trace:
        tracemalloc.start(FRAMES)
    t0, c0, rss0 = time.perf_counter(), time.process_time(), rss_mb()
    spec = spec_for(args.cells, args.accounts)
    workload = build_workload(spec)
    probe = Probe(args.cells, args.trace)
    result = run_driven(spec, workload, observer=probe)
    t1, c1 = time.perf_counter(), time.process_time()
    m = probe.marks
    start, reached, full = m["run_started"], m.get("reached"), m.get("all_in_flight")
    out: dict[str, Any] = {
        "cells": args.cells, "accounts": args.accounts, "trace": args.trace,
        "peak_in_flight": probe.peak,
        "setup_cpu_s": round(start["cpu_s"] - c0, 2),
        "to_all_in_flight_cpu_s": round(reached["cpu_s"] - start["cpu_s"], 2) if reached else None,
        "to_all_in_flight_wall_s": round(reached["wall_s"] - start["wall_s"], 2) if reached else None,
        "run_cpu_s": round(c1 - start["cpu_s"], 2), "run_wall_s": round(t1 - start["wall_s"], 2),
        "total_cpu_s": round(c1 - c0, 2), "total_wall_s": round(t1 - t0, 2),
        "rss_before_mb": round(rss0, 1), "rss_run_started_mb": round(start["rss_mb"], 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "makespan_h": round(result.makespan_s / 3600, 3), "attempts": result.attempts,
        "valid_cells": result.valid_cells, "failed_cells": result.failed_cells,
        "cells_lost": result.cells_lost, "duplicate_rows": result.duplicate_rows,
        "violations": result.violations[:5],
    }
    if full:
        n = full["inflight"]
        out["rss_all_in_flight_mb"] = round(full["rss_mb"], 1)
        out["rss_bytes_per_inflight_cell"] = round((full["rss_mb"] - start["rss_mb"]) * 2**20 / n)
        if args.trace:
            for key in ("driver", "world"):
                out[f"{key}_bytes_per_inflight_cell"] = round(
                    (full[f"{key}_mb"] - start[f"{key}_mb"]) * 2**20 / n)
            # the plan, the workload and the run state, before anything starts
            out["traced_bytes_per_planned_cell"] = round(start["traced_mb"] * 2**20 / args.cells)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    ok = (probe.peak >= args.cells and result.cells_lost == 0 and result.duplicate_rows == 0
          and result.valid_cells == args.cells and result.attempts == args.cells and not result.violations)
    print("every cell valid exactly once, all in flight at once" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
