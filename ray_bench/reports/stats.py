"""The seeded percentile bootstrap of a mean, the one resampling behind every interval of the
report (:func:`ray_bench.reports.paired.compare` is its only caller there)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Fixed so that the same rows always give the same interval (reports are rebuilt often and
#: must not move between rebuilds).
BOOTSTRAP_SEED = 20240611
BOOTSTRAP_RESAMPLES = 5000
CONFIDENCE = 0.95


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
