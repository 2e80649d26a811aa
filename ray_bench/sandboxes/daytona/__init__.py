"""The ``daytona`` backend (being split into a package; see ``backend``)."""

from ray_bench.sandboxes.daytona.backend import (
    LABEL_CREATE,
    SNAPSHOT_PREFIX,
    THROTTLERS,
    DaytonaBackend,
    DaytonaPool,
    DaytonaSandbox,
    extract_capped,
    lifetime_minutes,
    retry_after,
)

__all__ = [
    "LABEL_CREATE",
    "SNAPSHOT_PREFIX",
    "THROTTLERS",
    "DaytonaBackend",
    "DaytonaPool",
    "DaytonaSandbox",
    "extract_capped",
    "lifetime_minutes",
    "retry_after",
]
