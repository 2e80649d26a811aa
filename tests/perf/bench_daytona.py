"""The ``daytona`` backend at N concurrent sandboxes against the local Daytona fixture, with the
real API's hard parts switched on: 429s on creates, gateways that lose a create's answer after
the sandbox was made, Dockerfile builds that take a while, asynchronous deletes that answer 409
to a second DELETE (every sandbox is deleted twice at once), a lagging listing, and an
organisation quota smaller than N (so creates are refused for quota and come back, as a cell
refused for quota goes back to the queue).

Each "cell" does what the runner does with a sandbox: create, put a file, exec the agent
(which appends a line to a file, then holds the sandbox), exec the verifier, get /logs, delete.

    .venv/bin/python tests/perf/bench_daytona.py [--sandboxes 200] [--hold 20] [--quota 180]

Goals (exit 1 when missed): 0 duplicate sandboxes (two sandboxes for one attempt), 0 agent
commands run twice, the audit at zero, 0 good cells failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.daytona_server import DaytonaServer, Faults
from support.images import build_base_image

from ray_bench.errors import SandboxQuotaError
from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import LABEL_ATTEMPT, LABEL_RUN, Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.daytona import DaytonaBackend

KEY_ENV = "RB_BENCH_DAYTONA_KEY"


async def cell(backend: DaytonaBackend, spec: SandboxSpec, hold: float, marker: str,
               peak: dict[str, int]) -> dict[str, Any]:
    started = time.monotonic()
    refusals = 0
    while True:
        try:
            sandbox = await backend.create(spec)
            break
        except SandboxQuotaError:
            refusals += 1  # as admission does: back to the queue, try again shortly
            await asyncio.sleep(1.0)
    peak["now"] += 1
    peak["max"] = max(peak["max"], peak["now"])
    try:
        await sandbox.put_file(b"do the task\n", "/task/instruction.md")
        agent = await sandbox.exec(f"echo {marker} >> /tmp/agent-runs; sleep {hold}", timeout=hold + 120)
        verifier = await sandbox.exec(
            'mkdir -p "$LOGS_DIR/verifier" && wc -l < /tmp/agent-runs > "$LOGS_DIR/verifier/reward.txt"',
            timeout=60, env={"LOGS_DIR": sandbox.path("/logs")})
        with tempfile.TemporaryDirectory() as out:
            await sandbox.get_dir("/logs", Path(out), max_bytes=1 << 20)
            runs = (Path(out) / "verifier" / "reward.txt").read_text().strip()
        ok = agent.exit_code == 0 and verifier.exit_code == 0 and runs == "1"
    finally:
        peak["now"] -= 1
        # Twice at once: the second DELETE meets the first's pending change (409).
        refs = await backend.list({LABEL_ATTEMPT: spec.labels[LABEL_ATTEMPT]})
        await asyncio.gather(sandbox.delete(), *(backend.remove(r) for r in refs))
    return {"ok": ok, "seconds": time.monotonic() - started, "quota_refusals": refusals}


async def bench(server: DaytonaServer, image: str, n: int, hold: float, build_dir: Path) -> dict[str, Any]:
    backend = DaytonaBackend(api_url=server.api_url, api_key_env=KEY_ENV, create_timeout=900,
                             max_rate_limit_retries=50)
    run_id = f"bench-dt-{uuid.uuid4().hex[:8]}"
    peak = {"now": 0, "max": 0}
    specs = []
    for i in range(n):
        labels = run_labels(run_id, f"cell-{i}", f"att-{i}")
        if i % 10 == 0:  # one in ten is a Dockerfile build
            specs.append(SandboxSpec(labels=labels, dockerfile_dir=build_dir, resources=Resources(cpus=1)))
        else:
            specs.append(SandboxSpec(labels=labels, image=image, resources=Resources(cpus=1)))
    started = time.monotonic()
    try:
        results = await asyncio.gather(
            *(cell(backend, s, hold, f"att-{i}", peak) for i, s in enumerate(specs)),
            return_exceptions=True)
        wall = time.monotonic() - started
        report = await audit([backend], run_id, cleanup=False)
    finally:
        await backend.close()
    failed = [r for r in results if isinstance(r, BaseException) or not r["ok"]]
    per_attempt = collections.Counter(b["labels"].get(LABEL_ATTEMPT) for b in server.boxes()
                                      if b["labels"].get(LABEL_RUN) == run_id)
    agent_runs = collections.Counter(m.group(1) for _, cmd in server.executions
                                     if (m := re.search(r"echo (att-\d+) >> /tmp/agent-runs", cmd)))
    return {
        "sandboxes": n,
        "wall_sec": round(wall, 1),
        "peak_concurrent": peak["max"],
        "duplicate_sandboxes": sum(c - 1 for c in per_attempt.values() if c > 1),
        "attempts_without_sandbox": n - len(per_attempt),
        "agent_commands_run_twice": sum(1 for c in agent_runs.values() if c > 1),
        "audit_residue": len(report.residue) + len(report.errors),
        "good_cells_failed": len(failed),
        "failures": [repr(r)[:300] if isinstance(r, BaseException) else r for r in failed[:5]],
        "server": dict(server.counts),
        "quota_refusals_absorbed": sum(r["quota_refusals"] for r in results if isinstance(r, dict)),
        "rate_limited_waits": backend.rate_limited_waits,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=200)
    parser.add_argument("--hold", type=float, default=20.0, help="seconds each agent holds its sandbox")
    parser.add_argument("--quota", type=int, default=180, help="the organisation's vCPU quota")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = docker.from_env(timeout=300)  # as the tests' client: dockerd answers slowly at 200 sandboxes
    image = build_base_image(client)
    faults = Faults(create_429_fraction=0.15, create_lost_fraction=0.05, retry_after_sec=1.0,
                    build_delay_sec=2.0, create_delay_sec=0.5, delete_delay_sec=1.0, list_lag_sec=1.0,
                    quota_vcpu=args.quota, seed=5)
    server = DaytonaServer(docker_client=client, default_image=image, faults=faults).start()
    os.environ[KEY_ENV] = server.api_key
    try:
        with tempfile.TemporaryDirectory() as build:
            (Path(build) / "Dockerfile").write_text(f"FROM {image}\nRUN echo built > /built\n")
            figures = asyncio.run(bench(server, image, args.sandboxes, args.hold, Path(build)))
    finally:
        server.stop()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    goals = ("duplicate_sandboxes", "agent_commands_run_twice", "audit_residue", "good_cells_failed",
             "attempts_without_sandbox")
    missed = [g for g in goals if figures[g]]
    if missed:
        print(f"missed: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
