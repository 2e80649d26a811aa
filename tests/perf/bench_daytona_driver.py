"""N concurrent Daytona sandboxes through one driver: the real ``Driver`` loop (SQLite ledger,
run state, admission, classifier), the real runner and the ``daytona`` backend through the real
SDK, all in this one process (``plan_and_run_here``: no Ray, so the figures are one process's),
against the local Daytona fixture (``tests/support/daytona_server.py``) in a process of its own,
so that its CPU is not counted as the driver's.

The suite is N cells: ``t`` of the quickstart's 8 tasks x 2 arms x ``N / 2t`` reps, the scripted agent
holding its sandbox ``--hold`` seconds so that every sandbox is up at once; two accounts and the
backend's ``max_sandboxes`` admit N at a time.

    .venv/bin/python tests/perf/bench_daytona_driver.py --sandboxes 500 [--hold 120] [--json out.json]

Reports the cells (valid, failed), the most sandboxes started at once (sampled from the fixture
every 2 s from Docker), the driver process's CPU (user + system) and peak RSS, the fixture's CPU, the wall
time, and what is left (sandboxes in the fixture's API and containers on Docker). Goals (exit 1
when missed): every cell valid, the peak at least N (all at once), 0 sandboxes left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import docker
import docker.errors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.images import build_base_image
from support.runs import ledger_rows, plan_and_run_here
from support.suites import make_suite

from ray_bench.cli.quickstart import example_dir
from ray_bench.sandboxes.base import LABEL_RUN

KEY_ENV = "RB_BENCH_DAYTONA_DRIVER_KEY"
RUN_ID = "dt-driver"
#: The fixture's container label for the run (``LABEL_PREFIX`` + the sandbox's own label).
CONTAINER_LABEL = f"ray-bench.fake-daytona.label/{LABEL_RUN}"


def _start_fixture(image: str) -> tuple[subprocess.Popen[str], str, str]:
    tests = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "support.daytona_server", "--image", image],
                            cwd=tests, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(tests)})
    env: dict[str, str] = {}
    assert proc.stdout is not None
    while len(env) < 2:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the Daytona fixture did not start")
        if "=" in line and not line.startswith("#"):
            key, _, value = line.strip().partition("=")
            env[key] = value.strip("'")
    return proc, env["DAYTONA_API_URL"], env["DAYTONA_API_KEY"]


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _left(api_url: str, key: str) -> int:
    """Sandboxes of the run not destroyed, from the fixture's API (every cursor page)."""
    left, cursor = 0, "0"
    while cursor is not None:
        query = urllib.parse.urlencode({"labels": json.dumps({LABEL_RUN: RUN_ID}), "cursor": cursor})
        req = urllib.request.Request(f"{api_url}/sandbox?{query}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=120) as answer:
            doc = json.load(answer)
        left += sum(1 for item in doc["items"] if item.get("state") != "destroyed")
        cursor = doc.get("nextCursor")
    return left


def _running(client: Any) -> int:
    """The run's sandbox containers running now: one Docker call (``sparse``: without it
    docker-py inspects every container it lists, 500 calls every 2 s on a loaded dockerd; the
    API's listing would ask Docker once per sandbox too)."""
    return len(client.containers.list(sparse=True,
                                      filters={"label": f"{CONTAINER_LABEL}={RUN_ID}", "status": "running"}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=500)
    parser.add_argument("--hold", type=float, default=120.0, help="seconds each agent holds its sandbox")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    n = args.sandboxes
    client = docker.from_env()
    image = build_base_image(client)
    fixture, api_url, key = _start_fixture(image)
    os.environ[KEY_ENV] = key
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(2.0):
            with contextlib.suppress(OSError, docker.errors.DockerException):
                peak[0] = max(peak[0], _running(client))

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        with tempfile.TemporaryDirectory(prefix="rb-dt-driver-") as tmp:
            root = Path(tmp)
            # Exactly N cells when N is even: t of the 8 tasks, (N / 2) / t reps of each arm.
            per_arm = math.ceil(n / 2)
            ntasks = next(t for t in range(8, 0, -1) if per_arm % t == 0)
            reps = per_arm // ntasks
            names = sorted(p.name for p in (example_dir() / "tasks").iterdir())[:ntasks]
            hold = str(int(args.hold))
            arms = [{"name": name, "role": role, "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
                     "agent_dir": "agents", "expose_solution": True,
                     "env": {"SCRIPTED_SKILL": "100", "SCRIPTED_MIN_SEC": hold, "SCRIPTED_MAX_SEC": hold}}
                    for name, role in (("baseline", "baseline"), ("variant", "variant"))]
            half = math.ceil(n / 2)
            accounts = [{"name": f"acct-{x}", "route": {"env": {"DEMO_API_KEY": f"RB_TEST_KEY_{x.upper()}"}},
                         "limits": {"max_concurrent": half}} for x in ("a", "b")]
            options = {"api_url": api_url, "api_key_env": KEY_ENV, "create_timeout": 1800,
                       "max_rate_limit_retries": 50}
            suite, accounts_file = make_suite(
                root / "suite", tasks=names, reps=reps, arms=arms, accounts=accounts, backend="daytona",
                backends={"daytona": {"image": image, "max_sandboxes": n, "options": options}},
                preflight_cells=0, max_attempts=2)
            cpu0, fixture0, wall0 = time.process_time(), _cpu_of(fixture.pid), time.monotonic()
            sampler.start()
            outcome, run_root = plan_and_run_here(suite, accounts_file, root / "runs", run_id=RUN_ID)
            wall = time.monotonic() - wall0
            cpu = time.process_time() - cpu0
            fixture_cpu = _cpu_of(fixture.pid) - fixture0
            stop.set()
            attempts, rows = ledger_rows(run_root)
            cells = 2 * ntasks * reps
            valid = len(rows)  # one accepted valid row per cell at most
            left_api = _left(api_url, key)
            left_docker = len(client.containers.list(all=True, sparse=True,
                                                     filters={"label": f"{CONTAINER_LABEL}={RUN_ID}"}))
    finally:
        stop.set()
        fixture.terminate()
        fixture.wait(timeout=600)
    figures: dict[str, Any] = {
        "sandboxes": n, "cells": cells, "valid": valid, "attempts": len(attempts),
        "exit_code": outcome.exit_code, "stopped": outcome.stopped,
        "peak_started_at_once": peak[0], "wall_sec": round(wall, 1), "hold_sec": args.hold,
        "driver_cpu_sec": round(cpu, 1), "driver_cpu_ms_per_cell": round(1000 * cpu / cells, 1),
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "fixture_cpu_sec": round(fixture_cpu, 1), "left_in_api": left_api, "left_on_docker": left_docker,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    ok = valid == cells and peak[0] >= n and left_api == 0 and left_docker == 0
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
