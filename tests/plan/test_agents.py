"""Plan-time checks of arms' agents: bad input is one line and exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.ray_local import set_test_routes
from support.suites import make_suite

from ray_bench.errors import ConfigError, UserInputError
from ray_bench.plan.compile import PlanRequest, compile_plan


def _arms(**variant: object) -> list[dict[str, object]]:
    return [{"name": "baseline", "role": "baseline", "command": "true"},
            {"name": "cc", "role": "variant", **variant}]


def _plan(tmp_path: Path, backend: str = "local", **variant: object) -> object:
    set_test_routes()
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], arms=_arms(**variant), backend=backend,
                                 backends={backend: {"max_sandboxes": 2}})
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r"))


def test_an_adapter_arm_plans_and_its_model_enters_the_cell_ids(tmp_path: Path) -> None:
    a = _plan(tmp_path / "a", agent="claude-code", model="claude-sonnet-4-5")
    b = _plan(tmp_path / "b", agent="claude-code", model="claude-opus-4-1")
    ids = lambda p: {c.id for c in p.cells if c.arm == "cc"}  # noqa: E731
    assert ids(a) != ids(b)  # type: ignore[arg-type]
    base = lambda p: {c.id for c in p.cells if c.arm == "baseline"}  # noqa: E731
    assert base(a) == base(b)  # type: ignore[arg-type]


@pytest.mark.parametrize(("variant", "needle"), [
    ({"agent": "cursor", "model": "x"}, "unknown agent 'cursor'"),
    ({"agent": "claude-code", "model": "gpt-5"}, "does not run model 'gpt-5'"),
    ({"agent": "codex"}, "needs a model"),
])
def test_bad_agents_are_refused_at_plan_time(tmp_path: Path, variant: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        _plan(tmp_path, **variant)
    assert needle in info.value.line() and "arms.cc" in info.value.line()
    assert not (tmp_path / "runs").exists()


def test_a_cli_agent_on_docker_must_say_network_public(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="network: public"):
        _plan(tmp_path / "a", backend="docker", agent="claude-code", model="sonnet")
    plan = _plan(tmp_path / "b", backend="docker", agent="claude-code", model="sonnet", network="public")
    assert plan.arms[1].network == "public"  # type: ignore[attr-defined]


def test_command_and_adapter_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="drop `command`"):
        _plan(tmp_path, agent="claude-code", model="sonnet", command="claude -p hi")
