"""Plan compilation at scale (issue 8): a synthetic 100,000-cell plan, 500 tiny task
directories x 2 arms x 100 repetitions. Times ``ray-bench plan``'s library call split into
its steps (compile, canonical bytes + identity, receipt, write) and, for reference, loading
the plan back with its identity (what ``execute --confirm`` does first).

    .venv/bin/python tests/perf/bench_plan.py [--tasks 500] [--reps 100] [--profile]

Goal: the whole ``plan_run`` under 10 s. Exits 1 if it is missed.
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

from ray_bench.api import plan_run
from ray_bench.commands.receipt import render_receipt
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.plan.identity import identity_of
from ray_bench.plan.store import load_plan_file, plan_bytes

GOAL_SEC = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="cProfile plan_run, top 25")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rb-bench-plan-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        suite, accounts = write_suite(root / "suite", tasks=args.tasks, reps=args.reps, concurrency=16)
        print(f"wrote {args.tasks} task dirs in {time.perf_counter() - t:.2f} s")

        # the steps, once each, to see where the time goes
        t = time.perf_counter()
        plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="steps"))
        t_compile = time.perf_counter() - t
        t = time.perf_counter()
        data = plan_bytes(plan)
        identity = identity_of(json.loads(data))
        t_identity = time.perf_counter() - t
        t = time.perf_counter()
        receipt = render_receipt(plan, identity)
        t_receipt = time.perf_counter() - t

        # the library call behind `ray-bench plan`, end to end (compile, identity, write)
        profiler = cProfile.Profile() if args.profile else None
        t = time.perf_counter()
        if profiler:
            profiler.enable()
        result = plan_run(suite=suite, accounts=accounts, runs_dir=root / "runs", run_id="scale")
        if profiler:
            profiler.disable()
        t_total = time.perf_counter() - t
        size = (result.run_root / "launch-plan.json").stat().st_size

        t = time.perf_counter()
        _, loaded = load_plan_file(result.run_root / "launch-plan.json")
        t_load = time.perf_counter() - t
        assert loaded == result.identity

    print(f"cells {result.cells:,}  plan file {size / 2**20:.1f} MiB  receipt {len(receipt) / 1024:.0f} KiB")
    print(f"  compile_plan          {t_compile:6.2f} s")
    print(f"  canonical + identity  {t_identity:6.2f} s")
    print(f"  receipt               {t_receipt:6.2f} s")
    print(f"  plan_run (all, write) {t_total:6.2f} s   goal < {GOAL_SEC:.0f} s")
    print(f"  load + identity       {t_load:6.2f} s   (execute --confirm)")
    print(f"  peak RSS              {peak_rss_mb():6.0f} MiB")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    if t_total > GOAL_SEC:
        print(f"MISSED: plan_run took {t_total:.2f} s > {GOAL_SEC:.0f} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
