"""Starting Ray on a loaded host. Ray waits a fixed 30 s for a new raylet to register with
the GCS (``ray/_private/node.py``, not configurable); on a 2-core host at load average 25
that wait was measured to run out, failing a run before it started. A local start is tried
again, after shutting down what the failed attempt left."""

from __future__ import annotations

import logging
from typing import Any

import ray

logger = logging.getLogger(__name__)

#: Attempts at starting a local instance; joining an existing cluster is tried once.
LOCAL_START_ATTEMPTS = 3


def init_ray(address: str | None, **kwargs: Any) -> None:
    if address and address != "local":
        ray.init(address=address, **kwargs)
        return
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", include_dashboard=False, **kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for the startup timeout
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_ATTEMPTS:
                raise
            logger.warning("Ray did not start (attempt %d of %d): %s", attempt, LOCAL_START_ATTEMPTS, exc)
            ray.shutdown()
