import pytest

from ray_bench.sim import build_workload, lower_bound, parse_spec, simulate


def spec(accounts: list[dict[str, object]], events: list[dict[str, object]] | None = None,
         tasks: int = 4, **kw: object) -> dict[str, object]:
    return {"suite": {"tasks": tasks, "arms": ["a"]},
            "durations": {"lognormal": {"median_s": 100, "sigma": 0}, "cell_noise_sigma": 0},
            "accounts": accounts, "events": events or [], **kw}


def bound(raw: dict[str, object]) -> float:
    s = parse_spec(raw)
    return lower_bound(s, build_workload(s)).seconds


def test_work_over_slots_or_longest_cell() -> None:
    assert bound(spec([{"name": "x", "max_concurrent": 2}])) == pytest.approx(200.0)
    assert bound(spec([{"name": "x", "max_concurrent": 8}])) == pytest.approx(100.0)


def test_backend_slots_cap_capacity() -> None:
    assert bound(spec([{"name": "x", "max_concurrent": 8}], backend_slots=1)) == pytest.approx(
        400.0)


def test_auth_loss_removes_capacity_storms_do_not() -> None:
    accts = [{"name": "x", "max_concurrent": 2}, {"name": "y", "max_concurrent": 2}]
    assert bound(spec(accts)) == pytest.approx(100.0)
    # y is gone after 50 s: 2t + 2*50 >= 400  ->  t = 150
    loss = [{"kind": "auth_loss", "account": "y", "at_h": 50 / 3600}]
    assert bound(spec(accts, loss)) == pytest.approx(150.0)
    storm = [{"kind": "storm", "account": "y", "start_h": 0.0, "length_min": 60}]
    assert bound(spec(accts, storm)) == pytest.approx(100.0)


def test_cell_quota_limits_work() -> None:
    # One start per hour, four 100-s cells: the 4th cannot start before 3 h.
    raw = spec([{"name": "x", "max_concurrent": 4, "window": {"hours": 1, "max_cells": 1}}])
    lb = bound(raw)
    assert lb == pytest.approx(3 * 3600, rel=1e-6)
    r = simulate({**raw, "policies": ["adaptive"]}).results["adaptive"]
    assert r.makespan_s == pytest.approx(3 * 3600 + 100, abs=60)  # + sandbox creation and polling
    assert r.wasted_attempts == 0
    assert r.makespan_s >= lb


def test_no_capacity_is_infinite() -> None:
    loss = [{"kind": "auth_loss", "account": "x", "at_h": 0}]
    assert bound(spec([{"name": "x", "max_concurrent": 1}], loss)) == float("inf")
