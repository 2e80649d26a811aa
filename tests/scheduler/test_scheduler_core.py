"""The one account choice (scheduler/core.py), as both gates and the simulator call it."""

from __future__ import annotations

from ray_bench.models.plan import PlanCell
from ray_bench.scheduler import Candidate, LeaseRequest, assign
from ray_bench.scheduler.core import WindowShare, reserve_below


def req(i: int, expected: float = 0.0, avoid: str | None = None) -> LeaseRequest:
    return LeaseRequest(f"l{i}", PlanCell(id=f"c{i}", task=f"t{i}", arm="a", rep=0, backend="local"),
                        3600.0, expected, avoid)


def names(out: dict[str, list[LeaseRequest]]) -> dict[str, list[str]]:
    return {n: [r.lease_id for r in rs] for n, rs in sorted(out.items())}


def test_headroom_fraction_then_free_slots_and_probe_last() -> None:
    cands = [Candidate("a", 2, 8), Candidate("b", 2, 2), Candidate("c", 4, 4), Candidate("d", 1, 4, probe=True)]
    out = names(assign([req(i) for i in range(9)], cands, 0.0))
    assert out["c"][0] == "l0"  # 4/4 free beats 2/2 on free slots
    assert sum(len(v) for v in out.values()) == 9
    assert out["d"] == ["l8"]  # the degraded account's probe comes last


def test_a_retry_goes_to_another_account_when_one_has_room() -> None:
    cands = [Candidate("a", 4, 4), Candidate("b", 1, 4)]
    assert names(assign([req(0, avoid="a")], cands, 0.0)) == {"b": ["l0"]}
    # ...but it is not refused when the failed account is the only one with room
    assert names(assign([req(0, avoid="a")], [Candidate("a", 4, 4)], 0.0)) == {"a": ["l0"]}


def test_a_cell_failed_by_its_account_waits_for_another_live_one() -> None:
    # "a" answered the cell 500; "b" is live but full: the cell waits for b, not for a again
    shunned = LeaseRequest("l0", req(0).cell, 3600.0, 0.0, "a", shun=True)
    assert names(assign([shunned], [Candidate("a", 4, 4)], 0.0, live=["a", "b"])) == {}
    assert names(assign([shunned, req(1)], [Candidate("a", 4, 4)], 0.0, live=["a", "b"])) == {"a": ["l1"]}
    # with no other live account (b disabled, held or lost) it goes back to a
    assert names(assign([shunned], [Candidate("a", 4, 4)], 0.0, live=["a"])) == {"a": ["l0"]}
    # and when b has room it goes there, as any retry does
    assert names(assign([shunned], [Candidate("a", 4, 4), Candidate("b", 1, 4)], 0.0, live=["a", "b"])) == {"b": ["l0"]}


def test_a_window_bound_account_takes_the_longest_cells_of_the_batch() -> None:
    # w: 4 slots, 10 starts per hour; at 20-min cells it would need 12 starts/hour: window-bound
    cands = [Candidate("big", 6, 6), Candidate("w", 2, 4, window_rate=10 / 3600)]
    requests = [req(0, 300), req(1, 7200), req(2, 600), req(3, 5400), req(4, 60)]
    out = names(assign(requests, cands, typical_sec=1200.0))
    assert out["w"] == ["l1", "l3"]
    assert out["big"] == ["l0", "l2", "l4"]


def test_an_account_bound_by_its_slots_is_not_window_bound() -> None:
    # 100 starts per hour is plenty for 4 slots of 20-minute cells: plain headroom order
    cands = [Candidate("big", 6, 6), Candidate("w", 4, 4, window_rate=100 / 3600)]
    out = names(assign([req(0, 300), req(1, 7200)], cands, typical_sec=1200.0))
    assert out == {"big": ["l0"], "w": ["l1"]}
    assert not Candidate("w", 4, 4, window_rate=100 / 3600).window_bound(1200.0)


def test_no_room_no_grant() -> None:
    assert assign([req(0)], [Candidate("a", 0, 4)], 0.0) == {}
    assert assign([], [Candidate("a", 2, 4)], 0.0) == {}


def test_no_reservation_while_the_long_cells_outnumber_what_the_window_accounts_can_use() -> None:
    a1 = WindowShare(limit=8, rate=40 / (5 * 3600))  # break-even 1 h
    profile = [(3 * 3600.0, 100), (600.0, 1000)]  # 300 slot-hours of long cells
    assert reserve_below(profile, [a1], remaining_sec=10 * 3600) is None  # they need 80


def test_long_cells_are_reserved_once_the_window_accounts_can_use_them_all() -> None:
    a1 = WindowShare(limit=8, rate=40 / (5 * 3600))
    profile = [(2 * 3600.0, 30), (600.0, 1000)]  # 60 slot-hours of long cells
    assert reserve_below(profile, [a1], remaining_sec=10 * 3600) == 3600.0
    small = WindowShare(limit=4, rate=90 / (5 * 3600))  # break-even 13.3 min
    # with a second window account, cells down to its break-even are needed too
    assert reserve_below([(2 * 3600.0, 30), (1200.0, 40)], [small, a1], remaining_sec=10 * 3600) == 800.0


def test_nothing_long_left_reserves_nothing() -> None:
    a1 = WindowShare(limit=8, rate=40 / (5 * 3600))
    assert reserve_below([], [a1], remaining_sec=3600) is None
    assert reserve_below([(60.0, 10)], [a1], remaining_sec=3600) is None
    assert reserve_below([(7200.0, 10)], [], remaining_sec=3600) is None
