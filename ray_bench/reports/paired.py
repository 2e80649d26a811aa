"""Paired statistics of a report: per task and overall, the paired delta, its interval, a test,
Holm's correction, pass@k / pass^k, and a sentence of what the data can claim.

A *pair* is one (task, repetition) with an accepted row in both arms (the cells the scheduler
launches together). Per task the delta is the mean of its pairs' deltas, its interval a
percentile bootstrap over those pairs (none with fewer than 2: one pair says nothing about its
spread) and its test an exact McNemar on the discordant pairs when every reward is 0 or 1, else
a paired sign-flip permutation test. Overall, tasks are the units (repetitions of one task are
not independent): the delta is the mean of the task deltas, the interval a bootstrap that
resamples tasks (clustered by task), and the test McNemar over the tasks when each has exactly
one binary pair (then a task is a pair), else the sign flip over the task deltas. Holm's
correction runs over every overall test of the report (each variant, and each benchmark when
there are several). Pure functions over typed inputs; the report only formats them.

:func:`compare` is the report's one paired computation: the plot, the markdown and HTML tables,
``report-paired.csv`` and the claim sentence all show the figures it returns (a second copy
that resampled each arm's repetitions apart gave a task whose arms agree on every repetition
an interval of -0.667 to +0.667, against the paired +0.000 to +0.000: issue 56).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from ray_bench.reports.stats import BOOTSTRAP_SEED, bootstrap_ci

ALPHA = 0.05
#: Up to this many pairs the sign flip is exact (scipy enumerates the 2**n sign patterns);
#: past it a seeded Monte Carlo of :data:`PERMUTATIONS`, so a rebuilt report gives the same
#: p-value (500 pairs: 2.3 s with 2**16 resamples here, 0.4 s with 9999).
EXACT_PAIRS = 16
PERMUTATIONS = 9999
#: Null statistics computed at a time: bounds memory on a task set of thousands.
PERMUTATION_BATCH = 4096
#: ... and at most this many sign flips at a time: scipy holds a batch as (batch, tasks, 2)
#: indices, permuted copies and the data they pick, ~1 GB at 4,096 x 5,000 tasks (issue 57). The
#: flips are drawn one permutation after another from the one generator, so the null distribution
#: does not depend on the batch (checked bit for bit at 5,000 tasks: 4,096 against 80). At 5,000
#: tasks, 9,999 resamples: batch 4,096 4.0 s of CPU, 1.3 GB peak; 400 2.1 s, 259 MB; 200 (this)
#: 2.6 s, 183 MB; 100 4.1 s, 145 MB.
PERMUTATION_FLIPS = 1_000_000
#: The seeds' rule (benchmark operating procedure): 1 trial per case is mechanism iteration,
#: 3 or more a replicated experiment that estimates paired variation.
REPLICATED_REPS = 3

MCNEMAR = "exact McNemar"
SIGN_FLIP = "sign-flip permutation"


@dataclass(frozen=True)
class TaskPairs:
    """One task's paired rewards, aligned by repetition (``baseline[i]`` pairs ``variant[i]``)."""

    task: str
    benchmark: str
    baseline: tuple[float, ...]
    variant: tuple[float, ...]

    @property
    def deltas(self) -> list[float]:
        return [v - b for b, v in zip(self.baseline, self.variant, strict=True)]

    @property
    def binary(self) -> bool:
        return all(x in (0.0, 1.0) for x in (*self.baseline, *self.variant))


@dataclass(frozen=True)
class PairTest:
    method: str
    p_value: float  # NaN when there is no pair to test
    #: discordant pairs of a McNemar test: variant solved alone, baseline solved alone
    variant_only: int | None = None
    baseline_only: int | None = None


@dataclass(frozen=True)
class TaskStats:
    task: str
    benchmark: str
    pairs: int
    delta: float
    ci_low: float  # NaN with fewer than 2 pairs: no interval
    ci_high: float
    test: PairTest
    baseline_mean: float  # each arm's mean reward over the pairs (their difference is ``delta``)
    variant_mean: float

    @property
    def outcome(self) -> str:
        return "win" if self.delta > 0 else "loss" if self.delta < 0 else "tie"


