"""The state root: what outlives runs on a host (Prometheus targets, operator holds)."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_root() -> Path:
    """``$RAY_BENCH_STATE_ROOT``, else ``~/.ray-bench``."""
    return Path(os.environ.get("RAY_BENCH_STATE_ROOT", Path.home() / ".ray-bench"))
