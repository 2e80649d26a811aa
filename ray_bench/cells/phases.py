"""The parts of an attempt that a Harbor task.toml shapes: the working directory, the env,
the per-phase network, the healthcheck, ``[[verifier.collect]]`` hooks, ``artifacts`` and
multi-step tasks. :mod:`ray_bench.cells.runner` calls these; each states facts, the driver
classifies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ray_bench.agents.runtime import collect_sessions_for
from ray_bench.config.bounded import read_capped
from ray_bench.errors import SandboxError, TaskEnvironmentError
from ray_bench.models.attempt import CollectFacts, HealthcheckFacts
from ray_bench.models.task import ArtifactConfig, HealthcheckConfig, StepConfig, TaskConfig, VerifierCollectConfig
from ray_bench.numbers import NotFinite, finite, parse_finite
from ray_bench.sandboxes import Sandbox
from ray_bench.tasks.network import Phase, phase_network
from ray_bench.tasks.network import varies as network_varies

#: Where artifacts are copied inside the sandbox: under /logs, so they travel back with the
#: logs, under the same artifact cap (Harbor's convention directory is /logs/artifacts too).
ARTIFACTS_DIR = "/logs/artifacts"
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
    """Moves the sandbox between online and offline as the phases require; does nothing
    when every phase agrees (the sandbox was made with the right network)."""

    sandbox: Sandbox
    config: TaskConfig
    online: bool
    agent_online: bool = False
    #: The backend connects and disconnects between phases (docker); on the others the
    #: network made at create stays (plans refuse tasks whose own phases differ there).
    can_switch: bool = True
    enabled: bool = field(init=False)

    def __post_init__(self) -> None:
        self.enabled = self.can_switch and network_varies(self.config, self.agent_online)

    async def enter(self, phase: Phase, step: StepConfig | None = None) -> None:
        want = phase_network(self.config, phase, step, agent_online=self.agent_online).online
        if self.enabled and want != self.online:
            await self.sandbox.set_network(want)
            self.online = want


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
        result = await sandbox.exec(hook.command, timeout=hook.timeout_sec, env=env, cwd=cwd,
                                    user=user_of(hook.user))
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


def read_rewards(verifier_dir: Path) -> tuple[dict[str, float] | None, str | None]:
    """Harbor's verifier result: ``reward.txt`` (one float, key ``reward``) or ``reward.json``
    (a map of numbers)."""
    text = verifier_dir / "reward.txt"
    if text.is_file():
        try:
            return {"reward": parse_finite(_small_text(text))}, "reward.txt"
        except NotFinite as exc:
            return None, f"reward.txt refused: {exc}"
        except (OSError, ValueError):
            return None, "reward.txt unreadable"
    data_file = verifier_dir / "reward.json"
    if data_file.is_file():
        try:
            data = json.loads(_small_text(data_file))
        except (OSError, ValueError, RecursionError):
            return None, "reward.json unreadable"
        if isinstance(data, int | float) and not isinstance(data, bool):
            data = {"reward": data}
        if isinstance(data, dict):
            try:  # a number that is not finite refuses the whole file: no key of it is a result
                numbers = {k: finite(v) for k, v in data.items()
                           if isinstance(v, int | float) and not isinstance(v, bool)}
            except NotFinite as exc:
                return None, f"reward.json refused: {exc}"
            if numbers:
                return numbers, "reward.json"
        return None, "reward.json unreadable"
    return None, None


def headline(rewards: dict[str, float] | None) -> float | None:
    """The one number a row carries: ``reward``, or the only key there is."""
    if not rewards:
        return None
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values())) if len(rewards) == 1 else None


#: A reward file is a number or a small map; a verifier that writes more is broken.
_MAX_REWARD_BYTES = 64 * 1024


def _small_text(path: Path) -> str:
    data = read_capped(path, _MAX_REWARD_BYTES)
    if data is None:
        raise ValueError(f"{path.name} is larger than {_MAX_REWARD_BYTES} bytes")
    return data.decode("utf-8", errors="replace").strip()


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
