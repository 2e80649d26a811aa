"""What a task asks of a run: per-phase network, backend refusals, env templates, the MCP
config file and multi-step rewards."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_bench.config.tasks import load_task
from ray_bench.models.task import MultiStepRewardStrategy, NetworkMode
from ray_bench.tasks.envvars import MissingHostVar, resolve_env, template_names
from ray_bench.tasks.mcp import task_mcp_servers
from ray_bench.tasks.network import all_policies, needs_network, phase_network, varies
from ray_bench.tasks.rewards import below_min, combine
from ray_bench.tasks.support import notices, refusals

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(("rel", "needle"), [
    ("refused/gpu-training", "asks for 1 GPU(s) of H100/A100"),
    ("refused/windows-task", "os = 'windows'"),
    ("refused/separate-verifier", "separate verifier container"),
    ("refused/tpu-task", "TPU (v6e 2x4)"),
    ("refused/continuous-verifier", "continuous is enabled"),
])
def test_what_no_backend_here_gives_is_refused_with_a_reason(rel: str, needle: str) -> None:
    task = load_task(CORPUS / rel)
    for backend in ("docker", "daytona", "local"):
        reasons = refusals(task, backend)
        assert any(needle in r for r in reasons), (backend, reasons)


def test_a_compose_project_runs_on_docker_only_and_says_why_elsewhere() -> None:
    task = load_task(CORPUS / "refused/compose-sidecar")
    assert task.compose is not None and task.compose.services == ("main", "db") and not task.compose.main_only
    assert refusals(task, "docker") == []  # its [[verifier.collect]] in db too
    assert any("runs as a compose project (main, db)" in n for n in notices(task, "docker"))
    for backend in ("daytona", "local"):
        reasons = refusals(task, backend)
        assert any("compose project (main, db)" in r and "Docker-in-Docker" in r for r in reasons), reasons
        assert any("collect runs in compose service 'db'" in r for r in reasons), reasons


def test_an_allowlist_runs_on_docker_and_elsewhere_the_hint_can_be_followed() -> None:
    task = load_task(CORPUS / "harbor-examples/hello-allowlist")
    assert refusals(task, "docker") == []
    assert any("allowlist (agent) is enforced through an HTTP(S) proxy" in n for n in notices(task, "docker"))
    for backend in ("daytona", "local"):
        reasons = [r for r in refusals(task, backend) if "allowlist" in r]
        assert len(reasons) == 1 and "(api.anthropic.com, *.pypi.org, 10.0.0.0/8)" in reasons[0], reasons
        assert f"backend {backend} cannot enforce one: run it on docker" in reasons[0]
    # the task's allowlist is its agent's phase: an arm that opens that phase leaves it unused
    assert [p for p, pol in all_policies(task.config) if pol.mode == NetworkMode.ALLOWLIST] == ["agent"]
    assert "network: public" in reasons[0]
    assert not [r for r in refusals(task, "local", agent_online=True) if "allowlist" in r]


def test_users_and_network_changes_need_docker() -> None:
    users = load_task(CORPUS / "harbor-examples/hello-users")
    phases = load_task(CORPUS / "harbor-examples/hello-network-phases")
    assert refusals(users, "docker") == [] and refusals(phases, "docker") == []
    assert any("agent.user = 'agent'" in r for r in refusals(users, "daytona"))
    assert any("phases differ in network" in r for r in refusals(phases, "daytona"))
    assert any("cannot run a command as another user" in r for r in refusals(users, "local"))


def test_what_a_backend_runs_without_enforcing_is_a_notice() -> None:
    tb2 = load_task(CORPUS / "terminal-bench-2/fix-git")
    assert any("storage_mb = 10240 is not enforced on docker" in n for n in notices(tb2, "docker"))
    assert not any("storage" in n for n in notices(tb2, "daytona"))
    offline = load_task(CORPUS / "harbor-examples/ssh-key-pair")
    assert any("no-network is not enforced on local" in n for n in notices(offline, "local"))


def test_each_phase_gets_its_own_network_decided_in_one_place() -> None:
    phases = load_task(CORPUS / "harbor-examples/hello-network-phases").config
    assert phase_network(phases, "agent").mode == NetworkMode.NO_NETWORK
    assert phase_network(phases, "verifier").mode == NetworkMode.PUBLIC
    assert phase_network(phases, "setup").mode == NetworkMode.PUBLIC
    assert varies(phases) and needs_network(phases)
    default = load_task(CORPUS / "harbor-examples/hello-world").config
    assert phase_network(default, "agent").online and not varies(default)  # Harbor's default: public
    offline = load_task(CORPUS / "legacy/allow-internet-false").config
    assert not needs_network(offline)


def test_env_templates_resolve_from_the_host_and_report_what_to_redact() -> None:
    env = {"A": "plain", "B": "${TOKEN}", "C": "${REGION:-us-east-1}", "D": "x-${TOKEN}-y"}
    resolved, secrets = resolve_env(env, {"TOKEN": "s3cr3t-value"})
    assert resolved == {"A": "plain", "B": "s3cr3t-value", "C": "us-east-1", "D": "x-s3cr3t-value-y"}
    assert set(secrets) == {"s3cr3t-value"}
    assert template_names(env) == ["TOKEN"]
    with pytest.raises(MissingHostVar):
        resolve_env(env, {})


def test_mcp_servers_reach_the_agent_adapters_model() -> None:
    servers = load_task(CORPUS / "harbor-examples/hello-mcp-stdio").config.environment.mcp_servers
    given = {s.name: s for s in task_mcp_servers(servers)}
    assert given["filesystem"].transport == "stdio" and given["filesystem"].command == "npx"
    assert given["filesystem"].args == ["-y", "@modelcontextprotocol/server-filesystem", "/app"]
    assert (given["search"].transport, given["search"].url) == ("sse", "http://search:9000/sse")
    assert given["legacy-http"].transport == "streamable-http"


def test_the_agents_provider_access_opens_its_phase_only() -> None:
    offline = load_task(CORPUS / "legacy/allow-internet-false").config
    assert not phase_network(offline, "agent").online
    assert phase_network(offline, "agent", agent_online=True).online
    assert not phase_network(offline, "verifier").online
    assert varies(offline, agent_online=True) and not varies(offline)


def test_multi_step_rewards_follow_harbors_rules() -> None:
    steps = [{"reward": 1.0, "style": 0.5}, None, {"reward": 0.0}]
    assert combine(steps, MultiStepRewardStrategy.MEAN) == {"reward": 0.5, "style": 0.25}
    assert combine(steps, MultiStepRewardStrategy.FINAL) == {"reward": 0.0}
    assert combine([None], MultiStepRewardStrategy.MEAN) is None
    assert below_min({"reward": 0.5}, 1.0) == "reward=0.5 below min_reward 1.0"
    assert below_min({"reward": 1.0}, 1.0) is None
    assert below_min({"reward": 1.0}, {"correctness": 0.5}) == "correctness=-inf below min_reward 0.5"
    assert below_min(None, None) is None
