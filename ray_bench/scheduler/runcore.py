"""The run's decisions as one pure step (issue 30, step 3): ``RunCore.step(event) -> [Command]``.

The driver's loop tells the core what happened (a round begins with these account views, the
inputs were checked, these leases were granted, this attempt started or ended, the world was
seen like this) and executes the commands it gets back, in order, through its ports: the
ledger, the gate, the runner pool, the drift guard, the supervisors. A command that asks the
world something (:data:`Query`: check the inputs, acquire, start, ask the gate why nothing can
start, read the supervisors) is the last of its list, and its answer is the next event.

The core owns the books its decisions share (the run state, the circuit, the quota fit, the
spend book, the running attempts, the nodes halted) and delegates to the launch policy
(:mod:`~ray_bench.scheduler.launch`), the finish decision (:mod:`~ray_bench.scheduler.finish`)
and the world stops (:mod:`~ray_bench.scheduler.stops`). No I/O, no Ray, no clock: time comes
in with the events. The driver, the simulator (the driver on a virtual clock) and the unit tests
(tests/scheduler/test_run_core.py) all go through :meth:`RunCore.step`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.plan.drift import Drift
from ray_bench.sandboxes.supervisor import ResourceHalt
from ray_bench.scheduler import stops
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import Append, FinishCore, Record, Release
from ray_bench.scheduler.launch import AskGate, Halt, LaunchCore, Round, Wait
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted, LiveEvent
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook

# -- events: what the driver tells the core ---------------------------------------------------


@dataclass(frozen=True)
class RoundBegins:
    """A launch round at ``now``; ``views``: the accounts, read when :meth:`RunCore.wants_views`."""

    now: float
    views: Sequence[AccountView] = ()


@dataclass(frozen=True)
class InputsChecked:
    """The answer to :class:`CheckInputs`: the first drift found and its cell (None: none)."""

    drift: Drift | None = None
    cell_id: str | None = None


@dataclass(frozen=True)
class Granted:
    """The answer to :class:`Acquire`: lease id -> account."""

    accounts: Mapping[str, str]


@dataclass(frozen=True)
class Started:
    """The answer to :class:`Start`: the attempt recorded and sent to a runner, at ``now``."""

    lease_id: str
    row: AttemptRow
    now: float


@dataclass(frozen=True)
class GateSaid:
    """The answer to :class:`AskWhy`: when an account frees itself, and why none will."""

    blocked: tuple[float, str] | None
    stalled: str | None


@dataclass(frozen=True)
class Ended:
    """The attempt of ``lease_id`` came back from its runner with ``summary``, at ``now``."""

    lease_id: str
    summary: AttemptSummary
    now: float


@dataclass(frozen=True)
class WorldSeen:
    """What the driver read this round: a full disk it met (its words), a stop signal, the
    pause file's request (``{}`` unreadable, None: no file), how many nodes host runners."""

    now: float
    disk_full: str | None = None
    signal: str | None = None
    pause: Mapping[str, Any] | None = None
    node_count: int = 0


@dataclass(frozen=True)
class Supervised:
    """The answer to :class:`Supervise`: the nodes under their reserve."""

    halts: Sequence[ResourceHalt]
    node_count: int


@dataclass(frozen=True)
class TurnEnded:
    """A turn of the loop is over: ``finished`` attempts came back, ``stopped``: the run stops,
    ``note``: what the round said work waits on."""

    now: float
    finished: int
    stopped: bool
    note: str | None


Event = (RoundBegins | InputsChecked | Granted | Started | GateSaid | Ended | WorldSeen | Supervised
         | TurnEnded)

# -- commands: what the driver executes, in order ---------------------------------------------


@dataclass(frozen=True)
class CheckInputs:
    """Check the inputs of these cells for drift, in order (answer: :class:`InputsChecked`)."""

    cells: tuple[PlanCell, ...]


@dataclass(frozen=True)
class Acquire:
    """Ask the gate to admit these requests at ``now`` on any account but ``exclude``
    (answer: :class:`Granted`)."""

    requests: tuple[LeaseRequest, ...]
    exclude: frozenset[str]
    now: float


