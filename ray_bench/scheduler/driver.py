"""The driver of ``ray-bench execute``: the scheduler loop around the ledger, the gate and the
cell runners on Ray.

Order of work for every new attempt: the inputs are re-checked (drift), the gate picks an
account, the attempt is recorded as started in the ledger, and only then is it sent to a
runner, which creates the sandbox. Finished attempts are classified and recorded before
anything else happens to their cell. A crash at any point leaves started attempts without a
terminal record; the next ``execute`` marks them stale, removes their sandboxes by label and
gives their cells new attempts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ray_bench import runroot
from ray_bench.accounts.health import probe_due, probe_effect, probe_event_kind
from ray_bench.accounts.probe import run_probe
from ray_bench.accounts.store import FILE as ACCOUNTS_FILE
from ray_bench.accounts.store import AccountStore
from ray_bench.cells.nodes import NodeCheck, summary_line
from ray_bench.cells.spec import DEFAULT_RUNNERS_PER_NODE, AttemptSpec
from ray_bench.clock import Clock, SystemClock
from ray_bench.config.bounded import load_state_json
from ray_bench.errors import RunStopped
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit, circuit_from, scope_account
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow, Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan, PlanCell, PlanTask
from ray_bench.plan.attempts import AttemptSpecs
from ray_bench.plan.drift import DriftGuard
from ray_bench.runroot import HEARTBEAT_SEC, RunPaths, disk_full_detail, is_disk_full
from ray_bench.sandboxes.daytona_pool import DaytonaPool
from ray_bench.sandboxes.host import read_available_mb
from ray_bench.sandboxes.supervisor import (
    HostSupervision,
    Reserve,
    ResourceHalt,
    ResourceSupervisor,
    Supervision,
    docker_container_lister,
    halt_path,
    require_no_halt,
    write_run_halt,
)
from ray_bench.scheduler import stops
from ray_bench.scheduler.admission import Gate
from ray_bench.scheduler.builds import SnapshotBuilder, build_phase
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import FinishCore
from ray_bench.scheduler.launch import AskGate, Halt, LaunchCore, Round
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted, NullObserver, RunObserver, Tick
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.state import default_state_root

#: How often the loop asks which held or cooling accounts are due a probe (health.probe_due).
PROBE_CHECK_SEC = 10.0

PAUSE_FILE = runroot.PAUSE_FILE  # the run-root layout has one definition (ray_bench.runroot)
SUMMARY_FILE = runroot.SUMMARY_FILE  # the run-root layout has one definition (ray_bench.runroot)

if TYPE_CHECKING:
    from ray_bench.accounts.probe import ProbeRunner



@dataclass
class RunOptions:
    address: str | None = None
    parallel: int | None = None
    hypothesis: str | None = None
    catalog: Catalog = field(default_factory=Catalog.default)
    #: How long one wait for finishes lasts; an idle loop waits four ticks.
    tick_sec: float = 0.25
    #: Cell runners per Ray node (see DEFAULT_RUNNERS_PER_NODE).
    runners_per_node: int = DEFAULT_RUNNERS_PER_NODE
    #: When the run must finish (unix seconds): recorded so that `status` can compare pace.
    deadline: float | None = None
    #: Operator holds and other host state (default: $RAY_BENCH_STATE_ROOT or ~/.ray-bench).
    state_root: Path | None = None
    #: How often the resource supervisors are asked.
    supervisor_every_sec: float = 2.0
    #: Host available memory in MiB; injectable so that tests can create pressure.
    read_available_mb: Callable[[], int] = read_available_mb
    #: The supervisors of the nodes that host runners (ray_bench.onray.supervisors); None: the
    #: driver's own host, read in-process (a local run, the simulator).
    supervision: Supervision | None = None
    #: Each node's check before the fan-out (ray_bench.cells.nodes); None: not checked.
    node_checks: list[NodeCheck] | None = None
    #: Where attempt directories go: auto, ray or a store URI (ray_bench.artifacts).
    artifacts: str = "auto"
    #: The name of a stop signal received (ray_bench.scheduler.signals), asked every round.
    stop_signal: Callable[[], str | None] | None = None
    #: When this `execute` began (wall clock), before Ray and the lock: a pause requested since
    #: then was meant for this session and is honoured, not archived as a previous one.
    session_started: float | None = None
    #: Runs an account's ``probe_command`` (ray_bench.accounts.probe.run_probe; a fake in tests).
    account_probe: ProbeRunner | None = None


@dataclass
class RunOutcome:
    run_id: str
    exit_code: int
    counts: dict[str, int]
    stopped: str | None  # drift | halt | circuit | spend | budget | paused | preflight | None
    detail: str
    stale_recovered: int
    attempts_run: int
    wall_sec: float

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def uses_docker(plan: Plan) -> bool:
    return any(c.backend == "docker" for c in plan.cells)


def docker_url_of(plan: Plan) -> str | None:
    """The daemon the suite's docker backend talks to (None: the default socket)."""
    config = plan.backends.get("docker")
    url = config.options.get("base_url") if config else None
    return str(url) if url else None


