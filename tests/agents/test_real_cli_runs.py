"""Whole runs (the driver, Ray, the account actors) of the REAL agent CLIs against the fake
provider on loopback: what the accounts learn during a run, not only what one attempt says."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.agent_clis import bin_dir, missing
from support.fake_provider import Answer, FakeProvider
from support.runs import ledger_rows, plan_and_run
from support.services import require_service
from support.suites import make_suite

from ray_bench.accounts.store import AccountStore
from ray_bench.ledger.store import Ledger

pytestmark = [pytest.mark.ray, pytest.mark.slow]
GOOD, BAD = "sk-test-good-key-0123456789", "sk-test-refused-key-0123456789"
# Set when the module is imported (collection, before any test starts the session's shared Ray):
# the runners are Ray workers, which see the environment the cluster started with, not a
# variable the test process sets later (alone, the test started Ray itself after setting them).
os.environ["RB_REAL_GOOD_KEY"], os.environ["RB_REAL_BAD_KEY"] = GOOD, BAD


def _arm(name: str, role: str, agent: str, model: str, env: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "role": role, "agent": agent, "model": model, "agent_timeout_sec": 120,
            "env": {"PATH": f"{bin_dir()}:{os.environ['PATH']}", **env}}


@pytest.mark.parametrize(("agent", "model", "key_var"), [
    ("claude-code", "claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("codex", "gpt-5", "CODEX_API_KEY")])
def test_a_key_refused_401_disables_its_account_within_one_cell(tmp_path: Path, agent: str, model: str,
                                                                key_var: str) -> None:
    binary = {"claude-code": "claude", "codex": "codex"}[agent]
    reason = missing(binary)
    require_service(f"agent CLI {binary}", reason is None, reason or "")
    with FakeProvider(default=Answer(input_tokens=200, output_tokens=9)) as fake:
        fake.refused_keys.add(BAD)
        env = ({"ANTHROPIC_BASE_URL": fake.url, "CLAUDE_CODE_MAX_RETRIES": "10"} if agent == "claude-code"
               else {"OPENAI_BASE_URL": f"{fake.url}/v1"})
        accounts = [{"name": "refused", "route": {"env": {key_var: "RB_REAL_BAD_KEY"}},
                     "limits": {"max_concurrent": 1}},
                    {"name": "good", "route": {"env": {key_var: "RB_REAL_GOOD_KEY"}},
                     "limits": {"max_concurrent": 2}}]
        suite, accounts_file = make_suite(
            tmp_path / "s", tasks=["hello-world", "sum-list"], accounts=accounts, preflight_cells=0,
            backends={"local": {"max_sandboxes": 3, "options": {"root": str(tmp_path / "sbx")}}},
            arms=[_arm("baseline", "baseline", agent, model, env), _arm("mcp", "variant", agent, model, env)])
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        attempts, rows = ledger_rows(root)
    on_refused = [a for a in attempts if a.account == "refused"]
    # One cell on the refused key, ended live and classed auth; the account disabled at its end,
    # so no second cell started on it; every cell finished on the good account.
    assert len(on_refused) == 1, [(a.account, a.failure_class) for a in attempts]
    assert on_refused[0].failure_class == "auth" and not on_refused[0].counts
    assert len(rows) == 4 and all(r.account == "good" for r in rows.values()), outcome.detail
    store = AccountStore(os.environ["RAY_BENCH_STATE_ROOT"])  # this test's own (tests/conftest.py)
    try:
        assert store.health_state("refused") == "disabled"
    finally:
        store.close()


def test_the_spend_limit_overshoot_with_claude_code_is_under_one_cells_cost(tmp_path: Path) -> None:
    """A run limit of $0.004 over cells of ~$0.0007 (one answer, 200 input / 9 output at Sonnet's
    list price; the executor role's bound, $0.002, the first cells' expected cost): the run stops
    on ``spend`` and ends past its limit by less than one cell's cost. The figure is printed."""
    reason = missing("claude")
    require_service("agent CLI claude", reason is None, reason or "")
    with FakeProvider(default=Answer(input_tokens=200, output_tokens=9)) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url}
        roles = [{"role": "executor", "model": "claude-sonnet-4-5", "billing": "api", "max_spend_usd": 0.002}]
        arms = [{**_arm(n, r, "claude-code", "claude-sonnet-4-5", env), "roles": roles}
                for n, r in (("baseline", "baseline"), ("mcp", "variant"))]
        accounts = [{"name": "good", "route": {"env": {"ANTHROPIC_API_KEY": "RB_REAL_GOOD_KEY"}},
                     "limits": {"max_concurrent": 2}}]
        suite, accounts_file = make_suite(
            tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz", "count-words"], accounts=accounts,
            preflight_cells=0, spend_limit_usd=0.004,
            backends={"local": {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}}, arms=arms)
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        served_usd = fake.served.input_tokens * 3e-6 + fake.served.output_tokens * 15e-6
        answers = fake.served.answers
    attempts, _ = ledger_rows(root)
    spent = sum(a.cost_usd for a in attempts)
    per_cell = spent / max(1, len(attempts))
    overshoot = spent - 0.004
    print(f"spend overshoot: ${overshoot:+.6f} ({overshoot / per_cell:+.2f} of a cell's ${per_cell:.6f}); "
          f"{len(attempts)} attempts, {answers} answers served")
    assert outcome.stopped == "spend", (outcome.stopped, outcome.detail)
    assert spent == pytest.approx(served_usd, rel=1e-6)  # what the report counts is what was served
    assert overshoot < per_cell


