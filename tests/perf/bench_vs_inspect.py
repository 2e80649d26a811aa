"""End to end against Inspect AI (issue 30): 2,000 no-op cells, 16-way, through the whole CLI
(``ray-bench plan`` then ``ray-bench execute``, as a user runs them) against ``inspect eval`` of
the same work on Inspect's local sandbox with its ``mockllm`` model, alternating in one session.

    .venv/bin/python tests/perf/bench_vs_inspect.py [--cells 2000] [--concurrency 16] [--repeat N]
                                                    [--code DIR] [--old DIR] [--json OUT]

Both sides are subprocesses started from this script, timed from spawn to exit:

- ray-bench: ``python -m ray_bench plan`` then ``execute`` of the checkout ``--code`` (default:
  this one; ``PYTHONPATH`` names it, and the Ray workers ``execute`` starts inherit it) on the
  no-op suite of ``scale_support.write_noop_suite`` (bench_throughput's: one task x 2 arms x
  cells/2 repetitions, local backend, agent ``true``, a verifier that writes its reward, two
  accounts of 8). ``execute`` runs with its defaults (metrics exporter on, its linger process
  killed after the run), its own state root. Its wall time is split with the ledger's
  timestamps: start-up (spawn to the first attempt's start: imports, Ray start, lock, ledger,
  actors, the preflight cell's creation), fan-out (first start to last finish), shut-down (last
  finish to exit: drain, audit, Ray shutdown, summary, report). ``--old DIR`` runs a second
  checkout (e.g. a worktree of main) in each round too, alternating with ``--code``.
- Inspect: ``python -m inspect_ai._cli.main eval tests/perf/inspect_noop.py`` (what the
  ``inspect`` script runs), one sample per cell doing the cell's two execs and the reward read,
  ``--model mockllm/model --sandbox local --max-samples C --max-subprocesses C --display none``.
  ``--max-subprocesses``: Inspect's default is the CPU count (2 here), which caps every local
  sandbox's execs at 2 at once whatever ``--max-samples`` says; set to C it runs C samples'
  execs at once, as ray-bench does. Local sandboxes have no ``max_sandboxes`` default. The log
  is written as by default (one ``.eval`` file with the samples, realtime buffering) into the
  temp dir, and read back to check C x samples scored 1.

Bytecode (``--bytecode``): on this machine ``PYTHONDONTWRITEBYTECODE=1`` is set and the venv
holds no ``.pyc`` (uv installs without compiling), so every process, each Ray worker included,
compiles every module it imports from source (8.7 s of ``compile`` in one ``execute`` driver
at load 30, cProfile). An installed package a user runs has its bytecode. ``cached`` (the
default): both sides run with ``PYTHONPYCACHEPREFIX`` in the temp dir and without
``PYTHONDONTWRITEBYTECODE``, after a warm-up of each side on a few cells that fills that cache
(nothing is written into the venv); ``env``: the environment as it is.

The last line, ``ray-bench N cells: X s (plan A s, execute B s); inspect: Y s; ratio Y/X = R``,
gives the medians over the rounds (R: the median of the rounds' ratios). Exit 1 if R < 3.5 (the
issue's goal). Everything is written below one temp dir; processes left behind there (a metrics
linger) are killed by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_support import ROUTES, write_noop_suite

REPO = Path(__file__).resolve().parents[2]
TASK_FILE = Path(__file__).resolve().parent / "inspect_noop.py"
GOAL_RATIO = 3.5
WARM_UP_CELLS = 20


@dataclass(frozen=True)
class Workload:
    suite: Path
    accounts: Path
    inspect_task: Path
    cells: int
    concurrency: int


@dataclass(frozen=True)
class RayBenchRun:
    code: str
    cli_start: float  # `python -m ray_bench --version`: the CLI's import floor
    plan: float
    execute: float
    startup: float
    fanout: float
    shutdown: float
    valid: int

    @property
    def total(self) -> float:
        return self.plan + self.execute


@dataclass(frozen=True)
class InspectRun:
    total: float
    samples: int
    scored_one: int


def build(root: Path, cells: int, concurrency: int) -> Workload:
    """Both workloads below ``root``: the no-op suite and its accounts, and the Inspect task."""
    suite, accounts = write_noop_suite(root / "suite", cells=cells, concurrency=concurrency,
                                       local_root=root / "sbx")
    task = root / "inspect" / TASK_FILE.name
    task.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(TASK_FILE, task)
    return Workload(suite, accounts, task, cells, concurrency)


def phases(spawned: float, exited: float, starts: list[float], finishes: list[float]) -> tuple[float, float, float]:
    """(start-up, fan-out, shut-down) seconds of one execute from its attempts' epoch times."""
    first, last = min(starts), max(finishes)
    return first - spawned, last - first, exited - last


