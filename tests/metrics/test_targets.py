"""file_sd targets: a dead server's target is pruned, a live one kept; a finished run's final
figures linger on its port for the time asked, then the target goes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from support.prometheus import SCRAPE_CONFIG, alert_rules

from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.linger import publish_audit, spawn
from ray_bench.metrics.scrapes import SCRAPE_HEADER
from ray_bench.metrics.targets import (
    DEAD_TARGET_KEEP_SEC,
    audit_target_file,
    dead_file,
    owner,
    pid_file,
    prune_stale_targets,
    target_file,
    write_target,
)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_prune_removes_targets_of_dead_servers_only_once_their_alert_could_fire(tmp_path: Path) -> None:
    write_target(target_file(tmp_path, "dead"), "127.0.0.1:1", "dead", _dead_pid())
    write_target(target_file(tmp_path, "alive"), "127.0.0.1:2", "alive", os.getpid())
    foreign = target_file(tmp_path, "foreign")
    foreign.write_text("[]")  # no pid file: not ours to judge
    audit = audit_target_file(tmp_path, "audited")
    write_target(audit, "127.0.0.1:3", "audited", _dead_pid())  # an audit's server that died
    t0 = 1_700_000_000.0
    # Found dead: kept (its `up == 0` is what pages RayBenchDriverDown), the finding noted.
    assert prune_stale_targets(tmp_path, now=t0) == []
    assert target_file(tmp_path, "dead").exists() and dead_file(target_file(tmp_path, "dead")).exists()
    assert not audit.exists() and not pid_file(audit).exists()  # no alert reads an audit server's `up`
    # Later calls count from the first finding, not from themselves.
    assert prune_stale_targets(tmp_path, now=t0 + DEAD_TARGET_KEEP_SEC - 1) == []
    assert prune_stale_targets(tmp_path, now=t0 + DEAD_TARGET_KEEP_SEC) == ["dead"]  # only runs are reported
    dead = target_file(tmp_path, "dead")
    assert not dead.exists() and not pid_file(dead).exists() and not dead_file(dead).exists()
    assert target_file(tmp_path, "alive").exists() and foreign.exists()


def test_the_keep_outlasts_the_driver_down_alert() -> None:
    # The alert's `for:` plus a scrape interval and a rule evaluation of the shipped config, and
    # Alertmanager's default group_wait (30 s), all fit in the keep.
    (rule,) = [r for r in alert_rules() if r["alert"] == "RayBenchDriverDown"]
    scrape = yaml.safe_load(SCRAPE_CONFIG.read_text())["global"]
    fired = (_seconds(rule["for"]) + _seconds(scrape["scrape_interval"]) + _seconds(scrape["evaluation_interval"])
             + 30)
    assert fired < DEAD_TARGET_KEEP_SEC


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60}[duration[-1]]


def test_a_dead_target_goes_at_once_for_the_run_named(tmp_path: Path) -> None:
    # `ray-bench audit runs/X` of that run (its operator is on it), or a resume of X replacing it.
    for run in ("x", "y"):
        write_target(target_file(tmp_path, run), "127.0.0.1:1", run, _dead_pid())
    assert prune_stale_targets(tmp_path, over=("x",)) == ["x"]
    assert target_file(tmp_path, "y").exists()


def test_a_new_owner_clears_the_last_ones_death(tmp_path: Path) -> None:
    target = target_file(tmp_path, "r")
    write_target(target, "127.0.0.1:1", "r", _dead_pid())
    prune_stale_targets(tmp_path, now=1.0)
    write_target(target, "127.0.0.1:2", "r", os.getpid())  # a linger, or a resumed driver
    assert not dead_file(target).exists()


def test_a_starting_exporter_keeps_a_dead_run_until_its_alert_could_fire(tmp_path: Path) -> None:
    write_target(target_file(tmp_path, "dead"), "127.0.0.1:1", "dead", _dead_pid())
    with MetricsExporter("new", tmp_path):
        assert target_file(tmp_path, "dead").exists()
    dead_file(target_file(tmp_path, "dead")).write_text(repr(time.time() - DEAD_TARGET_KEEP_SEC))
    with MetricsExporter("newer", tmp_path):
        assert not target_file(tmp_path, "dead").exists()


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _until(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_final_figures_linger_then_the_target_goes(tmp_path: Path) -> None:
    exporter = MetricsExporter("done", tmp_path, arms=["baseline"])
    exporter.start()
    url, target = exporter.url, exporter.target_file
    exporter.set_cells({"valid": 3})
    exporter.set_finished()
    exporter.stop(linger_sec=4.0)
    # the same address now serves the final figures, from another process
    assert _until(lambda: (_get(url) or "").find('raybench_run_finished{run="done"} 1.0') >= 0, 20)
    assert target.exists()
    assert _until(lambda: owner(target) not in (None, os.getpid()), 10)
    # then the linger ends and withdraws the target
    assert _until(lambda: not target.exists(), 30)
    assert _until(lambda: _get(url) is None, 10)


def _scrape(url: str, source: str = "127.0.0.1") -> str | None:
    """A GET as Prometheus sends it (its scrape-timeout header), from ``source``."""
    address = url.split("/")[2]
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=2, source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers={SCRAPE_HEADER: "10"})
        return conn.getresponse().read().decode()
    except OSError:
        return None
    finally:
        conn.close()


def _lingering(tmp_path: Path, scrapers: tuple[str, ...]) -> tuple[str, Path]:
    """A finished run's exporter, scraped from ``scrapers``, handed to its linger (60 s)."""
    exporter = MetricsExporter("done", tmp_path, arms=["baseline"])
    exporter.start()
    url, target = exporter.url, exporter.target_file
    for source in scrapers:
        assert _scrape(url, source) is not None
    exporter.set_finished()
    exporter.stop(linger_sec=60.0)
    assert _until(lambda: owner(target) not in (None, os.getpid()), 20)
    return url, target


