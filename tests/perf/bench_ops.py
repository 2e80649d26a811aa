"""Recovery and operations, measured as an operator meets them (issue 29, "Measure"): five
scenarios, one at a time, each printing its figures and the property it checks.

    shared     two ``execute``s, each with its own local Ray, one state root, shared accounts:
               peak concurrency per account against ``max_concurrent`` (leases sampled every
               50 ms and both ledgers' intervals), starts against a cell-count window, and the
               time an account sat below its limit while cells waited (finish -> next start)
    circuit    a circuit opened by a missing agent binary, reopened with ``--hypothesis``: the
               attempts spent before the scope closed again (failing probe) or reopened and
               the run finished (valid probe); the driver in this process, no Ray
    artifacts  a local 3-node cluster whose workers cannot see the ``--artifacts`` path:
               refused with exit 2, one line, before any start
    idle-node  the same cluster, an idle worker's raylet SIGKILLed mid-run: exit code, rows,
               the end-of-run audit and ``ray-bench audit`` afterwards
    timeline   a real Prometheus (the shipped ``ops/prometheus`` config and rules) scraping a
               run whose driver is SIGKILLed, then resumed to its finish: at each change what
               ``status`` says (state, finish estimate, next:) and which alerts are pending or
               firing

    PYTHONPATH=$PWD .venv/bin/python tests/perf/bench_ops.py shared artifacts idle-node circuit timeline

Exit status 1 when a property fails (a limit exceeded, artifacts lost, a wrong exit code, an
alert that should fire and does not or the other way round, an estimate for a run that is
not running).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from support.driver_process import DriverProcess, cli_env, ledger_query, run_cli, wait_for  # noqa: E402
from support.suites import make_suite  # noqa: E402

from ray_bench.api import plan_run  # noqa: E402
from ray_bench.ledger import Ledger  # noqa: E402

Failures = list[str]


def _solve_arms(command: str) -> list[dict[str, Any]]:
    arm = {"command": command, "agent_dir": "agents", "expose_solution": True}
    return [{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}]


def _local(base: Path, pool: int) -> dict[str, Any]:
    return {"local": {"max_sandboxes": pool, "options": {"root": str(base / "sbx")}}}


def _events(root: Path, kind: str) -> list[dict[str, Any]]:
    with Ledger.reading(root) as ledger:
        return [dict(e.data) for e in ledger.events(kind)]


def _attempts(root: Path) -> list[Any]:
    with Ledger.reading(root) as ledger:
        return list(ledger.attempts())


# -- 1. two runs, two Rays, one state root --------------------------------------------------------

def shared(base: Path, sleep: float) -> Failures:
    from support.shared_limits import idle_gaps, intervals, peak, sample_leases

    slots, window, window_cells = "shared-slots", "shared-window", 6
    limit = {slots: 2, window: 3}
    tasks = ["hello-world", "sum-list", "fizzbuzz"]
    state = base / "state"
    accounts = [
        {"name": slots, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}},
        {"name": window, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_B"}},
         "limits": {"max_concurrent": 3, "window": {"hours": 5, "max_cells": window_cells}}},
    ]
    go = base / "go"  # the agents wait until both drivers run: they compete for every slot
    command = f'while [ ! -e {go} ]; do sleep 0.2; done; sleep {sleep:g}; sh "$SOLUTION_DIR/solve.sh"'
    drivers: dict[str, DriverProcess] = {}
    roots: dict[str, Path] = {}
    for name in ("one", "two"):
        suite, accounts_file = make_suite(base / name, tasks=tasks, reps=2, preflight_cells=0, accounts=accounts,
                                          backends=_local(base, 8), arms=_solve_arms(command))
        planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=base / "runs", run_id=f"shared-{name}")
        roots[name] = planned.run_root
        drivers[name] = DriverProcess(planned.run_root / "launch-plan.json", planned.identity, base / "logs",
                                      name=name, env=cli_env({"RAY_BENCH_STATE_ROOT": str(state)}),
                                      extra_args=("--no-metrics",))
    cells = len(tasks) * 2 * 2
    print(f"shared: 2 runs x {cells} cells (agents sleep {sleep:g} s), limits {limit}, window {window_cells} cells")
    samples: list[dict[str, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_leases, args=(state, stop, samples))
    sampler.start()
    t0 = time.monotonic()
    try:
        for name, driver in drivers.items():  # one after the other: two local Ray starts at once hung
            driver.start()
            wait_for(lambda r=roots[name]: bool(ledger_query(r, "SELECT seq FROM events WHERE kind = 'run_started'")),
                     1200, "run_started", interval=0.5, alive=driver)
        print(f"  both drivers running after {time.monotonic() - t0:.0f} s")
        go.touch()
        t_go = time.monotonic()
        codes = {name: driver.wait(timeout=900) for name, driver in drivers.items()}
        span = time.monotonic() - t_go
    finally:
        stop.set()
        sampler.join()
        for driver in drivers.values():
            driver.reap()
    runs = {name: intervals(root) for name, root in roots.items()}
    lease_peak = {a: max((s.get(a, 0) for s in samples), default=0) for a in limit}
    ledger_peak = {a: peak([(s, f) for rows in runs.values() for acct, s, f in rows if acct == a]) for a in limit}
    window_starts = {n: sum(1 for a, _, _ in rows if a == window) for n, rows in runs.items()}
    per_run = {a: {n: sum(1 for acct, _, _ in rows if acct == a) for n, rows in runs.items()} for a in limit}
    print(f"  exit codes {codes}; rows {sum(len(r) for r in runs.values())} of {2 * cells}; "
          f"{span:.0f} s from release to both finished")
    for account, most in limit.items():
        print(f"  {account}: peak {ledger_peak[account]} in the ledgers, {lease_peak[account]} in the leases "
              f"(max_concurrent {most}); starts per run {per_run[account]}")
    print(f"  {window}: {sum(window_starts.values())} starts in the window (max_cells {window_cells}), "
          f"per run {window_starts}")
    failures: Failures = []
    for account, most in limit.items():
        gaps, crossed = idle_gaps(runs, account, most)
        print(f"  {account} idle below its limit with cells waiting: {len(gaps)} gaps, "
              f"median {sorted(gaps)[len(gaps) // 2] if gaps else 0:.2f} s, max {max(gaps, default=0):.2f} s, "
              f"sum {sum(gaps):.1f} s; handed to the other run {len(crossed)} times, "
              f"max {max(crossed, default=0):.2f} s")
        if gaps and max(gaps) >= 30:  # a lease's TTL: a slot waiting for an expiry
            failures.append(f"{account} idle {max(gaps):.1f} s with cells waiting")
        if max(lease_peak[account], ledger_peak[account]) > most:
            failures.append(f"{account} ran {max(lease_peak[account], ledger_peak[account])} at once, "
                            f"limit {most}")
    print(f"  lease samples: {len(samples)}")
    if codes != {"one": 0, "two": 0}:
        failures.append(f"exit codes {codes}")
    if sum(window_starts.values()) > window_cells:
        failures.append(f"{sum(window_starts.values())} starts in a {window_cells}-cell window")
    return failures


# -- 2. a circuit reopen -----------------------------------------------------------------------

def circuit(base: Path) -> Failures:
    from support.runs import execute_here, ledger_rows, plan_and_run_here

    from ray_bench.scheduler.driver import RunOptions
    from ray_bench.status.read import read_status

    failures: Failures = []
    for case in ("failing", "valid"):
        fixed = base / case / "fixed"  # outside the plan's inputs: the fix is no drift
        command = f"test -f {fixed} || no-such-agent-binary --run"
        suite, accounts = make_suite(base / case / "s", tasks=["hello-world", "sum-list"], reps=2,
                                     backends=_local(base / case, 1), preflight_cells=0, max_attempts=4,
                                     arms=[{"name": "baseline", "role": "baseline", "command": command},
                                           {"name": "mcp", "role": "variant", "command": command}])
        first, root = plan_and_run_here(suite, accounts, base / case / "runs")
        opened = len(ledger_rows(root)[0])
        said = read_status(root)
        print(f"circuit, {case} probe: status once open: {said.state}, next: {said.next_action or '-'}"
              f"{' (' + said.next_action_why + ')' if said.next_action_why else ''}")
        if case == "valid":
            fixed.write_text("")
        identity = Ledger.open_readonly(root).meta()["plan_identity"]
        bare = execute_here(root, identity)
        after_bare = len(ledger_rows(root)[0])
        reopened = execute_here(root, identity, RunOptions(hypothesis="installed the agent binary"))
        attempts = ledger_rows(root)[0]
        probes = _events(root, "circuit_probe")
        reopen = _events(root, "circuit_reopened")
        closed = _events(root, "circuit_open")
        probe_ids = {p["attempt_id"] for p in probes}
        probe_rows = [a for a in attempts if a.attempt_id in probe_ids]
        overlapped = [a for a in attempts for p in probe_rows
                      if a.attempt_id != p.attempt_id and p.started_at <= a.started_at < (p.finished_at or 1e18)]
        print(f"circuit, {case} probe: opened after {opened} attempts (stopped {first.stopped}); a resume without "
              f"a hypothesis ran {after_bare - opened} (stopped {bare.stopped}); with the hypothesis: "
              f"{len(attempts) - after_bare} attempts, {len(probes)} probe(s), "
              f"{'reopened via ' + reopen[0]['via'] if reopen else 'closed again'} "
              f"(stopped {reopened.stopped}, exit {reopened.exit_code}, valid {reopened.counts.get('valid', 0)}); "
              f"attempts started during the probe: {len(overlapped)}; circuit_open events {len(closed)}")
        if after_bare != opened:
            failures.append(f"{case}: a resume without a hypothesis ran {after_bare - opened} attempts")
        if len(probes) != 1 or overlapped:
            failures.append(f"{case}: {len(probes)} probes, {len(overlapped)} attempts beside the probe")
        if case == "failing" and (len(attempts) - after_bare != 1 or reopen or reopened.stopped != "circuit"):
            failures.append(f"failing probe: {len(attempts) - after_bare} attempts, reopened {bool(reopen)}")
        if case == "valid" and (not reopen or reopened.exit_code != 0 or reopened.counts.get("valid") != 8):
            failures.append(f"valid probe: reopened {bool(reopen)}, exit {reopened.exit_code}")
    return failures


# -- 3 and 4. a local three-node cluster --------------------------------------------------------

def cluster(base: Path, scenarios: list[str]) -> Failures:
    from support.multinode import running_cluster

    private = Path(tempfile.mkdtemp(prefix="rb-driver-only-"))  # the workers see an empty tmpfs here
    failures: Failures = []
    t0 = time.monotonic()
    try:
        with running_cluster(workers=2, private=(private,)) as multinode:
            print(f"cluster: 3 nodes up in {time.monotonic() - t0:.0f} s at {multinode.address}")
            if "artifacts" in scenarios:
                failures += unshared_artifacts(multinode, private)
            if "idle-node" in scenarios:
                failures += idle_node(multinode, base / "idle")
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return failures


def unshared_artifacts(multinode: Any, private: Path) -> Failures:
    base = private / "unshared"
    suite, accounts = make_suite(base / "s", tasks=["hello-world"], backends=_local(base, 2))
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=base / "runs", run_id="unshared")
    t0 = time.monotonic()
    done = run_cli("execute", "--plan", str(planned.run_root / "launch-plan.json"), "--confirm",
                   planned.identity, "--address", multinode.address, "--artifacts", str(private / "store"),
                   "--no-metrics", "--quiet",
                   env=cli_env({**multinode.env, "RAY_BENCH_STATE_ROOT": str(base / "st")}), timeout=600)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    started = (planned.run_root / "ledger.sqlite").exists() and bool(_attempts(planned.run_root))
    print(f"artifacts: --artifacts {private / 'store'} (hidden from the workers): exit {done.returncode} in "
          f"{time.monotonic() - t0:.0f} s, {len(lines)} error line(s), attempts started: {started}")
    for line in lines:
        print(f"  {line}")
    failures: Failures = []
    if done.returncode != 2 or len(lines) != 1 or started or "Traceback" in done.stderr:
        failures.append(f"unshared artifacts: exit {done.returncode}, {len(lines)} lines, started {started}")
    return failures


def idle_node(multinode: Any, base: Path) -> Failures:
    nodes = [n for n in multinode.nodes() if n["Alive"]]
    # attempts go to the least loaded runner, the first listed on ties: a later worker holds none
    victim = next(n for n in nodes[1:] if "docker" in str(n["Resources"]))
    release = base / "release"
    command = f'until [ -e {release} ]; do sleep 0.05; done; sleep 2; sh "$SOLUTION_DIR/solve.sh"'
    suite, accounts = make_suite(base / "s", tasks=["hello-world", "sum-list"], reps=2, max_attempts=2,
                                 preflight_cells=1, backends=_local(base, 2), arms=_solve_arms(command))
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=base / "runs", run_id="idle-loss")
    root = planned.run_root
    driver = DriverProcess(root / "launch-plan.json", planned.identity, base / "logs",
                           env=cli_env(multinode.env), extra_args=("--address", multinode.address))
    t0 = time.monotonic()
    try:
        driver.start()
        wait_for(lambda: bool(ledger_query(root, "SELECT 1 FROM attempts")), 600, "a first attempt", alive=driver)
        multinode.kill_raylet(victim)
        t_kill = time.monotonic()
        wait_for(lambda: not any(n["NodeID"] == victim["NodeID"] and n["Alive"] for n in multinode.nodes()),
                 600, "Ray to list the victim as dead", interval=0.5, alive=driver)
        print(f"idle-node: raylet of {str(victim['NodeID'])[:12]} killed {t_kill - t0:.0f} s into the run; "
              f"listed dead {time.monotonic() - t_kill:.0f} s later")
        release.touch()
        rc = driver.wait(timeout=900)
    finally:
        driver.reap()
    attempts = _attempts(root)
    audits, lost, stops = _events(root, "audit"), _events(root, "node_lost"), _events(root, "stop")
    audit = run_cli("audit", str(root), env=cli_env())
    stdout_ray = [x for x in driver.stdout.splitlines() if "raylet" in x.lower() or "(raylet)" in x]
    print(f"  exit {rc}; {sum(a.valid for a in attempts)} valid of {len(attempts)} attempts (8 cells); "
          f"end-of-run audit {audits}; node events {lost}; stops {stops}")
    said = (audit.stdout.strip() or audit.stderr.strip())[-300:]
    print(f"  `ray-bench audit` after: exit {audit.returncode}: {said}")
    print(f"  Ray raylet lines in execute's stdout: {len(stdout_ray)}")
    failures: Failures = []
    if rc != 0 or len([a for a in attempts if a.valid]) != 8:
        failures.append(f"idle node: exit {rc}, {sum(a.valid for a in attempts)} valid")
    if any(a.get("residue") for a in audits) or stops:
        failures.append(f"idle node: audit {audits}, stops {stops}")
    if stdout_ray:
        failures.append(f"idle node: {len(stdout_ray)} raylet lines in execute's stdout")
    return failures


# -- 5. status and alerts across a SIGKILL, a resume and a finish ------------------------------------

def timeline(base: Path, sleep: float) -> Failures:
    from support.prometheus import running_prometheus

    from ray_bench.status.read import read_status

    failures: Failures = []
    command = f'sleep {sleep:g}; sh "$SOLUTION_DIR/solve.sh"'
    with running_prometheus(base / "prom") as prom:
        # 16 cells: the driver is killed after 6 valid rows, past the 5 a pace estimate needs
        suite, accounts = make_suite(base / "s", tasks=["hello-world", "sum-list"], reps=4, preflight_cells=0,
                                     backends=_local(base, 2), arms=_solve_arms(command))
        planned = plan_run(suite=suite, accounts=accounts, runs_dir=base / "runs", run_id="timeline")
        root = planned.run_root
        # no linger (the bench would wait 15 min), but the operator's final scrape: Prometheus
        # reads the finished gauge before the target goes
        env = cli_env({"RAY_BENCH_STATE_ROOT": str(prom.state_root), "RAY_BENCH_METRICS_FINAL_SCRAPE": "30s"})
        t0 = time.monotonic()
        last: list[str] = [""]
        seen: list[tuple[float, str, dict[str, Any], dict[str, str]]] = []

        def look(phase: str) -> tuple[dict[str, Any], dict[str, str]]:
            status = read_status(root).to_json() if (root / "ledger.sqlite").exists() else {}
            pace = status.get("pace") or {}
            try:
                alerts = {a["labels"]["alertname"]: a["state"] for a in prom.alerts()
                          if a["labels"].get("run") in (None, "timeline")}
            except AssertionError:
                alerts = {"<prometheus error>": "?"}
            view = {"state": status.get("state"), "estimate": pace.get("finish_estimate_sec"),
                    "next": status.get("next_action"), "rows": (status.get("counts") or {}).get("valid")}
            line = f"{view['state']} rows={view['rows']} est={view['estimate']} next={view['next']!r} alerts={alerts}"
            if line != last[0]:
                at = time.monotonic() - t0
                print(f"  {at:6.0f} s [{phase}] status {view['state']}, valid {view['rows']}, estimate "
                      f"{view['estimate']}, next: {view['next'] or '-'}; alerts "
                      f"{', '.join(f'{k} {v}' for k, v in sorted(alerts.items())) or 'none'}", flush=True)
                last[0] = line
                seen.append((at, phase, view, alerts))
            return view, alerts

        def watch(phase: str, until: Callable[[dict[str, Any], dict[str, str]], bool], timeout: float) -> bool:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if until(*look(phase)):
                    return True
                time.sleep(2)
            return False

        print(f"timeline: 16 cells (agents sleep {sleep:g} s, 2 at a time), Prometheus at {prom.url}, "
              "1 s scrapes and rule evaluation")
        first = DriverProcess(root / "launch-plan.json", planned.identity, base / "logs", name="first", env=env)
        second = DriverProcess(root / "launch-plan.json", planned.identity, base / "logs", name="resume", env=env)
        try:
            first.start()
            watch("running", lambda v, a: (v["rows"] or 0) >= 6, 900)
            first.kill()
            print(f"  {time.monotonic() - t0:6.0f} s driver SIGKILLed", flush=True)
            t_kill = time.monotonic()
            fired = watch("killed", lambda v, a: a.get("RayBenchDriverDown") == "firing", 300)
            print(f"  DriverDown firing {time.monotonic() - t_kill:.0f} s after the kill" if fired
                  else "  DriverDown did not fire within 300 s")
            if not fired:
                failures.append("RayBenchDriverDown did not fire after the SIGKILL")
            dead = [v for _, phase, v, _ in seen if phase == "killed"]
            if any(v["estimate"] is not None for v in dead[1:]) or any(v["state"] == "running" for v in dead[1:]):
                failures.append(f"a killed run still read as running or with an estimate: {dead}")
            second.start()
            print(f"  {time.monotonic() - t0:6.0f} s resumed", flush=True)
            watch("resumed", lambda v, a: second.proc is not None and second.proc.poll() is not None, 900)
            rc = second.wait(timeout=60)
            print(f"  {time.monotonic() - t0:6.0f} s resume exited {rc}", flush=True)
            t_end = time.monotonic()
            watch("finished", lambda v, a: time.monotonic() - t_end > 150, 160)
        finally:
            first.reap()
            second.reap()
        final_view, final_alerts = look("finished")
        if rc != 0 or final_view["state"] != "finished" or final_view["rows"] != 16:
            failures.append(f"resume: exit {rc}, state {final_view['state']}, valid {final_view['rows']}")
        if final_view["estimate"] is not None or final_view["next"]:
            failures.append(f"a finished run reads estimate {final_view['estimate']}, next {final_view['next']!r}")
        if final_alerts.get("RayBenchDriverDown"):
            failures.append(f"DriverDown {final_alerts['RayBenchDriverDown']} after the finish")
        json.dump([{"at": round(at, 1), "phase": p, **v, "alerts": a} for at, p, v, a in seen],
                  (base / "timeline.json").open("w"), indent=1)
    return failures


SCENARIOS = ("shared", "circuit", "artifacts", "idle-node", "timeline")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--sleep", type=float, default=5, help="each agent's sleep, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    os.environ.setdefault("RAY_BENCH_METRICS_LINGER", "0")
    base = Path(tempfile.mkdtemp(prefix="rb-bench-ops-"))
    # `ray-bench` as this interpreter runs it (PYTHONPATH: the tree under test), not whichever
    # environment last rewrote the installed script's shebang (seen during a run: another
    # session's reinstall pointed it at a venv it then deleted, and the resume failed to start Ray)
    import support.driver_process

    support.driver_process.BIN = base / "ray-bench"
    support.driver_process.BIN.write_text(f"#!{sys.executable}\nimport sys\nfrom ray_bench.cli import main\n"
                                          "sys.exit(main())\n")
    support.driver_process.BIN.chmod(0o755)
    print(f"load {os.getloadavg()[0]:.1f}; work in {base}", flush=True)
    failures: Failures = []
    try:
        for name in args.scenarios:
            if name in ("artifacts", "idle-node"):
                continue
            t0 = time.monotonic()
            where = base / name
            where.mkdir()
            failures += shared(where, args.sleep) if name == "shared" else (
                circuit(where) if name == "circuit" else timeline(where, max(args.sleep, 10)))
            print(f"  ({name}: {time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
        on_cluster = [n for n in args.scenarios if n in ("artifacts", "idle-node")]
        if on_cluster:
            t0 = time.monotonic()
            failures += cluster(base, on_cluster)
            print(f"  ({' + '.join(on_cluster)}: {time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print("".join(f"MISSED: {failure}\n" for failure in failures) or "every property held", end="\n" * (not failures))
    return int(bool(failures))


if __name__ == "__main__":
    sys.exit(main())
