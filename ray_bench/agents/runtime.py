"""The runner's side of an adapter: the command and env an attempt runs with, and the usage
and error files made from the CLI's output after it ran."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ray_bench.agents import adapter
from ray_bench.agents.base import SESSIONS_DIR, CliRun, Invocation
from ray_bench.agents.harbor_evidence import HARBOR_DIR, harbor_report
from ray_bench.agents.prices import with_cost
from ray_bench.config.bounded import read_capped
from ray_bench.files import write_whole
from ray_bench.models.agent import AgentReport, McpServer

USAGE_FILE = "usage.json"
ERROR_FILE = "error.json"


def command_for(agent: str, model: str | None, own_command: str, args: tuple[str, ...],
                mcp_servers: tuple[dict[str, Any], ...], max_turns: int | None = None) -> str:
    if agent == "command":
        return own_command
    servers = tuple(McpServer.model_validate(s) for s in mcp_servers)
    return adapter(agent).command(Invocation(model=model, mcp_servers=servers, args=args, max_turns=max_turns))


def collect_sessions_for(agent: str, stdout: str) -> str | None:
    """The line that copies the CLI's session files of this run into ``$LOGS_DIR/agent``
    (None: a ``command`` agent, or a CLI that named no session)."""
    return None if agent == "command" else adapter(agent).collect_sessions(stdout)


#: Session files read back at most (each; a transcript is a few hundred KB per hour of work).
SESSION_BYTES = 16 << 20


def read_sessions(agent_logs: Path) -> tuple[tuple[str, str], ...]:
    """The session files collected under ``logs/agent/sessions`` (path, text), bounded."""
    root = agent_logs / SESSIONS_DIR
    if not root.is_dir():
        return ()
    out = []
    for path in sorted(root.rglob("*.jsonl")):
        if path.is_file() and not path.is_symlink():
            try:
                raw = read_capped(path, SESSION_BYTES)
            except OSError:
                continue
            if raw is not None:
                out.append((str(path.relative_to(root)), raw.decode(errors="replace")))
    return tuple(out)


def env_for(agent: str, model: str | None) -> dict[str, str]:
    env = dict(adapter(agent).headless_env)
    if model:
        env["RAY_BENCH_MODEL"] = model
    return env


def record(agent: str, stdout: str, stderr: str, exit_code: int | None, timed_out: bool, duration_sec: float,
           agent_logs: Path, stopped: str | None = None, *, model: str | None = None,
           killed: bool = False) -> AgentReport | None:
    """Translate a CLI adapter's output into ``usage.json`` / ``error.json`` in the collected
    ``logs/agent`` (the files the runner reads, as a ``command`` agent writes them itself).
    The full output file wins over the runner's captured stdout, which may be truncated. A
    usage without the CLI's own cost gets the estimate from its tokens at ``model``'s price
    (:mod:`ray_bench.agents.prices`; the arm's model when the usage names none). ``killed``: the
    CLI's stop needed the SIGKILL (:attr:`~ray_bench.sandboxes.base.ExecResult.killed`), so usage
    read from its messages is a lower bound (the CLI's own totals, printed at its end, are not)."""
    if agent == "command":
        return None
    if agent == "harbor":  # Harbor's AgentContext and the request ids, kept beside logs/ by its run
        report = harbor_report(agent_logs.parent.parent / HARBOR_DIR, model)
        return _write_contracts(agent_logs, report.model_copy(update={"usage": with_cost(report.usage, model)}))
    kept = agent_logs / "agent-output.txt"
    if kept.is_file():
        stdout = kept.read_text(errors="replace")
    kept_err = agent_logs / "agent-stderr.txt"
    if kept_err.is_file():
        stderr = kept_err.read_text(errors="replace")
    report = adapter(agent).translate(CliRun(stdout=stdout, stderr=stderr, exit_code=exit_code,
                                             timed_out=timed_out, duration_sec=duration_sec, now=time.time(),
                                             sessions=read_sessions(agent_logs), stopped=stopped))
    usage = report.usage
    if killed and usage is not None and usage.source in ("session", "stream"):
        usage = usage.model_copy(update={"killed_in_grace": True})
    return _write_contracts(agent_logs, report.model_copy(update={"usage": with_cost(usage, model)}))


def _write_contracts(agent_logs: Path, report: AgentReport) -> AgentReport:
    agent_logs.mkdir(parents=True, exist_ok=True)
    for name, contract in ((USAGE_FILE, report.usage), (ERROR_FILE, report.error)):
        path = agent_logs / name
        if contract is None:
            path.unlink(missing_ok=True)
            continue
        # None is left out: an unknown count is absent, never written as a number.
        write_whole(path, json.dumps(contract.model_dump(mode="json", exclude_none=True), sort_keys=True))
    return report
