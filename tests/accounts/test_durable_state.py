"""Account state outlives its actor: a new admission actor (after a Ray restart, or on another
run) takes up the rolling window, the cooldown, the disabled state and the spend; an operator's
`accounts enable` is recorded and applied by the actor."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray
import yaml
from support.ray_local import ensure_ray

from ray_bench.accounts.outcome import Outcome
from ray_bench.accounts.status import enable_account
from ray_bench.accounts.store import AccountStore
from ray_bench.errors import UserInputError
from ray_bench.models.accounts import AccountLimits
from ray_bench.onray.admission import AdmissionActor, Member

pytestmark = pytest.mark.ray
LIMITS = {"max_concurrent": 4, "window": {"hours": 5, "max_cells": 3}}
#: Sent to the actor as is, as account_member() sends an account's limits.
LIMITS_MODEL = AccountLimits.model_validate(LIMITS)


def _actor(root: Path) -> Member:
    admission = AdmissionActor.options(namespace="ray-bench-durable").remote(str(root))  # type: ignore[attr-defined]
    return Member(admission, "account", "acct-d", ("acct-d", LIMITS_MODEL, str(root)))


def _restart(actor: Member, root: Path) -> Member:
    ray.kill(actor.actor, no_restart=True)
    return _actor(root)


def test_window_cooldown_disabled_and_spend_survive_a_new_actor(tmp_path: Path) -> None:
    ensure_ray()
    root = tmp_path / "state"
    actor = _actor(root)
    started, snap = ray.get(actor.acquire_many.remote("r1", [("r1/a", "c1", 0.5), ("r1/b", "c2", 0.5)]))
    assert started == ["r1/a", "r1/b"] and snap.window_used == 2
    ray.get(actor.finish_many.remote("r1", [("r1/a", Outcome.success(usd=1.25)),
                                            ("r1/b", Outcome.rate_limited(retry_after=900))]))
    actor = _restart(actor, root)
    snap = ray.get(actor.snapshot.remote())
    assert snap.window_used == 2 and snap.spent_usd == 1.25
    assert snap.state == "cooling" and snap.cooldown_left > 800

    # Disabled by repeated auth failures (the probe of a degraded account), then a new actor.
    store = AccountStore(root)
    store.save_health("acct-d", state="disabled", cooling_until=0.0, episodes=0, auth_failures=3,
                      last_error="401 invalid api key", events_seen=0)
    actor = _restart(actor, root)
    assert ray.get(actor.snapshot.remote()).state == "disabled"

    accounts = tmp_path / "accounts.yaml"
    accounts.write_text(yaml.safe_dump({"accounts": [
        {"name": "acct-d", "route": {"env": {"K": "RB_TEST_KEY_A"}}, "limits": LIMITS}]}))
    with pytest.raises(UserInputError):
        enable_account(accounts, "nope", reason="x", state_root=root)
    assert enable_account(accounts, "acct-d", reason="new API key", who="ops", state_root=root) == "disabled"
    deadline = time.time() + 30
    while ray.get(actor.snapshot.remote()).state == "disabled":
        assert time.time() < deadline, "the enable was never applied"
        time.sleep(0.2)
    snap = ray.get(actor.snapshot.remote())
    assert "enabled by ops: new API key" in snap.last_error
    # ...and it stays applied for the next actor (it is not applied twice, nor lost).
    actor = _restart(actor, root)
    assert ray.get(actor.snapshot.remote()).state != "disabled"
    ray.kill(actor.actor, no_restart=True)
