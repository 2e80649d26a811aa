"""Run one attempt of a cell inside a sandbox and write its terminal summary.

The lifecycle: resolve credentials on this node, create the sandbox (labelled), upload the
instruction (and the solution for oracle-style arms), run the agent with its timeout, upload
the tests and run the verifier (also after an agent timeout), collect ``/logs`` with a size
cap, and always delete the sandbox, shielded from cancellation. The summary states facts;
the driver classifies them (:mod:`ray_bench.evidence`).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import platform
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ray_bench import runroot
from ray_bench.agents import adapter
from ray_bench.agents.base import CliRun
from ray_bench.agents.harbor_evidence import HARBOR_DIR
from ray_bench.agents.layer import prepare_layer
from ray_bench.agents.prices import with_cost
from ray_bench.agents.runtime import command_for, env_for, record
from ray_bench.agents.watchdog import Seen, bound_after, run_agent
from ray_bench.cells.contract_files import AGENT_JSON_BYTES, bound_contract_files, bounds_below
from ray_bench.cells.credentials import CredentialMissing, Credentials, Redactor, resolve
from ray_bench.cells.home_logins import tokens_in
from ray_bench.cells.lifetime import lifetime_sec, step_setups
from ray_bench.cells.logins import bring_back_login
from ray_bench.cells.phases import (
    VERIFIER_SCRIPT,
    NetworkSwitch,
    collect_hooks,
    collect_sessions,
    copy_artifacts,
    healthcheck,
    resolve_workdir,
    user_of,
)
from ray_bench.cells.spec import AttemptSpec
from ray_bench.cells.steps import StepRun, TaskEnv, agent_extras, run_steps, stage_steps
from ray_bench.cells.verifier_apart import handover_dir, run_verifier_apart, take_handover
from ray_bench.cells.workspace import RegradeSource, keep_workspace, restore_workspace
from ray_bench.config.bounded import read_capped
from ray_bench.errors import SandboxError
from ray_bench.files import write_whole
from ray_bench.harbor.arms import HOST_SIDE, laid_cli
from ray_bench.harbor.credentials import llm_settings
from ray_bench.models.agent import McpServer
from ray_bench.models.attempt import (
    AgentError,
    ArtifactPlace,
    AttemptError,
    AttemptSummary,
    ExecFacts,
    HealthcheckFacts,
    Usage,
    WatchdogFacts,
)
from ray_bench.models.task import artifact_entries
from ray_bench.models.task.compose import COMPOSE_FILE
from ray_bench.runroot import DISK_FULL_ERROR, is_disk_full
from ray_bench.runroot import pid_alive as _alive
from ray_bench.sandboxes import Resources, Sandbox, SandboxBackend, SandboxSpec, run_labels
from ray_bench.sandboxes.base import SANDBOX_HOME, STOP_GRACE_SEC, ComposeSpec, ExecResult
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.tasks.envvars import MissingHostVar
from ray_bench.tasks.mcp import MCP_CONFIG_ENV, MCP_CONFIG_PATH, mcp_config_json
from ray_bench.tasks.network import create_allowlist, in_agent_sandbox
from ray_bench.tasks.rewards import headline, read_rewards
from ray_bench.tasks.verifier_env import VerifierApart, verifier_apart

RESULT_FILE = runroot.RESULT_FILE  # the run-root layout has one definition (ray_bench.runroot)

#: The verifier, run as Harbor runs it (``bash /tests/test.sh``; ``sh`` without bash).


def _paths(sandbox: Sandbox, workdir: str) -> dict[str, str]:
    return {
        "APP_DIR": sandbox.path(workdir),
        "LOGS_DIR": sandbox.path("/logs"),
        "TESTS_DIR": sandbox.path("/tests"),
        "SOLUTION_DIR": sandbox.path("/solution"),
        "TASK_DIR": sandbox.path("/task"),
        "INSTRUCTION_FILE": sandbox.path("/task/instruction.md"),
    }


def new_summary(spec: AttemptSpec) -> AttemptSummary:
    """The summary of ``spec``'s attempt before anything happened (also what the pool fills in
    when the runner is lost with it)."""
    return AttemptSummary(
        attempt_id=spec.attempt_id, cell_id=spec.cell_id, task=spec.task_id, arm=spec.arm,
        rep=spec.rep, account=spec.account, backend=spec.backend, started_at=time.time(),
        agent_kind=spec.agent, model=spec.model)


async def run_attempt(spec: AttemptSpec, backend: SandboxBackend,
                      place: ArtifactPlace | None = None, regrade: RegradeSource | None = None) -> AttemptSummary:
    """Run the attempt; never raises except on cancellation (after cleaning up). ``place``:
    where the attempt's directory will be (recorded in the summary; see ray_bench.artifacts).
    ``regrade``: run only the verifier, on that attempt's kept workspace (``ray-bench regrade``)."""
    attempt_dir = Path(spec.attempt_dir)
    task_dir = Path(spec.task_path)
    summary = new_summary(spec)
    summary.agent_started = False  # this runner says when it launches the agent
    try:
        attempt_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        summary.error = _disk_full(exc)
        return summary
    summary.artifacts = place
    summary.node, summary.pid, summary.python = socket.gethostname(), os.getpid(), platform.python_version()
    redactor = Redactor([])
    progress = _Progress()
    sandbox: Sandbox | None = None
    phases = summary.phases
    if regrade is not None:
        summary.regrade_of = regrade.attempt_id
    try:
        try:  # a regrade runs no agent: it needs no agent credentials (its verifier may need its own)
            creds = resolve(spec.route_env, spec.route_home, os.environ) if regrade is None else Credentials({}, None)
            judge = resolve(spec.verifier_route_env, None, os.environ) if spec.verifier_route_env \
                else Credentials({}, None)
        except CredentialMissing as exc:
            summary.error = AttemptError(type="CredentialMissing", message=str(exc), failure_class="auth")
            return summary
        summary.verifier_account = spec.verifier_account
        try:
            task_env = TaskEnv.resolve(spec.task_config, os.environ, judge.env)
        except MissingHostVar as exc:
            summary.error = AttemptError(type="MissingHostVar", failure_class="auth",
                                         message=f"task.toml env needs ${{{exc.args[0]}}}, unset on this node")
            return summary
        redactor = Redactor([*creds.secrets(), *judge.secrets(), *(tokens_in(creds.home) if creds.home else []),
                             *task_env.secrets])
        # The upload is staged before the sandbox exists: its first build for a task (copies,
        # mkdirs) is host work that no container needs to wait through (issue 57).
        stage = stage_for(spec)
        t = time.monotonic()
        sandbox = await backend.create(_sandbox_spec(spec, task_env.environment))
        summary.sandbox_id = sandbox.id
        phases["sandbox_create"] = time.monotonic() - t
        if regrade is None:
            await _run_in(sandbox, backend, spec, task_dir, stage, creds, task_env, redactor, summary, progress)
        else:
            await _regrade_in(sandbox, backend, spec, task_dir, stage, task_env, redactor, summary, progress,
                              regrade)
    except asyncio.CancelledError:
        summary.cancelled = True
        if summary.usage is None and progress.agent is not None:
            summary.usage = usage_of_finished(spec, progress.agent)
        if summary.usage is None and summary.agent_started and sandbox is not None:
            # Cut mid-agent (or after an agent cut by its timeout): what it had spent so far, from
            # its stream and session files (a CLI) or its own usage.json (a command agent), before
            # the sandbox goes; unknown if neither says (issue 25).
            summary.usage = await _shielded(_usage_so_far(sandbox, spec, summary, progress), CANCEL_READ_SEC)
        keep_cancelled(summary)  # the driver asks the runner for it (Ray returns no value)
        raise
    except SandboxError as exc:
        summary.error = AttemptError(type=type(exc).__name__, message=redactor.text(str(exc)),
                                     failure_class=exc.failure_class,
                                     retry_after=getattr(exc, "retry_after", None))
    except Exception as exc:  # an uncaught crash is data: the attempt is invalid, not the run
        summary.error = _disk_full(exc) or AttemptError(
            type=type(exc).__name__, message=redactor.text(str(exc)), failure_class="executor",
            traceback=redactor.text(traceback.format_exc(limit=8)))
    finally:
        if sandbox is not None:
            await _delete_shielded(sandbox, summary)
        summary.finished_at = time.time()
        phases["total"] = summary.finished_at - summary.started_at
        try:
            if not progress.logs_redacted:  # outputs were redacted as written; logs may be partial
                redactor.tree(attempt_dir)
                progress.logs_redacted = True
            write_whole(attempt_dir / RESULT_FILE, summary.result_text())
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            # The summary still reaches the driver through Ray; a full disk stops the run there.
            summary.error = _disk_full(exc)
            if not progress.logs_redacted:  # logs a full disk kept from redaction are not kept
                shutil.rmtree(attempt_dir / "logs", ignore_errors=True)
    return summary


