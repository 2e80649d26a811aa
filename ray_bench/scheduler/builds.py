"""The build phase: before the fan-out, one snapshot per distinct sandbox image of the plan's
Daytona cells, so that no cell pays (or times out on) a cold image build.

Why: on Daytona every image create is a declarative build (``FROM image``), cached per runner
for 24 h and spread across runners; 500 cells of a new image start many cold multi-GB builds at
once against a create timeout of minutes. One snapshot per image, built once with its own
concurrency and a timeout sized for builds (tens of minutes), then every cell creates from it.

The policy here is pure (which snapshots a plan needs, what the ledger says was built, the
progress line); the Daytona calls are behind :class:`SnapshotBuilder`
(``ray_bench/sandboxes/daytona/snapshots.py``), and a fake stands in for it in the unit tests.
The ledger records ``snapshot_build_started`` and ``snapshot_build_finished`` events; a resume
builds again only what it has no finished build for, or whose snapshot is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ray_bench.errors import SandboxQuotaError
from ray_bench.models.build import BUILT_PREFIX, SNAPSHOT_PREFIX, BuildTarget, SnapshotSeen
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.plan.attempts import CellSandbox, cell_sandbox
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.capabilities import capabilities, having
from ray_bench.sandboxes.daytona_pool import DaytonaPool

if TYPE_CHECKING:
    from ray_bench.ledger.store import Ledger
    from ray_bench.scheduler.observers import RunObserver
    from ray_bench.scheduler.runstate import RunState

BUILD_STARTED = "snapshot_build_started"
BUILD_FINISHED = "snapshot_build_finished"
SNAPSHOT_DELETED = "snapshot_deleted"
#: Defaults when the plan's Daytona pool names none (``DaytonaPool.build_*``).
DEFAULT_BUILD_CONCURRENCY = 4
DEFAULT_BUILD_TIMEOUT_MIN = 30.0
#: Daytona's default ``snapshotQuota`` per organisation (``DEFAULT_ORG_QUOTA_SNAPSHOT_QUOTA``,
#: ``apps/api/src/config/configuration.ts``), when the pool names none.
DEFAULT_SNAPSHOT_QUOTA = 30
#: How often the phase asks whether the run is stopping, and how long it then waits for its
#: abandoned builds and its builder to close: a stop during builds returns within their sum.
STOP_POLL_SEC = 0.5
BUILDER_CLOSE_SEC = 5.0
#: Snapshot states that count against the quota (``SNAPSHOT_STATES_CONSUMING_RESOURCES``,
#: ``apps/api/src/organization/constants``): not ``inactive``, ``error``, ``build_failed``, ``removing``.
CONSUMING = frozenset({"building", "pending", "pulling", "active"})


@dataclass(frozen=True)
class QuotaPlan:
    """What the build phase does under the snapshot quota: ``make`` (build or activate, most
    cells first), ``delete`` (ray-bench's own snapshots this plan does not need, least recently
    used first, to make room), ``unbuilt`` (no room: their cells create from their image, a
    declarative build per create, which holds no snapshot)."""

    make: tuple[BuildTarget, ...]
    delete: tuple[str, ...]
    unbuilt: tuple[BuildTarget, ...]


def quota_plan(targets: Sequence[BuildTarget], seen: Iterable[SnapshotSeen], quota: int) -> QuotaPlan:
    """Fit ``targets`` under ``quota`` given the organisation's snapshots ``seen``. A target whose
    snapshot is there and counting costs nothing; one to build, or ``inactive`` (activating it
    counts it again), costs one. Pure."""
    seen = list(seen)
    states = {s.name: s.state for s in seen}
    wanted = {t.snapshot for t in targets}
    used = sum(1 for s in seen if s.state in CONSUMING)
    spare = sorted((s for s in seen if s.ours and s.state in CONSUMING and s.name not in wanted),
                   key=lambda s: (s.last_used, s.name))
    make: list[BuildTarget] = []
    delete: list[str] = []
    unbuilt: list[BuildTarget] = []
    for target in sorted(targets, key=lambda t: (-len(t.cells), t.snapshot)):
        if states.get(target.snapshot) in CONSUMING:
            make.append(target)  # there (or on its way): adopted, no new room
        elif used < quota:
            used += 1
            make.append(target)
        elif spare:
            delete.append(spare.pop(0).name)
            make.append(target)
        else:
            unbuilt.append(target)
    return QuotaPlan(tuple(make), tuple(delete), tuple(unbuilt))


def quota_line(targets: Sequence[BuildTarget], quota: int) -> str:
    """The receipt's line: the distinct snapshots the plan's Daytona cells need against the quota."""
    if len(targets) <= quota:
        return (f"snapshots: {len(targets)} distinct (image, size) of the organisation's quota of {quota}; "
                "ray-bench's own snapshots it does not need are deleted, least recently used first, to make room")
    return (f"snapshots: {len(targets)} distinct (image, size), more than the organisation's quota of {quota}: "
            f"at most {quota} are built (most cells first, ray-bench's own unused snapshots deleted to make "
            f"room); the cells of the other {len(targets) - quota} create from their image (a build per create)")


class SnapshotBuilder(Protocol):
    """The Daytona side of the phase (one event loop)."""

    async def present(self, snapshot: str) -> bool:
        """The snapshot exists and is active."""
        ...

    async def build(self, target: BuildTarget, timeout_sec: float) -> None:
        """Make the snapshot (adopting one of that name already there, activating it when
        ``inactive``); raise :class:`ray_bench.errors.SandboxError` with the service's reason when
        it fails (:class:`ray_bench.errors.SandboxQuotaError` when the quota refused it)."""
        ...

    async def snapshots(self) -> list[SnapshotSeen]:
        """Every snapshot of the organisation."""
        ...

    async def delete(self, snapshot: str) -> None:
        """Delete a snapshot (it stops counting at once: ``removing``)."""
        ...

    async def close(self) -> None: ...


class InstantBuilder:
    """A builder that makes every snapshot at once, with no I/O: the simulator's (it models no
    build time, and must never reach a service)."""

    async def present(self, snapshot: str) -> bool:
        return True

    async def build(self, target: BuildTarget, timeout_sec: float) -> None:
        return None

    async def snapshots(self) -> list[SnapshotSeen]:
        return []

    async def delete(self, snapshot: str) -> None:
        return None

    async def close(self) -> None:
        return None


def _size(box: CellSandbox, default: tuple[int, int, int]) -> tuple[int, int, int]:
    """Whole vCPUs and GiB, as the backend asks Daytona for them (``DaytonaPool.asked``)."""
    return (math.ceil(box.cpus) if box.cpus else default[0],
            math.ceil(box.memory_mb / 1024) if box.memory_mb else default[1],
            math.ceil(box.disk_mb / 1024) if box.disk_mb else default[2])


def snapshot_name(source: str, size: tuple[int, int, int]) -> str:
    """A name fixed by what is built and its size: a resume, a rerun and a second suite of the
    same image find the snapshot already made."""
    digest = hashlib.sha256(f"{source}\0{size}".encode()).hexdigest()[:20]
    return f"{BUILT_PREFIX}{digest}"


def build_backend(plan: Plan) -> str | None:
    """The plan's backend whose cells get a build phase (capability ``prebuild``), if any."""
    return next(iter(having(plan.backends, lambda c: c.prebuild)), None)


