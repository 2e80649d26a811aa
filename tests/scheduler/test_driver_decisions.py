"""The driver's decisions with the real runner and the local backend in this process, no Ray
(support.runs.plan_and_run_here): scripted agents that misbehave on purpose. These were in
test_driver_ray.py, where each run started its runner and admission actors on the shared Ray
(~20-40 s a run here); what must see Ray (both runners, cancels, the actors' durable account
state and holds) stays there."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from support.runs import execute_here as execute
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite

from ray_bench.ledger import Ledger
from ray_bench.runroot import RunPaths

pytestmark = [pytest.mark.slow]


def _arm(name: str, role: str, command: str, **kw: object) -> dict[str, object]:
    return {"name": name, "role": role, "command": command, "agent_dir": "agents", **kw}


def _local(tmp_path: Path, pool: int = 4) -> dict[str, object]:
    return {"local": {"max_sandboxes": pool, "options": {"root": str(tmp_path / "sbx")}}}


def test_verifier_without_reward_is_evaluator_and_exhausts_attempts(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir(parents=True)
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"], preflight_cells=0,
                                 backends=_local(tmp_path), max_attempts=2)
    # Break one verifier so it leaves no reward, in two ways by turns: it exits 3 with none, or it
    # writes one that is no number. One way every time would be one signature, and three of it
    # in a row (no hello-world success between, which a loaded machine's timing allows) opens
    # the run's circuit before the fourth attempt: right, but not this test's subject (the
    # circuit's own tests are in tests/evidence). By turns, no signature comes three times.
    runs = tmp_path / "verifier-runs"  # one directory per run: mkdir is atomic, a count file is not
    runs.mkdir()
    (tmp_path / "s" / "tasks" / "sum-list" / "tests" / "test.sh").write_text(
        f'#!/bin/sh\nn=1; while ! mkdir {runs}/$n 2>/dev/null; do n=$((n+1)); done\n'
        'if [ $((n % 2)) = 1 ]; then exit 3; fi\n'
        'mkdir -p "$LOGS_DIR/verifier"; echo none > "$LOGS_DIR/verifier/reward.txt"\n')
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.exit_code == 1
    attempts, rows = ledger_rows(root)
    broken = [a for a in attempts if a.task == "sum-list"]
    assert len(broken) == 4  # two cells x max_attempts
    assert len(list(runs.iterdir())) == 4
    assert {a.failure_class for a in broken} == {"evaluator"}
    assert len({a.fingerprint for a in broken}) == 2
    assert not Ledger.open_readonly(root).events("circuit_open")
    assert not any(a.valid for a in broken)
    assert {r.task for r in rows.values()} == {"hello-world"}


def test_rate_limited_account_cools_and_cells_move_on(tmp_path: Path) -> None:
    # Account A's key makes the agent report a rate limit; B's works.
    # (told apart by a fragment: plan refuses a config that holds a route's value, rightly)
    agent = ('case "$DEMO_API_KEY" in *-a-*) '
             'echo \'{"type": "rate_limit", "message": "429 Too Many Requests", "retry_after": 600}\' '
             '> "$LOGS_DIR/agent/error.json"; exit 1;; esac; sh "$SOLUTION_DIR/solve.sh"')
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], backends=_local(tmp_path),
        arms=[_arm("baseline", "baseline", agent, expose_solution=True),
              _arm("mcp", "variant", agent, expose_solution=True)])
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.exit_code == 0, outcome
    attempts, rows = ledger_rows(root)
    limited = [a for a in attempts if not a.valid]
    assert limited and {a.failure_class for a in limited} == {"provider"}
    assert all(a.account == "acct-a" for a in limited)
    assert not any(a.counts for a in limited)  # not blamed on the task
    # After the first signal, A cooled for 600 s: at most its concurrency limit was wasted.
    assert len(limited) <= 3
    assert {r.account for r in rows.values()} == {"acct-b"}


def test_agent_crash_without_reward_keeps_preflight_closed(tmp_path: Path) -> None:
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], backends=_local(tmp_path),
        max_attempts=1,
        arms=[_arm("baseline", "baseline", "kill -SEGV $$"),
              _arm("mcp", "variant", 'sh "$AGENT_DIR/scripted-agent.sh"', expose_solution=True,
                   env={"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"})])
    # the verifier of a crashed agent still writes 0: make it not, as a broken harness would
    for task in ("hello-world", "sum-list", "fizzbuzz"):
        test = tmp_path / "s" / "tasks" / task / "tests" / "test.sh"
        test.write_text('#!/bin/sh\n[ -f "$APP_DIR/hello.txt" ] || exit 4\n' + test.read_text())
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.exit_code == 1 and outcome.stopped == "preflight"
    assert "preflight gate failed" in outcome.detail and "arm baseline" in outcome.detail
    attempts, _ = ledger_rows(root)
    assert all(a.preflight for a in attempts)  # no fan-out cell started
    assert len(attempts) == 2


def test_drift_stops_new_attempts(tmp_path: Path) -> None:
    suite, accounts = make_suite(
        tmp_path / "s", reps=2, backends=_local(tmp_path, pool=2), preflight_cells=0,
        arms=[_arm("baseline", "baseline", "sleep 1"), _arm("mcp", "variant", "sleep 1")])
    task_file = tmp_path / "s" / "tasks" / "sum-list" / "instruction.md"

    def edit_soon() -> None:
        # Edit once the run has started attempts (Ray may still be starting when this begins).
        ledger_file = tmp_path / "runs" / "r1" / "ledger.sqlite"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if ledger_file.exists() and Ledger.read_attempts(ledger_file.parent):
                    break
            except Exception:  # the ledger is being created
                pass
            time.sleep(0.1)
        time.sleep(1.0)
        task_file.write_text("a different instruction\n")

    thread = threading.Thread(target=edit_soon, daemon=True)
    thread.start()
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    thread.join()
    assert outcome.stopped == "drift" and outcome.exit_code == 1
    assert "task sum-list changed" in outcome.detail
    ledger = Ledger.open_readonly(root)
    drift = ledger.events("drift")
    assert drift and drift[0].data["name"] == "sum-list"
    started_after = [a for a in ledger.attempts() if a.started_at > drift[0].ts]
    assert started_after == []
    assert all(a.terminal for a in ledger.attempts())  # running cells finished


def test_spend_limit_is_a_hard_stop(tmp_path: Path) -> None:
    agent = 'echo \'{"input_tokens": 10, "output_tokens": 10, "cost_usd": 0.4}\' > "$LOGS_DIR/agent/usage.json"'
    suite, accounts = make_suite(
        tmp_path / "s", reps=2, backends=_local(tmp_path, pool=2), preflight_cells=0, spend_limit_usd=1.0,
        arms=[_arm("baseline", "baseline", agent), _arm("mcp", "variant", agent)])
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.stopped == "spend" and outcome.exit_code == 1
    attempts, _ = ledger_rows(root)
    # Spend admission reserves (scheduler/spend.py): two cells start on the default estimate,
    # cost $0.80; a third, expected at $0.40 from them, would pass $1.00 and never starts. Before
    # the reservation the limit was crossed at the third finished attempt and those in flight
    # finished on top of it.
    assert len(attempts) == 2
    assert sum(a.cost_usd for a in attempts) == pytest.approx(0.8)
    assert "would pass the run's limit $1.00" in outcome.detail


def test_repeated_tool_failure_opens_circuit_and_hypothesis_reopens(tmp_path: Path) -> None:
    suite, accounts = make_suite(
        tmp_path / "s", reps=2, backends=_local(tmp_path, pool=1), preflight_cells=0, max_attempts=1,
        arms=[_arm("baseline", "baseline", "no-such-agent-binary --run"),
              _arm("mcp", "variant", "no-such-agent-binary --run")])
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.stopped == "circuit"
    assert "recovery circuit open for run" in outcome.detail
    attempts, _ = ledger_rows(root)
    assert len(attempts) == 3  # the threshold, then nothing more
    assert {a.failure_class for a in attempts} == {"tool"}
    # Resume without a hypothesis: still closed. With one: it runs (and fails again, recorded).
    identity = Ledger.open_readonly(root).meta()["plan_identity"]
    assert execute(root, identity).stopped == "circuit"
    assert len(ledger_rows(root)[0]) == 3
    from ray_bench.scheduler.driver import RunOptions

    reopened = execute(root, identity, RunOptions(hypothesis="installed the agent binary"))
    ledger = Ledger.open_readonly(root)
    events = ledger.events("hypothesis")
    assert events[-1].data["text"] == "installed the agent binary"
    # The reopen is one bounded probe, not a fan-out: one cell on the hypothesis, and its
    # failure (the same signature) closes the scope again at once, recorded against it. Before,
    # the hypothesis sent 4 cells at once (5 failures, 2 cells used up).
    attempts = ledger_rows(root)[0]
    assert len(attempts) == 4 and reopened.attempts_run == 1
    probe = ledger.events("circuit_probe")
    assert [e.data["attempt_id"] for e in probe] == [attempts[-1].attempt_id]
    closed = ledger.events("circuit_open")[-1].data
    assert closed["probe"] == attempts[-1].attempt_id and closed["hypothesis"] == "installed the agent binary"
    assert reopened.stopped == "circuit"
    assert not ledger.events("circuit_reopened")


def test_a_valid_probe_reopens_the_circuit_and_the_run_goes_on(tmp_path: Path) -> None:
    fixed = tmp_path / "fixed"  # outside the plan's inputs: the fix is no drift
    command = f"test -f {fixed} || no-such-agent-binary --run"
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list"], reps=2, backends=_local(tmp_path, pool=1),
        preflight_cells=0, max_attempts=4,  # 3 failures open the circuit whichever cells they hit
        arms=[_arm("baseline", "baseline", command), _arm("mcp", "variant", command)])
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.stopped == "circuit" and outcome.attempts_run == 3
    fixed.write_text("")
    from ray_bench.scheduler.driver import RunOptions

    identity = Ledger.open_readonly(root).meta()["plan_identity"]
    resumed = execute(root, identity, RunOptions(hypothesis="installed the agent binary"))
    ledger = Ledger.open_readonly(root)
    probe, reopened = ledger.events("circuit_probe"), ledger.events("circuit_reopened")
    assert len(probe) == 1 and [e.data["via"] for e in reopened] == ["probe"]
    assert reopened[0].data["attempt_id"] == probe[0].data["attempt_id"]
    # The probe went alone: the next attempt started only after it had finished.
    attempts = ledger_rows(root)[0]
    probe_row = next(a for a in attempts if a.attempt_id == probe[0].data["attempt_id"])
    later = [a for a in attempts if a.started_at > probe_row.started_at]
    assert later and all(a.started_at >= (probe_row.finished_at or 0) for a in later)
    assert resumed.exit_code == 0 and resumed.counts["valid"] == 8 and resumed.stopped is None


def test_pause_drains_and_records_resume_action(tmp_path: Path) -> None:
    suite, accounts = make_suite(
        tmp_path / "s", reps=2, backends=_local(tmp_path, pool=2), preflight_cells=0,
        arms=[_arm("baseline", "baseline", "sleep 1"), _arm("mcp", "variant", "sleep 1")])
    from ray_bench.api import pause_run

    runs = tmp_path / "runs"

    def pause_soon() -> None:
        # bounded, and the thread is a daemon: a run that fails before its ledger exists must
        # fail this test, not hang pytest's exit on a thread that waits forever
        deadline = time.monotonic() + 180
        while not (runs / "r1" / "ledger.sqlite").exists():
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        time.sleep(1.5)
        pause_run(runs / "r1", reason="test")

    thread = threading.Thread(target=pause_soon, daemon=True)
    thread.start()
    outcome, root = plan_and_run(suite, accounts, runs)
    thread.join()
    assert outcome.stopped == "paused" and outcome.exit_code == 0
    assert "ray-bench execute --plan" in outcome.detail
    attempts, _ = ledger_rows(root)
    assert all(a.terminal for a in attempts) and all(a.status == "finished" for a in attempts)
    assert outcome.counts["pending"] > 0
    from ray_bench.api import run_status

    status = run_status(root)
    assert "ray-bench execute --plan" in (status["resume_action"] or "")
    # resuming clears the pause and finishes the run
    identity = Ledger.open_readonly(root).meta()["plan_identity"]
    assert execute(root, identity).exit_code == 0
    assert json.loads(next((root / "pauses").iterdir()).read_text())["reason"] == "test"


def test_logins_expiring_before_a_cell_could_finish_stop_the_run_at_once(tmp_path: Path) -> None:
    """Not idle until the login runs out: the operator is told which login, and when."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps(
        {"claudeAiOauth": {"expiresAt": int((time.time() + 600) * 1000)}}))
    accounts = [{"name": "expiring", "route": {"home": str(home)}, "limits": {"max_concurrent": 2}}]
    agent = 'sh "$SOLUTION_DIR/solve.sh"'
    suite, accounts_file = make_suite(  # cells may run for an hour; the login has ten minutes
        tmp_path / "s", tasks=["hello-world"], accounts=accounts, backends=_local(tmp_path),
        arms=[_arm("baseline", "baseline", agent, agent_timeout_sec=3600, expose_solution=True),
              _arm("mcp", "variant", agent, agent_timeout_sec=3600, expose_solution=True)])
    started = time.monotonic()
    outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
    # Stopped long before the login ran out (on a loaded machine starting Ray alone can take a
    # minute, so "at once" is measured against the login's ten minutes, not a stopwatch).
    assert time.monotonic() - started < 300
    assert outcome.stopped == "accounts" and outcome.exit_code == 1
    assert re.search(r"expiring login expires in \d+ min, within a cell's", outcome.detail), outcome.detail
    attempts, _ = ledger_rows(root)
    assert attempts == []