def _disk_full(exc: BaseException) -> AttemptError | None:
    """A full disk under the attempt's files is the host's fault, never the cell's."""
    if not is_disk_full(exc):
        return None
    return AttemptError(type=DISK_FULL_ERROR, message=str(exc)[:300], failure_class="stack")


@dataclass
class _Progress:
    logs_redacted: bool = False
    agent: ExecResult | None = None
    """The agent's command's result, once it ended (a cancellation after it reads its usage)."""
    seen: Seen | None = None
    """The agent's output so far, while it runs (a cancellation mid-agent reads its usage)."""
    where: tuple[dict[str, str], str, str | None] | None = None
    """The agent's env, workdir and user (a cancellation mid-agent collects its session files)."""


#: How long a cancelled attempt may spend reading its usage so far (a command agent's
#: usage.json out of its sandbox; a CLI's stream is already in memory).
CANCEL_READ_SEC = 15.0
#: Beyond the stop's grace, how long a cancelled attempt waits to learn whether its agent's stop
#: needed the SIGKILL (a container's stop is one more exec).
_HALT_SLACK_SEC = 5.0
#: Cancelled attempts' summaries this runner process keeps until the driver asks (at most).
KEEP_CANCELLED = 1000
_CANCELLED: dict[str, AttemptSummary] = {}


