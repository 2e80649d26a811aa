"""The run's events: one frozen model per kind, joined in :data:`RunEvent` (discriminated on
``kind``). Every writer appends one of these (:meth:`Ledger.append`), every reader folds over
them (status, metrics, console progress, reports, the circuit replay).

The ``data`` column holds the model without its ``kind`` (the column of its own), with the keys
and meanings the first ledgers stored, so older ledgers read with these models. Reading is
lenient, writing is not: a stored key that no longer fits is dropped and its field takes its
default (``None`` where unknown, never 0), a row that still does not fit, or a kind this
version does not know, comes back as an :class:`UnknownEvent` with its data (never a crash).
Constructing a model is strict (``extra="forbid"``): a misspelt field fails where it is written.

To add a kind: write its model here (a ``kind: Literal[...]`` field, defaults for fields that
old rows lack) and add it to :data:`RunEvent`. Nothing else lists kinds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class StopReason(StrEnum):
    """Why a session stopped before every cell had a row (``run_finished.stopped``, ``stop.reason``)."""

    DRIFT = "drift"
    HALT = "halt"
    CIRCUIT = "circuit"
    SPEND = "spend"
    BUDGET = "budget"
    PAUSED = "paused"
    PREFLIGHT = "preflight"
    ACCOUNTS = "accounts"
    AUDIT = "audit"
    NODES = "nodes"
    DISK_FULL = "disk_full"
    SIGNAL = "signal"
    RAY = "ray"


class EventPayload(BaseModel):
    """One event kind: its ``kind`` and the ``data`` column's fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    #: field -> the key it is stored under, where the first ledgers used a name a field cannot
    #: have (``class``) or one the event's own ``kind`` takes.
    stored_as: ClassVar[dict[str, str]] = {}

    def to_json(self) -> dict[str, Any]:
        """The ``data`` column (the kind has its own): the fields the writer gave, so that each
        kind keeps the shape its first writer stored (a ``stop`` names a signal only for one)."""
        data = self.model_dump(mode="json", exclude={"kind"}, exclude_unset=True)
        return {self.stored_as.get(k, k): v for k, v in data.items()}

    @classmethod
    def read(cls, data: dict[str, Any]) -> Self:
        """The payload of a stored event; stored keys that do not fit are dropped (their fields
        take their defaults). Raises ValidationError when a required field is still missing."""
        names = {v: k for k, v in cls.stored_as.items()}
        data = {names.get(k, k): v for k, v in data.items() if k in names or k != "kind"}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})


# -- the driver's events ------------------------------------------------------------------------


class RunOptionsRecord(BaseModel):
    """The execute options that shaped a session's concurrency (``run_started.options``), so that
    a lineage report can show them. None: not recorded (a ledger older than the field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    parallel: int | None = None
    runners_per_node: int | None = None
    address: str | None = None
    artifacts: str | None = None
    backend_pools: dict[str, int | None] = Field(default_factory=dict)
    plan_parallel_cap: int | None = None
    effective_concurrency: int | None = None


class RunStarted(EventPayload):
    """``run_started``: one execute (or resume) of the plan began."""

    kind: Literal["run_started"] = "run_started"
    identity: str = ""
    run_id: str = ""  # absent before the console read it from here
    resumed_stale: int | None = None
    deadline: float | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    options: RunOptionsRecord | None = None
    #: ``sha256:<hex>`` of the receipt the plan check passed before this session (None: an earlier
    #: version's session, or a driver started without the check): a resume matches it
    #: (:func:`ray_bench.commands.verify.verify_plan`) instead of rendering the receipt anew.
    receipt: str | None = None


#: What a closed session leaves its run as: ``status``'s state, and ``raybench_run_phase``.
ClosedPhase = Literal["paused", "stopped", "finished"]


class RunFinished(EventPayload):
    """``run_finished``: the session's outcome (``stopped`` None: every cell ran out)."""

    kind: Literal["run_finished"] = "run_finished"
    run_id: str = ""
    exit_code: int | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    #: Required: a stored reason this version does not know makes the row an UnknownEvent
    #: rather than a clean finish.
    stopped: StopReason | None
    detail: str = ""
    stale_recovered: int | None = None
    attempts_run: int | None = None
    wall_sec: float | None = None

    @property
    def phase(self) -> ClosedPhase:
        """An operator's pause leaves the run paused, any other stop stopped, none finished."""
        return "paused" if self.stopped == StopReason.PAUSED else "stopped" if self.stopped else "finished"


class Stop(EventPayload):
    """``stop``: why the loop stops launching (``cells``: a preflight's failed cells, ``signal``:
    the signal's name, ``halt``: the run's resource halt)."""

    kind: Literal["stop"] = "stop"
    reason: StopReason
    detail: str = ""
    cells: list[str] | None = None
    signal: str | None = None
    halt: dict[str, Any] | None = None


class Hypothesis(EventPayload):
    """``hypothesis``: the operator's hypothesis for this execute (it reopens every circuit)."""

    kind: Literal["hypothesis"] = "hypothesis"
    text: str = ""