@dataclass(frozen=True)
class Start:
    """Record the attempt of ``request`` on ``account`` in the ledger, then send it to a runner
    (answer: :class:`Started`)."""

    request: LeaseRequest
    account: str


@dataclass(frozen=True)
class AskWhy:
    """Nothing runs and nothing could start: ask the gate when an account frees itself and,
    if none will by itself, why (answer: :class:`GateSaid`)."""

    ask: AskGate
    now: float


@dataclass(frozen=True)
class Supervise:
    """Ask the nodes' resource supervisors (answer: :class:`Supervised`)."""


Query = CheckInputs | Acquire | Start | AskWhy | Supervise


@dataclass(frozen=True)
class Flush:
    """Deliver the gate's buffered releases now (no acquire comes next)."""


@dataclass(frozen=True)
class RecordEnd:
    """The attempt's terminal record in the ledger."""

    attempt_id: str
    record: Record


@dataclass(frozen=True)
class ReleaseLease:
    """Give the lease back to its account at ``now``."""

    release: Release
    now: float


@dataclass(frozen=True)
class DiskFull:
    """An attempt's files met a full disk (``message``): the next round stops the run."""

    message: str


@dataclass(frozen=True)
class Notify:
    """Tell the observers a live fact of the loop (the ledger's appends notify by themselves)."""

    event: LiveEvent


@dataclass(frozen=True)
class Retire:
    """The node takes no more cells."""

    node: str


@dataclass(frozen=True)
class AppendHalt:
    """Write the run's halt file from ``halts``, then append ``event`` with its record."""

    event: ev.Stop
    halts: tuple[ResourceHalt, ...]


@dataclass(frozen=True)
class CancelRunning:
    """Cancel every running attempt (their sandboxes are deleted)."""


@dataclass(frozen=True)
class StopRun:
    """The run stops launching (running cells may finish); ``signal``: the one that stopped it."""

    reason: str
    detail: str
    signal: str | None = None


@dataclass(frozen=True)
class Sleep:
    """Nothing ran and nothing could start: wait this long before the next round."""

    seconds: float


Command = (Query | Append | Flush | RecordEnd | ReleaseLease | DiskFull | Notify | Retire | AppendHalt
           | CancelRunning | StopRun | Wait | Sleep)


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
                 halt_file: Path | None, resume_command: str) -> None:
        self.state = state
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

    def wants_views(self) -> bool:
        """Whether the next :class:`RoundBegins` should carry the accounts' views."""
        return self.launch.wants_views(self.state, len(self.running))

    def step(self, event: Event) -> list[Command]:
        match event:
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

    # -- a launch round ------------------------------------------------------------------------

    def _round(self) -> _Open:
        if self._open is None:
            raise AssertionError("an answer came with no launch round under way")
        return self._open

    def _begin(self, event: RoundBegins) -> list[Command]:
        round_ = self.launch.plan_round(self.state, event.views, len(self.running), event.now)
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
        return [Append(seen, event.cell_id), *_stop(ev.StopReason.DRIFT, (
            f"{drift.what} changed ({drift.detail}); running cells may finish, a new plan is required"))]

    def _after_drift(self) -> list[Command]:
        open_ = self._round()
        if open_.round.halt is not None:
            self._open = None
            return _stop(open_.round.halt.reason, open_.round.halt.detail)
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
            return _stop(decision.reason, decision.detail)
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
        return [] if halt is None else _stop(halt.reason, halt.detail)

    def _turn_ended(self, event: TurnEnded) -> list[Command]:
        """Nothing ran and nothing could start: wait before asking again (four ticks, or until
        an account or a create frees itself). When cells just finished, the note predates
        them and their slots are free now."""
        if self.running or event.finished or event.stopped or not self.state.pending or not event.note:
            return []
        idle = self.tick_sec * 4
        if self.launch.wake_at is not None:
            idle = min(idle, max(0.0, self.launch.wake_at - event.now))
        return [Sleep(idle)]


def _stop(reason: ev.StopReason, detail: str) -> list[Command]:
    return [Append(ev.Stop(reason=reason, detail=detail)), StopRun(reason, detail)]