def build_targets(plan: Plan, default_size: tuple[int, int, int] = (1, 1, 3)) -> list[BuildTarget]:
    """One target per distinct (image or Dockerfile, size) among the plan's cells on a backend
    that builds before the fan-out (Daytona). A cell already on a named snapshot, or on the
    organisation's default one (no image and no Dockerfile), needs none. A Dockerfile is named
    by its task's checksum (its content)."""
    tasks = {t.id: t for t in plan.tasks}
    arms = {a.name: a for a in plan.arms}
    grouped: dict[tuple[str | None, str | None, tuple[int, int, int]], list[PlanCell]] = {}
    keys: dict[tuple[str | None, str | None, tuple[int, int, int]], str] = {}
    for cell in plan.cells:
        if not capabilities(cell.backend).prebuild:
            continue
        task = tasks[cell.task]
        box = cell_sandbox(task, arms[cell.arm], plan.backends.get(cell.backend))
        if box.image is not None and box.image.startswith(SNAPSHOT_PREFIX):
            continue
        if box.image is None and box.build_context is None:
            continue
        size = _size(box, default_size)
        dockerfile = None if box.image is not None else box.build_context
        key = (box.image, dockerfile, size)
        grouped.setdefault(key, []).append(cell)
        keys[key] = box.image if box.image is not None else f"dockerfile:{task.checksum}"
    out = []
    for key, cells in grouped.items():
        image, dockerfile, size = key
        out.append(BuildTarget(snapshot=snapshot_name(keys[key], size), image=image, dockerfile_dir=dockerfile,
                               cpu=size[0], memory_gib=size[1], disk_gib=size[2],
                               tasks=tuple(dict.fromkeys(c.task for c in cells)),
                               cells=tuple(c.id for c in cells)))
    return sorted(out, key=lambda t: t.snapshot)


