"""The build phase (scheduler/builds.py): which snapshots a plan needs, one build per distinct
image with its own concurrency, a failed build failing its cells once as `stack`, and a resume
that builds nothing the ledger says was built unless the snapshot is gone. A fake builder
stands in for Daytona; the real driver runs on the in-process pool and a virtual clock."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.cells.spec import AttemptSpec
from ray_bench.clock import FakeClock
from ray_bench.errors import SandboxCreateError, SandboxQuotaError
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary, ExecFacts
from ray_bench.models.build import SnapshotSeen
from ray_bench.models.plan import Plan
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.builds import (
    BUILD_FINISHED,
    BUILD_STARTED,
    BUILDER_CLOSE_SEC,
    STOP_POLL_SEC,
    BuildTarget,
    build_targets,
    built_before,
    progress_line,
    quota_line,
    quota_plan,
    run_build_phase,
    snapshot_name,
)
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from ray_bench.sim.driven import roomy_host


class FakeBuilder:
    """Snapshots in a dict; ``fail`` names images whose build fails; counts what it did.
    ``quota``: the organisation's snapshot quota (a build past it is refused as the API does);
    ``made`` may be seeded with snapshots made earlier (the oldest first)."""

    def __init__(self, fail: frozenset[str] = frozenset(), delay: float = 0.01, quota: int | None = None) -> None:
        self.made: set[str] = set()
        self.order: list[str] = []  # when each was made or last used, oldest first
        self.fail = fail
        self.delay = delay
        self.quota = quota
        self.builds: list[str] = []
        self.deleted: list[str] = []
        self.running = self.peak = 0
        self.closed = 0

    async def snapshots(self) -> list[SnapshotSeen]:
        return [SnapshotSeen(name=n, state="active", last_used=float(self.order.index(n)))
                for n in sorted(self.made)]

    async def delete(self, snapshot: str) -> None:
        self.deleted.append(snapshot)
        self.made.discard(snapshot)

    async def present(self, snapshot: str) -> bool:
        return snapshot in self.made

    async def build(self, target: BuildTarget, timeout_sec: float) -> None:
        self.builds.append(target.snapshot)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.delay)
            if target.image in self.fail:
                raise SandboxCreateError(f"Daytona snapshot {target.snapshot} is build_failed: no such image")
            if self.quota is not None and len(self.made) >= self.quota and target.snapshot not in self.made:
                raise SandboxQuotaError(f"create snapshot {target.snapshot}: Snapshot quota exceeded. "
                                        f"Maximum allowed: {self.quota}", resource="snapshots")
            self.made.add(target.snapshot)
            self.order.append(target.snapshot)
        finally:
            self.running -= 1

    async def close(self) -> None:
        self.closed += 1


def _target(i: int, image: str | None = None) -> BuildTarget:
    return BuildTarget(snapshot=f"s{i}", image=image or f"img:{i}", cpu=1, memory_gib=1, disk_gib=3,
                       tasks=(f"t{i}",), cells=(f"c{i}a", f"c{i}b"))


def _phase(targets: list[BuildTarget], builder: FakeBuilder, events: list[tuple[str, dict[str, Any]]],
           concurrency: int = 2, quota: int = 30) -> Any:
    lines: list[str] = []
    outcome = run_build_phase(
        targets, lambda: builder, ledger_finished=[d for k, d in events if k == BUILD_FINISHED],
        record=lambda kind, data: events.append((kind, data)), progress=lines.append,
        concurrency=concurrency, timeout_sec=60, quota=quota)
    return outcome, lines


def test_the_quota_plan_reuses_deletes_ours_least_recently_used_and_leaves_the_rest_unbuilt() -> None:
    targets = [_target(i) for i in range(4)]
    seen = [SnapshotSeen(name="s0", state="active", last_used=5.0),  # needed and there: free
            SnapshotSeen(name="s1", state="inactive"),  # needed, inactive: activating it counts
            SnapshotSeen(name="rb-build-new", state="active", last_used=9.0),
            SnapshotSeen(name="rb-build-old", state="active", last_used=1.0),
            SnapshotSeen(name="theirs", state="active", last_used=0.0),  # not ray-bench's: never deleted
            SnapshotSeen(name="rb-build-gone", state="error")]  # counts nothing
    fit = quota_plan(targets, seen, quota=4)
    assert [t.snapshot for t in fit.make] == ["s0", "s1", "s2"]
    assert fit.delete == ("rb-build-old", "rb-build-new")
    assert [t.snapshot for t in fit.unbuilt] == ["s3"]
    assert "more than the organisation's quota of 2" in quota_line(targets, 2)


def test_a_hundred_images_under_a_quota_of_thirty_complete_with_no_failed_cell() -> None:
    builder = FakeBuilder(quota=30)
    for i in range(10):  # an earlier run's snapshots fill a third of the quota
        builder.made.add(f"rb-build-old{i}")
        builder.order.append(f"rb-build-old{i}")
    events: list[tuple[str, dict[str, Any]]] = []
    outcome, _ = _phase([_target(i) for i in range(100)], builder, events, concurrency=8, quota=30)
    assert not outcome.failed
    assert len(outcome.unbuilt) == 70 and outcome.built == 30
    assert builder.deleted == [f"rb-build-old{i}" for i in range(10)]  # least recently used first
    assert len(builder.made) == 30
    cells = {c for i in range(100) for c in (f"c{i}a", f"c{i}b")}
    unbuilt = {c for t in outcome.unbuilt for c in (f"c{t[1:]}a", f"c{t[1:]}b")}
    assert set(outcome.snapshots) == cells - unbuilt  # the others create from their image


def test_a_quota_refusal_makes_room_or_leaves_the_cells_to_their_image_never_fails_them() -> None:
    builder = FakeBuilder(quota=1)
    builder.made.add("rb-build-stale")
    builder.order.append("rb-build-stale")

    async def none() -> list[SnapshotSeen]:
        return []  # the listing did not answer: the plan sees room

    builder.snapshots = none  # type: ignore[method-assign]
    events: list[tuple[str, dict[str, Any]]] = []
    outcome, _ = _phase([_target(0)], builder, events)
    assert (outcome.failed, outcome.unbuilt) == ({}, ["s0"])  # no listing: no room could be made
    assert [d.get("quota") for k, d in events if k == BUILD_FINISHED] == [True]


def test_one_build_per_target_within_its_concurrency_and_a_failure_fails_only_its_cells() -> None:
    builder = FakeBuilder(fail=frozenset({"img:2"}))
    events: list[tuple[str, dict[str, Any]]] = []
    outcome, lines = _phase([_target(i) for i in range(5)], builder, events)
    assert sorted(builder.builds) == [f"s{i}" for i in range(5)]
    assert builder.peak == 2 and builder.closed == 1
    assert list(outcome.failed) == ["s2"] and outcome.failed["s2"][0] == ("c2a", "c2b")
    assert "build_failed" in outcome.failed["s2"][1]
    assert outcome.snapshots == {c: f"s{i}" for i in (0, 1, 3, 4) for c in (f"c{i}a", f"c{i}b")}
    assert [k for k, _ in events].count(BUILD_STARTED) == 5
    finished = [d for k, d in events if k == BUILD_FINISHED]
    assert sorted((d["snapshot"], d["ok"]) for d in finished) == [
        ("s0", True), ("s1", True), ("s2", False), ("s3", True), ("s4", True)]
    assert lines[-1].startswith("builds [5/5]") and any("FAILED s2" in line for line in lines)


def test_a_resume_builds_only_what_the_ledger_lacks_or_what_is_gone() -> None:
    builder = FakeBuilder()
    events: list[tuple[str, dict[str, Any]]] = []
    _phase([_target(0), _target(1)], builder, events)
    assert built_before(d for k, d in events if k == BUILD_FINISHED) == {"s0", "s1"}
    builder.builds.clear()
    builder.made.discard("s1")  # deleted behind the run's back
    outcome, lines = _phase([_target(0), _target(1), _target(2)], builder, events)
    assert sorted(builder.builds) == ["s1", "s2"]
    assert outcome.reused == 1 and outcome.built == 2
    rebuilt = [d for k, d in events if k == BUILD_STARTED and d["snapshot"] == "s1"]
    assert [d["rebuild"] for d in rebuilt] == [False, True]
    assert any("s0 built earlier" in line for line in lines)


def test_a_build_past_its_timeout_fails_with_the_setting_named() -> None:
    builder = FakeBuilder(delay=5.0)
    events: list[tuple[str, dict[str, Any]]] = []
    outcome = run_build_phase([_target(0)], lambda: builder, ledger_finished=[],
                              record=lambda k, d: events.append((k, d)), progress=lambda _: None,
                              timeout_sec=0.05)
    assert "build_timeout_min" in outcome.failed["s0"][1]
    assert not outcome.snapshots


def test_a_stop_during_the_builds_returns_within_its_bound() -> None:
    builder = FakeBuilder(delay=60.0)  # builds as slow as a cold multi-GB image
    events: list[tuple[str, dict[str, Any]]] = []
    began = time.monotonic()
    outcome = run_build_phase([_target(i) for i in range(3)], lambda: builder, ledger_finished=[],
                              record=lambda k, d: events.append((k, d)), progress=lambda _: None,
                              stopping=lambda: time.monotonic() - began > 0.3)
    took = time.monotonic() - began
    assert outcome.stopped and not outcome.snapshots and not outcome.failed
    assert took < 0.3 + STOP_POLL_SEC + BUILDER_CLOSE_SEC and took < 2.0, took
    assert builder.closed == 1 and not any(k == BUILD_FINISHED for k, _ in events)


def test_progress_line() -> None:
    assert progress_line(2, 5, 1, 1, "built x") == "builds [2/5] (1 building, 1 failed): built x"


def test_snapshot_names_follow_the_source_and_size() -> None:
    assert snapshot_name("busybox:1", (1, 1, 3)) == snapshot_name("busybox:1", (1, 1, 3))
    assert snapshot_name("busybox:1", (1, 1, 3)) != snapshot_name("busybox:1", (2, 1, 3))
    assert snapshot_name("busybox:1", (1, 1, 3)).startswith("rb-build-")


# -- the driver ---------------------------------------------------------------------------------


class _World:
    """Every attempt takes 10 s and is solved; remembers each spec's image."""

    def __init__(self) -> None:
        self.images: list[str | None] = []

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        self.images.append(spec.image)
        summary = AttemptSummary(attempt_id=spec.attempt_id, cell_id=spec.cell_id, task=spec.task_id,
                                 arm=spec.arm, rep=spec.rep, account=spec.account, backend=spec.backend,
                                 agent=ExecFacts(exit_code=0), verifier=ExecFacts(exit_code=0), reward=1.0)
        return 1.0, 10.0, summary

    def end(self, spec: AttemptSpec, now: float, delivered: bool) -> None:
        return None


