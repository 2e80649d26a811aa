"""Paired statistics: wins, losses, ties and a seeded bootstrap interval of the mean delta."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Fixed so that the same rows always give the same interval (reports are rebuilt often and
#: must not move between rebuilds).
BOOTSTRAP_SEED = 20240611
BOOTSTRAP_RESAMPLES = 5000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedSummary:
    tasks: int
    mean_delta: float
    wins: int
    losses: int
    ties: int
    ci_low: float
    ci_high: float


def bootstrap_ci(
    deltas: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap of the mean, resampling tasks with replacement."""
    values = np.asarray(deltas, dtype=float)
    if values.size == 0:
        return float("nan"), float("nan")
    mean = float(values.mean())
    if values.size == 1:
        return mean, mean
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(means, [alpha, 1.0 - alpha]))
    # Only float rounding can put the mean outside (identical deltas summed in another order).
    return min(low, mean), max(high, mean)


def paired_summary(deltas: Sequence[float], *, seed: int = BOOTSTRAP_SEED) -> PairedSummary:
    values = [float(d) for d in deltas]
    wins = sum(1 for d in values if d > 0)
    losses = sum(1 for d in values if d < 0)
    low, high = bootstrap_ci(values, seed=seed)
    mean = float(np.mean(values)) if values else float("nan")
    return PairedSummary(len(values), mean, wins, losses, len(values) - wins - losses, low, high)


def difference_ci(
    baseline: Sequence[float],
    variant: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap of mean(variant) - mean(baseline) for one task, resampling each
    arm's repetitions independently. One repetition per arm gives the point itself: the
    interval then says nothing, and the report shows it as a point."""
    b = np.asarray(baseline, dtype=float)
    v = np.asarray(variant, dtype=float)
    if b.size == 0 or v.size == 0:
        return float("nan"), float("nan")
    point = float(v.mean() - b.mean())
    if b.size == 1 and v.size == 1:
        return point, point
    rng = np.random.default_rng(seed)
    diffs = (v[rng.integers(0, v.size, size=(resamples, v.size))].mean(axis=1)
             - b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1))
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(diffs, [alpha, 1.0 - alpha]))
    return min(low, point), max(high, point)
