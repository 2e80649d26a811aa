"""A task asking for a fraction of a CPU (``cpus = 0.5``, as Harbor allows) plans: the plan
keeps the fraction and the host admission counts it, two such sandboxes per CPU."""

from __future__ import annotations

from pathlib import Path

from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench.commands.receipt import render_receipt
from ray_bench.plan.compile import PlanRequest, compile_plan


def test_a_half_cpu_task_plans_with_its_fraction(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 8, "image": "debian:bookworm-slim"}})
    toml = tmp_path / "tasks" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"', 'workdir = "/app"\ncpus = 0.5'))
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    (task,) = plan.tasks
    assert task.resources.cpus == 0.5
    assert "sandboxes of 0.5 CPUs" in render_receipt(plan, "sha256:x")
