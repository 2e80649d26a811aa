"""Images as Harbor chooses them (``should_use_prebuilt_docker_image``, harbor 0.26): a task that
names a prebuilt ``docker_image`` runs it even when it also ships ``environment/Dockerfile``; the
Dockerfile is built only without one, or when the plan forces builds. An arm's ``image:``
overrides the task's environment, as the receipt says."""

from __future__ import annotations

from pathlib import Path

from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench.commands.verify import _rederive
from ray_bench.config.loader import load_accounts, load_suite
from ray_bench.models.plan import PlanTask
from ray_bench.models.suite import Arm, BackendConfig
from ray_bench.plan.agents import image_of, sandbox_image
from ray_bench.plan.compile import PlanRequest, compile_plan

PREBUILT = "ghcr.io/example/swe-task:1.0"


def _suite(tmp: Path, **fields: object) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["hello-world", "fizzbuzz"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2}}, **fields)
    for task in ("hello-world", "fizzbuzz"):
        env = tmp / "tasks" / task / "environment"
        env.mkdir()
        (env / "Dockerfile").write_text("FROM rb-test-base\n")
    toml = tmp / "tasks" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"', f'workdir = "/app"\ndocker_image = "{PREBUILT}"'))
    return suite, accounts


def _plan(suite: Path, accounts: Path, **kw: object):  # type: ignore[no-untyped-def]
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES),
                                    **kw))  # type: ignore[arg-type]


def test_a_named_prebuilt_image_runs_instead_of_the_dockerfile(tmp_path: Path) -> None:
    plan = _plan(*_suite(tmp_path))
    tasks = {t.id: t for t in plan.tasks}
    arm = plan.arms[0]
    assert sandbox_image(tasks["hello-world"], arm, None) == (PREBUILT, None)
    image, context = sandbox_image(tasks["fizzbuzz"], arm, None)
    assert image is None and context == str(tmp_path.resolve() / "tasks" / "fizzbuzz" / "environment")
    receipt = image_of(plan, arm, "docker")
    assert "each task's Dockerfile build" in receipt and f"`{PREBUILT}`" in receipt


def test_force_build_builds_every_dockerfile_from_the_cli_or_the_suite(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path / "a")
    forced = _plan(suite, accounts, force_build=True)
    hello = next(t for t in forced.tasks if t.id == "hello-world")
    assert forced.force_build and hello.builds()
    assert sandbox_image(hello, forced.arms[0], None)[1] is not None
    by_suite = _plan(*_suite(tmp_path / "b", force_build=True))
    assert by_suite.force_build and all(t.builds() for t in by_suite.tasks)
    assert PREBUILT not in image_of(by_suite, by_suite.arms[0], "docker")


def test_a_forced_plan_still_verifies_and_an_unforced_one_of_a_forcing_suite_does_not(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, force_build=True)
    plan = _plan(suite, accounts)
    loaded, accounts_file = load_suite(suite), load_accounts(accounts)
    assert _rederive(plan, loaded, suite, accounts_file) is None
    assert _rederive(plan.model_copy(update={"force_build": False}), loaded, suite, accounts_file) is not None


def test_the_arms_image_overrides_the_tasks_environment(tmp_path: Path) -> None:
    plan = _plan(*_suite(tmp_path))
    arm = Arm.model_validate({**plan.arms[0].model_dump(), "image": "rb-agent:1"})
    for task in plan.tasks:
        assert sandbox_image(task, arm, BackendConfig(image="rb-backend:1")) == ("rb-agent:1", None)
    assert "(the arm's" in image_of(plan, arm, "docker")


def test_plans_written_before_the_field_build_whenever_a_dockerfile_exists() -> None:
    old = {"id": "t", "path": "/x/t", "checksum": "c", "agent_timeout_sec": 1, "verifier_timeout_sec": 1,
           "image": PREBUILT, "has_dockerfile": True, "has_solution": False, "network": False, "workdir": None,
           "resources": {}, "verifier_env": {}}
    assert PlanTask.model_validate(old).builds()
    assert not PlanTask.model_validate({**old, "has_dockerfile": False}).builds()