def test_a_linger_ends_once_prometheus_has_scraped_the_final_figures(tmp_path: Path) -> None:
    url, target = _lingering(tmp_path, ("127.0.0.1",))
    # an operator's GET (no scrape header) is served and is not Prometheus storing them
    assert 'raybench_run_finished{run="done"} 1.0' in (_get(url) or "")
    time.sleep(1.5)
    assert target.exists()
    assert 'raybench_run_finished{run="done"} 1.0' in (_scrape(url) or "")
    assert _until(lambda: not target.exists(), 10)  # not the 60 s asked
    assert _until(lambda: _get(url) is None, 10)


def test_a_linger_waits_for_each_scraper_of_the_driver(tmp_path: Path) -> None:
    # the two replicas of a Prometheus HA pair, each from its own address
    url, target = _lingering(tmp_path, ("127.0.0.1", "127.0.0.2"))
    assert _scrape(url, "127.0.0.1") is not None
    time.sleep(1.5)
    assert target.exists() and _get(url) is not None
    assert _scrape(url, "127.0.0.2") is not None
    assert _until(lambda: not target.exists(), 10)


def test_a_linger_nobody_scrapes_ends_when_no_prometheus_can_be_watching(tmp_path: Path) -> None:
    target = target_file(tmp_path, "unwatched")
    host = "127.0.0.1"
    port = _free_port()
    pid = spawn(exposition=b"raybench_run_finished 1\n", host=host, port=port, target=target,
                linger_sec=60.0, unwatched_sec=1.0)
    write_target(target, f"{host}:{port}", "unwatched", pid)
    assert _until(lambda: _get(f"http://{host}:{port}/metrics") is not None, 20)
    assert _until(lambda: not target.exists(), 15)  # not the 60 s asked


