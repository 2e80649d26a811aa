"""The vocabulary of the run core's step (:mod:`~ray_bench.scheduler.runcore`): the events the
driver tells the core and the commands it executes, each a frozen dataclass, matched by the
driver. A :data:`Query` asks the world something; its answer is the next event (the docstring of
each query names its answer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_bench.accounts.store import OperatorEvent
from ray_bench.cells.nodes import NodeCheck
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import PlanCell
from ray_bench.plan.drift import Drift
from ray_bench.sandboxes.supervisor import ResourceHalt
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.finish import Append, Record, Release
from ray_bench.scheduler.launch import AskGate, Wait
from ray_bench.scheduler.observers import LiveEvent

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
class LoopBegins:
    """The driver's loop begins (the preflight's, then the fan-out's)."""


@dataclass(frozen=True)
class TurnEnded:
    """A turn of the loop is over: ``finished`` attempts came back, ``stopped``: the run stops,
    ``note``: what the round said work waits on."""

    now: float
    finished: int
    stopped: bool
    note: str | None


@dataclass(frozen=True)
class PauseFound:
    """A pause file is in the run root as the session opens: when it was requested (its
    ``requested_at``, else the file's mtime; None: unreadable), and when this session started
    (None: not known). Decided by :func:`~ray_bench.scheduler.session.pause_left`."""

    requested_at: float | None
    session_started: float | None


@dataclass(frozen=True)
class StaleFound:
    """An attempt a dead driver left without a terminal record, its sandboxes (``removed`` of
    them) removed by label. Decided by :func:`~ray_bench.scheduler.session.stale_end`."""

    row: AttemptRow
    removed: int


@dataclass(frozen=True)
class CircuitReplayed:
    """The circuit as the ledger leaves it (:func:`ray_bench.evidence.circuit.circuit_from`)."""

    circuit: RecoveryCircuit


@dataclass(frozen=True)
class EnablesRead:
    """The answer to :class:`ReadEnables`: when each scope's circuit opened (ledger time), and
    the operator events of each account in the state root's account store ({}: no store)."""

    opened_at: Mapping[str, float]
    events: Mapping[str, Sequence[OperatorEvent]]


@dataclass(frozen=True)
class NodesChecked:
    """Each node's check before the fan-out (None: not checked)."""

    checks: Sequence[NodeCheck] | None


@dataclass(frozen=True)
class FanOutNears:
    """The build phase is over: the fan-out (the preflight's first) is next."""


@dataclass(frozen=True)
class AccountsSeen:
    """The answer to :class:`ProbeAccounts`: the accounts' views at ``now``."""

    views: Sequence[AccountView]
    now: float


@dataclass(frozen=True)
class Probed:
    """The answer to :class:`Probe`: the account's ``probe_command`` said ``verdict`` (ok,
    auth, quota, ...) with ``detail``; it ended at ``now``."""

    account: str
    verdict: str
    detail: str
    now: float


@dataclass(frozen=True)
class PreflightDue:
    """The preflight comes before the fan-out; ``passed``: the ledger records that it passed
    (in an earlier session of the plan)."""

    passed: bool


@dataclass(frozen=True)
class LoopEnded:
    """The answer to :class:`RunLoop`: the loop is over; ``stopped``: the run stopped in it."""

    stopped: bool


@dataclass(frozen=True)
class Audited:
    """The session's end: ``removed`` sandboxes removed, ``residue`` still there, ``lost_nodes``
    died idle; ``stopped``: the run had stopped before."""

    removed: int
    residue: int
    lost_nodes: tuple[str, ...]
    stopped: bool


Event = (LoopBegins | RoundBegins | InputsChecked | Granted | Started | GateSaid | Ended | WorldSeen
         | Supervised | TurnEnded | CircuitReplayed | EnablesRead | NodesChecked | FanOutNears | AccountsSeen
         | Probed | PreflightDue | LoopEnded | Audited)

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


@dataclass(frozen=True)
class ReadEnables:
    """Read when the circuits of ``scopes`` opened and the operator events of their accounts
    ((scope, account) pairs; answer: :class:`EnablesRead`)."""

    scopes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ProbeAccounts:
    """Read the accounts' views at ``now``, to see which are due a probe (answer: :class:`AccountsSeen`)."""

    now: float


@dataclass(frozen=True)
class Probe:
    """Run the account's ``probe_command`` (answer: :class:`Probed`); ``when`` goes in its record."""

    account: str
    when: str


@dataclass(frozen=True)
class RunLoop:
    """Turn the loop until every pending cell is done or the run stops and nothing runs
    (answer: :class:`LoopEnded`)."""


Query = CheckInputs | Acquire | Start | AskWhy | Supervise | ReadEnables | ProbeAccounts | Probe | RunLoop


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
class Beat:
    """Append a heartbeat: the driver's pid and the attempts in flight (status watches it)."""


@dataclass(frozen=True)
class RecordHealth:
    """Add ``kind`` (``probe:<effect>``) to the account's events in the state root's account
    store, which its actor applies (it disables, expires, cools or ends a cooldown)."""

    account: str
    kind: str
    detail: str


@dataclass(frozen=True)
class ArchivePause:
    """Move the pause file under ``pauses/`` (the run root only grows)."""


@dataclass(frozen=True)
class Report:
    """Tell the observers a tick of the loop at ``now``: the run state, the accounts' views,
    ``note``."""

    note: str | None
    now: float


@dataclass(frozen=True)
class Sleep:
    """Nothing ran and nothing could start: wait ``most`` seconds before the next round, or
    until ``until`` (the core's clock) when that comes sooner."""

    most: float
    until: float | None = None


Command = (Query | Append | Flush | RecordEnd | ReleaseLease | DiskFull | Notify | Retire | AppendHalt
           | CancelRunning | StopRun | Wait | Beat | Report | Sleep | RecordHealth | ArchivePause)


def stopping(reason: ev.StopReason, detail: str) -> list[Command]:
    """The run stops: its ``stop`` record, then the stop."""
    return [Append(ev.Stop(reason=reason, detail=detail)), StopRun(reason, detail)]


