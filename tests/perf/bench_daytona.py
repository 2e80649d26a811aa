"""The ``daytona`` backend at N concurrent sandboxes over several runner processes against the
local Daytona fixture, with the real service's hard parts on: a build phase before the fan-out
(the product's ``run_build_phase`` + ``DaytonaSnapshotBuilder``) against cold per-runner builds
of minutes, then every cell created from its snapshot; 429s on every route class (creates, and
``throttled_429_fraction`` of get/list/delete/toolbox), 30 % of create answers lost after the
sandbox was made, DELETEs answered 409 (every sandbox deleted twice at once, and during
bring-up), a lagging listing, an organisation quota (refusals go back to the queue), and one
runner process SIGKILLed mid-run, then resumed: the resume first removes what the dead process's
unfinished attempts left (as the driver's stale recovery does), then runs those cells again
under new attempt ids; the run's final cleanup, then ``audit --cleanup``, close it.

Each cell does what the runner does with a sandbox: create, put a file, exec the agent (it
appends its attempt id to a file, then holds the sandbox), exec the verifier, get /logs, delete.

    .venv/bin/python tests/perf/bench_daytona.py [--sandboxes 500] [--processes 2] [--hold 240]
        [--cold-build 120] [--quota 520] [--private-dockerd /tmp/rbdt] [--json out.json] [--keep DIR]

``--keep DIR`` keeps every process's log (``driver.log``: the driver's and the fixture's, with
aiohttp's tracebacks; ``runner-N.err``: each runner's stderr, one line per failed cell with its
stage) and each cell's timings (``results-N.jsonl``); the figures' ``timings`` tell a client
queue (create answered -> first call arrived at the fixture) from a starved fixture (arrived ->
served, and a command's wait for a thread).

Goals (exit 1 when missed): 0 duplicate sandboxes (two for one attempt), 0 agent commands run
twice (per attempt), 0 sandboxes left after the run and after the audit, 0 good cells failed.
The lower bound of the wall time is the fixture's own: one cold build + the longest cell (hold).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.daytona_server import DaytonaServer, Faults
from support.images import build_base_image

from ray_bench.errors import SandboxQuotaError, SandboxRateLimitedError
from ray_bench.models.build import BuildTarget
from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import LABEL_ATTEMPT, LABEL_RUN, Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.daytona import DaytonaBackend
from ray_bench.sandboxes.daytona.snapshots import DaytonaSnapshotBuilder
from ray_bench.scheduler.builds import run_build_phase, snapshot_name

KEY_ENV = "RB_BENCH_DAYTONA_KEY"


def _backend(api_url: str) -> DaytonaBackend:
    return DaytonaBackend(api_url=api_url, api_key_env=KEY_ENV, create_timeout=900, max_rate_limit_retries=50)


# -- a runner process ------------------------------------------------------------------------


async def cell(backend: DaytonaBackend, job: dict[str, Any], hold: float, out: Any) -> None:
    spec = SandboxSpec(labels=run_labels(job["run_id"], job["cell"], job["attempt"]),
                       image=f"snapshot:{job['snapshot']}", resources=Resources(cpus=1), lifetime_sec=hold + 600)
    started = time.monotonic()
    at: dict[str, float] = {"start": started}  # monotonic times (one clock for every process on the host)
    refusals = 0
    ok, stage, error = False, "create", ""
    try:
        while True:
            try:
                sandbox = await backend.create(spec)
                break
            except (SandboxQuotaError, SandboxRateLimitedError):
                refusals += 1  # as admission does: back to the queue, tried again shortly
                await asyncio.sleep(1.0)
        at["created"] = time.monotonic()
        try:
            stage = "put_file"
            await sandbox.put_file(b"do the task\n", "/task/instruction.md")
            at["first_call"] = time.monotonic()
            stage = "agent"
            agent = await sandbox.exec(f"echo {job['attempt']} >> /tmp/agent-runs; sleep {hold}", timeout=hold + 300)
            at["agent"] = time.monotonic()
            stage = "verifier"
            verifier = await sandbox.exec(
                'mkdir -p "$LOGS_DIR/verifier" && wc -l < /tmp/agent-runs > "$LOGS_DIR/verifier/reward.txt"',
                timeout=120, env={"LOGS_DIR": sandbox.path("/logs")})
            at["verifier"] = time.monotonic()
            stage = "get_dir"
            with tempfile.TemporaryDirectory() as got:
                await sandbox.get_dir("/logs", Path(got), max_bytes=1 << 20)
                runs = (Path(got) / "verifier" / "reward.txt").read_text().strip()
            at["logs"] = time.monotonic()
            ok = agent.exit_code == 0 and verifier.exit_code == 0 and runs == "1"
            stage = "done" if ok else f"wrong answer (agent {agent.exit_code}, verifier {verifier.exit_code}, {runs})"
        finally:
            refs = await backend.list({LABEL_ATTEMPT: job["attempt"]})
            await asyncio.gather(sandbox.delete(), *(backend.remove(r) for r in refs))
            at["deleted"] = time.monotonic()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
        print(f"{job['attempt']} failed at {stage} after {time.monotonic() - started:.1f} s: {error}",
              file=sys.stderr, flush=True)
    out.write(json.dumps({"cell": job["cell"], "attempt": job["attempt"], "ok": ok, "quota_refusals": refusals,
                          "seconds": round(time.monotonic() - started, 1), "stage": stage, "error": error,
                          "at": {k: round(v, 3) for k, v in at.items()}}) + "\n")
    out.flush()


async def worker(spec: dict[str, Any]) -> None:
    backend = _backend(spec["api_url"])
    try:
        if spec.get("recover"):  # a resumed driver: what the dead one's unfinished attempts left
            stale = set(spec["recover"])
            refs = [r for r in await backend.list({LABEL_RUN: spec["run_id"]}) if r.labels.get(LABEL_ATTEMPT) in stale]
            await asyncio.gather(*(backend.remove(r) for r in refs))
        with open(spec["results"], "a") as out:
            results = await asyncio.gather(*(cell(backend, j, spec["hold"], out) for j in spec["jobs"]),
                                           return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                print(f"cell failed: {r!r}"[:300], file=sys.stderr)
    finally:
        await backend.close()


def start_worker(tmp: Path, name: str, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, __file__, "--worker", str(path)], env=env,
                            stderr=open(tmp / f"{name}.err", "wb"))


def spread(values: list[float]) -> dict[str, float | int]:
    """n, median, 90th percentile and max of ``values`` (seconds)."""
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50": round(v[len(v) // 2], 1), "p90": round(v[int(len(v) * 0.9)], 1),
            "max": round(v[-1], 1)}


def timings(rows: list[dict[str, Any]], server: DaytonaServer, run_id: str) -> dict[str, Any]:
    """Where each cell's time went: the client's gaps, and the fixture's own view of the first
    toolbox call (when it arrived, when the fixture served it), joined on the attempt label."""
    boxes = {b["labels"].get(LABEL_ATTEMPT): b for b in server.boxes() if b["labels"].get(LABEL_RUN) == run_id}

    def gap(a: str, b: str) -> list[float]:
        return [r["at"][b] - r["at"][a] for r in rows if a in r["at"] and b in r["at"]]

    sent, waited = [], []
    for r in rows:
        box = boxes.get(r["attempt"])
        if box and "created" in r["at"] and box["first_call_mono"] is not None:
            sent.append(box["first_call_mono"] - r["at"]["created"])
            waited.append((box["first_served_mono"] or box["first_call_mono"]) - box["first_call_mono"])
    return {
        "create_sec": spread(gap("start", "created")),
        "created_to_first_call_answered_sec": spread(gap("created", "first_call")),
        "created_to_first_call_arrived_at_fixture_sec": spread(sent),
        "first_call_waited_in_fixture_sec": spread(waited),
        "agent_exec_sec": spread(gap("first_call", "agent")),
        "verifier_sec": spread(gap("agent", "verifier")),
        "delete_sec": spread(gap("logs", "deleted")),
        "fixture_toolbox_wait_sec": spread(server.toolbox_waits),
        "fixture_command_thread_wait_sec": spread(server.command_waits),
        "failed_at": dict(collections.Counter(r["stage"] for r in rows if not r["ok"])),
    }


def results_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# -- the bench -------------------------------------------------------------------------------


def bench(server: DaytonaServer, image: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    run_id = f"bench-dt-{uuid.uuid4().hex[:8]}"
    build = tmp / "environment"
    build.mkdir(exist_ok=True)
    (build / "Dockerfile").write_text(f"FROM {image}\nRUN echo built > /built\n")
    targets = [BuildTarget(snapshot=snapshot_name(f"{run_id}:{src}", (1, 1, 3)), cpu=1, memory_gib=1, disk_gib=3,
                           tasks=(src,), cells=(), **kw)
               for src, kw in (("image", {"image": image}), ("dockerfile", {"dockerfile_dir": str(build)}))]
    started = time.monotonic()
    events: list[tuple[str, dict[str, Any]]] = []
    built = run_build_phase(targets, lambda: DaytonaSnapshotBuilder(_backend(server.api_url)), ledger_finished=[],
                            record=lambda k, d: events.append((k, d)), progress=lambda line: print(line, flush=True),
                            concurrency=2, timeout_sec=1800)
    build_sec = time.monotonic() - started
    assert not built.failed, built.failed
    peak = {"max": 0}
    stop = threading.Event()

    def sample() -> None:  # what runs at once, seen from the service (across processes)
        while not stop.wait(1.0):
            now = sum(1 for b in server.boxes() if b["labels"].get(LABEL_RUN) == run_id and b["state"] == "started")
            peak["max"] = max(peak["max"], now)

    threading.Thread(target=sample, daemon=True).start()
    cells = [{"run_id": run_id, "cell": f"cell-{i}", "attempt": f"att-{i}",
              "snapshot": targets[1 if i % 10 == 0 else 0].snapshot} for i in range(args.sandboxes)]
    shares = [cells[p::args.processes] for p in range(args.processes)]
    results = [tmp / f"results-{p}.jsonl" for p in range(args.processes)]
    procs = [start_worker(tmp, f"runner-{p}", {"api_url": server.api_url, "run_id": run_id, "hold": args.hold,
                                                "jobs": shares[p], "results": str(results[p])})
             for p in range(args.processes)]
    # SIGKILL runner 0 mid-run: when half of its sandboxes are up (its agents hold them).
    victim = {j["attempt"] for j in shares[0]}
    while sum(1 for b in server.boxes() if b["labels"].get(LABEL_ATTEMPT) in victim and b["state"] == "started") \
            < len(victim) // 2 and procs[0].poll() is None:
        time.sleep(1.0)
    killed_at = time.monotonic() - started
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    done = {r["cell"] for r in results_of(results[0]) if r["ok"]}
    redo = [{**j, "attempt": f"{j['attempt']}-r"} for j in shares[0] if j["cell"] not in done]
    resumed = start_worker(tmp, "runner-0-resumed", {
        "api_url": server.api_url, "run_id": run_id, "hold": args.hold, "jobs": redo, "results": str(results[0]),
        "recover": [j["attempt"] for j in shares[0] if j["cell"] not in done]})
    for proc in [*procs[1:], resumed]:
        proc.wait()
    wall = time.monotonic() - started
    stop.set()

    async def closing() -> tuple[int, int]:
        backend = _backend(server.api_url)
        try:  # the run's own end-of-run cleanup, then the operator's audit --cleanup
            first = await audit([backend], run_id, cleanup=True, settle_sec=60)
            second = await audit([backend], run_id, cleanup=True, settle_sec=60)
        finally:
            await backend.close()
        return len(first.residue) + len(first.errors), len(second.residue) + len(second.errors), len(first.found)

    left_after_run, left_after_audit, final_cleanup_found = asyncio.run(closing())
    rows = [r for p in results for r in results_of(p)]
    good = {r["cell"] for r in rows if r["ok"]}
    per_attempt = collections.Counter(b["labels"].get(LABEL_ATTEMPT) for b in server.boxes()
                                      if b["labels"].get(LABEL_RUN) == run_id)
    agent_runs = collections.Counter(m.group(1) for _, cmd in server.executions
                                     if (m := re.search(r"echo (att-\d+(?:-r)?) >> /tmp/agent-runs", cmd)))
    alive = [b for b in server.boxes() if b["labels"].get(LABEL_RUN) == run_id and b["state"] != "destroyed"]
    return {
        "sandboxes": args.sandboxes, "processes": args.processes, "hold_sec": args.hold,
        "cold_build_sec": args.cold_build, "runners": server.runners,
        "wall_sec": round(wall, 1), "build_phase_sec": round(build_sec, 1),
        "lower_bound_sec": round(args.cold_build + args.hold, 1),
        "killed_at_sec": round(killed_at, 1), "cells_rerun_after_kill": len(redo),
        "peak_concurrent": peak["max"],
        "duplicate_sandboxes": sum(c - 1 for c in per_attempt.values() if c > 1),
        "agent_commands_run_twice": sum(1 for c in agent_runs.values() if c > 1),
        "final_cleanup_found": final_cleanup_found, "left_after_run": left_after_run,
        "left_after_audit": left_after_audit + len(alive),
        "good_cells_failed": args.sandboxes - len(good),
        "quota_refusals_absorbed": sum(r["quota_refusals"] for r in rows),
        "server": dict(server.counts),
        "cold_builds": len(server.cold_builds),
        "timings": timings(rows, server, run_id),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sandboxes", type=int, default=500)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--hold", type=float, default=240.0, help="seconds each agent holds its sandbox")
    parser.add_argument("--cold-build", type=float, default=120.0, help="seconds of a cold build on a runner")
    parser.add_argument("--quota", type=int, default=520, help="the organisation's vCPU quota")
    parser.add_argument("--private-dockerd", type=Path, help="run the fixture on a dockerd of its own under DIR")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep every process's log, the cells' results and timings in DIR")
    args = parser.parse_args()
    if args.worker:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        asyncio.run(worker(json.loads(args.worker.read_text())))
        return 0
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        # The driver's and the fixture's own log (aiohttp's tracebacks included); each runner's
        # stderr is DIR/runner-N.err, its cells' rows and timings DIR/results-N.jsonl.
        logging.basicConfig(filename=args.keep / "driver.log", level=logging.INFO,
                            format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
        print(f"keeping logs and results in {args.keep}", flush=True)
    daemon = None
    if args.private_dockerd:
        from reliability.test_dockerd_restart import PrivateDockerd

        args.private_dockerd.mkdir(parents=True, exist_ok=True)
        daemon = PrivateDockerd(args.private_dockerd)
        daemon.start()
        client = docker.DockerClient(base_url=daemon.url, timeout=300)
    else:
        client = docker.from_env(timeout=300)
    faults = Faults(create_429_fraction=0.15, throttled_429_fraction=0.03, create_lost_fraction=0.3,
                    retry_after_sec=1.0, cold_build_sec=args.cold_build, build_delay_sec=1.0, create_delay_sec=0.5,
                    delete_delay_sec=1.0, list_lag_sec=1.0, quota_vcpu=args.quota, seed=5)
    try:
        image = build_base_image(client)
        server = DaytonaServer(docker_client=client, default_image=image, faults=faults, runners=4).start()
        os.environ[KEY_ENV] = server.api_key
        try:
            if args.keep:
                figures = bench(server, image, args, args.keep)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    figures = bench(server, image, args, Path(tmp))
        finally:
            server.stop()
    finally:
        if daemon is not None:
            daemon.teardown()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    goals = ("duplicate_sandboxes", "agent_commands_run_twice", "left_after_audit", "good_cells_failed")
    missed = [g for g in goals if figures[g]]
    if missed:
        print(f"missed: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
