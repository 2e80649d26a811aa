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

_STATE = {"started": False}


def set_test_routes() -> None:
    for name, value in TEST_ROUTES.items():
        os.environ.setdefault(name, value)


def ensure_ray() -> None:
    import ray

    set_test_routes()
    if ray.is_initialized():
        return
    import logging

    from ray_bench.onray.start import init_ray

    init_ray(None, namespace="ray-bench", log_to_driver=False, logging_level=logging.WARNING)
    _STATE["started"] = True
    atexit.register(_shutdown)


def shared_address() -> str:
    """The address of the session's shared Ray, for a ``ray-bench execute`` subprocess to join
    (``--address``) instead of paying a local Ray start of its own (30-70 s on this 2-core
    machine; see tests/reliability/test_execute_signals.py). Its account and capacity actors
    are its state root's (ray_bench.onray.admission.admission_name), so no other test's leak in."""
    import ray

    ensure_ray()
    return str(ray.get_runtime_context().gcs_address)


def reset_shared_actors() -> int:
    """Kill the detached admission actors (accounts, pools, holds) of earlier tests.

    They are shared across runs on purpose: a run inherits the accounts' health and budget
    from the runs before it. Tests reuse account names, so each in-process run starts from
    fresh accounts instead of, say, an account an earlier test left cooling for ten minutes."""
    import ray

    killed = 0
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"] if isinstance(entry, dict) else entry
        namespace = entry.get("namespace") if isinstance(entry, dict) else "ray-bench"
        if namespace == "ray-bench" and name.split("@", 1)[0] == "admission":
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            killed += 1
            _wait_until_gone(name, namespace)
    return killed


def _wait_until_gone(name: str, namespace: str, timeout: float = 30.0) -> None:
    """A killed actor's name is released asynchronously; creating one with get_if_exists
    before then would hand back the dying actor."""
    import time

    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        time.sleep(0.05)


def _shutdown() -> None:
    import ray

    if _STATE["started"] and ray.is_initialized():
        ray.shutdown()
