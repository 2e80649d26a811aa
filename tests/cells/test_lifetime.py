"""A sandbox's lifetime covers every phase of the attempt at its limit, each step's setup.sh included."""

from __future__ import annotations

from pathlib import Path

from ray_bench.cells.lifetime import STEP_SETUP_TIMEOUT_SEC, TRANSFER_MARGIN_SEC, lifetime_sec
from ray_bench.models.task.harbor import TaskConfig


def test_every_step_healthcheck_and_collect_hook_is_in_the_lifetime() -> None:
    config = TaskConfig.model_validate({
        "environment": {"healthcheck": {"command": "true", "timeout_sec": 10, "interval_sec": 5, "retries": 2,
                                        "start_period_sec": 30}},
        "verifier": {"collect": [{"command": "true", "timeout_sec": 40}]},
        "steps": [{"name": "one", "healthcheck": {"command": "true", "timeout_sec": 1, "interval_sec": 1,
                                                 "retries": 1}},
                  {"name": "two", "verifier": {"collect": [{"command": "true", "timeout_sec": 20}]}}],
    })
    # 1000 s of agents and 500 s of verifiers over the steps, as the plan sums them.
    got = lifetime_sec(config, 1000, 500)
    assert got == 1000 + 500 + (30 + 2 * 15) + (1 * 2) + 40 + 20 + TRANSFER_MARGIN_SEC


def test_a_task_without_checks_or_hooks_is_its_timeouts_and_the_transfers() -> None:
    assert lifetime_sec(TaskConfig(), 60, 30) == 90 + TRANSFER_MARGIN_SEC


def test_the_sandbox_spec_carries_the_tasks_disk_and_lifetime(tmp_path: Path) -> None:
    from test_runner_local import _spec  # its AttemptSpec of the quickstart task

    from ray_bench.cells.runner import _sandbox_spec

    config = TaskConfig.model_validate({"environment": {"storage_mb": 20480},
                                        "verifier": {"collect": [{"command": "true", "timeout_sec": 40}]}})
    sandbox = _sandbox_spec(_spec(tmp_path, "true", task_config=config))
    assert sandbox.resources.disk_mb == 20480  # sent to Daytona as 20 GiB
    assert sandbox.lifetime_sec == 10 + 10 + 40 + TRANSFER_MARGIN_SEC


def test_each_steps_setup_script_is_in_the_lifetime(tmp_path: Path) -> None:
    from test_runner_local import _spec

    from ray_bench.cells.runner import _sandbox_spec

    config = TaskConfig.model_validate({"steps": [{"name": "one"}, {"name": "two"}, {"name": "three"}]})
    spec = _spec(tmp_path, "true", task_config=config)
    for name in ("one", "three"):  # two of the three steps bring a setup.sh, run at its limit each
        workdir = Path(spec.task_path) / "steps" / name / "workdir"
        workdir.mkdir(parents=True)
        (workdir / "setup.sh").write_text("true\n")
    (Path(spec.task_path) / "steps" / "two" / "workdir").mkdir(parents=True)  # files, no setup.sh
    assert _sandbox_spec(spec).lifetime_sec == 10 + 10 + 2 * STEP_SETUP_TIMEOUT_SEC + TRANSFER_MARGIN_SEC
