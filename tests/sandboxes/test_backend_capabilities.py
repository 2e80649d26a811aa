"""Backend capabilities: one record per backend, importable without any SDK, and the plan asks
the capability, never the backend's name (issue #30, step 5)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench import sandboxes
from ray_bench.cli.quickstart import example_dir, prepare
from ray_bench.errors import UserInputError
from ray_bench.exports.harbor import environment_of
from ray_bench.models.plan import Plan
from ray_bench.plan.agents import closed_backends
from ray_bench.plan.backends import create_rates
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.sandboxes import capabilities as caps
from ray_bench.sandboxes.local import LocalBackend
from ray_bench.sandboxes.supervisor import docker_url_of, uses_docker
from ray_bench.scheduler.builds import build_backend, build_targets


def test_every_builtin_backend_declares_its_capabilities() -> None:
    assert set(caps.CAPABILITIES) == set(caps.BUILTIN)
    # each entry's module exists (found, not imported: the Daytona SDK's import costs seconds)
    assert all(importlib.util.find_spec(b.module) is not None for b in caps.BUILTIN.values())
    assert isinstance(sandboxes.make_backend("local"), LocalBackend)  # local.py registers itself
    docker, daytona, local = (caps.capabilities(n) for n in ("docker", "daytona", "local"))
    assert docker.users and docker.network_per_phase and docker.agent_layer and docker.host_admission
    assert not docker.disk_limit and not daytona.host_admission
    assert daytona.disk_limit and daytona.isolated_network and not daytona.users and daytona.network_per_phase
    assert not local.image and not local.isolated_network and not local.memory_limit
    assert docker.node_resource == caps.DOCKER_RESOURCE and daytona.node_resource is None
    assert not any(c.gpus for c in caps.CAPABILITIES.values())
    # docker alone enforces an allowlist (its egress proxy) and runs compose projects
    assert caps.having(caps.BUILTIN, lambda c: c.allowlist) == ["docker"]
    assert caps.having(caps.BUILTIN, lambda c: c.compose) == ["docker"]
    assert caps.capabilities("no-such-backend") == caps.UNDECLARED == caps.BackendCapabilities()
    assert closed_backends({"docker", "daytona", "local"}) == ["daytona", "docker"]


def test_the_registry_imports_no_backend_sdk() -> None:
    code = ("import sys, ray_bench.sandboxes.capabilities; "
            "print(sorted(m for m in ('docker', 'daytona', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def _user_task_suite(tmp: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["hello-world"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2, "image": "debian:bookworm-slim"}})
    toml = tmp / "tasks" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nuser = "agent"\n'))
    return suite, accounts


def test_a_plan_is_refused_by_what_its_backend_cannot_enforce(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _user_task_suite(tmp_path / "a")
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert [t.id for t in plan.tasks] == ["hello-world"]  # docker runs a command as another user

    # The same backend name without the capability: refused, with the message users see.
    monkeypatch.setitem(caps.CAPABILITIES, "docker", caps.BackendCapabilities(isolated_network=True, image=True))
    suite, accounts = _user_task_suite(tmp_path / "b")
    with pytest.raises(UserInputError) as refused:
        compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert "agent.user = 'agent'; backend docker cannot run a command as another user" in str(refused.value)


def _offline_verifier_suite(tmp: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["hello-world"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2, "image": "debian:bookworm-slim"}})
    toml = tmp / "tasks" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "no-network"\n'))
    return suite, accounts


def test_a_task_whose_phases_differ_in_network_needs_network_per_phase(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _offline_verifier_suite(tmp_path / "a")
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert [t.id for t in plan.tasks] == ["hello-world"]  # docker disconnects the verifier

    without = caps.BackendCapabilities(users=True, isolated_network=True, image=True, host_admission=True)
    monkeypatch.setitem(caps.CAPABILITIES, "docker", without)
    suite, accounts = _offline_verifier_suite(tmp_path / "b")
    with pytest.raises(UserInputError) as refused:
        compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert "its phases differ in network access; backend docker fixes the network at create" in str(refused.value)


POOL = {"vcpu": 8, "memory_gib": 64, "disk_gib": 300, "creates_per_minute": 30}


def _daytona_plan(tmp: Path, daytona: dict[str, object]) -> Plan:
    suite, accounts = make_suite(tmp, tasks=["hello-world"], backend="daytona", backends={"daytona": daytona},
                                 preflight_cells=0)
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))


def test_the_pool_the_rate_and_the_build_phase_follow_the_capabilities(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    daytona = {"image": "busybox:1.36", "options": {"pool": POOL}, "resources": {"cpus": 2}}
    plan = _daytona_plan(tmp_path / "a", daytona)
    assert plan.capacity.backend_pools == {"daytona": 4}  # 8 vCPU / 2
    assert create_rates(plan) == {"daytona": 30}
    assert build_backend(plan) == "daytona" and len(build_targets(plan)) == 1
    assert environment_of("daytona") == {"type": "daytona"}

    # The same backend name without them: no pool binds (the accounts do), no create pacing,
    # no build phase, and Harbor is told it has no environment of its own.
    monkeypatch.setitem(caps.CAPABILITIES, "daytona", caps.BackendCapabilities(isolated_network=True, image=True))
    plan = _daytona_plan(tmp_path / "b", daytona)
    assert plan.capacity.backend_pools == {"daytona": 6}  # bounded by the accounts: 3 + 3
    assert create_rates(plan) == {}
    assert build_backend(plan) is None and build_targets(plan) == []
    assert environment_of("daytona") == {"type": None, "import_path": "ray_bench.sandboxes.daytona"}


def test_the_container_lister_follows_the_capability(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], backend="docker", preflight_cells=0,
                                 backends={"docker": {"max_sandboxes": 2, "image": "debian:bookworm-slim",
                                                        "options": {"base_url": "unix:///x.sock"}}})
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert uses_docker(plan) and docker_url_of(plan) == "unix:///x.sock"
    monkeypatch.setitem(caps.CAPABILITIES, "docker", caps.BackendCapabilities(image=True, host_admission=True))
    assert not uses_docker(plan) and docker_url_of(plan) is None


def test_quickstart_builds_a_local_image_only_for_a_backend_with_local_images(tmp_path: Path) -> None:
    suite, _ = prepare(tmp_path / "d", "daytona")  # no daemon is asked: Daytona's images are remote
    data = yaml.safe_load(suite.read_text())
    assert data["backend"] == "daytona" and "options" not in data["backends"]["daytona"]
    suite, _ = prepare(tmp_path / "l", "local")
    assert suite.read_text() == (example_dir() / "suite.yaml").read_text()


def test_the_pool_knows_which_node_resource_each_backend_needs() -> None:
    assert caps.NODE_RESOURCES == (caps.DOCKER_RESOURCE,)
    assert caps.having(["local", "docker", "daytona", "nope"], lambda c: c.image) == ["daytona", "docker"]
