"""Attempt directories through Ray and into a store, on the shared local Ray instance: the
driver's run root gets every attempt's files though no runner wrote there (``ray``), or the
store gets them and the ledger says where (a path store); the report reads the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.ray_local import ensure_ray, reset_shared_actors
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.artifacts.store import open_store
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.onray.artifact_ship import PROBE_FILE, Shipper
from ray_bench.onray.gate import actor_gate
from ray_bench.onray.pool import RayPool
from ray_bench.plan.store import confirm_plan
from ray_bench.reports.build import write_report
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.driver import Driver, RunOptions

pytestmark = [pytest.mark.ray]


def _run(tmp_path: Path, setting: str, store: str | None = None) -> tuple[Path, dict[str, AttemptSummary]]:
    ensure_ray()
    reset_shared_actors()
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=2,
                                 backends={"local": {"max_sandboxes": 4,
                                                     "options": {"root": str(tmp_path / "sbx")}}})
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="art")
    plan, identity = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
    pool = RayPool(1, artifacts=Shipper(planned.run_root, setting, store))
    outcome = Driver(plan, identity, planned.run_root, pool, actor_gate(plan), HostSupervision.of(plan),
                     options=RunOptions(tick_sec=0.1, artifacts=setting)).run()
    assert outcome.exit_code == 0, outcome
    with Ledger.reading(planned.run_root) as ledger:
        summaries = dict(ledger.summaries())
        assert all(a.valid for a in ledger.attempts())
    assert len(summaries) == 4
    return planned.run_root, summaries


def _dir(root: Path, attempt_id: str) -> str:
    """The attempt's directory name (the run root's layout, which a store keeps)."""
    with Ledger.reading(root) as ledger:
        return next(RunPaths(root).attempt(a).name for a in ledger.attempts() if a.attempt_id == attempt_id)


def test_artifacts_come_back_through_ray(tmp_path: Path) -> None:
    root, summaries = _run(tmp_path, "ray")
    assert not (root / PROBE_FILE).exists()  # `ray`: no node is asked
    for attempt_id, summary in summaries.items():
        place = summary.artifacts
        adir = root / "attempts" / _dir(root, attempt_id)
        assert place is not None and place.via == "ray" and place.uri == str(adir)
        assert place.error is None and place.omitted_files == 0
        assert float((adir / "logs" / "verifier" / "reward.txt").read_text()) == summary.reward
        written = json.loads((adir / "result.json").read_text())
        assert written["artifacts"]["via"] == "ray" and written["attempt_id"] == attempt_id
        assert summary.node  # and the runner's scratch directory is gone from its node:
    assert not list(Path("/tmp/ray-bench-remote").glob(f"*/{next(iter(summaries))}-*"))
    report = write_report(root)
    assert report is not None


def test_artifacts_go_to_a_store(tmp_path: Path) -> None:
    store_root = tmp_path / "store"
    root, summaries = _run(tmp_path, str(store_root), str(store_root))
    assert not (root / "attempts").exists()  # nothing in the run root: all in the store
    store = open_store(str(store_root))
    for attempt_id, summary in summaries.items():
        place = summary.artifacts
        assert place is not None and place.via == "store"
        assert place.uri == store.uri_of(f"art/attempts/{_dir(root, attempt_id)}")
        got = store.get_tree(f"art/attempts/{_dir(root, attempt_id)}", tmp_path / "read" / attempt_id)
        assert float((got / "logs" / "verifier" / "reward.txt").read_text()) == summary.reward


def test_a_node_that_sees_the_run_root_writes_there(tmp_path: Path) -> None:
    root, summaries = _run(tmp_path, "auto")
    assert (root / PROBE_FILE).is_file()
    vias = [s.artifacts.via for s in summaries.values() if s.artifacts]
    # The first attempts may leave before the node's answer arrives (they go through Ray);
    # once it has answered, the runner writes into the run root itself.
    assert len(vias) == 4 and vias.count("run-root") >= 1 and set(vias) <= {"run-root", "ray"}
    for attempt_id in summaries:
        assert (root / "attempts" / _dir(root, attempt_id) / "result.json").is_file()


def _paused_mid_agent(tmp_path: Path, setting: str, store: str | None) -> tuple[Path, str, AttemptSummary]:
    """``execute --artifacts SETTING`` and ``pause --now`` while the agent runs (issue 25): the
    run root, and the one cancelled attempt's id and summary as the ledger keeps them."""
    import threading
    import time

    from ray_bench.api import pause_run

    ensure_ray()
    reset_shared_actors()
    marker = tmp_path / "agent-running"
    usage = '{"input_tokens": 1000, "output_tokens": 40, "cost_usd": 0.07, "request_ids": ["req_cmd"]}'
    arms = [{"name": "baseline", "role": "baseline", "agent_dir": "agents", "agent_timeout_sec": 900,
             "command": f"echo '{usage}' > \"$LOGS_DIR/agent/usage.json\"; touch {marker}; sleep 600"}]
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], arms=arms, preflight_cells=0,
                                 backends={"local": {"max_sandboxes": 2,
                                                     "options": {"root": str(tmp_path / "sbx")}}})
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="art")
    plan, identity = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)

    def pause_once_the_agent_runs() -> None:
        deadline = time.monotonic() + 600  # bounded; a daemon thread: a failed run fails the test
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.1)
        pause_run(planned.run_root, now=True)

    thread = threading.Thread(target=pause_once_the_agent_runs, daemon=True)
    thread.start()
    pool = RayPool(1, artifacts=Shipper(planned.run_root, setting, store))
    outcome = Driver(plan, identity, planned.run_root, pool, actor_gate(plan), HostSupervision.of(plan),
                     options=RunOptions(tick_sec=0.1, artifacts=setting)).run()
    thread.join()
    assert marker.exists() and outcome.stopped == "paused", outcome
    with Ledger.reading(planned.run_root) as ledger:
        attempts = list(ledger.attempts())
        summaries = dict(ledger.summaries())
    assert [a.status for a in attempts] == ["cancelled"], attempts
    (attempt_id, summary), = summaries.items()
    assert summary.cancelled
    return planned.run_root, attempt_id, summary


