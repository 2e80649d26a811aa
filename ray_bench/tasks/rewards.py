"""A multi-step task's reward, by Harbor's rules: ``min_reward`` stops the remaining steps;
``mean`` averages each key over the steps that have a verifier result (a key a step lacks
counts 0); ``final`` takes the last step's result as it is."""

from __future__ import annotations

from ray_bench.models.task import MultiStepRewardStrategy

Rewards = dict[str, float]


def below_min(rewards: Rewards | None, min_reward: float | dict[str, float] | None) -> str | None:
    """Why the step misses its gate (a missing key or result is -inf), or None when it passes."""
    if min_reward is None:
        return None
    gates = {"reward": float(min_reward)} if isinstance(min_reward, int | float) else min_reward
    for key, threshold in gates.items():
        actual = (rewards or {}).get(key, float("-inf"))
        if actual < threshold:
            return f"{key}={actual} below min_reward {threshold}"
    return None


def combine(steps: list[Rewards | None], strategy: MultiStepRewardStrategy) -> Rewards | None:
    if not steps:
        return None
    if strategy == MultiStepRewardStrategy.FINAL:
        return steps[-1]
    have = [r for r in steps if r is not None]
    keys = {k for r in have for k in r}
    if not keys:
        return None
    return {k: sum(r.get(k, 0.0) for r in have) / len(have) for k in sorted(keys)}
