"""What a task asks of a run: per-phase network, backend refusals, env templates, the MCP
config file and multi-step rewards."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from ray_bench.config.tasks import load_task
from ray_bench.models.task import MultiStepRewardStrategy, NetworkMode
from ray_bench.sandboxes.capabilities import CAPABILITIES
from ray_bench.sandboxes.daytona_lists import split_networks, unsayable
from ray_bench.sandboxes.gpus import DaemonGpus
from ray_bench.tasks.envvars import MissingHostVar, resolve_env, template_names
from ray_bench.tasks.mcp import task_mcp_servers
from ray_bench.tasks.network import (
    all_policies,
    create_allowlist,
    in_agent_sandbox,
    needs_network,
    phase_network,
    varies,
)
from ray_bench.tasks.rewards import below_min, combine
from ray_bench.tasks.support import notices, refusals

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(("rel", "needle"), [
    ("refused/gpu-training", "asks for 1 GPU(s) of H100/A100"),
    ("refused/windows-task", "os = 'windows'"),
    ("refused/tpu-task", "TPU (v6e 2x4)"),
    ("refused/continuous-verifier", "continuous is enabled"),
])
def test_what_no_backend_here_gives_is_refused_with_a_reason(rel: str, needle: str) -> None:
    task = load_task(CORPUS / rel)
    for backend in ("docker", "daytona", "local"):
        reasons = refusals(task, backend)
        assert any(needle in r for r in reasons), (backend, reasons)


def test_a_task_with_no_image_and_no_dockerfile_is_refused_where_nothing_stands_in(tmp_path: Path) -> None:
    """Issue 52: it planned, then stopped the whole docker run at execute (SandboxCreateError)."""
    shutil.copytree(CORPUS / "harbor-examples/hello-world", tmp_path / "bare")
    (tmp_path / "bare" / "environment" / "Dockerfile").unlink()
    task = load_task(tmp_path / "bare")
    assert any("neither [environment] docker_image nor environment/Dockerfile" in r and "backends.docker.image" in r
               for r in refusals(task, "docker"))
    assert refusals(task, "docker", stand_in_image=True) == []  # the backend's image, or every arm's
    assert refusals(task, "daytona") == []  # a sandbox naming no image starts from the default snapshot
    assert refusals(task, "local") == []


def test_a_gpu_task_runs_on_docker_only_where_its_daemon_has_a_gpu_runtime() -> None:
    task = load_task(CORPUS / "refused/gpu-training")  # gpus = 1, gpu_types = H100/A100
    here = DaemonGpus(("io.containerd.runc.v2", "runc"))
    (line,) = [r for r in refusals(task, "docker", daemon=here) if "GPU" in r]
    assert line == ("asks for 1 GPU(s) of H100/A100; docker's runtimes here: io.containerd.runc.v2, runc (no nvidia "
                    "runtime: install the NVIDIA Container Toolkit there, or run it on a daemon that has one)")
    assert not [r for r in refusals(task, "docker", daemon=DaemonGpus(("nvidia", "runc"))) if "GPU" in r]
    assert any("did not answer" in r for r in refusals(task, "docker", daemon=DaemonGpus(None)))
    for backend in ("daytona", "local"):
        (line,) = [r for r in refusals(task, backend) if "GPU" in r]
        assert line.endswith(f"backend {backend} gives sandboxes none; docker (where its daemon has the nvidia "
                             "runtime) can"), line
    assert "gpu_types = H100/A100 is not selected on docker: a device request asks for any 1 GPU(s) the daemon " \
           "has" in notices(task, "docker")


def test_local_says_per_task_that_its_dockerfile_is_not_built_and_cpus_not_held() -> None:
    task = load_task(CORPUS / "harbor-examples/hello-world")  # a Dockerfile and cpus = 1
    said = notices(task, "local")
    assert any(n.startswith("environment/Dockerfile is not built on local") for n in said), said
    assert "cpus = 1 is not held on local: its processes share the host's CPUs" in said
    assert not any("Dockerfile" in n or "cpus" in n for n in notices(task, "docker") + notices(task, "daytona"))


def test_a_separate_verifier_runs_on_docker_and_daytona_and_is_refused_on_local() -> None:
    task = load_task(CORPUS / "refused/separate-verifier")
    assert refusals(task, "docker") == [] and refusals(task, "daytona") == []
    assert refusals(task, "local") == ["verifier asks for a separate verifier container; backend local does not "
                                       "run one (it has no image to make a second sandbox from; use backend docker "
                                       "or daytona)"]


def test_a_separate_verifiers_network_is_its_own_and_leaves_the_agents_sandbox_fixed() -> None:
    cfg = load_task(CORPUS / "refused/separate-verifier").config  # [verifier.environment] allow_internet = false
    assert phase_network(cfg, "verifier").mode == NetworkMode.NO_NETWORK
    assert phase_network(cfg, "agent").mode == NetworkMode.PUBLIC
    assert needs_network(cfg) and not varies(cfg)  # the verifier's phase is not in the agent's sandbox


def test_a_separate_verifier_built_as_a_compose_project_is_refused(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "refused/separate-verifier", tmp_path / "t")
    (tmp_path / "t" / "tests" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    assert any("tests/docker-compose.yaml" in r for r in refusals(load_task(tmp_path / "t"), "docker"))


def test_a_compose_project_runs_on_docker_only_and_says_why_elsewhere() -> None:
    task = load_task(CORPUS / "refused/compose-sidecar")
    assert task.compose is not None and task.compose.services == ("main", "db") and not task.compose.main_only
    assert refusals(task, "docker") == []  # its [[verifier.collect]] in db too
    assert any("runs as a compose project (main, db)" in n for n in notices(task, "docker"))
    for backend in ("daytona", "local"):
        reasons = refusals(task, backend)
        assert any("compose project (main, db)" in r and "Docker-in-Docker" in r for r in reasons), reasons
        assert any("collect runs in compose service 'db'" in r for r in reasons), reasons


@pytest.fixture
def fixed_at_create(monkeypatch: pytest.MonkeyPatch) -> str:
    """A backend whose allowlist is fixed at create (Daytona's lists without update_network_settings)."""
    monkeypatch.setitem(CAPABILITIES, "fixed", replace(CAPABILITIES["daytona"], network_per_phase=False))
    return "fixed"


def test_an_allowlist_runs_on_docker_and_daytona_and_elsewhere_the_hint_can_be_followed(
        fixed_at_create: str) -> None:
    task = load_task(CORPUS / "harbor-examples/hello-allowlist")
    assert refusals(task, "docker") == [] and refusals(task, "daytona") == []
    assert any("allowlist (agent) is enforced through an HTTP(S) proxy" in n for n in notices(task, "docker"))
    assert any("allowlist (agent) is set at create, and changed between phases as daytona's network and domain "
               "allow lists" in n for n in notices(task, "daytona"))
    # Daytona takes its host names (domainAllowList) and its phases' differing networks (network-settings)
    for backend, why, hint in (
            (fixed_at_create, "fixes the network at create, and the phases of one sandbox differ "
                              "(setup no-network, agent allowlist", "run it on daytona or docker"),
            ("local", "cannot enforce one", "run it on daytona or docker")):
        reasons = [r for r in refusals(task, backend) if "allowlist" in r]
        assert len(reasons) == 1 and "(api.anthropic.com, *.pypi.org, 10.0.0.0/8)" in reasons[0], reasons
        assert f"backend {backend} {why}" in reasons[0] and hint in reasons[0], reasons
    # the task's allowlist is its agent's phase: an arm that opens that phase leaves it unused
    assert [p for p, pol in all_policies(task.config) if pol.mode == NetworkMode.ALLOWLIST] == ["agent"]
    assert "network: public" in reasons[0]
    assert not [r for r in refusals(task, "local", agent_online=True) if "allowlist" in r]


@pytest.mark.parametrize(("network", "refused"), [
    # every phase of the one sandbox has the list: set at create (an address is its /32)
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["10.0.0.0/8", "192.0.2.7"]\n', None),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = [' + ", ".join(f'"10.{i}.0.0/16"' for i in range(11))
     + "]\n", "takes at most 10 networks in an allowlist, not 11"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = [' + ", ".join(f'"h{i}.ex.com"' for i in range(11))
     + ', "10.0.0.0/8"]\n', "takes at most 10 domains in an allowlist, not 11"),
    # Harbor takes a single label; Daytona's domainAllowList wants a dot and an alphabetic TLD
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org", "localhost", "fd00::/8"]\n',
     "(domainAllowList), not localhost, fd00::/8"),
])
def test_daytona_takes_an_allowlist_its_lists_can_say(tmp_path: Path, network: str, refused: str | None,
                                                       fixed_at_create: str) -> None:
    shutil.copytree(CORPUS / "harbor-examples/hello-allowlist", tmp_path / "t")
    (tmp_path / "t" / "task.toml").write_text('schema_version = "1.4"\n[task]\nname = "a/t"\n' + network)
    task = load_task(tmp_path / "t")
    reasons = [r for r in refusals(task, "daytona") if "allowlist" in r]
    made = create_allowlist("daytona", in_agent_sandbox(task.config))
    if refused is None:
        assert reasons == [] and made == ("10.0.0.0/8", "192.0.2.7/32")
        assert create_allowlist("docker", in_agent_sandbox(task.config)) is None  # docker's proxy, per phase
        # an arm that opens the agent's phase leaves setup and verifier under another network: Daytona
        # changes it between phases; a backend whose list is fixed at create cannot
        assert [r for r in refusals(task, "daytona", some_agent_online=True) if "allowlist" in r] == []
        mixed = [r for r in refusals(task, fixed_at_create, some_agent_online=True) if "allowlist" in r]
        assert len(mixed) == 1 and "differ for an arm with `network: public` (setup allowlist, agent public" \
            in mixed[0], mixed
    else:
        assert len(reasons) == 1 and refused in reasons[0] and "run it on docker" in reasons[0], reasons


