"""The final figures of a finished run, served for a while after its driver exits.

When a run ends, its exporter writes its last exposition to a file and hands its port to
this small process (``python -m ray_bench.metrics.linger``), which serves that text on the
same address until the linger time is up, then removes the run's target file (unless a new
driver of the run took it over) and exits. Prometheus keeps scraping the final values, so
the dashboard's stat panels and the halt, residue and stop alerts do not go blank the moment
the driver exits.

``ray-bench audit`` of a run whose driver has gone uses the same process to publish what it
found (:func:`publish_audit`): the residue count and the audit's time, so that
``RayBenchSandboxResidue`` follows the newest audit instead of the last count a driver
reported hours before.
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

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ray_bench.metrics.targets import (
    advertised,
    audit_target_file,
    host_file,
    hostport,
    owner,
    pid_file,
    remove_target,
    target_file,
    text_file,
    write_atomic,
    write_target,
)
from ray_bench.runroot import pid_alive

#: Default linger of a finished run's target (seconds): long enough for the dashboard and
#: alerts to show how it ended, short enough that finished runs do not pile up.
DEFAULT_LINGER_SEC = 900.0
#: How long the linger process tries to bind the port its driver just released.
_BIND_TRIES_SEC = 10.0


def spawn(*, exposition: bytes, host: str, port: int, target: Path, linger_sec: float,
          handed_from: int | None = None) -> int:
    """Start the linger process; returns its pid. The text goes to ``<target>.prom``.
    ``handed_from``: the process that owns the target and hands it over (a driver at its
    end); without it the caller names the new process as the owner itself (an audit)."""
    write_atomic(text_file(target), exposition.decode("utf-8"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_bench.metrics.linger", "--host", host, "--port", str(port),
         "--target", str(target), "--seconds", str(linger_sec), "--from", str(handed_from or 0)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)
    return proc.pid


def serve(host: str, port: int, target: Path, seconds: float, handed_from: int = 0) -> int:
    me = os.getpid()
    if owner(target) not in (me, handed_from or None, None):
        # A newer owner (a resumed driver, a later audit) took the target while this process
        # was starting (seconds on a loaded host): it is not ours to serve nor to remove.
        return 0
    body = text_file(target).read_bytes()

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
                text_file(target).unlink(missing_ok=True)
                return 1
            time.sleep(0.2)
    server.timeout = 1.0
    until = time.monotonic() + seconds
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
    text_file(target).unlink(missing_ok=True)
    return 0


def publish_audit(state_root: str | os.PathLike[str], run_id: str, *, residue: int, at: float,
                  linger_sec: float = DEFAULT_LINGER_SEC) -> int | None:
    """Serve a standalone audit's count of the run's residue (and when it ran) for
    ``linger_sec``, through its own target under ``<state_root>/prometheus/audits/`` (the
    ``ray-bench-audit`` scrape job: not the run's target, whose ``up`` says whether the
    driver lives); returns the serving process's pid.

    Nothing is published (``None``) while the run's driver serves its metrics (its own
    end-of-run audit is what counts then), or when no exporter of the run ever ran on this
    state root (there is no series to correct)."""
    run_target = target_file(state_root, run_id)
    pid = owner(run_target)
    if pid is not None and pid_alive(pid) and not text_file(run_target).exists():
        return None
    if not host_file(run_target).exists():
        return None
    host = host_file(run_target).read_text().strip() or "127.0.0.1"
    registry = CollectorRegistry()
    Gauge("raybench_audit_residue_sandboxes", "Sandboxes the newest audit found and could not remove.",
          ["run"], registry=registry).labels(run_id).set(residue)
    Gauge("raybench_audit_timestamp_seconds", "When the newest audit ran (unix time).", ["run"],
          registry=registry).labels(run_id).set(at)
    port = _free_port(host)
    target = audit_target_file(state_root, run_id)
    linger = spawn(exposition=generate_latest(registry), host=host, port=port, target=target,
                   linger_sec=linger_sec)
    # An earlier audit's server of this run sees the pid change and exits.
    write_target(target, hostport(advertised(host), port), run_id, linger)
    return linger


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=DEFAULT_LINGER_SEC)
    parser.add_argument("--from", dest="handed_from", type=int, default=0,
                        help="the pid that hands the target over (0: the spawner named this process)")
    args = parser.parse_args(argv)
    return serve(args.host, args.port, args.target, args.seconds, args.handed_from)


if __name__ == "__main__":
    raise SystemExit(main())
