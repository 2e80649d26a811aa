"""Which cells the driver asks for (scheduler/reserve.py), from the gate's account views."""

from __future__ import annotations

from ray_bench.models.accounts import Account
from ray_bench.scheduler.admission import AccountView
from ray_bench.scheduler.reserve import Reservation, reservation, window_rates


def account(name: str, slots: int, cells: int | None = None) -> Account:
    return Account.model_validate({"name": name, "route": {"env": {"API_KEY": "K"}},
                                   "limits": {"max_concurrent": slots,
                                              "window": {"hours": 5, "max_cells": cells} if cells else None}})


RATES = window_rates([account("a1", 8, 40), account("a2", 8), account("a7", 4, 90_000)])
LONG = [(2 * 3600.0, 30), (600.0, 1000)]  # 60 slot-hours of cells of 2 h, then short ones


def test_only_cell_count_windows_have_a_rate() -> None:
    assert set(RATES) == {"a1", "a7"}
    assert RATES["a1"] == 40 / (5 * 3600)


def test_the_window_bound_accounts_free_slots_ask_for_long_cells() -> None:
    views = [AccountView("a1", "healthy", 6, 8, headroom=2), AccountView("a2", "healthy", 8, 8),
             AccountView("a7", "healthy", 0, 4, headroom=4)]  # a7's window does not bind
    # 16 slots, 160 slot-hours to go: a1 can use 80 of them, only 60 are in long cells
    r = reservation(RATES, views, typical_sec=600.0, work_sec=160 * 3600.0, profile=iter(LONG))
    assert r == Reservation(long_slots=2, below=3600.0, long_from=3600.0)


def test_dead_and_circuit_open_accounts_take_no_part() -> None:
    views = [AccountView("a1", "expired", 0, 8, headroom=0), AccountView("a2", "healthy", 8, 8)]
    assert reservation(RATES, views, typical_sec=600.0, work_sec=1e6, profile=iter(LONG)) == Reservation()
    views[0] = AccountView("a1", "healthy", 0, 8, headroom=8)
    assert reservation(RATES, views, typical_sec=600.0, work_sec=1e6, profile=iter(LONG),
                       exclude={"a1"}) == Reservation()


def test_plenty_of_long_work_means_longest_first_for_everyone() -> None:
    views = [AccountView("a1", "healthy", 7, 8, headroom=1), AccountView("a2", "healthy", 8, 8)]
    r = reservation(RATES, views, typical_sec=600.0, work_sec=16 * 3600.0, profile=iter(LONG))
    assert r == Reservation(long_slots=1, below=None, long_from=3600.0)
