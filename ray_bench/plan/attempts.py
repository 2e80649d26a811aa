"""What a runner is given for one attempt: its :class:`~ray_bench.cells.spec.AttemptSpec`,
the one translation of a plan's cell (the driver's launches and ``regrade`` both use it), made
from the plan alone (pure: the attempt's row says which attempt, the build phase which
snapshot)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_bench.cells.spec import AttemptSpec
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.build import SNAPSHOT_PREFIX
from ray_bench.models.plan import Plan, PlanCell, PlanTask
from ray_bench.models.suite import Arm, BackendConfig
from ray_bench.plan.agents import agent_network, sandbox_image
from ray_bench.plan.roles import executor_max_turns, judge_account
from ray_bench.plan.watchdog import effective as effective_watchdog
from ray_bench.runroot import RunPaths


@dataclass(frozen=True)
class CellSandbox:
    """What a cell's sandbox is made from, as the driver sends it to the runner."""

    image: str | None
    build_context: str | None
    cpus: float | None
    memory_mb: int | None
    disk_mb: int | None


def cell_sandbox(task: PlanTask, arm: Arm, backend: BackendConfig | None) -> CellSandbox:
    """The image (an arm's, else the task's, else the backend's), the Dockerfile directory and
    the size of a cell's sandbox: the one place the driver and the build phase read them."""
    res = arm.resources
    defaults = backend.resources if backend else None
    image, build_context = sandbox_image(task, arm, backend)  # Harbor's choice of image or build
    return CellSandbox(
        image=image,
        build_context=build_context,
        cpus=res.cpus or task.resources.cpus or (defaults.cpus if defaults else None),
        memory_mb=res.memory_mb or task.resources.memory_mb or (defaults.memory_mb if defaults else None),
        disk_mb=task.config.environment.storage_mb,
    )


class AttemptSpecs:
    """The attempt specs of one plan's cells."""

    def __init__(self, plan: Plan, paths: RunPaths) -> None:
        self.plan = plan
        self.paths = paths
        self.tasks = {t.id: t for t in plan.tasks}
        self.arms = {a.name: a for a in plan.arms}
        self.accounts = {a.name: a for a in plan.accounts}
        agent_inputs = {i.name: i.sha256 for i in plan.inputs if i.kind == "agent"}
        self._agent_sums = {a.name: agent_inputs.get(a.name, "") for a in plan.arms}

    def of(self, row: AttemptRow, cell: PlanCell, snapshot: str | None = None) -> AttemptSpec:
        """The spec of attempt ``row`` of ``cell`` on ``row.account``; ``snapshot``: the image the
        build phase made for the cell (scheduler/builds.py), if any."""
        task = self.tasks[cell.task]
        arm = self.arms[cell.arm]
        acc = self.accounts[row.account]
        backend_cfg = self.plan.backends.get(cell.backend)
        defaults = backend_cfg.resources if backend_cfg else None
        box = cell_sandbox(task, arm, backend_cfg)
        image, build_context = box.image, box.build_context
        if snapshot is not None:
            image, build_context = f"{SNAPSHOT_PREFIX}{snapshot}", None
        judge = judge_account(arm, row.account, self.accounts)
        # a network_mode on the compose main wins over every phase, the agent's too (Harbor)
        pinned = task.compose.pinned_network if task.compose is not None else None
        return AttemptSpec(
            run_id=self.plan.run_id, attempt_id=row.attempt_id, cell_id=cell.id, task_id=cell.task,
            arm=cell.arm, rep=cell.rep, account=row.account, task_path=task.path,
            stage_key=f"{task.checksum}:{self._agent_sums.get(cell.arm, '')}",
            attempt_dir=str(self.paths.attempt(row)),  # <task>__<arm>__r<rep>__a<seq>__<cell hash>
            backend=cell.backend, backend_options=dict(backend_cfg.options) if backend_cfg else {},
            agent_command=arm.command or "", agent_env=dict(arm.env), agent_dir=arm.agent_dir,
            route_env=dict(acc.route.env),
            route_home=acc.route.home,
            agent_timeout_sec=arm.agent_timeout_sec or task.agent_timeout_sec,
            verifier_timeout_sec=arm.verifier_timeout_sec or task.verifier_timeout_sec,
            verifier_env=dict(task.verifier_env),
            image=image, build_context=build_context,
            workdir=task.workdir, network=task.network or (agent_network(arm) and pinned is None),
            cpus=box.cpus, memory_mb=box.memory_mb,
            pids=arm.resources.pids or (defaults.pids if defaults else None),
            expose_solution=arm.expose_solution,
            artifact_cap_bytes=self.plan.artifact_cap_mb << 20,
            seed=f"{cell.id}:{row.seq}",
            agent=arm.agent, model=arm.model, agent_args=tuple(arm.agent_args),
            mcp_servers=tuple(s.model_dump(mode="json") for s in [*arm.mcp_servers, *task.mcp_servers]),
            task_config=task.config, agent_network=agent_network(arm) and pinned is not False,
            watchdog=effective_watchdog(arm),
            max_turns=executor_max_turns(arm),
            harbor_agent=arm.harbor_agent, harbor_options=dict(arm.harbor_options),
            keep_workspace=arm.keep_workspace, compose=task.compose,
            verifier_account=judge,
            verifier_route_env=dict(self.accounts[judge].route.env) if judge is not None else {},
        )
