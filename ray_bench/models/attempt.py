"""The attempt summary: what a cell runner returns and writes as ``result.json``, what the
driver classifies and stores in the ledger, and what reports read back.

One model for the contract between runner, pool, driver, evidence and metrics (a rename is a
type error, not a silent ``None``). Its JSON keeps the shape the first ledgers stored (same
keys, same meanings), so :meth:`AttemptSummary.parse` reads old ledgers too; a field an old
or foreign writer got wrong is dropped rather than failing the whole read.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from ray_bench.numbers import amounts_problem


class _Record(BaseModel):
    # ``ignore``: ledgers written by newer code may carry fields this code does not know.
    model_config = ConfigDict(extra="ignore")


class _Open(BaseModel):
    """Written by agents and providers, not by us: unknown keys are kept."""

    model_config = ConfigDict(extra="allow")


class ExecFacts(_Record):
    """One command run in the sandbox (the agent, the verifier)."""

    exit_code: int | None = None
    timed_out: bool = False
    duration_sec: float = 0.0
    truncated_bytes: int = 0
    oom_killed: bool = False
    output_tail: str = Field(default="", description="The last few KB of stdout+stderr, redacted.")
    stopped: str | None = Field(default=None, description="Stopped live, and why (the degeneration watchdog).")

    @model_serializer(mode="wrap")
    def _same_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unstopped command writes the keys the first ledgers had (their readers compare shapes).
        data: dict[str, Any] = handler(self)
        if data.get("stopped") is None:
            data.pop("stopped", None)
        return data


class AttemptError(_Record):
    """An exception the attempt ended with (the runner's, or the pool's when the runner was lost)."""

    type: str = ""
    message: str = ""
    failure_class: str = "executor"
    retry_after: float | None = None
    traceback: str | None = None


class Usage(_Open):
    """``/logs/agent/usage.json``: tokens, cost, model, request ids (adapters add more)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    #: ``reported`` (the CLI's figure) or ``estimated`` (its tokens at list price, ray_bench.agents.prices).
    cost_basis: str | None = None
    model: str | None = None
    #: ``unknown``: the adapter could not tell what the attempt spent (ray_bench.models.agent).
    source: str | None = None
    #: Answered calls whose request id no record holds: the ids are partial (ray_bench.models.agent).
    request_ids_missing: int | None = None
    #: Calls started whose end no record holds (their ids are unknown too; ray_bench.models.agent).
    calls_unfinished: int | None = None
    #: ``exact`` or ``lower_bound`` (ray_bench.models.agent.UsageBound); None in records older than
    #: the field (read by :attr:`lower_bound`) and in an agent's own. A str: a foreign value drops
    #: no usage, and reads as exact.
    bound: str | None = None
    #: Why the record's numbers were refused (``cost_usd: inf is not a finite number``): the
    #: record is then ``source: unknown`` with no number at all, and the attempt is invalid.
    invalid: str | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _amounts_checked(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Usage:
        """Every number in the record is a count or a cost (ray_bench.numbers): one that is not
        finite, negative or absurd makes the whole record unknown, kept only with the reason,
        its model and its request ids. Checked as written and again as read (``"inf"`` as a
        string reads as a float), on every read: an agent's file, a ledger's stored summary."""
        problem = amounts_problem(data) if isinstance(data, dict) else None
        if problem is None and isinstance(data, dict) and "unparseable" in data:
            # not JSON, not an object, or not the contract's types (the reader kept its text),
            # or over its bound (ray_bench.cells.contract_files): no figure in it is evidence
            note = str(data["unparseable"])
            problem = "unreadable" + (f" ({note[:80]})" if note.startswith("larger than") else "")
        if problem is None:
            usage: Usage = handler(data)
            problem = amounts_problem({**(usage.model_extra or {}), **{
                k: getattr(usage, k) for k in ("input_tokens", "output_tokens", "cost_usd", "request_ids_missing")}})
            if problem is None:
                return usage
        kept = {k: data[k] for k in ("model", "request_ids") if isinstance(data, dict)
                and isinstance(data.get(k), str if k == "model" else list)}
        if not all(isinstance(i, str) for i in kept.get("request_ids", [])):
            kept.pop("request_ids")
        refused: Usage = handler({**kept, "source": "unknown", "invalid": problem})
        return refused

    @property
    def known(self) -> bool:
        return self.source != "unknown"

    @property
    def lower_bound(self) -> bool:
        """The figures are at least what was spent, not exactly it: the adapter said so, or (a
        record older than :attr:`bound`) its CLI was cut with a message unfinished or a call under
        way. Unknown usage is no bound at all (False: it is counted apart)."""
        if not self.known:
            return False
        if self.bound is not None:
            return self.bound == "lower_bound"
        extra = self.model_extra or {}
        unfinished = extra.get("unfinished_messages")
        return (isinstance(unfinished, int) and unfinished > 0) or extra.get("call_under_way") is True

    @model_serializer(mode="wrap")
    def _same_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A record without a bound keeps the shape it was read with (old ledgers, agents' own).
        data: dict[str, Any] = handler(self)
        for key in ("bound", "invalid"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class AgentError(_Open):
    """``/logs/agent/error.json``: the agent's own account of a failure."""

    type: str | None = None
    message: str | None = None
    retry_after: float | None = None


class VerdictRecord(_Record):
    """The driver's classification, stored with the summary."""

    valid: bool = False
    failure_class: str | None = None
    fingerprint: str | None = None
    message: str = ""
    flags: list[str] = Field(default_factory=list)


class WatchdogFacts(_Record):
    """The degeneration watchdog stopped the agent (:mod:`ray_bench.agents.watchdog`): which
    rule fired, what it saw, and that the verifier was skipped. Also ``watchdog.json`` in the
    attempt directory."""

    rule: str = Field(default="", description=(
        "repeated_tool_call, repeated_output, idle_workspace, token_bound or spend_bound."))
    message: str = ""
    after_sec: float = Field(default=0.0, description="Seconds into the agent phase when it fired.")
    tokens: int | None = Field(default=None, description="Tokens the agent's live output reported by then.")
    spent_usd: float | None = Field(default=None, description=(
        "What the live usage had cost by then at list price (None: no usage seen, or no price)."))
    evidence: list[str] = Field(default_factory=list, description=(
        "The repeated call or line, then the last lines seen (redacted)."))
    verifier: str = Field(default="skipped", description="The verifier does not run after a stop.")


class HealthcheckFacts(_Record):
    """A task's healthcheck before the agent (``[environment.healthcheck]``, per step too)."""

    healthy: bool | None = None
    attempts: int = 0
    exit_code: int | None = None
    seconds: float = 0.0


class CollectFacts(_Record):
    """One ``[[verifier.collect]]`` hook."""

    command: str = ""
    exit_code: int | None = None
    timed_out: bool = False


class StepFacts(_Record):
    """One step of a multi-step task; its logs are in ``steps/<name>/`` of the attempt."""

    name: str = ""
    phases: dict[str, float] = Field(default_factory=dict)
    setup_exit: int | None = None
    healthcheck: HealthcheckFacts | None = None
    agent: ExecFacts | None = None
    verifier: ExecFacts | None = None
    collect: list[CollectFacts] = Field(default_factory=list)
    rewards: dict[str, float] | None = None
    reward: float | None = None
    reward_source: str | None = None
    usage: Usage | None = None
    agent_error: AgentError | None = None
    stopped: str | None = Field(default=None, description="Why the remaining steps did not run (min_reward).")


class ArtifactPlace(_Record):
    """Where an attempt's directory (``result.json``, logs, artifacts) is: ``via`` ``run-root``
    (written there by a runner that sees it), ``ray`` (returned through Ray and written by the
    driver) or ``store`` (``uri`` in the artifact store)."""

    via: str = "run-root"
    uri: str = ""
    omitted_files: int = Field(default=0, description="Files left out by the artifact cap on the way back.")
    error: str | None = Field(default=None, description="Why the store was not used (the files came back "
                                                        "through Ray instead), or why they were not written.")


class WorkspaceFacts(_Record):
    """The agent's final workspace, kept for ``ray-bench regrade`` (an arm's ``keep_workspace``):
    the task's workdir after the agent, before the collect hooks and the verifier. Over the
    artifact cap it is not kept at all (never cut short), with its size and why."""

    kept: bool = False
    file: str | None = Field(default=None, description="The tarball in the attempt directory.")
    sha256: str | None = Field(default=None, description="sha256 of the tarball's bytes.")
    bytes: int = Field(default=0, description="The tarball's size (0: not kept).")
    workspace_bytes: int | None = Field(default=None, description=(
        "The workspace's file bytes (over the cap: its size as `du` measured it in the sandbox)."))
    workdir: str = Field(default="", description="The sandbox path it was taken from (and is restored to).")
    reason: str | None = Field(default=None, description="Why it was not kept.")
    task_parts: dict[str, str] = Field(default_factory=dict, description=(
        "Checksums of the task's parts when the attempt ran (tests, instruction, environment, "
        "solution, config): regrade compares them with the task as it is now."))


class AttemptSummary(_Record):
    """The terminal summary of one attempt. The runner states facts; the driver adds the
    ``verdict``. ``lost`` marks an attempt that died with its runner or node (infrastructure,
    not evidence about the cell); ``stale`` one a dead driver left without a terminal record."""

    attempt_id: str = ""
    cell_id: str = ""
    task: str = ""
    arm: str = ""
    rep: int = 0
    account: str = ""
    backend: str = ""
    node: str = ""
    #: The Ray node id the runner ran on (hosts of a local multi-node cluster share a name).
    ray_node: str = ""
    pid: int = 0
    python: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    phases: dict[str, float] = Field(default_factory=dict)
    agent: ExecFacts | None = None
    verifier: ExecFacts | None = None
    reward: float | None = None
    reward_source: str | None = None
    usage: Usage | None = None
    agent_error: AgentError | None = None
    error: AttemptError | None = None
    cancelled: bool = False
    agent_started: bool | None = Field(default=None, description=(
        "The agent's command was launched (the runner sets False when it starts the attempt, True "
        "at the launch). None: not known (a summary older than the field, or one the pool made "
        "for a runner it lost or cancelled): a cancelled attempt is then of unknown cost, never $0."))
    lost: bool = False
    stale: bool = False
    sandbox_id: str | None = None
    verifier_account: str | None = Field(default=None, description=(
        "The account whose route gave the verifier its credential variables (the arm's judge role)."))
    verifier_sandbox_id: str | None = Field(default=None, description=(
        "A separate verifier's own sandbox (task.toml environment_mode = 'separate'); deleted like the agent's."))
    sandboxes_removed: int | None = None
    artifact_bytes: int = 0
    cleanup_error: str | None = None
    verdict: VerdictRecord | None = None
    agent_kind: str | None = Field(default=None, description="The arm's agent adapter.")
    model: str | None = Field(default=None, description="The arm's model: usage evidence is required.")
    login_written_back: list[str] = Field(
        default_factory=list, description="HOME credential files the agent refreshed, written back.")
    # What a Harbor task.toml adds (ray_bench.cells.phases / steps).
    healthcheck: HealthcheckFacts | None = None
    collect: list[CollectFacts] = Field(default_factory=list)
    artifacts_exit: int | None = None
    rewards: dict[str, float] | None = Field(default=None, description="Every reward key (reward.json, steps).")
    steps: list[StepFacts] = Field(default_factory=list)
    watchdog: WatchdogFacts | None = Field(
        default=None, description="Set when the degeneration watchdog stopped the agent.")
    artifacts: ArtifactPlace | None = Field(default=None, description="Where the attempt's files are.")
    workspace: WorkspaceFacts | None = Field(default=None, description=(
        "The agent's final workspace, when the arm keeps it (keep_workspace)."))
    regrade_of: str | None = Field(default=None, description=(
        "A regrade: the attempt whose kept workspace this verifier ran on (no agent ran)."))
    regrade_task_sha256: str | None = Field(default=None, description=(
        "A regrade: the task's checksum (its changed tests/ included) it was graded by."))

    @property
    def usage_lower_bound(self) -> bool:
        """Its usage (tokens, and the cost from them) is a lower bound (:attr:`Usage.lower_bound`)."""
        return self.usage is not None and self.usage.lower_bound

    @property
    def cost_usd(self) -> float:
        return float(self.usage.cost_usd or 0.0) if self.usage is not None else 0.0

    @property
    def spent_usd(self) -> float | None:
        """The attempt's cost, None when its usage record says it is unknown (``source:
        unknown``, or tokens without a cost: a model with no price). No record at all (a
        ``command`` agent that writes none) is the old contract's $0."""
        if self.usage is None:
            return 0.0
        if self.usage.cost_usd is not None:
            return float(self.usage.cost_usd)
        # tokens without a cost (a model with no price) are unknown, never $0
        return None if (not self.usage.known or self.usage.output_tokens or self.usage.input_tokens) else 0.0

    def to_json(self) -> dict[str, Any]:
        """The on-disk shape (``result.json``, the ledger's ``summary`` column)."""
        return self.model_dump(mode="json")

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def result_text(self) -> str:
        """``result.json``'s text: :meth:`to_json` indented, in field order. pydantic's own
        serializer writes it in one call; ``json.dumps`` with an indent runs the pure-Python
        encoder (~0.2 ms per attempt on the no-op benchmark, tests/perf/README.md)."""
        return self.model_dump_json(indent=2)

    @classmethod
    def parse(cls, data: object) -> AttemptSummary:
        """Read a stored summary, old or new. Fields that do not fit the model are dropped
        (one at a time, so the rest of the record survives); a non-object reads as empty."""
        if not isinstance(data, dict):
            return cls()
        doc = dict(data)
        for _ in range(len(doc) + 1):
            try:
                return cls.model_validate(doc)
            except ValidationError as exc:
                bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
                if not bad & set(doc):
                    break
                for key in bad:
                    doc.pop(key, None)
        return cls()

    @classmethod
    def loads(cls, text: str, fields: Collection[str] | None = None) -> AttemptSummary:
        """A stored summary's text. ``fields``: read only these (the rest left at their defaults);
        each reads as in the whole summary, since no rule of the model spans fields and
        :meth:`parse` drops a bad field alone. A report of 100,000 attempts wants three of the
        summaries' ~40 fields: validating them all was 15 % of its time (issue 57)."""
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        if fields is not None and isinstance(data, dict):
            data = {k: v for k, v in data.items() if k in fields}
        return cls.parse(data)
