"""The end-of-run audit through runners whose backend cannot answer (its docker daemon is down):
each runner counts as one unknown, and no node death is awaited, since the runner answered. The
audit used to wait ``NODE_DEATH_SEC`` (60 s) per runner for a death that never came, which held
tests/reliability/test_dockerd_restart.py's stopped run for 120 s after its circuit opened."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.ray_local import ensure_ray

from ray_bench.models.suite import BackendConfig
from ray_bench.onray.pool import NODE_DEATH_SEC, SETTLE_SEC, RayPool

pytestmark = pytest.mark.ray


def test_runners_whose_daemon_is_down_count_as_unknown_without_waiting_for_a_node_death(tmp_path: Path) -> None:
    ensure_ray()
    pool = RayPool(2)
    backends = {"docker": BackendConfig(options={"base_url": f"unix://{tmp_path / 'no-daemon.sock'}"})}
    pool._settle(SETTLE_SEC)  # the runners' start (tens of seconds at load) is not the audit's wait
    started = time.monotonic()
    unknown = pool.count(backends, "docker", "down")
    elapsed = time.monotonic() - started
    assert unknown == len(pool._runners) >= 2
    assert pool.lost_nodes() == []  # a backend error is not a node loss
    # Not a timing test: the old audit took at least NODE_DEATH_SEC per runner; these are two
    # actor calls that each fail at the first connect.
    assert elapsed < NODE_DEATH_SEC, elapsed