def test_every_account_rejecting_its_credentials_stops_the_run_instead_of_hanging(tmp_path: Path) -> None:
    agent = 'echo "Error: 401 Unauthorized - invalid x-api-key"; exit 1'
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list"], backends=_local(tmp_path), preflight_cells=0,
        arms=[_arm("baseline", "baseline", agent), _arm("mcp", "variant", agent)])
    started = time.monotonic()
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert time.monotonic() - started < 300  # a hang would run to pytest's timeout
    assert outcome.stopped == "accounts" and outcome.exit_code == 1
    assert "acct-a disabled" in outcome.detail and "acct-b disabled" in outcome.detail
    attempts, _ = ledger_rows(root)
    assert {a.failure_class for a in attempts} == {"auth"}
    assert not any(a.counts for a in attempts)  # not blamed on the cells: they stay pending
    assert outcome.counts["failed"] == 0 and outcome.counts["pending"] == 4


def test_numbers_from_the_world_that_are_not_finite_reach_no_spend_and_no_row(tmp_path: Path) -> None:
    """Issue 58: a usage.json with ``"cost_usd": Infinity`` stopped the run at "run spend $inf",
    -100 was credited, and a reward.txt of ``inf`` was a valid (solved) row. Now each such attempt
    is invalid with its reason, its cost unknown (charged at the expected cost), and the run's
    spend stays a finite, non-negative amount."""
    agent = ('case "$(cat "$INSTRUCTION_FILE")" in *Hello*) c=Infinity;; *sum*) c=-100;; *) c=0.01;; esac; '
             'printf \'{"output_tokens": 9, "cost_usd": %s}\\n\' "$c" > "$LOGS_DIR/agent/usage.json"; '
             'sh "$SOLUTION_DIR/solve.sh"')
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], preflight_cells=0, max_attempts=1,
        backends=_local(tmp_path), spend_limit_usd=50.0,
        arms=[_arm("baseline", "baseline", agent, expose_solution=True)])
    (tmp_path / "s" / "tasks" / "fizzbuzz" / "tests" / "test.sh").write_text(
        '#!/bin/sh\nmkdir -p "$LOGS_DIR/verifier"; echo inf > "$LOGS_DIR/verifier/reward.txt"\n')
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.stopped is None, outcome
    attempts, rows = ledger_rows(root)
    assert len(attempts) == 3 and not rows
    by_task = {a.task: a for a in attempts}
    assert by_task["hello-world"].failure_class == "tool" and by_task["sum-list"].failure_class == "tool"
    assert by_task["hello-world"].cost_usd is None and by_task["sum-list"].cost_usd is None
    assert by_task["fizzbuzz"].failure_class == "evaluator" and by_task["fizzbuzz"].reward is None
    assert by_task["fizzbuzz"].cost_usd == 0.01
    summary = json.loads((RunPaths(root).attempt(by_task["fizzbuzz"]) / "result.json").read_text())
    assert summary["reward"] is None and "not finite" in summary["reward_source"]
    assert "Infinity" not in (root / "ledger.sqlite").read_bytes().decode(errors="replace")


