"""Backend capabilities: one record per backend, importable without any SDK, and the plan asks
the capability, never the backend's name (issue #30, step 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench import sandboxes
from ray_bench.errors import UserInputError
from ray_bench.plan.agents import closed_backends
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.sandboxes import capabilities as caps


def test_every_builtin_backend_declares_its_capabilities() -> None:
    assert set(caps.CAPABILITIES) == set(sandboxes._BUILTIN)
    docker, daytona, local = (caps.capabilities(n) for n in ("docker", "daytona", "local"))
    assert docker.users and docker.network_per_phase and docker.agent_layer and docker.host_admission
    assert not docker.disk_limit and not daytona.host_admission
    assert daytona.disk_limit and daytona.isolated_network and not daytona.users and not daytona.network_per_phase
    assert not local.image and not local.isolated_network and not local.memory_limit
    assert docker.node_resource == caps.DOCKER_RESOURCE and daytona.node_resource is None
    assert not any(c.allowlist or c.gpus for c in caps.CAPABILITIES.values())  # none enforces one today
    assert caps.capabilities("no-such-backend") == caps.UNDECLARED == caps.BackendCapabilities()
    assert closed_backends({"docker", "daytona", "local"}) == ["daytona", "docker"]


def test_the_registry_imports_no_backend_sdk() -> None:
    code = ("import sys, ray_bench.sandboxes.capabilities; "
            "print(sorted(m for m in ('docker', 'daytona', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def _user_task_suite(tmp: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["hello-world"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2}})
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
