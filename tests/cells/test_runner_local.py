"""The cell runner on the local backend, without Ray: lifecycle, timeouts, redaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from pathlib import Path

from support.ray_local import TEST_ROUTES
from support.specs import local_spec

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend

SECRET = TEST_ROUTES["RB_CANARY_KEY_1"]


def _spec(tmp_path: Path, command: str, **kw: object) -> AttemptSpec:
    return local_spec(tmp_path, command, **kw)


def _run(spec: AttemptSpec, root: Path) -> AttemptSummary:
    backend = LocalBackend(root)
    return asyncio.run(run_attempt(spec, backend))


def test_solved_attempt_has_reward_phases_and_no_sandbox_left(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 'sh "$SOLUTION_DIR/solve.sh"')
    summary = _run(spec, tmp_path / "sbx")
    assert summary.reward == 1.0 and summary.error is None
    assert set(summary.phases) >= {"sandbox_create", "agent", "verifier", "collect", "total"}
    assert json.loads((tmp_path / "attempt" / "result.json").read_text())["reward"] == 1.0
    assert list((tmp_path / "sbx").iterdir()) == []


def test_a_multi_key_reward_json_keeps_every_key_and_headlines_the_first_by_name(tmp_path: Path) -> None:
    """Harbor's cookbook ``multi-reward`` shape on a single-step task (issue 52: it was an invalid
    row, "reward.json unreadable")."""
    spec = _spec(tmp_path, 'sh "$SOLUTION_DIR/solve.sh"')
    (Path(spec.task_path) / "tests" / "test.sh").write_text(
        '#!/bin/sh\necho \'{"performance": 0.5, "correctness": 1}\' > "$LOGS_DIR/verifier/reward.json"\n')
    summary = _run(spec, tmp_path / "sbx")
    assert summary.rewards == {"performance": 0.5, "correctness": 1.0}
    assert (summary.reward, summary.reward_source) == (1.0, "reward.json")
    assert json.loads((tmp_path / "attempt" / "result.json").read_text())["rewards"] == summary.rewards


def test_agent_timeout_still_verifies(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "sleep 30", agent_timeout_sec=0.5)
    summary = _run(spec, tmp_path / "sbx")
    assert summary.agent is not None and summary.agent.timed_out is True
    assert summary.reward == 0.0  # the verifier ran and scored it


def test_credentials_reach_the_agent_and_are_scrubbed_from_everything(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 'echo "key=$API_KEY"; echo "$API_KEY" > "$LOGS_DIR/agent/leak.txt"; '
                           'echo "{\\"secret\\": \\"$API_KEY\\"}" > "$LOGS_DIR/agent/usage.json"')
    summary = _run(spec, tmp_path / "sbx")
    stdout = (tmp_path / "attempt" / "agent" / "stdout.txt").read_text()
    assert stdout.strip() == "key=[redacted]"  # it reached the agent, and was scrubbed
    for path in (tmp_path / "attempt").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in summary.dumps()


def test_missing_route_is_auth_and_creates_nothing(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "true", route_env={"API_KEY": "RB_DOES_NOT_EXIST"})
    summary = _run(spec, tmp_path / "sbx")
    assert summary.error is not None and summary.error.failure_class == "auth"
    assert summary.sandbox_id is None


def test_cancelled_attempt_removes_its_sandbox(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "sleep 30")
    backend = LocalBackend(tmp_path / "sbx")

    async def go() -> None:
        task = asyncio.ensure_future(run_attempt(spec, backend))
        await asyncio.sleep(1.0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert list((tmp_path / "sbx").iterdir()) == []
    assert json.loads((tmp_path / "attempt" / "result.json").read_text())["cancelled"] is True


def test_output_is_capped(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "yes | head -c 5000000")
    summary = _run(spec, tmp_path / "sbx")
    assert summary.agent is not None and summary.agent.truncated_bytes > 3_000_000
    assert (tmp_path / "attempt" / "agent" / "stdout.txt").stat().st_size <= 1 << 20


def test_stage_roots_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """Ray ends runner processes without atexit; the next runner clears what they staged."""
    from ray_bench.cells.runner import _new_stage_root

    dead = subprocess.Popen(["true"])
    dead.wait()
    parent = tmp_path / "stages"
    (parent / f"{dead.pid}-abc").mkdir(parents=True)
    (parent / f"{os.getppid()}-live").mkdir()
    (parent / "not-a-pid").mkdir()

    mine = _new_stage_root(parent)

    assert sorted(p.name for p in parent.iterdir()) == sorted([f"{os.getppid()}-live", "not-a-pid", mine.name])
    assert mine.name.startswith(f"{os.getpid()}-")


def test_silent_streams_leave_no_output_files(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 'sh "$SOLUTION_DIR/solve.sh" >/dev/null 2>&1; echo oops >&2')
    summary = _run(spec, tmp_path / "sbx")
    assert summary.reward == 1.0
    assert (tmp_path / "attempt" / "agent" / "stderr.txt").read_text() == "oops\n"
    assert not (tmp_path / "attempt" / "agent" / "stdout.txt").exists()