def test_a_resumed_run_retires_its_last_sessions_linger_and_takes_its_fixed_port(tmp_path: Path) -> None:
    port = _free_port()
    first = MetricsExporter("resumed", tmp_path, port=port)
    first.start()
    first.set_finished()
    first.stop(linger_sec=60.0)
    target = first.target_file
    assert _until(lambda: owner(target) not in (None, os.getpid()), 20)
    lingering = owner(target)
    assert 'raybench_run_finished{run="resumed"} 1.0' in (_get(first.url) or "")
    began = time.monotonic()
    with MetricsExporter("resumed", tmp_path, port=port) as second:  # the same port: the linger gave it up
        assert time.monotonic() - began < 10
        assert owner(target) == os.getpid() and lingering is not None
        assert 'raybench_run_finished{run="resumed"} 0.0' in (_get(second.url) or "")
    assert not target.exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _served(target: Path) -> str:
    address = json.loads(target.read_text())[0]["targets"][0]
    return _get(f"http://{address}/metrics") or ""


def test_an_audit_publishes_its_count_and_time_beside_the_runs_target(tmp_path: Path) -> None:
    """The issue's case: the end-of-run audit left 2 sandboxes, `audit --cleanup` removed
    them later. Its clean count and time are served through a target of their own (the
    ray-bench-audit job), so RayBenchSandboxResidue follows the newest audit
    (ops/prometheus/alerts_test.yml) and the run's own target is left as it was."""
    exporter = MetricsExporter("left", tmp_path, arms=["baseline"])
    exporter.start()
    run_target = exporter.target_file
    exporter.lasting.audit(2, 1000.0)
    exporter.set_finished()
    exporter.stop(linger_sec=30.0)
    assert _until(lambda: 'raybench_audit_residue_sandboxes{run="left"} 2.0' in _served(run_target), 20)
    lingering = owner(run_target)

    pid = publish_audit(tmp_path, "left", residue=0, at=2000.0, linger_sec=4.0)
    target = audit_target_file(tmp_path, "left")
    assert pid is not None and owner(target) == pid and owner(run_target) == lingering
    assert json.loads(target.read_text())[0]["labels"] == {"run": "left"}
    assert _until(lambda: 'raybench_audit_timestamp_seconds{run="left"} 2000.0' in _served(target), 20)
    assert 'raybench_audit_residue_sandboxes{run="left"} 0.0' in _served(target)
    assert _until(lambda: not target.exists(), 30)  # its server ends; its target goes

    # a second audit replaces the first one's server
    first = publish_audit(tmp_path, "left", residue=1, at=3000.0, linger_sec=30.0)
    second = publish_audit(tmp_path, "left", residue=0, at=3001.0, linger_sec=4.0)
    assert first is not None and second is not None and owner(target) == second
    assert _until(lambda: 'raybench_audit_timestamp_seconds{run="left"} 3001.0' in _served(target), 20)
    assert _until(lambda: not target.exists(), 30)


def test_an_audit_publishes_nothing_while_the_driver_serves_or_for_a_run_never_exported(
        tmp_path: Path) -> None:
    assert publish_audit(tmp_path, "never", residue=0, at=1.0) is None
    assert not audit_target_file(tmp_path, "never").exists()
    with MetricsExporter("live", tmp_path):
        assert publish_audit(tmp_path, "live", residue=0, at=1.0) is None
        assert not audit_target_file(tmp_path, "live").exists()


def test_an_audit_of_a_dead_drivers_run_publishes(tmp_path: Path) -> None:
    with MetricsExporter("killed", tmp_path) as exporter:
        run_target = exporter.target_file
    write_target(run_target, "127.0.0.1:1", "killed", _dead_pid())  # what a SIGKILL leaves
    pid = publish_audit(tmp_path, "killed", residue=1, at=3000.0, linger_sec=4.0)
    target = audit_target_file(tmp_path, "killed")
    assert pid is not None and owner(target) == pid
    assert _until(lambda: 'raybench_audit_residue_sandboxes{run="killed"} 1.0' in _served(target), 20)
    assert _until(lambda: not target.exists(), 30)
