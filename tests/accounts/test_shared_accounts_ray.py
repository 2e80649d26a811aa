"""Two runs started at the same time on the same accounts share one budget: sampled from the
state root's admission actor while both run, the combined in-flight count never exceeds a limit."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import ray
from support.ray_local import ensure_ray
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.onray.admission import account_member, admission_actor, admission_name
from ray_bench.onray.gate import actor_gate
from ray_bench.onray.pool import NAMESPACE, RayPool
from ray_bench.plan.store import confirm_plan
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LIMITS = {"shared-a": 2, "shared-b": 1}


def test_two_runs_never_exceed_an_accounts_limit_together(tmp_path: Path) -> None:
    ensure_ray()
    accounts = [{"name": name, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                 "limits": {"max_concurrent": limit}} for name, limit in LIMITS.items()]
    arms = [{"name": "baseline", "role": "baseline", "command": "sleep 0.7"},
            {"name": "mcp", "role": "variant", "command": "sleep 0.7"}]
    roots = []
    for name in ("one", "two"):
        suite, accounts_file = make_suite(
            tmp_path / name, tasks=["hello-world", "sum-list", "fizzbuzz"], reps=2, arms=arms,
            accounts=accounts, preflight_cells=0,
            backends={"local": {"max_sandboxes": 8, "options": {"root": str(tmp_path / "sbx")}}})
        planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=tmp_path / "runs", run_id=f"shared-{name}")
        roots.append((planned.run_root, planned.identity))

    outcomes: list[RunOutcome] = []
    samples: list[dict[str, int]] = []
    running = threading.Event()
    finished = threading.Event()

    def drive(root: Path, identity: str) -> None:
        plan, identity = confirm_plan(root / "launch-plan.json", identity)
        running.set()
        driver = Driver(plan, identity, root, RayPool(), actor_gate(plan), HostSupervision.of(plan),
                        options=RunOptions(tick_sec=0.05))
        outcomes.append(driver.run())

    def sample() -> None:
        # the gates create the actor and its keepers; on a loaded machine that takes longer
        # than any fixed pause
        deadline = time.monotonic() + 180
        while True:
            try:
                actor = ray.get_actor(admission_name(), namespace=NAMESPACE)
                if None not in ray.get([actor.peek.remote("account", n, "snapshot") for n in LIMITS]):
                    break
            except ValueError:
                pass
            assert time.monotonic() < deadline, "the runs' admission actor never held both accounts"
            time.sleep(0.1)
        while not finished.is_set():
            snaps = ray.get([actor.peek.remote("account", n, "snapshot") for n in LIMITS])
            samples.append({s.name: s.inflight for s in snaps})
            time.sleep(0.05)

    threads = [threading.Thread(target=drive, args=root) for root in roots]
    for t in threads:
        t.start()
    running.wait(30)
    sampler = threading.Thread(target=sample)
    sampler.start()
    for t in threads:
        t.join(timeout=300)
    finished.set()
    sampler.join()

    assert [o.exit_code for o in outcomes] == [0, 0]
    assert sum(o.counts["valid"] for o in outcomes) == 24
    assert len(samples) > 20
    for sample_ in samples:
        for name, inflight in sample_.items():
            assert inflight <= LIMITS[name], (name, inflight)
    # both accounts were used at their limit at some point: the budget was shared, not idle
    assert max(s["shared-a"] for s in samples) == 2
    assert max(s["shared-b"] for s in samples) == 1


def test_an_admission_actor_is_shared_within_a_state_root_and_never_across_two(tmp_path: Path) -> None:
    """Each admission actor persists to its state root's accounts.sqlite: runs under one root
    share it (their limits are one budget), a second root on the same cluster gets its own."""
    from ray_bench.models.accounts import Account

    ensure_ray()
    account = Account.model_validate({"name": "rooted", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                                      "limits": {"max_concurrent": 1}})
    one, two = tmp_path / "root-one", tmp_path / "root-two"
    first, again, other = (account_member(admission_actor(root), account, root) for root in (one, one, two))
    ids = [a.actor._actor_id.hex() for a in (first, again, other)]
    assert ids[0] == ids[1] and ids[0] != ids[2]
    names = {e["name"] for e in ray.util.list_named_actors(all_namespaces=True) if isinstance(e, dict)}
    assert {admission_name(one), admission_name(two)} <= names
    ray.get([first.snapshot.remote(), other.snapshot.remote()], timeout=120)  # both answer
    assert (one / "accounts.sqlite").exists() and (two / "accounts.sqlite").exists()
