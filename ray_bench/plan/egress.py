"""A Daytona tier 1/2 organisation's sandboxes reach only an allowlist of hosts: an in-sandbox
agent pointed at a provider gateway elsewhere (``ANTHROPIC_BASE_URL`` and the like, in the arm's
env or resolved from an account's route) fails every cell. Refused at plan time, one line."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from ray_bench.errors import ConfigError
from ray_bench.harbor.arms import HOST_SIDE
from ray_bench.harbor.credentials import BASE_VARS
from ray_bench.models.accounts import Account
from ray_bench.models.suite import Arm, Suite
from ray_bench.plan.backends import pool_config
from ray_bench.sandboxes.daytona_pool import DaytonaPool


def refuse_unreachable_providers(suite: Suite, arms: list[Arm], accounts: list[Account],
                                 environ: Mapping[str, str], where: str) -> None:
    """Raise :class:`ConfigError` when the daytona pool declares an allowlist (``tier`` 1 or 2,
    or ``allowed_hosts``) and a provider base URL an in-sandbox agent would call is not on it."""
    config = pool_config(suite.backends, suite.backend)
    if config is None:
        return
    from pydantic import ValidationError


    try:
        pool = DaytonaPool.model_validate(config.options["pool"])
    except ValidationError:
        return  # the capacity check says what is wrong with the pool
    if not pool.restricted():
        return
    routed = [(f"account {a.name}", var, environ.get(source, ""))
              for a in accounts for var, source in a.route.env.items() if var in BASE_VARS]
    for arm in arms:
        if arm.agent == "harbor" and arm.harbor_agent in HOST_SIDE:
            continue  # its model calls leave from the host, not the sandbox
        named = [(f"arm {arm.name}", var, arm.env[var]) for var in BASE_VARS if arm.env.get(var)]
        for who, var, url in (*named, *routed):
            host = urlsplit(url).hostname or ""
            if host and not pool.reaches(host):
                tier = f"tier {pool.tier}" if pool.tier in (1, 2) else "allowlisted"
                raise ConfigError(
                    f"{who}: {var} points arm {arm.name}'s agent at {host}, which a Daytona {tier} "
                    "organisation's sandboxes cannot reach (not in backends.daytona.options.pool.allowed_hosts)",
                    where=where,
                    fix=f"have Daytona allow {host} for the organisation and add it to allowed_hosts, "
                        "use a tier 3+ organisation, or drop the base URL")
