"""Multi-account admission: the functional core (no Ray, no I/O, injected clock).

:class:`AccountCore` composes a :class:`TokenBucket` (starts per minute), an
:class:`AimdLimit` (adaptive concurrency), a :class:`RollingWindowQuota` and the
:class:`AccountHealth` state machine for one account. :meth:`AccountCore.on_finish` learns
from an :class:`Outcome`, which admission derives from the one classifier's verdict.
"""

from ray_bench.accounts.concurrency import AimdLimit
from ray_bench.accounts.core import (
    AccountCore,
    AccountSnapshot,
    AdmissionRefused,
    Admit,
    Lease,
    Refusal,
    RefusalReason,
)
from ray_bench.accounts.health import AccountHealth, HealthPolicy, HealthState
from ray_bench.accounts.limits import Tuning
from ray_bench.accounts.outcome import Outcome, OutcomeKind
from ray_bench.accounts.quota import RollingWindowQuota
from ray_bench.accounts.ratelimit import TokenBucket
from ray_bench.models.accounts import AccountLimits, WindowQuota

__all__ = [
    "AccountCore",
    "AccountHealth",
    "AccountLimits",
    "AccountSnapshot",
    "AdmissionRefused",
    "Admit",
    "AimdLimit",
    "HealthPolicy",
    "HealthState",
    "Lease",
    "Outcome",
    "OutcomeKind",
    "Refusal",
    "RefusalReason",
    "RollingWindowQuota",
    "TokenBucket",
    "Tuning",
    "WindowQuota",
]
