"""Starting Ray on a loaded host. Ray waits a fixed 30 s for a new raylet to register with
the GCS (``ray/_private/node.py``, not configurable); on a 2-core host at load average 25
that wait was measured to run out, failing a run before it started. A local start is tried
again, after shutting down what the failed attempt left.

Ray also starts its workers at nice 15 (``worker_niceness``), which suits compute-heavy tasks
next to a responsive raylet. ray-bench's workers are cell runners and account actors that
mostly wait on sandboxes; at nice 15 on a shared host, two ordinary busy processes leave them a
few percent of a core, and cells crawl (a four-cell test run: 98 s at nice 15, 67 s at nice 0,
same machine under load). A Ray instance ray-bench starts itself runs its workers at nice 0
unless ``RAY_worker_niceness`` says otherwise; ``cluster/local-multinode.sh`` does the same."""

from __future__ import annotations

import logging
import os
from typing import Any

import ray

logger = logging.getLogger(__name__)

#: Attempts at starting a local instance; joining an existing cluster is tried once.
LOCAL_START_ATTEMPTS = 3
#: Ray's setting for its workers' nice value (``ray_config_def.h``: ``worker_niceness``, 15).
WORKER_NICENESS = "RAY_worker_niceness"


def init_ray(address: str | None, **kwargs: Any) -> None:
    if address and address != "local":
        ray.init(address=address, **kwargs)
        return
    os.environ.setdefault(WORKER_NICENESS, "0")  # read by the raylet this start launches
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", include_dashboard=False, **kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for the startup timeout
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_ATTEMPTS:
                raise
            logger.warning("Ray did not start (attempt %d of %d): %s", attempt, LOCAL_START_ATTEMPTS, exc)
            ray.shutdown()
