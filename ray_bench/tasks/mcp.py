"""A task's ``[[environment.mcp_servers]]`` for the agent: as the agents' ``McpServer`` model,
carried on the plan's task (``PlanTask.mcp_servers``) and handed, after the arm's own, to the
agent adapter, which writes its CLI's config (``claude --mcp-config``, codex ``-c``, gemini
settings). A ``command`` agent reads the same servers from ``/task/mcp-servers.json`` (named by
``RAY_BENCH_MCP_CONFIG``), in the ``{"mcpServers": {...}}`` shape Claude Code, Cursor and the MCP
reference clients read, so no file format of our own."""

from __future__ import annotations

import json
from typing import Any

from ray_bench.models.agent import McpServer
from ray_bench.models.task import MCPServerConfig

#: Where the servers are written in the sandbox, and the variable that names it.
MCP_CONFIG_PATH = "/task/mcp-servers.json"
MCP_CONFIG_ENV = "RAY_BENCH_MCP_CONFIG"


def task_mcp_servers(servers: list[MCPServerConfig]) -> list[McpServer]:
    return [McpServer(name=s.name, transport=s.transport, command=s.command, args=list(s.args), url=s.url)
            for s in servers]


def mcp_config_json(servers: list[McpServer]) -> str:
    """``{"mcpServers": {name: entry}}``: stdio as ``command``/``args``, URLs with their ``type``."""
    entries: dict[str, dict[str, Any]] = {}
    for s in servers:
        if s.transport == "stdio":
            entries[s.name] = {"type": "stdio", "command": s.command, "args": s.args}
        else:
            entries[s.name] = {"type": "sse" if s.transport == "sse" else "http", "url": s.url}
    return json.dumps({"mcpServers": entries}, indent=2, sort_keys=True)
