"""How many sandboxes a backend's provider really takes at once, learnt from its quota refusals.

A provider's organisation quota (Daytona's vCPU, memory and disk totals) is shared with whatever
else the organisation runs, so the pool in the plan is an upper bound, not a promise. A create
refused for quota made nothing and says the pool is full at what is running now: the limit
drops to that (at least one), and grows back by one per sandbox that the provider did take,
up to the plan's pool (additive increase, multiplicative-style decrease). Quota refusals are
not a recovery-circuit signature: they are the pool's edge, handled here.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The error type a backend raises for a quota refusal (``ray_bench.errors.SandboxQuotaError``).
QUOTA_ERROR = "SandboxQuotaError"


@dataclass
class QuotaFit:
    """Per backend: the number of sandboxes to run at once, at most ``ceiling``."""

    ceiling: int
    limits: dict[str, int] = field(default_factory=dict)
    refusals: int = 0

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
