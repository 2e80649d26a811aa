"""A Daytona tier 1/2 organisation's sandboxes reach only an allowlist of hosts: a plan whose
in-sandbox agent is pointed at a provider gateway not on it (the arm's ``ANTHROPIC_BASE_URL``,
or an account route's) is refused at plan time in one line, exit 2; an allowed host, a tier 3
organisation and a host-side Harbor agent pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.cli.app import app
from ray_bench.errors import ConfigError

POOL = {"vcpu": 8, "memory_gib": 64, "disk_gib": 300, "creates_per_minute": 60}
GATEWAY = "https://llm-gw.example.net/v1"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RB_TEST_KEY_A", "x")
    monkeypatch.setenv("RB_TEST_KEY_B", "x")


def _suite(root: Path, pool: dict[str, Any], arm_env: dict[str, str] | None = None,
           accounts: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    arms = [{"name": "baseline", "role": "baseline", "command": "true", "env": arm_env or {}}]
    return make_suite(root, tasks=["hello-world"], backend="daytona", arms=arms, accounts=accounts,
                      backends={"daytona": {"options": {"pool": {**POOL, **pool}}}})


def test_a_gateway_off_a_tier_2_allowlist_is_refused_in_one_line(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path / "s", {"tier": 2}, {"ANTHROPIC_BASE_URL": GATEWAY})
    with pytest.raises(ConfigError) as info:
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    line = info.value.line()
    assert "arm baseline: ANTHROPIC_BASE_URL points arm baseline's agent at llm-gw.example.net" in line
    assert "Daytona tier 2 organisation's sandboxes cannot reach" in line and "\n" not in line
    assert not (tmp_path / "runs" / "p").exists()


def test_an_account_route_to_a_gateway_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RB_TEST_GATEWAY", GATEWAY)
    accounts = [{"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A",
                                                     "OPENAI_BASE_URL": "RB_TEST_GATEWAY"}},
                 "limits": {"max_concurrent": 3}}]
    suite, accounts_path = _suite(tmp_path / "s", {"tier": 1}, accounts=accounts)
    with pytest.raises(ConfigError, match=r"account acct-a: OPENAI_BASE_URL .* at llm-gw\.example\.net"):
        plan_run(suite=suite, accounts=accounts_path, runs_dir=tmp_path / "runs", run_id="p")


@pytest.mark.parametrize("pool", [{"tier": 2, "allowed_hosts": ["*.example.net"]},
                                  {"tier": 2, "allowed_hosts": ["llm-gw.example.net"]},
                                  {"tier": 3}, {}])
def test_an_allowed_host_or_an_open_tier_passes(tmp_path: Path, pool: dict[str, Any]) -> None:
    suite, accounts = _suite(tmp_path / "s", pool, {"ANTHROPIC_BASE_URL": GATEWAY})
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    assert (result.run_root / "launch-plan.json").exists()


def test_an_allowlist_on_tier_3_is_checked_and_the_cli_exits_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    suite, accounts = _suite(tmp_path / "s", {"tier": 3, "allowed_hosts": ["api.anthropic.com"]},
                             {"ANTHROPIC_BASE_URL": GATEWAY})
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(tmp_path / "runs"), "--run-id", "p"])
    assert result.exit_code == 2
    assert "llm-gw.example.net" in result.output and "allowlisted organisation" in result.output