def _daytona_plan(tmp: Path, image: str = "busybox:1.36") -> tuple[Plan, str, Path]:
    suite, accounts = make_suite(tmp / "s", tasks=["hello-world", "sum-list"], reps=2, backend="daytona",
                                 backends={"daytona": {"image": image, "max_sandboxes": 4}},
                                 preflight_cells=0)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp / "runs", run_id="bp").run_root
    plan, identity = load_plan_file(root / PLAN_FILE)
    return plan, identity, root


def _run(planned: tuple[Plan, str, Path], world: _World, builder: FakeBuilder) -> RunOutcome:
    plan, identity, root = planned
    clock = FakeClock()
    options = RunOptions(tick_sec=1.0, state_root=root.parent / "state")
    driver = Driver(plan, identity, root, InProcessPool(clock, world), CoreGate(plan.accounts, clock=clock.now),
                    roomy_host(plan), options=options, clock=clock)
    driver.snapshot_builder = lambda: builder
    return driver.run()


def _events(root: Path, kind: str) -> list[dict[str, Any]]:
    with Ledger.reading(root) as ledger:
        return [e.data for e in ledger.events(kind)]


def test_the_driver_builds_once_and_every_cell_creates_from_the_snapshot(tmp_path: Path) -> None:
    planned = _daytona_plan(tmp_path)
    plan = planned[0]
    [target] = build_targets(plan)
    assert len(target.cells) == len(plan.cells) == 8
    world, builder = _World(), FakeBuilder()
    outcome = _run(planned, world, builder)
    assert outcome.exit_code == 0 and outcome.counts["valid"] == 8
    assert builder.builds == [target.snapshot]
    assert set(world.images) == {f"snapshot:{target.snapshot}"}
    assert [d["ok"] for d in _events(planned[2], BUILD_FINISHED)] == [True]