#: Set by ``--bytecode cached``: the environment both sides run with, besides their own variables.
BASE_ENV: dict[str, str] = dict(os.environ)


def cached_bytecode(cache: Path) -> None:
    """Both sides' processes (and the Ray workers they start) read and write bytecode in ``cache``."""
    BASE_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    BASE_ENV["PYTHONPYCACHEPREFIX"] = str(cache)


def _env(code: Path, root: Path) -> dict[str, str]:
    env = dict(BASE_ENV, **ROUTES)
    env["PYTHONPATH"] = str(code)
    env["RAY_BENCH_STATE_ROOT"] = str(root / "state")
    return env


def _run(cmd: list[str], *, env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(epoch at spawn, epoch at exit, stdout); raises with the output when it fails."""
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    t1 = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return t0, t1, proc.stdout


def kill_left_behind(root: Path) -> list[int]:
    """Kill the processes whose command line names ``root`` (a metrics linger); their pids."""
    found = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True, check=False).stdout.split()
    pids = [int(p) for p in found if int(p) != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return pids


def run_raybench(code: Path, wl: Workload, root: Path) -> RayBenchRun:
    root.mkdir(parents=True)
    env = _env(code, root)
    py = [sys.executable, "-m", "ray_bench"]
    v0, v1, _ = _run([*py, "--version"], env=env, cwd=root)
    p0, p1, out = _run([*py, "plan", "--suite", str(wl.suite), "--accounts", str(wl.accounts),
                        "--run-id", "vs-inspect", "--runs-dir", str(root / "runs")], env=env, cwd=root)
    identity = next(w for w in out.split() if w.startswith("sha256:"))
    run_root = root / "runs" / "vs-inspect"
    e0, e1, _ = _run([*py, "execute", "--plan", str(run_root / "launch-plan.json"), "--confirm", identity],
                     env=env, cwd=root)
    kill_left_behind(root)
    starts, finishes, valid = _attempt_times(run_root)
    startup, fanout, shutdown = phases(e0, e1, starts, finishes)
    return RayBenchRun(str(code), v1 - v0, p1 - p0, e1 - e0, startup, fanout, shutdown, valid)


def _attempt_times(run_root: Path) -> tuple[list[float], list[float], int]:
    from ray_bench.ledger import Ledger  # this process's checkout: the ledger's format is shared

    with Ledger.reading(run_root) as ledger:
        attempts = ledger.attempts()
    return ([a.started_at for a in attempts], [a.finished_at or a.started_at for a in attempts],
            sum(1 for a in attempts if a.valid))


def run_inspect(wl: Workload, root: Path) -> InspectRun:
    root.mkdir(parents=True)
    c = str(wl.concurrency)
    cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval", wl.inspect_task.name,
           "-T", f"samples={wl.cells}", "--model", "mockllm/model", "--sandbox", "local",
           "--max-samples", c, "--max-subprocesses", c, "--display", "none", "--log-dir", str(root / "logs")]
    env = dict(BASE_ENV, INSPECT_LOG_DIR=str(root / "logs"))
    t0, t1, _ = _run(cmd, env=env, cwd=wl.inspect_task.parent)  # it takes a task path relative to its cwd
    samples, ones = _inspect_results(root / "logs")
    return InspectRun(t1 - t0, samples, ones)


def _inspect_results(log_dir: Path) -> tuple[int, int]:
    """(samples in the log, samples scored 1) of the one log in ``log_dir``."""
    from inspect_ai.log import read_eval_log

    (path,) = log_dir.glob("*.eval")
    log = read_eval_log(str(path))
    samples = log.samples or []
    ones = sum(1 for s in samples if s.scores and next(iter(s.scores.values())).value == 1.0)
    return len(samples), ones


def print_raybench(run: RayBenchRun, label: str) -> None:
    print(f"  ray-bench {label}: {run.total:.1f} s = plan {run.plan:.1f} + execute {run.execute:.1f} "
          f"(start-up {run.startup:.1f}, fan-out {run.fanout:.1f} = {run.valid / run.fanout:.1f} cells/s, "
          f"shut-down {run.shutdown:.1f}); CLI --version {run.cli_start:.1f} s; {run.valid} valid")


def one_round(root: Path, wl: Workload, codes: list[tuple[str, Path]],
              index: int) -> tuple[dict[str, RayBenchRun], InspectRun]:
    order = codes if index % 2 == 0 else codes[::-1]
    runs: dict[str, RayBenchRun] = {}
    inspect_first = index % 2 == 1
    inspect = run_inspect(wl, root / "inspect") if inspect_first else None
    for label, code in order:
        runs[label] = run_raybench(code, wl, root / label)
    if inspect is None:
        inspect = run_inspect(wl, root / "inspect")
    print(f"round {index + 1} (load average {os.getloadavg()[0]:.1f})")
    for label, _ in codes:
        print_raybench(runs[label], label)
    print(f"  inspect: {inspect.total:.1f} s = {inspect.samples / inspect.total:.1f} samples/s; "
          f"{inspect.samples} samples, {inspect.scored_one} scored 1")
    for label, _ in codes:
        print(f"  ratio inspect / ray-bench {label}: {inspect.total / runs[label].total:.2f}")
    return runs, inspect


def warm_up(tmp: Path, codes: list[tuple[str, Path]], concurrency: int) -> None:
    """Fill the bytecode cache: each side once on a few cells (not timed)."""
    cached_bytecode(tmp / "pycache")
    small = build(tmp / "warm-work", WARM_UP_CELLS, concurrency)
    for label, code in codes:
        run_raybench(code, small, tmp / "warm" / label)
    run_inspect(small, tmp / "warm" / "inspect")
    print(f"bytecode cache warmed ({WARM_UP_CELLS} cells each side, {tmp / 'pycache'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the last line gives the medians")
    parser.add_argument("--code", type=Path, default=REPO, help="the ray-bench checkout under test")
    parser.add_argument("--old", type=Path, help="another checkout run in each round too (the 'before')")
    parser.add_argument("--json", type=Path, help="write every round's figures here")
    parser.add_argument("--bytecode", choices=["cached", "env"], default="cached",
                        help="cached: a bytecode cache in the temp dir, warmed first; env: as the environment has it")
    args = parser.parse_args()
    codes = [("new", args.code.resolve())] + ([("old", args.old.resolve())] if args.old else [])
    print(f"{args.cells:,} no-op cells / samples at concurrency {args.concurrency}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; " + ", ".join(f"{k} = {v}" for k, v in codes))
    rounds: list[tuple[dict[str, RayBenchRun], InspectRun]] = []
    with tempfile.TemporaryDirectory(prefix="rb-vs-inspect-") as tmp:
        try:
            wl = build(Path(tmp) / "work", args.cells, args.concurrency)
            if args.bytecode == "cached":
                warm_up(Path(tmp), codes, args.concurrency)
            for i in range(args.repeat):
                rounds.append(one_round(Path(tmp) / f"round-{i}", wl, codes, i))
        finally:
            kill_left_behind(Path(tmp))
    if args.json:
        args.json.write_text(json.dumps([{"ray_bench": {k: asdict(v) for k, v in r.items()}, "inspect": asdict(ins)}
                                         for r, ins in rounds], indent=2))
    med = statistics.median
    ins_total = med(ins.total for _, ins in rounds)
    ratio = 0.0
    for label, _ in reversed(codes):
        runs = [r[label] for r, _ in rounds]
        ratio = med(ins.total / r[label].total for r, ins in rounds)
        print(f"ray-bench {'' if label == 'new' else '(old) '}{args.cells} cells: {med(r.total for r in runs):.1f} s "
              f"(plan {med(r.plan for r in runs):.1f} s, execute {med(r.execute for r in runs):.1f} s); "
              f"inspect: {ins_total:.1f} s; ratio Y/X = {ratio:.2f}")
    if ratio < GOAL_RATIO:
        print(f"MISSED: ratio {ratio:.2f} < {GOAL_RATIO}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