def keep_cancelled(summary: AttemptSummary) -> None:
    """Keep a cancelled attempt's summary for :func:`cancelled_summary`: a cancelled Ray task
    returns no value, so the driver asks the runner for it (ray_bench.onray.pool). The same
    object, finished by the runner's cleanup before Ray reports the cancellation."""
    _CANCELLED[summary.attempt_id] = summary
    while len(_CANCELLED) > KEEP_CANCELLED:
        _CANCELLED.pop(next(iter(_CANCELLED)))


def peek_cancelled(attempt_id: str) -> AttemptSummary | None:
    """The kept summary of a cancelled attempt, left kept."""
    return _CANCELLED.get(attempt_id)


def cancelled_summary(attempt_id: str) -> AttemptSummary | None:
    """The summary a cancelled attempt left in this process (once: it is forgotten), or None."""
    return _CANCELLED.pop(attempt_id, None)


async def _shielded(work: Coroutine[Any, Any, _T], timeout: float) -> _T | None:
    """``work`` run to its end (at most ``timeout`` s) although the caller is being cancelled;
    None when it fails or takes longer (what it would have said stays unknown)."""
    task = asyncio.ensure_future(asyncio.wait_for(work, timeout))
    while True:  # a cancel sent again (ray_bench.onray.pool.CANCEL_RESEND_SEC) waits on too
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return None
        except Exception:
            return None


async def _usage_so_far(sandbox: Sandbox, spec: AttemptSpec, summary: AttemptSummary,
                        progress: _Progress) -> Usage | None:
    """The usage of an agent cancelled while it ran, or None (unknown). A CLI's: its stream so
    far and the session files it left (collected as after a timeout), read as a cut run by its
    adapter (``bound``: a lower bound when a message was unfinished or a call under way), written
    as ``logs/agent/usage.json``. A ``command``
    agent's: the ``usage.json`` it had written, taken out of the sandbox, a lower bound (it was
    cut). A Harbor arm's agent runs in this process and leaves nothing to read here."""
    agent_logs = Path(spec.attempt_dir) / "logs" / "agent"
    if spec.agent == "command":
        room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
        summary.artifact_bytes += await sandbox.take_dir("/logs/agent", agent_logs, max_bytes=room,
                                                         bounds=bounds_below("agent"))
        summary.artifact_bytes -= bound_contract_files(agent_logs.parent)
        usage = _open_model(Usage, _read_json_obj(agent_logs / "usage.json"))
        if usage is None or not usage.known:
            return None
        ended = progress.agent  # it wrote its record to the end only if it ended by itself
        whole = ended is not None and not ended.timed_out and ended.stopped is None and (ended.exit_code or 0) >= 0
        return usage.model_copy(update={"bound": usage.bound or ("exact" if whole else "lower_bound")})
    if spec.agent == "harbor" or progress.seen is None:
        return None
    seen, ended = progress.seen, progress.agent
    stdout = ended.stdout if ended is not None else seen.text("stdout")
    # Whether its stop needed the SIGKILL: the cancelled exec's stop says so when it ends (its
    # grace, or the SIGKILL just after); not known by then, it may have been (a lower bound).
    killed = ended.killed if ended is not None else \
        (seen.watch is None or await seen.watch.halted(STOP_GRACE_SEC + _HALT_SLACK_SEC) is not False)
    if progress.where is not None:  # its session files (the CLI stopped with its SIGTERM grace)
        env, workdir, user = progress.where
        await collect_sessions(sandbox, spec.agent, stdout, env=env, cwd=workdir, user=user)
        room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
        summary.artifact_bytes += await sandbox.take_dir("/logs/agent", agent_logs, max_bytes=room,
                                                         bounds=bounds_below("agent"))
    if ended is not None:  # ended (cut by its timeout or the watchdog), then cancelled
        report = record(spec.agent, ended.stdout, ended.stderr, ended.exit_code, ended.timed_out,
                        ended.duration_sec, agent_logs, ended.stopped, model=spec.model, killed=killed)
    else:
        report = record(spec.agent, stdout, seen.text("stderr"), None, False, time.monotonic() - seen.started,
                        agent_logs, "cancelled", model=spec.model, killed=killed)
    if report is None or report.usage is None or report.usage.source == "unknown":
        return None
    return _open_model(Usage, report.usage.model_dump(mode="json", exclude_none=True))


