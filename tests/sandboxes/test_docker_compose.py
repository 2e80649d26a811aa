"""Compose tasks on real docker through Compose v2, planned as a user plans them: the plan's cell
spec (``AttemptSpecs``) run by the cell runner, then the run's audit. Tasks are built here on the
test base image: ``main`` from the task's Dockerfile, and a ``db`` service (busybox httpd) that is
healthy only once it serves, which the agent and the verifier reach by name."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.compose_tasks import MAPPER_MAIN
from support.specs import run_on_docker
from support.suites import make_suite

from ray_bench.api import audit_run, plan_run
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.attempts import AttemptSpecs
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.audit import AuditReport, audit
from ray_bench.sandboxes.base import LABEL_RUN, ComposeSpec, SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend

pytestmark = [pytest.mark.docker]

#: The verifier's test: db answers by name and the agent saw it too.
REACHED = '[ "$(wget -q -O- http://db:8080/ping)" = pong ] && [ "$(cat /app/seen 2>/dev/null)" = pong ]'
#: What the agent does: read db's answer into /app/seen.
AGENT = "wget -q -O- http://db:8080/ping > /app/seen; cat /app/seen"


def db_service(base_image: str, *, delay: int = 2) -> dict[str, Any]:
    """busybox httpd that starts serving after ``delay`` s: healthy only then."""
    return {
        "image": base_image,
        "command": ["sh", "-c", f"sleep {delay}; mkdir -p /www && echo pong > /www/ping && httpd -f -p 8080 -h /www"],
        "healthcheck": {"test": ["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/ping"],
                        "interval": "1s", "timeout": "2s", "retries": 30},
    }


def compose_task(root: Path, name: str, base_image: str, compose: dict[str, Any] | str, *,
                 passes: str = REACHED, agent_toml: str = "") -> Path:
    """A task of ``compose`` whose verifier writes 1 when the shell test ``passes``."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(f'version = "1.0"\n[agent]\ntimeout_sec = 60.0\n{agent_toml}'
                                    '[verifier]\ntimeout_sec = 30.0\n[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Ask db for its answer.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    text = compose if isinstance(compose, str) else yaml.safe_dump(compose, sort_keys=False)
    (task / "environment" / "docker-compose.yaml").write_text(text)
    (task / "tests" / "test.sh").write_text(f"#!/bin/sh\nmkdir -p /logs/verifier\nif {passes}; then\n"
                                            "  echo 1 > /logs/verifier/reward.txt\nelse\n"
                                            "  echo 0 > /logs/verifier/reward.txt\nfi\n")
    return task


def plan_docker(tmp_path: Path, command: str, run_id: str) -> RunPaths:
    """Plan the suite under ``tmp_path/suite`` (its tasks/ already written) on docker, one arm."""
    suite, accounts = make_suite(tmp_path / "suite", tasks=[], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2}},
                                 arms=[{"name": "baseline", "role": "baseline", "command": command}])
    plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id=run_id)
    return RunPaths(tmp_path / "runs" / run_id)


def run_cell(paths: RunPaths, task: str) -> AttemptSummary:
    plan, _ = load_plan_file(paths.plan)
    cell = next(c for c in plan.cells if c.task == task)
    row = AttemptRow(attempt_id=f"{cell.id}-a1", cell_id=cell.id, task=task, task_checksum="", arm=cell.arm,
                     rep=cell.rep, seq=1, account=plan.accounts[0].name, backend="docker", epoch="e",
                     preflight=False, started_at=time.time())
    return run_on_docker(AttemptSpecs(plan, paths).of(row, cell))


def left_by_run(run_id: str) -> list[Any]:
    async def go() -> list[Any]:
        backend = DockerBackend()
        try:
            return await backend.list({LABEL_RUN: run_id})
        finally:
            await backend.close()
    return asyncio.run(go())


def test_main_and_a_healthchecked_service_run_as_one_project(tmp_path: Path, base_image: str) -> None:
    """The agent finds db healthy; a collect hook runs in db (the verifier reads what it wrote
    there over http); a fixed container_name and a host port do not stop two attempts."""
    tasks = tmp_path / "suite" / "tasks"
    task = compose_task(tasks, "with-db", base_image, {"services": {
        "main": {"depends_on": {"db": {"condition": "service_healthy"}}},
        "db": {**db_service(base_image), "container_name": "fixed-name", "ports": ["18080:8080"]},
    }}, passes=REACHED + ' && [ -n "$(wget -q -O- http://db:8080/collected)" ]')
    with (task / "task.toml").open("a") as toml:
        toml.write('[[verifier.collect]]\ncommand = "hostname > /www/collected"\nservice = "db"\n')
    run_id = f"compose-{time.time_ns()}"
    paths = plan_docker(tmp_path, AGENT, run_id)
    started = time.monotonic()
    summary = run_cell(paths, "with-db")
    assert summary.error is None, summary.error
    assert summary.agent is not None and "pong" in summary.agent.output_tail  # healthy before the agent
    assert summary.reward == 1.0
    assert [(c.exit_code, c.timed_out) for c in summary.collect] == [(0, False)]
    assert time.monotonic() - started < 60
    assert left_by_run(run_id) == []
    report = audit_run(paths.root, cleanup=False)
    assert report.clean and report.found == []


