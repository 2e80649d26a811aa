"""Power of a paired plan: the smallest mean paired delta its repetitions can detect, and how
many repetitions a target delta needs.

The report's overall test treats tasks as the units (each task's mean paired delta), so the
power is that of a paired t-test over T tasks whose task deltas vary by
``between_var + within_var / reps``: more repetitions shrink only the within-task part, and a
target below what the between-task spread allows is unreachable by repetitions (it needs more
tasks). The t-test's power is R's ``power.t.test`` (two-sided, ``strict = FALSE``) on scipy's
noncentral t. The spread comes from earlier runs' paired rewards (``plan --history``) or, with
none, from a stated assumption (:data:`ASSUMED`).

The figure is the lineage's: a task's repetitions are the ones earlier runs already hold paired
with the ones the plan adds (a gap-fill of one repetition over three is a test of four), and a
delta no mean paired delta can reach (above the rewards' range, :func:`reward_bounds`) is
reported as not detectable, never as a number (issue 56: 1.505 on 0/1 rewards).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ray_bench.models.plan import RewardSpread

# scipy.special is imported in the functions that use it, not here: ray_bench.api imports this module
# through plan.compile, so every `ray-bench execute` (and each test's subprocess driver) paid
# scipy.optimize + scipy.stats, 3.5-4 s of CPU at load 5 on the 2-core host against 0.4-0.7 s
# for numpy alone, for figures only plan, gaps and the receipt compute.

ALPHA = 0.05
POWER = 0.8
#: With no history: pass/fail rewards at 50% in both arms, independent: a paired delta's
#: variance is 0.25 + 0.25, the largest two independent 0/1 rewards can have; no task spread.
ASSUMED = RewardSpread(within_var=0.5, between_var=0.0, tasks=0, pairs=0)
#: The target deltas the receipt prices in repetitions.
TARGETS = (0.05, 0.10, 0.20)
#: The rewards a verifier gives unless the rows show others: Harbor's reward.txt holds 1 (solved)
#: or 0, and graded rewards lie between.
REWARD_RANGE = (0.0, 1.0)


def reward_bounds(rewards: Iterable[float]) -> tuple[float, float]:
    """The range rewards span: :data:`REWARD_RANGE`, widened to any reward seen outside it. A mean
    paired delta lies within +-(high - low)."""
    seen = list(rewards)
    return min([REWARD_RANGE[0], *seen]), max([REWARD_RANGE[1], *seen])


def t_power(n: float, delta: float, sd: float, *, alpha: float = ALPHA, samples: int = 1) -> float:
    """R's ``power.t.test(n, delta, sd, sig.level = alpha)``: ``samples=1`` is type "paired"
    (or one-sample: n pairs), 2 is "two.sample" (n per group)."""
    df = (n - 1) * samples
    if df <= 0 or sd <= 0:
        return float("nan")
    ncp = math.sqrt(n / samples) * abs(delta) / sd
    nct_sf, stdtrit = _t_functions()
    return float(np.clip(nct_sf(-stdtrit(df, alpha / 2), df, ncp), 0.0, 1.0))


def _t_functions() -> tuple[Any, Any]:
    """The functions ``scipy.stats``' ``nct.sf`` and ``t.isf`` call (scipy 1.17,
    ``stats/_continuous_distns.py``: ``nct_gen._sf`` is ``clip(scu._nct_sf(x, df, nc), 0, 1)``,
    ``t_gen._isf`` is ``-sc.stdtrit(df, q)``), from ``scipy.special`` alone: importing
    ``scipy.stats`` costs ~1.8 s of CPU here against ~0.7 s, paid by every ``plan`` and every
    ``execute``'s receipt check. A scipy without the private ufunc: ``scipy.stats``' own."""
    from scipy import special

    nct_sf = getattr(special._ufuncs, "_nct_sf", None)
    if nct_sf is None:  # pragma: no cover - another scipy's layout
        from scipy import stats as sps

        return sps.nct.sf, special.stdtrit
    return nct_sf, special.stdtrit


def _root(f: Callable[[float], float], low: float, high: float, xtol: float) -> float:
    """A root of ``f`` in [low, high] within ``xtol``, by bisection (``scipy.optimize.brentq``'s
    contract and its ValueError when the ends do not bracket one; importing ``scipy.optimize``
    costs ~1.1 s of CPU for a search of a few dozen cheap steps)."""
    f_low, f_high = f(low), f(high)
    if f_low == 0:
        return low
    if f_high == 0:
        return high
    if (f_low > 0) == (f_high > 0):
        raise ValueError("f(a) and f(b) must have different signs")
    while high - low > xtol:
        mid = low + (high - low) / 2
        if mid in (low, high):
            break  # the floats between them are exhausted
        f_mid = f(mid)
        if f_mid == 0:
            return mid
        if (f_mid > 0) == (f_low > 0):
            low, f_low = mid, f_mid
        else:
            high = mid
    return low + (high - low) / 2


def t_n(delta: float, sd: float, *, alpha: float = ALPHA, power: float = POWER, samples: int = 1) -> float:
    """R's ``power.t.test(delta, sd, power)``'s n (not rounded up)."""
    return _root(lambda n: t_power(n, delta, sd, alpha=alpha, samples=samples) - power, 1.0 + 1e-9, 1e7,
                 xtol=1e-10)


def mde(n: int, sd: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest |delta| a paired t-test over n units of this SD detects at this power."""
    if n < 2 or sd <= 0:
        return float("nan")
    return _root(lambda d: t_power(n, d, sd, alpha=alpha) - power, 1e-12, 1e3 * sd, xtol=1e-12)