def test_phases_that_differ_make_the_sandbox_without_a_list_and_switch(tmp_path: Path, fixed_at_create: str) -> None:
    shutil.copytree(CORPUS / "harbor-examples/hello-allowlist", tmp_path / "t")
    (tmp_path / "t" / "task.toml").write_text(
        'schema_version = "1.4"\n[task]\nname = "a/t"\n[environment]\nnetwork_mode = "no-network"\n'
        '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["10.0.0.0/8", "pypi.org"]\n')
    task = load_task(tmp_path / "t")
    assert refusals(task, "daytona") == [] and create_allowlist("daytona", in_agent_sandbox(task.config)) is None
    reasons = [r for r in refusals(task, fixed_at_create) if "allowlist" in r]
    assert len(reasons) == 1 and "the phases of one sandbox differ (setup no-network, agent allowlist" in reasons[0]


def test_daytona_takes_host_names_and_suffixes_at_create_beside_networks(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "harbor-examples/hello-allowlist", tmp_path / "t")
    (tmp_path / "t" / "task.toml").write_text(
        'schema_version = "1.4"\n[task]\nname = "a/t"\n[environment]\nnetwork_mode = "allowlist"\n'
        'allowed_hosts = ["api.anthropic.com", "*.pypi.org", "Files.PythonHosted.org.", "10.0.0.0/8"]\n')
    task = load_task(tmp_path / "t")
    assert [r for r in refusals(task, "daytona") if "allowlist" in r] == []
    made = create_allowlist("daytona", in_agent_sandbox(task.config))
    assert made == ("api.anthropic.com", "*.pypi.org", "files.pythonhosted.org", "10.0.0.0/8")
    assert split_networks(made) == (("10.0.0.0/8",), ("api.anthropic.com", "*.pypi.org", "files.pythonhosted.org"))
    # a backend whose list takes networks only still refuses the names (capabilities decide)
    assert unsayable(made) == ["api.anthropic.com", "*.pypi.org", "files.pythonhosted.org"]


def test_users_need_docker_and_network_changes_a_backend_that_switches(fixed_at_create: str) -> None:
    users = load_task(CORPUS / "harbor-examples/hello-users")
    phases = load_task(CORPUS / "harbor-examples/hello-network-phases")
    assert refusals(users, "docker") == [] and refusals(phases, "docker") == [] and refusals(phases, "daytona") == []
    assert any("agent.user = 'agent'" in r for r in refusals(users, "daytona"))
    assert any("phases differ in network" in r for r in refusals(phases, fixed_at_create))
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


def test_a_separate_verifier_asking_for_a_gpu_is_refused_where_there_is_none(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "refused/separate-verifier", tmp_path / "t")
    toml = tmp_path / "t" / "task.toml"
    toml.write_text(toml.read_text() + "gpus = 1\n")  # under [verifier.environment], the last table
    task = load_task(tmp_path / "t")
    assert refusals(task, "docker", daemon=DaemonGpus(("runc",))) == [
        "verifier.environment asks for 1 GPU(s); docker's runtimes here: runc (no nvidia runtime: install the "
        "NVIDIA Container Toolkit there, or run it on a daemon that has one)"]
    assert refusals(task, "docker", daemon=DaemonGpus(("nvidia", "runc"))) == []
