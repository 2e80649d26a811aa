"""The seeded percentile bootstrap of a mean, the one resampling behind every interval of the
report (:func:`ray_bench.reports.paired.compare` is its only caller there)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

#: Fixed so that the same rows always give the same interval (reports are rebuilt often and
#: must not move between rebuilds).
BOOTSTRAP_SEED = 20240611
BOOTSTRAP_RESAMPLES = 5000
CONFIDENCE = 0.95


#: Resamples whose means are taken at once (:func:`bootstrap_ci`).
_BLOCK = 500
#: Index draws kept for sizes up to this (a task's pairs); a larger one (the tasks) is drawn once
#: per report anyway, and would hold its 200 MB (5,000 x 5,000) for the rest of the process.
_KEPT_UP_TO = 256


def _draw(seed: int, resamples: int, size: int) -> npt.NDArray[np.int64]:
    picks: npt.NDArray[np.int64] = np.random.default_rng(seed).integers(0, size, size=(resamples, size))
    return picks


@functools.lru_cache(maxsize=64)
def _resamples(seed: int, resamples: int, size: int) -> npt.NDArray[np.int64]:
    """The indices every bootstrap of ``size`` values draws: a function of the seed and the
    sizes, so a report of 5,000 tasks of 10 pairs draws them once, not once per task."""
    picks = _draw(seed, resamples, size)
    picks.flags.writeable = False
    return picks


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
    picks = (_resamples(seed, resamples, values.size) if values.size <= _KEPT_UP_TO
             else _draw(seed, resamples, values.size))
    # by blocks of resamples: a row's mean is the same alone or in a block, and 5,000 resamples of
    # 5,000 task deltas at once are 200 MB of floats
    means = np.concatenate([values[picks[i:i + _BLOCK]].mean(axis=1) for i in range(0, resamples, _BLOCK)])
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(means, [alpha, 1.0 - alpha]))
    # Only float rounding can put the mean outside (identical deltas summed in another order).
    return min(low, mean), max(high, mean)