def usage_of_finished(spec: AttemptSpec, agent: ExecResult) -> Usage | None:
    """The usage of an agent that ended by itself, read from its captured stdout alone (pure:
    no sandbox call, so safe while the attempt is being cancelled), or None. An agent cut by its
    timeout or stopped live printed no totals: its stream's per-message usage is only a lower
    bound (issue 25), so its usage stays unknown rather than under-counted."""
    if spec.agent in ("command", "harbor") or agent.timed_out or agent.stopped is not None \
            or agent.exit_code is None or agent.exit_code < 0:
        return None
    try:
        report = adapter(spec.agent).translate(CliRun(stdout=agent.stdout, stderr=agent.stderr,
                                                      exit_code=agent.exit_code, timed_out=False,
                                                      duration_sec=agent.duration_sec, now=time.time()))
    except Exception:  # a reading that fails leaves the cost unknown, never $0
        return None
    usage = with_cost(report.usage, spec.model)
    if usage is None or usage.source == "unknown":
        return None
    return _open_model(Usage, usage.model_dump(mode="json", exclude_none=True))


#: Staged uploads, per runner process: (content key, agent dir, solution?, workdir) -> dir.
_STAGES: dict[tuple[str, str | None, bool, str | None], Path] = {}
_STAGE_ROOT: list[Path] = []


def stage_for(spec: AttemptSpec) -> Path:
    """The tree uploaded to ``/`` before the agent starts, built once per task and arm in this
    process (the task's and the agent's checksums are in the key, so edited content is never
    served stale)."""
    mcp = _mcp_config(spec)
    key = (f"{spec.stage_key}:{hashlib.sha256(mcp.encode()).hexdigest()[:16] if mcp else ''}",
           spec.agent_dir, spec.expose_solution, spec.workdir)
    stage = _STAGES.get(key)
    if stage is not None and stage.is_dir():
        return stage
    if not _STAGE_ROOT:
        _STAGE_ROOT.append(_new_stage_root())
    stage = Path(tempfile.mkdtemp(dir=_STAGE_ROOT[0]))
    task_dir = Path(spec.task_path)
    (stage / "task").mkdir()
    if (task_dir / "instruction.md").is_file():
        shutil.copy2(task_dir / "instruction.md", stage / "task" / "instruction.md")
    if mcp:  # every agent can read it; a `command` agent has no other way to learn the servers
        (stage / "task" / "mcp-servers.json").write_text(mcp)
    # Not the workdir: its directory entry would overwrite the image's mode of an existing one
    # (workdir = "/tmp" lost its sticky world-writable bit); every exec makes it if missing.
    for sub in ("logs/agent", "logs/verifier"):
        (stage / sub).mkdir(parents=True, exist_ok=True)
        (stage / sub).chmod(0o777)  # an agent or verifier running as another user writes here
    if spec.agent_dir:
        shutil.copytree(spec.agent_dir, stage / "agent", symlinks=True)
    if spec.expose_solution and (task_dir / "solution").is_dir():
        shutil.copytree(task_dir / "solution", stage / "solution", symlinks=True)
    stage_steps(spec, task_dir, stage)
    _STAGES[key] = stage
    return stage


def _mcp_config(spec: AttemptSpec) -> str:
    """The arm's and the task's MCP servers as ``/task/mcp-servers.json`` ("" when none)."""
    if not spec.mcp_servers:
        return ""
    return mcp_config_json([McpServer.model_validate(s) for s in spec.mcp_servers])


def _new_stage_root(parent: Path | None = None) -> Path:
    """This process's stage directory, ``<tmp>/ray-bench-stages/<pid>-<random>``. Ray ends
    worker processes without running ``atexit``, so each new root also removes the roots of
    processes that no longer exist."""
    parent = parent or Path(tempfile.gettempdir()) / "ray-bench-stages"
    parent.mkdir(parents=True, exist_ok=True)
    for old in parent.iterdir():
        pid = old.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
    atexit.register(shutil.rmtree, root, True)
    return root


