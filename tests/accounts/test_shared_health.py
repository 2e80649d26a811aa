"""Account health shared through the state root, as limits are (issue 29): two keepers of one
account (the plain classes Ray wraps, each with its own connection, as two ``execute``s with
their own local Ray have) take up each other's cooldowns and disabled logins, a laxer word never
overwrites a stricter one, and an operator's enable is not undone by a row written before it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from ray_bench.accounts.core import Refusal
from ray_bench.accounts.health import HealthState
from ray_bench.accounts.keepers import AccountGrants
from ray_bench.accounts.outcome import Outcome
from ray_bench.accounts.store import AccountStore
from ray_bench.models.accounts import AccountLimits

NAME = "acct-health"


def _keeper(root: Path) -> AccountGrants:
    return AccountGrants(NAME, AccountLimits.model_validate({"max_concurrent": 4}), str(root))


def _take(keeper: AccountGrants, run: str, n: int = 1) -> list[str]:
    started, _ = keeper.acquire_many(run, [(f"{run}/c{i}#{time.monotonic_ns()}", f"c{i}", 0.0) for i in range(n)])
    return list(started)


def _stored(root: Path) -> Any:
    store = AccountStore(root)
    try:
        return store.stored_health(NAME)
    finally:
        store.close()


def test_a_rate_limit_one_run_met_cools_the_account_for_the_other(tmp_path: Path) -> None:
    one, two = _keeper(tmp_path), _keeper(tmp_path)
    [hit] = _take(one, "run-a")
    [busy] = _take(two, "run-b")
    one.finish_many("run-a", [(hit, Outcome.rate_limited(retry_after=300, detail="429 from the provider"))])
    cooled = one.snapshot()
    assert cooled.state is HealthState.COOLING

    assert _take(two, "run-b") == []  # the other Ray's keeper refuses too, at its next grant
    seen = two.snapshot()
    assert seen.state is HealthState.COOLING
    assert isinstance(seen.admit, Refusal) and isinstance(cooled.admit, Refusal)
    assert seen.admit.until == cooled.admit.until  # the same end, not a cooldown of its own
    # run-b's cell, started before the 429, succeeds: its keeper's save keeps the cooldown
    two.finish_many("run-b", [(busy, Outcome.success())])
    row = _stored(tmp_path)
    assert row.state == "cooling" and row.cooling_until >= time.time() + 200
    assert _keeper(tmp_path).snapshot().state is HealthState.COOLING  # and a restarted keeper


def test_a_disabled_login_is_disabled_for_every_run_until_the_operator_enables_it(tmp_path: Path) -> None:
    one, two = _keeper(tmp_path), _keeper(tmp_path)
    [bad] = _take(one, "run-a")
    one.finish_many("run-a", [(bad, Outcome.auth_failed("401 invalid x-api-key"))])
    assert one.snapshot().state is HealthState.DISABLED
    assert _take(two, "run-b") == [] and two.snapshot().state is HealthState.DISABLED

    store = AccountStore(tmp_path)
    store.add_event(NAME, "enable", "key rotated", "sre")
    store.close()
    deadline = time.monotonic() + 10  # a keeper applies operator events at most once a second
    while two.snapshot().state is HealthState.DISABLED and time.monotonic() < deadline:
        time.sleep(0.2)
    # two applied the enable; the disabled row one wrote before it does not disable two again
    assert two.snapshot().state is HealthState.HEALTHY
    assert len(_take(two, "run-b")) == 1
    while one.snapshot().state is HealthState.DISABLED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert one.snapshot().state is HealthState.HEALTHY


def test_a_keeper_does_not_take_up_its_own_row_again(tmp_path: Path) -> None:
    """A cooldown a keeper itself ended (the account's health recovered) stays ended: only
    another keeper's row is taken up."""
    one = _keeper(tmp_path)
    [hit] = _take(one, "run-a")
    one.finish_many("run-a", [(hit, Outcome.rate_limited(retry_after=300))])
    assert one.snapshot().state is HealthState.COOLING
    one.core.health.cooling_until = time.time() - 1  # as if its cooldown had run out
    assert one.snapshot().state is not HealthState.COOLING
    assert len(_take(one, "run-a")) == 1


def test_a_health_row_from_before_writers_were_named_is_read_and_not_taken_up_live(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "accounts.sqlite")
    db.execute("CREATE TABLE health (account TEXT PRIMARY KEY, state TEXT NOT NULL, cooling_until REAL NOT NULL, "
               "episodes INTEGER NOT NULL, auth_failures INTEGER NOT NULL, last_error TEXT NOT NULL, "
               "updated_at REAL NOT NULL, events_seen INTEGER NOT NULL DEFAULT 0)")
    now = time.time()
    db.execute("INSERT INTO health VALUES (?, 'cooling', ?, 1, 0, 'old 429', ?, 0)", (NAME, now + 300, now))
    db.commit()
    db.close()
    keeper = _keeper(tmp_path)  # migrated; restored from the row as before
    assert keeper.snapshot().state is HealthState.COOLING
    row = _stored(tmp_path)
    assert (row.state, row.writer, row.last_error) == ("cooling", "", "old 429")
