"""Accounts: a credential route plus its limits. Never a secret value."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from ray_bench.errors import fingerprint
from ray_bench.models._base import ConfigModel, FrozenModel

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: A cooldown's first length (an account's ``cooldown_s`` unless it sets one) and its cap: the
#: health policy's defaults (:class:`~ray_bench.accounts.health.HealthPolicy`), here so that
#: accounts.yaml is validated against the same numbers.
BASE_COOLDOWN_S = 60.0
MAX_COOLDOWN_S = 900.0


class CredentialRoute(ConfigModel):
    """Where an account's credentials come from on the node that runs the cell."""

    env: dict[str, str] = Field(
        default_factory=dict,
        description="Agent env var name -> name of the env var on the node that holds the value, "
        "e.g. {ANTHROPIC_API_KEY: ACCOUNT_A_KEY}. Names only; values are read on the node.",
    )
    home: str | None = Field(
        default=None,
        description="A HOME directory holding a login (e.g. .claude/.credentials.json); "
        "it becomes the agent's HOME.",
    )

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for target, source in value.items():
            for name in (target, source):
                if not _ENV_NAME.match(name):
                    # never echoed whole: a key pasted where its variable's name belongs
                    raise ValueError(f"{fingerprint(name)} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _some_route(self) -> CredentialRoute:
        if not self.env and self.home is None:
            raise ValueError("a route needs env names or a home directory")
        return self


class WindowQuota(FrozenModel):
    """A rolling-window quota, e.g. at most 40 cells or $20 per 5 hours."""

    hours: float = Field(gt=0, description="Length of the rolling window in hours.")
    max_cells: int | None = Field(default=None, ge=1, description="Cell starts allowed per window.")
    max_usd: float | None = Field(default=None, gt=0, description="Spend allowed per window, USD.")


class AccountLimits(FrozenModel):
    """An account's limits: the one type from accounts.yaml through the plan, the Ray actors
    (sent as is) and the admission core to the simulator's spec. Formulas over them live in
    :mod:`ray_bench.accounts.limits`."""

    max_concurrent: int = Field(ge=1, description="Concurrent sessions (cells) at most.")
    min_concurrent: int = Field(
        default=1, ge=1, description="Floor of the adaptive concurrency limit after rate limits."
    )
    starts_per_minute: float | None = Field(
        default=None, gt=0, description="Cell starts per minute (token bucket)."
    )
    window: WindowQuota | None = Field(default=None, description="Rolling-window quota.")
    spend_usd: float | None = Field(
        default=None, gt=0, description="Spend budget in USD; crossing it is a hard stop."
    )
    cooldown_s: float | None = Field(
        default=None, gt=0, le=MAX_COOLDOWN_S,
        description=f"Seconds the account rests after a rate limit or a run of 5xx answers, at "
        f"least (a longer Retry-After is honoured; it doubles while the account's probes fail, up "
        f"to {MAX_COOLDOWN_S:g} s). Default {BASE_COOLDOWN_S:g}.",
    )

    @model_validator(mode="after")
    def _floor(self) -> AccountLimits:
        if self.min_concurrent > self.max_concurrent:
            raise ValueError("min_concurrent is above max_concurrent")
        return self


class Account(ConfigModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Unique account name.")
    provider: str = Field(default="anthropic", description="Model provider, for reports.")
    route: CredentialRoute = Field(description="Credential route (names, never values).")
    limits: AccountLimits = Field(description="Concurrency, rate and budget limits.")
    probe_command: str | None = Field(
        default=None,
        description="A cheap command run by `accounts probe` with the route's env, "
        "e.g. a one-token request; its output is classified like an agent's.",
    )


class AccountsFile(ConfigModel):
    accounts: list[Account] = Field(min_length=1, description="The account pool.")

    @model_validator(mode="after")
    def _unique(self) -> AccountsFile:
        seen: set[str] = set()
        for account in self.accounts:
            if account.name in seen:
                raise ValueError(f"account name {account.name!r} appears twice")
            seen.add(account.name)
        return self
