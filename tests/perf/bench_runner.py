"""The cell runner alone, without Ray: no-op attempts on the local backend in one asyncio loop,
as the ``CellRunner`` actor runs them, and the CPU each costs (a diagnostic for issue 8's
throughput; no goal of its own).

    .venv/bin/python tests/perf/bench_runner.py [--cells 1000] [--concurrency 16]
                                                [--sandboxes DIR] [--profile OUT.prof]

Runs twice in one process: as shipped (small sandbox trees copied, moved and removed on the
event loop) and with every tree sent to a worker thread (``asyncio.to_thread``, as before
issue 8's changes), and prints cells/s and CPU per cell of this process (user, system) and of
the shells it ran, for both. ``--sandboxes`` puts the sandboxes elsewhere (e.g. a tmpfs) to
see what the filesystem costs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_support import ROUTES, write_tasks

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.sandboxes import local, make_backend


def spec(root: Path, task: Path, i: int) -> AttemptSpec:
    return AttemptSpec(
        run_id="bench", attempt_id=f"c{i}-a1", cell_id=f"c{i}", task_id=task.name, arm="baseline", rep=i,
        account="bench-a", task_path=str(task), stage_key="bench", attempt_dir=str(root / "attempts" / f"c{i}-a1"),
        backend="local", backend_options={}, agent_command="true", agent_env={}, agent_dir=None,
        route_env={"DEMO_API_KEY": "RB_BENCH_KEY_A"}, route_home=None, agent_timeout_sec=60,
        verifier_timeout_sec=60, verifier_env={}, image=None, build_context=None, workdir="/app",
        network=False, cpus=None, memory_mb=None, pids=None, expose_solution=False,
        artifact_cap_bytes=1 << 20, seed="s")


async def run(n: int, concurrency: int, root: Path, sandboxes: Path) -> None:
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):  # as the CellRunner actor does
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)
    task = root / "tasks" / write_tasks(root / "tasks", 1)[0]
    backend = make_backend("local", root=str(sandboxes))
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            summary = await run_attempt(spec(root, task, i), backend)
            assert summary.reward == 1.0, summary

    await asyncio.gather(*(one(i) for i in range(n)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sandboxes", type=Path, help="sandbox root (default: under the temp dir)")
    parser.add_argument("--profile", help="write cProfiles of the runs here (.inline, .threads)")
    args = parser.parse_args()
    os.environ.update(ROUTES)
    print(f"{args.cells:,} no-op attempts at concurrency {args.concurrency}")
    rates = {}
    for mode, small_tree in (("inline", local.SMALL_TREE), ("threads", -1)):
        local.SMALL_TREE = small_tree
        rates[mode] = measure(mode, args)
    print(f"  inline / threads: {rates['inline'] / rates['threads']:.2f}x the cells/s")
    return 0


def measure(mode: str, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(prefix="rb-bench-runner-") as tmp:
        root = Path(tmp)
        profiler = cProfile.Profile() if args.profile else None
        self0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        if profiler:
            profiler.enable()
        asyncio.run(run(args.cells, args.concurrency, root, args.sandboxes or root / "sandboxes"))
        if profiler:
            profiler.disable()
            profiler.dump_stats(f"{args.profile}.{mode}")
        wall = time.perf_counter() - t
        self1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    n = args.cells

    def ms(a: float, b: float) -> str:
        return f"{1000 * (b - a) / n:.2f}"

    print(f"  {mode:8s} {n / wall:5.0f} cells/s; CPU ms per cell: runner user {ms(self0.ru_utime, self1.ru_utime)} "
          f"system {ms(self0.ru_stime, self1.ru_stime)}, shells user {ms(kids0.ru_utime, kids1.ru_utime)} "
          f"system {ms(kids0.ru_stime, kids1.ru_stime)}")
    return n / wall


if __name__ == "__main__":
    sys.exit(main())
