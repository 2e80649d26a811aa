"""The driver of ``ray-bench execute``: the loop that executes the run core's commands
(:mod:`~ray_bench.scheduler.runcore`: what to launch, on which terms, what a finished attempt
comes to, when the run stops) through its ports (:mod:`~ray_bench.scheduler.ports`: the ledger,
the gate, the runner pool, the supervisors, the clock).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ray_bench import runroot
from ray_bench.accounts.health import probe_due, probe_effect, probe_event_kind
from ray_bench.accounts.probe import run_probe
from ray_bench.accounts.store import FILE as ACCOUNTS_FILE
from ray_bench.accounts.store import AccountStore
from ray_bench.cells.nodes import NodeCheck, summary_line
from ray_bench.cells.spec import DEFAULT_RUNNERS_PER_NODE
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
from ray_bench.runroot import RunPaths, disk_full_detail, is_disk_full
from ray_bench.sandboxes.daytona_pool import DaytonaPool
from ray_bench.sandboxes.host import read_available_mb
from ray_bench.sandboxes.supervisor import (
    HostSupervision,
    Reserve,
    ResourceSupervisor,
    Supervision,
    docker_container_lister,
    halt_path,
    require_no_halt,
    write_run_halt,
)
from ray_bench.scheduler import commands as cmd
from ray_bench.scheduler import stops
from ray_bench.scheduler.admission import Gate
from ray_bench.scheduler.builds import SnapshotBuilder, build_phase
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import Append
from ray_bench.scheduler.launch import Wait
from ray_bench.scheduler.observers import NullObserver, RunObserver, Tick
from ray_bench.scheduler.ports import RunnerPool
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runcore import RunCore
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.state import default_state_root

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
    """One execution of a confirmed plan: the loop that executes what the run's core
    (:class:`~ray_bench.scheduler.runcore.RunCore`) commands through its ports
    (:mod:`~ray_bench.scheduler.ports`). It builds no Ray piece: ``execute_run``
    (ray_bench/api.py) injects the Ray pool, gate and supervisors, the simulator its fakes."""

    def __init__(self, plan: Plan, identity: str, run_root: Path, pool: RunnerPool, gate: Gate,
                 observer: RunObserver | None = None, options: RunOptions | None = None,
                 clock: Clock | None = None) -> None:
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
        cap = plan.capacity.effective
        if self.options.parallel is not None:
            cap = min(cap, self.options.parallel)
        self.capacity = max(1, cap)
        self.quota_fit = QuotaFit(ceiling=self.capacity, creates_per_minute=create_rates(plan))
        self._backends = sorted({c.backend for c in plan.cells})
        #: Runner ref -> the lease its attempt runs on (the core keeps the attempts).
        self.inflight: dict[Any, str] = {}
        #: The session's decisions (scheduler/runcore.py), made once the ledger is read: this
        #: loop executes what they command.
        self.core: RunCore
        self.attempts_run = 0
        self.supervision: Supervision = self.options.supervision or HostSupervision(ResourceSupervisor(
            reserve_of(plan), plan.run_id, read_available=self.options.read_available_mb,
            list_containers=docker_container_lister(plan.run_id, base_url=docker_url_of(plan))
            if uses_docker(plan) else None))
        #: What the loop's last round said work waits on, and why the loop stops (None: it goes on).
        self._note: str | None = None
        self._stopped: tuple[str, str] | None = None
        self._began = self.clock.now()  # run_started is the first heartbeat
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
        self._replay_circuit(ledger, history)
        state = RunState(self.plan, history)
        self.core = RunCore(self.plan, state, capacity=self.capacity, catalog=self.catalog, circuit=self.circuit,
                            quota_fit=self.quota_fit, spend=SpendBook.of(self.plan, history),
                            tick_sec=self.options.tick_sec, supervise_every_sec=self.options.supervisor_every_sec,
                            halt_file=halt_path(self.run_root), resume_command=self._resume_command(),
                            began=self._began)
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
        return self._loop(ledger, state) or (None, "")

    def _preflight(self, ledger: Ledger, state: RunState) -> tuple[str, str] | None:
        gate = state.preflight(self.plan.preflight)
        if gate.todo and not gate.spent:
            aside = state.restrict(set(gate.todo))
            stop = self._loop(ledger, state)
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

    def _loop(self, ledger: Ledger, state: RunState) -> tuple[str, str] | None:
        """Turn until every cell is done or the run stops and nothing runs: each turn the world
        is seen, a launch round runs, the finished attempts come back (see :mod:`runcore`)."""
        core = self.core
        self._stopped = None
        self._drive(ledger, cmd.LoopBegins())
        while True:
            self._note = None
            if self._stopped is None:
                self._drive(ledger, self._world_seen())
            if self._stopped is None:
                now = self.clock.now()
                self._drive(ledger, cmd.RoundBegins(now, self.gate.views(now) if core.wants_views() else ()))
            if not self.inflight and (self._stopped is not None or not state.pending):
                break
            finished = self.pool.wait(self.inflight.keys(), self.options.tick_sec)
            for ref, summary in finished:
                self._drive(ledger, cmd.Ended(self.inflight.pop(ref), summary, self.clock.now()))
            if self._stopped is not None:
                self.gate.flush()  # otherwise the next round's acquire carries the releases
            self._drive(ledger, cmd.TurnEnded(self.clock.now(), len(finished), self._stopped is not None, self._note))
        return self._stopped

    def _drive(self, ledger: Ledger, event: cmd.Event) -> None:
        """Tell the core ``event`` and execute its commands in order; a query's answer (the
        last command of a list) is the next event."""
        answer: cmd.Event | None = event
        while answer is not None:
            commands = self.core.step(answer)
            answer = None
            for command in commands:
                answer = self._execute_command(ledger, command)

    def _execute_command(self, ledger: Ledger, command: cmd.Command) -> cmd.Event | None:
        match command:
            case Append(event=event, cell_id=cell_id):
                ledger.append(event, cell_id=cell_id)
            case cmd.CheckInputs(cells=cells):
                return self._check_inputs(cells)
            case cmd.Acquire(requests=requests, exclude=exclude, now=now):
                return cmd.Granted(self.gate.acquire_many(list(requests), now, exclude=exclude))
            case cmd.Start(request=request, account=account):
                return self._start(ledger, request, account)
            case cmd.AskWhy(ask=ask, now=now):
                blocked = self.gate.blocked_until(now)
                stalled = None if blocked is not None else self.gate.stalled(now, ask.horizon_sec, ask.exclude)
                return cmd.GateSaid(blocked, stalled)
            case cmd.Supervise():
                return cmd.Supervised(self.supervision.check(), self.supervision.node_count)
            case cmd.Flush():
                self.gate.flush()
            case cmd.RecordEnd(attempt_id=attempt_id, record=record):
                ledger.finish_attempt(attempt_id, status=record.status, valid=record.valid, reward=record.reward,
                                      failure_class=record.failure_class, fingerprint=record.fingerprint,
                                      counts=record.counts, cost_usd=record.cost_usd, charged_usd=record.charged_usd,
                                      summary=record.summary, now=self.clock.wall())
            case cmd.ReleaseLease(release=release, now=now):
                self.gate.release(release.account, release.lease_id, release.verdict, release.usd, now,
                                  usd_bound=release.usd_bound)
            case cmd.DiskFull(message=message):
                self._disk_full = self._disk_full or disk_full_detail(self.run_root, message)
            case cmd.Notify(event=event):
                self.observer.on_event(event)
            case cmd.Retire(node=node):
                self.pool.retire(node)
            case cmd.AppendHalt(event=event, halts=halts):
                written = write_run_halt(self.run_root, list(halts))
                ledger.append(event.model_copy(update={"halt": written.to_json()}))
            case cmd.CancelRunning():
                self.pool.cancel(list(self.inflight))
            case cmd.StopRun(reason=reason, detail=detail, signal=signal):
                self._stopped = (reason, detail)
                if reason == ev.StopReason.SIGNAL:
                    self._signal_name = signal
            case Wait(note=note):
                self._note = note
            case cmd.Beat():
                ledger.append(ev.Heartbeat(pid=os.getpid(), inflight=len(self.inflight)), now=self.clock.wall())
            case cmd.ProbeAccounts(now=now):
                self._account_probes(ledger, [v.name for v in self.gate.views(now)
                                              if probe_due(v.state, self._probed.get(v.name), now)], "scheduled")
            case cmd.Report(note=note, now=now):
                self.observer.on_event(Tick(self.core.state, self.gate.views(now), note))
            case cmd.Sleep(most=most, until=until):
                self.clock.sleep(most if until is None else min(most, max(0.0, until - self.clock.now())))
        return None

    def _check_inputs(self, cells: Sequence[PlanCell]) -> cmd.InputsChecked:
        """The first cell whose inputs (or the run's global inputs) changed since the plan."""
        found = self.drift.check_launch([cell.task for cell in cells])
        return cmd.InputsChecked() if found is None else cmd.InputsChecked(found[1], cells[found[0]].id)

    def _start(self, ledger: Ledger, request: LeaseRequest, account: str) -> cmd.Started:
        """Record the attempt as started, then send it to a runner (which creates the sandbox)."""
        cell = request.cell
        task = self.tasks[cell.task]
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum=task.checksum, arm=cell.arm,
                                   rep=cell.rep, account=account, backend=cell.backend, epoch=self.identity,
                                   preflight=cell.id in self.plan.preflight, now=self.clock.wall(),
                                   taken=lambda attempt_id: self.paths.attempt(attempt_id).exists())
        spec = self.specs.of(row, cell, self._snapshots.get(cell.id))
        self.inflight[self.pool.submit(spec)] = request.lease_id
        self.attempts_run += 1
        return cmd.Started(request.lease_id, row, self.clock.now())

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

    # -- the world ----------------------------------------------------------------------------

    def _world_seen(self) -> cmd.WorldSeen:
        """This round's world as the driver reads it: a full disk it met, a signal, the pause
        file, how many nodes host runners (the core decides when the supervisors are asked)."""
        signal = self.options.stop_signal() if self.options.stop_signal is not None else None
        return cmd.WorldSeen(self.clock.now(), self._disk_full, signal, self._pause_request(),
                         self.supervision.node_count)

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
