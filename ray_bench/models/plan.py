"""The compiled plan: canonical JSON whose identity is ``sha256:<hex>`` of its bytes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ray_bench.models._base import FrozenModel
from ray_bench.models.accounts import Account
from ray_bench.models.agent import McpServer
from ray_bench.models.suite import Arm, BackendConfig, ResourceLimits
from ray_bench.models.task import ComposeProject, TaskConfig

PLAN_SCHEMA = "ray-bench/plan/v1"


class InputFile(FrozenModel):
    """A confirmed input: re-checked before every new attempt (drift)."""

    kind: Literal["suite", "accounts", "task", "selection", "catalog", "agent"]
    name: str
    path: str
    sha256: str


class PlanTask(FrozenModel):
    id: str
    path: str
    checksum: str
    agent_timeout_sec: float
    verifier_timeout_sec: float
    image: str | None
    has_dockerfile: bool
    build: bool | None = Field(default=None, description="The Dockerfile is built: the task has one and "
                               "names no prebuilt docker_image, or the plan forces builds (Harbor's "
                               "choice). None (plans before this field): built whenever it has one.")
    has_solution: bool
    network: bool = Field(description="Some phase is online: the sandbox is made with a network.")
    workdir: str | None = Field(description="Unset: the image's WORKDIR.")
    resources: ResourceLimits
    verifier_env: dict[str, str]
    expected_sec: float | None = Field(default=None, description="From history, for LPT order.")
    expected_usd: float | None = Field(default=None, description="What a cell of it cost in earlier runs "
                                       "(history that recorded costs): the estimate's dollar limits.")
    config: TaskConfig = Field(default_factory=TaskConfig, description="The task.toml, as Harbor reads it.")
    warnings: list[str] = Field(default_factory=list, description="Unknown keys in task.toml.")
    mcp_servers: list[McpServer] = Field(default_factory=list, description="[[environment.mcp_servers]], for "
                                         "the agent adapter (after the arm's own).")
    compose: ComposeProject | None = Field(default=None, description="environment/docker-compose.yaml, "
                                           "read at plan (None: the task has none).")

    def builds(self) -> bool:
        """Whether its cells build the Dockerfile (rather than run a named image)."""
        return self.has_dockerfile if self.build is None else self.build


class SkippedTask(FrozenModel):
    """A task ``plan --skip-unsupported`` left out, and why (the receipt lists them)."""

    id: str
    path: str
    reason: str


class PlanCell(FrozenModel):
    id: str
    task: str
    arm: str
    rep: int
    backend: str


class Capacity(FrozenModel):
    accounts_concurrency: int
    backend_pools: dict[str, int]
    parallel_cap: int | None
    effective: int
    lines: list[str]
    backend_binds: dict[str, str] = Field(default_factory=dict, description="Backend -> which of its "
                                          "limits binds its pool (max_sandboxes, organisation pool, host "
                                          "admission, host cores); plans before it have none.")
    left_out: dict[str, str] = Field(default_factory=dict, description="Account -> why it is not counted "
                                     "(its HOME login had expired at plan time): the estimate leaves it out too.")


class RewardSpread(FrozenModel):
    """How much a paired delta (variant - baseline reward of one task and repetition) varied in
    earlier runs of this plan's arm configurations (``plan --history``): the receipt's power."""

    within_var: float = Field(description="Variance of a paired delta around its task's mean.")
    between_var: float = Field(description="Variance of the task means beyond what within explains.")
    tasks: int = Field(description="Tasks with at least one pair in the history.")
    pairs: int = Field(description="Paired (task, repetition) rows in the history.")
    paired_reps: dict[str, list[int]] = Field(default_factory=dict, description="Task checksum -> the "
                                              "repetitions the history holds in the baseline and a variant "
                                              "(the lineage's pairs, which the receipt's power counts with "
                                              "the plan's own).")
    reward_low: float = Field(default=0.0, description="The lowest reward the history's rows hold (at most 0).")
    reward_high: float = Field(default=1.0, description="The highest reward the history's rows hold (at least 1).")


class Plan(FrozenModel):
    format: str = Field(default=PLAN_SCHEMA, description="Plan format version.")
    run_id: str
    run_root: str = Field(default="", description="The absolute run root this plan was written "
                          "into; `execute` refuses a copy anywhere else.")
    suite: str
    created_with: str
    inputs: list[InputFile]
    arms: list[Arm]
    accounts: list[Account]
    backends: dict[str, BackendConfig]
    tasks: list[PlanTask]
    cells: list[PlanCell]
    preflight: list[str] = Field(description="Cell ids that must give valid rows first.")
    max_attempts: int
    artifact_cap_mb: int
    spend_limit_usd: float | None
    host_reserve_mb: int = 1024
    skipped: list[SkippedTask] = Field(default_factory=list, description="Tasks left out by "
                                       "`plan --skip-unsupported`: the backend cannot run them.")
    force_build: bool = Field(default=False, description="`plan --force-build` or the suite's "
                              "`force_build`: Dockerfiles are built even where a docker_image is named.")
    host_reserve_disk_mb: int = 1024
    capacity: Capacity
    warnings: list[str]
    unpaired: bool = False
    reward_spread: RewardSpread | None = Field(default=None, description="Paired-delta variance "
                                               "from `plan --history`; None: the receipt assumes one.")
    tops_up: list[str] = Field(default_factory=list, description="A gap-fill's lineage: the run roots its "
                               "selection (`ray-bench gaps`) tops up.")
    history_from: list[str] = Field(default_factory=list, description="The earlier run roots durations, "
                                    "costs and rewards were read from (`--history`, else the lineage; `--runs`).")
