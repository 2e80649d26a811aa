"""An adaptive concurrency limit: AIMD on rate-limit signals.

* **Multiplicative decrease** once per rate-limit *episode*: the first signal from an
  attempt started after the previous decrease shrinks the limit by ``decrease`` (x0.5).
  Signals from attempts already in flight at the time of a decrease belong to the same
  episode and are ignored; otherwise one burst of 429s would collapse the limit to the floor.
* **Additive increase** on two kinds of evidence, each adding ``increase``:

  - a success from an attempt that started with the account saturated
    (``inflight + 1 >= limit``). Successes at low utilisation say nothing about whether a
    higher limit is safe;
  - every ``recovery_s`` of quiet: no rate-limit signal of any kind, counted from the end
    of the cooldown the last signal imposed (:meth:`quiet_from`). A provider's throttle is
    bounded in time (it says how long with Retry-After); once it has passed and the account
    stayed quiet, the episode that shrank the limit is no longer evidence against it. With
    hour-long cells, growth by successes alone would take hours after one storm. If the
    provider's limit really is lower, the next start above it is refused within seconds
    and the limit halves again: the usual AIMD saw-tooth, one wasted attempt per step.
* The limit stays within ``[floor, ceiling]`` from config.
"""

from __future__ import annotations

import math


class AimdLimit:
    """The adaptive in-flight limit of one account, on an injected clock (``now`` arguments)."""

    def __init__(self, *, floor: int, ceiling: int, initial: float | None = None,
                 decrease: float = 0.5, increase: float = 1.0, recovery_s: float | None = None) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"need 1 <= floor <= ceiling, got {floor}, {ceiling}")
        if not 0 < decrease < 1:
            raise ValueError("decrease must be in (0, 1)")
        if recovery_s is not None and recovery_s <= 0:
            raise ValueError("recovery_s must be positive (or None: no growth by time)")
        self.floor = floor
        self.ceiling = ceiling
        self.decrease = decrease
        self.increase = increase
        self.recovery_s = recovery_s
        self.value = float(ceiling if initial is None else min(max(initial, floor), ceiling))
        self._last_decrease_at = -math.inf
        self._quiet_from = -math.inf

    @property
    def limit(self) -> int:
        """The whole number of slots that may be in flight (as of the last :meth:`tick`)."""
        return max(self.floor, int(self.value + 1e-9))

    def tick(self, now: float) -> int:
        """Apply the growth earned by quiet time up to ``now``; return the limit."""
        if self.recovery_s is None or self.value >= self.ceiling or now < self._quiet_from:
            return self.limit
        if math.isinf(self._quiet_from):  # below the ceiling from the start: quiet from now
            self._quiet_from = now
        steps = math.floor((now - self._quiet_from) / self.recovery_s)
        if steps > 0:
            self.value = min(float(self.ceiling), self.value + steps * self.increase)
            self._quiet_from += steps * self.recovery_s
        return self.limit

    def quiet_from(self, at: float) -> None:
        """A rate-limit signal arrived (any: a probe's, a late one from an earlier episode);
        quiet time counts only from ``at`` (the end of the cooldown it imposed)."""
        self._quiet_from = max(self._quiet_from, at)

    def on_rate_limited(self, now: float, started_at: float) -> bool:
        """Shrink on a new episode; return whether the limit changed."""
        self.tick(now)
        self.quiet_from(now)
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