async def _run_in(sandbox: Sandbox, backend: SandboxBackend, spec: AttemptSpec, task_dir: Path, stage: Path,
                  creds: Credentials, task_env: TaskEnv, redactor: Redactor, summary: AttemptSummary,
                  progress: _Progress) -> None:
    attempt_dir = Path(spec.attempt_dir)
    phases = summary.phases
    cfg = spec.task_config
    # One upload brings the instruction, the empty log directories, the agent's files and (for
    # oracle-style arms) the solution: one round trip instead of four. ``stage``: stage_for(spec).
    await sandbox.put_dir(stage, "/")
    workdir = await resolve_workdir(sandbox, spec.workdir)
    paths = _paths(sandbox, workdir)
    if spec.agent_dir:
        paths["AGENT_DIR"] = sandbox.path("/agent")
    base_env = {**task_env.environment, **paths}
    env = {**task_env.environment, **(task_env.solution if spec.expose_solution else {}),
           **env_for(spec.agent, spec.model), **spec.agent_env, **paths, **creds.env,
           "RAY_BENCH_SEED": spec.seed, "RAY_BENCH_ATTEMPT": spec.attempt_id, **await agent_extras(sandbox, cfg)}
    if spec.mcp_servers:
        env[MCP_CONFIG_ENV] = sandbox.path(MCP_CONFIG_PATH)
    if creds.home is not None:
        if sandbox.on_host:  # a host process: the login is used where it is
            env["HOME"] = str(creds.home)
        else:  # a copy travels in, under a directory the sandbox's user owns (Daytona: not root)
            await sandbox.put_dir(creds.home, SANDBOX_HOME)
            env["HOME"] = sandbox.path(SANDBOX_HOME)

    switch = NetworkSwitch(sandbox, cfg, online=spec.network, agent_online=spec.agent_network,
                           can_switch=_switches_network(spec))
    await switch.enter("setup")
    if cfg.environment.healthcheck is not None:
        t = time.monotonic()
        summary.healthcheck = HealthcheckFacts()
        await healthcheck(sandbox, cfg.environment.healthcheck, env=base_env, cwd=workdir, facts=summary.healthcheck)
        phases["healthcheck"] = time.monotonic() - t
    if cfg.steps:
        await run_steps(StepRun(sandbox, spec, task_dir, workdir, env, base_env, task_env, switch, redactor),
                        summary)
        await _collect_logs(sandbox, spec, redactor, summary, progress)
        _held_to_bounds(spec, summary)
        return

    t = time.monotonic()
    await switch.enter("agent")
    summary.agent_started = True  # from here a cancelled attempt may have spent (ray_bench.ledger.cost)
    if spec.agent == "harbor":
        agent, stopped = await _run_harbor(sandbox, spec, task_dir, base_env, creds, workdir, redactor,
                                           online=switch.online)
    else:
        command = command_for(spec.agent, spec.model, spec.agent_command, spec.agent_args, spec.mcp_servers,
                              spec.max_turns)
        progress.seen, progress.where = Seen(), (env, workdir, user_of(cfg.agent.user))
        agent, stopped = await run_agent(sandbox, command, timeout=spec.agent_timeout_sec, env=env,
                                         user=user_of(cfg.agent.user), agent=spec.agent, workdir=workdir,
                                         config=spec.watchdog, model=spec.model, seen=progress.seen)
    phases["agent"] = time.monotonic() - t
    progress.agent = agent
    took = await collect_sessions(sandbox, spec.agent, agent.stdout, env=env, cwd=workdir,
                                  user=user_of(cfg.agent.user))
    if took is not None:
        summary.phases["sessions"] = took
    if creds.home is not None:
        if not sandbox.on_host:  # a copy of the login: what the CLI refreshed comes back
            summary.login_written_back = await bring_back_login(sandbox, env["HOME"], creds.home, redactor)
        redactor.extend(tokens_in(creds.home))  # refreshed in place (local) or just written back
    _write_output(attempt_dir / "agent", agent, redactor)
    summary.agent = _exec_facts(agent, redactor.text((agent.stdout + agent.stderr)[-4000:]))
    if stopped is not None:
        # Stopped live by the degeneration watchdog: the verifier is skipped (no row from this).
        summary.watchdog = stopped.model_copy(update={"evidence": [redactor.text(e) for e in stopped.evidence]})
        _write_json(attempt_dir / "watchdog.json", summary.watchdog.model_dump(mode="json"))
        await _collect_logs(sandbox, spec, redactor, summary, progress, agent)
        _read_agent_record(summary, attempt_dir)
        return

    if spec.keep_workspace:  # before the collect hooks and the verifier touch it
        t = time.monotonic()
        room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
        summary.workspace = await keep_workspace(sandbox, workdir, attempt_dir, room, task_dir, redactor.tree)
        summary.artifact_bytes += summary.workspace.bytes
        phases["workspace"] = time.monotonic() - t

    apart = verifier_apart(cfg, task_dir)
    if apart is None:
        await _verify(sandbox, spec, task_dir, workdir, base_env, paths, task_env, switch, summary, redactor)
        await _collect_logs(sandbox, spec, redactor, summary, progress, agent)
    else:
        await _verify_apart(sandbox, backend, spec, apart, workdir, base_env, task_env, switch, summary, redactor,
                            progress, agent)
    _score(summary, attempt_dir / "logs" / "verifier")
    _read_agent_record(summary, attempt_dir)
    _held_to_bounds(spec, summary)


def _read_agent_record(summary: AttemptSummary, attempt_dir: Path) -> None:
    """The agent's usage and error, from its collected ``logs/agent``."""
    summary.usage = _open_model(Usage, _read_json_obj(attempt_dir / "logs" / "agent" / "usage.json"))
    summary.agent_error = _open_model(AgentError, _read_json_obj(attempt_dir / "logs" / "agent" / "error.json"))


