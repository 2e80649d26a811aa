"""The model-role table: what each arm's roles are, as the receipt and the report show them."""

from __future__ import annotations

from typing import Any

from ray_bench.models.suite import Arm


def executor_max_turns(arm: Arm) -> int | None:
    """The executor role's bound on turns, which the agent CLI is given (None: unbounded)."""
    return next((r.max_turns for r in arm.roles if r.role == "executor" and r.max_turns), None)


def role_rows(arm: Arm) -> list[dict[str, Any]]:
    """The arm's declared roles; an arm that declares no executor gets one for its ``model:``
    (or ``undeclared``: the gap is visible before confirmation)."""
    rows: list[dict[str, Any]] = [
        {"role": r.role, "name": r.name or r.role, "model": r.model, "route": r.route,
         "billing": r.billing, "max_turns": r.max_turns or "-", "max_tokens": r.max_tokens or "-",
         "max_spend_usd": r.max_spend_usd or "-"}
        for r in arm.roles]
    if not any(r.role == "executor" for r in arm.roles):
        rows.insert(0, {"role": "executor", "name": "executor", "model": arm.model or "undeclared",
                        "route": "accounts", "billing": "undeclared", "max_turns": "-",
                        "max_tokens": "-", "max_spend_usd": "-"})
    return rows


def render_roles(arms: list[Arm]) -> list[str]:
    out = ["## Model roles", "",
           "| arm | role | name | model | route | billing | max turns | max tokens | max spend |",
           "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        for r in role_rows(arm):
            spend = r["max_spend_usd"]
            out.append(f"| {arm.name} | {r['role']} | {r['name']} | {r['model']} | {r['route']} | "
                       f"{r['billing']} | {r['max_turns']} | {r['max_tokens']} | "
                       f"{f'${spend:g}' if isinstance(spend, float) else spend} |")
    return out
