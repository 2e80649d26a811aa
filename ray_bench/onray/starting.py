"""Ray started on a thread of its own while ``execute`` does the work that does not need it.

A local start is mostly waiting: ``ray.init`` launches the GCS and the raylet and polls for them,
0.6-0.7 s of the driver's CPU in 3.7-8 s of wall time at load 10 on the 2-core host
(``tests/perf/README.md``, "start57"). The work before it (the plan's receipt rendered again, whose
power figures import scipy: ~1.7 s of CPU; the lock, the exporter, the ledger's first read) used
to wait for nothing; it now runs while Ray comes up, and the run waits for Ray (:meth:`RayStart.wait`)
only where it first needs it. Importing Ray (~0.9 s of CPU) happens on the thread too.

The start is begun only after every check that refuses an input without reading the receipt:
a bad plan, confirmation, option or a run held by another driver starts no Ray. What refuses
after it (the receipt, a lock taken in between) waits for the start to end and stops what it
started (:meth:`RayStart.stop`), so no Ray outlives a refused ``execute``.

``ray.init`` sets its SIGTERM handler (``sys.exit(signum)``, ``ray/_private/worker.py``) only on
the main thread and warns otherwise; :class:`RayStart` sets the same handler on the main thread
when it begins, and that warning is dropped (:data:`ray_bench.onray.start.UNACTIONABLE`)."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray_bench.onray.pool import RayContext


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Ray's own driver handler (``ray/_private/worker.py``, ``init``): exit, so ``atexit`` runs."""
    sys.exit(signum)


class RayStart:
    """One start of Ray (joining ``address``, or a local instance) begun at construction on a
    thread of its own. :meth:`wait` when the run needs Ray, :meth:`stop` when it ends (or was
    refused before it needed Ray).

    The thread lives until :meth:`stop`, after Ray's processes are stopped: Ray starts the GCS and
    the raylet with ``PR_SET_PDEATHSIG`` = SIGKILL (``ray/_private/utils.py``,
    ``set_kill_on_parent_death_linux``), and Linux sends it when the *thread* that forked the child ends
    (prctl(2)), not the process. A start thread that returned killed the new instance at once
    (seen here: the driver's next call waited 60 s for a GCS that was gone, then Ray ended it)."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._context: RayContext | None = None
        self._error: BaseException | None = None
        self._up = threading.Event()
        self._release = threading.Event()
        self._stopped = False
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        self._thread = threading.Thread(target=self._start, name="ray-bench-ray-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            from ray_bench.onray.pool import RayContext  # Ray's import (~0.9 s of CPU) on this thread

            context = RayContext(self.address)
            context.__enter__()
            self._context = context
        except BaseException as exc:  # handed to the main thread by wait()
            self._error = exc
        finally:
            self._up.set()
        self._release.wait()  # Ray's processes die with this thread (above): it ends after them

    def wait(self) -> None:
        """Ray is up. Raises what the start raised."""
        self._up.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def stop(self) -> None:
        """Stop what the start started (it is waited for first: a start cannot be interrupted
        half-way, Ray's own waits), then end the thread. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._up.wait()
        try:
            if self._context is not None:
                self._context.__exit__(None, None, None)
        finally:
            self._release.set()
            self._thread.join()
