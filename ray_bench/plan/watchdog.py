"""The degeneration watchdog as a plan states it: each arm's thresholds, token bound resolved,
shown in the receipt before confirmation (:mod:`ray_bench.cells.watchdog` applies them)."""

from __future__ import annotations

from ray_bench.models.suite import Arm, Watchdog


def effective(arm: Arm) -> Watchdog | None:
    """The arm's watchdog with its token bound filled in from the executor role (None: off)."""
    if arm.watchdog is None:
        return None
    if arm.watchdog.max_tokens is not None:
        return arm.watchdog
    bound = next((r.max_tokens for r in arm.roles if r.role == "executor" and r.max_tokens), None)
    return arm.watchdog.model_copy(update={"max_tokens": bound})


def watchdog_lines(arms: list[Arm]) -> list[str]:
    out = ["## Degeneration watchdog", "",
           "A watched attempt is stopped live when a rule fires; it is a behavioural failure (no row), "
           "its verifier skipped, and it uses up one of the cell's attempts.", "",
           "| arm | same tool call in a row | same output line in a row | workspace idle | looked at every "
           "| token bound |", "|---|---|---|---|---|---|"]
    for arm in arms:
        w = effective(arm)
        if w is None:
            out.append(f"| {arm.name} | off | off | off | - | off |")
            continue
        out.append(f"| {arm.name} | {w.repeats} | {w.output_repeats} | {w.idle_minutes:g} min | {w.poll_sec:g} s | "
                   f"{w.max_tokens if w.max_tokens is not None else 'none'} |")
    return out
