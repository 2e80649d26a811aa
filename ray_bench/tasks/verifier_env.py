"""A verifier in its own environment (``[verifier] environment_mode = "separate"`` or a
``[verifier.environment]`` table): which image it runs, whether its tests come in the image, and
what of the agent's environment it is handed. Pure: the runner (:mod:`ray_bench.cells.verifier_apart`)
and the plan checks (:mod:`ray_bench.tasks.support`) read it.

As Harbor 0.26 resolves it (``harbor/models/task/verifier_mode.py``,
``resolve_verifier_environment_definition``), first match wins:

1. ``[verifier.environment] docker_image``: that image; the tests are in it (not uploaded).
2. ``tests/Dockerfile``: built with ``tests/`` as its context; the tests are in the image.
3. Otherwise a fresh container of the agent's own environment (its image or Dockerfile, with
   ``[verifier.environment]``'s resources when given); ``tests/`` is uploaded to ``/tests``.

Its resources, env and baseline network are ``[verifier.environment]``'s, or a copy of
``[environment]``'s when that table is absent (``resolve_effective_verifier_env_config``).

What it is handed (``harbor/trial/artifact_handler.py``, ``upload_artifacts``): the task's
``artifacts`` entries, each at its original ``source`` path, and the agent's
``/logs/artifacts`` (the convention directory) at ``/logs/artifacts``; nothing else of the
agent's container (``harbor/trial/single_step.py`` stops it before the verifier starts). Its
``/logs/verifier`` starts empty and is where the reward comes back from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ray_bench.models.task import ArtifactConfig, EnvironmentConfig, TaskConfig, artifact_entries

#: Harbor's convention directory: what the agent leaves here always reaches the verifier.
CONVENTION_DIR = "/logs/artifacts"


@dataclass(frozen=True)
class VerifierApart:
    """How a separate verifier's container is made."""

    config: EnvironmentConfig
    #: A prebuilt image; None with ``build_context``, or with neither when it is the agent's.
    image: str | None
    #: The Dockerfile directory (``tests/``); None: not built from the task's tests.
    build_context: Path | None
    #: The tests are in the image (``/tests/test.sh``): nothing is uploaded.
    bundled_tests: bool
    #: A fresh container of the agent's own environment (its image or build).
    same_as_agent: bool


def verifier_apart(config: TaskConfig, task_dir: Path) -> VerifierApart | None:
    """The separate verifier of a single-step task, or None when it verifies in the agent's."""
    verifier = config.verifier
    if not verifier.separate:
        return None
    own = verifier.environment
    env = own if own is not None else config.environment.model_copy(deep=True)
    if own is not None and own.docker_image:
        return VerifierApart(env, own.docker_image, None, bundled_tests=True, same_as_agent=False)
    tests = task_dir / "tests"
    if (tests / "Dockerfile").is_file():
        return VerifierApart(env, None, tests, bundled_tests=True, same_as_agent=False)
    return VerifierApart(env, None, None, bundled_tests=False, same_as_agent=True)


def has_verifier_compose(task_dir: Path) -> bool:
    """``tests/docker-compose.yaml``: Harbor builds the verifier as a compose project."""
    return (task_dir / "tests" / "docker-compose.yaml").is_file()


def handed_over(config: TaskConfig) -> list[ArtifactConfig]:
    """What the verifier is handed, in Harbor's order: the convention directory, then the task's
    artifacts (``with_convention_entry``). Each entry's ``destination`` here is its source path
    made relative, so one tree laid at ``/`` puts every entry back where it was."""
    entries = [ArtifactConfig(source=CONVENTION_DIR), *artifact_entries(config.artifacts)]
    out: list[ArtifactConfig] = []
    for entry in entries:
        # Harbor's ``source_relative_path``: the source's parts without "/" (and "..").
        parts = [p for p in PurePosixPath(entry.source).parts if p not in ("", "/", "..")]
        if not parts:
            continue  # "/" itself: the whole root, nothing a verifier can be handed
        rel = PurePosixPath(*parts).as_posix()
        out.append(entry.model_copy(update={"destination": rel}))
    return out
