"""The host's end of the docker bridge: where a sandboxed agent reaches a server the test runs.

A fake provider or counter that an agent in a container calls listens on this address alone,
not on every interface (``0.0.0.0``): the host's side of ``docker0`` is reachable from this
machine's containers and from nowhere else, so a test's server stays off the network.
"""

from __future__ import annotations

import subprocess

#: Docker's default when ``docker0`` cannot be read (``ip`` missing).
DEFAULT_GATEWAY = "172.17.0.1"


def bridge_gateway() -> str:
    """The IPv4 address of ``docker0`` on this host."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], check=False, capture_output=True,
                         text=True).stdout.split()
    return out[3].split("/")[0] if len(out) > 3 else DEFAULT_GATEWAY