def built_before(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """Snapshots a ``snapshot_build_finished`` event of this ledger says were made (the last
    word on each wins: a later failure, say after the snapshot was deleted, undoes it)."""
    built: dict[str, bool] = {}
    for data in events:
        name = data.get("snapshot")
        if isinstance(name, str):
            built[name] = bool(data.get("ok"))
    return {name for name, ok in built.items() if ok}


async def _present(builder: SnapshotBuilder, snapshot: str) -> bool:
    """Whether the snapshot is there; a question the service did not answer is "build it"
    (the build adopts a snapshot of that name that exists)."""
    try:
        return await builder.present(snapshot)
    except Exception:
        return False


def progress_line(done: int, total: int, building: int, failed: int, last: str) -> str:
    """``execute``'s line for the phase."""
    tail = f", {failed} failed" if failed else ""
    return f"builds [{done}/{total}] ({building} building{tail}): {last}"


@dataclass
class BuildOutcome:
    """The phase's result: the snapshot each built cell creates from, and the cells of each
    failed build with its reason (they fail once, as ``stack``, not one create each)."""

    snapshots: dict[str, str] = field(default_factory=dict)  # cell id -> snapshot name
    failed: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)  # snapshot -> (cells, why)
    built: int = 0
    reused: int = 0
    #: Snapshots not made for want of quota room: their cells create from their image.
    unbuilt: list[str] = field(default_factory=list)
    #: ray-bench's own snapshots deleted to make room.
    deleted: list[str] = field(default_factory=list)
    #: A stop came during the phase: it returned without waiting for its builds.
    stopped: bool = False


