"""Every `ray-bench ...` command an operator is told to run in ops/runbooks/ parses against the
CLI (each word a command, each option one the command has, every required option given), so a
runbook cannot drift from the CLI again (issue 56: `accounts release --accounts A` exited 2)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from ray_bench.cli.docgen import cli_command

RUNBOOKS = Path(__file__).resolve().parents[2] / "ops" / "runbooks"
#: A command in backticks, possibly wrapped over lines in the Markdown source.
_COMMAND = re.compile(r"`(ray-bench\s[^`]+)`")


def runbook_commands(text: str) -> list[str]:
    """The ``ray-bench`` command lines of a runbook, whitespace folded, ``[--opt]`` unbracketed."""
    return [re.sub(r"[\[\]]", "", " ".join(m.group(1).split())) for m in _COMMAND.finditer(text)]


def parse_problem(line: str) -> str | None:
    """Why ``line`` would not parse as a ray-bench command (None when it would). Values are
    placeholders (``runs/ID``, ``A``), so only the shape is checked: the words name a command,
    every option exists and takes its value, required options and arguments are there."""
    words = shlex.split(line)[1:]
    command: Any = cli_command()
    while isinstance(getattr(command, "commands", None), dict):
        if not words or words[0] not in command.commands:
            return f"{words[:1] or 'nothing'} is not a subcommand of {command.name} ({', '.join(command.commands)})"
        command, words = command.commands[words[0]], words[1:]
    ctx = command.context_class(command, info_name="ray-bench")  # parsing nothing yet: the parser raises
    try:
        opts, extra, _ = command.make_parser(ctx).parse_args(list(words))
    except Exception as exc:  # the vendored click's UsageError subclasses
        return f"{type(exc).__name__}: {exc}"
    if extra:
        return f"unexpected argument(s) {extra}"
    missing = [p.opts[0] if p.opts else p.name for p in command.params if p.required and p.name not in opts]
    return f"missing {', '.join(missing)}" if missing else None


def _all() -> list[tuple[str, str]]:
    return [(path.name, line) for path in sorted(RUNBOOKS.glob("*.md")) for line in runbook_commands(path.read_text())]


def test_the_runbooks_name_commands_at_all() -> None:
    found = _all()
    assert len({name for name, _ in found}) >= 10 and len(found) >= 30


@pytest.mark.parametrize(("runbook", "line"), _all())
def test_each_runbook_command_parses(runbook: str, line: str) -> None:
    assert parse_problem(line) is None, f"{runbook}: `{line}`: {parse_problem(line)}"


@pytest.mark.parametrize(("line", "why"), [
    ("ray-bench accounts release --accounts A", "missing --name"),
    ("ray-bench accounts enable X --reason TEXT", "missing --accounts"),
    ("ray-bench accounts unhold --accounts A", "not a subcommand"),
    ("ray-bench status runs/ID --verbose", "NoSuchOption"),
    ("ray-bench pause runs/ID runs/OTHER", "unexpected argument"),
    ("ray-bench execute --plan", "BadOptionUsage"),
])
def test_the_checker_catches_what_drifted(line: str, why: str) -> None:
    assert why in (parse_problem(line) or "")


# -- the runbooks' fixes, run against a state that needs them -----------------------------------

def _runbook_line(runbook: str, words: str, values: dict[str, str]) -> list[str]:
    """The runbook's command holding ``words``, its placeholders filled in, as argv after ``ray-bench``."""
    line = next(c for c in runbook_commands((RUNBOOKS / runbook).read_text()) if words in c)
    return [values.get(w, w) for w in shlex.split(line)[1:]]


def _accounts(tmp_path: Path) -> Path:
    path = tmp_path / "accounts.yaml"
    path.write_text("accounts:\n"
                    "  - name: a\n    route: {env: {K: RB_TEST_KEY_A}}\n    limits: {max_concurrent: 2}\n"
                    "  - name: b\n    route: {env: {K: RB_TEST_KEY_B}}\n    limits: {max_concurrent: 2}\n")
    return path


def test_the_account_disabled_runbook_brings_a_disabled_account_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from support.ray_local import set_test_routes
    from typer.testing import CliRunner

    from ray_bench.accounts.keepers import AccountGrants
    from ray_bench.accounts.store import AccountStore
    from ray_bench.cli import app
    from ray_bench.config.loader import load_accounts

    set_test_routes()
    root = tmp_path / "state"
    monkeypatch.setenv("RAY_BENCH_STATE_ROOT", str(root))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    accounts = _accounts(tmp_path)
    store = AccountStore(root)
    store.save_health("b", state="disabled", cooling_until=float("-inf"), episodes=0, auth_failures=2,
                      last_error="auth: 401 invalid x-api-key", events_seen=0)
    store.close()

    def state() -> dict[str, object]:
        rows = json.loads(CliRunner().invoke(app, ["accounts", "status", "--accounts", str(accounts), "--json"]).stdout)
        return next(r for r in rows if r["name"] == "b")

    # what the runbook said before issue 56 leaves it disabled, and now says so
    old = CliRunner().invoke(app, ["accounts", "release", "--accounts", str(accounts), "--name", "b"])
    assert old.exit_code == 0 and "b was not held: nothing released; it is disabled" in old.stdout
    assert "accounts enable b" in old.stdout and state()["state"] == "disabled"

    argv = _runbook_line("RayBenchAccountDisabled.md", "accounts enable", {"N": "b", "A": str(accounts)})
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert (state()["state"], state()["enable_pending"]) == ("disabled", True)
    table = CliRunner().invoke(app, ["accounts", "status", "--accounts", str(accounts)]).stdout
    assert "disabled (enable pending)" in table
    # the account's actor applies it on its next call (a keeper is the actor without Ray)
    limits = next(a.limits for a in load_accounts(accounts).accounts if a.name == "b")
    keeper = AccountGrants("b", limits, str(root))
    keeper.acquire_many("run-1", [])
    assert keeper.store is not None
    keeper.store.close()
    assert (state()["state"], state()["enable_pending"]) == ("healthy", False)


def test_the_circuit_open_runbook_reopens_an_account_circuit(tmp_path: Path) -> None:
    from support.ray_local import set_test_routes
    from support.virtual_run import Run
    from typer.testing import CliRunner

    from ray_bench.cli import app
    from ray_bench.ledger import events as ev
    from ray_bench.ledger.store import Ledger

    set_test_routes()
    run = Run(tmp_path)
    ledger = Ledger.create(run.root, run_id=run.plan.run_id, plan_identity="sha256:" + "0" * 64)
    ledger.append(ev.CircuitOpen(scope="account:a", fingerprint="fp", failure_class="auth", message="401"))
    ledger.close()
    argv = _runbook_line("RayBenchCircuitOpen.md", "accounts enable",
                         {"X": "a", "A": str(_accounts(tmp_path)), "TEXT": "rotated the key"})
    result = CliRunner().invoke(app, [*argv, "--state-root", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    outcome = run.session()
    ledger = run.ledger()
    try:
        reopened = [e.event.scope for e in ledger.events(ev.CircuitReopened)]
        starts = {row.account for row in ledger.attempts()}
    finally:
        ledger.close()
    assert reopened == ["account:a"] and "a" in starts and outcome.stopped is None
