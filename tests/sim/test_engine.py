import json
from typing import Any

from ray_bench.sim import simulate

SMALL: dict[str, Any] = {
    "seed": 11,
    "suite": {"tasks": 30, "arms": ["base", "mcp"], "reps": 2},
    "durations": {"lognormal": {"median_s": 360, "sigma": 1.2, "max_s": 7200}},
    "history": {"noise_sigma": 0.3},
    "accounts": [
        {"name": "a", "max_concurrent": 6},
        {"name": "b", "max_concurrent": 4},
        {"name": "c", "max_concurrent": 2, "window": {"hours": 5, "max_cells": 10}},
    ],
}


def run(**patch: Any) -> dict[str, Any]:
    return simulate({**SMALL, **patch}).to_dict()


def test_clean_run_completes_without_waste() -> None:
    r = run(policies=["adaptive"])
    a = r["policies"]["adaptive"]
    assert a["cells_lost"] == 0
    assert a["duplicate_rows"] == 0
    assert a["rows"] == r["cells"] == 120
    assert a["wasted_attempts"] == 0  # the quota is known, so never hit
    assert 1.0 <= a["ratio_to_lower_bound"] < 1.15
    json.dumps(r)


def test_deterministic() -> None:
    assert run()["policies"] == run()["policies"]


def test_storm_learns_from_the_first_signal() -> None:
    storm = [{"kind": "storm", "account": "a", "start_h": 0.5, "length_min": 30,
              "retry_after_s": 60}]
    r = run(events=storm)
    ad, rr = r["policies"]["adaptive"], r["policies"]["round-robin"]
    assert ad["cells_lost"] == 0
    assert 1 <= ad["wasted_attempts"] <= 8  # first signal(s) plus a few backed-off probes
    assert rr["wasted_attempts"] > ad["wasted_attempts"]
    assert ad["makespan_s"] >= r["lower_bound_s"]


def test_auth_loss_disables_the_account_and_loses_no_cell() -> None:
    loss = [{"kind": "auth_loss", "account": "b", "at_h": 0.3}]
    r = run(events=loss)
    ad = r["policies"]["adaptive"]
    assert ad["cells_lost"] == 0
    assert ad["duplicate_rows"] == 0
    # In-flight attempts on b fail too (at most its 4 slots), plus the first new one at most.
    assert 1 <= ad["wasted_attempts"] <= 5
    assert r["policies"]["round-robin"]["cells_lost"] > 0
    assert r["policies"]["global-semaphore"]["wasted_attempts"] > ad["wasted_attempts"]


def test_every_account_lost_strands_cells_without_hanging() -> None:
    loss = [{"kind": "auth_loss", "account": n, "at_h": 0.2} for n in "abc"]
    r = run(events=loss, policies=["adaptive"])
    assert r["policies"]["adaptive"]["cells_lost"] > 0
    assert r["lower_bound_s"] == float("inf")


def test_global_semaphore_overruns_small_accounts() -> None:
    r = run(history=None)
    gs = r["policies"]["global-semaphore"]
    assert gs["wasted_attempts"] > 0  # turns on full accounts come back 429


def test_deadline_answer() -> None:
    r = run(deadline_h=1.0, policies=["adaptive"])
    assert r["policies"]["adaptive"]["meets_deadline"] is False
    r = run(deadline_h=100.0, policies=["adaptive"])
    assert r["policies"]["adaptive"]["meets_deadline"] is True


def test_backend_slots_cap_parallelism() -> None:
    wide = run(policies=["adaptive"])["policies"]["adaptive"]["makespan_s"]
    narrow = run(policies=["adaptive"], backend_slots=3)["policies"]["adaptive"]["makespan_s"]
    assert narrow > wide * 1.5
