"""The same run seen by `status`, `watch`, the exporter and Prometheus at three moments.

    .venv/bin/python tests/metrics/observe_run.py [--reps 2] [--sleep 3]

Plans a small paired local run (8 tasks x 2 arms x reps; each agent sleeps then solves),
executes it in this process with a real Prometheus scraping the exporter (1 s scrapes), and
at three moments (early, middle, late) prints one line per observer: the state, valid rows,
remaining cells, the 15m-window pace and the finish estimate. Not a test: a figure for the
notes (the tests assert the same agreement on constructed ledgers).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.prometheus import running_prometheus
from support.ray_local import ensure_ray
from support.suites import make_suite

from ray_bench.api import MetricsSettings, execute_run, plan_run
from ray_bench.cli.watch import snapshot
from ray_bench.metrics.exporter import MetricsExporter
from ray_bench.scheduler.driver import RunOptions
from ray_bench.status.read import read_status
from ray_bench.status.watchlines import progress_line


def _exported(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("raybench_pace_rows_per_minute{", "raybench_remaining_cells{",
                            "raybench_finish_estimate_seconds{", "raybench_run_valid_rows{")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=3.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="observe-"))
    cmd = f'sleep {args.sleep}; sh "$SOLUTION_DIR/solve.sh"'
    arm = {"command": cmd, "expose_solution": True}
    suite, accounts = make_suite(
        tmp / "s", reps=args.reps, preflight_cells=0,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp / "runs", run_id="observed")
    ensure_ray()
    with running_prometheus(tmp / "prom") as prom:
        exporters: list[MetricsExporter] = []
        moments = (0.25, 0.5, 0.85)

        def observe() -> None:
            while not exporters:
                time.sleep(0.1)
            url = exporters[0].url
            for share in moments:
                while True:
                    status = read_status(planned.run_root)
                    if status.counts["valid"] >= share * planned.cells or status.state != "running":
                        break
                    time.sleep(0.2)
                time.sleep(2.5)  # let Prometheus scrape the same moment (1 s scrapes)
                at = time.strftime("%H:%M:%S")
                status = read_status(planned.run_root)
                pace = status.pace
                assert pace is not None
                print(f"\n-- {at}, {status.counts['valid']}/{planned.cells} valid --")
                print(f"status:     state={status.state} valid={status.counts['valid']} remaining={status.remaining} "
                      f"pace15m={pace.rows_per_minute['15m']:.2f} estimate={pace.finish_estimate_seconds} "
                      f"({pace.basis()})")
                print(f"watch:      {progress_line(snapshot(planned.run_root).status)}")
                print(f"exporter:   {_exported(url)}")
                prom_pace = prom.scalar('raybench_pace_rows_per_minute{run="observed",window="15m"}')
                rule = prom.scalar('run:raybench_valid_rows_per_minute:rate5m{run="observed"}')
                valid = prom.scalar('sum(raybench_run_valid_rows{run="observed"})')
                remaining = prom.scalar('raybench_remaining_cells{run="observed"}')
                eta = prom.scalar('raybench_finish_estimate_seconds{run="observed"}')
                print(f"prometheus: valid={valid} remaining={remaining} pace15m={prom_pace} "
                      f"finish_estimate={eta} recording-rule rate5m={rule}")

        watcher = threading.Thread(target=observe, daemon=True)
        watcher.start()
        outcome = execute_run(plan_path=planned.run_root / "launch-plan.json", confirm=planned.identity,
                              options=RunOptions(tick_sec=0.1),
                              metrics=MetricsSettings(state_root=prom.state_root, final_scrape_sec=3.0),
                              on_metrics=exporters.append)
        watcher.join(timeout=60)
        print(f"\nrun: exit {outcome.exit_code}, {outcome.counts}, {outcome.wall_sec:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
