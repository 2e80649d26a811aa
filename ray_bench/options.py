"""Options of `execute` checked before anything starts: each bad one is one line and exit 2,
not a traceback from the layer that would have tripped over it later."""

from __future__ import annotations

import socket
from pathlib import Path

from ray_bench.errors import UserInputError

#: Seconds to wait for a Ray head's GCS port before calling it unreachable; ray.init itself
#: retries for minutes.
CONNECT_TIMEOUT_SEC = 10.0


def check_port(port: int, option: str = "--metrics-port") -> None:
    if not 0 <= port <= 65535:
        raise UserInputError(f"port {port} is out of range", where=option, fix="use 0 (any free port) to 65535")


def check_state_root(state_root: Path, option: str = "--state-root") -> None:
    for parent in (state_root, *state_root.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserInputError(f"{parent} is not a directory", where=option,
                                     fix="name a directory (it is created if missing)")
            return


def check_ray_address(address: str | None) -> None:
    """A ``host:port`` address must accept a TCP connection; ``auto``, ``local`` and
    ``ray://`` (client) addresses are left to Ray."""
    if not address or address in ("auto", "local") or "://" in address:
        return
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise UserInputError(f"{address!r} is not host:port", where="--address",
                             fix="pass the head node's GCS address, e.g. 10.0.0.5:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=CONNECT_TIMEOUT_SEC):
            pass
    except OSError as exc:
        raise UserInputError(f"cannot reach a Ray head at {address}: {exc.strerror or exc}", where="--address",
                             fix="start the cluster (`ray start --head`) or check the address") from None
