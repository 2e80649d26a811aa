"""A token bucket for cell starts (or requests) per minute.

The bucket holds at most ``burst`` tokens and refills continuously at ``per_minute / 60``
tokens per second. Time is always passed in; the bucket never reads a clock.
"""

from __future__ import annotations

import math


class TokenBucket:
    """Starts-per-minute limiter on an injected clock.

    ``per_minute=None`` means unlimited: every take succeeds and :meth:`wait_s` is 0.
    """

    def __init__(self, per_minute: float | None, *, burst: float | None = None,
                 now: float = 0.0) -> None:
        if per_minute is not None and per_minute <= 0:
            raise ValueError("per_minute must be positive or None")
        self.per_minute = per_minute
        # One minute's worth by default, and never less than one start, so that a
        # limit of 0.5/min still admits a first start.
        default_burst = max(1.0, per_minute or 1.0)
        self.burst = float(burst) if burst is not None else default_burst
        if self.burst < 1.0:
            raise ValueError("burst must be at least 1")
        self._tokens = self.burst
        self._at = now

    @property
    def unlimited(self) -> bool:
        return self.per_minute is None

    def _refill(self, now: float) -> None:
        if self.per_minute is None:
            return
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_minute / 60)
            self._at = now

    def tokens(self, now: float) -> float:
        """Tokens available at ``now`` (``inf`` when unlimited)."""
        if self.per_minute is None:
            return math.inf
        self._refill(now)
        return self._tokens

    def level(self) -> tuple[float, float]:
        """(tokens, at): the bucket's state as of its last refill, to hand to another holder."""
        return self._tokens, self._at

    def restore(self, tokens: float, at: float) -> None:
        """Continue from another holder's :meth:`level` (the same account's bucket)."""
        self._tokens = min(self.burst, tokens)
        self._at = at

    def wait_s(self, now: float, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are available (0 if they are now)."""
        if self.per_minute is None:
            return 0.0
        missing = n - self.tokens(now)
        return 0.0 if missing <= 0 else missing * 60 / self.per_minute

    def try_take(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens if available; return whether they were taken."""
        if self.per_minute is None:
            return True
        self._refill(now)
        if self._tokens + 1e-9 < n:
            return False
        self._tokens -= n
        return True
