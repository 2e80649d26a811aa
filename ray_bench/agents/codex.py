"""OpenAI Codex CLI (``@openai/codex``), run as ``codex exec --json``.

Its stdout is one JSON event per line (read from the real CLI against the fake provider):
``{"type": "thread.started", "thread_id": ...}``, ``{"type": "turn.started"}``,
``{"type": "item.completed", "item": {"type": "agent_message", "text": ...}}``,
``{"type": "turn.completed", "usage": {"input_tokens", "cached_input_tokens", "output_tokens",
"reasoning_output_tokens"}}``; trouble is ``{"type": "error", "message": ...}`` (also for
retries: "Reconnecting... 2/5 (...)") and ``{"type": "turn.failed", "error": {"message": ...}}``.
The CLI does not report cost. ``OPENAI_BASE_URL`` in the agent's env becomes the
``openai_base_url`` setting (the CLI no longer reads the variable itself).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ray_bench.agents.base import (
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
    wrap,
)
from ray_bench.models.agent import AgentReport, McpServer, Usage

_STATUS = re.compile(r"\b(401|403|429|500|502|503|504|529)\b")


class Codex(AgentAdapter):
    name = "codex"
    binary = "codex"
    npm_package = "@openai/codex"
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
        usage = _usage(events)
        failure = next((e for e in reversed(events) if e.get("type") == "turn.failed"), None)
        if failure is not None:
            message = str((failure.get("error") or {}).get("message") or "turn failed")
            return AgentReport(usage=usage, error=_error(message, run))
        if usage is None:
            errors = [str(e.get("message")) for e in events if e.get("type") == "error"]
            if errors and not run.timed_out:
                return AgentReport(error=_error(errors[-1], run))
            error = silent(run, self.name)
            if errors and run.timed_out:
                error = error.model_copy(update={"message": f"{error.message}; last: {errors[-1][:200]}"})
            return AgentReport(error=error)
        return AgentReport(usage=usage)


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

    def read(self, line: str) -> LiveEvent | None:
        data = json_line(line)
        if data is None or "type" not in data:
            return None
        kind = data.get("type")
        if kind == "turn.completed":
            usage = data.get("usage") or {}
            if isinstance(usage, dict):
                fresh = int(usage.get("input_tokens") or 0) - int(usage.get("cached_input_tokens") or 0)
                self._tokens += max(0, fresh) + int(usage.get("output_tokens") or 0)
            return LiveEvent(tokens=self._tokens)
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
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    for turn in turns:
        for key in total:
            total[key] += int((turn.get("usage") or {}).get(key) or 0)
    # Codex counts cached tokens inside input_tokens; the contract's input is the uncached part.
    return Usage(input_tokens=max(0, total["input_tokens"] - total["cached_input_tokens"]),
                 output_tokens=total["output_tokens"], cache_read_tokens=total["cached_input_tokens"],
                 session_id=thread, turns=len(turns))


def _error(message: str, run: CliRun) -> Any:
    m = _STATUS.search(message)
    return error_from(int(m.group(1)) if m else None, message, run)
