"""How long one attempt's sandbox must live: every phase that runs in it, at its limit.

A backend turns this into its safety net (Daytona: auto-stop after this much idle time and a
wall-clock TTL a little longer; the TTL counts from the create, so the backend adds its own
create time). A lifetime shorter than the attempt kills a long multi-step task mid-step."""

from __future__ import annotations

from pathlib import Path

from ray_bench.models.task.harbor import HealthcheckConfig, TaskConfig

#: Staging the task, the agent's files and the tests in, and the logs and artifacts out.
TRANSFER_MARGIN_SEC = 600.0
#: The limit of one step's ``workdir/setup.sh`` (ray_bench.cells.steps runs it with this).
STEP_SETUP_TIMEOUT_SEC = 600.0


def healthcheck_sec(check: HealthcheckConfig | None) -> float:
    """The longest a healthcheck can take before it passes or fails."""
    if check is None:
        return 0.0
    return check.start_period_sec + check.retries * (check.timeout_sec + check.interval_sec)


def step_setups(config: TaskConfig, task_dir: Path) -> int:
    """The steps whose ``workdir/`` brings a ``setup.sh`` (each runs it before its agent)."""
    return sum(1 for s in config.steps or [] if (task_dir / "steps" / s.name / "workdir" / "setup.sh").is_file())


def lifetime_sec(config: TaskConfig, agent_timeout_sec: float, verifier_timeout_sec: float,
                 setups: int = 0) -> float:
    """``agent_timeout_sec`` and ``verifier_timeout_sec`` are the attempt's totals over every
    step; to them come each healthcheck and collect hook at its limit, each of the ``setups``
    steps' ``setup.sh`` at its limit, and the transfers."""
    steps = config.steps or []
    checks = [config.environment.healthcheck, *(s.healthcheck for s in steps)]
    collect = [*config.verifier.collect, *(h for s in steps for h in s.verifier.collect)]
    return (agent_timeout_sec + verifier_timeout_sec + sum(healthcheck_sec(c) for c in checks)
            + sum(h.timeout_sec for h in collect) + setups * STEP_SETUP_TIMEOUT_SEC + TRANSFER_MARGIN_SEC)