def test_a_weekly_limit_cools_its_login_until_the_reset_without_burning_the_cell(tmp_path: Path) -> None:
    """The real Claude Code on a subscription login answered its WEEKLY limit (the seven-day
    window's 429, reset three days on; the CLI prints "You've hit your weekly limit · resets Dec 6,
    3:05pm (UTC)"): the account cools until that reset, not the 60 s default, durably (``accounts
    status`` without the run shows it), no second cell starts on it, and its cell is not burned
    (it is run again on the other login and scored)."""
    reason = missing("claude")
    require_service("agent CLI claude", reason is None, reason or "")
    from typer.testing import CliRunner

    from ray_bench.cli.app import app

    reset_at = float(int(time.time()) + 3 * 86400 + 7 * 3600)  # a date and time, days on
    with FakeProvider(default=Answer(input_tokens=200, output_tokens=9)) as fake:
        logins = {}
        for name in ("weekly", "good"):
            home = tmp_path / "logins" / name
            (home / ".claude").mkdir(parents=True)
            (home / ".claude" / ".credentials.json").write_text(json.dumps(fake.issue_login(name)))
            logins[name] = home
        fake.usage_limit_for, fake.usage_limit_window = ("weekly", reset_at), "seven_day"
        env = {"ANTHROPIC_BASE_URL": fake.url, "CLAUDE_CODE_MAX_RETRIES": "1"}
        accounts = [{"name": name, "route": {"home": str(home)}, "limits": {"max_concurrent": 1}}
                    for name, home in logins.items()]
        suite, accounts_file = make_suite(
            tmp_path / "s", tasks=["hello-world", "sum-list"], accounts=accounts, preflight_cells=0,
            backends={"local": {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}},
            arms=[_arm("baseline", "baseline", "claude-code", "claude-sonnet-4-5", env),
                  _arm("mcp", "variant", "claude-code", "claude-sonnet-4-5", env)])
        started = time.time()
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        attempts, rows = ledger_rows(root)
        answered_at = fake.usage_limit_answered_at
    assert answered_at is not None, "no cell ran on the weekly login"
    limited = [a for a in attempts if a.account == "weekly"]
    # The one cell on the limited login: classed as the provider's window, not counted against
    # the cell's attempts; no cell started on that login after it.
    assert len(limited) == 1, [(a.account, a.failure_class, a.started_at) for a in attempts]
    assert limited[0].failure_class == "provider" and not limited[0].counts and not limited[0].valid, limited[0]
    with Ledger.reading(root) as ledger:
        summary = ledger.summary(limited[0].attempt_id)
    assert summary is not None and summary.agent_error is not None, summary
    error = summary.to_json()["agent_error"]
    assert error["type"] == "usage_limit" and "weekly limit" in error["message"], error
    assert error["reset_at"] == pytest.approx(reset_at, abs=60), error  # the date, not today's clock
    # Not burned: every cell scored on the good login.
    assert len(rows) == 4 and all(r.account == "good" and r.valid for r in rows.values()), outcome.detail
    # The login cools until its reset, kept in the state root: accounts status reads it back.
    state = os.environ["RAY_BENCH_STATE_ROOT"]
    shown = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(accounts_file), "--json",
                                     "--state-root", state])
    assert shown.exit_code == 0, shown.output
    status = {r["name"]: r for r in json.loads(shown.stdout)}
    weekly = status["weekly"]
    assert weekly["state"] == "cooling", weekly
    assert reset_at - 60 <= weekly["cooling_until"] <= reset_at + 120, (weekly, reset_at)
    assert weekly["cooldown_left_sec"] > 3 * 86400 - (time.time() - started), weekly
    assert "weekly limit" in (weekly["last_error"] or "") and "resets" in weekly["last_error"], weekly
    assert status["good"]["state"] == "healthy", status["good"]
    text = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(accounts_file), "--state-root", state])
    assert text.exit_code == 0 and "weekly" in text.stdout and "cooling" in text.stdout, text.output
    print(f"weekly limit: reset in {(reset_at - answered_at) / 86400:.2f} d, account cooling "
          f"{weekly['cooldown_left_sec'] / 86400:.2f} d; {len(attempts)} attempts, {len(rows)} rows")
