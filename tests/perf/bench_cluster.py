"""Cells in flight over a local three-node Ray cluster without a shared run-root path (issue 16):
a head and two worker raylets (``cluster/local-multinode.sh``), the workers started with the
directory holding the suite, the tasks and the run root hidden (``--worker-private``: an empty
tmpfs in their own mount namespace), so their attempts get the task through Ray and send their
directories back through Ray. The driver runs in this process (``Driver`` + ``RayPool`` with the
``auto`` artifact route, as ``execute`` builds them).

Each agent is one shell blocked reading a FIFO (``read -r _ < FIFO``: no CPU, one process). A
monitor process scans ``/proc`` for those shells: their number is "running", and each one's
start time (``/proc/PID/stat``) and ``RAY_BENCH_ATTEMPT`` give the scheduling lag of its
attempt: agent start minus the ledger's ``started_at`` (the driver's launch record). When N
are running (or ``--wait`` passes), the FIFO is released and the run drains; every valid row's
files must be in the run root.

    .venv/bin/python tests/perf/bench_cluster.py [--cells 10000] [--runners 2] [--wait 900] [--raw]

``--raw``: Ray's own floor on the same cluster, no ray-bench: as many async actors per node as
runners, each call one shell blocked on the FIFO (``asyncio.create_subprocess_exec``, awaited as
a runner awaits its agent), the calls sent round-robin from the driver.

``--cli``: the driver is ``ray-bench execute --address`` in a process of its own (the plan made
here first), and the time to N running is counted from its start, as an operator types it:
joining the cluster, the node checks and the runners' start are in it.

Reports: time to reach N running, launch rate, driver CPU and peak RSS, lag p50/p99, drain.
Goal: N running at once, every cell valid with its files in the run root. Exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

MARK = "rb-bench-go"


def monitor(fifo: str, out: str, stop: str) -> None:
    """Sample agents (shells reading ``fifo``) every 0.5 s until ``stop`` exists."""
    ticks = os.sysconf("SC_CLK_TCK")
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    seen: dict[int, tuple[str, float]] = {}
    samples: list[tuple[float, int]] = []
    needle = fifo.encode()
    while not Path(stop).exists():
        live = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid in seen:
                live += Path(f"/proc/{pid}").exists()
                continue
            try:
                if needle not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            attempt = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"RAY_BENCH_ATTEMPT=")), "")
            start = boot + int(stat.rsplit(")", 1)[1].split()[19]) / ticks
            seen[pid] = (attempt, start)
            live += 1
        samples.append((time.time(), live))
        Path(out + ".tmp").write_text(json.dumps({"samples": samples[-1:], "agents": len(seen)}))
        os.replace(out + ".tmp", out)
        time.sleep(0.5)
    Path(out).write_text(json.dumps({"samples": samples, "starts": list(seen.values())}))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--runners", type=int, default=2, help="cell runners per node")
    parser.add_argument("--wait", type=float, default=900, help="seconds to wait for N running")
    parser.add_argument("--raw", action="store_true", help="plain Ray actor calls instead of ray-bench")
    parser.add_argument("--cli", action="store_true", help="run `ray-bench execute` as the driver")
    parser.add_argument("--monitor", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--drive", nargs=2, help=argparse.SUPPRESS)  # address, private dir
    args = parser.parse_args()
    if args.monitor:
        monitor(*args.monitor)
        return 0
    if args.drive:
        return drive(args, args.drive[0], Path(args.drive[1]))
    from scale_support import ROUTES
    from support.multinode import running_cluster

    os.environ.update(ROUTES)  # before the cluster starts: its workers resolve the routes
    private = Path(tempfile.mkdtemp(prefix="rb-driver-only-"))
    print(f"{args.cells:,} cells, agents blocked on a FIFO, 3 nodes ({args.runners} runners each), load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    t_cluster = time.monotonic()
    try:
        with running_cluster(workers=2, private=(private,)) as cluster:
            print(f"cluster up in {time.monotonic() - t_cluster:.0f} s at {cluster.address}", flush=True)
            # the driver in a process of its own: Ray reads the cluster's auth settings at start
            return subprocess.run([sys.executable, __file__, "--drive", cluster.address, str(private),
                                   "--cells", str(args.cells), "--runners", str(args.runners),
                                   "--wait", str(args.wait), *(["--raw"] if args.raw else []),
                                   *(["--cli"] if args.cli else [])], env={**os.environ, **cluster.env},
                                  check=False).returncode
    finally:
        shutil.rmtree(private, ignore_errors=True)


def running(mon_out: str) -> int:
    try:
        return int(json.loads(Path(mon_out).read_text())["samples"][-1][1])
    except (OSError, ValueError, IndexError, KeyError):
        return 0


def release(gate: Path, fifo: Path) -> None:
    fd = os.open(fifo, os.O_RDWR)  # blocked readers' opens complete
    (gate / "go.file").write_text("")
    os.replace(gate / "go.file", fifo)  # later opens read a file: EOF at once
    os.close(fd)  # readers see EOF


def drive_raw(args: argparse.Namespace, address: str) -> int:
    """Ray's floor: N actor calls, each starting one blocked shell and awaiting it."""
    import asyncio

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_concurrency=100_000)  # type: ignore[call-overload]
    class Starter:
        async def start(self, agent: str, attempt: str) -> int:
            proc = await asyncio.create_subprocess_exec(
                "sh", "-c", agent, env={**os.environ, "RAY_BENCH_ATTEMPT": attempt})
            return await proc.wait()

        def ping(self) -> bool:
            return True

    gate = Path(tempfile.mkdtemp(prefix=f"{MARK}-"))
    fifo = gate / "go"
    os.mkfifo(fifo)
    agent = f"read -r _ < {fifo} || true"
    mon_out, mon_stop = str(gate / "monitor.json"), str(gate / "stop")
    t_init = time.time()
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    place = Starter.options  # type: ignore[attr-defined]
    actors = [place(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
              for node in nodes for _ in range(args.runners)]
    ray.get([a.ping.remote() for a in actors])
    print(f"raw Ray: {len(actors)} actors on {len(nodes)} nodes up in {time.time() - t_init:.1f} s")
    mon = subprocess.Popen([sys.executable, __file__, "--monitor", str(fifo), mon_out, mon_stop])
    n, reached, peak = args.cells, None, 0
    try:
        cpu0, t0 = cpu_seconds(), time.time()
        refs = [actors[i % len(actors)].start.remote(agent, f"raw-{i}") for i in range(n)]
        sent = time.time() - t0
        while time.time() - t0 < args.wait:
            peak = max(peak, live := running(mon_out))
            if live >= n:
                reached = time.time() - t0
                break
            time.sleep(0.5)
        cpu = cpu_seconds() - cpu0
        print(f"raw Ray: {n:,} calls sent in {sent:.1f} s; running: peak {peak:,} of {n:,}"
              + (f", all after {reached:.1f} s ({n / reached:.0f}/s)" if reached
                 else f"; not all within {args.wait:.0f} s")
              + f"; driver CPU {cpu:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
        release(gate, fifo)
        t_release = time.time()
        ray.get(refs, timeout=1800)
        print(f"raw Ray: drained in {time.time() - t_release:.1f} s")
    finally:
        Path(mon_stop).write_text("")
        mon.wait(timeout=120)
        ray.shutdown()
        shutil.rmtree(gate, ignore_errors=True)
    return 0 if reached else 1


def drive_cli(args: argparse.Namespace, address: str, gate: Path, fifo: Path, run_root: Path, identity: str,
              mon: tuple[str, str], sandboxes: Path) -> int:
    """``ray-bench execute`` as the driver: the time from its start to N running."""
    from ray_bench.ledger import Ledger

    n, (mon_out, mon_stop) = args.cells, mon
    monitor_proc = subprocess.Popen([sys.executable, __file__, "--monitor", str(fifo), mon_out, mon_stop])
    state_root = Path(tempfile.mkdtemp(prefix="rb-bench-state-"))
    exe = Path(sys.executable).parent / "ray-bench"
    t0 = time.time()
    spy = os.environ.get("RB_BENCH_PYSPY")  # a file: py-spy records `execute` into it (raw stacks)
    prefix = [str(exe.parent / "py-spy"), "record", "-r", "50", "-f", "raw", "-o", spy, "--"] if spy else []
    driver = subprocess.Popen([*prefix, str(exe), "execute", "--plan", str(run_root / "launch-plan.json"), "--confirm",
                               identity, "--address", address, "--runners-per-node", str(args.runners),
                               "--no-metrics", "--state-root", str(state_root)],
                              stdout=subprocess.DEVNULL, stderr=(gate / "execute.err").open("wb"))
    reached, peak, code = None, 0, 1
    try:
        while time.time() - t0 < args.wait and driver.poll() is None:
            peak = max(peak, live := running(mon_out))
            if live >= n:
                reached = time.time() - t0
                break
            time.sleep(0.5)
        print(f"execute: running peak {peak:,} of {n:,}" + (f", all {n:,} {reached:.1f} s after `execute` started"
                                                          if reached else f"; not all within {args.wait:.0f} s")
              + f"; load {os.getloadavg()[0]:.1f}", flush=True)
        release(gate, fifo)
        t_release = time.time()
        code = driver.wait(timeout=3600)
        err = (gate / "execute.err").read_bytes()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"execute: exit {code}, drain {time.time() - t_release:.1f} s; its CPU "
              f"{usage.ru_utime + usage.ru_stime:.1f} s, peak RSS {usage.ru_maxrss / 1024:.0f} MiB"
              + (f"; stderr: {err.decode(errors='replace')[-800:]}" if code else ""))
    finally:
        if driver.poll() is None:
            driver.kill()
        Path(mon_stop).write_text("")
        monitor_proc.wait(timeout=120)
    ledger = Ledger.open_readonly(run_root)
    try:
        attempts = ledger.attempts()
    finally:
        ledger.close()
    data = json.loads(Path(mon_out).read_text())
    started = {a.attempt_id: a.started_at for a in attempts}
    lags = [start - started[att] for att, start in data["starts"] if att in started]
    launched = sorted(a.started_at for a in attempts)
    if launched:
        span = launched[min(len(launched), n) - 1] - launched[0]
        print(f"execute: first attempt recorded {launched[0] - t0:.1f} s after its start; {min(len(launched), n):,} "
              f"recorded in {span:.1f} s; lag p50 {statistics.median(lags) if lags else float('nan'):.2f} s, "
              f"p99 {pct(lags, 0.99):.2f} s; valid {sum(a.valid for a in attempts):,} of {len(attempts):,}")
    for tree in (gate, sandboxes, state_root):
        shutil.rmtree(tree, ignore_errors=True)
    return 0 if reached and code == 0 else 1


def drive(args: argparse.Namespace, address: str, private: Path) -> int:
    if args.raw:
        return drive_raw(args, address)

    import ray
    from scale_support import peak_rss_mb, write_suite

    from ray_bench.api import plan_run
    from ray_bench.ledger import Ledger
    from ray_bench.onray.artifact_ship import Shipper
    from ray_bench.onray.gate import actor_gate
    from ray_bench.onray.pool import NAMESPACE, RayPool
    from ray_bench.plan.store import confirm_plan
    from ray_bench.runroot import RunPaths
    from ray_bench.sandboxes.supervisor import HostSupervision
    from ray_bench.scheduler.driver import Driver, RunOptions

    gate = Path(tempfile.mkdtemp(prefix=f"{MARK}-"))
    fifo = gate / "go"
    os.mkfifo(fifo)
    n = args.cells
    agent = f"read -r _ < {fifo} || true"
    mon_out, mon_stop = str(gate / "monitor.json"), str(gate / "stop")
    sandboxes = Path(tempfile.mkdtemp(prefix="rb-bench-sbx-"))
    failures: list[str] = []
    suite, accounts = write_suite(private / "suite", tasks=10, reps=max(1, n // 20), concurrency=n,
                                  agent=agent, local_root=sandboxes, preflight_cells=0)
    for toml in (private / "suite" / "tasks").glob("*/task.toml"):
        toml.write_text(toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = 3600.0"))
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=private / "runs", run_id="inflight")
    plan, identity = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
    print(f"plan: {len(plan.cells):,} cells, effective concurrency {plan.capacity.effective:,}")
    if args.cli:
        return drive_cli(args, address, gate, fifo, planned.run_root, identity, (mon_out, mon_stop), sandboxes)
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
    mon = subprocess.Popen([sys.executable, __file__, "--monitor", str(fifo), mon_out, mon_stop])
    try:
        pool = RayPool(args.runners, artifacts=Shipper(planned.run_root, "auto"))
        driver = Driver(plan, identity, planned.run_root, pool, actor_gate(plan), HostSupervision.of(plan),
                        options=RunOptions(artifacts="auto"))
        import threading

        result: dict[str, object] = {}
        cpu0, t0 = cpu_seconds(), time.time()
        runner = threading.Thread(target=lambda: result.update(outcome=driver.run()), daemon=True)
        runner.start()
        reached = None
        peak = 0
        while time.time() - t0 < args.wait and runner.is_alive():
            try:
                live = json.loads(Path(mon_out).read_text())["samples"][-1][1]
            except (OSError, ValueError, IndexError, KeyError):
                live = 0
            peak = max(peak, live)
            if live >= n:
                reached = time.time() - t0
                break
            time.sleep(1)
        cpu_launch = cpu_seconds() - cpu0
        rss_launch = peak_rss_mb()
        print(f"running: peak {peak:,} of {n:,}" + (f", all {n:,} after {reached:.1f} s" if reached else
                                                    f"; not all within {args.wait:.0f} s"))
        if reached is None:
            failures.append(f"{peak} of {n} running at most")
        t_release = time.time()
        fd = os.open(fifo, os.O_RDWR)  # blocked readers' opens complete
        (gate / "go.file").write_text("")
        os.replace(gate / "go.file", fifo)  # later opens read a file: EOF at once
        os.close(fd)  # readers see EOF
        runner.join(timeout=3600)
        drain = time.time() - t_release
        cpu_all = cpu_seconds() - cpu0
        outcome = result.get("outcome")
        print(f"drain after release {drain:.1f} s; outcome {outcome}")
    finally:
        Path(mon_stop).write_text("")
        mon.wait(timeout=120)
        ray.shutdown()
    with Ledger.reading(planned.run_root) as ledger:
        attempts = ledger.attempts()
        summaries = dict(ledger.summaries())
    data = json.loads(Path(mon_out).read_text())
    started = {a.attempt_id: a.started_at for a in attempts}
    lags = [start - started[att] for att, start in data["starts"] if att in started]
    valid = [a for a in attempts if a.valid]
    missing = [a.attempt_id for a in valid
               if not (RunPaths(planned.run_root).attempt(a) / "result.json").is_file()]
    vias: dict[str, int] = {}
    for s in summaries.values():
        key = s.artifacts.via if s.artifacts else "none"
        vias[key] = vias.get(key, 0) + 1
    first = min(a.started_at for a in attempts)
    launched = sorted(a.started_at for a in attempts)
    launch_span = launched[min(len(launched), n) - 1] - first
    print(f"launch: {min(len(launched), n):,} attempts recorded in {launch_span:.1f} s "
          f"({min(len(launched), n) / max(launch_span, 1e-9):.0f}/s)")
    print(f"scheduling lag (agent start - ledger start): p50 {statistics.median(lags):.2f} s, "
          f"p99 {pct(lags, 0.99):.2f} s, max {max(lags):.2f} s over {len(lags):,} agents")
    print(f"driver CPU: {cpu_launch:.1f} s to reach N running, {cpu_all:.1f} s for the whole run; "
          f"peak RSS {rss_launch:.0f} MiB at N running, {peak_rss_mb():.0f} MiB at the end")
    print(f"valid {len(valid):,} of {len(attempts):,} attempts; artifacts via {vias}; "
          f"files missing for {len(missing)}; load {os.getloadavg()[0]:.1f}")
    if len(valid) != n:
        failures.append(f"{len(valid)} valid of {n}")
    if missing:
        failures.append(f"{len(missing)} valid rows without their files in the run root")
    for tree in (gate, sandboxes):
        shutil.rmtree(tree, ignore_errors=True)
    for failure in failures:
        print(f"MISSED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
