"""The agent phase of a Harbor arm: Harbor's factory builds the agent as its ``Trial`` does, the
agent gets a :class:`~ray_bench.harbor.environment.SandboxEnvironment`, runs ``setup`` then
``run`` under the arm's timeout, and fills its ``AgentContext``. Imports Harbor (Python 3.12).

What comes back is what the cell runner needs of any agent (an exec result) plus the files the
evidence is read from, under the attempt directory's ``harbor/`` (Harbor's ``TrialPaths``): the
agent's host-side logs (Terminus 2's ATIF ``trajectory.json``) and ``agent-context.json``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
import traceback
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.agents.factory import AgentFactory
from harbor.models.agent.context import AgentContext
from harbor.models.agent.name import AgentName
from harbor.models.task.task import Task
from harbor.models.trial.config import AgentConfig
from harbor.models.trial.paths import TrialPaths

from ray_bench.errors import HostToolMissingError
from ray_bench.harbor.environment import SandboxEnvironment
from ray_bench.harbor.evidence import CONTEXT_FILE, ERROR_FILE, HARBOR_DIR, REQUEST_IDS_FILE
from ray_bench.harbor.llm import CallLog, calls_of_this_attempt, error_of
from ray_bench.harbor.tools import terminus_options
from ray_bench.models.agent import AgentError
from ray_bench.sandboxes.base import ExecResult, Sandbox


@dataclass(frozen=True)
class HarborCall:
    """One agent phase of a Harbor arm."""

    agent: str
    options: dict[str, Any]
    model: str | None
    instruction: str
    task_dir: Path
    attempt_dir: Path
    #: The sandbox's env for every command (task env and ray-bench's paths): no credential.
    sandbox_env: dict[str, str]
    #: The arm's own env: Harbor's ``AgentConfig.env``, laid over the agent's commands.
    agent_env: dict[str, str]
    workdir: str | None
    user: str | int | None
    timeout_sec: float
    #: Connection settings for a host-side agent's own model client (api_base, api_key): they
    #: reach LiteLLM's call kwargs, never the sandbox's env.
    llm_settings: dict[str, str]
    download_cap: int
    session_id: str
    #: The sandbox is online in the agent phase (Harbor can install a tool the image lacks).
    online: bool = False


async def run_harbor_agent(sandbox: Sandbox, call: HarborCall) -> ExecResult:
    """Build, set up and run the agent; its failures are a result (exit 1 and the traceback
    in stderr), as a CLI's non-zero exit is, never an exception of the runner."""
    trial_paths = TrialPaths(trial_dir=call.attempt_dir / HARBOR_DIR)
    trial_paths.mkdir()
    context = AgentContext()
    started = time.monotonic()
    timed_out = False
    error = ""
    mapped: AgentError | None = None
    with calls_of_this_attempt() as calls:
        try:
            timed_out = await _run(sandbox, call, trial_paths, context, calls)
        except Exception as exc:  # the agent's failure is this attempt's result
            error = "".join(traceback.format_exception(exc))[-8000:]
            mapped = error_of(exc)
            if isinstance(exc, HostToolMissingError):
                mapped = AgentError(type="cli_missing", message=str(exc))
        await calls.settled()
    (trial_paths.trial_dir / REQUEST_IDS_FILE).write_text("".join(f"{r}\n" for r in calls.request_ids))
    (trial_paths.trial_dir / CONTEXT_FILE).write_text(context.model_dump_json(exclude_none=True))
    if error:
        failure: dict[str, Any] = {"traceback": error}
        if mapped is not None:
            failure["error"] = mapped.model_dump(mode="json", exclude_none=True)
        (trial_paths.trial_dir / ERROR_FILE).write_text(json.dumps(failure))
    exit_code = _exit_code(trial_paths, error, timed_out)
    return ExecResult(exit_code=exit_code, stdout=_oracle_output(trial_paths), stderr=error,
                      timed_out=timed_out, duration_sec=time.monotonic() - started)