class PreflightPassed(EventPayload):
    kind: Literal["preflight_passed"] = "preflight_passed"
    cells: list[str] = Field(default_factory=list)


class Heartbeat(EventPayload):
    """``heartbeat``: the driver loop turned (status and the DriverDown alert watch it)."""

    kind: Literal["heartbeat"] = "heartbeat"
    pid: int | None = None
    inflight: int | None = None


class DriftSeen(EventPayload):
    """``drift``: an input changed under the plan (ray_bench.plan.drift.Drift)."""

    kind: Literal["drift"] = "drift"
    stored_as: ClassVar[dict[str, str]] = {"input": "kind"}
    input: str = ""  # what drifted: task, agent, accounts, ...
    name: str = ""
    path: str = ""
    detail: str = ""


class CircuitOpen(EventPayload):
    """``circuit_open``: a failure signature repeated in one scope; no more cells there until a
    new hypothesis."""

    kind: Literal["circuit_open"] = "circuit_open"
    stored_as: ClassVar[dict[str, str]] = {"failure_class": "class"}
    scope: str
    fingerprint: str
    failure_class: str = ""
    message: str = ""
    #: A probe's attempt whose failure closed the scope again, and the hypothesis it tried
    #: (the circuit-probe branch writes these).
    probe: str | None = None
    hypothesis: str | None = None


class CircuitProbe(EventPayload):
    """``circuit_probe``: one cell sent into an open scope to test a new hypothesis."""

    kind: Literal["circuit_probe"] = "circuit_probe"
    scope: str = ""
    fingerprint: str = ""
    hypothesis: str | None = None
    attempt_id: str = ""
    cell_id: str = ""
    account: str = ""


class CircuitReopened(EventPayload):
    """``circuit_reopened``: an open scope admits cells again (``via``: probe or enable)."""

    kind: Literal["circuit_reopened"] = "circuit_reopened"
    scope: str = ""
    via: str = ""
    attempt_id: str | None = None
    hypothesis: str | None = None
    who: str | None = None
    reason: str | None = None
    detail: str | None = None  # a passing account probe's output


class Quota(EventPayload):
    """``quota``: a provider refused a sandbox for its pool; the driver learnt the limit."""

    kind: Literal["quota"] = "quota"
    backend: str = ""
    running: int | None = None
    limit: int | None = None
    message: str = ""


class NodeCheck(EventPayload):
    """``node_check``: every node's check before the fan-out (ray_bench.cells.nodes.NodeCheck)."""

    kind: Literal["node_check"] = "node_check"
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    summary: str = ""

    @property
    def all_ok(self) -> bool:
        return all(n.get("ok") for n in self.nodes)


class NodeHalt(EventPayload):
    """``node_halt``: a node ran under its reserve and takes no more cells
    (ray_bench.sandboxes.supervisor.ResourceHalt)."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # the halt's own ``kind`` tag is dropped
    kind: Literal["node_halt"] = "node_halt"
    run_id: str = ""
    reason: str = ""
    available_mb: int | None = None
    reserve_mb: int | None = None
    at: str = ""
    containers: list[dict[str, Any]] = Field(default_factory=list)
    node: str = ""
    address: str = ""
    free_disk_mb: int | None = None
    disk_reserve_mb: int | None = None


class NodeLost(EventPayload):
    """``node_lost``: a node Ray declared dead while it held no attempt (its death is a node
    event, not sandbox residue: ray_bench.onray.pool.RayPool.lost_nodes)."""

    kind: Literal["node_lost"] = "node_lost"
    stored_as: ClassVar[dict[str, str]] = {"while_": "while"}
    node: str = ""
    while_: str = "idle"


class AccountProbe(EventPayload):
    """``account_probe``: an account's ``probe_command`` ran (before the fan-out, or on a schedule
    for a held or cooling account) and what its verdict did (ray_bench.accounts.health.probe_effect)."""

    kind: Literal["account_probe"] = "account_probe"
    account: str = ""
    verdict: str = ""
    effect: str = ""
    detail: str = ""
    when: str = ""


class SnapshotBuildStarted(EventPayload):
    """``snapshot_build_started``: the build phase began a snapshot (ray_bench.scheduler.builds)."""

    kind: Literal["snapshot_build_started"] = "snapshot_build_started"
    snapshot: str = ""
    source: str = ""
    tasks: list[str] = Field(default_factory=list)
    rebuild: bool = False


class SnapshotBuildFinished(EventPayload):
    """``snapshot_build_finished``: a snapshot built (``ok``) or failed with the service's reason;
    a failed build fails its ``cells`` once, as ``stack``."""

    kind: Literal["snapshot_build_finished"] = "snapshot_build_finished"
    snapshot: str = ""
    source: str = ""
    tasks: list[str] = Field(default_factory=list)
    ok: bool | None = None
    error: str | None = None
    seconds: float | None = None
    cells: int | None = None


class Paused(EventPayload):
    """``paused``: the operator's pause request, as ``ray-bench pause`` wrote it."""

    kind: Literal["paused"] = "paused"
    requested_at: float | None = None
    now: bool = False
    reason: str = ""
    resume_action: str = ""


