"""The run's decisions as one pure step (issue 30, step 3): ``RunCore.step(event) -> [Command]``.

The driver's loop tells the core what happened (a round begins with these account views, the
inputs were checked, these leases were granted, this attempt started or ended, the world was
seen like this) and executes the commands it gets back, in order, through its ports: the
ledger, the gate, the runner pool, the drift guard, the supervisors. A command that asks the
world something (a :data:`~ray_bench.scheduler.commands.Query`: check the inputs, acquire,
start, ask the gate why nothing can start, read the supervisors) is the last of its list, and
its answer is the next event. The events and commands are in :mod:`~ray_bench.scheduler.commands`.

The core owns the books its decisions share (the run state, the circuit, the quota fit, the
spend book, the running attempts, the nodes halted, the account probes) and delegates to the
launch policy (:mod:`~ray_bench.scheduler.launch`), the finish decision
(:mod:`~ray_bench.scheduler.finish`), the world stops (:mod:`~ray_bench.scheduler.stops`) and
the session's own steps (:mod:`~ray_bench.scheduler.session`: the circuit's health recoveries,
the account probes, the nodes' checks, the preflight gate, the final audit). No I/O, no Ray, no clock: time comes
in with the events. The driver, the simulator (the driver on a virtual clock) and the unit tests
(tests/scheduler/test_run_core.py) all go through :meth:`RunCore.step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.runroot import HEARTBEAT_SEC
from ray_bench.sandboxes.supervisor import ResourceHalt
from ray_bench.scheduler import session, stops
from ray_bench.scheduler.commands import (
    AccountsSeen,
    Acquire,
    AppendHalt,
    AskWhy,
    Audited,
    Beat,
    CancelRunning,
    CheckInputs,
    CircuitReplayed,
    Command,
    DiskFull,
    EnablesRead,
    Ended,
    Event,
    FanOutNears,
    Flush,
    GateSaid,
    Granted,
    InputsChecked,
    LoopBegins,
    LoopEnded,
    NodesChecked,
    Notify,
    PreflightDue,
    ProbeAccounts,
    Probed,
    ReadEnables,
    RecordEnd,
    ReleaseLease,
    Report,
    Retire,
    RoundBegins,
    RunLoop,
    Sleep,
    Start,
    Started,
    StopRun,
    Supervise,
    Supervised,
    TurnEnded,
    WorldSeen,
    stopping,
)
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import Append, FinishCore
from ray_bench.scheduler.launch import AskGate, Halt, LaunchCore, Round, Wait
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runstate import Aside, RunState
from ray_bench.scheduler.spend import SpendBook

#: How often the loop asks which held or cooling accounts are due a probe (health.probe_due).
PROBE_CHECK_SEC = 10.0


@dataclass
class _Open:
    """A launch round under way, between its queries."""

    round: Round
    now: float
    granted: dict[str, str] = field(default_factory=dict)
    probes: list[tuple[str, str]] = field(default_factory=list)
    offered: tuple[LeaseRequest, str, str] | None = None  # (request, scope, account) awaiting a grant
    starts: list[tuple[LeaseRequest, str]] = field(default_factory=list)
    waiting: list[PlanCell] = field(default_factory=list)


class RunCore:
    """The decisions of one session over the books they share; see the module docstring."""

    def __init__(self, plan: Plan, state: RunState, *, capacity: int, catalog: Catalog, circuit: RecoveryCircuit,
                 quota_fit: QuotaFit, spend: SpendBook, tick_sec: float, supervise_every_sec: float,
                 halt_file: Path | None, resume_command: str, began: float, run_root: Path) -> None:
        """``began``: when the session began on the core's clock (its run_started is the first
        heartbeat, and the scheduled account probes count from it); ``run_root``: named in the
        stops' words."""
        self.state = state
        self.run_root = run_root
        self.preflight = list(plan.preflight)
        self.account_names = sorted(a.name for a in plan.accounts)
        self.probes = session.AccountProbes(plan.accounts, circuit)
        #: The cells the preflight's loop set aside (None: no preflight loop runs).
        self._aside: Aside | None = None
        #: What a turn commands once its account probes are done.
        self._after_probes: list[Command] = []
        self._recovering: tuple[tuple[str, str], ...] = ()
        self.circuit = circuit
        self.spend = spend
        self.launch = LaunchCore(plan, capacity, circuit, quota_fit, spend)
        self.finishing = FinishCore(catalog, circuit, quota_fit, spend)
        self.tick_sec = tick_sec
        self.supervise_every_sec = supervise_every_sec
        self.halt_file = halt_file
        self.resume_command = resume_command
        #: Lease id -> the attempt running on it and its cell.
        self.running: dict[str, tuple[AttemptRow, PlanCell]] = {}
        #: Node -> its halt (it takes no more cells).
        self.halted: dict[str, ResourceHalt] = {}
        #: When the supervisors were last asked; None: never, so the first ask precedes the
        #: first start (a clock near 0, as in the simulator, must not skip it).
        self.supervised: float | None = None
        self._open: _Open | None = None
        self.beat = self.probes_checked = began
        self.last_report = 0.0

    def wants_views(self) -> bool:
        """Whether the next :class:`RoundBegins` should carry the accounts' views."""
        return self.launch.wants_views(self.state, len(self.running))

    def step(self, event: Event) -> list[Command]:
        match event:
            case LoopBegins():
                self.last_report = 0.0
                return []
            case RoundBegins():
                return self._begin(event)
            case InputsChecked():
                return self._checked(event)
            case Granted():
                return self._granted(event)
            case Started():
                return self._started(event)
            case GateSaid():
                return self._decided(self.launch.when_idle(event.blocked, event.stalled, self._round().now))
            case Ended():
                return self._ended(event)
            case WorldSeen():
                return self._seen(event)
            case Supervised():
                return self._supervised(event)
            case TurnEnded():
                return self._turn_ended(event)
            case CircuitReplayed():
                return self._replayed(event)
            case EnablesRead():
                return session.health_recoveries(self.circuit, self._recovering, event)
            case NodesChecked():
                return session.nodes_checked(event.checks)
            case FanOutNears():
                self.probes.begin(self.account_names, "before the fan-out")
                return self._next_account_probe()
            case AccountsSeen():
                self.probes.begin(self.probes.due(event.views, event.now), "scheduled")
                return self._next_account_probe()
            case Probed():
                return self.probes.result(event) + self._next_account_probe()
            case PreflightDue():
                return self._preflight_due(event)
            case LoopEnded():
                return self._loop_ended(event)
            case Audited():
                return session.audited(event, self.run_root)

    # -- a launch round ------------------------------------------------------------------------

    def _round(self) -> _Open:
        if self._open is None:
            raise AssertionError("an answer came with no launch round under way")
        return self._open

    def _begin(self, event: RoundBegins) -> list[Command]:
        round_ = self.launch.plan_round(self.state, event.views, len(self.running), event.now,
                                        self.launch.holding((row.account, cell) for row, cell in self.running.values()))
        self._open = _Open(round_, event.now)
        if round_.checked:
            return [CheckInputs(round_.checked)]
        return self._after_drift()

    def _checked(self, event: InputsChecked) -> list[Command]:
        drift = event.drift
        if drift is None:
            return self._after_drift()
        self.state.put_back([r.cell for r in self._round().round.requests])
        self._open = None
        seen = ev.DriftSeen(input=drift.kind, name=drift.name, path=drift.path, detail=drift.detail)
        return [Append(seen, event.cell_id), *stopping(ev.StopReason.DRIFT, (
            f"{drift.what} changed ({drift.detail}); running cells may finish, a new plan is required"))]

    def _after_drift(self) -> list[Command]:
        open_ = self._round()
        if open_.round.halt is not None:
            self._open = None
            return stopping(open_.round.halt.reason, open_.round.halt.detail)
        if not open_.round.requests:
            return [Flush(), *self._next_start()]
        open_.probes = self.launch.account_probes()
        return self._next_probe()

    def _next_probe(self) -> list[Command]:
        """An account scope on probation gets one request of the batch, offered to it alone:
        its probe. Then the rest of the batch goes to the accounts not excluded."""
        open_ = self._round()
        while open_.probes:
            scope, name = open_.probes.pop(0)
            request = self.launch.probe_offer(open_.round.requests, open_.granted)
            if request is None:
                open_.probes.clear()
                break
            open_.offered = (request, scope, name)
            return [Acquire((request,), self.launch.accounts - {name}, open_.now)]
        rest = tuple(r for r in open_.round.requests if r.lease_id not in open_.granted)
        if rest:
            return [Acquire(rest, self.launch.excluded(), open_.now)]
        return self._starts()

    def _granted(self, event: Granted) -> list[Command]:
        open_ = self._round()
        if open_.offered is not None:
            request, scope, name = open_.offered
            open_.offered = None
            if event.accounts.get(request.lease_id) == name:
                open_.granted[request.lease_id] = name
                self.launch.probe_granted(request, scope)
            return self._next_probe()
        open_.granted.update(event.accounts)
        return self._starts()

    def _starts(self) -> list[Command]:
        open_ = self._round()
        for request in open_.round.requests:
            account = open_.granted.get(request.lease_id)
            if account is None:
                open_.waiting.append(request.cell)
                self.launch.refused(request)
            else:
                open_.starts.append((request, account))
        return self._next_start()

    def _next_start(self) -> list[Command]:
        open_ = self._round()
        if open_.starts:
            return [Start(*open_.starts[0])]
        self.state.put_back(open_.waiting)
        decision = self.launch.conclude(open_.round, len(open_.waiting), len(self.running), open_.now)
        if isinstance(decision, AskGate):
            return [AskWhy(decision, open_.now)]
        return self._decided(decision)

    def _started(self, event: Started) -> list[Command]:
        open_ = self._round()
        request, _ = open_.starts.pop(0)
        if request.lease_id != event.lease_id:
            raise AssertionError(f"started {event.lease_id}, expected {request.lease_id}")
        cell = request.cell
        self.running[request.lease_id] = (event.row, cell)
        commands: list[Command] = [Append(e, cell.id) for e in self.launch.started(open_.round, request, event.row,
                                                                                   open_.now)]
        self.state.started(cell.id, request.lease_id, event.now)
        commands.append(Notify(AttemptStarted(event.row)))
        return commands + self._next_start()

    def _decided(self, decision: Wait | Halt) -> list[Command]:
        self._open = None
        if isinstance(decision, Halt):
            return stopping(decision.reason, decision.detail)
        return [decision]

    # -- a finished attempt ----------------------------------------------------------------------

    def _ended(self, event: Ended) -> list[Command]:
        """Record what the finish core decided for the attempt, in its order, then the cell's state."""
        row, cell = self.running.pop(event.lease_id)
        done = self.finishing.finished(row, event.lease_id, event.summary, self._running_on)
        record = done.record
        commands: list[Command] = [RecordEnd(row.attempt_id, record), ReleaseLease(done.release, event.now),
                                   *done.events]
        if done.disk_full is not None:
            commands.append(DiskFull(done.disk_full))
        cell_state = self.state.finished(cell.id, done.verdict, event.lease_id, event.now, row.account)
        commands.append(Notify(AttemptFinished(row, done.verdict, record.summary, cell_state, record.status,
                                               record.failure_class)))
        return commands

    def _running_on(self, backend: str) -> int:
        return sum(1 for row, _ in self.running.values() if row.backend == backend)

    # -- the world -------------------------------------------------------------------------------

    def _seen(self, event: WorldSeen) -> list[Command]:
        """A full disk, a signal or a pause decide at once; else the supervisors are asked every
        ``supervise_every_sec`` before the nodes' halts decide."""
        if event.disk_full is not None or event.signal is not None or event.pause is not None:
            return self._world(stops.Seen(disk_full=event.disk_full, signal=event.signal, pause=event.pause))
        if self.supervised is None or event.now - self.supervised >= self.supervise_every_sec:
            self.supervised = event.now
            return [Supervise()]
        return self._world(self._halts_seen(event.node_count))

    def _supervised(self, event: Supervised) -> list[Command]:
        """A node under its reserve takes no more cells (``node_halt``); once no node may, the
        run stops with ``resource-halt.json``. Running cells finish either way."""
        commands: list[Command] = []
        for halt in event.halts:
            if halt.node in self.halted:
                continue
            self.halted[halt.node] = halt
            commands += [Append(ev.NodeHalt.read(halt.to_json())), Retire(halt.node)]  # its own `kind` dropped
        return commands + self._world(self._halts_seen(event.node_count))

    def _halts_seen(self, node_count: int) -> stops.Seen:
        return stops.Seen(halted=[h.reason for h in self.halted.values()], node_count=node_count,
                          halt_file=self.halt_file)

    def _world(self, seen: stops.Seen) -> list[Command]:
        decision = stops.world_stop(seen, self.resume_command)
        if decision is not None:
            event = decision.event
            commands: list[Command] = []
            if decision.reason is ev.StopReason.HALT and isinstance(event, ev.Stop):
                commands.append(AppendHalt(event, tuple(self.halted.values())))
            else:
                commands.append(Append(event))
            if decision.cancel_running:
                commands.append(CancelRunning())
            signal = event.signal if decision.reason is ev.StopReason.SIGNAL and isinstance(event, ev.Stop) else None
            return [*commands, StopRun(decision.reason, decision.detail, signal)]
        # An account's budget is its own (lifetime, every run on the state root): the account
        # refuses admission and the run stops as `budget` when no account can take a cell.
        halt = stops.spend_halt(self.spend)
        return [] if halt is None else stopping(halt.reason, halt.detail)

    # -- the session -----------------------------------------------------------------------------

    def _replayed(self, event: CircuitReplayed) -> list[Command]:
        """The circuit the ledger leaves; its account scopes wait on a recorded health recovery."""
        self.circuit.open_scopes, self.circuit.probing = event.circuit.open_scopes, event.circuit.probing
        self._recovering = session.recovering(self.circuit)
        return [ReadEnables(self._recovering)] if self._recovering else []

    def _next_account_probe(self) -> list[Command]:
        """The next account probe, else what the turn commands after them."""
        probe = self.probes.next()
        if probe:
            return probe
        after, self._after_probes = self._after_probes, []
        return after

    def _preflight_due(self, event: PreflightDue) -> list[Command]:
        """The preflight belongs to the plan, not to a session: until the ledger records it
        passed, every session (a resume too) runs its remaining cells before any other."""
        if not self.preflight or event.passed:
            return [RunLoop()]
        gate = self.state.preflight(self.preflight)
        if gate.todo and not gate.spent:
            self._aside = self.state.restrict(set(gate.todo))
            return [RunLoop()]
        return session.preflight_judged(gate, self.state, self.preflight, self.run_root)

    def _loop_ended(self, event: LoopEnded) -> list[Command]:
        """The preflight's loop is over: unless it stopped the run, its gate is judged with
        every cell back in the queue. The fan-out's loop ends the session."""
        aside, self._aside = self._aside, None
        if aside is None or event.stopped:
            return []
        self.state.extend(aside)
        return session.preflight_judged(self.state.preflight(self.preflight), self.state, self.preflight,
                                        self.run_root)

    def _turn_ended(self, event: TurnEnded) -> list[Command]:
        """The turn's heartbeat, scheduled account probes and report, each when due; then, when
        nothing ran and nothing could start, a wait before asking again (four ticks, or until
        an account or a create frees itself). When cells just finished, the note predates them
        and their slots are free now."""
        now = event.now
        commands: list[Command] = []
        if now - self.beat >= HEARTBEAT_SEC:
            commands.append(Beat())
            self.beat = now
        probe = now - self.probes_checked >= PROBE_CHECK_SEC
        if probe:
            self.probes_checked = now
        after: list[Command] = []
        if now - self.last_report >= 1.0 or not self.running:
            after.append(Report(event.note, now))
            self.last_report = now
        if not (self.running or event.finished or event.stopped or not self.state.pending or not event.note):
            after.append(Sleep(self.tick_sec * 4, self.launch.wake_at))
        if not probe:
            return commands + after
        self._after_probes = after  # after the probes: the report's views show what they did
        return [*commands, ProbeAccounts(now)]

