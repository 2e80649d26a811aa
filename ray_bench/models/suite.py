"""Suites and arms (YAML)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ray_bench.models._base import ConfigModel, PathText
from ray_bench.models.agent import McpServer
from ray_bench.models.roles import ModelRole


class ResourceLimits(ConfigModel):
    cpus: float | None = Field(default=None, gt=0, description="CPU limit per sandbox.")
    memory_mb: int | None = Field(default=None, ge=16, description="Memory limit per sandbox, MiB.")
    pids: int | None = Field(default=None, ge=8, description="Process limit per sandbox.")


class Watchdog(ConfigModel):
    """The degeneration watchdog of an arm (``watchdog:``; absent means off). It reads the
    agent's live output and the workspace while the agent runs and stops an attempt that has
    stopped making progress; the attempt is a behavioural failure, its verifier skipped."""

    repeats: int = Field(default=8, ge=2, le=10_000, description=(
        "Stop when the agent makes the same tool call (same tool, same input) this many times in a "
        "row, as its CLI's live output reports tool calls (claude-code, codex)."))
    output_repeats: int = Field(default=100, ge=2, le=1_000_000, description=(
        "Stop when the same non-empty output line (not an agent CLI's JSON event) comes this many "
        "times in a row."))
    idle_minutes: float = Field(default=15.0, gt=0, le=24 * 60, description=(
        "Stop when nothing in the workspace (the task's workdir) changed for this long."))
    poll_sec: float = Field(default=30.0, ge=0.5, le=3600, description=(
        "How often the workspace is looked at (one command in the sandbox each time)."))
    max_tokens: int | None = Field(default=None, ge=1, description=(
        "Stop past this many tokens (fresh input + cache writes + output, from the CLI's live "
        "usage). Default: the executor role's max_tokens; none when neither is set."))
    max_spend_usd: float | None = Field(default=None, gt=0, description=(
        "Stop past this many USD: the CLI's live usage at its model's list price "
        "(ray_bench/agents/prices.py; a model with no price cannot be held to it). Default: the "
        "executor role's max_spend_usd."))
    degeneration: bool = Field(default=True, description=(
        "The degeneration rules (repeated call or line, idle workspace); false keeps only the "
        "token and spend bounds (what an arm without a watchdog block gets from its executor role)."))

    @model_validator(mode="after")
    def _poll_within_idle(self) -> Watchdog:
        if self.poll_sec > self.idle_minutes * 60:
            raise ValueError(f"watchdog: poll_sec {self.poll_sec:g} is longer than idle_minutes "
                             f"({self.idle_minutes * 60:g} s): the idle rule could not fire in time")
        return self


class Arm(ConfigModel):
    """One named agent configuration."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Arm name, e.g. baseline or mcp.")
    role: Literal["baseline", "variant"] = Field(
        description="`baseline` is the reference arm of a pair; every other arm is a `variant`."
    )
    agent: str = Field(
        default="command",
        description="The agent adapter: claude-code, codex, gemini-cli, harbor (one of Harbor's own "
        "agents, `harbor_agent`), or command (the arm's own `command`, which writes "
        "$LOGS_DIR/agent/usage.json itself).",
    )
    harbor_agent: str | None = Field(
        default=None, min_length=1,
        description="agent: harbor only. The Harbor agent to run (terminus-2, oracle, claude-code, ...: "
        "a name of Harbor's agent registry), validated with Harbor's own code at plan time "
        "(Python 3.12 and the `harbor` extra).")
    harbor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="agent: harbor only. That agent's own kwargs, validated with its Harbor options "
        "model at plan time (e.g. terminus-2: max_turns, temperature, enable_summarize).")
    model: str | None = Field(
        default=None,
        description="The model the agent runs. An arm with a model needs usage evidence (tokens "
        "the model produced) for a valid row.",
    )
    command: str | None = Field(
        default=None,
        min_length=1,
        description="agent: command only. Run with `sh -c` in the sandbox's workdir. The instruction "
        "is at $INSTRUCTION_FILE; logs go to $LOGS_DIR/agent.",
    )
    agent_args: list[str] = Field(
        default_factory=list, description="Extra arguments for the adapter's CLI (e.g. --max-turns 30).")
    mcp_servers: list[McpServer] = Field(
        default_factory=list, description="MCP servers given to the agent, besides the task's own.")
    network: Literal["closed", "public"] | None = Field(
        default=None,
        description="The agent phase's network. `public` is required for a CLI agent on a backend "
        "that cannot enforce the adapter's host allowlist (docker); the receipt shows it.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Non-secret env for the agent.")
    agent_dir: PathText | None = Field(
        default=None,
        description="A directory (relative to the suite file) uploaded to /agent in the sandbox "
        "and named by $AGENT_DIR; its content checksum enters the cell ids.",
    )
    image: str | None = Field(default=None, description="Image override for container backends.")
    agent_timeout_sec: float | None = Field(
        default=None, gt=0, description="Overrides the task's [agent] timeout_sec."
    )
    verifier_timeout_sec: float | None = Field(
        default=None, gt=0, description="Overrides the task's [verifier] timeout_sec."
    )
    expose_solution: bool = Field(
        default=False,
        description="Upload solution/ to the sandbox (oracle and scripted demo agents only).",
    )
    resources: ResourceLimits = Field(default_factory=ResourceLimits, description="Sandbox limits.")
    roles: list[ModelRole] = Field(
        default_factory=list,
        description="Every model the arm calls (executor, advisors, subagents, judge) with route, "
        "billing kind and bounds; shown in the receipt before confirmation.")
    watchdog: Watchdog | None = Field(
        default=None,
        description="The degeneration watchdog (`watchdog: {}` for its defaults); off when absent.")
    keep_workspace: bool = Field(
        default=False,
        description="Keep the agent's final workspace (the task's workdir, after the agent and before "
        "the verifier) as workspace.tar.gz in the attempt directory, under the artifact cap, so that "
        "`ray-bench regrade` can run a changed verifier on it without running the agent again.")

    @model_validator(mode="after")
    def _command_or_adapter(self) -> Arm:
        if self.agent == "command" and self.command is None:
            raise ValueError(f"arm {self.name}: agent command needs a `command`")
        if self.agent != "command" and self.command is not None:
            raise ValueError(f"arm {self.name}: agent {self.agent} builds its own command line; "
                             "drop `command` (extra flags go in agent_args)")
        if self.agent == "harbor" and self.harbor_agent is None:
            raise ValueError(f"arm {self.name}: agent harbor needs `harbor_agent` (e.g. terminus-2 or oracle)")
        if self.agent != "harbor" and (self.harbor_agent is not None or self.harbor_options):
            raise ValueError(f"arm {self.name}: harbor_agent and harbor_options are for agent: harbor only")
        return self


