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


#: Resamples drawn and averaged at once when the values are many (:func:`bootstrap_ci`): 5,000
#: resamples of 5,000 task deltas at once are 200 MB of indices and 200 MB of the values they pick.
_BLOCK = 500
#: Index draws kept for sizes up to this (a task's pairs: a report of 5,000 tasks of 10 pairs
#: draws them once, not once per task); a larger draw (the tasks) is made block by block.
_KEPT_UP_TO = 256


@functools.lru_cache(maxsize=64)
def _resamples(seed: int, resamples: int, size: int) -> npt.NDArray[np.int64]:
    """The indices every bootstrap of ``size`` values draws: a function of the seed and the sizes."""
    picks: npt.NDArray[np.int64] = np.random.default_rng(seed).integers(0, size, size=(resamples, size))
    picks.flags.writeable = False
    return picks


def _means(values: npt.NDArray[np.float64], seed: int, resamples: int) -> npt.NDArray[np.float64]:
    """The resamples' means. Drawn block by block from one generator, the indices are the ones a
    single draw of every resample gives (the generator keeps its stream, half-used 32-bit words
    included, across calls: checked bit for bit in tests/reports/test_paired_stats.py), and a
    row's mean is the same alone or in a block."""
    size = values.size
    if size <= _KEPT_UP_TO:
        means: npt.NDArray[np.float64] = values[_resamples(seed, resamples, size)].mean(axis=1)
        return means
    rng = np.random.default_rng(seed)
    return np.concatenate([values[rng.integers(0, size, size=(min(_BLOCK, resamples - start), size))].mean(axis=1)
                           for start in range(0, resamples, _BLOCK)])


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
    means = _means(values, seed, resamples)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(means, [alpha, 1.0 - alpha]))
    # Only float rounding can put the mean outside (identical deltas summed in another order).
    return min(low, mean), max(high, mean)
