"""A recorded health recovery reopens an account's circuit at the next session (the driver reads
the ledger and the state root's account store; scheduler/session.py decides)."""

from __future__ import annotations

from pathlib import Path

from support.virtual_run import Run

from ray_bench.accounts.store import AccountStore
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import Ledger


def test_an_enable_recorded_after_the_circuit_opened_reopens_the_account_at_the_next_session(tmp_path: Path) -> None:
    run = Run(tmp_path)
    ledger = Ledger.create(run.root, run_id=run.plan.run_id, plan_identity="sha256:" + "0" * 64)
    ledger.append(ev.CircuitOpen(scope="account:a", fingerprint="fp", failure_class="auth", message="401"))
    ledger.append(ev.CircuitOpen(scope="account:b", fingerprint="fp", failure_class="auth", message="401"))
    ledger.close()
    store = AccountStore(tmp_path / "state")
    store.add_event("a", "enable", "rotated the key", "ops")
    store.close()
    outcome = run.session()
    ledger = run.ledger()
    try:
        reopened = [e.event for e in ledger.events(ev.CircuitReopened)]
        starts = {row.account for row in ledger.attempts()}
    finally:
        ledger.close()
    assert reopened == [ev.CircuitReopened(scope="account:a", via="enable", who="ops", reason="rotated the key")]
    assert starts == {"a"} and outcome.stopped is None  # b's circuit stays open: it takes no cell
