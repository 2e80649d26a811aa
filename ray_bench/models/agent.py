"""What an agent adapter reports about one run: the usage contract and the error contract.

``usage.json`` and ``error.json`` in ``$LOGS_DIR/agent`` carry these models; the keys of the
older contract (``input_tokens``, ``output_tokens``, ``cost_usd``; ``type``, ``message``,
``retry_after``) keep their meaning, so a ``command`` agent may still write them by hand.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ray_bench.models._base import ConfigModel

#: What went wrong, as the scheduler needs to know it. ``usage_limit`` is a subscription's
#: window (with ``reset_at``); ``rate_limit`` a per-minute limit (with ``retry_after``);
#: ``no_answer``: the CLI printed no result before its timeout and had not been answered, or was in a
#: retry loop (a cut agent that was working is no error: ray_bench.agents.base.working_when_cut); ``setup``:
#: a Harbor agent's own setup (its install, its configure) failed in the sandbox; ``loop``: the CLI
#: stopped its own agent for repeating itself (Gemini CLI's loop detection), a degenerate attempt
#: as when the watchdog stops one (class ``behaviour``, flagged ``degeneration``).
AgentErrorType = Literal["rate_limit", "usage_limit", "overloaded", "server_error", "auth", "expired",
                         "no_answer", "cli_missing", "setup", "agent", "loop"]


class McpServer(ConfigModel):
    """An MCP server the agent is given (Harbor's ``mcp_servers`` entry)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Server name.")
    transport: Literal["stdio", "sse", "streamable-http"] = Field(
        default="stdio", description="stdio (command + args) or a URL transport.")
    command: str | None = Field(default=None, description="stdio: the server's command.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    url: str | None = Field(default=None, description="sse / streamable-http: the server's URL.")


#: Where an attempt's usage was read from: ``result`` the CLI's own totals (its last line);
#: ``session`` its messages, from the stream and the CLI's session files (the attempt was cut
#: before the totals); ``stream`` its messages from the stream alone (no session file); ``unknown``
#: nothing says what was spent (tokens and cost are then absent, never 0).
UsageSource = Literal["result", "session", "stream", "unknown"]
#: Where ``cost_usd`` came from: the CLI's own figure, or its tokens at list price.
CostBasis = Literal["reported", "estimated"]
#: What a known usage's figures are: ``exact`` what was spent, or ``lower_bound``: at least this
#: much (the CLI was cut while a message streamed, whose output counts only what had arrived, or
#: with a call under way that no record holds, or a call started whose end no record holds). A lower
#: bound is counted (in the report, the spend limits), never dropped, and shown as one (``>=``).
UsageBound = Literal["exact", "lower_bound"]


class RefusedCall(BaseModel):
    """A model call the provider answered with an error status (429, 5xx, 401/403): no tokens were
    served, and a provider does not bill it. Kept with its request id and its class so that the
    record is whole, but ``settle`` never expects it on a bill (:mod:`ray_bench.evidence.settle`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    request_id: str
    status: int | None = Field(default=None, description="The HTTP status it was refused with.")
    type: AgentErrorType | None = Field(default=None, description="Its class, as the error contract says it.")


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    input_tokens: int | None = Field(default=0, ge=0, description="Uncached input tokens (None: unknown).")
    output_tokens: int | None = Field(default=0, ge=0)
    cache_read_tokens: int | None = Field(default=0, ge=0)
    cache_write_tokens: int | None = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0, description="USD (None: unknown).")
    cost_basis: CostBasis | None = Field(
        default=None, description="reported: the CLI's own figure; estimated: its tokens at list price "
        "(ray_bench.agents.prices), for a CLI cut before it printed one or one that prints none.")
    model: str | None = None
    session_id: str | None = None
    #: Every provider request id of a call that was answered, as the CLI printed or kept them
    #: (settlement expects a charge for each).
    request_ids: list[str] = Field(default_factory=list)
    #: The calls the provider refused (with an error status), with their ids and class: not billed,
    #: so never expected on a bill; kept so that what the attempt asked for is on the record.
    refused: list[RefusedCall] = Field(default_factory=list)
    turns: int | None = None
    source: UsageSource | None = Field(default=None, description="Where it was read from (None: the agent's own).")
    unfinished_messages: int | None = Field(
        default=None, ge=0, description="session/stream: messages the CLI was still receiving when it stopped; "
        "their output counts what had arrived (at least 1), their input is whole.")
    call_under_way: bool | None = Field(
        default=None, description="session/stream: the CLI was cut with a model call under way, which no "
        "record holds (its charge settles by no request id here).")
    request_ids_missing: int | None = Field(
        default=None, ge=0, description="Answered calls whose provider request id no record holds (Gemini "
        "CLI's telemetry writes its ids every 5 s and a kill loses the last batch): the ids are partial, so "
        "settle never calls the attempt settled on them.")
    calls_unfinished: int | None = Field(
        default=None, ge=0, description="Model calls a record shows started (Gemini CLI's telemetry "
        "``api_request``; a Harbor agent's LLM call begun) with no answer or error recorded: broken off by the "
        "CLI itself (its loop detection stops reading the stream) or cut by the timeout. Whether the provider "
        "billed them, their tokens and ids are in no record: the usage is a lower bound, and settle never calls "
        "the attempt settled on the ids it has.")
    killed_in_grace: bool | None = Field(
        default=None, description="session/stream: the CLI was stopped and outlived its SIGTERM grace, so it "
        "was SIGKILLed: a call it served in the grace may be in neither its stream nor its session files, yet "
        "billed (a lower bound).")
    stopped_in_turn: bool | None = Field(
        default=None, description="session/stream: the harness stopped the CLI (its timeout, the watchdog, a "
        "refusal seen live, a cancel) before its records show its turn ended (a tool of its own running, a "
        "retry or its next call to come): on the SIGTERM a CLI can end its tool and send the tool's result, a "
        "billed call it dies before recording, with no SIGKILL needed (a lower bound).")
    bound: UsageBound | None = Field(
        default=None, description="exact, or lower_bound: the tokens and cost are at least these (a message "
        "unfinished, a call under way, or the CLI stopped mid-turn or SIGKILLed); set by :meth:`bounded` "
        "(None: unknown usage, or an agent's own record, read as exact).")

    def bounded(self) -> Usage:
        """This usage with :attr:`bound` said: ``lower_bound`` when a message was unfinished or a
        call under way when the CLI stopped, a call started and never ended, the harness stopped it
        mid-turn, or it was SIGKILLed after its grace, else ``exact``; unknown usage has no bound."""
        if self.bound is not None or self.source == "unknown":
            return self
        cut = (self.unfinished_messages or 0) > 0 or (self.calls_unfinished or 0) > 0 or any(
            (self.call_under_way, self.stopped_in_turn, self.killed_in_grace))
        return self.model_copy(update={"bound": "lower_bound" if cut else "exact"})

    @classmethod
    def unknown(cls, *, session_id: str | None = None, request_ids: list[str] | None = None) -> Usage:
        """What was spent cannot be known (cut before anything recorded it): no numbers at all."""
        return cls(input_tokens=None, output_tokens=None, cache_read_tokens=None, cache_write_tokens=None,
                   session_id=session_id, request_ids=request_ids or [], source="unknown")


class AgentError(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    type: AgentErrorType
    message: str
    status: int | None = Field(default=None, description="The provider's HTTP status, if known.")
    retry_after: float | None = Field(default=None, ge=0, description="Seconds to wait.")
    reset_at: float | None = Field(default=None, description="usage_limit: epoch second it resets.")


class AgentReport(BaseModel):
    """An adapter's reading of one run of its CLI."""

    model_config = ConfigDict(frozen=True)

    usage: Usage | None = None
    error: AgentError | None = None
