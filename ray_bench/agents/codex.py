"""OpenAI Codex CLI (``@openai/codex``), run as ``codex exec --json``.

Its stdout is one JSON event per line (read from the real CLI against the fake provider):
``{"type": "thread.started", "thread_id": ...}``, ``{"type": "turn.started"}``,
``{"type": "item.completed", "item": {"type": "agent_message", "text": ...}}``,
``{"type": "turn.completed", "usage": {"input_tokens", "cached_input_tokens",
"cache_write_input_tokens", "output_tokens", "reasoning_output_tokens"}}`` (the cache writes:
0.171.0, not every version); trouble is ``{"type": "error", "message": ...}`` (also for
retries: "Reconnecting... 2/5 (...)") and ``{"type": "turn.failed", "error": {"message": ...}}``.
Interrupted or killed mid-turn it prints nothing more: its JSON processor emits no event for an
interrupted turn (codex-rs/exec/src/event_processor_with_jsonl_output.rs, ``TurnStatus::Interrupted``)
and a SIGTERM ends it where it is.
The CLI does not report cost. ``OPENAI_BASE_URL`` in the agent's env becomes the
``openai_base_url`` setting (the CLI no longer reads the variable itself).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from typing import Any

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
from ray_bench.models.agent import AgentReport, McpServer, RefusedCall, Usage
from ray_bench.numbers import epoch_or_none

_STATUS = re.compile(r"\b(401|403|429|500|502|503|504|529)\b")
#: Codex tries the Responses API over a WebSocket first; when the server refuses it (a 404 on
#: ``ws://.../v1/responses``) it retries, then says so and falls back to HTTPS.
_FALLBACK = "Falling back from WebSockets to HTTPS transport"
_WS_URL = re.compile(r"\burl: wss?://")


class Codex(AgentAdapter):
    name = "codex"
    binary = "codex"
    npm_package = "@openai/codex"
    instruction_limit = ARG_INSTRUCTION_BYTES  # `-- "$(cat ...)"`: one argument
    provider_hosts = ("api.openai.com", "chatgpt.com", "auth.openai.com")
    model_pattern = re.compile(r"(gpt-[a-z0-9.-]+|o[0-9][a-z0-9.-]*|codex-[a-z0-9.-]+)")

    def command(self, inv: Invocation) -> str:
        setup = 'set --\n[ -z "$OPENAI_BASE_URL" ] || set -- -c "openai_base_url=\\"$OPENAI_BASE_URL\\""\n'
        parts = ["codex", "exec", '"$@"', "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
                 "--json"]
        if inv.model:
            parts += ["--model", quote(inv.model)]
        for server in inv.mcp_servers:
            parts += [f"-c {quote(f'mcp_servers.{server.name}.{key}={value}')}" for key, value in _mcp_toml(server)]
        parts += [quote(a) for a in inv.args]
        parts += ["--", instruction()]
        return wrap(" ".join(parts), setup)

    def translate(self, run: CliRun) -> AgentReport:
        events = [e for e in (_json(line) for line in run.stdout.splitlines()) if e is not None]
        report = self._translate(run, events)
        refused = _refused(events, run)
        if report.usage is None or not refused:
            return report
        return report.model_copy(update={"usage": report.usage.model_copy(update={"refused": refused})})

    def _translate(self, run: CliRun, events: list[dict[str, Any]]) -> AgentReport:
        responses = _responses(run.sessions)
        usage = _usage(events)
        if usage is not None:
            usage = usage.model_copy(update={"request_ids": list(responses), "source": "result"})
        failure = next((e for e in reversed(events) if e.get("type") == "turn.failed"), None)
        if failure is not None:
            message = str((failure.get("error") or {}).get("message") or "turn failed")
            return AgentReport(usage=usage or _session_usage(events, responses, refused=True),
                               error=_error(message, run))
        if usage is not None:
            return AgentReport(usage=usage)
        # No turn finished: cut by its timeout or the watchdog, or crashed. What its responses
        # spent is in the session file; the trouble it was retrying, in its last error event.
        errors = _errors(events)
        last = errors[-1][1] if errors else ""
        status = _STATUS.search(last)
        refused = status is not None or "high demand" in last
        # Stopped by the harness with its turn unfinished: a call may follow the SIGTERM (no
        # record here shows a turn over before its turn.completed, which the CLI prints at once).
        report_usage = stopped_in_turn(_session_usage(events, responses, refused=refused), run)
        if errors and not run.cut:
            return AgentReport(usage=report_usage, error=_error(last, run))
        answered = _last_answer(events)
        if working_when_cut(run, answered=answered is not None or bool(responses),
                            retrying=bool(errors) and errors[-1][0] > (answered if answered is not None else -1)):
            return AgentReport(usage=report_usage)
        error = silent(_quiet(run), self.name)
        if refused and error.type != "cli_missing":
            error = _error(f"{self.name} was retrying when it ended: {last[:300]}", run)
        elif errors:
            error = error.model_copy(update={"message": f"{error.message}; last: {last[:200]}"})
        return AgentReport(usage=report_usage, error=error)

    session_root = '"${CODEX_HOME:-$HOME/.codex}/sessions"'

    def session_ids(self, stdout: str) -> tuple[str, ...]:
        ids = (e.get("thread_id") for e in (_json(line) for line in stdout.splitlines())
               if e is not None and e.get("type") == "thread.started")
        return tuple(dict.fromkeys(i for i in ids if isinstance(i, str) and i))

    def live_reader(self) -> LiveReader:
        return _Live()


#: ``item.completed`` items that are tool calls, and the fields that say what was called.
_CALLS = {"command_execution": ("command",), "mcp_tool_call": ("server", "tool", "arguments"),
          "file_change": ("changes",), "web_search": ("query",)}


class _Live(LiveReader):
    """``--json``: each finished item (``item.completed``; a command, an MCP call, a file
    change, a search) is a tool call; ``turn.completed`` carries the turn's usage."""

    def __init__(self) -> None:
        self._tokens = 0
        self._turns: list[dict[str, int]] = []
        self._refusals = 0

    def read(self, line: str) -> LiveEvent | None:
        data = json_line(line)
        if data is None or "type" not in data:
            return None
        kind = data.get("type")
        if kind == "error":
            # "Reconnecting... 2/5 (unexpected status 401 Unauthorized: ..., request id: req_...)": its
            # own retries of a refused key, which it keeps up with backoff before failing the turn.
            message = str(data.get("message") or "")
            status = _STATUS.search(message)
            refused = status is not None and status.group(1) in ("401", "403")
            self._refusals = self._refusals + 1 if refused else 0
            if self._refusals >= AUTH_RETRIES and status is not None:
                return LiveEvent(refused=f"HTTP {status.group(1)} on {self._refusals} retries in a row")
            return LiveEvent()
        if kind == "turn.completed":
            counts = _counts(data.get("usage"))
            turn = _contract(counts)  # fresh input and cache writes are billed as input
            self._tokens += (turn.input_tokens or 0) + (turn.cache_write_tokens or 0) + (turn.output_tokens or 0)
            self._turns.append(counts)
            return LiveEvent(tokens=self._tokens, usage=_contract(_sum(self._turns), source="stream"))
        item = data.get("item")
        if kind != "item.completed" or not isinstance(item, dict):
            return LiveEvent()
        item_type = str(item.get("type") or item.get("item_type") or "")
        fields = _CALLS.get(item_type)
        if fields is None:
            return LiveEvent()
        return LiveEvent(tool_calls=(signature(item_type, {f: item.get(f) for f in fields}),))


