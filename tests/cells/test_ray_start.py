"""A Ray instance ray-bench starts runs its workers at nice 0, not Ray's default 15, so that
ordinary busy processes on the host do not starve the cell runners."""

from __future__ import annotations

import os

import pytest
import ray
from support.ray_local import ensure_ray

from ray_bench.cells.ray_start import WORKER_NICENESS

pytestmark = pytest.mark.ray


@ray.remote
def _nice() -> int:
    return os.nice(0)


def test_workers_of_a_local_start_are_not_deprioritised() -> None:
    chosen = os.environ.get(WORKER_NICENESS)
    ensure_ray()
    expected = int(chosen) if chosen is not None else 0
    assert os.environ[WORKER_NICENESS] == str(expected)
    assert ray.get(_nice.remote(), timeout=120) == expected
