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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ray_bench.accounts.probe import run_probe
from ray_bench.accounts.store import FILE as ACCOUNTS_FILE
from ray_bench.accounts.store import AccountStore
from ray_bench.cells.nodes import NodeCheck
from ray_bench.cells.spec import DEFAULT_RUNNERS_PER_NODE
from ray_bench.clock import Clock, SystemClock
from ray_bench.config.bounded import load_state_json
from ray_bench.errors import RunStopped
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit, circuit_from
from ray_bench.files import write_whole
from ray_bench.heap import kept
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import Ledger
from ray_bench.models.plan import Plan, PlanCell, PlanTask
from ray_bench.plan.attempts import AttemptSpecs
from ray_bench.plan.backends import create_rates
from ray_bench.plan.drift import DriftGuard
from ray_bench.runroot import RunPaths, disk_full_detail, is_disk_full
from ray_bench.sandboxes.host import read_available_mb
from ray_bench.sandboxes.supervisor import (
    Supervision,
    halt_path,
    require_no_halt,
    write_run_halt,
)
from ray_bench.scheduler import commands as cmd
from ray_bench.scheduler import session, stops
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

if TYPE_CHECKING:
    from ray_bench.accounts.probe import ProbeRunner


@dataclass(frozen=True)
class RunOptions:
    """How a session runs, built once (``execute_run`` fills what it derives with
    :func:`dataclasses.replace` before the driver exists; nothing changes them after)."""

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
    #: Host available memory in MiB for the supervisors ``execute_run`` builds; injectable so
    #: that tests can create pressure (the driver's own supervision is injected whole).
    read_available_mb: Callable[[], int] = read_available_mb
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