@dataclass(frozen=True)
class OverallStats:
    benchmark: str  # "all", or one benchmark's name
    tasks: int
    pairs: int
    delta: float
    ci_low: float
    ci_high: float
    test: PairTest
    #: tasks whose delta is above, below, at 0
    wins: int
    losses: int
    ties: int
    p_holm: float = float("nan")


@functools.lru_cache(maxsize=4096)
def mcnemar_exact(variant_only: int, baseline_only: int) -> float:
    """Two-sided exact McNemar: the binomial test of one discordant count against p = 1/2. Kept
    per count pair: a report of 5,000 tasks of 10 pairs asks the same few dozen (3 ms each)."""
    n = variant_only + baseline_only
    if n == 0:
        return 1.0  # no discordant pair: nothing differs
    return float(sps.binomtest(variant_only, n, 0.5).pvalue)


def sign_flip_p(deltas: Sequence[float], *, seed: int = BOOTSTRAP_SEED) -> float:
    """Two-sided paired sign-flip permutation test of the mean delta (each pair's sign flipped)."""
    values = np.asarray(deltas, dtype=float)
    if values.size == 0:
        return float("nan")
    if not values.any():
        return 1.0  # every delta 0: every flip gives the observed mean
    if values.size == 1:
        return 1.0  # exact: its two flips are equally extreme (scipy refuses one observation)
    result = sps.permutation_test((values,), np.mean, permutation_type="samples", vectorized=True,
                                  n_resamples=2**values.size if values.size <= EXACT_PAIRS else PERMUTATIONS,
                                  batch=min(PERMUTATION_BATCH, max(1, PERMUTATION_FLIPS // values.size)),
                                  alternative="two-sided",
                                  rng=np.random.default_rng(seed))
    return float(min(1.0, result.pvalue))


def pair_test(baseline: Sequence[float], variant: Sequence[float], *, seed: int = BOOTSTRAP_SEED) -> PairTest:
    """McNemar when every reward is 0 or 1, else the sign flip."""
    pairs = TaskPairs("", "", tuple(baseline), tuple(variant))
    if pairs.binary:
        vo = sum(1 for b, v in zip(baseline, variant, strict=True) if v > b)
        bo = sum(1 for b, v in zip(baseline, variant, strict=True) if b > v)
        return PairTest(MCNEMAR, mcnemar_exact(vo, bo) if baseline else float("nan"), vo, bo)
    return PairTest(SIGN_FLIP, sign_flip_p(pairs.deltas, seed=seed))


def _interval(values: Sequence[float], seed: int) -> tuple[float, float]:
    if len(values) < 2:
        return float("nan"), float("nan")
    return bootstrap_ci(values, seed=seed)


def task_stats(pairs: TaskPairs, *, seed: int = BOOTSTRAP_SEED) -> TaskStats:
    deltas = pairs.deltas
    low, high = _interval(deltas, seed)
    nan = float("nan")
    return TaskStats(pairs.task, pairs.benchmark, len(deltas), float(np.mean(deltas)) if deltas else nan,
                     low, high, pair_test(pairs.baseline, pairs.variant, seed=seed),
                     float(np.mean(pairs.baseline)) if deltas else nan,
                     float(np.mean(pairs.variant)) if deltas else nan)


def overall_stats(tasks: Sequence[TaskPairs], benchmark: str = "all", *, seed: int = BOOTSTRAP_SEED) -> OverallStats:
    """Tasks as the units: mean of the task deltas, a task-clustered bootstrap, and McNemar over
    tasks when each is one binary pair, else the sign flip over the task deltas."""
    used = [t for t in tasks if t.baseline]
    means = [float(np.mean(t.deltas)) for t in used]
    low, high = _interval(means, seed)
    if used and all(len(t.baseline) == 1 and t.binary for t in used):
        test = pair_test([t.baseline[0] for t in used], [t.variant[0] for t in used], seed=seed)
    else:
        test = PairTest(SIGN_FLIP, sign_flip_p(means, seed=seed))
    return OverallStats(benchmark, len(used), sum(len(t.baseline) for t in used),
                        float(np.mean(means)) if means else float("nan"), low, high, test,
                        sum(1 for m in means if m > 0), sum(1 for m in means if m < 0),
                        sum(1 for m in means if m == 0))


@dataclass(frozen=True)
class Comparison:
    """One variant against the baseline: every paired figure the report shows of it."""

    variant: str
    tasks: tuple[TaskStats, ...]
    #: over all tasks first, then each benchmark's when there are several; Holm-adjusted
    overall: tuple[OverallStats, ...]

    @property
    def headline(self) -> OverallStats:
        return self.overall[0]


def compare(pairs: Mapping[str, Sequence[TaskPairs]], *, seed: int = BOOTSTRAP_SEED) -> list[Comparison]:
    """The report's paired figures, per variant (``pairs``: variant -> its tasks' pairs, in the
    report's order): each task's and the overall ones, Holm's correction across every overall
    test. A variant without a pair has no comparison."""
    found: list[tuple[str, tuple[TaskStats, ...], list[OverallStats]]] = []
    for variant, tasks in pairs.items():
        used = [t for t in tasks if t.baseline]
        if not used:
            continue
        overall = [overall_stats(used, seed=seed)]
        names = sorted({t.benchmark for t in used})
        if len(names) > 1:  # each benchmark its own test too, in the same Holm family
            overall += [overall_stats([t for t in used if t.benchmark == b], b, seed=seed) for b in names]
        found.append((variant, tuple(task_stats(t, seed=seed) for t in used), overall))
    adjusted = iter(holm([o.test.p_value for _, _, overall in found for o in overall]))
    return [Comparison(variant, tasks, tuple(replace(o, p_holm=next(adjusted)) for o in overall))
            for variant, tasks, overall in found]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (NaN stays NaN and is not counted).

    By hand: scipy's ``false_discovery_control`` has only Benjamini-Hochberg/-Yekutieli."""
    known = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    out = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        out[i] = running
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. 2021's unbiased pass@k: 1 - C(n-c, k) / C(n, k) (n trials, c solved)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """tau-bench's pass^k (Yao et al. 2024): C(c, k) / C(n, k), all k of k trials solved."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass^k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    return math.comb(c, k) / math.comb(n, k)


@dataclass(frozen=True)
class PassK:
    k: int
    tasks: int  # tasks with at least k trials
    pass_at: float
    pass_hat: float


def pass_curve(trials: Sequence[tuple[int, int]]) -> list[PassK]:
    """Mean pass@k and pass^k over tasks for k = 1 .. the fewest trials of a task: ``trials`` is
    (n, c) per task. Stopping at the fewest keeps every k over the same tasks."""
    if not trials:
        return []
    top = min(n for n, _ in trials)
    return [PassK(k, len(trials), float(np.mean([pass_at_k(n, c, k) for n, c in trials])),
                  float(np.mean([pass_hat_k(n, c, k) for n, c in trials]))) for k in range(1, top + 1)]


def claim(reps: int, overall: Sequence[tuple[str, OverallStats]], alpha: float = ALPHA) -> str:
    """What the data can claim, in one plain paragraph. ``reps`` is the fewest repetitions of a
    task in an arm; ``overall`` the (variant, figure) of each variant over all tasks."""
    if reps < 1 or not overall:
        return "No task has a row in both arms: there is no paired comparison to claim."
    if reps == 1:
        head = ("One trial per task and arm: a tuning (mechanism-iteration) run. It shows the setup "
                "runs; it is not a model score, and its deltas are not a measured difference.")
    elif reps < REPLICATED_REPS:
        head = (f"{reps} trials per task and arm, under the {REPLICATED_REPS} a replicated experiment "
                "needs: read the deltas as indicative, not as a model score.")
    else:
        head = f"{reps} trials per task and arm: a replicated experiment that estimates paired variation."
    parts = [head]
    for variant, o in overall:
        p = o.p_holm if not math.isnan(o.p_holm) else o.test.p_value
        if math.isnan(o.delta):
            continue
        verdict = ("differs from the baseline" if p < alpha else "shows no difference the data can resolve")
        interval = (f" (95% CI {o.ci_low:+.3f} to {o.ci_high:+.3f})" if not math.isnan(o.ci_low)
                    else " (one task: no interval)")
        parts.append(f"{variant} {verdict}: mean paired delta {o.delta:+.3f}{interval} over {o.tasks} "
                     f"tasks, Holm-adjusted p = {p:.3f}.")
    return " ".join(parts)
