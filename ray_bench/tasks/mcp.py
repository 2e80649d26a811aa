"""A task's ``[[environment.mcp_servers]]`` for the agent: as the agents' ``McpServer`` model,
carried on the plan's task (``PlanTask.mcp_servers``) and handed, after the arm's own, to the
agent adapter, which writes its CLI's config (``claude --mcp-config``, codex ``-c``, gemini
settings). One field between the two wings, no file format of our own."""

from __future__ import annotations

from ray_bench.models.agent import McpServer
from ray_bench.models.task import MCPServerConfig


def task_mcp_servers(servers: list[MCPServerConfig]) -> list[McpServer]:
    return [McpServer(name=s.name, transport=s.transport, command=s.command, args=list(s.args), url=s.url)
            for s in servers]
