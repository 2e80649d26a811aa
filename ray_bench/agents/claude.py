"""Claude Code (``@anthropic-ai/claude-code``), run as ``claude -p ... --output-format
stream-json --verbose``.

Its stdout is one event per line, the last the result object (read from the real CLI against
tests/support/fake_provider.py): ``{"type": "result", "subtype": "success", "is_error": false, "api_error_status": null,
"num_turns": 1, "result": "...", "session_id": "...", "total_cost_usd": 0.000465, "usage":
{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"},
"modelUsage": {"<model>": {"inputTokens", "outputTokens", "costUSD", ...}}}``. A provider
error is the same object with ``is_error: true``, ``api_error_status`` (401, 429, 500, 529)
and the message in ``result`` ("API Error: 500 ...", "Failed to authenticate. API Error: 401
OAuth token has expired..."). Retries are silent (``CLAUDE_CODE_MAX_RETRIES``, default 10):
with no provider at all the CLI prints nothing until it is killed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ray_bench.agents.base import (
    ARG_INSTRUCTION_BYTES,
    AUTH_RETRIES,
    AgentAdapter,
    CliRun,
    Invocation,
    LiveEvent,
    LiveReader,
    error_from,
    instruction,
    json_line,
    quote,
    signature,
    silent,
    stopped_in_turn,
    working_when_cut,
    wrap,
)
from ray_bench.models.agent import AgentReport, McpServer, Usage
from ray_bench.numbers import amount, duration_or_none


class ClaudeCode(AgentAdapter):
    name = "claude-code"
    binary = "claude"
    npm_package = "@anthropic-ai/claude-code"
    instruction_limit = ARG_INSTRUCTION_BYTES  # `-p "$(cat ...)"`: one argument
    provider_hosts = ("api.anthropic.com", "console.anthropic.com", "statsig.anthropic.com")
    # Aliases (sonnet, opus, haiku) or full names; another provider's model is refused.
    model_pattern = re.compile(r"(sonnet|opus|haiku|default|claude-[a-z0-9.-]+)(\[1m\])?")
    headless_env: ClassVar[dict[str, str]] = {
        "IS_SANDBOX": "1",  # lets root use bypassPermissions inside a container
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }

    def command(self, inv: Invocation) -> str:
        # stream-json (one event per line, --verbose required with -p): tool calls and usage
        # arrive while it runs, for the degeneration watchdog; the last line is the result.
        parts = ["claude", "-p", instruction(), "--output-format", "stream-json", "--verbose",
                 "--permission-mode", "bypassPermissions"]
        if inv.model:
            parts += ["--model", quote(inv.model)]
        if inv.max_turns is not None:  # the executor role's bound; reaching it ends the run (a result)
            parts += ["--max-turns", str(int(inv.max_turns))]
        setup = ""
        if inv.mcp_servers:
            config = json.dumps({"mcpServers": {s.name: _mcp_entry(s) for s in inv.mcp_servers}})
            setup = f'printf %s {quote(config)} >"$LOGS_DIR/agent/mcp.json"\n'
            parts += ["--mcp-config", '"$LOGS_DIR/agent/mcp.json"', "--strict-mcp-config"]
        parts += [quote(a) for a in inv.args]
        return wrap(" ".join(parts), setup)

    def translate(self, run: CliRun) -> AgentReport:
        events = [e for e in (json_line(line) for line in run.stdout.splitlines()) if e is not None]
        record = _Record.of(events, run.sessions)
        result = _last_result(run.stdout)
        if result is None:
            return self._cut(run, record)
        usage = _usage(result).model_copy(update={"request_ids": record.request_ids(), "source": "result"})
        if result.get("subtype") == "error_max_turns":
            # The role's turn bound, reached: the agent's own outcome, which the verifier scores.
            return AgentReport(usage=usage)
        if result.get("is_error") or result.get("subtype") not in (None, "success"):
            status = result.get("api_error_status")
            status = status if isinstance(status, int) else None
            message = str(result.get("result") or result.get("subtype") or "error")
            retry = record.retry if record.retry is not None and record.retry.status == status else None
            return AgentReport(usage=usage, error=error_from(
                status, message, run, reset_at=record.reset_at,
                retry_after=retry.delay_sec if retry is not None else None))
        return AgentReport(usage=usage)

    def _cut(self, run: CliRun, record: _Record) -> AgentReport:
        """No result line (cut by its timeout or the watchdog, or crashed): what its messages
        spent, from the stream and the session files (a lower bound when the harness stopped it
        before its turn ended, :func:`stopped_in_turn`); the error its retries were in, if it was
        retrying when it was cut."""
        retry = record.retry
        usage = stopped_in_turn(record.usage(), run, turn_ended=record.turn_ended)
        if working_when_cut(run, answered=bool(record.messages), retrying=retry is not None):
            return AgentReport(usage=usage)
        error = silent(run, self.name)
        if retry is not None and retry.after_last_answer and error.type != "cli_missing":
            message = (f"{self.name} was retrying when it ended: HTTP {retry.status} {retry.error} "
                       f"(retry {retry.attempt} of {retry.max_retries})")
            error = error_from(retry.status, message, run, reset_at=record.reset_at, retry_after=retry.delay_sec)
        return AgentReport(usage=usage, error=error)

    session_root = '"${CLAUDE_CONFIG_DIR:-$HOME/.claude}/projects"'

    def session_ids(self, stdout: str) -> tuple[str, ...]:
        ids = (e.get("session_id") for e in (json_line(line) for line in stdout.splitlines()) if e is not None)
        return tuple(dict.fromkeys(i for i in ids if isinstance(i, str) and i))

    def live_reader(self) -> LiveReader:
        return _Live()


class _Live(LiveReader):
    """``stream-json``: ``{"type": "assistant", "message": {"id", "content": [{"type":
    "tool_use", "name", "input"}, ...], "usage": {...}}}`` per assistant message (one line per
    content block, each with the message's usage so far), then the ``result`` with the totals."""

    def __init__(self) -> None:
        self._per_message: dict[str, int] = {}
        self._kinds: dict[str, dict[str, int]] = {}
        self._model: str | None = None
        self._refusals = 0

    def read(self, line: str) -> LiveEvent | None:
        data = json_line(line)
        if data is None or "type" not in data:
            return None
        if data.get("type") == "result":
            totals = data.get("usage") or {}
            return LiveEvent(tokens=_tokens(totals), usage=_live_usage([totals], self._model))
        if data.get("type") == "system" and data.get("subtype") == "api_retry":
            status = data.get("error_status")
            self._refusals = self._refusals + 1 if status in (401, 403) else 0
            if self._refusals >= AUTH_RETRIES:
                return LiveEvent(refused=f"HTTP {status} {data.get('error') or ''} on {self._refusals} retries "
                                 "in a row".replace("  ", " "))
            return LiveEvent()
        if data.get("type") != "assistant":
            return LiveEvent()
        message = data.get("message") or {}
        if not isinstance(message, dict):
            return LiveEvent()
        usage = message.get("usage")
        if isinstance(usage, dict):
            key = str(message.get("id") or len(self._per_message))
            self._per_message[key] = max(self._per_message.get(key, 0), _tokens(usage))
            kinds = self._kinds.setdefault(key, {})
            for k in _USAGE_KEYS:  # a message's usage so far; each kind only grows
                value = usage.get(k)
                if isinstance(value, int) and not isinstance(value, bool):
                    kinds[k] = max(kinds.get(k, 0), _count(value))
            if isinstance(message.get("model"), str) and message["model"] != "<synthetic>":
                self._model = message["model"]
        content = message.get("content")
        calls = tuple(signature(str(c.get("name")), c.get("input"))
                      for c in (content if isinstance(content, list) else [])
                      if isinstance(c, dict) and c.get("type") == "tool_use")
        return LiveEvent(tool_calls=calls, tokens=sum(self._per_message.values()) if self._per_message else None,
                         usage=_live_usage(list(self._kinds.values()), self._model) if self._kinds else None)


def _live_usage(messages: list[dict[str, Any]], model: str | None) -> Usage:
    """The sum of messages' usage (Anthropic keys) as the contract's, for the spend bound."""
    total = {k: sum(int(m.get(k) or 0) for m in messages if isinstance(m.get(k) or 0, int)) for k in _USAGE_KEYS}
    return Usage(input_tokens=total["input_tokens"], output_tokens=total["output_tokens"],
                 cache_read_tokens=total["cache_read_input_tokens"],
                 cache_write_tokens=total["cache_creation_input_tokens"], model=model, source="stream")


@dataclass(frozen=True)
class _Retry:
    """The CLI's last ``system/api_retry`` event: ``{"attempt", "max_retries", "retry_delay_ms",
    "error_status", "error": "authentication_failed" | "rate_limit" | "overloaded" | "server_error"}``
    (Claude Code 2.1.197 against the fake provider)."""

    status: int | None
    error: str
    delay_sec: float | None
    attempt: object
    max_retries: object
    #: No model answer came after it: the CLI was still in this trouble when it stopped.
    after_last_answer: bool


#: The usage keys of one Anthropic message, as the stream and the transcript carry them.
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass
class _Record:
    """Everything one run left about its model calls: per message (by id) its request id,
    model and usage, from the stream and the session transcripts together. The stream prints a
    message's usage with ``output_tokens: 1`` until it ends; a transcript line has the final,
    so each field keeps the largest value seen for its message."""

    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_id: str | None = None
    retry: _Retry | None = None
    reset_at: float | None = None
    from_sessions: bool = False
    #: The stream's last word was a tool's result: the CLI had sent (or was about to send)
    #: the next call, whose answer no record holds.
    call_under_way: bool = False
    #: The records show the CLI's turn over: each transcript's last word is a final answer (its
    #: ``stop_reason`` ``end_turn`` or ``stop_sequence``, no tool asked for) and the stream's is the
    #: same answer, so no call could follow. The stream alone never shows it (it prints
    #: ``stop_reason`` null).
    turn_ended: bool = False

    @classmethod
    def of(cls, events: list[dict[str, Any]], sessions: tuple[tuple[str, str], ...]) -> _Record:
        rec = cls()
        retry: dict[str, Any] | None = None
        last: str | None = None  # the stream's last word: an assistant message's id, or "" (a tool's result)
        for event in events:
            kind = event.get("type")
            if rec.session_id is None and isinstance(event.get("session_id"), str):
                rec.session_id = event["session_id"]
            if kind == "system" and event.get("subtype") == "api_retry":
                retry = event
            elif kind == "rate_limit_event":
                info = event.get("rate_limit_info") or {}
                if isinstance(info, dict) and info.get("status") == "rejected" and \
                        isinstance(info.get("resetsAt"), int | float):
                    rec.reset_at = float(info["resetsAt"])  # exact, where the message prints minutes
            elif kind == "assistant" and rec._message(event.get("message"), event.get("request_id")):
                retry = None  # the CLI got past it
            if kind in ("assistant", "user", "result"):
                rec.call_under_way = kind == "user"
                message = event.get("message")
                last = str(message.get("id") or "") if kind == "assistant" and isinstance(message, dict) else ""
        if retry is not None:
            status = retry.get("error_status")
            delay = retry.get("retry_delay_ms")
            wait = duration_or_none(delay / 1000) if isinstance(delay, int | float) and not isinstance(delay, bool) \
                else None
            rec.retry = _Retry(status if isinstance(status, int) else None, str(retry.get("error") or ""),
                               round(wait, 3) if wait is not None else None,
                               retry.get("attempt"), retry.get("max_retries"), True)
        finals: set[str] = set()
        for _, text in sorted(sessions):
            final = ""  # this transcript's last word, if it is a final answer: its id
            for entry in (json_line(line) for line in text.splitlines()):
                if entry is None or entry.get("type") not in ("assistant", "user"):
                    continue
                if entry.get("type") == "assistant" and rec._message(entry.get("message"), entry.get("requestId")):
                    rec.from_sessions = True
                    final = rec._final(entry["message"])
                elif entry.get("type") == "user":
                    final = ""
            finals.add(final)
        rec.turn_ended = len(finals) == 1 and "" not in finals and last in (None, *finals)
        return rec

    def _final(self, message: dict[str, Any]) -> str:
        """The id of ``message`` when it ended the turn (a final stop, no tool asked for in it), else ""."""
        seen = self.messages[str(message["id"])]
        ended = message.get("stop_reason") in ("end_turn", "stop_sequence") and not seen.get("tool_use")
        return str(message["id"]) if ended else ""

    def _message(self, message: object, request_id: object) -> bool:
        """Take in one assistant message; False for the CLI's own (``<synthetic>``) ones."""
        if not isinstance(message, dict) or message.get("model") == "<synthetic>" or not message.get("id"):
            return False
        seen = self.messages.setdefault(str(message["id"]), {"usage": {}})
        if message.get("stop_reason"):  # the stream prints it null; the transcript's final line has it
            seen["final"] = True
        if isinstance(request_id, str) and request_id:
            seen["request_id"] = request_id
        if isinstance(message.get("model"), str):
            seen["model"] = message["model"]
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(c, dict) and c.get("type") == "tool_use" for c in content):
            seen["tool_use"] = True
        usage = message.get("usage")
        for key in _USAGE_KEYS if isinstance(usage, dict) else ():
            value = usage.get(key)  # type: ignore[union-attr]
            if isinstance(value, int) and not isinstance(value, bool):
                seen["usage"][key] = max(seen["usage"].get(key, 0), value)
        return True

    def request_ids(self) -> list[str]:
        return list(dict.fromkeys(m["request_id"] for m in self.messages.values() if "request_id" in m))

    def usage(self) -> Usage:
        """The sum over its messages. None answered and no retry said why: a call may have been
        under way when it was cut, so what it spent is unknown. Retries and no answer: every
        call was refused (a refused call is not billed), so nothing was spent."""
        if not self.messages:
            if self.retry is None:
                return Usage.unknown(session_id=self.session_id)
            return Usage(session_id=self.session_id, turns=0, source="stream")
        total = dict.fromkeys(_USAGE_KEYS, 0)
        by_model: dict[str, int] = {}
        for m in self.messages.values():
            for key in _USAGE_KEYS:
                total[key] += m["usage"].get(key, 0)
            if "model" in m:
                by_model[m["model"]] = by_model.get(m["model"], 0) + m["usage"].get("output_tokens", 0)
        return Usage(input_tokens=total["input_tokens"], output_tokens=total["output_tokens"],
                     cache_read_tokens=total["cache_read_input_tokens"],
                     cache_write_tokens=total["cache_creation_input_tokens"],
                     model=max(by_model, key=lambda k: by_model[k]) if by_model else None,
                     session_id=self.session_id, request_ids=self.request_ids(), turns=len(self.messages),
                     source="session" if self.from_sessions else "stream",
                     unfinished_messages=sum(1 for m in self.messages.values() if not m.get("final")),
                     call_under_way=self.call_under_way)


