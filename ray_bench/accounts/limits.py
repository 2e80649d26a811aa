"""Every formula over an account's limits, in one place: the driver's reservation, the account
choice, the simulator's lower bound and the receipt all call these, so that two copies cannot
disagree on what "window-bound" means.

The limits themselves are :class:`~ray_bench.models.accounts.AccountLimits`, the one type read
from accounts.yaml; :class:`Tuning` holds what the admission core adds to them (not configured
per account: the health policy, but for an account's ``cooldown_s``, the token bucket's burst,
the AIMD steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ray_bench.accounts.health import HealthPolicy
from ray_bench.accounts.ratelimit import TokenBucket
from ray_bench.models.accounts import AccountLimits


@dataclass(frozen=True, slots=True)
class Tuning:
    """The admission core's own knobs beside an account's configured limits. The adaptive
    limit takes one ``aimd_increase`` step back per ``health.probe_window_s`` of quiet after a
    rate-limit episode's cooldown (the window after which the health machine, too, takes
    silence for an answer)."""

    health: HealthPolicy = field(default_factory=HealthPolicy)
    burst: float | None = None
    aimd_decrease: float = 0.5
    aimd_increase: float = 1.0


def health_policy(limits: AccountLimits, tuning: Tuning) -> HealthPolicy:
    """The account's health policy: the tuning's, with the account's ``cooldown_s`` as its
    first cooldown when accounts.yaml sets one."""
    if limits.cooldown_s is None:
        return tuning.health
    return replace(tuning.health, base_cooldown_s=limits.cooldown_s)


def window_seconds(limits: AccountLimits) -> float:
    """The rolling window's length in seconds (0 without a window)."""
    return limits.window.hours * 3600 if limits.window is not None else 0.0


def window_rate(limits: AccountLimits) -> float | None:
    """Window starts per second (``max_cells`` over the window), when the account has a cell
    window."""
    w = limits.window
    if w is None or w.max_cells is None:
        return None
    return w.max_cells / (w.hours * 3600)


def window_bound(rate: float | None, slots: int, typical_sec: float) -> bool:
    """The window, not the slots, limits an account at the typical cell length: its ``slots``
    busy with typical cells would start more cells than the window allows."""
    return rate is not None and rate * typical_sec < slots


def starts_allowed(limits: AccountLimits, active_s: float, *, burst: float | None = None) -> int | None:
    """Most starts the account's cell window and starts per minute allow over ``active_s``
    seconds (every window begun counts whole; the bucket starts full), None when neither
    limits starts. An upper bound: the simulator's capacity bound is built on it."""
    allowed: list[int] = []
    w = limits.window
    if w is not None and w.max_cells is not None:
        allowed.append(w.max_cells * max(1, math.ceil(active_s / window_seconds(limits))))
    if limits.starts_per_minute is not None:
        bucket = TokenBucket(limits.starts_per_minute, burst=burst)
        allowed.append(math.floor(bucket.burst + limits.starts_per_minute * active_s / 60))
    return min(allowed) if allowed else None
