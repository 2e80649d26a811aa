"""What a plan's backends ask of its run, found by their capabilities
(:mod:`ray_bench.sandboxes.capabilities`), never by their names: the quota pool a backend's
sandboxes draw on, the create rate it takes, and whether the resource supervisor lists the
run's containers (and on which daemon)."""

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


def uses_docker(plan: Plan) -> bool:
    """Some cell runs on a backend whose containers the resource supervisor lists."""
    return bool(having({c.backend for c in plan.cells}, lambda c: c.listed_containers))


def docker_url_of(plan: Plan) -> str | None:
    """The daemon the supervisor lists containers on: the ``base_url`` option of the plan's
    backend with listed containers (None: the default socket)."""
    for name in having(plan.backends, lambda c: c.listed_containers):
        url = plan.backends[name].options.get("base_url")
        return str(url) if url else None
    return None
