"""A real Prometheus server for tests, configured from the shipped ``ops/`` files.

The server scrapes every ray-bench exporter under a temporary state root through the same
file_sd job as ``ops/prometheus/prometheus.yml`` (only the targets path and the intervals
are rewritten: 1s scrapes and rule evaluation) and loads ``ops/prometheus/alerts.yml``, so
tests exercise the shipped config, not a copy of it.

Use the ``prometheus`` fixture (a fresh server and state root per test)::

    from support.prometheus import prometheus  # noqa: F401  (the fixture)

    @pytest.mark.prometheus
    def test_run(prometheus: PrometheusServer) -> None:
        with MetricsExporter("r1", prometheus.state_root) as exporter:
            ...
            prometheus.wait_for_target("r1")
            assert prometheus.scalar('sum(raybench_valid_rows_total{run="r1"})') == 3

or :func:`running_prometheus` directly for a longer-lived server. Without the binary the
fixture skips, except under ``CI=true`` where it fails: CI must run these tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS_PROMETHEUS = REPO_ROOT / "ops" / "prometheus"
SCRAPE_CONFIG = OPS_PROMETHEUS / "prometheus.yml"
ALERT_RULES = OPS_PROMETHEUS / "alerts.yml"
DASHBOARD = REPO_ROOT / "ops" / "grafana" / "ray-bench.json"

T = TypeVar("T")


def dashboard() -> dict[str, Any]:
    """The shipped Grafana dashboard."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_exprs(run: str | None = None, rate_interval: str = "5s") -> list[str]:
    """Every panel expression of the dashboard; with ``run``, ``$run`` filled in (and
    ``$__rate_interval`` as Grafana would for 1 s scrapes)."""
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    if run is None:
        return exprs
    return [e.replace("$run", run).replace("$__rate_interval", rate_interval) for e in exprs]


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule of the shipped rules file (recording rules: :func:`recording_rules`)."""
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def recording_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "record" in rule]


def alert_expr(name: str) -> str:
    (expr,) = [r["expr"] for r in alert_rules() if r["alert"] == name]
    return str(expr)


class PrometheusError(AssertionError):
    """Prometheus answered with an error, or a wait timed out."""


def find_binary(name: str = "prometheus") -> str | None:
    return shutil.which(name)


def require_binary(name: str = "prometheus") -> str:
    """The binary's path; skips the test without it, fails under ``CI=true``."""
    path = find_binary(name)
    if path is None:
        reason = f"{name} not found on PATH (on Debian: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI must run the prometheus tests")
        pytest.skip(reason)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(
    path: Path,
    targets_dir: Path,
    *,
    interval: str = "1s",
    rule_files: list[Path] | None = None,
) -> Path:
    """Write the shipped scrape config, pointed at ``targets_dir``, with short intervals."""
    config: dict[str, Any] = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [
        str(p) for p in (rule_files if rule_files is not None else [ALERT_RULES])
    ]
    # the runs' targets, and beside them the audits' (<state_root>/prometheus/audits)
    for job in config["scrape_configs"]:
        (sd,) = job["file_sd_configs"]
        (pattern,) = sd["files"]
        folder = Path(pattern).parent.name
        sd["files"] = [str(targets_dir.parent / folder / "*.json")]
        # inotify is the fast path; a short refresh makes discovery deterministic anyway.
        sd["refresh_interval"] = interval
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class PrometheusServer:
    """A Prometheus process this test session started, and a small HTTP API client."""

    url: str
    state_root: Path
    config_file: Path
    log_file: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def targets_dir(self) -> Path:
        return self.state_root / "prometheus" / "targets"

    # -- the HTTP API -------------------------------------------------------------------

    def get(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; returns ``data`` or raises :class:`PrometheusError`."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400/422: a bad expression, with a reason
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result list (a vector's samples; [] when empty)."""
        data = self.get("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def scalar(self, expr: str) -> float | None:
        """The value of a query returning at most one sample; ``None`` when empty."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"{expr!r} returned {len(result)} samples, expected one")
        return float(result[0]["value"][1])

    def label_values(self, label: str, match: str) -> list[str]:
        return list(self.get(f"label/{label}/values", **{"match[]": match}))

    def targets(self) -> list[dict[str, Any]]:
        return list(self.get("targets", state="active")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("alerts")["alerts"])

    # -- waiting ------------------------------------------------------------------------

    def wait_for(
        self, probe: Callable[[], T | None], what: str, timeout: float = 30.0, every: float = 0.2
    ) -> T:
        """Poll ``probe`` until it returns something truthy; fail with ``what`` on timeout."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = probe()
            except PrometheusError as exc:
                last_error, value = exc, None
            if value:
                return value
            time.sleep(every)
        detail = f" (last error: {last_error})" if last_error else ""
        raise PrometheusError(f"timed out after {timeout}s waiting for {what}{detail}")

    def wait_for_target(self, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the file_sd target of ``run_id`` is discovered and scraped healthy."""

        def probe() -> dict[str, Any] | None:
            for target in self.targets():
                if target["labels"].get("run") == run_id and target["health"] == "up":
                    return target
            return None

        return self.wait_for(probe, f"target of run {run_id} up", timeout)

    def wait_for_target_gone(self, run_id: str, timeout: float = 30.0) -> None:
        def probe() -> bool:
            return all(t["labels"].get("run") != run_id for t in self.targets())

        self.wait_for(probe, f"target of run {run_id} withdrawn", timeout)

    def wait_for_value(self, expr: str, expected: float, timeout: float = 30.0) -> float:
        """Wait until ``expr`` evaluates to the single value ``expected``."""
        self.wait_for(lambda: self.scalar(expr) == expected, f"{expr} == {expected}", timeout)
        return expected

    def wait_for_data(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        return self.wait_for(lambda: self.query(expr), f"data from {expr}", timeout)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@contextlib.contextmanager
def running_prometheus(
    workdir: Path | None = None,
    *,
    state_root: Path | None = None,
    binary: str | None = None,
    interval: str = "1s",
    rule_files: list[Path] | None = None,
    ready_timeout: float = 30.0,
) -> Iterator[PrometheusServer]:
    """Start Prometheus on a free loopback port; stop it (and only it) on exit.

    ``state_root`` defaults to ``<workdir>/state``: give the same directory to the
    exporter (or to ``ray-bench execute``) so its file_sd target is found.
    """
    binary = binary or require_binary()
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prom-")))
        state_root = state_root or workdir / "state"
        targets_dir = state_root / "prometheus" / "targets"
        targets_dir.mkdir(parents=True, exist_ok=True)
        config = write_config(
            workdir / "prometheus.yml", targets_dir, interval=interval, rule_files=rule_files
        )
        server = _start(binary, workdir, config, state_root, ready_timeout)
        try:
            yield server
        finally:
            server.stop()


def _start(
    binary: str, workdir: Path, config: Path, state_root: Path, ready_timeout: float
) -> PrometheusServer:
    # A free port can be taken between the probe and the bind; retry on a fresh one.
    failure = ""
    for attempt in range(3):
        port = free_port()
        log_file = workdir / f"prometheus-{attempt}.log"
        with log_file.open("wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    f"--storage.tsdb.path={workdir / f'tsdb-{attempt}'}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )
        server = PrometheusServer(
            url=f"http://127.0.0.1:{port}",
            state_root=state_root,
            config_file=config,
            log_file=log_file,
            process=process,
        )
        if _wait_ready(server, ready_timeout):
            return server
        server.stop()
        failure = server.log_tail()
        if "address already in use" not in failure:
            break
    raise PrometheusError(f"prometheus did not become ready:\n{failure}")


def _wait_ready(server: PrometheusServer, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    return False


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    """A fresh Prometheus scraping ``<tmp_path>/state``; see the module docstring."""
    with running_prometheus(tmp_path) as server:
        yield server