def reserve_of(plan: Plan) -> Reserve:
    """What every node keeps free (a node may override it: ray_bench.sandboxes.supervisor)."""
    return Reserve(plan.host_reserve_mb, plan.host_reserve_disk_mb)


def create_rates(plan: Plan) -> dict[str, float]:
    """Sandbox creates per minute each backend's provider takes (Daytona's organisation pool)."""
    config = plan.backends.get("daytona")
    if config is None or not config.options.get("pool"):
        return {}
    return {"daytona": DaytonaPool.model_validate(config.options["pool"]).creates_per_minute}


class Driver:
    """One execution of a confirmed plan. Runner submission goes through ``submit``/``wait``
    callables so that the Ray shell stays thin (see :class:`RayPool`). The gate is given: on Ray
    :func:`ray_bench.onray.gate.actor_gate` (``execute_run`` builds it), in-process a
    ``CoreGate``; the scheduler imports nothing of the Ray wing."""

    def __init__(self, plan: Plan, identity: str, run_root: Path, pool: RunnerPool,
                 gate: Gate, observer: RunObserver | None = None,
                 options: RunOptions | None = None, clock: Clock | None = None) -> None:
        self.plan = plan
        self.identity = identity
        self.run_root = run_root
        self.paths = RunPaths(run_root)
        self.pool = pool
        self.options = options or RunOptions()
        self.gate: Gate = gate
        self.observer: RunObserver = observer or NullObserver()
        #: The only source of time of the loop (a FakeClock in the simulator).
        self.clock: Clock = clock or SystemClock()
        self.catalog = self.options.catalog
        self.tasks: dict[str, PlanTask] = {t.id: t for t in plan.tasks}
        self.accounts = {a.name: a for a in plan.accounts}
        self.drift = DriftGuard(plan.inputs)
        self.specs = AttemptSpecs(plan, self.paths)
        self.circuit = RecoveryCircuit()
        #: Account -> when its probe_command last ran (the driver's clock).
        self._probed: dict[str, float] = {}
        self._probes_checked = self.clock.now()
        cap = plan.capacity.effective
        if self.options.parallel is not None:
            cap = min(cap, self.options.parallel)
        self.capacity = max(1, cap)
        self.quota_fit = QuotaFit(ceiling=self.capacity, creates_per_minute=create_rates(plan))
        self._backends = sorted({c.backend for c in plan.cells})
        self.inflight: dict[Any, tuple[AttemptRow, PlanCell, str]] = {}
        self.spend = SpendBook.of(plan, ())
        #: The launch policy (scheduler/launch.py): this loop executes what it decides.
        self.core = LaunchCore(plan, self.capacity, self.circuit, self.quota_fit, self.spend)
        #: What a finished attempt comes to (scheduler/finish.py), over the same books.
        self.finishing = FinishCore(self.catalog, self.circuit, self.quota_fit, self.spend)
        self.attempts_run = 0
        self.supervision: Supervision = self.options.supervision or HostSupervision(ResourceSupervisor(
            reserve_of(plan), plan.run_id, read_available=self.options.read_available_mb,
            list_containers=docker_container_lister(plan.run_id, base_url=docker_url_of(plan))
            if uses_docker(plan) else None))
        self._halted: dict[str, ResourceHalt] = {}
        #: When the supervisors were last asked; None: never, so the first ask precedes the
        #: first start (a clock near 0, as in the simulator, must not skip it).
        self._supervised: float | None = None
        self._beat = self.clock.now()  # run_started is the first beat
        self._signal_name: str | None = None
        #: Cell id -> the snapshot the build phase made for it (scheduler/builds.py), and what
        #: makes them (None: the plan's Daytona backend; tests set a fake).
        self._snapshots: dict[str, str] = {}
        self.snapshot_builder: Callable[[], SnapshotBuilder] | None = None
        #: Set when an attempt's files met a full disk: the run stops (resumable).
        self._disk_full: str | None = None

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        started = self.clock.now()
        require_no_halt(self.run_root)
        try:
            ledger = Ledger.create(self.run_root, run_id=self.plan.run_id, plan_identity=self.identity)
        except sqlite3.OperationalError as exc:
            if not is_disk_full(exc):
                raise
            raise RunStopped("disk_full", disk_full_detail(self.run_root, exc)) from None
        ledger.subscribe(self.observer.on_event)  # the append is the notification
        try:
            return self._session(ledger, started)
        except (OSError, sqlite3.OperationalError) as exc:
            if not is_disk_full(exc):
                raise
            self._stop_on_full_ledger(ledger, exc)
        finally:
            self.gate.close()
            self.supervision.close()
            ledger.close()

    def _session(self, ledger: Ledger, started: float) -> RunOutcome:
        self._clear_pause(ledger)
        if self.options.hypothesis:
            ledger.append(ev.Hypothesis(text=self.options.hypothesis))
        stale = self._recover_stale(ledger)
        history = ledger.attempts()
        self.spend = self.core.spend = self.finishing.spend = SpendBook.of(self.plan, history)
        self._replay_circuit(ledger, history)
        state = RunState(self.plan, history)
        ledger.append(ev.RunStarted(identity=self.identity, run_id=self.plan.run_id, resumed_stale=stale,
                                    deadline=self.options.deadline, counts=state.counts(),
                                    options=self._shaping_options()))
        stopped, detail = self._check_nodes(ledger) or self._execute(ledger, state)
        residue = self._final_audit(ledger)
        if residue and stopped is None:
            stopped, detail = "audit", (f"cleanup audit found {residue} sandboxes it could not remove; "
                                        f"run `ray-bench audit {self.run_root} --cleanup`")
            ledger.append(ev.Stop(reason=ev.StopReason.AUDIT, detail=detail))
        counts = state.counts()
        exit_code = stops.exit_code(stopped, counts["valid"], len(state.cells), self._signal_name)
        if stopped is None and exit_code == 1:
            detail = state.failure_detail()
        outcome = RunOutcome(self.plan.run_id, exit_code, counts, stopped, detail, stale,
                             self.attempts_run, round(self.clock.now() - started, 3))
        ledger.append(ev.RunFinished.model_validate(outcome.to_json()))
        (self.run_root / SUMMARY_FILE).write_text(json.dumps(outcome.to_json(), indent=2))
        return outcome

    def _execute(self, ledger: Ledger, state: RunState) -> tuple[str | None, str]:
        # The preflight belongs to the plan, not to a session: until the ledger records it
        # passed, every session (a resume too) runs its remaining cells before any other.
        self._snapshots = build_phase(self.plan, ledger, state, self.observer, self.snapshot_builder)
        self._account_probes(ledger, sorted(self.accounts), "before the fan-out")
        if self.plan.preflight and not ledger.events(ev.PreflightPassed().kind):
            stop = self._preflight(ledger, state)
            if stop is not None:
                return stop
        return self._loop(ledger, state, phase="fan-out") or (None, "")

    def _preflight(self, ledger: Ledger, state: RunState) -> tuple[str, str] | None:
        gate = state.preflight(self.plan.preflight)
        if gate.todo and not gate.spent:
            aside = state.restrict(set(gate.todo))
            stop = self._loop(ledger, state, phase="preflight")
            if stop is not None:
                return stop
            state.extend(aside)
            gate = state.preflight(self.plan.preflight)
        halt = stops.preflight_halt(gate, state, self.run_root)
        if halt is not None:
            ledger.append(ev.Stop(reason=halt.reason, detail=halt.detail, cells=list(gate.failed)))
            return halt.reason, halt.detail
        ledger.append(ev.PreflightPassed(cells=sorted(self.plan.preflight)))
        return None

    def _loop(self, ledger: Ledger, state: RunState, phase: str) -> tuple[str, str] | None:
        stop: tuple[str, str] | None = None
        last_tick = 0.0
        while True:
            note = None
            if stop is None:
                stop = self._check_stops(ledger)
            if stop is None:
                try:
                    note = self._launch(ledger, state)
                except RunStopped as exc:
                    stop = (exc.reason, exc.detail)
                    ledger.append(ev.Stop(reason=ev.StopReason(exc.reason), detail=exc.detail))
            if not self.inflight and (stop is not None or not state.pending):
                break
            finished = self.pool.wait(self.inflight.keys(), self.options.tick_sec)
            for ref, summary in finished:
                self._finish(ledger, state, ref, summary)
            if stop is not None:
                self.gate.flush()  # otherwise the next round's acquire carries the releases
            now = self.clock.now()
            if now - self._beat >= HEARTBEAT_SEC:
                ledger.append(ev.Heartbeat(pid=os.getpid(), inflight=len(self.inflight)), now=self.clock.wall())
                self._beat = now
            if now - self._probes_checked >= PROBE_CHECK_SEC:
                self._probes_checked = now
                self._account_probes(ledger, [v.name for v in self.gate.views(now)
                                              if probe_due(v.state, self._probed.get(v.name), now)], "scheduled")
            if now - last_tick >= 1.0 or not self.inflight:
                self.observer.on_event(Tick(state, self.gate.views(now), note))
                last_tick = now
            if not self.inflight and not finished and stop is None and state.pending and note:
                # Nothing ran and nothing could start: wait before asking again. (When cells
                # just finished, the note predates them and their slots are free now.)
                idle = self.options.tick_sec * 4
                if self.core.wake_at is not None:  # an account frees itself sooner: wake then
                    idle = min(idle, max(0.0, self.core.wake_at - self.clock.now()))
                self.clock.sleep(idle)
        return stop

    def _launch(self, ledger: Ledger, state: RunState) -> str | None:
        """One launch round: the core picks the free slots' worth of cells, the inputs of each
        are checked for drift, the gate admits the batch (one round trip per actor, not per
        cell), the granted start, and the core says what the round comes to. Returns a note
        when work is waiting on something."""
        now = self.clock.now()
        core = self.core
        views = self.gate.views(now) if core.wants_views(state, len(self.inflight)) else []
        round_ = core.plan_round(state, views, len(self.inflight), now)
        for cell in round_.checked:
            drift = self.drift.check_global() or self.drift.check_task(cell.task)
            if drift is not None:
                state.put_back([r.cell for r in round_.requests])
                ledger.append(ev.DriftSeen(input=drift.kind, name=drift.name, path=drift.path, detail=drift.detail),
                              cell_id=cell.id)
                raise RunStopped("drift", f"{drift.what} changed ({drift.detail}); "
                                          "running cells may finish, a new plan is required")
        if round_.halt is not None:
            raise RunStopped(round_.halt.reason, round_.halt.detail)
        if not round_.requests:
            self.gate.flush()
        granted = self._probe_accounts_circuit(round_.requests, now) if round_.requests else {}
        rest = [r for r in round_.requests if r.lease_id not in granted]
        granted.update(self.gate.acquire_many(rest, now, exclude=core.excluded()) if rest else {})
        waiting: list[PlanCell] = []
        for request in round_.requests:
            account = granted.get(request.lease_id)
            if account is None:
                waiting.append(request.cell)
                core.refused(request)
            else:
                self._start(ledger, state, round_, request, account, now)
        state.put_back(waiting)
        decision = core.conclude(round_, len(waiting), len(self.inflight), now)
        if isinstance(decision, AskGate):
            blocked = self.gate.blocked_until(now)
            stalled = None if blocked is not None else self.gate.stalled(now, decision.horizon_sec,
                                                                         decision.exclude)
            decision = core.when_idle(blocked, stalled, now)
        if isinstance(decision, Halt):
            raise RunStopped(decision.reason, decision.detail)
        return decision.note

    def _probe_accounts_circuit(self, requests: Sequence[LeaseRequest], now: float) -> dict[str, str]:
        """An account scope on probation gets one request of the batch, offered to it alone:
        its probe. Returns what was granted (lease id -> account)."""
        granted: dict[str, str] = {}
        for scope, name in self.core.account_probes():
            request = self.core.probe_offer(requests, granted)
            if request is None:
                break
            got = self.gate.acquire_many([request], now, exclude=set(self.accounts) - {name})
            if got.get(request.lease_id) == name:
                granted[request.lease_id] = name
                self.core.probe_granted(request, scope)
        return granted

    def _start(self, ledger: Ledger, state: RunState, round_: Round, request: LeaseRequest, account: str,
               now: float) -> None:
        cell, lease_id = request.cell, request.lease_id
        task = self.tasks[cell.task]
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum=task.checksum, arm=cell.arm,
                                   rep=cell.rep, account=account, backend=cell.backend, epoch=self.identity,
                                   preflight=cell.id in self.plan.preflight, now=self.clock.wall(),
                                   taken=lambda attempt_id: self.paths.attempt(attempt_id).exists())
        spec = self.specs.of(row, cell, self._snapshots.get(cell.id))
        ref = self.pool.submit(spec)
        self.inflight[ref] = (row, cell, lease_id)
        for event in self.core.started(round_, request, row, now):
            ledger.append(event, cell_id=cell.id)
        state.started(cell.id, lease_id, self.clock.now())
        self.attempts_run += 1
        self.observer.on_event(AttemptStarted(row))

    def _finish(self, ledger: Ledger, state: RunState, ref: Any, summary: AttemptSummary) -> None:
        """Record what the finish core decided for the attempt, in its order, then the cell's state."""
        row, cell, lease_id = self.inflight.pop(ref)
        now = self.clock.now()
        done = self.finishing.finished(row, lease_id, summary, self._running_on)
        record = done.record
        ledger.finish_attempt(row.attempt_id, status=record.status, valid=record.valid, reward=record.reward,
                              failure_class=record.failure_class, fingerprint=record.fingerprint,
                              counts=record.counts, cost_usd=record.cost_usd, charged_usd=record.charged_usd,
                              summary=record.summary, now=self.clock.wall())
        release = done.release
        self.gate.release(release.account, release.lease_id, release.verdict, release.usd, now,
                          usd_bound=release.usd_bound)
        for append in done.events:
            ledger.append(append.event, cell_id=append.cell_id)
        if done.disk_full is not None:
            self._disk_full = self._disk_full or disk_full_detail(self.run_root, done.disk_full)
        cell_state = state.finished(cell.id, done.verdict, lease_id, now, row.account)
        self.observer.on_event(AttemptFinished(row, done.verdict, record.summary, cell_state, record.status,
                                               record.failure_class))

    def _running_on(self, backend: str) -> int:
        return sum(1 for r, _, _ in self.inflight.values() if r.backend == backend)

    def _check_nodes(self, ledger: Ledger) -> tuple[str, str] | None:
        """Record every node's check; stop when no node passed (no runner could take a cell)."""
        checks = self.options.node_checks
        if checks is None:
            return None
        line = summary_line(checks)
        ledger.append(ev.NodeCheck(nodes=[c.to_json() for c in checks], summary=line))
        if any(c.ok for c in checks):
            return None
        detail = f"no node can run cells: {line}; fix the nodes (credentials, backend), then resume"
        ledger.append(ev.Stop(reason=ev.StopReason.NODES, detail=detail))
        return "nodes", detail

    # -- stops -------------------------------------------------------------------------------

    def _check_stops(self, ledger: Ledger) -> tuple[str, str] | None:
        """Read the world into :class:`~ray_bench.scheduler.stops.Seen`, let
        :func:`~ray_bench.scheduler.stops.world_stop` decide, and carry its decision out."""
        decision = stops.world_stop(self._seen(ledger), self._resume_command())
        if decision is not None:
            event = decision.event
            if decision.reason is ev.StopReason.HALT:
                record = write_run_halt(self.run_root, list(self._halted.values()))
                event = event.model_copy(update={"halt": record.to_json()})
            if decision.reason is ev.StopReason.SIGNAL:
                self._signal_name = event.signal if isinstance(event, ev.Stop) else None
            ledger.append(event)
            if decision.cancel_running:
                self.pool.cancel(list(self.inflight))
            return decision.reason, decision.detail
        # An account's budget is its own (lifetime, every run on the state root): the account
        # refuses admission and the run stops as `budget` when no account can take a cell.
        halt = stops.spend_halt(self.spend)
        if halt is not None:
            ledger.append(ev.Stop(reason=halt.reason, detail=halt.detail))
            return halt.reason, halt.detail
        return None

    def _seen(self, ledger: Ledger) -> stops.Seen:
        """This round's world: the disk, a signal, the pause file; the nodes' supervisors only
        when none of those stops the run, and every ``supervisor_every_sec``."""
        signal = self.options.stop_signal() if self.options.stop_signal is not None else None
        pause = self._pause_request()
        if self._disk_full is not None or signal is not None or pause is not None:
            return stops.Seen(disk_full=self._disk_full, signal=signal, pause=pause)
        now = self.clock.now()
        if self._supervised is None or now - self._supervised >= self.options.supervisor_every_sec:
            self._supervised = now
            self._supervise(ledger)
        return stops.Seen(halted=[h.reason for h in self._halted.values()], node_count=self.supervision.node_count,
                          halt_file=halt_path(self.run_root))

    def _pause_request(self) -> dict[str, Any] | None:
        """The pause file's request ({} when unreadable), None without a pause file."""
        pause = self.run_root / PAUSE_FILE
        if not pause.exists():
            return None
        try:
            request = load_state_json(pause)
        except (OSError, ValueError):
            return {}
        return request if isinstance(request, dict) else {}

    def _stop_on_full_ledger(self, ledger: Ledger, exc: BaseException) -> NoReturn:
        """The ledger itself (or another file of the driver) met a full disk: nothing more can
        be recorded. Cancel what runs, remove its sandboxes, say so in one line; the attempts left
        open are marked stale by the resume, and `status` reads the free space."""
        detail = disk_full_detail(self.run_root, exc)
        self.pool.cancel(list(self.inflight))
        with contextlib.suppress(Exception):  # waits for the cancelled runners' deletes
            self.pool.wait(list(self.inflight), 30.0)
        for backend in self._backends:
            with contextlib.suppress(Exception):
                self.pool.cleanup(self.plan.backends, backend, self.plan.run_id, None)
        with contextlib.suppress(Exception):  # a few bytes may have come free
            ledger.append(ev.Stop(reason=ev.StopReason.DISK_FULL, detail=detail))
        raise RunStopped("disk_full", detail) from None

    def _supervise(self, ledger: Ledger) -> None:
        """A node under its reserve takes no more cells (``node_halt``); once no node may, the
        run stops with ``resource-halt.json`` (:func:`~ray_bench.scheduler.stops.world_stop`).
        Running cells finish either way."""
        for halt in self.supervision.check():
            if halt.node in self._halted:
                continue
            self._halted[halt.node] = halt
            ledger.append(ev.NodeHalt.read(halt.to_json()))  # the halt file's own `kind` tag dropped
            self.pool.retire(halt.node)

    def _resume_command(self) -> str:
        return f"ray-bench execute --plan {RunPaths(self.run_root).plan} --confirm {self.identity}"

    def _clear_pause(self, ledger: Ledger) -> None:
        """A pause left by the previous session is archived (this execute is its resume); one
        requested while this session started (Ray takes 10-20 s) stays, and stops the loop."""
        pause = self.run_root / PAUSE_FILE
        if pause.exists() and self._pause_is_current(pause):
            return
        if pause.exists():
            archive = self.run_root / "pauses"
            archive.mkdir(exist_ok=True)
            stamp, n = int(self.clock.wall()), 0
            while (target := archive / f"{stamp}{f'-{n}' if n else ''}-pause.json").exists():
                n += 1  # two pauses within a second: both kept (the run root only grows)
            os.replace(pause, target)
            ledger.append(ev.Resumed(after="pause"))

    def _pause_is_current(self, pause: Path) -> bool:
        started = self.options.session_started
        if started is None:
            return False
        try:
            request = load_state_json(pause)
            at = request.get("requested_at") if isinstance(request, dict) else None
            requested = float(at) if isinstance(at, (int, float)) else pause.stat().st_mtime
        except (OSError, ValueError):
            return False
        return requested >= started

    # -- crash recovery ------------------------------------------------------------------------

    def _recover_stale(self, ledger: Ledger) -> int:
        """Attempts with no terminal record belong to a driver that died: mark them stale and
        remove whatever sandboxes they left, found by label. Their agent ran for a while and
        its usage died with the runner: the cost is unknown (NULL), never $0, so the resumed
        run's spend charges each its cell's expected cost (:meth:`SpendBook.of`)."""
        open_rows = [r for r in ledger.attempts() if not r.terminal]
        for row in open_rows:
            removed = self.pool.cleanup(self.plan.backends, row.backend, self.plan.run_id, row.attempt_id)
            ledger.finish_attempt(row.attempt_id, status="stale", valid=False, reward=None,
                                  failure_class="executor", fingerprint="stale-runner", counts=False,
                                  cost_usd=None, summary=AttemptSummary(
                                      attempt_id=row.attempt_id, cell_id=row.cell_id, task=row.task, arm=row.arm,
                                      rep=row.rep, account=row.account, backend=row.backend,
                                      started_at=row.started_at, stale=True, sandboxes_removed=removed),
                                  now=self.clock.wall())  # the driver's clock (virtual in the simulator)
        return len(open_rows)

    def _shaping_options(self) -> ev.RunOptionsRecord:
        """The execute options that shape a run's concurrency, recorded with each execution so
        that a report over a lineage can show them (a lineage must not change them silently)."""
        return ev.RunOptionsRecord(
            parallel=self.options.parallel, runners_per_node=self.options.runners_per_node,
            address=self.options.address or "local", artifacts=self.options.artifacts,
            backend_pools={name: b.max_sandboxes for name, b in sorted(self.plan.backends.items())},
            plan_parallel_cap=self.plan.capacity.parallel_cap, effective_concurrency=self.plan.capacity.effective)

    def _replay_circuit(self, ledger: Ledger, history: list[AttemptRow]) -> None:
        """The circuit the ledger leaves (the hypothesis recorded just now puts every open
        scope on probation); a disabled account's ``enable`` recorded since reopens its scope."""
        replayed = circuit_from(ledger.events())
        self.circuit.open_scopes, self.circuit.probing = replayed.open_scopes, replayed.probing
        self._health_recoveries(ledger)

    def _account_probes(self, ledger: Ledger, names: list[str], when: str) -> None:
        """Run the ``probe_command`` of each of ``names`` that has one; record the result (the
        ledger's ``account_probe``, the account store's ``probe:<effect>``, which the account's
        actor applies: it disables, expires, cools or ends a cooldown as the verdict says). A
        passing probe is a recorded health recovery: it reopens the account's circuit."""
        names = [n for n in names if n in self.accounts and self.accounts[n].probe_command]
        if not names:
            return
        runner = self.options.account_probe or run_probe
        store = AccountStore(self.options.state_root or default_state_root())
        try:
            for name in names:
                result = runner(self.accounts[name])
                self._probed[name] = self.clock.now()
                effect = probe_effect(result.verdict)
                ledger.append(ev.AccountProbe(account=name, verdict=result.verdict, effect=effect,
                                              detail=result.detail, when=when))
                store.add_event(name, probe_event_kind(effect), result.detail[:500], "ray-bench execute")
                if result.verdict == "ok" and self.circuit.recover(f"account:{name}"):
                    ledger.append(ev.CircuitReopened(scope=f"account:{name}", via="account_probe",
                                                     detail=result.detail))
        finally:
            store.close()

    def _health_recoveries(self, ledger: Ledger) -> None:
        """An account scope reopens on a recorded health recovery: an operator's ``enable`` in
        the state root's account store after its circuit opened."""
        scopes = [s for s in [*self.circuit.open_scopes, *self.circuit.probing] if scope_account(s)]
        if not scopes:
            return
        root = self.options.state_root or default_state_root()
        if not (root / ACCOUNTS_FILE).exists():
            return
        opened_at = {e.event.scope: e.ts for e in ledger.events(ev.CircuitOpen.model_fields["kind"].default)
                     if isinstance(e.event, ev.CircuitOpen)}
        store = AccountStore(root)
        try:
            for scope in scopes:
                name = scope_account(scope) or ""
                enable = next((e for e in store.events_after(name, 0)
                               if e.kind == "enable" and e.at > opened_at.get(scope, 0.0)), None)
                if enable is not None and self.circuit.recover(scope):
                    ledger.append(ev.CircuitReopened(scope=scope, via="enable", who=enable.who,
                                                     reason=enable.reason))
        finally:
            store.close()

    def _final_audit(self, ledger: Ledger) -> int:
        """Remove whatever the run left, then look again: what remains is residue."""
        backends = sorted({c.backend for c in self.plan.cells})
        removed = sum(self.pool.cleanup(self.plan.backends, b, self.plan.run_id, None) for b in backends)
        residue = sum(self.pool.count(self.plan.backends, b, self.plan.run_id) for b in backends)
        for node in self.pool.lost_nodes():  # died idle: a node event, not residue
            ledger.append(ev.NodeLost(node=node, while_="idle"))
        ledger.append(ev.Audit(removed=removed, residue=residue))
        return residue


class RunnerPool(Protocol):
    def submit(self, spec: AttemptSpec) -> Any: ...
    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]: ...
    def cancel(self, refs: list[Any]) -> None: ...
    def cleanup(self, backends: dict[str, Any], backend: str, run_id: str, attempt_id: str | None) -> int: ...
    def count(self, backends: dict[str, Any], backend: str, run_id: str) -> int: ...
    def retire(self, node: str) -> None: ...
    def lost_nodes(self) -> list[str]: ...