class Driver:
    """One execution of a confirmed plan: the loop that executes what the run's core
    (:class:`~ray_bench.scheduler.runcore.RunCore`) commands through its ports
    (:mod:`~ray_bench.scheduler.ports`). It builds none of them: ``execute_run``
    (ray_bench/api.py) injects the Ray pool, gate and node supervisors; the simulator and the
    in-process tests an in-process pool, a :class:`~ray_bench.scheduler.admission.CoreGate` and
    :meth:`HostSupervision.of(plan) <ray_bench.sandboxes.supervisor.HostSupervision.of>`.
    ``node_checks``: each node's check before the fan-out (ray_bench.cells.nodes); None: not checked."""

    def __init__(self, plan: Plan, identity: str, run_root: Path, pool: RunnerPool, gate: Gate,
                 supervision: Supervision, *, observer: RunObserver | None = None,
                 options: RunOptions | None = None, clock: Clock | None = None,
                 node_checks: Sequence[NodeCheck] | None = None, receipt: str | None = None) -> None:
        self.plan = plan
        self.identity = identity
        #: The digest of the receipt ``execute``'s plan check passed (recorded in ``run_started``).
        self.receipt = receipt
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
        self.supervision = supervision
        self.node_checks = node_checks
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
            raise RunStopped("disk_full", disk_full_detail(self.run_root, exc, state_root=self._state_root())) from None
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
        """The previous session's pause and open attempts, the books read from the ledger, the
        nodes' checks, the build phase, the probes, the preflight and the fan-out (each loop as
        the core commands), then the final audit; the outcome."""
        pause = self.paths.pause
        if pause.exists():
            self._run(ledger, session.pause_left(cmd.PauseFound(_requested_at(pause), self.options.session_started)))
        if self.options.hypothesis:
            ledger.append(ev.Hypothesis(text=self.options.hypothesis))
        open_rows = [r for r in ledger.attempts() if not r.terminal]
        for row in open_rows:  # by label: the dead driver's runner may have left its sandboxes
            removed = self.pool.cleanup(self.plan.backends, row.backend, self.plan.run_id, row.attempt_id)
            self._run(ledger, session.stale_end(cmd.StaleFound(row, removed)))
        stale = len(open_rows)
        history = ledger.attempts()
        with kept():  # a state and a queue entry per cell, all kept: no collector pass over them
            state = RunState(self.plan, history)
        self.core = RunCore(self.plan, state, capacity=self.capacity, catalog=self.catalog, circuit=RecoveryCircuit(),
                            quota_fit=self.quota_fit, spend=SpendBook.of(self.plan, history),
                            tick_sec=self.options.tick_sec, supervise_every_sec=self.options.supervisor_every_sec,
                            halt_file=halt_path(self.run_root), resume_command=self._resume_command(),
                            began=self._began, run_root=self.run_root)
        # the circuit the ledger leaves (the hypothesis recorded just now puts every open scope on
        # probation); an account's `enable` recorded since reopens its scope
        self._drive(ledger, cmd.CircuitReplayed(circuit_from(ledger.events())))
        ledger.append(ev.RunStarted(identity=self.identity, run_id=self.plan.run_id, resumed_stale=stale,
                                    deadline=self.options.deadline, counts=state.counts(),
                                    options=self._shaping_options(), receipt=self.receipt))
        self._drive(ledger, cmd.NodesChecked(self.node_checks))
        if self._stopped is None:
            self._snapshots = build_phase(self.plan, ledger, state, self.observer, self.snapshot_builder,
                                          stopping=self._stop_asked)
            if not self._stop_asked():  # stopped during the builds: no account is probed for nothing
                self._drive(ledger, cmd.FanOutNears())
            self._drive(ledger, cmd.PreflightDue(passed=bool(ledger.events(ev.PreflightPassed))))
        self._drive(ledger, self._audited())
        stopped, exit_code, detail = stops.session_end(self._stopped, state, self._signal_name)
        outcome = RunOutcome(self.plan.run_id, exit_code, state.counts(), stopped, detail, stale,
                             self.attempts_run, round(self.clock.now() - started, 3))
        ledger.append(ev.RunFinished.model_validate(outcome.to_json()))
        write_whole(self.paths.summary, json.dumps(outcome.to_json(), indent=2))
        return outcome

    def _loop(self, ledger: Ledger) -> None:
        """Turn until every pending cell is done or the run stops and nothing runs: each turn the
        world is seen, a launch round runs, the finished attempts come back (see :mod:`runcore`)."""
        core = self.core
        state = core.state
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

    def _drive(self, ledger: Ledger, event: cmd.Event) -> None:
        """Tell the core ``event`` and execute its commands in order; a query's answer (the
        last command of a list) is the next event."""
        answer: cmd.Event | None = event
        while answer is not None:
            commands = self.core.step(answer)
            answer = None
            for command in commands:
                answer = self._execute_command(ledger, command)

    def _run(self, ledger: Ledger, commands: Sequence[cmd.Command]) -> None:
        """Execute commands that ask nothing (decided before the core exists)."""
        for command in commands:
            self._execute_command(ledger, command)

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
                stalled = (None if blocked is not None
                           else self.gate.stalled(now, ask.horizon_sec, ask.exclude, ask.judges))
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
                return cmd.AccountsSeen(self.gate.views(now), now)
            case cmd.Probe(account=account):
                result = (self.options.account_probe or run_probe)(self.accounts[account])
                return cmd.Probed(account, result.verdict, result.detail, self.clock.now())
            case cmd.RecordHealth(account=account, kind=kind, detail=detail):
                store = AccountStore(self._state_root())
                try:
                    store.add_event(account, kind, detail, "ray-bench execute")
                finally:
                    store.close()
            case cmd.ReadEnables(scopes=scopes):
                return self._enables(ledger, scopes)
            case cmd.RunLoop():
                self._loop(ledger)
                return cmd.LoopEnded(self._stopped is not None)
            case cmd.ArchivePause():
                self._archive_pause()
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
                                   taken=lambda seq: self.paths.attempt_of(cell.task, cell.arm, cell.rep, seq,
                                                                           cell.id).exists())
        spec = self.specs.of(row, cell, self._snapshots.get(cell.id))
        self.inflight[self.pool.submit(spec)] = request.lease_id
        self.attempts_run += 1
        return cmd.Started(request.lease_id, row, self.clock.now())

    # -- the world ----------------------------------------------------------------------------

    def _world_seen(self) -> cmd.WorldSeen:
        """This round's world as the driver reads it: a full disk it met, a signal, the pause
        file, how many nodes host runners (the core decides when the supervisors are asked)."""
        signal = self.options.stop_signal() if self.options.stop_signal is not None else None
        return cmd.WorldSeen(self.clock.now(), self._disk_full, signal, self._pause_request(),
                         self.supervision.node_count)

    def _stop_asked(self) -> bool:
        """A signal came, or ``pause --now`` was asked (the build phase's question: the loop then
        reads the same world and stops the run as it always does)."""
        if self.options.stop_signal is not None and self.options.stop_signal() is not None:
            return True
        pause = self._pause_request()
        return bool(pause and pause.get("now"))

    def _pause_request(self) -> dict[str, Any] | None:
        """The pause file's request ({} when unreadable), None without a pause file, or with one
        that cannot be read yet because it is being written (see :func:`_settling`)."""
        pause = self.paths.pause
        if not pause.exists():
            return None
        try:
            request = load_state_json(pause)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None if _settling(pause) else {}
        return request if isinstance(request, dict) else {}

    def _stop_on_full_ledger(self, ledger: Ledger, exc: BaseException) -> NoReturn:
        """The ledger itself (or another file of the driver) met a full disk: nothing more can
        be recorded. Cancel what runs, remove its sandboxes, say so in one line; the attempts left
        open are marked stale by the resume, and `status` reads the free space."""
        detail = disk_full_detail(self.run_root, exc, state_root=self._state_root())
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
        return f"ray-bench execute --plan {self.paths.plan} --confirm {self.identity}"

    def _archive_pause(self) -> None:
        archive = self.paths.pauses
        archive.mkdir(exist_ok=True)
        stamp, n = int(self.clock.wall()), 0
        while (target := archive / f"{stamp}{f'-{n}' if n else ''}-pause.json").exists():
            n += 1  # two pauses within a second: both kept (the run root only grows)
        os.replace(self.paths.pause, target)

    def _shaping_options(self) -> ev.RunOptionsRecord:
        """The execute options that shape a run's concurrency, recorded with each execution so
        that a report over a lineage can show them (a lineage must not change them silently)."""
        return ev.RunOptionsRecord(
            parallel=self.options.parallel, runners_per_node=self.options.runners_per_node,
            address=self.options.address or "local", artifacts=self.options.artifacts,
            backend_pools={name: b.max_sandboxes for name, b in sorted(self.plan.backends.items())},
            plan_parallel_cap=self.plan.capacity.parallel_cap, effective_concurrency=self.plan.capacity.effective)

    def _state_root(self) -> Path:
        return self.options.state_root or default_state_root()

    def _enables(self, ledger: Ledger, scopes: Sequence[tuple[str, str]]) -> cmd.EnablesRead:
        """When each circuit opened, and the operator events of the accounts of ``scopes`` (none
        without an account store)."""
        root = self._state_root()
        if not (root / ACCOUNTS_FILE).exists():
            return cmd.EnablesRead({}, {})
        opened_at = {e.event.scope: e.ts for e in ledger.events(ev.CircuitOpen) if isinstance(e.event, ev.CircuitOpen)}
        store = AccountStore(root)
        try:
            return cmd.EnablesRead(opened_at, {account: store.events_after(account, 0) for _, account in scopes})
        finally:
            store.close()

    def _audited(self) -> cmd.Audited:
        """Remove whatever the run left, then look again: what remains is residue."""
        removed = sum(self.pool.cleanup(self.plan.backends, b, self.plan.run_id, None) for b in self._backends)
        residue = sum(self.pool.count(self.plan.backends, b, self.plan.run_id) for b in self._backends)
        return cmd.Audited(removed, residue, tuple(self.pool.lost_nodes()), self._stopped is not None)


#: A pause file younger than this that cannot be read is taken to be still being written and is
#: read again at the next round: read half-written, a ``pause --now`` was taken for a drain whose
#: running cells went on (seen in CI under load: the request recorded with ``now: false``, an agent
#: of ``sleep 600`` left running). ``ray-bench pause`` writes it whole (a rename); a shell's ``>``
#: does not.
PAUSE_SETTLE_SEC = 2.0


def _settling(path: Path) -> bool:
    """Whether ``path`` was written less than :data:`PAUSE_SETTLE_SEC` ago (by the file's own
    time, not the run's clock). A time that far in the future (another host's clock) is not: a
    file that stays unreadable must pause the run."""
    try:
        return abs(time.time() - path.stat().st_mtime) < PAUSE_SETTLE_SEC
    except OSError:
        return False


def _requested_at(pause: Path) -> float | None:
    """When the pause was requested: its ``requested_at``, else the file's mtime (None: unreadable)."""
    try:
        request = load_state_json(pause)
        at = request.get("requested_at") if isinstance(request, dict) else None
        return float(at) if isinstance(at, (int, float)) else pause.stat().st_mtime
    except (OSError, ValueError):
        return None
