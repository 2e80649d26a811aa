"""A cell whose Ray task is cancelled (``pause --now``, a signal stop) still leaves the evidence
of what its agent spent (issue 25). A cancelled Ray task returns no value; the runner keeps the
summary it wrote when it was cancelled (usage so far, request ids, ``agent_started``) and the
driver asks for it, else reads the attempt's ``result.json`` where it sees it, else records the
cost unknown: never $0 for an attempt whose agent started."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cells.test_runner_cancel_cost import FAKE_CLAUDE_USD, fake_claude
from ray.exceptions import RayError
from support.runs import ledger_rows, plan_and_run
from support.specs import local_spec
from support.suites import make_suite

from ray_bench.ledger.cost import attempt_cost
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary, Usage
from ray_bench.onray.pool import cancelled_summary_of
from ray_bench.status.read import read_status
from ray_bench.status.text import status_lines

COMMAND_USAGE = '{"input_tokens": 1000, "output_tokens": 40, "cost_usd": 0.07, "request_ids": ["req_cmd"]}'


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_cancelled_attempt_records_the_usage_its_agent_produced(tmp_path: Path) -> None:
    markers = {"claude": tmp_path / "claude-running", "command": tmp_path / "command-running"}
    bin_dir = fake_claude(tmp_path / "bin", markers["claude"])
    arms = [
        {"name": "baseline", "role": "baseline", "agent": "claude-code", "model": "claude-sonnet-4-5",
         "agent_timeout_sec": 900, "env": {"PATH": f"{bin_dir}:{os.environ['PATH']}"}},
        {"name": "mcp", "role": "variant", "agent_dir": "agents", "agent_timeout_sec": 900,
         "command": f"echo '{COMMAND_USAGE}' > \"$LOGS_DIR/agent/usage.json\"; touch {markers['command']}; "
                    "sleep 600"},
    ]
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world"], preflight_cells=0, arms=arms,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}})
    from ray_bench.api import pause_run

    runs = tmp_path / "runs"
    paused: list[float] = []

    def pause_once_both_agents_have_spent() -> None:
        deadline = time.monotonic() + 900  # bounded; a daemon thread: a failed run fails the test
        while time.monotonic() < deadline and not all(m.exists() for m in markers.values()):
            time.sleep(0.1)
        if all(m.exists() for m in markers.values()):
            time.sleep(0.5)  # the fake CLI's stream reaches its runner
            paused.append(time.monotonic())
            pause_run(runs / "r1", now=True)

    thread = threading.Thread(target=pause_once_both_agents_have_spent, daemon=True)
    thread.start()
    outcome, root = plan_and_run(suite, accounts, runs)
    thread.join()
    assert paused and outcome.stopped == "paused", outcome.detail
    attempts, _ = ledger_rows(root)
    by_arm = {a.arm: a for a in attempts}
    assert {a.status for a in attempts} == {"cancelled"} and set(by_arm) == {"baseline", "mcp"}
    with Ledger.reading(root) as ledger:
        summaries = {arm: ledger.summary(a.attempt_id) for arm, a in by_arm.items()}
    # The CLI cut mid-run: its stream's usage, request ids, a lower bound; never unknown, never $0.
    claude, cmd = summaries["baseline"], summaries["mcp"]
    assert claude is not None and claude.cancelled and claude.agent_started is True
    assert claude.usage is not None and claude.usage.source == "stream"
    assert claude.usage.request_ids == ["req_fake_1", "req_fake_2"]  # type: ignore[attr-defined]
    assert by_arm["baseline"].cost_usd == pytest.approx(FAKE_CLAUDE_USD) and by_arm["baseline"].lower_bound
    assert claude.ray_node  # handed over by the runner actor
    # The command agent: the usage.json it had written, taken out of its sandbox before it went.
    assert cmd is not None and cmd.agent_started is True and cmd.usage is not None
    assert by_arm["mcp"].cost_usd == pytest.approx(0.07) and by_arm["mcp"].lower_bound
    assert all(a.charged_usd is None for a in attempts)  # known costs: nothing charged at a guess
    status = read_status(root)
    assert status.spend_usd == pytest.approx(0.07 + FAKE_CLAUDE_USD) and status.unknown_cost == 0
    assert any(line.startswith("spend: at least $0.07 (2 attempts cut mid-turn") for line in status_lines(status))
    assert list((tmp_path / "sbx").iterdir()) == []  # every sandbox still removed


class _Gone:
    """A runner that cannot answer (its node went, or an older runner without the method)."""

    class cancelled:
        @staticmethod
        def remote(attempt_id: str) -> Any:
            raise RayError(f"no runner for {attempt_id}")


def test_without_the_runner_the_driver_reads_result_json_else_the_cost_is_unknown(tmp_path: Path) -> None:
    spec = local_spec(tmp_path, "true")
    unknown = cancelled_summary_of(_Gone(), spec)  # nothing written: unknown, never $0
    assert unknown.cancelled and unknown.agent_started is None and attempt_cost(unknown) is None
    written = AttemptSummary(attempt_id=spec.attempt_id, cancelled=True, agent_started=True,
                             usage=Usage(input_tokens=10, output_tokens=2, cost_usd=0.004))
    (tmp_path / "attempt").mkdir()
    (tmp_path / "attempt" / "result.json").write_text(written.dumps())
    read = cancelled_summary_of(_Gone(), spec)
    assert read.agent_started is True and attempt_cost(read) == pytest.approx(0.004)
    other = written.model_copy(update={"attempt_id": "someone-else"})
    (tmp_path / "attempt" / "result.json").write_text(other.dumps())
    assert attempt_cost(cancelled_summary_of(_Gone(), spec)) is None  # not this attempt's
