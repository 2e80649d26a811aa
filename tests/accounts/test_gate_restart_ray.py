"""An account actor whose process dies is restarted by Ray in a new process; it takes up the
slots its leases held (the state root's ``leases`` table), so it admits no more than its
limit meanwhile, and the finishes of the leases from before the restart free their slots."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError
from support.ray_local import ensure_ray

from ray_bench.accounts.gate import ActorGate
from ray_bench.accounts.store import AccountStore
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.models.plan import PlanCell
from ray_bench.scheduler.core import LeaseRequest

pytestmark = pytest.mark.ray
NAME = "acct-restart"
RUN = "restart-run"


def _request(i: int) -> LeaseRequest:
    return LeaseRequest(f"{RUN}/c{i}#{i}", PlanCell(id=f"c{i}", task="t", arm="baseline", rep=0, backend="local"),
                        horizon_sec=600.0)


def _pid(actor: Any) -> int | None:
    try:
        return int(ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30))
    except RayActorError:  # dead, not restarted yet
        return None


def test_a_restarted_account_actor_holds_its_leases_slots(tmp_path: Path) -> None:
    ensure_ray()
    account = Account.model_validate({"name": NAME, "route": {"env": {"K": "RB_TEST_KEY_A"}},
                                      "limits": {"max_concurrent": 3}})
    state = tmp_path / "state"
    gate = ActorGate(RUN, [account], pools={}, state_root=state)
    actor = gate.actors[NAME]
    try:
        assert sorted(gate.acquire_many([_request(0), _request(1)], time.time()).values()) == [NAME, NAME]
        before = _pid(actor)
        ray.kill(actor, no_restart=False)  # the process dies; Ray restarts the actor
        deadline = time.time() + 120
        while (pid := _pid(actor)) in (None, before):
            assert time.time() < deadline, "the actor was not restarted"
            time.sleep(0.2)
        snap = ray.get(actor.snapshot.remote())
        assert snap.inflight == 2  # the new process holds the two slots

        # No over-admission: of four more cells only the third slot starts.
        time.sleep(0.6)  # past the gate's snapshot cache
        granted = gate.acquire_many([_request(i) for i in range(2, 6)], time.time())
        assert list(granted) == [f"{RUN}/c2#2"]
        assert ray.get(actor.snapshot.remote()).inflight == 3

        # No lost lease: the finishes of the leases started before the restart free their slots.
        ok = Verdict(valid=True, failure_class=None, fingerprint=None, message="", effect="success")
        for i in range(3):
            gate.release(NAME, f"{RUN}/c{i}#{i}", ok, 0.0, time.time())
        gate.flush()
        snap = ray.get(actor.snapshot.remote())
        assert snap.inflight == 0 and snap.headroom == 3
        assert AccountStore(state).load(NAME, since=0.0).leases == []
        assert _pid(actor) == pid  # the same (restarted) process answered throughout
    finally:
        gate.close()
        ray.kill(actor, no_restart=True)