def run_build_phase(
    targets: Sequence[BuildTarget],
    builder_factory: Callable[[], SnapshotBuilder],
    *,
    ledger_finished: Iterable[Mapping[str, Any]],
    record: Callable[[str, dict[str, Any]], None],
    progress: Callable[[str], None],
    concurrency: int = DEFAULT_BUILD_CONCURRENCY,
    timeout_sec: float = DEFAULT_BUILD_TIMEOUT_MIN * 60,
    quota: int = DEFAULT_SNAPSHOT_QUOTA,
    stopping: Callable[[], bool] | None = None,
) -> BuildOutcome:
    """Make every target's snapshot that fits under the organisation's snapshot ``quota``
    (:func:`quota_plan`: ray-bench's own snapshots the plan does not need are deleted, least
    recently used first, to make room), at most ``concurrency`` at once, each within
    ``timeout_sec``. A target the ledger says was built is checked, not rebuilt (unless its
    snapshot is gone). A quota refusal (another run took the room) is capacity: room is made
    once more, else the target's cells create from their image; never a failed cell.
    ``record`` appends a ledger event, ``progress`` prints a line. ``stopping`` is asked every
    :data:`STOP_POLL_SEC`: once it says so (a signal, ``pause --now``) the builds in flight are
    abandoned (the service finishes them; a resume adopts them by name) and the phase returns
    within :data:`STOP_POLL_SEC` + :data:`BUILDER_CLOSE_SEC`, its cells still pending."""
    outcome = BuildOutcome()
    if not targets:
        return outcome
    before = built_before(ledger_finished)
    counts = {"done": 0, "building": 0, "failed": 0}

    def line(last: str) -> None:
        progress(progress_line(counts["done"], len(targets), counts["building"], counts["failed"], last))

    async def one(builder: SnapshotBuilder, gate: asyncio.Semaphore, target: BuildTarget) -> None:
        async with gate:
            if target.snapshot in before and await _present(builder, target.snapshot):
                outcome.reused += 1
                counts["done"] += 1
                line(f"{target.snapshot} built earlier ({target.source})")
                return
            record(BUILD_STARTED, {"snapshot": target.snapshot, "source": target.source,
                                   "tasks": list(target.tasks), "rebuild": target.snapshot in before})
            counts["building"] += 1
            line(f"building {target.snapshot} ({target.source})")
            started = time.monotonic()
            error: str | None = None
            try:
                await _build_in_room(builder, target, timeout_sec, wanted, record, outcome)
            except SandboxQuotaError as exc:
                counts["building"] -= 1
                counts["done"] += 1
                outcome.unbuilt.append(target.snapshot)
                record(BUILD_FINISHED, {"snapshot": target.snapshot, "source": target.source,
                                        "tasks": list(target.tasks), "ok": False, "quota": True,
                                        "error": str(exc)[:2000], "cells": len(target.cells)})
                line(f"no room for {target.snapshot} under the snapshot quota: its cells create from its image")
                return
            except TimeoutError:
                error = f"no snapshot within {timeout_sec:g}s (the pool's build_timeout_min)"
            except Exception as exc:  # the service's reason, recorded; the cells fail as stack
                error = f"{type(exc).__name__}: {exc}"[:2000]
            counts["building"] -= 1
            counts["done"] += 1
            seconds = round(time.monotonic() - started, 3)
            record(BUILD_FINISHED, {"snapshot": target.snapshot, "source": target.source,
                                    "tasks": list(target.tasks), "ok": error is None, "error": error,
                                    "seconds": seconds, "cells": len(target.cells)})
            if error is None:
                outcome.built += 1
                line(f"built {target.snapshot} in {seconds:g}s")
            else:
                counts["failed"] += 1
                outcome.failed[target.snapshot] = (target.cells, error)
                line(f"FAILED {target.snapshot} ({target.source}): {error.splitlines()[0][:160]}")

    wanted = {t.snapshot for t in targets}

    async def main() -> None:
        builder = builder_factory()
        gate = asyncio.Semaphore(max(1, concurrency))
        try:
            fit = quota_plan(targets, await _seen(builder), quota)
            for name in fit.delete:
                await _delete(builder, name, record, outcome)
            for target in fit.unbuilt:
                outcome.unbuilt.append(target.snapshot)
                counts["done"] += 1
                line(f"no room for {target.snapshot} under the snapshot quota of {quota}: "
                     "its cells create from its image")
            tasks = {asyncio.ensure_future(one(builder, gate, t)) for t in fit.make}
            while tasks:
                _, tasks = await asyncio.wait(tasks, timeout=STOP_POLL_SEC)
                if tasks and stopping is not None and stopping():
                    outcome.stopped = True
                    for task in tasks:
                        task.cancel()
                    await asyncio.wait(tasks, timeout=BUILDER_CLOSE_SEC)
                    line(f"stopped: {len(tasks)} builds abandoned (a resume adopts what the service finishes)")
                    break
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(builder.close(), BUILDER_CLOSE_SEC)

    asyncio.run(main())
    if outcome.stopped:
        return outcome  # no snapshot map: nothing runs after a stop, and a resume checks again
    for target in targets:
        if target.snapshot not in outcome.failed and target.snapshot not in outcome.unbuilt:
            outcome.snapshots.update(dict.fromkeys(target.cells, target.snapshot))
    return outcome


async def _seen(builder: SnapshotBuilder) -> list[SnapshotSeen]:
    """The organisation's snapshots; a listing the service did not answer is taken as none
    (the builds then meet the quota's refusal, which makes room)."""
    try:
        return await builder.snapshots()
    except Exception:
        return []


