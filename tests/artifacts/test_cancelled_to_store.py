"""A cancelled attempt on the store route (``execute --artifacts DIR``) still sends its files to
the store (issue 25): its agent's logs and ``usage.json``, what its cost is read from, and its
``result.json``, so the summary the driver asks the runner for points at files that exist. A
store that cannot take them leaves the summary saying so, never pointing at nothing in silence."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cells.test_runner_cancel_cost import FAKE_CLAUDE_USD, fake_claude
from support.specs import local_spec

from ray_bench.artifacts.route import ArtifactRoute
from ray_bench.artifacts.store import open_store
from ray_bench.cells.artifact_node import arrived, run_routed, store_key
from ray_bench.cells.runner import cancelled_summary
from ray_bench.cells.spec import AttemptSpec
from ray_bench.ledger.cost import attempt_cost
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend

USAGE = {"input_tokens": 1000, "output_tokens": 40, "cost_usd": 0.07, "request_ids": ["req_cmd"]}


def _cancelled(spec: AttemptSpec, marker: Path, sandboxes: Path) -> AttemptSummary:
    """``spec`` run through the runner's routing until its agent says it runs, then cancelled;
    the summary the runner kept for the driver."""

    async def go() -> None:
        task = asyncio.ensure_future(run_routed(spec, LocalBackend(sandboxes)))
        deadline = time.monotonic() + 60
        while not marker.exists() and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling for the agent's own marker, not a fixed wait
        assert not task.done(), task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    kept = cancelled_summary(spec.attempt_id)
    assert kept is not None and kept.cancelled and kept.agent_started is True, kept
    return kept


def _spec(tmp_path: Path, store: Path, marker: Path, agent: str = "command") -> AttemptSpec:
    if agent == "claude-code":  # a CLI cut mid-run: its stream read into usage.json on the cancel
        bin_dir = fake_claude(tmp_path / "bin", marker)
        spec = local_spec(tmp_path, "", agent="claude-code", model="claude-sonnet-4-5", agent_timeout_sec=900.0,
                          agent_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    else:  # a command agent: the usage.json it wrote, taken out of its sandbox on the cancel
        spec = local_spec(tmp_path, f"echo '{json.dumps(USAGE)}' > \"$LOGS_DIR/agent/usage.json\"; "
                          f"touch {marker}; sleep 600", agent_timeout_sec=900.0)
    return replace(spec, artifacts=ArtifactRoute(local_files=True, store=str(store)))


@pytest.mark.parametrize("agent", ["command", "claude-code"])
def test_a_cancelled_attempts_files_reach_the_store(tmp_path: Path, agent: str) -> None:
    store, marker = tmp_path / "store", tmp_path / "agent-running"
    spec = _spec(tmp_path, store, marker, agent)
    kept = _cancelled(spec, marker, tmp_path / "sbx")
    where = store / store_key(spec)
    place = kept.artifacts
    assert place is not None and place.via == "store" and place.error is None, place
    assert place.uri == open_store(str(store)).uri_of(store_key(spec)) == str(where)
    assert arrived(kept, spec)  # the driver finds its result.json where the summary says
    written = AttemptSummary.loads((where / "result.json").read_text())
    assert written.cancelled and written.attempt_id == spec.attempt_id
    usage = json.loads((where / "logs" / "agent" / "usage.json").read_text())
    if agent == "command":
        assert usage == USAGE
        assert attempt_cost(kept) == pytest.approx(0.07)
    else:
        assert usage["request_ids"] == ["req_fake_1", "req_fake_2"] and usage["bound"] == "lower_bound", usage
        assert "req_fake_2" in (where / "logs" / "agent" / "agent-output.txt").read_text()  # the stream kept
        assert attempt_cost(kept) == pytest.approx(FAKE_CLAUDE_USD)
    assert kept.usage_lower_bound  # its usage so far, cut
    assert list((tmp_path / "sbx").iterdir()) == []  # its sandbox still removed


def test_a_store_that_cannot_take_a_cancelled_attempts_files_is_said_so(tmp_path: Path) -> None:
    store, marker = tmp_path / "store", tmp_path / "agent-running"
    spec = _spec(tmp_path, store, marker)
    store.mkdir()
    (store / spec.run_id).write_text("a file where the run's directory would go")  # copytree fails
    kept = _cancelled(spec, marker, tmp_path / "sbx")
    place = kept.artifacts
    assert place is not None and place.error is not None and "did not reach the store" in place.error, place
    assert not arrived(kept, spec)
    assert attempt_cost(kept) == pytest.approx(0.07)  # the summary still carries what it spent
