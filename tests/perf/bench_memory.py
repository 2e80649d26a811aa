"""The driver's memory through a large run (issue 8): 20,000 instant cells (agent ``true``,
a verifier that only writes its reward) on the local backend and a local Ray instance, the
driver in this process. Reports this process's RSS before the run, sampled every second
during it, and its peak (``getrusage``), plus the cell runner's RSS at the end.

    .venv/bin/python tests/perf/bench_memory.py [--cells 20000] [--concurrency 16]

Goal: the driver's peak RSS under 1.5 GB. Exits 1 if it is missed. (At ~50 cells/s on two
cores the run takes about 7 minutes.)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray
from scale_support import ROUTES, peak_rss_mb, rss_mb, write_suite

from ray_bench.api import plan_run
from ray_bench.onray.gate import actor_gate
from ray_bench.onray.pool import NAMESPACE, RayPool
from ray_bench.onray.start import init_ray
from ray_bench.plan.store import confirm_plan
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.driver import Driver, RunOptions

GOAL_MB = 1500.0


def runner_rss_mb() -> float:
    total = 0.0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"ray::CellRunner"):
                total += int((entry / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            continue
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    os.environ.update(ROUTES)  # before Ray starts: its workers resolve the credential routes
    init_ray(None, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)  # as execute
    samples: list[tuple[float, float]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="rb-bench-mem-") as tmp:
            root = Path(tmp)
            suite, accounts = write_suite(root / "suite", tasks=10, reps=args.cells // 20,
                                          concurrency=args.concurrency, local_root=root / "sbx")
            planned = plan_run(suite=suite, accounts=accounts, runs_dir=root / "runs", run_id="mem")
            plan, identity = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
            pool = RayPool()
            before = rss_mb()
            driver = Driver(plan, identity, planned.run_root, pool, actor_gate(plan), HostSupervision.of(plan),
                            options=RunOptions())
            done = threading.Event()

            def sample() -> None:
                start = time.monotonic()
                while not done.wait(1.0):
                    samples.append((time.monotonic() - start, rss_mb()))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t = time.perf_counter()
            outcome = driver.run()
            wall = time.perf_counter() - t
            done.set()
            sampler.join()
            runner = runner_rss_mb()
            ledger_mb = (planned.run_root / "ledger.sqlite").stat().st_size / 2**20
    finally:
        ray.shutdown()
    peak = peak_rss_mb()
    assert outcome.exit_code == 0, outcome
    print(f"{outcome.counts['valid']:,} valid cells in {wall:.0f} s ({outcome.counts['valid'] / wall:.1f} cells/s)")
    print(f"  driver RSS before the run   {before:7.0f} MiB")
    for q in (0.25, 0.5, 0.75, 1.0):
        at = samples[min(len(samples) - 1, int(q * (len(samples) - 1)))] if samples else (0.0, 0.0)
        print(f"  driver RSS at {int(q * 100):3d}% ({at[0]:5.0f} s) {at[1]:7.0f} MiB")
    print(f"  driver peak RSS (getrusage) {peak:7.0f} MiB   goal < {GOAL_MB:.0f} MiB")
    print(f"  cell runner RSS at the end  {runner:7.0f} MiB   ledger {ledger_mb:.0f} MiB")
    if peak > GOAL_MB:
        print(f"MISSED: peak RSS {peak:.0f} MiB > {GOAL_MB:.0f} MiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
