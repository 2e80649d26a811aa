"""SIGTERM, SIGINT and SIGHUP end a run the way ``pause --now`` does.

The handler only writes down which signal came: the driver's loop asks :meth:`SignalStop.received`
between rounds, stops starting cells, cancels the running ones (their sandboxes are deleted by
the runners, shielded from cancellation), records a ``stop`` with reason ``signal``, audits and
returns; ``execute`` then shuts down the Ray it started and exits ``128 + signal number`` (the
shell's convention: 143 for SIGTERM, 130 for Ctrl-C, 129 for SIGHUP). A second signal within
:data:`FORCE_WINDOW_SEC` of the first is an operator who will not wait: the process exits at
once with the same code, leaving what a crash leaves (a resume recovers it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

#: The signals that end a run cleanly.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: A second signal this soon after the first forces the exit (seconds).
FORCE_WINDOW_SEC = 5.0


def exit_code_of(name: str) -> int:
    """The exit code of a run stopped by the signal ``name`` (``SIGTERM`` -> 143)."""
    return 128 + int(signal.Signals[name])


class SignalStop:
    """Which stop signal came first, if any. ``install`` may be called again (Ray's ``init``
    puts its own SIGTERM handler in place); ``restore`` puts the previous handlers back."""

    def __init__(self, say: Callable[[str], None] | None = None,
                 force_exit: Callable[[int], Any] = os._exit, now: Callable[[], float] = time.monotonic) -> None:
        self._say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self._force_exit = force_exit
        self._now = now
        self._first: str | None = None
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    def received(self) -> str | None:
        """The name of the first stop signal received (None: none yet)."""
        return self._first

    def install(self) -> None:
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(int(sig), previous)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.on_signal(signal.Signals(signum).name)

    def on_signal(self, name: str) -> None:
        now = self._now()
        if self._first is None:
            self._first, self._first_at = name, now
            self._say(f"{name}: stopping: no new cells, running ones are cancelled and their sandboxes "
                      f"removed (send it again within {FORCE_WINDOW_SEC:.0f} s to exit at once)")
            return
        if now - self._first_at <= FORCE_WINDOW_SEC:
            self._say(f"{name} again: exiting now; `ray-bench execute` of the plan again recovers the run")
            self._force_exit(exit_code_of(self._first))
            return
        self._first_at = now  # a late repeat restarts the window: the next one within it forces
        self._say(f"{name}: still stopping (send it again within {FORCE_WINDOW_SEC:.0f} s to exit at once)")
