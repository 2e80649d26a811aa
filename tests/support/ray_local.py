"""One local Ray instance per test process, started on first use and shut down at exit.
Only what this module started is shut down. Starting Ray costs 5-8 s here, so tests share it.

Credential routes used by tests name these variables; they are set before Ray starts so
that every worker inherits them."""

from __future__ import annotations

import atexit
import os

TEST_ROUTES = {
    "RB_TEST_KEY_A": "test-value-a-123456",
    "RB_TEST_KEY_B": "test-value-b-123456",
    # Canary credentials: secret-hygiene tests assert these never appear in any output.
    "RB_CANARY_KEY_1": "canary-5f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "RB_CANARY_KEY_2": "canary-0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
    "RAY_BENCH_DEMO_KEY_A": "demo-value-a-0000",
    "RAY_BENCH_DEMO_KEY_B": "demo-value-b-0000",
}

_started = False


def set_test_routes() -> None:
    for name, value in TEST_ROUTES.items():
        os.environ.setdefault(name, value)


def ensure_ray() -> None:
    global _started
    import ray

    set_test_routes()
    if ray.is_initialized():
        return
    import logging

    ray.init(address="local", include_dashboard=False, namespace="ray-bench", log_to_driver=False,
             logging_level=logging.WARNING)
    _started = True
    atexit.register(_shutdown)


def _shutdown() -> None:
    import ray

    if _started and ray.is_initialized():
        ray.shutdown()
