"""Compose tasks on real docker through Compose v2, planned as a user plans them, then the run's
audit. Tasks are built here on the test base image: ``main`` from the task's Dockerfile, and a
``db`` service (busybox httpd) that is healthy only once it serves, which the agent and the
verifier reach by name."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.compose_tasks import (
    AGENT,
    MAPPER_MAIN,
    REACHED,
    compose_task,
    db_service,
    left_by_run,
    plan_docker,
    run_cell,
)
from support.services import require_service

from ray_bench.api import audit_run
from ray_bench.errors import SandboxUnavailableError
from ray_bench.plan.store import load_plan_file
from ray_bench.sandboxes.audit import AuditReport, audit
from ray_bench.sandboxes.base import LABEL_RUN, ComposeSpec, SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend
from ray_bench.sandboxes.docker.compose import compose_command

pytestmark = [pytest.mark.docker]


@pytest.fixture(autouse=True)
def compose_v2(docker_client: Any) -> None:
    """Docker Compose v2 (.ci/run installs it)."""
    try:
        compose_command()
    except SandboxUnavailableError as exc:
        require_service("docker compose v2", False, str(exc))


def test_main_and_a_healthchecked_service_run_as_one_project(tmp_path: Path, base_image: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent finds db healthy; a collect hook runs in db (the verifier reads what it wrote
    there over http); a fixed container_name and a host port do not stop two attempts; the
    file cannot interpolate a host variable (a credential) into a container, only what the task's
    [environment] env names, under Harbor's infrastructure variables."""
    monkeypatch.setenv("RB_COMPOSE_SECRET", "rb-canary-9f3e")
    tasks = tmp_path / "suite" / "tasks"
    task = compose_task(tasks, "with-db", base_image, {"services": {
        "main": {"depends_on": {"db": {"condition": "service_healthy"}},
                 "environment": {"LEAK": "${RB_COMPOSE_SECRET:-unset}", "GREETING": "${TASK_GREETING:-unset}",
                                 "INFRA": "${MAIN_IMAGE_NAME:-unset}"}},
        "db": {**db_service(base_image), "container_name": "fixed-name", "ports": ["18080:8080"]},
    }}, passes=REACHED + ' && [ -n "$(wget -q -O- http://db:8080/collected)" ]')
    with (task / "task.toml").open("a") as toml:
        toml.write('[[verifier.collect]]\ncommand = "hostname > /www/collected"\nservice = "db"\n')
        # Harbor hands the task's env to Compose; its own infrastructure variables win
        toml.write('[environment.env]\nTASK_GREETING = "hello"\nMAIN_IMAGE_NAME = "not-this"\n')
    run_id = f"compose-{time.time_ns()}"
    paths = plan_docker(tmp_path, AGENT + '; echo "leak=$LEAK greeting=$GREETING infra=$INFRA"', run_id)
    started = time.monotonic()
    summary = run_cell(paths, "with-db")
    assert summary.error is None, summary.error
    assert summary.agent is not None and "pong" in summary.agent.output_tail  # healthy before the agent
    assert "leak=unset greeting=hello infra=" in summary.agent.output_tail
    infra = summary.agent.output_tail.split("infra=", 1)[1].split()[0]
    assert infra not in ("not-this", "unset")  # the task's image, as Compose got it from ray-bench
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


def test_a_service_whose_build_fails_is_a_classified_failed_attempt(tmp_path: Path, base_image: str,
                                                                    docker_client: Any) -> None:
    """What only a build can tell (here a RUN that fails) fails the attempt with its class, as a
    task Dockerfile's failed build does, and leaves nothing."""
    task = compose_task(tmp_path / "suite" / "tasks", "built", base_image, {"services": {
        "main": {"depends_on": ["fine", "broken"]},
        "fine": {"build": "./fine", "command": ["sleep", "300"]},
        "broken": {"build": "./broken", "command": ["sleep", "300"]}}})
    for name, run in (("fine", "true"), ("broken", "false")):
        (task / "environment" / name).mkdir()
        (task / "environment" / name / "Dockerfile").write_text(f"FROM {base_image}\nRUN {run}\n")
    run_id = f"compose-build-{time.time_ns()}"
    paths = plan_docker(tmp_path, AGENT, run_id)
    summary = run_cell(paths, "built")
    assert summary.reward is None and summary.error is not None
    assert summary.error.type == "SandboxCreateError" and summary.error.failure_class == "stack"
    assert "docker compose up" in summary.error.message
    assert left_by_run(run_id) == []
