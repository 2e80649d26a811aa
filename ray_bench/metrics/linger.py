"""The final figures of a finished run, served for a while after its driver exits.

When a run ends, its exporter writes its last exposition to a file and hands its port to
this small process (``python -m ray_bench.metrics.linger``), which serves that text on the
same address until the linger time is up, then removes the run's target file (unless a new
driver of the run took it over) and exits. Prometheus keeps scraping the final values, so
the dashboard's stat panels and the halt, residue and stop alerts do not go blank the moment
the driver exits.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from ray_bench.metrics.targets import pid_file, remove_target, write_atomic

#: Default linger of a finished run's target (seconds): long enough for the dashboard and
#: alerts to show how it ended, short enough that finished runs do not pile up.
DEFAULT_LINGER_SEC = 900.0
#: How long the linger process tries to bind the port its driver just released.
_BIND_TRIES_SEC = 10.0


def spawn(*, exposition: bytes, host: str, port: int, target: Path, linger_sec: float) -> int:
    """Start the linger process; returns its pid. The text goes to ``<target>.prom``."""
    text_file = target.with_suffix(".prom")
    write_atomic(text_file, exposition.decode("utf-8"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_bench.metrics.linger", "--host", host, "--port", str(port),
         "--target", str(target), "--seconds", str(linger_sec)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)
    return proc.pid


def serve(host: str, port: int, target: Path, seconds: float) -> int:
    body = target.with_suffix(".prom").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    HTTPServer.address_family = family
    deadline = time.monotonic() + _BIND_TRIES_SEC
    while True:
        try:
            server = HTTPServer((host, port), Handler)
            break
        except OSError:
            if time.monotonic() > deadline:
                remove_target(target, only_pid=os.getpid())
                target.with_suffix(".prom").unlink(missing_ok=True)
                return 1
            time.sleep(0.2)
    server.timeout = 1.0
    until = time.monotonic() + seconds
    me = os.getpid()
    # The target belongs to this process now: a driver that resumes the run replaces the pid.
    write_atomic(pid_file(target), str(me))
    try:
        while time.monotonic() < until:
            server.handle_request()
            if pid_file(target).exists() and pid_file(target).read_text().strip() != str(me):
                return 0  # a new driver of this run took the target over
    finally:
        server.server_close()
    remove_target(target, only_pid=me)
    target.with_suffix(".prom").unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=DEFAULT_LINGER_SEC)
    args = parser.parse_args(argv)
    return serve(args.host, args.port, args.target, args.seconds)


if __name__ == "__main__":
    raise SystemExit(main())
