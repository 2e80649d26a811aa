"""On Ray: two cells whose verifiers take their key from one judge account of one slot never
verify at the same time, though their own account has room for both (the judge's lease is
held for the cell's life, through the admission actor; tests/scheduler/test_judge_leases.py has
the decisions without Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.runs import ledger_rows, plan_and_run
from support.suites import make_suite

pytestmark = [pytest.mark.ray]

JUDGE = {"role": "judge", "model": "claude-haiku-4-5", "route": "judge", "billing": "api"}


def test_two_cells_sharing_a_one_slot_judge_account_never_verify_together(tmp_path: Path) -> None:
    log = tmp_path / "verifies.log"
    arms = [{"name": n, "role": r, "command": 'sh "$SOLUTION_DIR/solve.sh"', "expose_solution": True,
             "roles": [JUDGE]} for n, r in (("baseline", "baseline"), ("judged", "variant"))]
    accounts = [  # the agents' account has room for both cells; the judge has one slot
        {"name": "agents", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}},
        {"name": "judge", "route": {"env": {"ANTHROPIC_API_KEY": "RB_TEST_KEY_B"}}, "limits": {"max_concurrent": 1}}]
    suite, accs = make_suite(tmp_path / "s", tasks=["hello-world"], arms=arms, accounts=accounts,
                             preflight_cells=0, max_attempts=1,
                             backends={"local": {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}})
    task = tmp_path / "s" / "tasks" / "hello-world"
    (task / "task.toml").write_text((task / "task.toml").read_text().replace(
        "[verifier]\ntimeout_sec = 30.0\n",
        '[verifier]\ntimeout_sec = 30.0\n\n[verifier.env]\nANTHROPIC_API_KEY = "${ANTHROPIC_API_KEY}"\n'))
    with (task / "tests" / "test.sh").open("a") as script:  # a judge's call, seen from outside
        script.write(f'echo "start $(date +%s.%N)" >> {log}\nsleep 2\necho "end $(date +%s.%N)" >> {log}\n')

    outcome, root = plan_and_run(suite, accs, tmp_path / "runs")

    assert outcome.exit_code == 0 and outcome.counts["valid"] == 2
    attempts, _ = ledger_rows(root)
    assert sorted(a.arm for a in attempts) == ["baseline", "judged"]
    marks = [(float(t), kind) for kind, t in (line.split() for line in log.read_text().splitlines())]
    assert [k for _, k in marks].count("start") == 2
    running = most = 0
    for _, kind in sorted(marks):
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 1, marks  # one verifier at a time: the judge's one slot
