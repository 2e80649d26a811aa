"""A phase with a network allowlist on real docker: the container on an internal network of its
own, the egress proxy on its gateway (ray_bench.sandboxes.docker.egress), planned and run as a
user runs a task."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from support.compose_tasks import compose_task, left_by_run, plan_docker, run_cell

pytestmark = [pytest.mark.docker]


@pytest.fixture
def host_server() -> Iterator[int]:
    """An HTTP server on every address of this host answering ``ok``: its port."""
    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()


def test_an_agent_allowlist_lets_the_listed_host_through_and_fails_the_rest(
        tmp_path: Path, base_image: str, docker_client: Any, host_server: int) -> None:
    """The agent's phase reaches the one listed address through the proxy; a host off the list
    gets 403 and an attempt around the proxy no route; the cell goes on to a valid row, and the
    verifier (no-network) has no proxy. The allowlist network is labelled and gone after."""
    # this host on docker's default bridge: its subnet's first address (dockerd 20.10 names no Gateway)
    gateway = str(ip_network(docker_client.api.inspect_network("bridge")["IPAM"]["Config"][0]["Subnet"])[1])
    task = compose_task(tmp_path / "suite" / "tasks", "allowlisted", base_image, None,
                        passes='grep -q "^ok$" /app/allowed && grep -q "403 Forbidden" /app/denied '
                               '&& [ -z "$HTTPS_PROXY" ]',
                        agent_toml=f'network_mode = "allowlist"\nallowed_hosts = ["{gateway}"]\n')
    with (task / "task.toml").open("a") as toml:
        toml.write('network_mode = "no-network"\n')  # [environment], the baseline of setup and verifier
    run_id = f"allowlist-{time.time_ns()}"
    # through $HTTP_PROXY by hand: busybox's static wget dies (SIGSEGV) on a proxy's answer
    ask = "p=${HTTP_PROXY#http://}; printf '%s HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${p%:*} ${p#*:}"
    agent = (ask.replace("%s", f"GET http://{gateway}:{host_server}/") + " > /app/allowed; "
             + ask.replace("%s", "CONNECT 10.255.255.1:443") + " > /app/denied; "
             "nc -w 3 1.1.1.1 80 </dev/null; echo direct=$?")
    paths = plan_docker(tmp_path, agent, run_id)
    summary = run_cell(paths, "allowlisted")
    assert summary.error is None, summary.error
    assert summary.agent is not None
    assert "direct=0" not in summary.agent.output_tail and "direct=" in summary.agent.output_tail
    assert summary.reward == 1.0
    assert left_by_run(run_id) == []