def _tokens(usage: dict[str, Any]) -> int:
    """The live count the watchdog bounds: each kind an amount (:func:`ray_bench.numbers.amount`);
    one that is not (``Infinity``, ``-5``, which ``int()`` would raise on or subtract) counts 0."""
    return sum(_count(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "output_tokens"))


def _count(value: object) -> int:
    try:
        return int(amount(value))
    except ValueError:
        return 0


def _mcp_entry(server: McpServer) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"type": "stdio", "command": server.command, "args": server.args}
    return {"type": "sse" if server.transport == "sse" else "http", "url": server.url}


def _last_result(stdout: str) -> dict[str, Any] | None:
    """The result object: the whole of stdout (``json``) or its last ``result`` line
    (``stream-json``, one event per line)."""
    text = stdout.strip()
    candidates = [text, *reversed(text.splitlines())]
    for chunk in candidates:
        try:
            data = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "result":
            return data
    return None


def _usage(result: dict[str, Any]) -> Usage:
    raw = result.get("usage") or {}
    models = result.get("modelUsage") or {}
    # The main model is the one that produced the most output (Claude Code also calls a small
    # model for titles and summaries).
    model = max(models, key=lambda m: (models[m] or {}).get("outputTokens", 0)) if models else None
    cost = result.get("total_cost_usd")
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        model=model,
        session_id=result.get("session_id"),
        turns=result.get("num_turns"),
    )