def _held_to_bounds(spec: AttemptSpec, summary: AttemptSummary) -> None:
    """The executor role's token and spend bounds on the attempt's whole usage, once it ended
    (:func:`~ray_bench.agents.watchdog.bound_after`): past one, it carries the watchdog's facts
    (``watchdog.json`` too) and is classed ``role_bound`` like an attempt stopped live."""
    if summary.watchdog is not None:
        return
    facts = bound_after(spec.watchdog, summary.usage, spec.model)
    if facts is not None:
        summary.watchdog = facts
        _write_json(Path(spec.attempt_dir) / "watchdog.json", facts.model_dump(mode="json"))


async def _verify(sandbox: Sandbox, spec: AttemptSpec, task_dir: Path, workdir: str, base_env: dict[str, str],
                  paths: dict[str, str], task_env: TaskEnv, switch: NetworkSwitch, summary: AttemptSummary,
                  redactor: Redactor) -> None:
    """The collect hooks, the task's artifacts and the verifier: what an attempt runs after its
    agent, and all that a regrade runs."""
    phases = summary.phases
    cfg = spec.task_config
    await _collect_after_agent(sandbox, spec, workdir, base_env, switch, summary)

    # The tests arrive only now, so the agent never saw them. An agent timeout still runs the
    # verifier: the attempt is scored and flagged, not thrown away.
    t = time.monotonic()
    await switch.enter("verifier")
    await sandbox.put_dir(task_dir / "tests", "/tests")
    verifier = await sandbox.exec_script(VERIFIER_SCRIPT, timeout=spec.verifier_timeout_sec,
                                         env={**base_env, **task_env.verifier, **paths}, cwd=workdir,
                                         user=user_of(cfg.verifier.user))
    phases["verifier"] = time.monotonic() - t
    _write_output(Path(spec.attempt_dir) / "verifier", verifier, redactor)
    summary.verifier = _exec_facts(verifier, redactor.text((verifier.stdout + verifier.stderr)[-2000:]))


async def _collect_after_agent(sandbox: Sandbox, spec: AttemptSpec, workdir: str, base_env: dict[str, str],
                               switch: NetworkSwitch, summary: AttemptSummary) -> None:
    """The collect hooks and the task's artifacts, in the agent's sandbox after its agent."""
    cfg = spec.task_config
    t = time.monotonic()
    await switch.enter("setup")
    summary.collect = await collect_hooks(sandbox, cfg.verifier.collect, env=base_env, cwd=workdir)
    summary.artifacts_exit = await copy_artifacts(sandbox, artifact_entries(cfg.artifacts), env=base_env,
                                                  cwd=workdir)
    summary.phases["collect_hooks"] = time.monotonic() - t


async def _verify_apart(sandbox: Sandbox, backend: SandboxBackend, spec: AttemptSpec, apart: VerifierApart,
                        workdir: str, base_env: dict[str, str], task_env: TaskEnv, switch: NetworkSwitch,
                        summary: AttemptSummary, redactor: Redactor, progress: _Progress,
                        agent: ExecResult | None = None) -> None:
    """A separate verifier (ray_bench.cells.verifier_apart): the collect hooks and artifacts, the
    handover taken out, the agent's logs collected and its sandbox deleted (Harbor stops it before
    the verifier starts, so the two never hold the host at once), then the verifier's own sandbox."""
    await _collect_after_agent(sandbox, spec, workdir, base_env, switch, summary)
    with handover_dir() as tmp:
        t = time.monotonic()
        room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
        await take_handover(sandbox, spec, Path(tmp), room, env=base_env, cwd=workdir)
        summary.phases["handover"] = time.monotonic() - t
        await _collect_logs(sandbox, spec, redactor, summary, progress, agent)
        if agent is not None:  # read now: a cancellation in the verifier's phase finds the agent's sandbox gone
            _read_agent_record(summary, Path(spec.attempt_dir))
        await _delete_shielded(sandbox, summary)  # idempotent: the attempt's own deletion finds it gone
        env = {**(task_env.verifier_environment or {}), **task_env.verifier}
        verifier = await run_verifier_apart(backend, spec, apart, Path(tmp), summary, env=env, paths=_paths,
                                            delete=_delete_shielded)
    _write_output(Path(spec.attempt_dir) / "verifier", verifier, redactor)
    summary.verifier = _exec_facts(verifier, redactor.text((verifier.stdout + verifier.stderr)[-2000:]))
    redactor.tree(Path(spec.attempt_dir) / "logs" / "verifier")


