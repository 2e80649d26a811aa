"""What a plan's backends ask of its run, found by their capabilities
(:mod:`ray_bench.sandboxes.capabilities`), never by their names: the quota pool a backend's
sandboxes draw on and the create rate it takes (whether the resource supervisor lists the run's
containers: :func:`ray_bench.sandboxes.supervisor.uses_docker`)."""

from __future__ import annotations

from collections.abc import Mapping

from ray_bench.models.plan import Plan
from ray_bench.models.suite import BackendConfig
from ray_bench.sandboxes.capabilities import capabilities, having
from ray_bench.sandboxes.daytona_pool import DaytonaPool


def pool_config(backends: Mapping[str, BackendConfig], backend: str) -> BackendConfig | None:
    """``backend``'s config when it draws on a quota pool and its options declare one, else None."""
    config = backends.get(backend)
    if config is None or not capabilities(backend).quota_pool or not config.options.get("pool"):
        return None
    return config


def create_rates(plan: Plan) -> dict[str, float]:
    """Sandbox creates per minute each backend's provider takes (its organisation pool's rate)."""
    rates: dict[str, float] = {}
    for name in having(plan.backends, lambda c: c.quota_pool):
        config = pool_config(plan.backends, name)
        if config is not None:
            rates[name] = DaytonaPool.model_validate(config.options["pool"]).creates_per_minute
    return rates
