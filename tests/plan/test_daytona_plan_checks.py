"""``plan`` against the Daytona service where it can reach it: a snapshot a task or the backend
names that does not exist is one line, exit 2, nothing written; offline (no key where plan
runs, the API down) a receipt warning says it was not checked. CPU and memory above the
per-sandbox limit are refused like disk (``test_daytona_pool.py``). A stub HTTP server plays
the API's ``GET /snapshots/{name}``: no SDK, no Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.cli.app import app
from ray_bench.errors import ConfigError
from ray_bench.runroot import RunPaths

POOL = {"vcpu": 8, "memory_gib": 64, "disk_gib": 300, "creates_per_minute": 60}
KEY = "RB_TEST_PLAN_DAYTONA_KEY"


class _Snapshots(BaseHTTPRequestHandler):
    there = {"rb-there"}
    asked: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        self.asked.append((self.path, self.headers.get("Authorization", "")))
        code, body = (200, {"name": name, "state": "active"}) if name in self.there else (
            404, {"message": f"Snapshot with name {name} not found"})
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Snapshots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Snapshots.asked.clear()
    monkeypatch.setenv("RB_TEST_KEY_A", "x")
    monkeypatch.setenv("RB_TEST_KEY_B", "x")
    monkeypatch.setenv(KEY, "plan-check-key")
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()


def _suite(tmp_path: Path, image: str, url: str, **options: Any) -> tuple[Path, Path]:
    return make_suite(tmp_path / "s", tasks=["hello-world"], backend="daytona",
                      backends={"daytona": {"image": image, "max_sandboxes": 4,
                                            "options": {"api_url": url, "api_key_env": KEY, **options}}})


def test_a_snapshot_that_does_not_exist_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, api: str
) -> None:
    suite, accounts = _suite(tmp_path, "snapshot:rb-missing", api)
    with pytest.raises(ConfigError) as info:
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    line = info.value.line()
    assert "task hello-world (arm baseline) names Daytona snapshot 'rb-missing', which does not exist" in line
    assert "\n" not in line and "plan-check-key" not in line
    assert not (tmp_path / "runs" / "p").exists()
    assert _Snapshots.asked == [("/api/snapshots/rb-missing", "Bearer plan-check-key")]


def test_the_cli_exits_2_on_a_missing_snapshot(tmp_path: Path, api: str) -> None:
    from typer.testing import CliRunner

    suite, accounts = _suite(tmp_path, "snapshot:rb-missing", api)
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(tmp_path / "runs"), "--run-id", "p"])
    assert result.exit_code == 2
    assert "rb-missing" in result.output and "does not exist" in result.output


def test_a_snapshot_that_exists_passes_and_offline_is_a_warning(tmp_path: Path, api: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _suite(tmp_path, "snapshot:rb-there", api)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    assert "not checked" not in (result.run_root / "receipt.md").read_text()
    monkeypatch.delenv(KEY)
    suite, accounts = _suite(tmp_path / "offline", "snapshot:rb-missing", api)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="q")
    receipt = (result.run_root / "receipt.md").read_text()
    assert "Daytona snapshots rb-missing not checked" in receipt and f"{KEY} is not set" in receipt


@pytest.mark.parametrize(("resources", "said"), [({"cpus": 8}, "asks 8 vCPU per sandbox; Daytona allows at most 4"),
                                                  ({"memory_mb": 16384},
                                                   "asks 16 GiB memory per sandbox; Daytona allows at most 8")])
def test_cpu_and_memory_above_the_per_sandbox_limit_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resources: dict[str, Any], said: str
) -> None:
    monkeypatch.setenv("RB_TEST_KEY_A", "x")
    monkeypatch.setenv("RB_TEST_KEY_B", "x")
    pool = {**POOL, "max_sandbox_vcpu": 4, "max_sandbox_memory_gib": 8}
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], backend="daytona",
                                 backends={"daytona": {"options": {"pool": pool}, "resources": resources}})
    with pytest.raises(ConfigError) as info:
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    assert f"task hello-world: {said}" in info.value.line() and "\n" not in info.value.line()


def test_planning_a_daytona_suite_with_a_pool_loads_no_daytona_sdk(tmp_path: Path) -> None:
    """``plan`` reads the pool (capacity, sizes, the egress allowlist) as configuration: the SDK
    (~2 s of import) is the backend's, loaded where sandboxes are created."""
    pool = {**POOL, "tier": 1}
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], backend="daytona",
                                 backends={"daytona": {"options": {"pool": pool}}})
    code = ("import sys; from pathlib import Path; from ray_bench.api import plan_run; "
            f"plan_run(suite=Path({str(suite)!r}), accounts=Path({str(accounts)!r}), "
            f"runs_dir=Path({str(tmp_path / 'runs')!r}), run_id='p'); "
            "print(sorted(m for m in sys.modules if m == 'daytona' or m.startswith('ray_bench.sandboxes.daytona.')))")
    env = {**os.environ, "RB_TEST_KEY_A": "x", "RB_TEST_KEY_B": "x"}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert RunPaths(tmp_path / "runs" / "p").plan.is_file()
