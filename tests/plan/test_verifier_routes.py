"""Verifier credentials: a task's ``[verifier].env`` naming a credential variable
(``ANTHROPIC_API_KEY = "${ANTHROPIC_API_KEY}"``, Senior SWE-Bench's LLM judges) is refused unless
every arm routes it through its judge role; then each verifier gets it from that account's route
on the node (recorded by name, the value redacted), and the receipt says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.runs import plan_and_run_here
from support.suites import make_suite

from ray_bench.commands.receipt import render_receipt
from ray_bench.errors import TaskDirError
from ray_bench.plan.compile import PlanRequest, compile_plan

JUDGE_VALUE = "rb-judge-secret-0123456789"
JUDGE = {"role": "judge", "model": "claude-haiku-4-5", "route": "judge", "billing": "api"}


def _suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, roles: list[dict[str, object]]) -> tuple[Path, Path]:
    monkeypatch.setenv("RB_TEST_JUDGE_KEY", JUDGE_VALUE)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the value can only come from the route
    monkeypatch.setenv("RB_TEST_KEY_A", "rb-test-key-a-0123456789")
    arms = [{"name": n, "role": r, "command": 'sh "$SOLUTION_DIR/solve.sh"', "expose_solution": True,
             "roles": roles} for n, r in (("baseline", "baseline"), ("judged", "variant"))]
    accounts = [
        {"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}},
        {"name": "judge", "route": {"env": {"ANTHROPIC_API_KEY": "RB_TEST_JUDGE_KEY"}},
         "limits": {"max_concurrent": 2}}]
    suite, accs = make_suite(tmp_path, tasks=["hello-world"], arms=arms, accounts=accounts, preflight_cells=0,
                             max_attempts=1)
    task = tmp_path / "tasks" / "hello-world"
    (task / "task.toml").write_text((task / "task.toml").read_text().replace(
        "[verifier]\ntimeout_sec = 30.0\n",
        '[verifier]\ntimeout_sec = 30.0\n\n[verifier.env]\nANTHROPIC_API_KEY = "${ANTHROPIC_API_KEY}"\n'))
    with (task / "tests" / "test.sh").open("a") as script:  # what the judge would call the model with
        script.write('printf %s "$ANTHROPIC_API_KEY" > "$out/judge-key.txt"\n')
    return suite, accs


def test_a_verifier_credential_without_a_judge_route_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _suite(tmp_path, monkeypatch, roles=[])
    with pytest.raises(TaskDirError) as info:
        compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r"))
    line = info.value.line()
    assert "verifier.env.ANTHROPIC_API_KEY = ${ANTHROPIC_API_KEY} names the credential variable of account judge" \
        in line and "role: judge" in line and "\n" not in line


def test_a_verifier_gets_its_credential_from_the_judge_route_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _suite(tmp_path, monkeypatch, roles=[JUDGE])
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r"))
    receipt = render_receipt(plan, "sha256:x")
    assert "| judged | ANTHROPIC_API_KEY | judge | ANTHROPIC_API_KEY<-$RB_TEST_JUDGE_KEY | hello-world |" in receipt
    assert JUDGE_VALUE not in receipt and JUDGE_VALUE not in plan.model_dump_json()

    outcome, root = plan_and_run_here(suite, accounts, tmp_path / "runs")
    results = {p.parent: json.loads(p.read_text()) for p in (root / "attempts").glob("*/result.json")}
    assert len(results) == 2 and outcome.exit_code == 0
    for adir, result in results.items():
        assert result["reward"] == 1.0 and result["verifier_account"] == "judge"
        seen = (adir / "logs" / "verifier" / "judge-key.txt").read_text()
        assert seen == "[redacted]"  # the verifier had the value; nothing written keeps it
    assert not any(JUDGE_VALUE in p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_the_receipt_says_the_judge_accounts_limits_bound_the_cells_that_use_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, accounts = _suite(tmp_path, monkeypatch, roles=[JUDGE])
    receipt = render_receipt(compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r")), "sha256:x")
    assert ("- counted on `judge`: each cell whose verifier uses it holds a lease there too, from its start to its "
            "end: at most 2 such cells at a time") in receipt
