"""Starting Ray on a loaded host. Ray waits a fixed 30 s for a new raylet to register with
the GCS (``ray/_private/node.py``, not configurable); on a 2-core host at load average 25
that wait was measured to run out, failing a run before it started. A local start is tried
again, after stopping what the failed attempt left.

Most failures under load were the raylet aborting because its dashboard agent took longer
than Ray's fixed 15 s to write its port files; a local start now tells the raylet the agents'
ports so that it does not wait, and starts no API server (the dashboard head, which ``ray.init``
waits for even with ``include_dashboard=False``; :mod:`ray_bench.onray.agent_ports`).

What a failed attempt leaves is most of a Ray: ``ray.init`` raises from inside the node's
constructor, so ``ray.shutdown`` knows of no node and stops nothing, and the GCS, the agents
and the log monitor of the failed start run on until this process exits. Each leftover
instance added load (in a loaded CI run 17 local starts in a row failed, each slower than the
one before). So before trying again, every process of this process's earlier sessions (their
names end in its pid) is killed.

A local start must also end. Ray's raylet holds the first driver's registration
(``RegisterClient``, a blocking read with no timeout in the driver's ``ray.init``) until the
node's prestarted workers have registered (``prestart_worker_first_driver``, on by default; one
worker per CPU). A worker that takes longer than ``worker_register_timeout_seconds`` (60 s) to
start is killed by the raylet and never counted, so under load the driver waited forever (seen in
CI: 1,500 s in ``RegisterClient``, the raylet idle after "have not registered within the
timeout"; reproduced here by workers that sleep at start: ``ray.init`` never returned, and
returned in 14 s with the setting off). A local start turns the setting off (unless
``RAY_prestart_worker_first_driver`` says otherwise): the driver registers at once and the first
task starts its worker; measured here under load, the 30-40 s of the workers' start were spent
inside ``ray.init`` before.

Whatever else stalls a start is bounded from outside (:class:`StartWatchdog`, a process of its
own, :mod:`ray_bench.onray.start_watchdog`: the driver holds the GIL while it waits on the
raylet, and a watchdog thread was measured not to run): after ``RAY_BENCH_RAY_START_TIMEOUT``
seconds (:data:`DEFAULT_START_TIMEOUT_SEC`) the start's processes are killed. A start still in
Python (the node's own waits) then raises and is tried again. A driver blocked in
``RegisterClient`` cannot be: when the raylet goes, Ray ends the process itself (measured:
"Failed to register worker to Raylet: IOError ... End of file", exit status 1, no Python
exception), so the error line is printed first. A start that fails on every attempt raises
:class:`~ray_bench.errors.RayStartError`, after its processes are stopped.

Ray also starts its workers at nice 15 (``worker_niceness``), which suits compute-heavy tasks
next to a responsive raylet. ray-bench's workers are cell runners and account actors that
mostly wait on sandboxes; at nice 15 on a shared host, two ordinary busy processes leave them a
few percent of a core, and cells crawl (a four-cell test run: 98 s at nice 15, 67 s at nice 0,
same machine under load). A Ray instance ray-bench starts itself runs its workers at nice 0
unless ``RAY_worker_niceness`` says otherwise; ``cluster/local-multinode.sh`` does the same.

Ray's own output is kept off the operator's terminal, here and only here (:func:`quiet_ray`,
called before every ``ray.init``). The messages the GCS publishes to the driver (a dead node's
or worker's raylet report, some 40 lines after a node loss) are printed by Ray on the driver's
stdout even with ``log_to_driver=False``; they go to a file instead: the run root's
``ray-driver.log`` when the driver names one (:func:`send_ray_messages_to`), else
``ray-bench-driver.log`` in Ray's session log directory, with the run's credential values
scrubbed (a worker's traceback can quote its environment). The driver records the node events
itself. And the warnings ray-bench cannot act on (:data:`UNACTIONABLE`: the token-authentication
notice every local start prints) are dropped."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ray_bench.cells.credentials import Redactor
from ray_bench.errors import RayStartError
from ray_bench.onray import start_watchdog
from ray_bench.onray.agent_ports import agents_not_awaited, api_server_not_started, monitor_not_started
from ray_bench.onray.start_watchdog import kill_sessions

logger = logging.getLogger(__name__)

#: Attempts at starting a local instance; joining an existing cluster is tried once.
LOCAL_START_ATTEMPTS = 3
#: Ray's setting for its workers' nice value (``ray_config_def.h``: ``worker_niceness``, 15).
WORKER_NICENESS = "RAY_worker_niceness"
#: Ray's setting that holds the first driver's registration until the prestarted workers register.
PRESTART_FIRST_DRIVER = "prestart_worker_first_driver"
#: Seconds one local start may take before its processes are killed.
START_TIMEOUT = "RAY_BENCH_RAY_START_TIMEOUT"
#: Local starts here took 13-75 s under load (up to minutes in loaded CI runs); a start that hung
#: never came back.
DEFAULT_START_TIMEOUT_SEC = 300.0
#: How long a start killed while still in Python has to raise before the process exits: the
#: node's own waits on its processes are 30 s (``ray/_private/node.py``).
KILLED_GRACE_SEC = 60.0


#: Ray warnings ray-bench cannot act on, by the start of their message: the notice every local
#: start logs (``ray/_private/authentication/authentication_token_setup.py``); ray-bench's own
#: instance is token-protected by it, and an operator can do nothing about it.
UNACTIONABLE = ("Token authentication is enabled for this Ray cluster",
                "SIGTERM handler is not set because current thread is not the main thread")
#: The Ray loggers that log them: the notice's, and ``ray.init``'s own (the SIGTERM warning of a
#: start on a thread of its own, whose handler :mod:`ray_bench.onray.starting` sets instead).
_UNACTIONABLE_LOGGERS = ("ray._private.authentication.authentication_token_setup", "ray._private.worker")
#: The run root's file for Ray's messages to the driver.
RAY_MESSAGES_FILE = "ray-driver.log"

_messages_lock = threading.Lock()
#: The file :func:`send_ray_messages_to` named ("to"; absent: Ray's session log dir).
_messages: dict[str, Path] = {}
#: What scrubs the messages before they are written (the run's credential values).
_scrub: list[Redactor] = [Redactor([])]


class _Unactionable(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(UNACTIONABLE)


def send_ray_messages_to(path: Path | None, secrets: Iterable[str] = ()) -> None:
    """Where Ray's messages to this driver go from now on (``None``: Ray's session log dir), and
    the values scrubbed from them (the run's credentials, as the driver's environment holds them)."""
    with _messages_lock:
        if path is None:
            _messages.pop("to", None)
        else:
            _messages["to"] = path
        _scrub[0] = Redactor(secrets)


def quiet_ray() -> None:
    """Filter the unactionable warnings and route Ray's messages to the driver to a file.
    Idempotent; called by :func:`init_ray`."""
    for name in _UNACTIONABLE_LOGGERS:
        ray_logger = logging.getLogger(name)
        if not any(isinstance(f, _Unactionable) for f in ray_logger.filters):
            ray_logger.addFilter(_Unactionable())
    from ray._private import worker

    # listen_error_messages looks print_to_stdstream up by name at each message.
    if getattr(worker.print_to_stdstream, "__module__", None) != __name__:
        worker.print_to_stdstream = _write_ray_messages


def _write_ray_messages(data: Mapping[str, Any], ignore_prefix: bool = False) -> None:
    with _messages_lock:
        path = _messages.get("to") or _session_messages_file()
        if path is None:
            for line in data.get("lines", []):
                logger.info("ray (%s): %s", data.get("pid"), _scrub[0].text(str(line)))
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        scrub = _scrub[0].text
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                for line in data.get("lines", []):
                    out.write(f"{stamp} ({data.get('pid')}) {scrub(str(line))}\n")
        except OSError as exc:
            logger.info("cannot write Ray's messages to %s: %s", path, exc)


def _session_messages_file() -> Path | None:
    try:
        from ray._private import worker

        node = worker.global_worker.node
        return None if node is None else Path(node.get_logs_dir_path()) / "ray-bench-driver.log"
    except Exception:  # a Ray that moved it: the messages go to the debug log
        return None


def use_token_if_there() -> None:
    """Join with the machine's Ray token (``~/.ray/auth_token``) when ``RAY_AUTH_MODE`` is unset.

    Ray 2.60 protects a cluster that ``ray start --head`` or a local ``ray.init`` starts with
    that token, but a process joining with the mode unset sends none: ``ray-bench execute
    --address`` failed with ``InvalidAuthToken`` unless the operator exported
    ``RAY_AUTH_MODE=token`` (measured here: mode unset, a fresh ``ray start --head`` refuses the
    join; with ``token`` it is accepted, and a cluster started with ``disabled`` accepts both).
    Ray's own rule for a local start, reused: token mode only if a token exists."""
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def start_timeout() -> float:
    """Seconds a local start may take (``RAY_BENCH_RAY_START_TIMEOUT``; a bad value: the default)."""
    try:
        chosen = float(os.environ.get(START_TIMEOUT, DEFAULT_START_TIMEOUT_SEC))
    except ValueError:
        return DEFAULT_START_TIMEOUT_SEC
    return chosen if chosen > 0 else DEFAULT_START_TIMEOUT_SEC


