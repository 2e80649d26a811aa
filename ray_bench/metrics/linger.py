"""The final figures of a finished run, served for a while after its driver exits.

When a run ends, its exporter writes its last exposition to a file and hands its port to
this small process (``python -m ray_bench.metrics.linger``), which serves that text on the
same address until Prometheus has stored it, then removes the run's target file (unless a new
driver of the run took it over) and exits. The halt, residue, stop and circuit alerts read
``last_over_time`` of those final values, and the dashboard's stat panels their last value in
range: one stored scrape keeps both, and a host doing many small runs (a gap-filling operator,
a benchmark) does not pile up a process, a port and a Prometheus target for each.

It ends at the first of:

- every scraper that scraped the driver (by address: both replicas of an HA pair) has scraped
  the final figures; when none had (a run shorter than a scrape interval), any one;
- no scraper has come for :data:`UNWATCHED_SEC` and none ever scraped the driver: no
  Prometheus watches this state root;
- the linger time (``execute --metrics-linger``, default 15m): the bound when a Prometheus that
  watched the run is down;
- a new driver of the run took the target over.

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
from collections.abc import Collection
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ray_bench.metrics.scrapes import SCRAPE_HEADER, joined, split
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

#: Default bound of a finished run's linger (seconds): a Prometheus that scraped the run and is
#: down (a restart, a WAL replay) has this long to come back for the final figures.
DEFAULT_LINGER_SEC = 900.0
#: How long a linger whose driver no scraper ever reached waits for a first scrape. The target
#: file is the driver's, written when the run started: Prometheus scrapes it within a discovery
#: (inotify: seconds; file_sd's refresh_interval backstop: 1m in ops/prometheus/prometheus.yml)
#: plus a scrape interval (15s there; Prometheus's default is 1m). A run shorter than that is
#: the only one that ends unscraped while a Prometheus watches.
UNWATCHED_SEC = 120.0
#: How long the linger process tries to bind the port its driver just released.
_BIND_TRIES_SEC = 10.0


def spawn(*, exposition: bytes, host: str, port: int, target: Path, linger_sec: float,
          handed_from: int | None = None, scrapers: Collection[str] = (),
          unwatched_sec: float = UNWATCHED_SEC) -> int:
    """Start the linger process; returns its pid. The text goes to ``<target>.prom``.
    ``handed_from``: the process that owns the target and hands it over (a driver at its
    end); without it the caller names the new process as the owner itself (an audit).
    ``scrapers``: the addresses Prometheus scraped the driver from; the linger ends once each
    has scraped the final figures."""
    write_atomic(text_file(target), exposition.decode("utf-8"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_bench.metrics.linger", "--host", host, "--port", str(port),
         "--target", str(target), "--seconds", str(linger_sec), "--from", str(handed_from or 0),
         "--scrapers", joined(scrapers), "--unwatched", str(unwatched_sec)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)
    return proc.pid


def serve(host: str, port: int, target: Path, seconds: float, handed_from: int = 0,
          scrapers: Collection[str] = (), unwatched_sec: float = UNWATCHED_SEC) -> int:
    me = os.getpid()
    if owner(target) not in (me, handed_from or None, None):
        # A newer owner (a resumed driver, a later audit) took the target while this process
        # was starting (seconds on a loaded host): it is not ours to serve nor to remove.
        return 0
    body = text_file(target).read_bytes()
    scraped: set[str] = set()  # the scrapers that have the final figures

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if self.headers.get(SCRAPE_HEADER) is not None:  # sent whole: Prometheus has them
                scraped.add(str(self.client_address[0]))

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
    began = time.monotonic()
    until = began + seconds
    if owner(target) not in (me, handed_from or None, None):  # a resumed driver claimed it meanwhile
        server.server_close()
        return 0
    # The target belongs to this process now: a driver that resumes the run replaces the pid.
    write_atomic(pid_file(target), str(me))
    try:
        while time.monotonic() < until:
            server.handle_request()
            if stored(scraped, scrapers) or (not scrapers and time.monotonic() - began >= unwatched_sec):
                break
            if pid_file(target).exists() and pid_file(target).read_text().strip() != str(me):
                return 0  # a new driver of this run took the target over
    finally:
        server.server_close()
    remove_target(target, only_pid=me)
    text_file(target).unlink(missing_ok=True)
    return 0


def stored(scraped: Collection[str], scrapers: Collection[str]) -> bool:
    """Whether the final figures are in every Prometheus that watched the run: each scraper of
    the driver has scraped them (any one, when the driver was never scraped)."""
    return bool(scraped) and set(scrapers) <= set(scraped)


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
    parser.add_argument("--scrapers", type=split, default=frozenset(),
                        help="comma-separated addresses that scraped the driver: end once each scraped")
    parser.add_argument("--unwatched", type=float, default=UNWATCHED_SEC,
                        help="without --scrapers: end after this long without a scrape")
    args = parser.parse_args(argv)
    return serve(args.host, args.port, args.target, args.seconds, args.handed_from, args.scrapers,
                 args.unwatched)


if __name__ == "__main__":
    raise SystemExit(main())
