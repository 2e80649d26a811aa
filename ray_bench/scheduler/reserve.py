"""Which cells the driver asks for: the reservation of long cells for window-bound accounts
(:func:`~ray_bench.scheduler.core.reserve_below`), from what the gate says of the accounts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ray_bench.accounts.limits import window_bound, window_rate
from ray_bench.models.accounts import Account
from ray_bench.scheduler.admission import LIVE_STATES, AccountView
from ray_bench.scheduler.core import WindowShare, reserve_below


@dataclass(frozen=True)
class Reservation:
    """``long_slots`` requests (the window-bound accounts' free slots) prefer cells expected
    to take ``long_from`` or more; the others take cells expected below ``below`` (None: the
    longest too)."""

    long_slots: int = 0
    below: float | None = None
    long_from: float | None = None


def window_rates(accounts: Iterable[Account]) -> dict[str, float]:
    """Account -> window starts per second, for the accounts with a cell-count window."""
    return {a.name: rate for a in accounts if (rate := window_rate(a.limits)) is not None}


def reservation(rates: dict[str, float], views: Sequence[AccountView], *, typical_sec: float, work_sec: float,
                profile: Iterable[tuple[float, int]],
                exclude: set[str] | frozenset[str] = frozenset()) -> Reservation:
    """The reservation for this launch round. An account is window-bound when its window,
    not its slots, limits it at the run's typical cell length (as in
    :meth:`~ray_bench.scheduler.core.Candidate.window_bound`); the run's remaining time is
    the pending work over the live slots."""
    live = [v for v in views if v.state in LIVE_STATES and v.name not in exclude]
    shares = [(v, WindowShare(v.limit, rates[v.name], v.headroom)) for v in live
              if v.name in rates and v.limit > 0 and window_bound(rates[v.name], v.limit, typical_sec)]
    if not shares:
        return Reservation()
    slots = sum(v.limit for v in live)
    remaining = work_sec / max(1, slots)
    below = reserve_below(profile, [s for _, s in shares], remaining)
    open_ = [s.break_even_sec for v, s in shares if v.headroom > 0]
    long_from = below if below is not None else max(open_, default=None)
    return Reservation(sum(v.headroom for v, _ in shares), below, long_from)
