"""The ``daytona`` backend: one Daytona sandbox per attempt, through the ``daytona`` SDK.

Needs the ``daytona`` extra; without it the SDK import fails with ``ImportError`` and
:mod:`ray_bench.sandboxes` skips registration. The API key is a credential route: the
environment variable named by ``api_key_env`` (``DAYTONA_API_KEY``) is read on the node that
creates the sandbox and is never logged, stored or put in an error. ``DAYTONA_API_URL`` (or
``api_url=``) selects the server; ``tests/support/daytona_server.py`` is a local one backed by
Docker (see ``docs/daytona.md``).

How the interface maps onto Daytona:

- **create** from an image (``spec.image``), or a snapshot (``spec.image = "snapshot:NAME"``,
  or the backend's ``snapshot=`` when the spec names no image), with the spec's labels, env
  and resources. ``spec.lifetime_sec`` becomes the safety net: auto-stop after that many idle
  minutes, auto-delete as soon as stopped, and a wall-clock TTL a little longer, so a crashed
  driver leaves nothing running for long. Creation runs in its own task: a cancelled create
  waits briefly for it, deletes what it made, and sweeps by a one-off ``ray-bench.create``
  label for anything the SDK made but never returned.
- **exec** runs ``sh -c`` under an in-sandbox watchdog (``setsid`` + ``kill -9 -PGID``), so a
  timeout kills the whole process group on any Daytona server, and returns stdout and stderr
  separately, capped, base64-framed in one round trip (the toolbox's execute endpoint merges
  the streams).
- **files** travel as tar archives through the toolbox's bulk upload/download; downloads are
  capped and refuse entries that leave their directory (:class:`ArchiveEscapeError`).
- **rate limits**: a 429 carries ``Retry-After-<throttler>`` (throttlers ``authenticated``,
  ``sandbox-create``, ``sandbox-lifecycle``); every call waits that long and retries, a bounded
  number of times, then raises :class:`SandboxRateLimitedError` with ``retry_after``.

SDK errors are translated at this boundary: unreachable or 5xx -> :class:`SandboxUnavailableError`,
a failed create -> :class:`SandboxCreateError`, a sandbox that is gone or no longer started ->
:class:`SandboxGoneError`.

- :mod:`.backend`: the backend (a client per event loop, create with its safety net, list, delete).
- :mod:`.sandbox`: one sandbox (the exec wrapper, files in and out as tar archives).
- :mod:`.ratelimit`: 429s and brief 5xx spells, waited out by their headers.
- :mod:`.translate`: Daytona SDK errors and states, in ray-bench's terms.
- :mod:`ray_bench.sandboxes.daytona_pool` (beside the package, so that `plan` reads it without the
  SDK): the organisation's compute pool, as configuration.
"""

from __future__ import annotations

from ray_bench import sandboxes
from ray_bench.models.build import SNAPSHOT_PREFIX
from ray_bench.sandboxes.archive import extract_capped
from ray_bench.sandboxes.daytona.backend import (
    LABEL_CREATE,
    DaytonaBackend,
    lifetime_minutes,
)
from ray_bench.sandboxes.daytona.ratelimit import THROTTLERS, retry_after
from ray_bench.sandboxes.daytona.sandbox import DaytonaSandbox
from ray_bench.sandboxes.daytona_pool import DaytonaPool

sandboxes.register("daytona", DaytonaBackend)

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
