"""A 200-cell docker run exported for Harbor's and Inspect's viewers, and read back by their own code.

The run: the quickstart's four tasks x 25 repetitions x two command arms (the scripted agent at
skill 50 and 90, no sleep) on the docker backend (busybox base image), planned with
``plan_run`` and executed by the real driver and cell runner without Ray (``support.local_pool.
ConcurrentPool``, as many side by side as admission allows). Then ``ray-bench export harbor`` and
``ray-bench export inspect`` (each a CLI subprocess, timed), and the read-back:

- Harbor 0.26 in ``.venv-harbor`` (Python 3.12): every job's and trial's ``config.json`` and
  ``result.json`` through its models (``JobConfig``, ``JobResult``, ``TrialConfig``,
  ``TrialResult``), then a running ``harbor view`` on loopback asked for ``/api/jobs`` and every
  page of ``/api/jobs/{job}/trials``;
- inspect_ai's ``read_eval_log`` on each ``.eval``, and a running ``inspect view`` asked for its
  listing and each log.

Each must give ray-bench's report: one job (log) per arm, one trial (sample) per cell, and the
mean reward per arm (Harbor's ``reward_valid`` trials, its job ``stats`` metric and its viewer's
``evals`` metric; Inspect's ``results`` metric and its scored samples). Exit 1 on any difference.

    .venv/bin/python tests/perf/bench_export.py [--reps 25] [--keep DIR]

Measured 2026-12-02, ``PYTHONPATH=$PWD .venv/bin/python tests/perf/bench_export.py --keep DIR``
(Python 3.11 for the run and the exports, 3.12 for Harbor 0.26; 2 vCPU shared with four other
sessions' tests; exit 0 both times). Run A, 16:32 UTC at load 5-16, before the ``inspect view``
check was added; run B, 16:45 UTC at load 11-14, the script as it is:

| | baseline | mcp |
|---|---|---|
| report: cells / valid / mean reward | 100 / 100 / 0.4300 | 100 / 100 / 0.9400 |
| Harbor models: trials, mean of `reward_valid` trials, job `stats` mean | 100, 0.4300, 0.4300 | 100, 0.9400, 0.9400 |
| `harbor view`: `/api/jobs` mean, trials listed (1 page), their mean | 0.4300, 100, 0.4300 | 0.9400, 100, 0.9400 |
| inspect `read_eval_log`: samples, `results` mean | 100, 0.4300 | 100, 0.9400 |
| `inspect view` (run B): samples, `results` mean | 100, 0.4300 | 100, 0.9400 |

| | run A | run B |
|---|---|---|
| the run (200 cells, 4 side by side) | 197 s | 145 s |
| its run root | 803 files, 1.01 MB | 804 files, 1.01 MB |
| `ray-bench export harbor` (a CLI subprocess, start-up included) | 12.9 s | 3.3 s |
| its output: 2 jobs | 1,202 files, 0.39 MB | 1,204 files, 0.39 MB |
| `ray-bench export inspect` (start-up and inspect_ai's import included) | 30.3 s | 9.2 s |
| its output: 2 `.eval` files | 0.19 MB | 0.19 MB |
| Harbor's models over every file | 0.3 s | 0.0 s |
| `harbor view` ready / its API (jobs and every trial page) | 13.1 s / 0.3 s | 5.2 s / 0.2 s |
| `read_eval_log` of both logs | 0.5 s | 0.2 s |
| `inspect view` ready and its API | - | 7.8 s |

The same script at ``--reps 2`` (16 cells, load ~13) exported in 4.1 s (Harbor) and 14.8 s
(Inspect): at this size an export's time is mostly the CLI's start-up and the machine's load, not
the cells. The means are the same in both runs because the scripted agent's rolls are seeded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.images import build_base_image
from support.local_pool import ConcurrentPool
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.reports.build import build_report
from ray_bench.sandboxes.docker import DockerBackend
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions

REPO = Path(__file__).resolve().parents[2]
TASKS = ["count-words", "fizzbuzz", "hello-world", "sum-list"]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
if not HARBOR_PYTHON.exists():  # a worktree: the main checkout's environment
    HARBOR_PYTHON = Path("/work/main/.venv-harbor/bin/python")

#: Run in .venv-harbor: Harbor's models over every file, then `harbor view`'s API. Prints JSON.
HARBOR_READER = r'''
import json, math, subprocess, sys, time, urllib.request
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult

out, port = Path(sys.argv[1]), int(sys.argv[2])
models = {}
t0 = time.perf_counter()
for job in sorted(p for p in out.iterdir() if p.is_dir()):
    JobConfig.model_validate_json((job / "config.json").read_text())
    result = JobResult.model_validate_json((job / "result.json").read_text())
    trials = [p for p in sorted(job.iterdir()) if p.is_dir()]
    rewards = []
    for t in trials:
        TrialConfig.model_validate_json((t / "config.json").read_text())
        r = TrialResult.model_validate_json((t / "result.json").read_text())
        if r.reward_valid and r.verifier_result and r.verifier_result.rewards:
            rewards.append(next(iter(r.verifier_result.rewards.values())))
    (stats,) = result.stats.evals.values()
    models[job.name] = {"trials": len(trials), "n_total_trials": result.n_total_trials, "valid": len(rewards),
                        "mean": sum(rewards) / len(rewards), "stats_mean": stats.metrics[0]["mean"]}
load_s = time.perf_counter() - t0

def get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())

base = f"http://127.0.0.1:{port}"
harbor = str(Path(sys.executable).parent / "harbor")
log = open(out.parent / "harbor-view.log", "wb")
proc = subprocess.Popen([harbor, "view", str(out), "--host", "127.0.0.1", "--port", str(port), "--no-build",
                         "--jobs"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
try:
    t0 = time.perf_counter()
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            sys.exit(f"harbor view exited {proc.returncode}")
        try:
            get(f"{base}/api/health")
            break
        except Exception:
            if time.monotonic() > deadline:
                sys.exit("harbor view not ready in 180 s")
            time.sleep(0.5)
    ready_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    view = {}
    for job in get(f"{base}/api/jobs")["items"]:
        (metrics,) = job["evals"].values()
        trials, page = [], 1
        while True:
            got = get(f"{base}/api/jobs/{job['name']}/trials?page={page}&page_size=100")
            trials += got["items"]
            if page >= got["total_pages"]:
                break
            page += 1
        scored = [t["reward"] for t in trials if t.get("reward") is not None and not t.get("error_type")]
        view[job["name"]] = {"trials": len(trials), "total": got["total"], "mean": metrics["metrics"][0]["mean"],
                             "trials_mean": sum(scored) / len(scored), "n_total_trials": job.get("n_total_trials")}
    api_s = time.perf_counter() - t0
finally:
    proc.terminate()
    proc.wait(timeout=30)
print(json.dumps({"models": models, "view": view, "load_s": load_s, "view_ready_s": ready_s, "api_s": api_s}))
'''


def _cli(*args: str) -> float:
    """``ray-bench ARGS`` as a subprocess of this interpreter over this checkout; its seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "import sys; from ray_bench.cli import main; "
                           "sys.argv[0] = 'ray-bench'; main()", *args], check=False, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ray-bench {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def _size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _inspect_view(logs: Path, work: Path) -> tuple[dict[str, tuple[int, float]], float]:
    """A running ``inspect view`` asked for its log listing and each log: arm -> (samples, mean)."""
    from support.servers import free_port, get_json, viewer

    port = free_port()
    base = f"http://127.0.0.1:{port}/api"
    started = time.perf_counter()
    found: dict[str, tuple[int, float]] = {}
    with viewer([str(Path(sys.executable).parent / "inspect"), "view", "--log-dir", str(logs), "--host",
                 "127.0.0.1", "--port", str(port)], f"{base}/log-files", work / "inspect-view.log"):
        for f in get_json(f"{base}/log-files")["files"]:
            log = get_json(f"{base}/logs/{urllib.parse.quote(f['name'], safe='')}")
            found[f["task"].split("/")[1]] = (len(log["samples"]),
                                              log["results"]["scores"][0]["metrics"]["mean"]["value"])
    return found, time.perf_counter() - started


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(work: Path, reps: int) -> dict[str, Any]:
    image = build_base_image(docker.from_env())
    fast = {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"}
    arms = [{"name": name, "role": role, "command": 'sh "$AGENT_DIR/scripted-agent.sh"', "agent_dir": "agents",
             "env": {**fast, "SCRIPTED_SKILL": skill}, "expose_solution": True}
            for name, role, skill in (("baseline", "baseline", "50"), ("mcp", "variant", "90"))]
    suite, accounts = make_suite(
        work / "suite", tasks=TASKS, reps=reps, arms=arms, preflight_cells=0, backend="docker",
        backends={"docker": {"image": image, "max_sandboxes": 4}},
        accounts=[{"name": "acct", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                   "limits": {"max_concurrent": 4}}])
    os.environ.setdefault("RB_TEST_KEY_A", "not-a-secret")
    root = plan_run(suite=suite, accounts=accounts, runs_dir=work / "runs", run_id="export200").run_root
    plan, identity = load_plan_file(root / PLAN_FILE)
    pool = ConcurrentPool(DockerBackend())
    started = time.perf_counter()
    try:
        outcome = Driver(plan, identity, root, pool, CoreGate(plan.accounts), HostSupervision.of(plan),
                         options=RunOptions(tick_sec=0.05, state_root=work / "state")).run()
    finally:
        pool.close()
    run_s = time.perf_counter() - started
    if outcome.exit_code != 0:
        sys.exit(f"the run exited {outcome.exit_code}: {outcome}")
    return {"root": root, "cells": len(plan.cells), "run_s": run_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=25, help="repetitions per task and arm (4 tasks, 2 arms)")
    parser.add_argument("--keep", type=Path, help="work here (kept) instead of a temporary directory")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="rb-bench-export-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        done = run(work, args.reps)
        root: Path = done["root"]
        arms = build_report(root).arms.set_index("arm")
        want = {arm: (int(arms.loc[arm, "cells"]), int(arms.loc[arm, "valid_rows"]),
                      float(arms.loc[arm, "mean_reward"])) for arm in arms.index}
        harbor_out, inspect_out = work / "harbor", work / "inspect"
        harbor_s = _cli("export", "harbor", str(root), "--out", str(harbor_out))
        inspect_s = _cli("export", "inspect", str(root), "--out", str(inspect_out))
        run_files, run_bytes = _size(root)
        h_files, h_bytes = _size(harbor_out)
        i_files, i_bytes = _size(inspect_out)

        from inspect_ai.log import read_eval_log

        started = time.perf_counter()
        logs = {p.name.removesuffix(".eval").split("__")[1]: read_eval_log(str(p))
                for p in sorted(inspect_out.iterdir())}
        read_s = time.perf_counter() - started
        got_inspect = {}
        for arm, log in logs.items():
            assert log.results is not None and log.samples is not None
            scored = [float(s.scores["reward"].value) for s in log.samples  # type: ignore[arg-type]
                      if s.scores and s.invalidation is None]
            got_inspect[arm] = (len(log.samples), len(scored), log.results.scores[0].metrics["mean"].value,
                                sum(scored) / len(scored))
        viewed, view_s = _inspect_view(inspect_out, work)

        reader = subprocess.run([str(HARBOR_PYTHON), "-c", HARBOR_READER, str(harbor_out), str(_free_port())],
                                check=False, capture_output=True, text=True, timeout=900)
        if reader.returncode != 0:
            sys.exit(f"the Harbor reader failed: {reader.stderr[-3000:]}")
        harbor = json.loads(reader.stdout.strip().splitlines()[-1])

        bad: list[str] = []
        for arm, (cells, valid, mean) in want.items():
            job = next(k for k in harbor["models"] if k.endswith(f"__{arm}"))
            m, v = harbor["models"][job], harbor["view"][job]
            i = got_inspect[arm]
            checks = {"harbor trials": (m["trials"], cells), "harbor n_total_trials": (m["n_total_trials"], cells),
                      "harbor valid": (m["valid"], valid), "harbor view trials": (v["trials"], cells),
                      "inspect samples": (i[0], cells), "inspect scored": (i[1], valid),
                      "inspect view samples": (viewed[arm][0], cells)}
            bad += [f"{arm}: {k} {a} != {b}" for k, (a, b) in checks.items() if a != b]
            means = {"harbor models": m["mean"], "harbor stats": m["stats_mean"], "harbor view": v["mean"],
                     "harbor view trials": v["trials_mean"], "inspect results": i[2], "inspect samples": i[3],
                     "inspect view": viewed[arm][1]}
            bad += [f"{arm}: {k} mean {a} != {mean}" for k, a in means.items() if not math.isclose(a, mean)]
            print(f"{arm}: report {cells} cells, {valid} valid, mean {mean:.4f} | Harbor models {m['trials']} trials "
                  f"mean {m['mean']:.4f} (stats {m['stats_mean']:.4f}), harbor view {v['trials']} trials mean "
                  f"{v['mean']:.4f} | Inspect {i[0]} samples mean {i[2]:.4f}, inspect view {viewed[arm][0]} samples "
                  f"mean {viewed[arm][1]:.4f}")
        print(f"run: {done['cells']} cells in {done['run_s']:.0f} s; run root {run_files} files, "
              f"{run_bytes / 1e6:.2f} MB")
        print(f"export harbor: {harbor_s:.1f} s, {len(harbor['models'])} jobs, {h_files} files, {h_bytes / 1e6:.2f} MB")
        print(f"export inspect: {inspect_s:.1f} s, {len(logs)} logs, {i_files} files, {i_bytes / 1e6:.2f} MB")
        print(f"read back: Harbor models {harbor['load_s']:.1f} s, harbor view ready {harbor['view_ready_s']:.1f} s "
              f"and its API {harbor['api_s']:.1f} s; read_eval_log {read_s:.1f} s; inspect view ready and its "
              f"API {view_s:.1f} s")
        for line in bad:
            print(f"MISMATCH {line}")
        return 1 if bad else 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
