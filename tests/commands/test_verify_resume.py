"""A resume after an upgrade: the run started on the receipt check of its version, so a resume
matches the receipt that session recorded instead of the lines the new version renders, and does
not derive the plan's tasks, cells and cell set again (what an upgrade derives differently); a plan
or receipt edited since is still refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite
from support.virtual_run import Run

from ray_bench.api import plan_run
from ray_bench.commands import verify
from ray_bench.commands.verify import verify_plan
from ray_bench.errors import PlanError
from ray_bench.files import write_whole
from ray_bench.ledger.events import RunStarted
from ray_bench.ledger.store import Ledger
from ray_bench.models.plan import PlanTask
from ray_bench.plan.compile import plan_task
from ray_bench.plan.identity import identity_of
from ray_bench.plan.store import PLAN_FILE, load_plan_file, plan_bytes

#: The receipt's newest line (issue: every failure is bounded): what an earlier version's lacks.
NEWEST = "- attempts per cell at most:"


@pytest.fixture
def planned(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", reps=1)
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root


def _as_an_earlier_version_wrote_it(root: Path) -> None:
    receipt = root / "receipt.md"
    lines = receipt.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(NEWEST)]
    assert len(kept) == len(lines) - 1
    write_whole(receipt, "".join(kept))


def _started(root: Path, identity: str, receipt: str | None) -> None:
    """A session's record, as ``execute`` leaves it (``receipt`` None: an earlier version's)."""
    ledger = Ledger.create(root, run_id="r1", plan_identity=identity)
    try:
        ledger.append(RunStarted(identity=identity, run_id="r1", receipt=receipt))
    finally:
        ledger.close()


def _refused(root: Path) -> str:
    plan, identity = load_plan_file(root / PLAN_FILE)
    with pytest.raises(PlanError) as caught:
        verify_plan(plan, identity, root / PLAN_FILE)
    return caught.value.line()


def test_a_run_an_earlier_version_started_resumes(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    _as_an_earlier_version_wrote_it(planned)
    # Before any session, the receipt this version renders is the thing to match: refused.
    assert "does not state what the plan holds" in _refused(planned)
    _started(planned, identity, None)  # the earlier version's session passed its own check
    receipt = verify_plan(plan, identity, planned / PLAN_FILE)
    assert receipt.startswith("sha256:") and len(receipt) == 71


def test_a_resume_refuses_a_receipt_edited_since_the_run_started(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    receipt = verify_plan(plan, identity, planned / PLAN_FILE)
    _started(planned, identity, receipt)
    assert verify_plan(plan, identity, planned / PLAN_FILE) == receipt
    text = (planned / "receipt.md").read_text()
    write_whole(planned / "receipt.md", text.replace("- paired: yes", "- paired: no (one-arm plan)"))
    assert "not the one its run started with" in _refused(planned)


def test_an_earlier_versions_run_refuses_a_receipt_of_another_identity(planned: Path) -> None:
    _, identity = load_plan_file(planned / PLAN_FILE)
    _started(planned, identity, None)
    text = (planned / "receipt.md").read_text()
    write_whole(planned / "receipt.md", text.replace(identity, "sha256:" + "1" * 64))
    assert "does not state this plan's identity" in _refused(planned)


def test_a_plan_edited_after_the_run_started_is_refused(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    _started(planned, identity, verify_plan(plan, identity, planned / PLAN_FILE))
    # An edit the inputs do not show (an added warning), the receipt's identity made to match, its
    # facts left: the new identity is not the run's, so the receipt is rendered and matched again.
    edited = plan.model_copy(update={"warnings": [*plan.warnings, "nothing to see"]})
    data = plan_bytes(edited)
    new = identity_of(json.loads(data))
    write_whole(planned / PLAN_FILE, data)
    write_whole(planned / "receipt.md", (planned / "receipt.md").read_text().replace(identity, new))
    assert "does not state what the plan holds" in _refused(planned)


def test_the_session_records_the_receipt_it_was_given(tmp_path: Path) -> None:
    run = Run(tmp_path)
    driver = run.driver()
    driver.receipt = "sha256:" + "2" * 64
    driver.run()
    with Ledger.reading(run.root) as ledger:
        started = [e.event for e in ledger.events(RunStarted)]
    assert [s.receipt for s in started if isinstance(s, RunStarted)] == [driver.receipt]


def _upgraded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer version whose ``plan_task`` derives one field differently (a task's timeout)."""
    def newer(*args: Any, **kwargs: Any) -> PlanTask:
        task = plan_task(*args, **kwargs)
        return task.model_copy(update={"agent_timeout_sec": task.agent_timeout_sec + 1})

    monkeypatch.setattr(verify, "plan_task", newer)


def test_a_resume_after_an_upgrade_that_derives_a_field_otherwise_is_accepted(
        planned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    receipt = verify_plan(plan, identity, planned / PLAN_FILE)
    _upgraded(monkeypatch)
    # The first execute under the new version derives the task again and finds the difference.
    assert "is not what its directory says" in _refused(planned)
    _started(planned, identity, receipt)  # the session of the earlier version passed its check
    assert verify_plan(plan, identity, planned / PLAN_FILE) == receipt


def test_a_plan_edited_after_the_run_started_gets_the_whole_check(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    _started(planned, identity, verify_plan(plan, identity, planned / PLAN_FILE))
    # A derived field edited (the receipt does not show it): a new identity, so no resume of it.
    task = plan.tasks[0]
    edited = plan.model_copy(update={"tasks": [task.model_copy(update={"workdir": "/elsewhere"}),
                                               *plan.tasks[1:]]})
    data = plan_bytes(edited)
    write_whole(planned / PLAN_FILE, data)
    assert identity_of(json.loads(data)) != identity
    assert f"task {task.id} is not what its directory says" in _refused(planned)


def test_a_first_execute_refuses_an_edited_derived_field(planned: Path) -> None:
    plan, _ = load_plan_file(planned / PLAN_FILE)
    task = plan.tasks[-1]
    edited = plan.model_copy(update={"tasks": [*plan.tasks[:-1],
                                               task.model_copy(update={"has_solution": not task.has_solution})]})
    write_whole(planned / PLAN_FILE, plan_bytes(edited))
    assert f"task {task.id} is not what its directory says" in _refused(planned)