def _mcp_toml(server: McpServer) -> list[tuple[str, str]]:
    if server.transport == "stdio":
        return [("command", json.dumps(server.command)), ("args", json.dumps(server.args))]
    return [("url", json.dumps(server.url))]


def _json(line: str) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _usage(events: list[dict[str, Any]]) -> Usage | None:
    turns = [e for e in events if e.get("type") == "turn.completed"]
    if not turns:
        return None
    thread = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), None)
    return _contract(_sum([_counts(turn.get("usage")) for turn in turns]), session_id=thread, turns=len(turns))


def _transport(event: dict[str, Any]) -> bool:
    """A line of Codex's WebSocket attempt: a retry on a ``ws://`` URL, or its fallback notice."""
    item = event.get("item")
    text = item.get("message") if event.get("type") == "item.completed" and isinstance(item, dict) else (
        event.get("message") if event.get("type") == "error" else None)
    return isinstance(text, str) and (_FALLBACK in text or bool(_WS_URL.search(text)))


def _errors(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """The run's error messages with their place in ``events``, in order, without its WebSocket
    attempt once it fell back to HTTPS: those retries are the transport's, not the attempt's, and
    never its ``last:`` error when it later succeeded or failed for another reason (still trying
    the WebSocket when cut, they are all it said, and kept)."""
    fell_back = any(_FALLBACK in str((e.get("item") or {}).get("message") or "") for e in events
                    if e.get("type") == "item.completed" and isinstance(e.get("item"), dict))
    return [(n, str(e.get("message"))) for n, e in enumerate(events)
            if e.get("type") == "error" and not (fell_back and _transport(e))]


def _last_answer(events: list[dict[str, Any]]) -> int | None:
    """The place of the run's last event that only a model's answer makes: an item started or
    completed that is not the CLI's own notice (``"type": "error"`` items: a model's metadata not
    found, the WebSocket fallback). None: the model never answered."""
    answers = [n for n, e in enumerate(events) if e.get("type") in ("item.started", "item.updated", "item.completed")
               and isinstance(e.get("item"), dict) and e["item"].get("type") not in (None, "error")]
    return answers[-1] if answers else None


#: How Codex names a refused call's request id in its errors (codex-rs/core/src/error.rs:
#: ``UnexpectedResponseError`` and ``RetryLimitReachedError`` end with ", request id: {id}", the
#: id from the ``x-request-id`` header, or ``cf-ray`` / ``x-oai-request-id``: api_bridge.rs).
_REQUEST_ID = re.compile(r"request id: ([A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9])")


def _refused(events: list[dict[str, Any]], run: CliRun) -> list[RefusedCall]:
    """The calls the provider refused, each once, from Codex's error events and failed turn
    (its retries print each refusal's request id: "Reconnecting... 2/5 (unexpected status 401
    Unauthorized: ..., request id: req_...)"): an HTTP status and no answer, so not billed."""
    texts = [str(e.get("message") or "") for e in events if e.get("type") == "error"]
    texts += [str((e.get("error") or {}).get("message") or "") for e in events
              if e.get("type") == "turn.failed" and isinstance(e.get("error"), dict)]
    out: dict[str, RefusedCall] = {}
    for text in texts:
        found, status = _REQUEST_ID.search(text), _STATUS.search(text)
        if found is None or status is None or found.group(1) in out:
            continue  # its 500s ("high demand", InternalServerError) print no request id
        out[found.group(1)] = RefusedCall(request_id=found.group(1), type=_error(text, run).type,
                                          status=int(status.group(1)))
    return list(out.values())


def _quiet(run: CliRun) -> CliRun:
    """``run`` without the lines of its WebSocket attempt (what a crash's output tail quotes)."""
    kept = [ln for ln in run.stdout.splitlines() if (e := _json(ln)) is None or not _transport(e)]
    return dataclasses.replace(run, stdout="\n".join(kept))


def _error(message: str, run: CliRun) -> Any:
    m = _STATUS.search(message)
    if m is None and "high demand" in message:  # how Codex prints the API's 500
        return error_from(None, f"server error: {message}", run).model_copy(update={"type": "server_error"})
    zone = _zone(run.sessions)
    error = error_from(int(m.group(1)) if m else None, message, run, zone=zone)
    if error.type != "usage_limit":
        return error
    exact = _limit_reset(run.sessions, error.reset_at, run.now)
    exact = epoch_or_none(exact, run.now) if exact is not None else None  # a session file's number
    if exact is None or exact == error.reset_at:
        return error
    return error.model_copy(update={"reset_at": exact, "retry_after": max(0.0, exact - run.now)})


#: The zone Codex tells its model it is in (the rollout's environment context): the zone it
#: prints a reset time in.
_TIMEZONE = re.compile(r"<timezone>([A-Za-z0-9_+/-]+)</timezone>")


def _zone(sessions: tuple[tuple[str, str], ...]) -> str | None:
    for _, text in sessions:
        m = _TIMEZONE.search(text)
        if m is not None:
            return m.group(1)
    return None


def _windows(sessions: tuple[tuple[str, str], ...]) -> list[tuple[float, float]]:
    """(used percent, reset epoch) of each rate-limit window in the rollout's last snapshot: a
    ``token_count`` event's ``rate_limits`` (``{"primary": {"used_percent", "window_minutes",
    "resets_at"}, "secondary": ...}``, the epoch from the ``x-codex-primary-reset-at`` headers:
    codex-rs/codex-api/src/rate_limits.rs; ``resets_in_seconds`` from the event's time in older
    versions)."""
    last: list[tuple[float, float]] = []
    for _, text in sorted(sessions):
        for line in text.splitlines():
            entry = _json(line) if "rate_limits" in line else None
            payload = entry.get("payload") if entry is not None else None
            limits = payload.get("rate_limits") if isinstance(payload, dict) else None
            if not isinstance(limits, dict):
                continue
            found = []
            for window in (limits.get("primary"), limits.get("secondary")):
                if not isinstance(window, dict) or not isinstance(window.get("used_percent"), int | float):
                    continue
                at = window.get("resets_at")
                if not isinstance(at, int | float) and isinstance(window.get("resets_in_seconds"), int | float):
                    at = _epoch(entry.get("timestamp") if entry is not None else None, window["resets_in_seconds"])
                if isinstance(at, int | float):
                    found.append((float(window["used_percent"]), float(at)))
            if found:
                last = found
    return last


def _epoch(stamp: object, seconds: float) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() + seconds
    except ValueError:
        return None


def _limit_reset(sessions: tuple[tuple[str, str], ...], printed: float | None, now: float) -> float | None:
    """The exact second a usage limit resets, from the rollout's rate-limit snapshot, preferred to
    the printed minute: the latest reset of a window it used up (100 %); else the window whose reset
    falls in the printed minute; else, nothing printed ("Try again later."), the latest one ahead."""
    windows = _windows(sessions)
    spent = [at for used, at in windows if used >= 100]
    if spent:
        return max(spent)
    if printed is not None:
        same = [at for _, at in windows if printed - 60 <= at <= printed]
        return max(same) if same else printed
    ahead = [at for _, at in windows if at > now]
    return max(ahead) if ahead else None


#: The token counts Codex writes in a ``turn.completed``'s ``usage`` and a session file's
#: ``token_usage_record`` (and ``token_count`` events): its ``TokenUsage``. ``input_tokens``
#: includes the cached reads (``cached_input_tokens``) and, where the CLI writes it (0.171.0
#: does, in all three places; the protocol's earlier ``TokenUsage`` has no such field), the cache
#: writes (``cache_write_input_tokens``). ``reasoning_output_tokens`` is part of ``output_tokens``.
#: (In the openai/codex sources indexed for this, ``TokenUsage`` and the exec ``Usage`` had no cache-write
#: field yet; the real 0.171.0 output in tests/agents/fixtures/codex-0.171.0 carries it.)
_USAGE = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")
_WRITES = "cache_write_input_tokens"


def _counts(usage: Any) -> dict[str, int]:
    """A usage object's counts (0 for one it does not carry: a CLI that writes no
    ``cache_write_input_tokens`` counts any cache write as plain input, which is how OpenAI
    bills it, so its cost is still known)."""
    got = usage if isinstance(usage, dict) else {}
    return {k: int(got.get(k) or 0) for k in _USAGE}


def _sum(counts: list[dict[str, int]]) -> dict[str, int]:
    return {k: sum(c[k] for c in counts) for k in _USAGE}


def _contract(total: dict[str, int], **fields: Any) -> Usage:
    """Codex's counts as the contract's usage (with ``fields``): its input_tokens less the
    cache reads and writes it includes is the contract's uncached input."""
    read, writes = total["cached_input_tokens"], total[_WRITES]
    return Usage(input_tokens=max(0, total["input_tokens"] - read - writes), output_tokens=total["output_tokens"],
                 cache_read_tokens=read, cache_write_tokens=writes, **fields)


def _responses(sessions: tuple[tuple[str, str], ...]) -> dict[str, dict[str, int]]:
    """Per response id, its usage, from the rollout files' ``token_usage_record`` entries
    (``{"payload": {"response_id": "resp_...", "usage": {...}}}``, one per response as it
    completes: there even when the turn was cut)."""
    out: dict[str, dict[str, int]] = {}
    for _, text in sorted(sessions):
        for line in text.splitlines():
            entry = _json(line)
            payload = entry.get("payload") if entry is not None and entry.get("type") == "token_usage_record" else None
            if not isinstance(payload, dict) or not isinstance(payload.get("response_id"), str):
                continue
            out[payload["response_id"]] = _counts(payload.get("usage"))
    return out


def _session_usage(events: list[dict[str, Any]], responses: dict[str, dict[str, int]], *,
                   refused: bool) -> Usage:
    """A run with no finished turn: the sum of its responses. None recorded: nothing was spent
    when every call was refused (``refused``), otherwise a call may have been under way."""
    thread = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), None)
    if not responses:
        return Usage(session_id=thread, turns=0, source="stream") if refused else Usage.unknown(session_id=thread)
    return _contract(_sum(list(responses.values())), session_id=thread, request_ids=list(responses),
                     source="session")
