"""Plan-time checks of arms' agents: bad input is one line and exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.ray_local import set_test_routes
from support.suites import make_suite

from ray_bench.agents import ADAPTERS
from ray_bench.agents.base import ARG_INSTRUCTION_BYTES, Invocation, instruction
from ray_bench.errors import ConfigError, TaskDirError, UserInputError
from ray_bench.plan.compile import PlanRequest, compile_plan


def _arms(**variant: object) -> list[dict[str, object]]:
    return [{"name": "baseline", "role": "baseline", "command": "true"},
            {"name": "cc", "role": "variant", **variant}]


#: The quickstart tasks name no image: a docker suite gives its own (plan refuses it otherwise).
IMAGE = {"docker": {"image": "debian:bookworm-slim"}}


def _plan(tmp_path: Path, backend: str = "local", **variant: object) -> object:
    set_test_routes()
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], arms=_arms(**variant), backend=backend,
                                 backends={backend: {"max_sandboxes": 2, **IMAGE.get(backend, {})}})
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


def _roles_plan(tmp_path: Path, roles: list[dict[str, object]]) -> object:
    return _plan(tmp_path, command="true", roles=roles)


def test_a_role_naming_an_unknown_route_is_refused_at_plan_time(tmp_path: Path) -> None:
    roles = [{"role": "judge", "model": "claude-haiku-4-5", "route": "acct-c", "billing": "api"}]
    with pytest.raises(ConfigError) as info:
        _roles_plan(tmp_path / "a", roles)
    line = info.value.line()
    assert "arms.cc.roles[0] (judge): route 'acct-c' names no account" in line
    assert "acct-a, acct-b" in line and "\n" not in line
    # the cell's account, an account by name and a set variable are routes
    for route in ("accounts", "acct-b", "RB_TEST_KEY_A"):
        plan = _roles_plan(tmp_path / route, [{**roles[0], "route": route}])
        assert plan.arms[1].roles[0].route == route  # type: ignore[attr-defined]


def test_plan_cli_refuses_an_unknown_route_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ray_bench.cli import app

    set_test_routes()
    roles = [{"role": "advisor", "model": "gpt-5", "route": "no-such-route", "billing": "api"}]
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], arms=_arms(command="true", roles=roles),
                                 backends={"local": {"max_sandboxes": 2}})
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--run-id", "r", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "route 'no-such-route'" in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_receipt_says_a_spend_bound_is_not_enforced_on_a_model_without_a_price(tmp_path: Path) -> None:
    from ray_bench.plan.roles import render_roles

    roles = [{"role": "executor", "model": "scripted", "billing": "local", "max_spend_usd": 0.5}]
    plan = _roles_plan(tmp_path, roles)
    table = "\n".join(render_roles(plan.arms))  # type: ignore[attr-defined]
    assert ("| cc | executor | executor | scripted | accounts | local | - | - | "
            "$0.5 (not enforced: no list price for scripted) |") in table
    priced = _roles_plan(tmp_path / "priced", [{**roles[0], "model": "claude-sonnet-4-5"}])
    table = "\n".join(render_roles(priced.arms))  # type: ignore[attr-defined]
    assert "| claude-sonnet-4-5 | accounts | local | - | - | $0.5 |" in table  # held live by the watchdog


def _plan_with_instruction(tmp_path: Path, size: int, **variant: object) -> object:
    set_test_routes()
    suite, accounts = make_suite(tmp_path, tasks=["hello-world"], arms=_arms(**variant))
    (tmp_path / "tasks" / "hello-world" / "instruction.md").write_bytes(b"a" * size)
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r"))


@pytest.mark.parametrize(("agent", "model"), [("claude-code", "sonnet"), ("codex", "gpt-5"),
                                              ("gemini-cli", "gemini-2.5-pro")])
def test_an_instruction_over_one_argument_is_refused_for_an_adapter_passing_it_so(
        tmp_path: Path, agent: str, model: str) -> None:
    _plan_with_instruction(tmp_path / "fits", ARG_INSTRUCTION_BYTES, agent=agent, model=model)
    with pytest.raises(TaskDirError) as info:
        _plan_with_instruction(tmp_path / "over", ARG_INSTRUCTION_BYTES + 1, agent=agent, model=model)
    line = info.value.line()
    assert "task hello-world: instruction.md is 131,072 bytes, over the 131,071" in line
    assert f"arm cc passes it as one ({agent})" in line and "agent: command" in line


def test_an_agent_reading_the_instruction_file_takes_any_size(tmp_path: Path) -> None:
    _plan_with_instruction(tmp_path, 1024 * 1024, command='sh -c \'wc -c "$INSTRUCTION_FILE"\'')


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_adapter_passing_the_instruction_as_an_argument_declares_the_bound(name: str) -> None:
    adapter = ADAPTERS[name]
    if name in ("command", "harbor"):  # no command line: the instruction is read, not passed
        assert adapter.instruction_limit is None
        return
    as_argument = instruction() in adapter.command(Invocation(model="m"))
    assert (adapter.instruction_limit == ARG_INSTRUCTION_BYTES) is as_argument


def test_the_bound_is_the_kernels(tmp_path: Path) -> None:
    """The instruction exactly as the adapters pass it, through ``sh``: at the bound the exec
    runs, one byte over it fails with E2BIG (Linux MAX_ARG_STRLEN)."""
    for size, ok in ((ARG_INSTRUCTION_BYTES, True), (ARG_INSTRUCTION_BYTES + 1, False)):
        path = tmp_path / f"i{size}"
        path.write_bytes(b"a" * size)
        done = subprocess.run(["sh", "-c", f"exec true {instruction()}"], env={"INSTRUCTION_FILE": str(path),
                              "PATH": os.environ["PATH"]}, capture_output=True, text=True, check=False)
        assert (done.returncode == 0) is ok, (size, done.returncode, done.stderr)
        if not ok:
            assert "too long" in done.stderr.lower(), done.stderr