def start_failed(attempts: int, timeout: float, last: str) -> RayStartError:
    """What the operator reads when no local start came up."""
    return RayStartError(
        f"a local Ray instance did not start ({attempts} attempt(s), {timeout:.0f} s each at most; last: "
        f"{last}); its processes were stopped. The host is likely overloaded: try again when it is "
        f"quieter, allow longer with {START_TIMEOUT}=<seconds>, or start Ray yourself (ray start "
        f"--head) and pass --address"
    )


class StartWatchdog:
    """Bounds one local ``ray.init`` from outside (:mod:`ray_bench.onray.start_watchdog`, a
    process of its own): ``timeout`` s after entering, this process's session processes are
    killed. A start still in Python then raises and ``expired`` says why; a driver blocked in its
    registration with the raylet ends (exit status 1, the error line on stderr first), and so does
    one that has not raised ``grace`` s after the kill."""

    def __init__(self, timeout: float, *, grace: float = KILLED_GRACE_SEC) -> None:
        self.timeout = timeout
        self.grace = grace
        self.expired = False
        self._started = 0.0
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._connect: Any = None

    def __enter__(self) -> StartWatchdog:
        line = start_failed(1, self.timeout, "Ray's raylet did not answer this driver in time").args[0]
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                start_watchdog.__file__,
                str(os.getpid()),
                str(self.timeout),
                str(self.grace),
                line,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._started = time.monotonic()
        from ray._private import worker

        connect = self._connect = worker.connect

        def connect_told(*args: Any, **kwargs: Any) -> Any:
            self._say(start_watchdog.CONNECTING)
            return connect(*args, **kwargs)

        worker.connect = connect_told
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        from ray._private import worker

        worker.connect = self._connect
        self._say(start_watchdog.OK)
        assert self._watchdog is not None
        if self._watchdog.stdin is not None:
            self._watchdog.stdin.close()
        try:
            fired = self._watchdog.wait(timeout=30) == start_watchdog.FIRED
        except subprocess.TimeoutExpired:
            self._watchdog.kill()
            fired = True
        self.expired = fired or time.monotonic() - self._started >= self.timeout
        if et is None and fired:  # came up as it was being killed: not a start to keep
            raise TimeoutError(f"Ray came up after {self.timeout:.0f} s, as its processes were stopped")

    def _say(self, word: bytes) -> None:
        assert self._watchdog is not None
        assert self._watchdog.stdin is not None
        try:
            self._watchdog.stdin.write(word)
            self._watchdog.stdin.flush()
        except (BrokenPipeError, ValueError):  # a watchdog gone: the start runs unwatched
            logger.debug("the start's watchdog is gone")


