"""Admission actors whose process dies are restarted by Ray in a new process. An account keeper
takes up the slots its leases held (the state root's ``leases`` table), so it admits no more
than its limit meanwhile, and the finishes of the leases from before the restart free their
slots; a pool actor does the same with its sandbox slots (``pool_slots``). An actor that dies
holding the driver's call costs no slot and grants nothing twice (:mod:`ray_bench.onray.gate`)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError
from support.ray_local import ensure_ray

from ray_bench.accounts.keepers import LEASE_TTL_SEC
from ray_bench.accounts.store import AccountStore
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account
from ray_bench.models.plan import PlanCell
from ray_bench.onray.admission import AdmissionActor, Member
from ray_bench.onray.gate import ActorGate, ask
from ray_bench.onray.pool import NAMESPACE
from ray_bench.scheduler.core import LeaseRequest

pytestmark = pytest.mark.ray
NAME = "acct-restart"
RUN = "restart-run"


def _request(i: int) -> LeaseRequest:
    return LeaseRequest(f"{RUN}/c{i}#{i}", PlanCell(id=f"c{i}", task="t", arm="baseline", rep=0, backend="local"),
                        horizon_sec=600.0)


def _pid(member: Member) -> int | None:
    """The pid of the process serving ``member`` (its state root's admission actor)."""
    try:
        return int(ray.get(member.actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30))
    except RayActorError:  # dead, not restarted yet
        return None


def _gate(state: Path, slots: int = 3, pools: dict[str, int] | None = None) -> ActorGate:
    """A gate on one account of ``slots`` slots, its state under ``state``."""
    ensure_ray()
    account = Account.model_validate({"name": NAME, "route": {"env": {"K": "RB_TEST_KEY_A"}},
                                      "limits": {"max_concurrent": slots}})
    return ActorGate(RUN, [account], pools=pools or {}, state_root=state)


def test_a_restarted_account_actor_holds_its_leases_slots(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gate = _gate(state)
    actor = gate.actors[NAME]
    try:
        granted_at = time.time()
        assert sorted(gate.acquire_many([_request(0), _request(1)], granted_at).values()) == [NAME, NAME]
        before = _pid(actor)
        ray.kill(actor.actor, no_restart=False)  # the process dies; Ray restarts the actor
        deadline = time.time() + 120
        while (pid := _pid(actor)) in (None, before):
            assert time.time() < deadline, "the actor was not restarted"
            time.sleep(0.2)
        if time.time() - granted_at > LEASE_TTL_SEC - 5:
            # A restart this slow (a loaded host) outlived the leases' TTL: held rows are counted
            # only while renewed, and a live driver renews every RENEW_SEC (its gate's refresh),
            # which the restarted process then takes up from the state root.
            ray.get(actor.renew.remote(RUN))
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
        ray.kill(actor.actor, no_restart=True)


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def _dies_answering(state: Path) -> Any:
    """An admission actor that, while ``state/die`` exists, applies and writes down an account's
    acquire (its leases held, the finishes that rode along learnt) and then dies before it
    answers: the worst moment for the driver. Ray restarts it, as it would the real one."""

    class DiesAnswering(AdmissionActor.__ray_actor_class__):  # type: ignore[name-defined,misc]
        def call(self, kind: str, name: str, init: tuple[Any, ...], method: str, *args: Any, **kwargs: Any) -> Any:
            answer = super().call(kind, name, init, method, *args, **kwargs)
            die = state / "die"
            if (kind, method) == ("account", "acquire_many") and die.exists():
                die.unlink()
                os._exit(1)
            return answer

    return ray.remote(num_cpus=0, max_restarts=-1)(DiesAnswering).options(
        name=f"admission-dies@{state}", namespace=NAMESPACE, lifetime="detached",
    ).remote(str(state))


def _rebind(gate: ActorGate, actor: Any) -> Member:
    """Point every member of ``gate`` at ``actor`` (killing the one it had); the account's member."""
    ray.kill(gate.actors[NAME].actor, no_restart=True)
    gate.actors = {n: dataclasses.replace(m, actor=actor) for n, m in gate.actors.items()}
    gate.health = dataclasses.replace(gate.health, actor=actor)
    gate.pools = {n: dataclasses.replace(m, actor=actor) for n, m in gate.pools.items()}
    return gate.actors[NAME]


def test_an_acquire_whose_actor_dies_answering_grants_nothing_and_leaks_no_slot(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gate = _gate(state)
    actor = _rebind(gate, _dies_answering(state))
    ok = Verdict(valid=True, failure_class=None, fingerprint=None, message="", effect="success")
    try:
        assert sorted(gate.acquire_many([_request(0), _request(1)], time.time())) == [f"{RUN}/c0#0", f"{RUN}/c1#1"]
        gate.release(NAME, f"{RUN}/c0#0", ok, 0.0, time.time())  # rides along the next acquire
        (state / "die").touch()
        time.sleep(0.6)  # past the gate's snapshot cache
        before = _pid(actor)
        # The actor starts c2 and c3 and learns c0's finish, writes it all down, and dies.
        assert gate.acquire_many([_request(2), _request(3)], time.time()) == {}
        assert not (state / "die").exists()
        deadline = time.time() + 120
        while (pid := _pid(actor)) in (None, before):  # a call while it restarts fails at once
            assert time.time() < deadline, "the actor was not restarted"
            time.sleep(0.2)
        # The restarted actor took up the written-down leases (c1, c2, c3); the gate gives back
        # the two it never got an answer for and sends c0's finish again (those sends failed
        # while the actor restarted: a flush sends them again): only c1 is held.
        gate.flush(wait=True)
        snap = ask([("account", actor.snapshot.remote)])[0]
        assert snap.inflight == 1
        assert [lease.lease_id for lease in AccountStore(state).load(NAME, since=0.0).leases] == [f"{RUN}/c1#1"]

        # No over-admission and no lost slot: of four more cells, two start (the limit is 3).
        time.sleep(0.6)
        granted = gate.acquire_many([_request(i) for i in range(4, 8)], time.time())
        assert sorted(granted) == [f"{RUN}/c4#4", f"{RUN}/c5#5"]
        # A read whose actor died is asked again once Ray has it back. (SIGKILL, not ray.kill:
        # that returns before the process dies, and the old process may answer the read.)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while not _gone(pid):
            time.sleep(0.05)
        assert [v.inflight for v in gate.views(time.time() + 10)] == [3]
        for lease in [f"{RUN}/c1#1", *granted]:
            gate.release(NAME, lease, ok, 0.0, time.time())
        gate.flush(wait=True)
        assert ask([("account", actor.snapshot.remote)])[0].inflight == 0
        assert _pid(actor) not in (None, pid)  # it did die a second time
    finally:
        gate.close()
        ray.kill(actor.actor, no_restart=True)


def test_a_restarted_pool_actor_still_counts_the_sandboxes_running(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gate = _gate(state, slots=10, pools={"local": 2})
    pool = gate.pools["local"]
    try:
        assert sorted(gate.acquire_many([_request(0), _request(1)], time.time())) == [f"{RUN}/c0#0", f"{RUN}/c1#1"]
        before = _pid(pool)
        ray.kill(pool.actor, no_restart=False)  # the process dies; Ray restarts the actor
        deadline = time.time() + 120
        while _pid(pool) in (None, before):
            assert time.time() < deadline, "the pool actor was not restarted"
            time.sleep(0.2)
        assert ray.get(pool.usage.remote()) == (2, 2)  # both sandboxes still count
        time.sleep(0.6)
        assert gate.acquire_many([_request(2), _request(3)], time.time()) == {}  # no third sandbox
        ok = Verdict(valid=True, failure_class=None, fingerprint=None, message="", effect="success")
        gate.release(NAME, f"{RUN}/c0#0", ok, 0.0, time.time())
        gate.flush(wait=True)
        time.sleep(0.6)
        assert list(gate.acquire_many([_request(2), _request(3)], time.time())) == [f"{RUN}/c2#2"]
    finally:
        gate.close()
        ray.kill(pool.actor, no_restart=True)
    assert AccountStore(state).slots("local") == {}  # the run let go of every slot