def test_a_service_that_never_gets_healthy_fails_the_attempt_and_leaves_nothing(tmp_path: Path,
                                                                                base_image: str) -> None:
    sick = db_service(base_image)
    sick["healthcheck"] = {"test": ["CMD", "false"], "interval": "1s", "retries": 2}
    compose_task(tmp_path / "suite" / "tasks", "sick-db", base_image,
                 {"services": {"main": {"depends_on": {"db": {"condition": "service_healthy"}}}, "db": sick}})
    run_id = f"compose-sick-{time.time_ns()}"
    paths = plan_docker(tmp_path, AGENT, run_id)
    summary = run_cell(paths, "sick-db")
    assert summary.reward is None and summary.error is not None
    assert summary.error.type == "TaskEnvironmentError" and summary.error.failure_class == "task"
    assert "compose up" in summary.error.message and "unhealthy" in summary.error.message
    assert left_by_run(run_id) == []


def test_a_file_that_restates_main_offline_is_one_container_without_network(tmp_path: Path,
                                                                            base_image: str) -> None:
    """Harbor's Terminal-Bench mapper's main (harbor/mappers/terminal_bench.py) with network_mode
    none: the default container, and no phase has a network (not even the agent's)."""
    # only the loopback interface: lo's line and the two header lines of /proc/net/dev
    compose_task(tmp_path / "suite" / "tasks", "restated", base_image, MAPPER_MAIN,
                 passes='[ "$(wc -l < /proc/net/dev)" -eq 3 ]')
    run_id = f"compose-restated-{time.time_ns()}"
    paths = plan_docker(tmp_path, "cat /proc/net/dev", run_id)
    plan, _ = load_plan_file(paths.plan)
    assert plan.tasks[0].compose is not None and plan.tasks[0].compose.main_only
    assert not plan.tasks[0].network
    summary = run_cell(paths, "restated")
    assert summary.error is None, summary.error
    assert summary.reward == 1.0
    assert left_by_run(run_id) == []


def test_a_phase_without_network_cuts_main_from_the_services(tmp_path: Path, base_image: str) -> None:
    """As Harbor's egress sidecar in deny-all: the agent's phase reaches no service; the verifier's
    (public) reaches db by name again."""
    compose_task(tmp_path / "suite" / "tasks", "offline-agent", base_image, {"services": {
        "main": {"depends_on": {"db": {"condition": "service_healthy"}}}, "db": db_service(base_image, delay=0)}},
        passes='[ "$(wget -q -O- http://db:8080/ping)" = pong ] && [ ! -s /app/seen ]',
        agent_toml='network_mode = "no-network"\n')
    run_id = f"compose-phases-{time.time_ns()}"
    paths = plan_docker(tmp_path, "wget -q -T 3 -O- http://db:8080/ping > /app/seen; echo rc=$?", run_id)
    summary = run_cell(paths, "offline-agent")
    assert summary.error is None, summary.error
    assert summary.agent is not None and "rc=0" not in summary.agent.output_tail
    assert summary.reward == 1.0
    assert left_by_run(run_id) == []


def test_a_project_left_behind_is_found_and_removed_by_the_audit(tmp_path: Path, base_image: str) -> None:
    """A runner that died before its delete: containers, the project's network and its named volume
    all carry the run's label, and ``audit --cleanup`` removes them."""
    env = tmp_path / "environment"
    env.mkdir()
    (env / "docker-compose.yaml").write_text(yaml.safe_dump({
        "services": {"main": {}, "db": {**db_service(base_image, delay=0), "volumes": ["data:/data"]}},
        "volumes": {"data": {}}}))
    run_id = f"compose-audit-{time.time_ns()}"

    async def go() -> tuple[AuditReport, AuditReport, list[Any]]:
        backend = DockerBackend()
        try:
            sandbox = await backend.create(SandboxSpec(labels=run_labels(run_id, "c", "c-a1"), image=base_image,
                                                       network=True, compose=ComposeSpec(env / "docker-compose.yaml")))
            seen = await audit([backend], run_id, cleanup=False, settle_sec=0)
            cleaned = await audit([backend], run_id, cleanup=True, settle_sec=0)
            after = await backend.list({LABEL_RUN: run_id})
            await sandbox.delete()  # nothing left to remove: it says so without failing
            return seen, cleaned, after
        finally:
            await backend.close()

    seen, cleaned, after = asyncio.run(go())
    assert sorted(r.kind for r in seen.found) == ["container", "container", "network", "volume"]
    assert cleaned.clean and len(cleaned.removed) == 4 and after == []


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
    task = compose_task(tmp_path / "suite" / "tasks", "allowlisted", base_image, "services:\n  main: {}\n",
                        passes='grep -q "^ok$" /app/allowed && grep -q "403 Forbidden" /app/denied '
                               '&& [ -z "$HTTPS_PROXY" ]',
                        agent_toml=f'network_mode = "allowlist"\nallowed_hosts = ["{gateway}"]\n')
    (task / "environment" / "docker-compose.yaml").unlink()  # one container: the allowlist alone
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
