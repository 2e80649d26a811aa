"""Per-cell overhead of the docker backend against raw ``docker run --rm``, in one run.

A backend cell: create, put the task files, exec the agent command, exec the verifier command,
get /logs, delete. A raw cell: ``docker run --rm`` of the same two commands (task files bind-
mounted): one container per command (``raw2``, the goal's baseline: the same agent and verifier
commands, each a ``docker run --rm``), and, as a stricter figure, both in one container
(``raw1``, no file transfer at all). All at the same concurrency; modes alternate in rounds so
that drift in the daemon's speed hits them alike. Exit 1 when backend / raw2 exceeds the goal.

    .venv/bin/python tests/perf/bench_docker.py [--cells 40] [--concurrency 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.images

from support.images import build_base_image

from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend

AGENT = "mkdir -p /logs/agent && cat /app/instruction.md > /logs/agent/out.txt && echo agent-done"
VERIFIER = (
    "mkdir -p /logs/verifier && sh /tests/test.sh > /logs/verifier/test.log 2>&1; "
    "echo 1 > /logs/verifier/reward.txt"
)
GOAL = 1.25


def make_task(root: Path) -> Path:
    (root / "app").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "app" / "instruction.md").write_text("Write the answer to /logs/agent/out.txt.\n" * 20)
    (root / "tests" / "test.sh").write_text("#!/bin/sh\ntest -s /logs/agent/out.txt && echo ok\n")
    return root


async def backend_cell(
    backend: DockerBackend, image: str, task: Path, run_id: str, i: int
) -> float:
    started = time.monotonic()
    spec = SandboxSpec(
        labels=run_labels(run_id, f"cell-{i}", f"att-{i}"),
        image=image,
        resources=Resources(cpus=1, memory_mb=256, pids=256),
    )
    sandbox = await backend.create(spec)
    try:
        await sandbox.put_dir(task / "app", "/app")
        await sandbox.put_dir(task / "tests", "/tests")
        agent = await sandbox.exec(AGENT, timeout=60)
        verifier = await sandbox.exec(VERIFIER, timeout=60)
        assert agent.exit_code == 0, agent
        assert verifier.exit_code == 0, verifier
        with tempfile.TemporaryDirectory() as out:
            await sandbox.get_dir("/logs", Path(out), max_bytes=1 << 20)
            assert (Path(out) / "verifier" / "reward.txt").read_text() == "1\n"
    finally:
        await sandbox.delete()
    return time.monotonic() - started


async def raw_cell(image: str, task: Path, commands: list[str]) -> float:
    started = time.monotonic()
    for command in commands:
        proc = await asyncio.create_subprocess_exec(
            "docker", "run", "--rm", "--network", "none", "--memory", "256m", "--cpus", "1",
            "--pids-limit", "256",
            "-v", f"{task / 'app'}:/app:ro",
            "-v", f"{task / 'tests'}:/tests:ro",
            image, "sh", "-c", command,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 0, err
    return time.monotonic() - started


async def run_mode(
    mode: str, cells: int, concurrency: int, image: str, task: Path
) -> dict[str, float]:
    gate = asyncio.Semaphore(concurrency)
    backend = DockerBackend()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"

    async def one(i: int) -> float:
        async with gate:
            if mode == "backend":
                return await backend_cell(backend, image, task, run_id, i)
            if mode == "raw1":
                return await raw_cell(image, task, [f"{AGENT} && {VERIFIER}"])
            return await raw_cell(image, task, [AGENT, VERIFIER])

    started = time.monotonic()
    try:
        latencies = await asyncio.gather(*(one(i) for i in range(cells)))
    finally:
        report = await audit([backend], run_id, cleanup=True)
        await backend.close()
    wall = time.monotonic() - started
    assert report.clean, report.lines()
    return {"wall_sec": wall, "cells": cells, "p50_sec": statistics.median(latencies)}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40, help="cells per mode per round")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    client = docker.from_env()
    image = build_base_image(client)
    client.close()
    totals: dict[str, dict[str, float]] = {}
    p50s: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp) / "task")
        await run_mode("backend", 4, args.concurrency, image, task)  # warm-up, not counted
        for _ in range(args.rounds):
            for mode in ("raw1", "backend", "raw2"):
                got = await run_mode(mode, args.cells, args.concurrency, image, task)
                total = totals.setdefault(mode, {"wall_sec": 0.0, "cells": 0.0})
                total["wall_sec"] += got["wall_sec"]
                total["cells"] += got["cells"]
                p50s.setdefault(mode, []).append(got["p50_sec"])
    figures = {
        mode: {
            "cells": int(t["cells"]),
            "wall_sec": round(t["wall_sec"], 2),
            "cells_per_sec": round(t["cells"] / t["wall_sec"], 2),
            "p50_cell_sec": round(statistics.median(p50s[mode]), 3),
        }
        for mode, t in totals.items()
    }
    ratio = totals["backend"]["wall_sec"] / totals["raw1"]["wall_sec"]
    ratio2 = totals["backend"]["wall_sec"] / totals["raw2"]["wall_sec"]
    result = {
        "concurrency": args.concurrency,
        "modes": figures,
        "ratio_backend_over_raw1": round(ratio, 3),
        "ratio_backend_over_raw2": round(ratio2, 3),
        "goal": GOAL,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if ratio2 > GOAL:
        print(f"MISSED: backend / raw docker run = {ratio2:.2f} > {GOAL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
