"""Per-cell overhead of the Harbor path (``agent: harbor``) against the ``command`` path on the
docker backend, through the cell runner (``run_attempt``), one task (quickstart hello-world) in
the tmux image (tests/support/images.py), the same sandbox limits for every mode:

- ``command``: the task's solve.sh as the arm's command;
- ``oracle``: Harbor's OracleAgent through ray-bench's SandboxEnvironment (uploads solution/,
  runs solve.sh, downloads its log);
- ``terminus-2``: Harbor's Terminus 2 against the fake provider on loopback (two model answers:
  one command typed into its tmux pane, then the confirmation), so its figure holds tmux setup,
  two LiteLLM round trips and Terminus 2's own pauses, not a model's thinking. The sandbox is
  offline and the image has no asciinema, so its recording is off (ray_bench/harbor/tools.py).
  Before that check, Harbor's default recording sent its installer looking for a package
  manager in every cell: 7.15 s median against 2.42 s with ``record_terminal_session: false``
  (same command, 12 cells each).

Modes alternate in rounds (drift in the daemon hits them alike); the Harbor and LiteLLM import,
once per runner process, is timed apart and not in any cell. Needs Python 3.12 with the extra:

    PYTHONPATH=$PWD .venv-harbor/bin/python tests/perf/bench_harbor.py [--cells 8] [--rounds 2]
                                                                       [--concurrency 2]

Measured 2026-12-02 (Harbor 0.26.0, Python 3.12.1, docker 20.10, 2 vCPU shared with other
sessions, load average 11-14), ``--cells 6 --rounds 3 --concurrency 2``, 18 cells a mode:

| mode | cells/s | median s/cell | median over command |
| --- | --- | --- | --- |
| command | 1.46 | 1.28 | - |
| oracle | 0.98 | 1.86 | +0.58 s |
| terminus-2 | 0.47 | 3.73 | +2.45 s |

Harbor's import: 19 s in that process (10-32 s over four runs at that load; once per runner
process). A 12-cell run just before (``--rounds 2``): command 1.61 s, oracle 2.48 s, terminus-2
4.31 s median; the spread at this load is about 0.5 s a cell.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support

from support.fake_provider import Answer, FakeProvider
from support.images import build_base_image, build_tmux_image
from support.suites import make_suite

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.sandboxes.docker import DockerBackend

MODES = ("command", "oracle", "terminus-2")
KEY_ENV, BASE_ENV = "RB_BENCH_HARBOR_KEY", "RB_BENCH_HARBOR_BASE"
_SOLVE = json.dumps({"analysis": "missing", "plan": "write it",
                     "commands": [{"keystrokes": "echo 'Hello, world!' > hello.txt\n", "duration": 0.1}],
                     "task_complete": True})


def _spec(tmp: Path, image: str, mode: str, i: int) -> AttemptSpec:
    harbor: dict[str, Any] = {}
    if mode != "command":
        harbor = {"agent": "harbor", "harbor_agent": mode}
    if mode == "terminus-2":
        harbor |= {"model": "anthropic/claude-sonnet-4-5", "harbor_options": {"max_turns": 3},
                   "route_env": {"ANTHROPIC_API_KEY": KEY_ENV, "ANTHROPIC_BASE_URL": BASE_ENV}}
    fields: dict[str, Any] = dict(
        run_id="bench-harbor", attempt_id=f"{mode}-{i}-a1", cell_id=f"{mode}-{i}", task_id="hello-world", arm=mode,
        rep=1, account="acct", task_path=str(tmp / "suite" / "tasks" / "hello-world"), stage_key=str(tmp),
        attempt_dir=str(tmp / "attempts" / f"{mode}-{i}"), backend="docker", backend_options={},
        agent_command='sh "$SOLUTION_DIR/solve.sh"' if mode == "command" else "", agent_env={}, agent_dir=None,
        route_env={}, route_home=None, agent_timeout_sec=120.0, verifier_timeout_sec=60.0, verifier_env={},
        image=image, build_context=None, workdir="/app", network=False, cpus=1, memory_mb=512, pids=256,
        expose_solution=mode == "command", artifact_cap_bytes=8 << 20, seed="s")
    return AttemptSpec(**{**fields, **harbor})


async def _round(backend: DockerBackend, tmp: Path, image: str, mode: str, first: int, cells: int,
                 concurrency: int) -> tuple[float, list[float]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> float:
        async with gate:
            started = time.monotonic()
            summary = await run_attempt(_spec(tmp, image, mode, i), backend)
            assert summary.error is None and summary.reward == 1.0, (mode, summary.error, summary.agent_error)
            return time.monotonic() - started

    started = time.monotonic()
    latencies = await asyncio.gather(*(one(first + i) for i in range(cells)))
    return time.monotonic() - started, list(latencies)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    client = docker.from_env()
    image = build_tmux_image(client, build_base_image(client))
    client.close()
    t = time.monotonic()
    import ray_bench.harbor.run  # noqa: F401 - Harbor and LiteLLM, once per runner process
    import_sec = time.monotonic() - t
    walls = dict.fromkeys(MODES, 0.0)
    latencies: dict[str, list[float]] = {m: [] for m in MODES}
    backend = DockerBackend()
    with tempfile.TemporaryDirectory(prefix="bench-harbor-") as d, \
            FakeProvider(default=Answer(text=_SOLVE, input_tokens=300, output_tokens=40)) as fake:
        tmp = Path(d)
        make_suite(tmp / "suite", tasks=["hello-world"])
        os.environ[KEY_ENV], os.environ[BASE_ENV] = "sk-ant-bench-harbor-0123456789", fake.url
        try:
            for mode in MODES:  # warm-up, not counted
                await _round(backend, tmp, image, mode, 10_000, 1, 1)
            for r in range(args.rounds):
                for mode in MODES:
                    wall, got = await _round(backend, tmp, image, mode, r * args.cells, args.cells, args.concurrency)
                    walls[mode] += wall
                    latencies[mode] += got
        finally:
            await backend.close()
    cells = args.cells * args.rounds
    figures = {m: {"cells": cells, "cells_per_sec": round(cells / walls[m], 3),
                   "median_cell_sec": round(statistics.median(latencies[m]), 3)} for m in MODES}
    base = figures["command"]["median_cell_sec"]
    for m in MODES[1:]:
        figures[m]["median_over_command_sec"] = round(figures[m]["median_cell_sec"] - base, 3)
    return {"concurrency": args.concurrency, "harbor_import_sec": round(import_sec, 2), "modes": figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=8, help="cells per mode per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = asyncio.run(_main(args))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
