"""What a cell runner needs to run one attempt: plain data, shipped to any Ray node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_bench.artifacts.route import ArtifactRoute
from ray_bench.models.suite import Watchdog
from ray_bench.models.task import ComposeProject, TaskConfig

#: Cell runner processes per node. One async runner is bound by one core (the GIL); two keep
#: very short cells from queueing behind each other on a busy loop, and a runner that dies
#: takes half of its node's attempts with it, not all (no-op benchmark: tests/perf/README.md).
DEFAULT_RUNNERS_PER_NODE = 2


@dataclass(frozen=True)
class AttemptSpec:
    run_id: str
    attempt_id: str
    cell_id: str
    task_id: str
    arm: str
    rep: int
    account: str
    task_path: str
    #: The content the staged upload is made of (task and agent checksums); see stage_for.
    stage_key: str
    attempt_dir: str
    backend: str
    backend_options: dict[str, Any]
    agent_command: str
    agent_env: dict[str, str]
    agent_dir: str | None
    route_env: dict[str, str]  # agent var -> node var (names only)
    route_home: str | None
    agent_timeout_sec: float
    verifier_timeout_sec: float
    verifier_env: dict[str, str]
    image: str | None
    build_context: str | None
    workdir: str | None  # None: the image's WORKDIR
    network: bool  # the sandbox is made with a network (some phase is online)
    cpus: float | None
    memory_mb: int | None
    pids: int | None
    expose_solution: bool
    artifact_cap_bytes: int
    seed: str
    #: The arm's agent adapter, model, extra CLI args and MCP servers (arm's then task's).
    agent: str = "command"
    model: str | None = None
    agent_args: tuple[str, ...] = ()
    mcp_servers: tuple[dict[str, Any], ...] = ()
    #: The task.toml: env, users, per-phase network, healthcheck, collect, artifacts, steps
    #: (ray_bench.cells.phases and steps read it).
    task_config: TaskConfig = field(default_factory=TaskConfig)
    #: The arm's agent reaches its model provider: its phase is online whatever the task says
    #: (ray_bench.tasks.network.phase_network decides with it).
    agent_network: bool = False
    #: The executor role's turn bound (the CLI's own flag where it has one: claude-code).
    max_turns: int | None = None
    #: agent: harbor: the Harbor agent and its own kwargs (validated by Harbor at plan time).
    harbor_agent: str | None = None
    harbor_options: dict[str, Any] = field(default_factory=dict)
    #: The arm's degeneration watchdog, token bound resolved (ray_bench.agents.watchdog); None: off.
    watchdog: Watchdog | None = None
    #: Where the runner finds the task and writes the attempt (ray_bench.artifacts); None: the
    #: paths above are this node's (one machine, or a shared filesystem), as before.
    artifacts: ArtifactRoute | None = None
    #: The arm keeps the agent's final workspace as a tarball (ray_bench.cells.workspace).
    keep_workspace: bool = False
    #: The account whose route fills the verifier's ``${VAR}`` credential templates (the arm's
    #: judge role, ray_bench.plan.roles.judge_account) and that route (verifier var -> node var,
    #: names only); None / empty: the templates read the node's env.
    verifier_account: str | None = None
    verifier_route_env: dict[str, str] = field(default_factory=dict)
    #: The task's environment/docker-compose.yaml as the plan read it (None: it has none).
    compose: ComposeProject | None = None