async def _regrade_in(sandbox: Sandbox, backend: SandboxBackend, spec: AttemptSpec, task_dir: Path, stage: Path,
                      task_env: TaskEnv, redactor: Redactor,
                      summary: AttemptSummary, progress: _Progress, source: RegradeSource) -> None:
    """A regrade: the attempt's upload and paths as :func:`_run_in` makes them, the kept
    workspace over the workdir, then only :func:`_verify` (no agent, no credentials)."""
    await sandbox.put_dir(stage, "/")
    workdir = source.workdir or await resolve_workdir(sandbox, spec.workdir)
    t = time.monotonic()
    await restore_workspace(sandbox, source.tarball, workdir, spec.artifact_cap_bytes)
    summary.phases["restore"] = time.monotonic() - t
    paths = _paths(sandbox, workdir)
    if spec.agent_dir:
        paths["AGENT_DIR"] = sandbox.path("/agent")
    base_env = {**task_env.environment, **paths}
    switch = NetworkSwitch(sandbox, spec.task_config, online=spec.network, agent_online=spec.agent_network,
                           can_switch=_switches_network(spec))
    apart = verifier_apart(spec.task_config, task_dir)
    if apart is None:
        await _verify(sandbox, spec, task_dir, workdir, base_env, paths, task_env, switch, summary, redactor)
        await _collect_logs(sandbox, spec, redactor, summary, progress)
    else:  # the kept workspace restored into the agent's image, then handed over as after an agent
        await _verify_apart(sandbox, backend, spec, apart, workdir, base_env, task_env, switch, summary, redactor,
                            progress)
    _score(summary, Path(spec.attempt_dir) / "logs" / "verifier")


async def _run_harbor(sandbox: Sandbox, spec: AttemptSpec, task_dir: Path, base_env: dict[str, str],
                      creds: Credentials, workdir: str | None, redactor: Redactor, *,
                      online: bool) -> tuple[ExecResult, WatchdogFacts | None]:
    """A Harbor arm's agent phase (:mod:`ray_bench.harbor.run`, imported here only: Harbor needs
    Python 3.12), and the watchdog's facts when it stopped the agent. The sandbox sees the
    task's env and paths; the account's credentials go to a host-side agent's own model client
    (:func:`ray_bench.harbor.credentials.llm_settings`), and to an installed agent's commands as
    Harbor's ``extra_env`` (its CLI calls the model from the sandbox, as a CLI arm's does)."""
    from ray_bench.harbor.run import HarborCall, run_harbor_agent

    name = spec.harbor_agent or ""
    installed = name not in HOST_SIDE
    call = HarborCall(agent=name, options=dict(spec.harbor_options), model=spec.model,
                      instruction=(task_dir / "instruction.md").read_text(), task_dir=task_dir,
                      attempt_dir=Path(spec.attempt_dir), sandbox_env=base_env, agent_env=dict(spec.agent_env),
                      workdir=workdir,
                      user=user_of(spec.task_config.agent.user), timeout_sec=spec.agent_timeout_sec,
                      llm_settings={} if installed else llm_settings(creds.env, spec.agent_env),
                      download_cap=spec.artifact_cap_bytes,
                      session_id=f"{spec.cell_id}__{spec.attempt_id}", online=online,
                      route_env=dict(creds.env) if installed else {}, cli=laid_cli(name) if installed else None,
                      watchdog=spec.watchdog)
    result, stopped = await run_harbor_agent(sandbox, call)
    # Harbor writes the agent's kwargs into its trajectory (Terminus 2's llm_kwargs hold the
    # key): the host-side trial directory is redacted before anything reads it.
    redactor.tree(Path(spec.attempt_dir) / HARBOR_DIR)
    return result, stopped


async def _collect_logs(sandbox: Sandbox, spec: AttemptSpec, redactor: Redactor, summary: AttemptSummary,
                        progress: _Progress, agent: ExecResult | None = None) -> None:
    """``/logs`` (agent and verifier output, artifacts) into the attempt directory, under what
    the artifact cap leaves after the steps' logs."""
    attempt_dir = Path(spec.attempt_dir)
    t = time.monotonic()
    room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
    summary.artifact_bytes += await sandbox.take_dir("/logs", attempt_dir / "logs", max_bytes=room,
                                                     bounds=bounds_below())
    summary.artifact_bytes -= bound_contract_files(attempt_dir / "logs")
    summary.phases["collect"] = time.monotonic() - t
    if agent is not None:  # the adapter's reading of its CLI's output (usage, errors)
        record(spec.agent, agent.stdout, agent.stderr, agent.exit_code, agent.timed_out, agent.duration_sec,
               attempt_dir / "logs" / "agent", agent.stopped, model=spec.model, killed=agent.killed)
    redactor.tree(attempt_dir / "logs")
    progress.logs_redacted = True


