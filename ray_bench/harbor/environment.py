"""Harbor's ``BaseEnvironment`` over a ray-bench :class:`~ray_bench.sandboxes.base.Sandbox`, so
Harbor's agent code runs unchanged on every backend. Imports Harbor (Python 3.12): only a cell of
a Harbor arm imports this module.

Harbor's contract, as its ``Trial`` uses an environment: ``start``/``stop`` bracket it (here the
cell runner owns the sandbox's life, so both are no-ops); ``exec`` takes user, env, cwd and a
timeout and answers an ``ExecResult``; files go up and down by host path and sandbox path; the
agent's env overlay (``scoped_exec_env``) and default user apply to every ``exec``."""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment
from harbor.environments.base import ExecResult as HarborExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from ray_bench.sandboxes.base import ExecWatch, Sandbox

#: Harbor's own sandbox roots (``EnvironmentPaths``) and ray-bench's workdir: on a backend whose
#: commands run on the host (``local``) they live below the scratch root, and a command naming
#: them is rewritten to :meth:`Sandbox.path` (a container sees them where they are).
_ROOTS = ("/logs", "/solution", "/tests", "/app", "/installed-agent", "/runtime")
_ROOT_WORD = re.compile(r"(?<![\w./~-])(" + "|".join(re.escape(r) for r in _ROOTS) + r")(?=[/\s'\";|&)]|$)")
#: A command Harbor runs without a timeout is bounded all the same (a sandbox exec needs one):
#: the agent phase's own timeout cuts the whole agent anyway.
DEFAULT_EXEC_TIMEOUT_SEC = 24 * 3600.0
#: Files brought back by ``download_file`` at most (base64 through the exec's output).
DOWNLOAD_FILE_BYTES = 64 << 20


class SandboxEnvironment(BaseEnvironment):  # type: ignore[misc,unused-ignore]  # Any where Harbor is absent (3.11)
    """One ray-bench sandbox as a Harbor environment."""

    def __init__(self, sandbox: Sandbox, *, task_dir: Path, trial_paths: TrialPaths,
                 task_env_config: EnvironmentConfig, session_id: str, base_env: dict[str, str],
                 workdir: str | None, download_cap: int, **kwargs: Any) -> None:
        self._sandbox = sandbox
        self._base_env = dict(base_env)
        if sandbox.on_host:
            # The host's tmux server is one per user: each sandbox gets its own socket directory
            # (Terminus 2 names every session "terminus-2"; two cells would share one pane).
            self._base_env["TMUX_TMPDIR"] = sandbox.path("/tmp")
        self._workdir = workdir
        self._download_cap = download_cap
        #: The watch every command of the agent's run is streamed through (the degeneration
        #: watchdog, a live refusal), set by the caller once the setup is done; after it stopped
        #: a command, the agent's own clean-up commands run unwatched.
        self.watch: ExecWatch | None = None
        super().__init__(environment_dir=task_dir / "environment", environment_name=task_dir.name,
                         session_id=session_id, trial_paths=trial_paths, task_env_config=task_env_config,
                         enable_environment_dir_upload=False, **kwargs)

    @staticmethod
    def type() -> str:
        return "ray-bench"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Nothing is mounted from the host: Harbor downloads what an agent wrote in the sandbox.
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        """The task's environment was checked by ray-bench's plan and built by its backend."""

    async def start(self, force_build: bool) -> None:
        """The sandbox is up before the agent is built (the cell runner made it)."""

    async def stop(self, delete: bool) -> None:
        """The cell runner deletes the sandbox after the verifier, shielded from cancellation."""

    def _p(self, path: str | Path) -> str:
        return self._sandbox.path(str(path))

    def _localise(self, command: str) -> str:
        if not self._sandbox.on_host:
            return command
        return _ROOT_WORD.sub(lambda m: self._sandbox.path(m.group(1)), command)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> HarborExecResult:
        merged = {**self._base_env, **(self._merge_env(env) or {})}
        who = self._resolve_user(user)
        # A host process runs as the host's user: Harbor's user switch has nothing to switch to.
        as_user = None if self._sandbox.on_host or who is None else str(who)
        timeout = float(timeout_sec or DEFAULT_EXEC_TIMEOUT_SEC)
        watch = self.watch if self.watch is not None and self.watch.reason is None else None
        result = await self._sandbox.exec(self._localise(command), timeout=timeout, env=merged,
                                          cwd=cwd or self._workdir, user=as_user, watch=watch)
        if result.timed_out:
            # Harbor's environments raise on a timed-out exec; its agents catch TimeoutError.
            raise TimeoutError(f"command timed out after {timeout_sec} s: {command[:200]}")
        return HarborExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.exit_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source = Path(source_path)
        await self._sandbox.put_file(source.read_bytes(), target_path, mode=source.stat().st_mode & 0o777)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._sandbox.put_dir(Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        # One exec on every backend: base64 keeps the bytes whole through the exec's text output.
        result = await self._sandbox.exec(f"base64 < {shlex.quote(self._p(source_path))}", timeout=120.0,
                                          output_cap=DOWNLOAD_FILE_BYTES * 4 // 3 + 4096)
        if result.exit_code != 0:
            raise FileNotFoundError(f"{source_path} in the sandbox: {result.stderr.strip()[:300]}")
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode("".join(result.stdout.split())))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._sandbox.get_dir(source_dir, Path(target_dir), max_bytes=self._download_cap)