def test_a_run_made_with_hash_named_directories_resumes_and_every_reader_finds_them(tmp_path: Path) -> None:
    """Issue 56: attempt directories are named ``<task>__<arm>__r<rep>__a<n>__<hash>``. A run made
    before (``<cell id>-a<n>``), whose driver died with an attempt in flight and whose ledger was
    rebuilt, resumes: its new attempt takes the new name, and the ledger's old rows still lead
    to their directories (export, report)."""
    from ray_bench.evidence.rebuild import rebuild_ledger
    from ray_bench.exports.source import load_suites
    from ray_bench.plan.store import load_plan_file
    from ray_bench.reports.build import write_report

    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], preflight_cells=0, backends=_local(tmp_path))
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    assert outcome.exit_code == 0
    paths = RunPaths(root)
    attempts, _ = ledger_rows(root)
    assert sorted(p.name for p in paths.attempt_dirs()) == sorted(
        f"hello-world__{a.arm}__r1__a1__{a.cell_id[:8]}" for a in attempts)
    # the run as a ray-bench before issue 56 left it: directories by attempt id, one in flight
    for a in attempts:
        paths.attempt(a).rename(paths.attempts / a.attempt_id)
    lost = attempts[0]
    (paths.attempts / lost.attempt_id / "result.json").unlink()
    for file in paths.ledger_files():
        file.unlink(missing_ok=True)
    rebuild_ledger(root)

    resumed = execute(root, load_plan_file(paths.plan)[1])
    assert resumed.exit_code == 0 and resumed.counts["valid"] == len(attempts), resumed
    after, _ = ledger_rows(root)
    again = next(a for a in after if a.cell_id == lost.cell_id and a.seq == 2)
    assert paths.attempt(again).name == f"hello-world__{lost.arm}__r1__a2__{lost.cell_id[:8]}"
    assert (paths.attempts / lost.attempt_id).is_dir()  # the old one is kept, never written over
    for a in after:
        if a.status == "finished":
            assert (paths.attempt(a) / "result.json").is_file(), a.attempt_id
    (exported,) = load_suites([root])
    dirs = {c.attempt_dir.name for c in exported.cells if c.attempt_dir is not None}
    assert dirs == {paths.attempt(a).name for a in after if a.status == "finished"}
    assert write_report(root) is not None
