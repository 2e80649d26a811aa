"""`ray-bench accounts status|probe|hold|release` without a cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.ray_local import set_test_routes
from typer.testing import CliRunner

from ray_bench.cli import app

set_test_routes()


def _accounts(tmp_path: Path, home: Path | None = None, probe: str | None = None) -> Path:
    route_b = f"{{home: {home}}}" if home else "{env: {K: RB_TEST_KEY_B}}"
    text = ("accounts:\n"
            "  - name: a\n    route: {env: {K: RB_TEST_KEY_A}}\n    limits: {max_concurrent: 3, "
            "window: {hours: 5, max_cells: 40}}\n"
            + (f"    probe_command: \"{probe}\"\n" if probe else "")
            + f"  - name: b\n    route: {route_b}\n    limits: {{max_concurrent: 2}}\n")
    path = tmp_path / "accounts.yaml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_BENCH_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_status_shows_limits_and_recommended_parallelism(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(_accounts(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["a"]["limit"] == 3 and rows["a"]["recommended_parallelism"] == 3
    assert rows["a"]["state"] == "healthy" and rows["a"]["source"] == "config"
    assert rows["b"]["route"] == "K<-$RB_TEST_KEY_B"
    assert "test-value" not in result.stdout  # routes by name, never values


def test_hold_and_release_are_remembered(tmp_path: Path) -> None:
    accounts = str(_accounts(tmp_path))
    runner = CliRunner()
    assert runner.invoke(app, ["accounts", "hold", "--accounts", accounts, "--name", "b",
                               "--reason", "quota dispute"]).exit_code == 0
    rows = {r["name"]: r for r in json.loads(runner.invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json"]).stdout)}
    assert rows["b"]["state"] == "held" and rows["b"]["hold"]["reason"] == "quota dispute"
    assert rows["b"]["recommended_parallelism"] == 0
    assert runner.invoke(app, ["accounts", "release", "--accounts", accounts, "--name", "b"]).exit_code == 0
    rows = {r["name"]: r for r in json.loads(runner.invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json"]).stdout)}
    assert rows["b"]["state"] == "healthy"
    bad = runner.invoke(app, ["accounts", "hold", "--accounts", accounts, "--name", "zzz"])
    assert bad.exit_code == 2 and "unknown account(s) zzz" in bad.stderr


def test_expired_home_login_is_reported(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps(
        {"claudeAiOauth": {"accessToken": "x" * 20, "expiresAt": int((time.time() - 60) * 1000)}}))
    result = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(_accounts(tmp_path, home)), "--json"])
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["b"]["state"] == "expired" and rows["b"]["recommended_parallelism"] == 0
    assert "x" * 20 not in result.stdout
    probe = CliRunner().invoke(app, ["accounts", "probe", "--accounts", str(_accounts(tmp_path, home)), "--json"])
    verdicts = {r["name"]: r["verdict"] for r in json.loads(probe.stdout)}
    assert verdicts == {"a": "no-probe", "b": "expired"}
    assert probe.exit_code == 1


def test_probe_classifies_a_rate_limited_answer(tmp_path: Path) -> None:
    accounts = _accounts(tmp_path, probe="echo HTTP 429 Too Many Requests for $K; exit 1")
    result = CliRunner().invoke(app, ["accounts", "probe", "--accounts", str(accounts), "--json"])
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["a"]["verdict"] == "provider" and "rate-limit" in rows["a"]["detail"]
    assert "test-value-a" not in result.stdout  # the key echoed by the probe is redacted
    assert result.exit_code == 1


def test_enable_is_recorded_with_who_and_why_and_refuses_unknown_accounts(tmp_path: Path) -> None:
    from ray_bench.accounts.store import AccountStore

    accounts = str(_accounts(tmp_path))
    bad = CliRunner().invoke(app, ["accounts", "enable", "nope", "--accounts", accounts, "--reason", "x"])
    assert bad.exit_code == 2 and "unknown account nope" in bad.output
    ok = CliRunner().invoke(app, ["accounts", "enable", "a", "--accounts", accounts, "--reason", "new login"])
    assert ok.exit_code == 0, ok.output
    events = AccountStore(tmp_path / "state").events_after("a", 0)
    assert [(e.kind, e.reason) for e in events] == [("enable", "new login")] and events[0].who


def _durable_state(root: Path, now: float) -> None:
    """What two account actors left under the state root before their cluster went away."""
    from ray_bench.accounts.store import AccountStore

    store = AccountStore(root)
    try:
        store.record_start("a", now - 600)
        store.record_start("a", now - 300)
        store.record_spend("a", now - 300, 0.75)
        store.save_health("a", state="cooling", cooling_until=now + 3600, episodes=1, auth_failures=0,
                          last_error="usage_limit: resets 6:33pm (UTC)", events_seen=0)
        store.save_health("b", state="disabled", cooling_until=float("-inf"), episodes=0, auth_failures=2,
                          last_error="auth: 401 invalid x-api-key", events_seen=0)
    finally:
        store.close()


def test_status_without_a_cluster_shows_the_durable_state(tmp_path: Path) -> None:
    now = time.time()
    _durable_state(tmp_path / "state", now)
    accounts = str(_accounts(tmp_path))
    result = CliRunner().invoke(app, ["accounts", "status", "--accounts", accounts, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    a, b = rows["a"], rows["b"]
    assert (a["state"], a["source"], a["recommended_parallelism"]) == ("cooling", "state root", 0)
    assert a["cooling_until"] == pytest.approx(now + 3600, abs=5)
    assert a["cooldown_left_sec"] > 3000 and "usage_limit" in a["last_error"]
    assert (a["spent_usd"], a["window_used"], a["window_usd"]) == (0.75, 2, 0.75)
    assert (b["state"], b["recommended_parallelism"]) == ("disabled", 0) and "401" in b["last_error"]

    text = CliRunner().invoke(app, ["accounts", "status", "--accounts", accounts]).stdout
    assert "a: cooling until " in text and "spent $0.75; window 2 cells, $0.75 [state root]" in text
    assert "b: disabled (auth: 401 invalid x-api-key)" in text

    # an enable recorded but not yet applied by an actor says so; nothing else changed
    CliRunner().invoke(app, ["accounts", "enable", "b", "--accounts", accounts, "--reason", "new key"])
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json"]).stdout)}
    assert rows["b"]["state"] == "disabled" and rows["b"]["enable_pending"] is True


def test_status_reads_the_state_root_it_is_given_and_writes_nothing_there(tmp_path: Path) -> None:
    accounts = str(_accounts(tmp_path))
    elsewhere = tmp_path / "other-root"
    _durable_state(elsewhere, time.time())
    before = sorted(p.name for p in elsewhere.iterdir())
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json", "--state-root", str(elsewhere)]).stdout)}
    assert rows["b"]["state"] == "disabled"
    assert sorted(p.name for p in elsewhere.iterdir()) == before
    default = {r["name"]: r for r in json.loads(CliRunner().invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json"]).stdout)}
    assert default["b"]["state"] == "healthy" and default["b"]["source"] == "config"
    assert not (tmp_path / "state" / "accounts.sqlite").exists()  # reading created no store


def test_a_state_root_that_is_not_one_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad-root"
    bad.mkdir()
    (bad / "accounts.sqlite").write_text("not a database")
    result = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(_accounts(tmp_path)),
                                      "--state-root", str(bad)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot read the accounts' state" in lines[0], result.stderr


def test_a_lifetime_spend_that_is_not_exact_says_so(tmp_path: Path) -> None:
    """Charges of a CLI cut before it recorded every call are a lower bound, and those of
    unknown cost were counted at the cell's expected cost: `accounts status` says both, and a
    state root written before the bound was recorded reads as exact."""
    import sqlite3

    from ray_bench.accounts.store import FILE, AccountStore

    now = time.time()
    root = tmp_path / "state"
    store = AccountStore(root)
    try:
        store.record_spend("a", now - 30, 0.5)
        store.record_spend("a", now - 20, 0.25, "lower_bound")
        store.record_spend("a", now - 10, 0.1, "unknown")
        store.record_spend("b", now - 10, 0.2)
    finally:
        store.close()
    accounts = str(_accounts(tmp_path))
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json"]).stdout)}
    assert (rows["a"]["spent_usd"], rows["a"]["spent_lower_bound"], rows["a"]["spent_unknown"]) == (0.85, 1, 1)
    assert (rows["b"]["spent_lower_bound"], rows["b"]["spent_unknown"]) == (0, 0)
    text = CliRunner().invoke(app, ["accounts", "status", "--accounts", accounts]).stdout
    assert ("a: healthy; spent at least $0.85 (1 charge a lower bound; 1 of unknown cost, counted at "
            "the expected cost)") in text, text
    assert ">=$0.85" in text and "b: healthy; spent $0.20 [state root]" in text

    old = tmp_path / "old"  # a file from before the column: its charges read as exact
    store = AccountStore(old)
    store.record_spend("a", now - 5, 0.4, "lower_bound")
    store.close()
    db = sqlite3.connect(old / FILE)
    for drop in ("TRIGGER spend_totals_add", "TRIGGER spend_totals_drop", "TABLE spend_totals"):
        db.execute(f"DROP {drop}")  # nor its lifetime totals, which came later
    db.execute("ALTER TABLE spend DROP COLUMN bound")
    db.commit()
    db.close()
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(
        app, ["accounts", "status", "--accounts", accounts, "--json", "--state-root", str(old)]).stdout)}
    assert (rows["a"]["spent_usd"], rows["a"]["spent_lower_bound"]) == (0.4, 0)


def test_json_output_is_strict_and_an_inf_spend_is_refused_then_repaired(tmp_path: Path) -> None:
    """Issue 58: ``"tokens": Infinity`` (an account with no start rate limit) is not JSON; and a
    state root whose lifetime spend an old ray-bench made ``$inf`` reads finite, says why, and
    ``accounts repair`` clears it with who and why recorded."""
    from ray_bench.accounts.store import AccountStore

    accounts = str(_accounts(tmp_path))
    store = AccountStore(tmp_path / "state")
    store.record_spend("a", time.time(), 0.5)
    store._db.execute("INSERT INTO spend (account, at, usd, bound) VALUES ('a', ?, ?, 'exact')",
                      (time.time(), float("inf")))
    store.close()

    def status() -> tuple[dict[str, dict[str, object]], str]:
        result = CliRunner().invoke(app, ["accounts", "status", "--accounts", accounts, "--json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
        return {r["name"]: r for r in rows}, CliRunner().invoke(app, ["accounts", "status", "--accounts",
                                                                      accounts]).stdout

    rows, text = status()
    assert rows["b"]["tokens"] is None and rows["b"]["tokens_unlimited"] is True
    assert rows["a"]["spent_usd"] == 0.5 and rows["a"]["spent_refused"] == 1
    assert "1 stored charge not finite, not counted" in text and "inf" not in text.split("spent")[1][:20]

    bad = CliRunner().invoke(app, ["accounts", "repair", "--accounts", accounts, "--reason", " "])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")
    fixed = CliRunner().invoke(app, ["accounts", "repair", "--accounts", accounts, "--reason", "inf from r7"])
    assert fixed.exit_code == 0, fixed.output
    assert "a: removed 1 stored charge not finite" in fixed.stdout
    rows, _ = status()
    assert rows["a"]["spent_usd"] == 0.5 and rows["a"]["spent_refused"] == 0
    reader = AccountStore.open_readonly(tmp_path / "state")
    assert reader is not None
    (event,) = reader.events_after("a", 0)
    reader.close()
    assert event.kind == "repair" and "inf from r7" in event.reason and event.who
