"""The parts of an attempt that a Harbor task.toml shapes: the working directory, the env,
the per-phase network, the healthcheck, ``[[verifier.collect]]`` hooks, ``artifacts`` and
multi-step tasks. :mod:`ray_bench.cells.runner` calls these; each states facts, the driver
classifies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ray_bench.agents.runtime import collect_sessions_for
from ray_bench.errors import SandboxError, TaskEnvironmentError
from ray_bench.models.attempt import CollectFacts, HealthcheckFacts
from ray_bench.models.task import (
    MAIN_SERVICE,
    ArtifactConfig,
    HealthcheckConfig,
    NetworkMode,
    StepConfig,
    TaskConfig,
    VerifierCollectConfig,
)
from ray_bench.sandboxes import Sandbox
from ray_bench.tasks.network import Phase, all_policies, phase_network
from ray_bench.tasks.network import varies as network_varies

#: Where artifacts are copied inside the sandbox: under /logs, so they travel back with the
#: logs, under the same artifact cap (Harbor's convention directory is /logs/artifacts too).
ARTIFACTS_DIR = "/logs/artifacts"
#: The verifier every Harbor task runs: its ``tests/test.sh``, put at /tests (Harbor's
#: ``EnvironmentPaths.tests_dir``), in the agent's sandbox or one of its own.
VERIFIER_SCRIPT = "/tests/test.sh"
_DEFAULT_WORKDIR = "/app"


def user_of(value: str | int | None) -> str | None:
    return None if value is None else str(value)


async def resolve_workdir(sandbox: Sandbox, workdir: str | None) -> str:
    """The task's workdir, or the image's WORKDIR when it sets none (asked of the container,
    as Harbor does). A sandbox without an image (``local``) uses /app."""
    if workdir:
        return workdir
    if sandbox.path("/") != "/":
        return _DEFAULT_WORKDIR
    found = await sandbox.exec("pwd", timeout=60)
    return (found.stdout.strip() or "/") if found.exit_code == 0 else "/"


@dataclass
class NetworkSwitch:
    """Moves the sandbox between online, offline and a phase's allowlist as the phases require;
    does nothing when every phase agrees on online or offline (the sandbox was made with the right
    network)."""

    sandbox: Sandbox
    config: TaskConfig
    online: bool
    agent_online: bool = False
    #: The backend connects and disconnects between phases (docker); on the others the
    #: network made at create stays (plans refuse tasks whose own phases differ there).
    can_switch: bool = True
    enabled: bool = field(init=False)
    #: The allowlist in force (None: the sandbox is plainly online or offline).
    hosts: tuple[str, ...] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        allowlists = any(p.mode == NetworkMode.ALLOWLIST for _, p in all_policies(self.config, self.agent_online))
        self.enabled = self.can_switch and (allowlists or network_varies(self.config, self.agent_online))

    async def enter(self, phase: Phase, step: StepConfig | None = None) -> None:
        policy = phase_network(self.config, phase, step, agent_online=self.agent_online)
        if not self.enabled:
            return
        if policy.mode == NetworkMode.ALLOWLIST:
            if self.hosts != policy.hosts:
                await self.sandbox.set_allowlist(policy.hosts)
                self.hosts = policy.hosts
        elif self.hosts is not None or policy.online != self.online:
            await self.sandbox.set_network(policy.online)
            self.online, self.hosts = policy.online, None


async def healthcheck(sandbox: Sandbox, check: HealthcheckConfig, *, env: Mapping[str, str], cwd: str,
                      facts: HealthcheckFacts) -> None:
    """Docker HEALTHCHECK semantics: failures in the start period do not count; ``retries``
    consecutive failures after it fail the attempt before the agent starts."""
    started = time.monotonic()
    failures = 0
    attempts = 0
    while True:
        attempts += 1
        result = await sandbox.exec(check.command, timeout=check.timeout_sec, env=env, cwd=cwd)
        facts.attempts, facts.exit_code = attempts, result.exit_code
        facts.seconds = round(time.monotonic() - started, 3)
        if result.exit_code == 0 and not result.timed_out:
            facts.healthy = True
            return
        in_start = time.monotonic() - started < check.start_period_sec
        if not in_start:
            failures += 1
            if failures >= check.retries:
                facts.healthy = False
                tail = (result.stdout + result.stderr)[-300:].strip()
                raise TaskEnvironmentError(
                    f"healthcheck failed {failures} times in a row (exit {result.exit_code}"
                    f"{', timed out' if result.timed_out else ''}): {check.command}"
                    + (f": {tail}" if tail else ""))
        await asyncio.sleep(check.start_interval_sec if in_start else check.interval_sec)


async def collect_hooks(sandbox: Sandbox, hooks: list[VerifierCollectConfig], *, env: Mapping[str, str],
                        cwd: str) -> list[CollectFacts]:
    """``[[verifier.collect]]``: snapshot runtime state into files after the agent phase. A
    hook that fails is recorded; the verifier still runs (it decides what a missing file means)."""
    facts: list[CollectFacts] = []
    for hook in hooks:
        if hook.service == MAIN_SERVICE:
            result = await sandbox.exec(hook.command, timeout=hook.timeout_sec, env=env, cwd=cwd,
                                        user=user_of(hook.user))
        else:  # another compose service: not main's env or directory (Harbor's service_exec)
            try:
                service = await sandbox.service(hook.service)
            except SandboxError:  # best effort, as in Harbor (Trial._run_collect_hooks)
                facts.append(CollectFacts(command=hook.command, exit_code=-1, timed_out=False))
                continue
            result = await service.exec(hook.command, timeout=hook.timeout_sec, user=user_of(hook.user))
        facts.append(CollectFacts(command=hook.command, exit_code=result.exit_code, timed_out=result.timed_out))
    return facts


def artifact_script(entries: list[ArtifactConfig], into: str = ARTIFACTS_DIR) -> str:
    """One shell script copying every artifact into ``into``, then pruning its ``exclude``
    patterns (``find -name``, or ``-path`` for a pattern with a slash): images without GNU tar
    (busybox) have no ``tar --exclude``. A missing source is skipped, as in Harbor."""
    lines = ["set +e"]
    for entry in entries:
        src = entry.source.rstrip("/") or "/"
        dest = entry.destination or PurePosixPath(src).name or "root"
        target = f"{into}/{dest}"
        q_src, q_target = shlex.quote(src), shlex.quote(target)
        lines.append(f"if [ -d {q_src} ]; then mkdir -p {q_target} && cp -a {q_src}/. {q_target}/; "
                     f"elif [ -e {q_src} ]; then mkdir -p \"$(dirname {q_target})\" && cp -a {q_src} {q_target}; fi")
        for pattern in entry.exclude:
            test = (f"-path {shlex.quote(target + '/' + pattern.lstrip('/'))}" if "/" in pattern
                    else f"-name {shlex.quote(pattern)}")
            lines.append(f"[ -d {q_target} ] && find {q_target} -mindepth 1 {test} -exec rm -rf {{}} + 2>/dev/null")
    return "\n".join(lines)


async def copy_artifacts(sandbox: Sandbox, entries: list[ArtifactConfig], *, env: Mapping[str, str],
                         cwd: str, into: str = ARTIFACTS_DIR) -> int | None:
    if not entries:
        return None
    mapped = [e.model_copy(update={"source": sandbox.path(e.source),
                                   "destination": e.destination or PurePosixPath(e.source.rstrip("/")).name or None})
              for e in entries]
    result = await sandbox.exec(artifact_script(mapped, sandbox.path(into)), timeout=300, env=env, cwd=cwd)
    return result.exit_code


async def collect_sessions(sandbox: Sandbox, agent: str, stdout: str, *, env: Mapping[str, str], cwd: str,
                           user: str | None) -> float | None:
    """The CLI's own session files of this run into ``/logs/agent/sessions``, whether it
    finished, timed out or was stopped: a cut run's usage is read from them. A failure to copy
    is not the attempt's end (its usage then says ``stream`` or ``unknown``). The seconds it took
    (None: nothing to collect, a ``command`` agent or a CLI that named no session)."""
    line = collect_sessions_for(agent, stdout)
    if line is None:
        return None
    t = time.monotonic()
    with contextlib.suppress(SandboxError):  # the sandbox's next step meets the same trouble and says so
        await sandbox.exec(line, timeout=60, env=dict(env), cwd=cwd, user=user)
    return time.monotonic() - t
