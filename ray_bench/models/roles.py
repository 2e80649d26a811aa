"""Model roles of an arm: every LLM call path an agent configuration uses, declared up front."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ray_bench.models._base import ConfigModel

RoleKind = Literal["executor", "advisor", "subagent", "judge"]
Billing = Literal["subscription", "api", "local"]


class ModelRole(ConfigModel):
    """One model an arm calls: the executor (the agent itself), an advisor, a subagent, or a
    judge. Shown in the receipt's role table before confirmation."""

    role: RoleKind = Field(description="executor, advisor, subagent or judge.")
    name: str | None = Field(default=None, description="A label when a role has several models.")
    model: str = Field(min_length=1, description="The provider's model id, e.g. claude-sonnet-4-5.")
    route: str = Field(
        default="accounts",
        description="Whose credentials it uses: `accounts` (the account the cell runs on) or the "
        "name of an account or an env var route. A name, never a value. A judge's account route "
        "also fills the credential variables a task's [verifier].env names (${ANTHROPIC_API_KEY}).")
    billing: Billing = Field(
        description="subscription (a login's quota), api (paid per token) or local (own compute).")
    max_turns: int | None = Field(default=None, ge=1, description="Turns per attempt at most.")
    max_tokens: int | None = Field(default=None, ge=1, description="Tokens per attempt at most.")
    max_spend_usd: float | None = Field(default=None, gt=0, description="USD per attempt at most.")