def init_ray(address: str | None, **kwargs: Any) -> None:
    import ray  # here, not above: `execute` routes Ray's messages (this module) before importing Ray

    quiet_ray()
    if address and address != "local":
        use_token_if_there()
        ray.init(address=address, **kwargs)
        return
    os.environ.setdefault(WORKER_NICENESS, "0")  # read by the raylet this start launches
    system: dict[str, Any] = dict(kwargs.pop("_system_config", None) or {})
    if f"RAY_{PRESTART_FIRST_DRIVER}" not in os.environ:
        system.setdefault(PRESTART_FIRST_DRIVER, False)
    timeout = start_timeout()
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        watchdog = StartWatchdog(timeout)
        try:
            with watchdog, agents_not_awaited(), api_server_not_started(), monitor_not_started():
                ray.init(address="local", include_dashboard=False, _system_config=system, **kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for the startup timeout
            ray.shutdown()
            stopped = stop_failed_sessions()  # whatever failed: nothing of the start stays
            if not watchdog.expired and "timed out during startup" not in str(exc):
                raise
            logger.warning("Ray did not start (attempt %d of %d): %s", attempt, LOCAL_START_ATTEMPTS, exc)
            if stopped:
                logger.warning("stopped %d process(es) the failed start left running", stopped)
            if attempt == LOCAL_START_ATTEMPTS:
                raise start_failed(attempt, timeout, str(exc).split(". ")[0]) from exc


def stop_failed_sessions() -> int:
    """Kill what this process's failed local starts left running; the number killed. Only
    called when no Ray of this process is up (``ray.init`` just failed and was shut down)."""
    return kill_sessions()
