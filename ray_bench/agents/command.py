"""``command``: any agent, run by the arm's own ``command``. It reports for itself: the usage
contract in ``$LOGS_DIR/agent/usage.json`` and trouble in ``$LOGS_DIR/agent/error.json``."""

from __future__ import annotations

from ray_bench.agents.base import AgentAdapter, CliRun, Invocation
from ray_bench.models.agent import AgentReport


class Command(AgentAdapter):
    name = "command"

    def refuse_model(self, model: str | None) -> str | None:
        return None  # the command knows its own model; any name is passed on as $RAY_BENCH_MODEL

    def command(self, inv: Invocation) -> str:
        raise NotImplementedError("the command adapter runs the arm's own command")

    def translate(self, run: CliRun) -> AgentReport:
        return AgentReport()  # usage.json / error.json are the agent's own