def test_a_failed_build_fails_its_cells_once_as_stack_and_starts_none(tmp_path: Path) -> None:
    planned = _daytona_plan(tmp_path, image="broken:1")
    world, builder = _World(), FakeBuilder(fail=frozenset({"broken:1"}))
    outcome = _run(planned, world, builder)
    assert outcome.exit_code == 1 and outcome.counts["failed"] == 8
    assert world.images == [] and outcome.attempts_run == 0
    [finished] = _events(planned[2], BUILD_FINISHED)
    assert finished["ok"] is False and "build_failed" in finished["error"] and finished["cells"] == 8
    # the final line names the build, not "failed after N attempts" that were never made
    assert outcome.detail.startswith("8 cells failed: 8 never started (stack: snapshot rb-build-"), outcome.detail
    assert "build failed" in outcome.detail and "attempts" not in outcome.detail


def test_a_resume_does_not_rebuild(tmp_path: Path) -> None:
    planned = _daytona_plan(tmp_path, image="broken:1")
    builder = FakeBuilder(fail=frozenset({"broken:1"}))
    assert _run(planned, _World(), builder).exit_code == 1
    builder.fail = frozenset()  # the operator fixed the image's registry: the resume builds it
    world = _World()
    assert _run(planned, world, builder).exit_code == 0
    assert len(builder.builds) == 2 and len(world.images) == 8
    builder.builds.clear()
    again = _run(planned, _World(), builder)  # nothing left to run, nothing rebuilt
    assert again.exit_code == 0 and builder.builds == []


@pytest.mark.parametrize("image", ["snapshot:named"])
def test_a_named_snapshot_needs_no_build(tmp_path: Path, image: str) -> None:
    plan, _, _ = _daytona_plan(tmp_path, image=image)
    assert build_targets(plan) == []


def test_the_simulators_builder_makes_every_snapshot_without_a_service() -> None:
    from ray_bench.scheduler.builds import InstantBuilder

    outcome = run_build_phase([_target(0), _target(1)], InstantBuilder, ledger_finished=[],
                              record=lambda k, d: None, progress=lambda _: None)
    assert outcome.built == 2 and not outcome.failed
    assert outcome.snapshots == {"c0a": "s0", "c0b": "s0", "c1a": "s1", "c1b": "s1"}