def _sandbox_spec(spec: AttemptSpec, task_env: Mapping[str, str] | None = None) -> SandboxSpec:
    """The agent's sandbox; ``task_env``: the task's ``[environment] env``, filled (a compose
    project's interpolation gets it; commands get it with each exec)."""
    return SandboxSpec(
        labels=run_labels(spec.run_id, spec.cell_id, spec.attempt_id),
        image=spec.image,
        dockerfile_dir=Path(spec.build_context) if spec.build_context else None,
        env={},
        resources=Resources(cpus=spec.cpus, memory_mb=spec.memory_mb, pids=spec.pids,
                            disk_mb=spec.task_config.environment.storage_mb, gpus=spec.task_config.environment.gpus),
        network=spec.network,
        allowlist=create_allowlist(spec.backend, in_agent_sandbox(spec.task_config, spec.agent_network)),
        workdir=spec.workdir,
        lifetime_sec=lifetime_sec(spec.task_config, spec.agent_timeout_sec, spec.verifier_timeout_sec,
                                  step_setups(spec.task_config, Path(spec.task_path))),
        agent_layer=prepare_layer(layer_agent(spec)) if capabilities(spec.backend).agent_layer else None,
        compose=compose_spec(spec, task_env or {}),
    )


def compose_spec(spec: AttemptSpec, task_env: Mapping[str, str]) -> ComposeSpec | None:
    """The task's compose project, run beside main, its file interpolated with ``task_env``; None
    for one container (no file, or one that only restates Harbor's main: :mod:`ray_bench.config.compose`)."""
    if spec.compose is None or spec.compose.main_only:
        return None
    return ComposeSpec(file=Path(spec.task_path) / "environment" / COMPOSE_FILE, env=dict(task_env))


def _switches_network(spec: AttemptSpec) -> bool:
    """Whether the sandbox's network follows the phases: not where the task's compose file pins
    main's (:attr:`~ray_bench.models.task.ComposeProject.pinned_network`), nor where the sandbox was
    made with the one allowlist all its phases share (:func:`create_allowlist`)."""
    pinned = spec.compose is not None and spec.compose.pinned_network is not None
    made_with = create_allowlist(spec.backend, in_agent_sandbox(spec.task_config, spec.agent_network))
    return capabilities(spec.backend).network_per_phase and not pinned and made_with is None


def layer_agent(spec: AttemptSpec) -> str:
    """Whose CLI is laid over the image: the arm's agent, or for a Harbor installed agent the
    ray-bench agent of the same CLI (Harbor's setup then finds it; ray_bench.harbor.arms)."""
    if spec.agent == "harbor":
        return laid_cli(spec.harbor_agent) or "harbor"
    return spec.agent


async def _delete_shielded(sandbox: Sandbox, summary: AttemptSummary) -> None:
    deletion = asyncio.ensure_future(sandbox.delete())
    cancelled = False
    while True:  # the sandbox is removed however often the attempt is cancelled meanwhile
        try:
            await asyncio.shield(deletion)
        except asyncio.CancelledError:
            cancelled = True
            continue
        except Exception as exc:
            summary.cleanup_error = f"{type(exc).__name__}: {exc}"
        break
    if cancelled:
        raise asyncio.CancelledError


def _exec_facts(result: ExecResult, output_tail: str) -> ExecFacts:
    return ExecFacts(exit_code=result.exit_code, timed_out=result.timed_out,
                     duration_sec=round(result.duration_sec, 3), truncated_bytes=result.truncated_bytes,
                     oom_killed=result.oom_killed, output_tail=output_tail, stopped=result.stopped)


_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")


def _open_model(model: type[_M], data: dict[str, Any] | None) -> _M | None:
    """An agent-written file as its model; one that does not fit is kept as text, not lost."""
    if data is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return model.model_validate({"unparseable": json.dumps(data, default=str)[:500]})



def _score(summary: AttemptSummary, verifier_dir: Path) -> None:
    """The verifier's rewards, every key, and the row's headline (:mod:`ray_bench.tasks.rewards`)."""
    summary.rewards, summary.reward_source = read_rewards(verifier_dir)
    summary.reward = headline(summary.rewards)


def _read_json_obj(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    # what an agent or verifier wrote is hostile input: bounded in size and depth
    try:
        raw = read_capped(path, AGENT_JSON_BYTES)
    except OSError as exc:
        return {"unparseable": f"unreadable: {exc.strerror or exc}"}
    if raw is None:
        return {"unparseable": f"larger than {AGENT_JSON_BYTES} bytes"}
    text = raw.decode(errors="replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {"unparseable": text[:500]}
    return data if isinstance(data, dict) else {"value": data}


def _write_output(directory: Path, result: ExecResult, redactor: Redactor) -> None:
    """``stdout.txt`` and ``stderr.txt``, redacted; a silent stream leaves no file (on a busy
    host each file created costs 50-500 us of CPU, and most verifiers print nothing)."""
    for name, text in (("stdout.txt", result.stdout), ("stderr.txt", result.stderr)):
        if text:
            directory.mkdir(exist_ok=True)
            (directory / name).write_text(redactor.text(text))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_whole(path, json.dumps(data, indent=2, sort_keys=True, default=str))


