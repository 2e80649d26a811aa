"""The summary of an attempt lost with its runner or node, which the Ray pool
(:mod:`ray_bench.onray.pool`) and its in-process fake (:mod:`ray_bench.cells.inprocess`) both give."""

from __future__ import annotations

import time

from ray_bench.cells.runner import new_summary
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptError, AttemptSummary


def one_line(exc: BaseException) -> str:
    """An exception's first line: Ray's errors run to several lines of actor ids and causes."""
    return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__


def lost_summary(spec: AttemptSpec, exc: BaseException) -> AttemptSummary:
    """The summary of an attempt lost with its runner or node: infrastructure, not evidence
    about the cell (it neither uses up the cell's attempts nor opens a circuit by itself)."""
    text = one_line(exc)
    summary = new_summary(spec)
    summary.lost = True
    summary.error = AttemptError(type=type(exc).__name__, message=text, failure_class="executor")
    summary.finished_at = time.time()
    return summary
