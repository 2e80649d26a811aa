"""A small suite on local Docker against bare ``docker run``, in one run (issue 57's small-suite goals).

The suite: the 8 quickstart tasks (Harbor-shaped: ``instruction.md``, ``solution/solve.sh``,
``tests/test.sh``), one oracle-style arm x 3 reps = 24 cells on the docker backend, in the
library's busybox image (tests/support/images.py; no registry is reachable). The arm is
ray-bench's own oracle path, a ``command`` arm running the task's solution
(``sh "$SOLUTION_DIR/solve.sh"`` with ``expose_solution: true``, as tests/tasks/test_oracle_runs.py
does), not Harbor's ``oracle`` agent: no Harbor venv, the same work in the sandbox.

Each round (ray-bench first in even rounds, last in odd ones):

(a) ray-bench as a user types it: ``ray-bench plan ...`` then ``ray-bench execute --plan ...
    --confirm ...`` (a local Ray started by execute, metrics on as by default). Timed: plan;
    command to first cell (execute typed -> the first container's ``create``); the run loop
    (first ``create`` -> last ``destroy``); last cell to exit (last ``destroy`` -> execute's exit).
(b) bare Docker: per cell, one ``docker run --rm`` of the same image, limits and work (the
    solution, then the tests, in one container: ray-bench's verifier is a second exec in the
    agent's container, not a second container), the task's solution/ and tests/ bind-mounted
    read-only and /logs a host directory; at the peak concurrency ray-bench reached in (a).
(c) the backend's calls alone: per cell, the daemon calls a ray-bench docker cell makes (create,
    start, put the instruction and solution, exec, put the tests, exec, get /logs, remove),
    made directly through the SDK from threads at the same concurrency: the floor those calls
    set, without ray-bench's runner, driver or Ray around them.

Container-seconds, for both, are each container's own ``create`` -> ``destroy`` taken from one
``docker events --filter label=...`` stream per mode: the daemon's own timestamps (nanoseconds),
the same clock for every mode, no poll that could miss a sub-second container (a ``docker
inspect`` after the fact finds a removed container gone; the ledger's attempt rows time the
runner's work, not the container). Rounds alternate the two modes so that drift in the shared
daemon hits them alike. Each mode's seconds between its containers' consecutive events are
printed (``start -> extract-to-dir``: the put after start; ``archive-path -> kill``: the get of
/logs until the removal begins): where the container-seconds went. Exit 1 when a goal is missed:

- fixed cost (command to first cell + last cell to exit), median over rounds: at most 5 s;
- each cell's container-seconds over bare Docker's: the ratio of the medians at most 1.5 (and
  the p90 ratio printed).

    .venv/bin/python tests/perf/bench_small.py [--rounds 2] [--reps 3] [--max-sandboxes 4]
                                               [--json out.json] [--keep DIR]

``--bin`` names another ray-bench command (another tree's venv) for mode (a).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.images

import docker
from support.images import build_base_image

from ray_bench.cli.quickstart import example_dir

GOAL_FIXED_SEC = 5.0
GOAL_RATIO = 1.5
LIMITS = {"cpus": 1, "memory_mb": 512, "pids": 256}
KEY_ENV = "RB_BENCH_SMALL_KEY"
LABEL = "ray-bench-bench-small.run"  # bare containers' own label (never ray-bench.run: no audit finds them)
BIN = Path(sys.executable).parent / "ray-bench"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def write_suite(root: Path, image: str, reps: int, max_sandboxes: int) -> tuple[Path, Path, list[Path]]:
    src = example_dir() / "tasks"
    tasks = sorted(p for p in src.iterdir() if (p / "solution" / "solve.sh").is_file())
    shutil.copytree(src, root / "tasks")
    suite = {"name": "small", "tasks_dir": "tasks", "reps": reps, "backend": "docker",
             "backends": {"docker": {"image": image, "max_sandboxes": max_sandboxes}},
             "arms": [{"name": "oracle", "role": "baseline", "command": 'sh "$SOLUTION_DIR/solve.sh"',
                       "expose_solution": True, "resources": LIMITS}]}
    accounts = {"accounts": [{"name": "local", "route": {"env": {"DEMO_API_KEY": KEY_ENV}},
                              "limits": {"max_concurrent": max_sandboxes}}]}
    (root / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    (root / "accounts.yaml").write_text(yaml.safe_dump(accounts, sort_keys=False))
    return root / "suite.yaml", root / "accounts.yaml", [root / "tasks" / t.name for t in tasks]


class Events:
    """``docker events`` for one label, read in a thread: each container's create and destroy."""

    def __init__(self, label: str) -> None:
        self.proc = subprocess.Popen(
            ["docker", "events", "--filter", f"label={label}", "--filter", "type=container",
             "--format", "{{json .}}"], stdout=subprocess.PIPE, text=True)
        self.times: dict[str, dict[str, float]] = {}
        #: Every event of each container, in order: (time, action), ``exec_start: sh -c ...`` cut
        #: to ``exec_start``.
        self.steps: dict[str, list[tuple[float, str]]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.steps.setdefault(event["id"], []).append((event["timeNano"] / 1e9, event["Action"].split(":")[0]))
            if event.get("Action") in ("create", "destroy"):
                self.times.setdefault(event["id"], {})[event["Action"]] = event["timeNano"] / 1e9

    def close(self, expect: int, timeout: float = 30.0) -> list[tuple[float, float]]:
        """(create, destroy) of every container, once ``expect`` have been destroyed."""
        deadline = time.time() + timeout
        while sum("destroy" in t for t in self.times.values()) < expect and time.time() < deadline:
            time.sleep(0.1)
        self.proc.terminate()
        self.proc.wait()
        spans = [(t["create"], t["destroy"]) for t in self.times.values() if len(t) == 2]
        if len(spans) != expect:
            raise SystemExit(f"docker events: {len(spans)} containers created and destroyed, expected {expect}")
        return sorted(spans)


def step_gaps(steps: dict[str, list[tuple[float, str]]]) -> dict[str, list[float]]:
    """Seconds between each container's consecutive events, by pair (``create -> start``,
    ``exec_die -> extract-to-dir``, ...): where its container-seconds went, in the daemon's
    words (``extract-to-dir`` is a put, ``archive-path`` a get, ``kill`` the removal's start)."""
    gaps: dict[str, list[float]] = {}
    for events in steps.values():
        events.sort()
        for (t1, a1), (t2, a2) in itertools.pairwise(events):
            gaps.setdefault(f"{a1} -> {a2}", []).append(t2 - t1)
    return gaps


def peak(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONDONTWRITEBYTECODE")}
    out[KEY_ENV] = "bench-small-value"
    return out


def end_lingers(state: Path) -> None:
    """End the metrics linger an ``execute`` left serving its final figures (15 min by default,
    detached: not in execute's time): this run's, found by its state root, never another's."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ray_bench.metrics.linger" in argv and any(a.startswith(str(state).encode()) for a in argv):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(proc.name), signal.SIGTERM)


def ray_bench_round(args: argparse.Namespace, base: Path, suite: Path, accounts: Path, run_id: str,
                    cells: int) -> dict[str, Any]:
    cmd = [str(args.bin), "plan", "--suite", str(suite), "--accounts", str(accounts), "--run-id", run_id,
           "--runs-dir", str(base / "runs")]
    t = time.time()
    plan = subprocess.run(cmd, check=False, cwd=base, env=env(), capture_output=True, text=True)
    plan_sec = time.time() - t
    if plan.returncode != 0:
        raise SystemExit(f"plan exited {plan.returncode}: {plan.stderr[-800:]}")
    identity = plan.stdout.strip().splitlines()[-1]
    run_root = base / "runs" / run_id
    events = Events(f"ray-bench.run={run_id}")
    time.sleep(0.3)  # the events stream is subscribed before the first create
    typed = time.time()
    done = subprocess.run([str(args.bin), "execute", "--plan", str(run_root / "launch-plan.json"),
                           "--confirm", identity, "--state-root", str(base / "state")],
                          check=False, cwd=base, env=env(), capture_output=True, text=True)
    exited = time.time()
    if done.returncode != 0:
        raise SystemExit(f"execute exited {done.returncode}: {(done.stdout + done.stderr)[-1500:]}")
    spans = events.close(cells)
    end_lingers(base / "state")
    with sqlite3.connect(run_root / "ledger.sqlite") as conn:
        rewards = [r[0] for r in conn.execute("SELECT reward FROM results WHERE valid = 1")]
    if rewards != [1.0] * cells:
        raise SystemExit(f"ray-bench: {len(rewards)} valid rows, rewards {sorted(set(rewards))}; expected "
                         f"{cells} x 1.0")
    first, last = spans[0][0], max(b for _, b in spans)
    return {"plan_sec": plan_sec, "to_first_cell_sec": first - typed, "run_loop_sec": last - first,
            "last_cell_to_exit_sec": exited - last, "fixed_sec": (first - typed) + (exited - last),
            "execute_sec": exited - typed, "peak": peak(spans), "container_sec": [b - a for a, b in spans],
            "steps": step_gaps(events.steps)}


async def bare_cell(image: str, task: Path, logs: Path, run_id: str) -> None:
    logs.mkdir(parents=True)
    logs.chmod(0o777)
    proc = await asyncio.create_subprocess_exec(
        "docker", "run", "--rm", "--label", f"{LABEL}={run_id}", "--network", "none",
        "--cpus", str(LIMITS["cpus"]), "--memory", f"{LIMITS['memory_mb']}m",
        "--memory-swap", f"{LIMITS['memory_mb']}m", "--pids-limit", str(LIMITS["pids"]), "-w", "/app",
        "-v", f"{task / 'solution'}:/solution:ro", "-v", f"{task / 'tests'}:/tests:ro", "-v", f"{logs}:/logs",
        image, "sh", "-c", "sh /solution/solve.sh; sh /tests/test.sh",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    found = logs / "verifier" / "reward.txt"
    reward = found.read_text().strip() if found.is_file() else ""
    if proc.returncode != 0 or reward != "1":
        raise SystemExit(f"bare {task.name}: exit {proc.returncode}, reward {reward!r}: {out.decode()[-400:]}")


def bare_round(image: str, tasks: list[Path], reps: int, base: Path, run_id: str, concurrency: int) -> dict[str, Any]:
    events = Events(f"{LABEL}={run_id}")
    time.sleep(0.3)

    async def all_cells() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one(task: Path, rep: int) -> None:
            async with gate:
                await bare_cell(image, task, base / run_id / f"{task.name}-{rep}" / "logs", run_id)
        await asyncio.gather(*(one(t, r) for t in tasks for r in range(reps)))

    t = time.time()
    asyncio.run(all_cells())
    wall = time.time() - t
    spans = events.close(len(tasks) * reps)
    return {"wall_sec": wall, "peak": peak(spans), "container_sec": [b - a for a, b in spans],
            "steps": step_gaps(events.steps)}


def _tar(files: dict[str, Path | None]) -> bytes:
    """A tar laid at ``/``: each name a file copied from its path, or a directory (None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in files.items():
            if path is None:
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o777
                tar.addfile(info)
            else:
                tar.add(path, arcname=name)
    return buf.getvalue()


def calls_cell(api: Any, image: str, task: Path, run_id: str) -> None:
    """The daemon calls a ray-bench docker cell makes (ray_bench/sandboxes/docker), made here
    directly: create and start (the same limits and PID 1), put the instruction, log directories
    and solution, exec the solution, put the tests, exec them, get /logs, remove."""
    host = api.create_host_config(network_mode="none", mem_limit=f"{LIMITS['memory_mb']}m",
                                  memswap_limit=f"{LIMITS['memory_mb']}m", nano_cpus=int(LIMITS["cpus"] * 1e9),
                                  pids_limit=LIMITS["pids"])
    cid = api.create_container(image, ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait $!"],
                               labels={LABEL: run_id}, working_dir="/app", host_config=host)["Id"]
    try:
        api.start(cid)
        api.put_archive(cid, "/", _tar({"task": None, "task/instruction.md": task / "instruction.md", "logs": None,
                                        "logs/agent": None, "logs/verifier": None, "solution": None,
                                        "solution/solve.sh": task / "solution" / "solve.sh"}))
        for command in ("sh /solution/solve.sh", None, "sh /tests/test.sh"):
            if command is None:
                api.put_archive(cid, "/", _tar({"tests": None, "tests/test.sh": task / "tests" / "test.sh"}))
                continue
            exec_id = api.exec_create(cid, ["sh", "-c", f"mkdir -p /app; cd /app; {command}"])["Id"]
            api.exec_start(exec_id)
            if api.exec_inspect(exec_id)["ExitCode"] != 0:
                raise SystemExit(f"calls {task.name}: {command} failed")
        chunks, _ = api.get_archive(cid, "/logs")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            got = tar.extractfile("logs/verifier/reward.txt")
            if got is None or got.read().strip() != b"1":
                raise SystemExit(f"calls {task.name}: no reward 1")
    finally:
        api.remove_container(cid, force=True, v=True)


def calls_round(image: str, tasks: list[Path], reps: int, run_id: str, concurrency: int) -> dict[str, Any]:
    events = Events(f"{LABEL}={run_id}")
    time.sleep(0.3)
    client = docker.from_env()
    t = time.time()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda task: calls_cell(client.api, image, task, run_id),
                      [task for task in tasks for _ in range(reps)]))
    wall = time.time() - t
    client.close()
    spans = events.close(len(tasks) * reps)
    return {"wall_sec": wall, "peak": peak(spans), "container_sec": [b - a for a, b in spans],
            "steps": step_gaps(events.steps)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-sandboxes", type=int, default=4, help="the suite's docker max_sandboxes")
    parser.add_argument("--bin", type=Path, default=BIN, help="the ray-bench command (default: this venv's)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    client = docker.from_env()
    image = build_base_image(client)
    client.close()
    rounds: list[dict[str, Any]] = []
    rb: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rb-bench-small-") as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        suite, accounts, tasks = write_suite(base / "suite", image, args.reps, args.max_sandboxes)
        cells = len(tasks) * args.reps
        print(f"{cells} cells: {len(tasks)} tasks x 1 oracle-style arm x {args.reps} reps, image {image}, "
              f"max_sandboxes {args.max_sandboxes}; load {os.getloadavg()}", flush=True)
        stamp = time.strftime("%H%M%S")
        for r in range(args.rounds):
            before = load()
            # ray-bench first in even rounds, last in odd ones (at the concurrency it reached before),
            # so that a load rising or falling through a round does not favour one mode
            if r % 2 == 0:
                rb = ray_bench_round(args, base, suite, accounts, f"small-{stamp}-{r}", cells)
            at_once = rb["peak"]
            bare = bare_round(image, tasks, args.reps, base, f"bare-{stamp}-{r}", at_once)
            calls = calls_round(image, tasks, args.reps, f"calls-{stamp}-{r}", at_once)
            if r % 2 == 1:
                rb = ray_bench_round(args, base, suite, accounts, f"small-{stamp}-{r}", cells)
            rounds.append({"round": r, "load_before": before, "load_after": load(), "ray_bench": rb, "bare": bare,
                           "calls": calls})
            print(f"round {r} (load {before} -> {load()}): plan {rb['plan_sec']:.2f} s, first cell "
                  f"{rb['to_first_cell_sec']:.2f} s, run loop {rb['run_loop_sec']:.2f} s, exit "
                  f"{rb['last_cell_to_exit_sec']:.2f} s at {rb['peak']} at once; container-s/cell median "
                  f"{statistics.median(rb['container_sec']):.3f}; bare wall {bare['wall_sec']:.2f} s, "
                  f"container-s/cell median {statistics.median(bare['container_sec']):.3f}; the backend's calls "
                  f"alone {statistics.median(calls['container_sec']):.3f}", flush=True)
    rb_cs = [c for r in rounds for c in r["ray_bench"]["container_sec"]]
    bare_cs = [c for r in rounds for c in r["bare"]["container_sec"]]
    calls_cs = [c for r in rounds for c in r["calls"]["container_sec"]]
    fixed = statistics.median(r["ray_bench"]["fixed_sec"] for r in rounds)
    ratio = statistics.median(rb_cs) / statistics.median(bare_cs)
    summary = {
        "cells_per_round": len(rounds[0]["ray_bench"]["container_sec"]), "rounds": len(rounds),
        "plan_sec": statistics.median(r["ray_bench"]["plan_sec"] for r in rounds),
        "to_first_cell_sec": statistics.median(r["ray_bench"]["to_first_cell_sec"] for r in rounds),
        "run_loop_sec": statistics.median(r["ray_bench"]["run_loop_sec"] for r in rounds),
        "last_cell_to_exit_sec": statistics.median(r["ray_bench"]["last_cell_to_exit_sec"] for r in rounds),
        "fixed_sec": fixed,
        "ray_bench_container_sec": {"median": statistics.median(rb_cs), "p90": pct(rb_cs, 0.9),
                                    "mean": statistics.fmean(rb_cs)},
        "bare_container_sec": {"median": statistics.median(bare_cs), "p90": pct(bare_cs, 0.9),
                               "mean": statistics.fmean(bare_cs)},
        "bare_wall_sec": statistics.median(r["bare"]["wall_sec"] for r in rounds),
        "calls_container_sec": {"median": statistics.median(calls_cs), "p90": pct(calls_cs, 0.9),
                                "mean": statistics.fmean(calls_cs)},
        "ratio_median": ratio, "ratio_p90": pct(rb_cs, 0.9) / pct(bare_cs, 0.9),
    }
    for mode in ("ray_bench", "calls", "bare"):
        gaps: dict[str, list[float]] = {}
        for one in rounds:
            for pair, got in one[mode]["steps"].items():
                gaps.setdefault(pair, []).extend(got)
        cells_seen = sum(len(one[mode]["container_sec"]) for one in rounds)
        per_cell = {pair: sum(got) / cells_seen for pair, got in gaps.items()}
        print(f"{mode}: seconds a cell between the container's events (mean over cells; median of those seen)")
        for pair, sec in sorted(per_cell.items(), key=lambda kv: -kv[1]):
            if sec >= 0.001:
                print(f"  {pair:32s} {sec:6.3f}   median {statistics.median(gaps[pair]):6.3f} x{len(gaps[pair])}")
    rounded = {k: round(v, 3) if isinstance(v, float) else
               ({kk: round(vv, 3) for kk, vv in v.items()} if isinstance(v, dict) else v) for k, v in summary.items()}
    print(json.dumps(rounded, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": rounded, "rounds": rounds}, indent=2) + "\n")
    missed = []
    if fixed > GOAL_FIXED_SEC:
        missed.append(f"fixed cost {fixed:.2f} s > {GOAL_FIXED_SEC} s")
    if ratio > GOAL_RATIO:
        missed.append(f"container-seconds a cell {ratio:.2f}x bare > {GOAL_RATIO}x")
    for line in missed:
        print(f"GOAL MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
