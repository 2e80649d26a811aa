"""Every account rate-limited at once: the run waits out the Retry-After, then completes.
Rate-limited attempts are not the cells' fault: none is marked failed, none counts.

The account health policy cools an account for at least its ``cooldown_s`` (60 s unless
accounts.yaml says otherwise) even when the provider's Retry-After is shorter
(``ray_bench.accounts.health``). The accounts here set ``cooldown_s: COOLDOWN`` (it was the 60 s
default, and the test waited a minute for it): the run still waits out every cooldown, which
the test checks against the longer of Retry-After and the cooldown."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.driver_process import ledger_query, wait_for
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite

# The driver and the accounts' health policy in this process (no Ray): the subject is what they
# decide, and a run on the shared Ray started its runner and admission actors first.
pytestmark = [pytest.mark.slow]

RETRY_AFTER = 3.0
STORM_SEC = 2.0
#: The accounts' ``cooldown_s``: above Retry-After, so the wait checked below is the cooldown's.
COOLDOWN = 5.0


def test_all_accounts_rate_limited_the_run_waits_and_completes(tmp_path: Path) -> None:
    storm = tmp_path / "storm-on"
    storm.write_text("429\n")
    signal = ('{"type": "rate_limit", "message": "429 Too Many Requests", '
              f'"retry_after": {RETRY_AFTER:g}}}')
    agent = (f'if [ -f "{storm}" ]; then echo \'{signal}\' > "$LOGS_DIR/agent/error.json"; '
             'exit 1; fi; sh "$SOLUTION_DIR/solve.sh"')
    arm = {"command": agent, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], reps=2, max_attempts=2,
        preflight_cells=1,
        accounts=[{"name": name, "route": {"env": {"DEMO_API_KEY": key}},
                   "limits": {"max_concurrent": 3, "cooldown_s": COOLDOWN}}
                  for name, key in (("acct-a", "RB_TEST_KEY_A"), ("acct-b", "RB_TEST_KEY_B"))],
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm},
              {"name": "mcp", "role": "variant", **arm}])

    root = tmp_path / "runs" / "r1"
    storm_end = [0.0]

    def end_storm() -> None:
        # the storm lasts STORM_SEC from the first rate-limited attempt
        wait_for(lambda: bool(ledger_query(root, "SELECT 1 FROM results")), 120, "a first result")
        time.sleep(STORM_SEC)
        storm.unlink()
        storm_end[0] = time.time()

    thread = threading.Thread(target=end_storm)
    thread.start()
    try:
        outcome, root = plan_and_run(suite, accounts, tmp_path / "runs")
    finally:
        thread.join()

    assert outcome.exit_code == 0, outcome
    assert outcome.stopped is None
    assert outcome.counts == {"pending": 0, "running": 0, "valid": 12, "failed": 0}
    attempts, rows = ledger_rows(root)
    assert len(rows) == 12
    limited = [a for a in attempts if not a.valid]
    # both accounts were hit, every limited attempt is a provider failure that does not count
    assert {a.account for a in limited} == {"acct-a", "acct-b"}
    assert {a.failure_class for a in limited} == {"provider"}
    assert not any(a.counts for a in limited)
    # the run waited: after an account's rate limit it started nothing on it for its cooldown
    # (the longer of Retry-After and cooldown_s)
    wait = max(RETRY_AFTER, COOLDOWN)
    for a in limited:
        assert a.finished_at is not None
        too_soon = [b for b in attempts if b.account == a.account
                    and a.finished_at < b.started_at < a.finished_at + wait - 0.5]
        assert not too_soon, (a, too_soon)
    # and cells were not thrown at the storm: limited attempts stay within a few per account
    # per cooldown (its concurrency limit, 3, each time it reopened)
    windows = STORM_SEC / wait + 1
    assert len(limited) <= 2 * 3 * windows
    assert all(r.started_at >= storm_end[0] - 0.5 for r in rows.values())