def task_sd(spread: RewardSpread, reps: int) -> float:
    """The SD of one task's mean paired delta over ``reps`` repetitions."""
    return math.sqrt(spread.between_var + spread.within_var / reps)


@dataclass(frozen=True)
class Power:
    tasks: int
    reps: int
    sd: float
    mde: float  # NaN with fewer than 2 tasks: no test across tasks
    #: the largest mean paired delta the rewards allow (high - low)
    reward_range: float = REWARD_RANGE[1] - REWARD_RANGE[0]

    @property
    def detectable(self) -> bool:
        """Some mean paired delta the rewards allow is detected (the MDE is within their range)."""
        return not math.isnan(self.mde) and self.mde <= self.reward_range


def plan_power(spread: RewardSpread, tasks: int, reps: int) -> Power:
    sd = task_sd(spread, reps)
    return Power(tasks, reps, sd, mde(tasks, sd), spread.reward_high - spread.reward_low)


def reps_needed(spread: RewardSpread, tasks: int, target: float, *, max_reps: int = 1000) -> int | None:
    """The fewest repetitions per task and arm whose mean paired delta over ``tasks`` detects
    ``target``; None when no number up to ``max_reps`` does (the task spread needs more tasks)."""
    if tasks < 2 or target <= 0:
        return None
    if t_power(tasks, target, task_sd(spread, max_reps)) < POWER:
        return None
    low, high = 1, max_reps  # power grows with reps: bisect for the first that reaches it
    while low < high:
        mid = (low + high) // 2
        if t_power(tasks, target, task_sd(spread, mid)) >= POWER:
            high = mid
        else:
            low = mid + 1
    return low


def spread_of(deltas: Iterable[tuple[str, float]]) -> RewardSpread | None:
    """The spread of paired deltas given as (task key, delta): within-task variance pooled over
    tasks with 2+ pairs, between-task variance of the task means less the within part (one-way
    ANOVA's method of moments, floored at 0). None with fewer than 2 pairs in all."""
    per: dict[str, list[float]] = {}
    for key, d in deltas:
        per.setdefault(key, []).append(d)
    pairs = sum(len(v) for v in per.values())
    if pairs < 2:
        return None
    means = np.array([np.mean(v) for v in per.values()])
    spread_of_means = float(np.var(means, ddof=1)) if means.size >= 2 else 0.0
    repeated = [np.asarray(v) for v in per.values() if len(v) >= 2]
    dof = sum(v.size - 1 for v in repeated)
    if not dof:  # one pair per task: tasks and repetitions cannot be told apart; all of it is within
        return RewardSpread(within_var=spread_of_means, between_var=0.0, tasks=len(per), pairs=pairs)
    within = float(sum(((v - v.mean()) ** 2).sum() for v in repeated)) / dof
    between = max(0.0, spread_of_means - within / (pairs / len(per)))
    return RewardSpread(within_var=within, between_var=between, tasks=len(per), pairs=pairs)


def lineage_spread(pairs: Iterable[tuple[str, int, float]], rewards: Iterable[float]) -> RewardSpread | None:
    """:func:`spread_of` the lineage's pairs, given as (task key, repetition, delta), with the
    repetitions each task holds paired and the range of ``rewards`` (the rows' rewards)."""
    found = list(pairs)
    spread = spread_of((key, d) for key, _, d in found)
    if spread is None:
        return None
    reps: dict[str, set[int]] = {}
    for key, rep, _ in found:
        reps.setdefault(key, set()).add(rep)
    low, high = reward_bounds(rewards)
    return spread.model_copy(update={"paired_reps": {k: sorted(v) for k, v in sorted(reps.items())},
                                     "reward_low": low, "reward_high": high})
