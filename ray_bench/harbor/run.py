"""The agent phase of a Harbor arm: Harbor's factory builds the agent as its ``Trial`` does, the
agent gets a :class:`~ray_bench.harbor.environment.SandboxEnvironment`, runs ``setup`` then
``run`` under the arm's timeout, and fills its ``AgentContext``. Imports Harbor (Python 3.12).

What comes back is what the cell runner needs of any agent (an exec result) plus the files the
evidence is read from, under the attempt directory's ``harbor/`` (Harbor's ``TrialPaths``): the
agent's host-side logs (Terminus 2's ATIF ``trajectory.json``) and ``agent-context.json``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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

from ray_bench.agents import adapter
from ray_bench.agents.base import CliRun
from ray_bench.agents.harbor_evidence import (
    CALLS_FILE,
    CLI_USAGE_FILE,
    CONTEXT_FILE,
    ERROR_FILE,
    HARBOR_DIR,
    REFUSED_FILE,
    REQUEST_IDS_FILE,
)
from ray_bench.agents.runtime import read_sessions
from ray_bench.agents.watchdog import DegenerationWatch, RefusalWatch, watch_workspace
from ray_bench.errors import HostToolMissingError
from ray_bench.harbor.arms import CLI_OUTPUT
from ray_bench.harbor.environment import SandboxEnvironment
from ray_bench.harbor.live import TerminusReader
from ray_bench.harbor.llm import CallLog, calls_of_this_attempt, error_of
from ray_bench.harbor.tools import terminus_options
from ray_bench.models.agent import AgentError, AgentReport
from ray_bench.models.attempt import WatchdogFacts
from ray_bench.models.suite import Watchdog
from ray_bench.sandboxes.base import ExecResult, ExecWatch, Sandbox

#: Where Harbor's installed agents leave their logs in the sandbox (``EnvironmentPaths.agent_dir``,
#: ray-bench's ``$LOGS_DIR/agent`` too).
SANDBOX_AGENT_LOGS = "/logs/agent"
#: The agent's name and the version its setup found (an installed agent's: its CLI's).
AGENT_FILE = "agent.json"


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
    #: An installed agent's credential route (its CLI calls the model from inside the sandbox,
    #: as a CLI arm's does): Harbor's ``extra_env``, laid over the agent's commands only.
    route_env: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The ray-bench adapter of an installed agent's CLI (:data:`ray_bench.harbor.arms.LAID_CLI`):
    #: its live reader watches the agent's commands, its reading gives the request ids.
    cli: str | None = None
    #: The arm's degeneration watchdog (None: only a live refusal ends a run early).
    watchdog: Watchdog | None = None


class SetupFailed(RuntimeError):
    """Harbor's ``setup()`` of the agent failed (its install, its configure): a ``tool`` failure,
    which the preflight meets first (it stops the run there, before every other cell)."""


async def run_harbor_agent(sandbox: Sandbox, call: HarborCall) -> tuple[ExecResult, WatchdogFacts | None]:
    """Build, set up and run the agent; its failures are a result (exit 1 and the traceback
    in stderr), as a CLI's non-zero exit is, never an exception of the runner. The second
    value: the watchdog's facts when it stopped one of the agent's commands."""
    trial_paths = TrialPaths(trial_dir=call.attempt_dir / HARBOR_DIR)
    trial_paths.mkdir()
    context = AgentContext()
    started = time.monotonic()
    timed_out = False
    error = ""
    mapped: AgentError | None = None
    watch = _watch_for(call)
    with calls_of_this_attempt() as calls:
        calls.watch = watch if call.cli is None else None  # a CLI's own output feeds an installed agent's
        try:
            timed_out = await _run(sandbox, call, trial_paths, context, calls, watch)
        except Exception as exc:  # the agent's failure is this attempt's result
            error = "".join(traceback.format_exception(exc))[-8000:]
            mapped = error_of(exc)
            if isinstance(exc, HostToolMissingError):
                mapped = AgentError(type="cli_missing", message=str(exc))
            elif isinstance(exc, SetupFailed):
                mapped = AgentError(type="setup", message=str(exc)[-1000:])
        await calls.settled()
    request_ids = list(calls.request_ids)
    setup_failed = mapped is not None and mapped.type == "setup"
    if setup_failed and not request_ids:
        # The agent never ran, so no model call was made: known to cost nothing.
        context.n_input_tokens = context.n_output_tokens = 0
    facts = watch.facts if isinstance(watch, DegenerationWatch) else None
    stopped = watch.reason if watch is not None else None
    cli_report = None
    if call.cli is not None and not setup_failed:
        cli_report = _cli_evidence(call.cli, trial_paths, stopped)
        request_ids += list(cli_report.usage.request_ids or []) if cli_report and cli_report.usage else []
    refused = [*calls.refused, *(cli_report.usage.refused if cli_report and cli_report.usage else [])]
    (trial_paths.trial_dir / REQUEST_IDS_FILE).write_text("".join(f"{r}\n" for r in request_ids))
    (trial_paths.trial_dir / REFUSED_FILE).write_text("".join(f"{r.model_dump_json()}\n" for r in refused))
    (trial_paths.trial_dir / CONTEXT_FILE).write_text(context.model_dump_json(exclude_none=True))
    (trial_paths.trial_dir / CALLS_FILE).write_text(json.dumps(calls.counts()))
    if error and facts is not None:
        error = ""  # the stopped command's exit, as Harbor raises it: the watchdog's doing, not the agent's
    if cli_report is not None and cli_report.error is not None and facts is None:
        # What the CLI said went wrong (a 429 and its retry-after, a refused login, a refusal the
        # live reader ended), as its adapter reads it for a CLI arm: Harbor's own exception
        # classes these by its output's wording only.
        mapped = cli_report.error
        error = error or f"{call.cli}: {cli_report.error.type}: {cli_report.error.message or ''}"
    if error:
        failure: dict[str, Any] = {"traceback": error}
        if mapped is not None:
            failure["error"] = mapped.model_dump(mode="json", exclude_none=True)
        (trial_paths.trial_dir / ERROR_FILE).write_text(json.dumps(failure))
    exit_code = _exit_code(trial_paths, error, timed_out) if stopped is None else 143
    return ExecResult(exit_code=exit_code, stdout=_oracle_output(trial_paths), stderr=error,
                      timed_out=timed_out, duration_sec=time.monotonic() - started, stopped=stopped), facts


def _watch_for(call: HarborCall) -> ExecWatch | None:
    """An installed agent's commands stream through its CLI adapter's live reader: the arm's
    watchdog rules, or only a live refusal (as a CLI arm's command). Terminus 2's come from its
    model's answers (:mod:`ray_bench.harbor.live`), watched where the arm has a watchdog."""
    if call.agent == AgentName.TERMINUS_2.value and call.watchdog is not None:
        return DegenerationWatch(call.watchdog, TerminusReader(), model=call.model)
    if call.cli is None:
        return None
    reader = adapter(call.cli).live_reader()
    if call.watchdog is None:
        return RefusalWatch(reader)
    return DegenerationWatch(call.watchdog, reader, model=call.model)


def _cli_evidence(cli: str, trial_paths: TrialPaths, stopped: str | None) -> AgentReport | None:
    """What the CLI's own adapter reads from the output and sessions Harbor's agent left in
    ``/logs/agent`` (downloaded to the trial's ``agent/``): its usage kept as ``cli-usage.json``
    (the usage of a run Harbor could not total, one the watchdog cut), its request ids, its error."""
    logs = trial_paths.agent_dir
    output = logs / CLI_OUTPUT.get(cli, "")
    stdout = output.read_text(errors="replace") if output.is_file() else ""
    try:
        report = adapter(cli).translate(CliRun(stdout=stdout, stderr="", exit_code=0 if stopped is None else 143,
                                               timed_out=False, duration_sec=0.0, now=time.time(),
                                               sessions=read_sessions(logs), stopped=stopped))
    except Exception:  # a reading that fails leaves the ids to what Harbor's context has
        return None
    if report.usage is not None:
        (trial_paths.trial_dir / CLI_USAGE_FILE).write_text(report.usage.model_dump_json(exclude_none=True))
    return report


async def _run(sandbox: Sandbox, call: HarborCall, trial_paths: TrialPaths, context: AgentContext,
               calls: CallLog, watch: ExecWatch | None) -> bool:
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
    monitor: asyncio.Future[None] | None = None
    if isinstance(watch, DegenerationWatch) and watch.config.degeneration and call.workdir:
        monitor = asyncio.ensure_future(watch_workspace(sandbox, call.workdir, watch))
    with environment.scoped_exec_env(agent.extra_env):
        try:
            timed_out = await _until_stopped(_setup_and_run(agent, environment, call.instruction, context, watch),
                                             calls, call.timeout_sec,
                                             # an installed agent's watched command ends itself, and
                                             # Harbor's clean-up (Codex's session copy) runs after it
                                             watch if call.cli is None else None)
        finally:
            if monitor is not None:
                monitor.cancel()
                await asyncio.wait({monitor}, timeout=10)
            if sandbox.on_host:
                # A tmux server daemonises out of the sandbox's process group, so deleting the
                # sandbox would not end it: its own socket (TMUX_TMPDIR below the scratch root)
                # names it, and only it.
                await environment.exec("tmux kill-server >/dev/null 2>&1; exit 0", timeout_sec=30)
            if call.cli is not None:
                # As Harbor's Trial syncs an unmounted environment's agent logs before it reads
                # them: what the CLI wrote (its output, its sessions) comes to the trial's agent/.
                with contextlib.suppress(Exception):
                    await environment.download_dir(SANDBOX_AGENT_LOGS, trial_paths.agent_dir)
                with contextlib.suppress(Exception):
                    agent.populate_context_post_run(context)
        if call.cli is None:
            agent.populate_context_post_run(context)
    return timed_out


async def _until_stopped(work: Coroutine[Any, Any, None], calls: CallLog, timeout_sec: float,
                         watch: ExecWatch | None = None) -> bool:
    """Run ``work`` until it ends, the timeout passes (True), the watch stops it (a host-side
    agent's: its commands run in no one exec the watch could end) or a model call asks for a
    long wait (its exception raised, the agent's own retry loop cancelled mid-sleep)."""
    agent = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(calls.stop.wait())
    waiters: set[asyncio.Future[Any]] = {agent, stop}
    watched = asyncio.ensure_future(watch.stopped()) if watch is not None else None
    if watched is not None:
        waiters.add(watched)
    try:
        await asyncio.wait(waiters, timeout=timeout_sec, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if watched is not None:
            watched.cancel()
        if not agent.done():
            agent.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await agent
    succeeded = not agent.cancelled() and agent.exception() is None
    if calls.stopping is not None and not succeeded:
        raise calls.stopping
    if watch is not None and watch.reason is not None and not succeeded:
        return False  # stopped by the watch: the caller reads its reason
    if agent.cancelled():
        return True  # cut by the timeout
    agent.result()  # the agent's own exception, if it raised one
    return False


async def _setup_and_run(agent: Any, environment: SandboxEnvironment, instruction: str,
                         context: AgentContext, watch: ExecWatch | None) -> None:
    try:
        await agent.setup(environment=environment)
    except Exception as exc:
        raise SetupFailed(f"Harbor's setup of {agent.name()} failed: {exc}") from exc
    with contextlib.suppress(Exception):  # the version Harbor's setup found (an installed CLI's), kept
        (environment.trial_paths.trial_dir / AGENT_FILE).write_text(
            json.dumps({"agent": agent.name(), "version": agent.version()}))
    environment.watch = watch  # the run's commands, not the setup's, are the agent's behaviour
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
    config = AgentConfig(name=call.agent, model_name=call.model, kwargs=options,
                         env={**call.agent_env, **call.route_env})
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
