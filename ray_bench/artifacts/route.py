"""What the driver tells a runner about files, with each attempt (plain data in the spec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeRef:
    """A directory tree of the driver's (a task, an agent's files) as a Ray object of a
    :class:`~ray_bench.artifacts.bundle.Bundle`; ``key`` names its content (a checksum)."""

    key: str
    ref: Any  # ray.ObjectRef; nested in the spec, so a runner fetches it only when it needs it


@dataclass(frozen=True)
class ArtifactRoute:
    """``local_files``: the runner's node sees the driver's run root and input files (checked
    once per node with a token file, never assumed). ``store``: the artifact store every
    attempt goes to (None: the driver's run root). A node without the driver's files gets the
    task and agent trees through Ray (``task``, ``agent``) and returns its artifacts the same way."""

    local_files: bool
    store: str | None = None
    task: TreeRef | None = None
    agent: TreeRef | None = None