async def _run(sandbox: Sandbox, call: HarborCall, trial_paths: TrialPaths, context: AgentContext,
               calls: CallLog) -> bool:
    """Set up and run the agent under the arm's timeout; whether the timeout cut it. A model
    call's long retry-after (:attr:`CallLog.stop`) cancels the agent and is raised here."""
    options = dict(call.options)
    if call.agent == AgentName.TERMINUS_2.value:
        options = await terminus_options(sandbox, call.sandbox_env, options, online=call.online)
    agent = _build(call, options, trial_paths)
    task = Task(call.task_dir)
    env_config = task.config.environment.model_copy(update={"env": {}})  # resolved by ray-bench
    environment = SandboxEnvironment(sandbox, task_dir=call.task_dir, trial_paths=trial_paths,
                                     task_env_config=env_config, session_id=call.session_id,
                                     base_env=call.sandbox_env, workdir=call.workdir,
                                     download_cap=call.download_cap)
    environment.default_user = call.user
    if sandbox.on_host:
        await sandbox.exec(f"mkdir -p {shlex.quote(sandbox.path('/tmp'))}", timeout=30)
    timed_out = False
    with environment.scoped_exec_env(agent.extra_env):
        try:
            timed_out = await _until_stopped(_setup_and_run(agent, environment, call.instruction, context),
                                             calls, call.timeout_sec)
        finally:
            if sandbox.on_host:
                # A tmux server daemonises out of the sandbox's process group, so deleting the
                # sandbox would not end it: its own socket (TMUX_TMPDIR below the scratch root)
                # names it, and only it.
                await environment.exec("tmux kill-server >/dev/null 2>&1; exit 0", timeout_sec=30)
        agent.populate_context_post_run(context)
    return timed_out


async def _until_stopped(work: Coroutine[Any, Any, None], calls: CallLog, timeout_sec: float) -> bool:
    """Run ``work`` until it ends, the timeout passes (True) or a model call asks for a long wait
    (its exception raised, the agent's own retry loop cancelled mid-sleep)."""
    agent = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(calls.stop.wait())
    try:
        await asyncio.wait({agent, stop}, timeout=timeout_sec, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not agent.done():
            agent.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await agent
    succeeded = not agent.cancelled() and agent.exception() is None
    if calls.stopping is not None and not succeeded:
        raise calls.stopping
    if agent.cancelled():
        return True  # cut by the timeout
    agent.result()  # the agent's own exception, if it raised one
    return False


async def _setup_and_run(agent: Any, environment: SandboxEnvironment, instruction: str,
                         context: AgentContext) -> None:
    await agent.setup(environment=environment)
    await agent.run(instruction=instruction, environment=environment, context=context)


def _build(call: HarborCall, options: dict[str, Any], trial_paths: TrialPaths) -> Any:
    """The agent as Harbor's ``Trial._init_agent`` builds it: the oracle gets its task and
    paths, every agent its options as kwargs; a host-side agent its connection settings."""
    extra: dict[str, Any] = {}
    options = dict(options)
    if call.agent == AgentName.ORACLE.value:
        extra = {"task_dir": call.task_dir, "trial_paths": trial_paths, "agent_timeout_sec": call.timeout_sec}
    if call.llm_settings.get("api_key"):
        extra["llm_kwargs"] = {"api_key": call.llm_settings["api_key"]}
    if call.llm_settings.get("api_base") and "api_base" not in options:
        options["api_base"] = call.llm_settings["api_base"]
    config = AgentConfig(name=call.agent, model_name=call.model, kwargs=options, env=call.agent_env)
    return AgentFactory.create_agent_from_config(config, logs_dir=trial_paths.agent_dir, **extra)


def _exit_code(trial_paths: TrialPaths, error: str, timed_out: bool) -> int:
    if error:
        return 1
    if timed_out:
        return 124
    written = trial_paths.agent_dir / "exit-code.txt"  # the oracle's solve.sh exit, as Harbor keeps it
    if written.is_file():
        try:
            return int(written.read_text().strip() or 1)
        except ValueError:
            return 1
    return 0


def _oracle_output(trial_paths: TrialPaths) -> str:
    kept = trial_paths.agent_dir / "oracle.txt"
    return kept.read_text(errors="replace")[-(1 << 20):] if kept.is_file() else ""
