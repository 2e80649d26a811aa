"""The degeneration watchdog as a plan states it: each arm's thresholds, token bound resolved,
shown in the receipt before confirmation (:mod:`ray_bench.agents.watchdog` applies them)."""

from __future__ import annotations

from ray_bench.models.suite import Arm, Watchdog
from ray_bench.plan.roles import spend_bound


def effective(arm: Arm) -> Watchdog | None:
    """The arm's watchdog with its token and spend bounds filled in from the executor role;
    an arm without a ``watchdog:`` block whose executor role sets a bound gets the bounds
    alone (``degeneration: false``). None: nothing to watch."""
    executor = next((r for r in arm.roles if r.role == "executor"), None)
    tokens = executor.max_tokens if executor is not None else None
    spend = executor.max_spend_usd if executor is not None else None
    if arm.watchdog is None:
        if tokens is None and spend is None:
            return None
        return Watchdog(degeneration=False, max_tokens=tokens, max_spend_usd=spend)
    update = {k: v for k, v in (("max_tokens", tokens), ("max_spend_usd", spend))
              if getattr(arm.watchdog, k) is None and v is not None}
    return arm.watchdog.model_copy(update=update) if update else arm.watchdog


def watchdog_lines(arms: list[Arm]) -> list[str]:
    out = ["## Degeneration watchdog", "",
           "A watched attempt is stopped live when a rule fires; it is a behavioural failure (no row), "
           "its verifier skipped, and it uses up one of the cell's attempts.", "",
           "| arm | same tool call in a row | same output line in a row | workspace idle | looked at every "
           "| token bound | spend bound |", "|---|---|---|---|---|---|---|"]
    for arm in arms:
        w = effective(arm)
        if w is None:
            out.append(f"| {arm.name} | off | off | off | - | off | off |")
            continue
        tokens = w.max_tokens if w.max_tokens is not None else "none"
        spend = spend_bound(w.max_spend_usd, arm.model) if w.max_spend_usd is not None else "none"
        if arm.agent == "command":
            # Its usage is its own usage.json, written as it ends: the bounds are held then
            # (ray_bench.agents.watchdog.bound_after), not live.
            tokens, spend = (f"{b} (at its end)" if b != "none" else b for b in (tokens, spend))
        if not w.degeneration:
            out.append(f"| {arm.name} | off | off | off | - | {tokens} | {spend} |")
            continue
        out.append(f"| {arm.name} | {w.repeats} | {w.output_repeats} | {w.idle_minutes:g} min | {w.poll_sec:g} s | "
                   f"{tokens} | {spend} |")
    return out
