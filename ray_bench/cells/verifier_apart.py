"""A separate verifier (``environment_mode = "separate"``), run as Harbor 0.26 runs it
(``harbor/trial/single_step.py`` and ``Trial._run_separate_verifier`` in
``harbor/trial/trial.py``): after the agent, the collect hooks run in the agent's sandbox, what the
verifier is handed (:func:`ray_bench.tasks.verifier_env.handed_over`) is taken out, the agent's
sandbox is deleted, and a second sandbox made from the verifier's environment
(:func:`ray_bench.tasks.verifier_env.verifier_apart`) gets it at the same paths, an empty
``/logs/verifier``, the tests (unless its image has them), and runs ``/tests/test.sh`` with its
own timeout, network, resources and env. Its ``/logs/verifier`` comes back to the attempt's
``logs/verifier``, where the one reward reader reads it as for any verifier.

The second sandbox carries the attempt's labels (``ray-bench audit`` finds and removes it like
the agent's) and is deleted however the phase ends, shielded from cancellation.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from ray_bench.cells.lifetime import TRANSFER_MARGIN_SEC
from ray_bench.cells.phases import VERIFIER_SCRIPT, artifact_script, resolve_workdir, user_of
from ray_bench.cells.spec import AttemptSpec
from ray_bench.errors import SandboxError
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes import Resources, Sandbox, SandboxBackend, SandboxSpec, run_labels
from ray_bench.sandboxes.base import ExecResult
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.tasks.network import create_allowlist, phase_network
from ray_bench.tasks.verifier_env import VerifierApart, handed_over

#: Where the handover is gathered in the agent's sandbox before it leaves (emptied first, so
#: nothing the agent planted there reaches the verifier).
HANDOVER_DIR = "/tmp/.ray-bench-handover"


class HandoverTooLargeError(SandboxError):
    """What the verifier is handed is over what the artifact cap leaves: a cut handover would
    grade a different answer, so the verifier does not run (class: executor)."""


async def take_handover(sandbox: Sandbox, spec: AttemptSpec, into: Path, room: int, *,
                        env: Mapping[str, str], cwd: str) -> int:
    """Copy what the verifier is handed out of the agent's ``sandbox`` into ``into`` (a tree laid
    at ``/``: each entry at its own path); return its bytes. Harbor copies each entry out with
    its ``exclude`` patterns (``download_dir_with_exclusions``) and a missing source is skipped."""
    entries = [e.model_copy(update={"source": sandbox.path(e.source)}) for e in handed_over(spec.task_config)]
    staging = sandbox.path(HANDOVER_DIR)
    script = f"rm -rf {shlex.quote(staging)}; mkdir -p {shlex.quote(staging)}\n" + artifact_script(entries, staging)
    # As root where the backend can switch users: Harbor copies artifacts out as root (docker cp,
    # its ``service_is_dir`` probe as user root), whatever user the image runs as.
    root = "root" if capabilities(spec.backend).users else None
    result = await sandbox.exec(script, timeout=300, env=dict(env), cwd=cwd, user=root)
    if result.exit_code != 0:
        raise SandboxError(f"gathering the verifier's handover exited {result.exit_code}: "
                           f"{(result.stderr or result.stdout)[-300:].strip()}")
    # One byte over the room tells "fits" from "was cut at the cap" (cells/workspace.py does the same).
    taken = await sandbox.get_dir(HANDOVER_DIR, into, max_bytes=room + 1)
    if taken > room:
        raise HandoverTooLargeError(f"the verifier's handover (artifacts and {HANDOVER_DIR.rsplit('/', 1)[0]}) "
                                    f"is over the artifact cap: more than {room:,} bytes left for it")
    return taken


async def put_handover(sandbox: Sandbox, spec: AttemptSpec, handover: Path) -> None:
    """Each handed-over entry back at its own path, one by one as Harbor uploads them
    (``upload_artifacts``): the entry itself is written, its parent directories only made where
    missing (a tree laid at ``/`` would reset the mode of an existing ``/tmp`` or ``/app``)."""
    for entry in handed_over(spec.task_config):
        rel = entry.destination or ""
        local = handover / rel
        if local.is_dir():
            await sandbox.put_dir(local, f"/{rel}")
        elif local.is_file():
            await sandbox.put_file(local.read_bytes(), f"/{rel}", mode=local.stat().st_mode & 0o777)


def verifier_sandbox_spec(spec: AttemptSpec, apart: VerifierApart) -> SandboxSpec:
    """The verifier's sandbox: the attempt's labels, its own image (the agent's own image or build
    when it has none, without the agent's CLI layer), its own resources (the cell's when the task
    gives the verifier no environment of its own), and the network its phase has."""
    cfg = spec.task_config
    own = cfg.verifier.environment
    if apart.same_as_agent:
        image, context = spec.image, Path(spec.build_context) if spec.build_context else None
    else:
        image, context = apart.image, apart.build_context
    if own is None:
        resources = Resources(cpus=spec.cpus, memory_mb=spec.memory_mb, pids=spec.pids,
                              disk_mb=cfg.environment.storage_mb, gpus=cfg.environment.gpus)
    else:
        resources = Resources(cpus=own.cpus, memory_mb=own.memory_mb, pids=spec.pids, disk_mb=own.storage_mb,
                              gpus=own.gpus)
    return SandboxSpec(
        labels=run_labels(spec.run_id, spec.cell_id, spec.attempt_id),
        image=image, dockerfile_dir=context, env={}, resources=resources,
        network=phase_network(cfg, "verifier").online,
        allowlist=create_allowlist(spec.backend, [("verifier", phase_network(cfg, "verifier"))]),
        workdir=apart.config.workdir,
        lifetime_sec=spec.verifier_timeout_sec + TRANSFER_MARGIN_SEC,
        agent_layer=None,
    )


async def run_verifier_apart(backend: SandboxBackend, spec: AttemptSpec, apart: VerifierApart, handover: Path,
                             summary: AttemptSummary, *, env: Mapping[str, str],
                             paths: Callable[[Sandbox, str], dict[str, str]],
                             delete: Callable[[Sandbox, AttemptSummary], Awaitable[None]]) -> ExecResult:
    """Make the verifier's sandbox, hand it ``handover``, run the tests, bring its
    ``/logs/verifier`` back into the attempt's ``logs/verifier``, and delete it (``delete``: the
    runner's shielded deletion). ``env``: the verifier's env (its environment's and ``[verifier].env``);
    ``paths``: the runner's path variables for the sandbox and workdir."""
    phases = summary.phases
    t = time.monotonic()
    sandbox = await backend.create(verifier_sandbox_spec(spec, apart))
    summary.verifier_sandbox_id = sandbox.id
    phases["verifier_create"] = time.monotonic() - t
    try:
        t = time.monotonic()
        # Harbor empties the verifier's log directory before it uploads anything (empty_dirs, chmod);
        # the empty directory goes up as the agent's upload brings its log directories (a sandbox
        # user that may not mkdir under / still gets them: Daytona).
        await sandbox.exec(f"rm -rf {shlex.quote(sandbox.path('/logs/verifier'))}", timeout=60)
        with tempfile.TemporaryDirectory(prefix="rb-verifier-logs-") as tmp:
            (Path(tmp) / "logs" / "verifier").mkdir(parents=True)
            (Path(tmp) / "logs" / "verifier").chmod(0o777)  # a verifier running as another user writes here
            await sandbox.put_dir(Path(tmp), "/")
        await put_handover(sandbox, spec, handover)
        if not apart.bundled_tests:
            await sandbox.put_dir(Path(spec.task_path) / "tests", "/tests")
        workdir = await resolve_workdir(sandbox, apart.config.workdir)
        phases["verifier_setup"] = time.monotonic() - t
        t = time.monotonic()
        result = await sandbox.exec_script(VERIFIER_SCRIPT, timeout=spec.verifier_timeout_sec,
                                           env={**env, **paths(sandbox, workdir)}, cwd=workdir,
                                           user=user_of(spec.task_config.verifier.user))
        phases["verifier"] = time.monotonic() - t
        room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
        summary.artifact_bytes += await sandbox.take_dir("/logs/verifier", Path(spec.attempt_dir) / "logs" / "verifier",
                                                         max_bytes=room)
        return result
    finally:
        await delete(sandbox, summary)


def handover_dir() -> tempfile.TemporaryDirectory[str]:
    """A scratch directory for the handover on its way between the two sandboxes (Harbor stages
    it in a temporary directory beside the trial's artifacts, removed after the upload)."""
    return tempfile.TemporaryDirectory(prefix="rb-verifier-handover-")
