"""The local backend's drain: N sandboxes, each with a process alive, cleaned up as their cells end
(issue 57's drain figure; no goal of its own).

Each sandbox gets a ``sleep`` in a session of its own with the sandbox's mark in its environment,
as ``LocalSandbox._run`` starts a command (``start_new_session``, the environment of
``_env_of``); every ``--escape-every``-th sandbox also gets a second one in a session of its own
(a ``setsid`` escapee: the group kill does not reach it, the mark does). Then every sandbox's
``LocalSandbox._kill_processes`` runs on one asyncio loop, as a runner's cells end: all at once
(``--rate 0``) or ``--rate`` per second; its pid window is made untrusted (the sandboxes of a
drain at scale are older than ``PID_WINDOW_SEC``) unless ``--young``. Prints the drain's wall time
and this process's CPU (user + system: the ``/proc`` reads are system time), and checks that no
sleep survived.

Drives ``_kill_processes`` only, so the same script measures any tree of the backend:

    PYTHONPATH=$PWD .venv/bin/python tests/perf/bench_drain.py --n 1000 5000
    PYTHONPATH=/old/tree .venv/bin/python tests/perf/bench_drain.py --n 1000 --sample 200

``--sample K`` drains only K sandboxes of the N (the other processes stay alive while it does:
each scan still meets them) and extrapolates the whole drain from it, taking a scan's cost as
proportional to the processes alive (n + (n - 1) + ... + 1 against the sample's share); for the
quadratic tree, where a whole drain of 5,000 would take minutes of both cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from ray_bench.sandboxes import local_procs
from ray_bench.sandboxes.base import SandboxSpec
from ray_bench.sandboxes.local import LocalSandbox
from ray_bench.sandboxes.local_procs import MARK, Window

#: The passes over /proc (``census`` in a tree that shares them, ``scan`` in one that does not).
PASSES = [0]
#: The processes those passes read, and the CPU they took.
READ: list[float] = [0, 0.0]


def count_passes() -> None:
    name = "census" if hasattr(local_procs, "census") else "scan"
    real = getattr(local_procs, name)

    def counted(*args: Any) -> Any:
        PASSES[0] += 1
        began = time.thread_time()
        try:
            return real(*args)
        finally:
            READ[0] += len(args[-1]) if isinstance(args[-1], list) else 0
            READ[1] += time.thread_time() - began

    setattr(local_procs, name, counted)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reaper(stop: threading.Event) -> None:
    """Reap the sleeps as they die (a runner's child watcher does; zombies would be read again)."""
    while not stop.is_set():
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.01)


def spawn(root: Path, mark: str) -> int:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "TMPDIR": str(root),
           MARK: mark}
    return subprocess.Popen(["sleep", "100000"], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


async def drain(sandboxes: list[LocalSandbox], rate: float) -> None:
    tasks = []
    tick = 0.01
    per_tick = max(1, round(rate * tick)) if rate > 0 else len(sandboxes)
    for start in range(0, len(sandboxes), per_tick):
        tasks += [asyncio.ensure_future(s._kill_processes()) for s in sandboxes[start : start + per_tick]]
        if rate > 0:
            await asyncio.sleep(tick)
    await asyncio.gather(*tasks)


def one(n: int, sample: int, escape_every: int, rate: float, young: bool, root: Path) -> None:
    window = local_procs.window_now()
    if window is not None and not young:
        window = Window(window.after, window.made - local_procs.PID_WINDOW_SEC - 1)
    sandboxes: list[LocalSandbox] = []
    owned: list[list[int]] = []  # each sandbox's sleeps
    t0 = time.monotonic()
    for i in range(n):
        sbx = LocalSandbox(root / f"s{i}", SandboxSpec(labels={}))
        sbx.id = f"drain-{os.getpid()}-{i}"
        sbx._window = window
        sbx._ran = True
        leader = spawn(root, sbx.id)
        sbx._groups.append(leader)  # what _run records: the group it started
        owned.append([leader])
        if escape_every and i % escape_every == 0:
            owned[-1].append(spawn(root, sbx.id))  # a session of its own: only the mark reaches it
        sandboxes.append(sbx)
    pids = [p for mine in owned for p in mine]
    on_host = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(f"n={n}: {len(pids)} sleeps started in {time.monotonic() - t0:.1f} s; {on_host} processes on "
          f"the host; load {os.getloadavg()[0]:.1f}", flush=True)
    drained = sandboxes[:sample] if sample else sandboxes
    PASSES[0] = 0
    READ[:] = [0, 0.0]
    c0, w0 = cpu(), time.monotonic()
    asyncio.run(drain(drained, rate))
    wall, used = time.monotonic() - w0, cpu() - c0
    k = len(drained)
    # A scan's cost goes with the processes alive; the sample drained the first k while n were
    # there, the whole drain meets n, n - 1, ... 1 of them.
    scale = (n * (n + 1) / 2) / (k * n - k * (k - 1) / 2) if k < n else 1.0
    left = [p for mine in owned[: len(drained)] for p in mine if alive(p)]
    print(f"  drained {len(drained)} of {n} ({'all at once' if rate <= 0 else f'{rate:g}/s'}, "
          f"{'young' if young else 'untrusted'} windows): wall {wall:.2f} s, CPU {used:.2f} s"
          + (f"; x{scale:g} for all {n}: wall ~{wall * scale:.0f} s, CPU ~{used * scale:.0f} s" if scale > 1 else "")
          + f"; /proc passes {PASSES[0]} reading {READ[0]:.0f} processes in {READ[1]:.2f} s of CPU; "
          f"survivors {len(left)}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for pid in pids:  # the rest (a sample's untouched sandboxes)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--sample", type=int, default=0, help="drain only this many of the N (0: all)")
    parser.add_argument("--escape-every", type=int, default=10)
    parser.add_argument("--rate", type=float, default=0.0, help="cleanups started per second (0: all at once)")
    parser.add_argument("--gap", type=float, help="local_procs.PASS_GAP (a tree that paces its passes)")
    parser.add_argument("--young", action="store_true", help="keep the pid windows trusted")
    args = parser.parse_args()
    count_passes()
    if args.gap is not None:
        local_procs.PASS_GAP = args.gap  # type: ignore[attr-defined, unused-ignore]
    print(f"backend: {local_procs.__file__}", flush=True)
    stop = threading.Event()
    threading.Thread(target=reaper, args=(stop,), daemon=True).start()
    root = Path(f"/tmp/bench-drain-{os.getpid()}")
    for n in args.n:
        one(n, args.sample, args.escape_every, args.rate, args.young, root)
    stop.set()


if __name__ == "__main__":
    main()
