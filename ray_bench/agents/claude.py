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
from typing import Any, ClassVar

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


class ClaudeCode(AgentAdapter):
    name = "claude-code"
    binary = "claude"
    npm_package = "@anthropic-ai/claude-code"
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
        setup = ""
        if inv.mcp_servers:
            config = json.dumps({"mcpServers": {s.name: _mcp_entry(s) for s in inv.mcp_servers}})
            setup = f'printf %s {quote(config)} >"$LOGS_DIR/agent/mcp.json"\n'
            parts += ["--mcp-config", '"$LOGS_DIR/agent/mcp.json"', "--strict-mcp-config"]
        parts += [quote(a) for a in inv.args]
        return wrap(" ".join(parts), setup)

    def translate(self, run: CliRun) -> AgentReport:
        result = _last_result(run.stdout)
        if result is None:
            return AgentReport(error=silent(run, self.name))
        usage = _usage(result)
        if result.get("is_error") or result.get("subtype") not in (None, "success"):
            status = result.get("api_error_status")
            message = str(result.get("result") or result.get("subtype") or "error")
            return AgentReport(usage=usage, error=error_from(status if isinstance(status, int) else None,
                                                             message, run))
        return AgentReport(usage=usage)


    def live_reader(self) -> LiveReader:
        return _Live()


class _Live(LiveReader):
    """``stream-json``: ``{"type": "assistant", "message": {"id", "content": [{"type":
    "tool_use", "name", "input"}, ...], "usage": {...}}}`` per assistant message (one line per
    content block, each with the message's usage so far), then the ``result`` with the totals."""

    def __init__(self) -> None:
        self._per_message: dict[str, int] = {}

    def read(self, line: str) -> LiveEvent | None:
        data = json_line(line)
        if data is None or "type" not in data:
            return None
        if data.get("type") == "result":
            return LiveEvent(tokens=_tokens(data.get("usage") or {}))
        if data.get("type") != "assistant":
            return LiveEvent()
        message = data.get("message") or {}
        if not isinstance(message, dict):
            return LiveEvent()
        usage = message.get("usage")
        if isinstance(usage, dict):
            key = str(message.get("id") or len(self._per_message))
            self._per_message[key] = max(self._per_message.get(key, 0), _tokens(usage))
        content = message.get("content")
        calls = tuple(signature(str(c.get("name")), c.get("input"))
                      for c in (content if isinstance(content, list) else [])
                      if isinstance(c, dict) and c.get("type") == "tool_use")
        return LiveEvent(tool_calls=calls, tokens=sum(self._per_message.values()) if self._per_message else None)


def _tokens(usage: dict[str, Any]) -> int:
    return sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens", "output_tokens")
               if isinstance(usage.get(k) or 0, int | float))


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
