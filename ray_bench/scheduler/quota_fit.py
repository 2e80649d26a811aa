"""How many sandboxes a backend's provider really takes at once, learnt from its quota refusals.

A provider's organisation quota (Daytona's vCPU, memory and disk totals) is shared with whatever
else the organisation runs, so the pool in the plan is an upper bound, not a promise. A create
refused for quota made nothing and says the pool is full at what is running now: the limit
drops to that (at least one), and grows back by one per sandbox that the provider did take,
up to the plan's pool (additive increase, multiplicative-style decrease). Quota refusals are
not a recovery-circuit signature: they are the pool's edge, handled here.

The pool also says how fast it takes new sandboxes (Daytona's ``sandbox-create`` throttler:
``creates_per_minute`` of the organisation pool). Every attempt creates one sandbox, so starts
of a backend are paced by a token bucket at that rate: creates that would only come back as
429s (and be waited out inside the runners, holding their accounts' leases) are not sent.

Pure: time is passed in, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ray_bench.accounts.ratelimit import TokenBucket

#: The error type a backend raises for a quota refusal (``ray_bench.errors.SandboxQuotaError``).
QUOTA_ERROR = "SandboxQuotaError"


@dataclass
class QuotaFit:
    """Per backend: the number of sandboxes to run at once, at most ``ceiling``."""

    ceiling: int
    limits: dict[str, int] = field(default_factory=dict)
    refusals: int = 0
    #: Per backend: sandbox creates per minute its provider takes (absent: unpaced).
    creates_per_minute: dict[str, float] = field(default_factory=dict)
    _buckets: dict[str, TokenBucket] = field(default_factory=dict, repr=False)

    def creates_available(self, backend: str, now: float) -> int:
        """How many sandboxes of ``backend`` may be created now (a large number when unpaced)."""
        bucket = self._bucket(backend, now)
        if bucket is None:
            return self.ceiling
        return math.floor(bucket.tokens(now) + 1e-9)

    def create_wait(self, backend: str, now: float) -> float:
        """Seconds until the next create of ``backend`` may go (0: now)."""
        bucket = self._bucket(backend, now)
        return 0.0 if bucket is None else bucket.wait_s(now)

    def on_create_sent(self, backend: str, now: float) -> None:
        """An attempt of ``backend`` was sent to a runner: it creates one sandbox."""
        bucket = self._bucket(backend, now)
        if bucket is not None:
            bucket.try_take(now)

    def _bucket(self, backend: str, now: float) -> TokenBucket | None:
        rate = self.creates_per_minute.get(backend)
        if rate is None:
            return None
        if backend not in self._buckets:
            # A burst of a tenth of a minute's creates at most: a run's start is spread over
            # seconds instead of spending the minute's allowance in one batch.
            self._buckets[backend] = TokenBucket(rate, burst=max(1.0, rate / 10), now=now)
        return self._buckets[backend]

    def limit(self, backend: str) -> int:
        return self.limits.get(backend, self.ceiling)

    def admits(self, backend: str, running: int) -> bool:
        return running < self.limit(backend)

    def on_quota(self, backend: str, running: int) -> int:
        """A create was refused with ``running`` sandboxes of the backend up: the new limit."""
        self.refusals += 1
        self.limits[backend] = max(1, min(self.limit(backend), running))
        return self.limits[backend]

    def on_created(self, backend: str) -> None:
        """The provider took a sandbox: one more may fit."""
        if backend in self.limits:
            grown = self.limits[backend] + 1
            if grown >= self.ceiling:
                del self.limits[backend]
            else:
                self.limits[backend] = grown