async def _delete(builder: SnapshotBuilder, name: str, record: Callable[[str, dict[str, Any]], None],
                  outcome: BuildOutcome) -> None:
    try:
        await builder.delete(name)
    except Exception as exc:  # it stays; the quota's refusal will say so
        record(SNAPSHOT_DELETED, {"snapshot": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    outcome.deleted.append(name)
    record(SNAPSHOT_DELETED, {"snapshot": name, "ok": True, "why": "room under the snapshot quota"})


async def _build_in_room(builder: SnapshotBuilder, target: BuildTarget, timeout_sec: float, wanted: set[str],
                         record: Callable[[str, dict[str, Any]], None], outcome: BuildOutcome) -> None:
    """Build ``target``; refused by the quota, delete one more of ray-bench's own snapshots the
    plan does not need (least recently used) and ask once more."""
    try:
        await asyncio.wait_for(builder.build(target, timeout_sec), timeout_sec)
        return
    except SandboxQuotaError:
        spare = sorted((s for s in await _seen(builder)
                        if s.ours and s.state in CONSUMING and s.name not in wanted),
                       key=lambda s: (s.last_used, s.name))
        if not spare:
            raise
        await _delete(builder, spare[0].name, record, outcome)
    await asyncio.wait_for(builder.build(target, timeout_sec), timeout_sec)


@dataclass(frozen=True)
class BuildSettings:
    """The phase's concurrency, its timeout per build (seconds), the size of a sandbox that names
    none and the organisation's snapshot quota."""

    concurrency: int = DEFAULT_BUILD_CONCURRENCY
    timeout_sec: float = DEFAULT_BUILD_TIMEOUT_MIN * 60
    default_size: tuple[int, int, int] = (1, 1, 3)
    snapshot_quota: int = DEFAULT_SNAPSHOT_QUOTA


def build_settings(plan: Plan) -> BuildSettings:
    """:class:`BuildSettings` from the plan's Daytona pool (``backends.daytona.options.pool``),
    else defaults."""
    name = build_backend(plan)
    backend = plan.backends.get(name) if name else None
    pool = backend.options.get("pool") if backend else None
    if not pool:
        return BuildSettings()
    p = DaytonaPool.model_validate(pool)
    return BuildSettings(p.build_concurrency, p.build_timeout_min * 60,
                         (p.default_vcpu, p.default_memory_gib, p.default_disk_gib), p.snapshot_quota)


def daytona_builder(plan: Plan) -> Callable[[], SnapshotBuilder]:
    """The real builder: the plan's Daytona backend options, in the driver's process."""

    def make() -> SnapshotBuilder:
        from ray_bench.sandboxes.daytona.backend import DaytonaBackend
        from ray_bench.sandboxes.daytona.snapshots import DaytonaSnapshotBuilder

        name = build_backend(plan)
        assert name is not None  # made only for a plan with cells to build
        made = make_backend(name, **dict(plan.backends[name].options))
        assert isinstance(made, DaytonaBackend)
        return DaytonaSnapshotBuilder(made)

    return make


def build_phase(plan: Plan, ledger: Ledger, state: RunState, observer: RunObserver,
                builder_factory: Callable[[], SnapshotBuilder] | None = None,
                stopping: Callable[[], bool] | None = None) -> dict[str, str]:
    """The driver's hook: build what the pending cells need, fail the cells of a failed build
    (as ``stack``, once), and return cell id -> snapshot for the rest (none when ``stopping``
    said so during the phase: the run stops next)."""
    pending = {c for c, s in state.cells.items() if s.state == "pending"}
    settings = build_settings(plan)
    targets = []
    for target in build_targets(plan, settings.default_size):
        cells = tuple(c for c in target.cells if c in pending)
        if cells:
            targets.append(target.model_copy(update={"cells": cells}))
    if not targets:
        return {}

    from ray_bench.scheduler.observers import BuildProgress

    def progress(line: str) -> None:
        observer.on_event(BuildProgress(line))

    outcome = run_build_phase(
        targets, builder_factory or daytona_builder(plan),
        ledger_finished=[e.data for e in ledger.events(BUILD_FINISHED)],
        record=ledger.event, progress=progress, concurrency=settings.concurrency,
        timeout_sec=settings.timeout_sec, quota=settings.snapshot_quota, stopping=stopping)
    for snapshot, (cells, why) in outcome.failed.items():
        state.fail(cells, "stack", f"snapshot {snapshot} build failed: {why}")
    return outcome.snapshots
