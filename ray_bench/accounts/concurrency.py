"""An adaptive concurrency limit: AIMD on rate-limit signals.

* **Multiplicative decrease** once per rate-limit *episode*: the first signal from an
  attempt started after the previous decrease shrinks the limit by ``decrease`` (x0.5).
  Signals from attempts already in flight at the time of a decrease belong to the same
  episode and are ignored; otherwise one burst of 429s would collapse the limit to the floor.
* **Additive increase** only when the limit was actually used: a success from an attempt
  that started with the account saturated (``inflight + 1 >= limit``) adds ``increase``.
  Successes at low utilisation say nothing about whether a higher limit is safe.
* The limit stays within ``[floor, ceiling]`` from config.
"""

from __future__ import annotations

import math


class AimdLimit:
    """The adaptive in-flight limit of one account."""

    def __init__(self, *, floor: int, ceiling: int, initial: float | None = None,
                 decrease: float = 0.5, increase: float = 1.0) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"need 1 <= floor <= ceiling, got {floor}, {ceiling}")
        if not 0 < decrease < 1:
            raise ValueError("decrease must be in (0, 1)")
        self.floor = floor
        self.ceiling = ceiling
        self.decrease = decrease
        self.increase = increase
        self.value = float(ceiling if initial is None else min(max(initial, floor), ceiling))
        self._last_decrease_at = -math.inf

    @property
    def limit(self) -> int:
        """The whole number of slots that may be in flight."""
        return max(self.floor, int(self.value + 1e-9))

    def on_rate_limited(self, now: float, started_at: float) -> bool:
        """Shrink on a new episode; return whether the limit changed."""
        if started_at <= self._last_decrease_at:
            return False
        self._last_decrease_at = now
        before = self.limit
        self.value = max(float(self.floor), self.value * self.decrease)
        return self.limit != before

    def on_success(self, inflight_at_start: int) -> bool:
        """Grow when the attempt ran at saturation; return whether the limit changed."""
        if inflight_at_start + 1 < self.limit:
            return False
        before = self.limit
        self.value = min(float(self.ceiling), self.value + self.increase)
        return self.limit != before