@pytest.mark.slow
def test_a_paused_attempts_files_go_to_the_store_and_its_row_points_at_them(tmp_path: Path) -> None:
    """The store route: the cancelled attempt's directory (its agent's ``usage.json``,
    ``result.json``) is in the store, and the ledger's summary points at it with no error."""
    from ray_bench.ledger.cost import attempt_cost

    store_root = tmp_path / "store"
    run_root, attempt_id, summary = _paused_mid_agent(tmp_path, str(store_root), str(store_root))
    place = summary.artifacts
    key = f"art/attempts/{_dir(run_root, attempt_id)}"
    assert place is not None and place.via == "store" and place.error is None, place
    assert place.uri == open_store(str(store_root)).uri_of(key)
    assert (store_root / key / "result.json").is_file()
    assert json.loads((store_root / key / "logs" / "agent" / "usage.json").read_text())["cost_usd"] == 0.07
    assert attempt_cost(summary) == pytest.approx(0.07)
    assert not (run_root / "attempts").exists()  # nothing in the run root: all in the store


@pytest.mark.slow
def test_a_paused_attempts_files_come_back_through_ray(tmp_path: Path) -> None:
    """The Ray route (a node without the run root, no store): the cancelled task returns no
    value, so its directory comes back with the summary the driver asks the runner for; it had
    stayed on the node, the row saying "files on its node were not sent back"."""
    from ray_bench.ledger.cost import attempt_cost

    run_root, attempt_id, summary = _paused_mid_agent(tmp_path, "ray", None)
    place = summary.artifacts
    adir = run_root / "attempts" / _dir(run_root, attempt_id)
    assert place is not None and place.via == "ray" and place.error is None, place
    assert place.uri == str(adir)
    assert json.loads((adir / "logs" / "agent" / "usage.json").read_text())["cost_usd"] == 0.07
    assert json.loads((adir / "result.json").read_text())["attempt_id"] == attempt_id
    assert attempt_cost(summary) == pytest.approx(0.07)
    assert not list(Path("/tmp/ray-bench-remote").glob(f"*/{attempt_id}-*"))  # the scratch is gone
