"""A local Ray start that does not wait for its agents.

Ray 2.60's raylet, when it is not told the ports of the node's two Python agents (the
dashboard agent: gRPC, metrics export, HTTP; the runtime-env agent), waits for each agent to
write its port to a file, for a fixed 15 s (``WaitForPersistedPort``,
``src/ray/util/port_persistence.h``; not a setting), and aborts the node when one is late:
``Check failed ... Timed out waiting for file .../metrics_agent_port_<node>``. The dashboard
agent imports much of Ray's dashboard: 1.6 s after the raylet on an idle 2-core host, 20 s in
a loaded CI run, where local starts then failed one after the other (three tries each).

``ray.init`` has no argument for those ports, and Ray never passes the HTTP port to the raylet
at all. So, for the duration of one local start, ray-bench chooses four free ports, puts them in
the ``RayParams`` that ``ray.init`` builds, and adds ``--dashboard_agent_listen_port`` to the
raylet's command line: the raylet starts at once and the agents come up when they can. This
reaches into ``ray._private`` (``parameter.RayParams``, ``services.start_ray_process``); if a
Ray release moves either, the start goes ahead unpatched (and may wait again), and
``RAY_BENCH_AWAIT_RAY_AGENTS=1`` turns the patch off.

A local start also skips Ray's API server (:func:`api_server_not_started`): with
``include_dashboard=False`` Ray still starts its dashboard head process (only the usage-stats
module loaded, ``--disable-frontend``) and ``ray.init`` waits, polling every 0.1 s for up to
60 s, until that process has imported Ray's dashboard package and written its address. ray-bench
uses none of what it serves (the Jobs and State APIs, usage stats): nodes and actors come from
the GCS. ``RAY_BENCH_RAY_API_SERVER=1`` starts it as Ray does (``ray list`` or ``ray job submit``
against a local instance).

Nor does a local start run Ray's autoscaler monitor (:func:`monitor_not_started`): a local
instance has nothing to scale, and the monitor is one more Python process importing Ray as the
node starts (on 2 cores, beside the GCS, the raylet and the first workers) that then ignores
SIGTERM: ``ray.shutdown`` waits its full second before it kills it (``_kill_process_impl`` in
``ray/_private/node.py``; measured here: 1.01 s of a 1.77 s shutdown, every time).
``RAY_BENCH_RAY_MONITOR=1`` starts it as Ray does (``ray status`` against a local instance)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

#: Set to 1 to start Ray as it starts itself (the raylet waits for its agents).
AWAIT_AGENTS = "RAY_BENCH_AWAIT_RAY_AGENTS"
#: Set to 1 to start Ray's API server (dashboard head) in a local start, as Ray does.
API_SERVER = "RAY_BENCH_RAY_API_SERVER"
#: Set to 1 to start Ray's autoscaler monitor in a local start, as Ray does.
MONITOR = "RAY_BENCH_RAY_MONITOR"
#: The ``RayParams`` fields of the agents' ports.
PORT_FIELDS = ("metrics_agent_port", "metrics_export_port", "runtime_env_agent_port", "dashboard_agent_listen_port")


def free_ports(count: int) -> list[int]:
    """Ports free now, all different (each probe stays bound until all are chosen)."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


@contextmanager
def agents_not_awaited() -> Iterator[dict[str, int]]:
    """While one ``ray.init`` starts a local instance: the agents' ports chosen up front and
    given to the raylet. Yields the ports chosen (empty when the patch is off)."""
    if os.environ.get(AWAIT_AGENTS) == "1":
        yield {}
        return
    try:
        from ray._private import parameter, ray_constants, services

        params_class = parameter.RayParams
        start_process = services.start_ray_process
        raylet = ray_constants.PROCESS_TYPE_RAYLET
        default_listen = ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT
    except (ImportError, AttributeError) as exc:  # a Ray that moved them: start unpatched
        logger.debug("starting Ray without chosen agent ports: %s", exc)
        yield {}
        return
    ports = dict(zip(PORT_FIELDS, free_ports(len(PORT_FIELDS)), strict=True))

    class ChosenPorts(params_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            for name, port in ports.items():
                current = getattr(self, name, None)
                if not current or (name == "dashboard_agent_listen_port" and current == default_listen):
                    setattr(self, name, port)
                else:
                    ports[name] = current

    def start_told(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == raylet and not any(a.startswith("--dashboard_agent_listen_port") for a in command):
            command = [*command, f"--dashboard_agent_listen_port={ports['dashboard_agent_listen_port']}"]
        return start_process(command, process_type, *args, **kwargs)

    parameter.RayParams = ChosenPorts  # type: ignore[misc]
    services.start_ray_process = start_told
    try:
        yield ports
    finally:
        parameter.RayParams = params_class  # type: ignore[misc]
        services.start_ray_process = start_process


@contextmanager
def api_server_not_started() -> Iterator[bool]:
    """While one ``ray.init(include_dashboard=False)`` starts a local instance: the head node
    starts no API server and nothing waits for one. Yields whether the start is patched."""

    def instead(start_api_server: Callable[..., None]) -> Callable[..., None]:
        def start_unless_dashboard_off(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
            if include_dashboard is not False:  # a dashboard asked for: Ray's own start
                start_api_server(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)

        return start_unless_dashboard_off

    with _node_start_replaced("start_api_server", API_SERVER, instead) as patched:
        yield patched


@contextmanager
def monitor_not_started() -> Iterator[bool]:
    """While one ``ray.init`` starts a local instance: the head node starts no autoscaler monitor
    (Ray's own ``RayParams.no_monitor``, which ``ray.init`` does not expose). Yields whether the
    start is patched."""

    def instead(start_monitor: Callable[..., None]) -> Callable[..., None]:
        def no_monitor(self: Any) -> None:
            return None

        return no_monitor

    with _node_start_replaced("start_monitor", MONITOR, instead) as patched:
        yield patched


@contextmanager
def _node_start_replaced(method: str, keep: str, instead: Callable[[Callable[..., None]], Callable[..., None]],
                         ) -> Iterator[bool]:
    """Ray's ``Node.<method>`` replaced by ``instead(the original)`` for one start, unless the
    environment sets ``keep`` to 1 or Ray moved it; yields whether it was replaced."""
    if os.environ.get(keep) == "1":
        yield False
        return
    try:
        from ray._private.node import Node

        original = getattr(Node, method)
    except (ImportError, AttributeError) as exc:  # a Ray that moved it: start unpatched
        logger.debug("starting Ray with its own %s: %s", method, exc)
        yield False
        return
    setattr(Node, method, instead(original))
    try:
        yield True
    finally:
        setattr(Node, method, original)