#: Arm fields added after cell ids were first published: left out of an arm's resolved config
#: while at their defaults, so that existing suites keep their cell ids.
ARM_FIELDS_SINCE_ADAPTERS: dict[str, object] = {"agent": "command", "model": None, "agent_args": [], "mcp_servers": [],
                             "network": None, "roles": [], "watchdog": None,
                             "harbor_agent": None, "harbor_options": {}}


class BackendConfig(ConfigModel):
    """Options of one sandbox backend; passed to the backend's factory."""

    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options.")
    image: str | None = Field(
        default=None, description="Image for cells whose arm and task name none (container backends).")
    max_sandboxes: int | None = Field(
        default=None, ge=1, description="Sandboxes alive at once on this backend (pool size)."
    )
    resources: ResourceLimits = Field(default_factory=ResourceLimits, description="Default limits.")


class Suite(ConfigModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Suite name.")
    tasks_dir: PathText | None = Field(
        default=None, description="Directory of task directories, relative to the suite file.")
    task_roots: list[PathText] | None = Field(
        default=None, min_length=1,
        description="Several task roots, relative to the suite file. A root holds task directories "
        "or benchmark directories of them (CodeScaleBench's benchmarks/); selections' task_dir "
        "resolves under them.")
    tasks: list[str] | None = Field(
        default=None, description="Task ids to include (default: every task directory)."
    )
    reps: int = Field(default=1, ge=1, le=1000, description="Repetitions per task and arm.")
    arms: list[Arm] = Field(min_length=1, description="The arms; exactly one has role baseline.")
    backend: str = Field(default="local", description="Sandbox backend: local, docker or daytona.")
    backends: dict[str, BackendConfig] = Field(
        default_factory=dict, description="Per-backend options and pools."
    )
    max_attempts: int = Field(
        default=3, ge=1, le=20,
        description="Failed attempts per cell that count against it (failures of the cell itself); failures "
                    "of every class together stop at twice this (the absolute cap, in the receipt).",
    )
    preflight_cells: int = Field(
        default=1, ge=0, description="Pairs run first, per backend, before the fan-out (0: none)."
    )
    artifact_cap_mb: int = Field(default=64, ge=1, description="Logs collected per attempt, MiB.")
    spend_limit_usd: float | None = Field(
        default=None, gt=0, description="Run-wide spend limit in USD: crossing it is a hard stop."
    )
    force_build: bool = Field(
        default=False, description="Build each task's environment/Dockerfile even where task.toml names "
        "a prebuilt docker_image (Harbor's --force-build); by default the prebuilt image runs.")
    host_reserve_mb: int = Field(
        default=1024, ge=0,
        description="Host memory kept free: admission counts sandbox limits against the rest, and "
        "the resource supervisor halts launching when available memory falls under it.",
    )
    host_reserve_disk_mb: int = Field(
        default=1024, ge=0,
        description="Disk kept free on every node (in its temporary directory, where sandboxes and "
        "staged uploads live): a node under it takes no more cells. 0 switches the disk check off.",
    )

    @model_validator(mode="after")
    def _roots(self) -> Suite:
        if (self.tasks_dir is None) == (self.task_roots is None):
            raise ValueError("give exactly one of tasks_dir and task_roots")
        return self

    @property
    def roots(self) -> list[str]:
        return [self.tasks_dir] if self.tasks_dir is not None else list(self.task_roots or [])

    @model_validator(mode="after")
    def _arms(self) -> Suite:
        names = [arm.name for arm in self.arms]
        if len(set(names)) != len(names):
            raise ValueError("arm names must be unique")
        baselines = [arm.name for arm in self.arms if arm.role == "baseline"]
        if len(baselines) != 1:
            raise ValueError(f"exactly one arm must have role baseline (found {len(baselines)})")
        return self

    @property
    def baseline(self) -> Arm:
        return next(arm for arm in self.arms if arm.role == "baseline")