class Resumed(EventPayload):
    kind: Literal["resumed"] = "resumed"
    after: str = ""


class Audit(EventPayload):
    """``audit``: the end-of-run audit removed ``removed`` and left ``residue`` sandboxes."""

    kind: Literal["audit"] = "audit"
    removed: int | None = None
    residue: int | None = None


class HaltCleared(EventPayload):
    kind: Literal["halt_cleared"] = "halt_cleared"
    archived: str = ""
    reason: str = ""


class LedgerRebuilt(EventPayload):
    kind: Literal["ledger_rebuilt"] = "ledger_rebuilt"
    finished: int | None = None
    valid: int | None = None
    open: int | None = None
    skipped: list[Any] = Field(default_factory=list)


class Regraded(EventPayload):
    """``regraded``: ``ray-bench regrade`` ran a task's changed verifier on an attempt's kept
    workspace (``source``), as the new attempt ``attempt`` (ray_bench.commands.regrade)."""

    kind: Literal["regraded"] = "regraded"
    source: str = ""
    attempt: str = ""
    task: str = ""
    arm: str = ""
    rep: int = 0
    valid: bool | None = None
    reward_before: float | None = None
    reward_after: float | None = None
    tests_sha256: str = Field(default="", description="The tests/ checksum the workspace was graded by.")


class SettlementData(EventPayload):
    """``settlement``: provider charges matched to attempts (ray_bench.evidence.settle)."""

    kind: Literal["settlement"] = "settlement"
    by: str = ""
    source: str = ""
    sha256: str = ""
    format: str = ""
    unmatched_charges: int = 0
    unmatched_usd: float = 0.0
    attempts: dict[str, dict[str, Any]] = Field(default_factory=dict)


# -- the operator's decisions -------------------------------------------------------------------


class _CellDecision(EventPayload):
    task: str = ""
    arm: str = ""
    rep: int = 0
    reason: str = ""
    by: str = ""


class ExclusionData(_CellDecision):
    """``exclusion``: an operator took a planned cell out of both denominators."""

    kind: Literal["exclusion"] = "exclusion"


class InclusionData(_CellDecision):
    """``inclusion``: an operator undid an exclusion (same fields, its own reason)."""

    kind: Literal["inclusion"] = "inclusion"


class PromotionData(EventPayload):
    """``promotion``: the run (and its family) became official, with the gates it passed."""

    kind: Literal["promotion"] = "promotion"
    by: str = ""
    reason: str = ""
    family: list[str] = Field(default_factory=list)
    #: [name, ok, detail] per gate, as first stored.
    gates: list[tuple[str, bool, str]] = Field(default_factory=list)
    max_invalid_rate: float | None = None
    require_settlement: bool | None = None
    identity: str = ""


class DemotionData(EventPayload):
    """``demotion``: an official run (and its family) went back to staging, with who and why
    (so that its settlement, exclusions or rows may change again, on the record)."""

    kind: Literal["demotion"] = "demotion"
    by: str = ""
    reason: str = ""
    family: list[str] = Field(default_factory=list)


class UnknownEvent(BaseModel):
    """A stored event this version cannot type: a kind it does not know (a newer writer, or a
    branch writing through :meth:`Ledger.event`), or a row whose required fields do not fit."""

    model_config = ConfigDict(frozen=True)
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)


RunEvent = Annotated[
    RunStarted | RunFinished | Stop | Hypothesis | PreflightPassed | Heartbeat | DriftSeen
    | CircuitOpen | CircuitProbe | CircuitReopened | Quota | NodeCheck | NodeHalt | Paused | Resumed
    | NodeLost | AccountProbe | SnapshotBuildStarted | SnapshotBuildFinished
    | Audit | HaltCleared | LedgerRebuilt | SettlementData | Regraded
    | ExclusionData | InclusionData | PromotionData | DemotionData,
    Field(discriminator="kind"),
]
RUN_EVENT: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)

#: kind -> model, derived from the union (the one list of kinds).
KINDS: dict[str, type[EventPayload]] = {
    m.model_fields["kind"].default: m for m in get_args(get_args(RunEvent)[0])
}


def parse_event(kind: str, data: dict[str, Any]) -> RunEvent | UnknownEvent:
    """A stored row as its typed event; never raises (see the module docstring)."""
    model = KINDS.get(kind)
    if model is None:
        return UnknownEvent(kind=kind, data=data)
    try:
        return model.read(data)  # type: ignore[return-value]  # KINDS holds the union's members
    except ValidationError:
        return UnknownEvent(kind=kind, data=data)


def event_of(kind: str, data: dict[str, Any] | None) -> EventPayload:
    """The typed event of a write through the old ``(kind, data)`` API: strict, so a misspelt
    field of a known kind fails. Raises KeyError for a kind not in :data:`RunEvent`."""
    model = KINDS[kind]
    names = {v: k for k, v in model.stored_as.items()}
    return model.model_validate({names.get(k, k): v for k, v in (data or {}).items()
                                 if k in names or k != "kind"})
