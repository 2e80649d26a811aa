"""A task's reward, read and combined by Harbor's rules.

:func:`read_rewards` is the one reader of a verifier's ``reward.json`` / ``reward.txt``: every
path that scores an attempt (a single-step attempt, each step of a multi-step one, a regrade)
calls it, and the exports carry what it returned. It follows Harbor 0.26's
``harbor/verifier/verifier.py`` (``Verifier.verify``, ``_parse_reward_json``,
``_parse_reward_text``):

- ``reward.json`` wins when both files exist;
- ``reward.json`` is a JSON object whose every value is a finite number (a boolean counts as
  1 or 0, as pydantic coerces it into ``VerifierResult.rewards``); a bare number, a list, a
  string value or an empty object is no reward (Harbor raises, or its ``reward_valid`` is
  false for ``{}``);
- ``reward.txt`` is one finite float (key ``reward``); an empty file is no reward.

Every key is kept (``AttemptSummary.rewards``). The row's one number, :func:`headline`, is
``reward`` when the map has it, else the value of the first key by name: Harbor's own
one-number view of a trial does the same (``_first_numeric_reward`` in ``harbor/hub/models.py``),
and its ``Mean`` metric reports a one-key map's only value (``harbor/metrics/base.py``).

A multi-step task combines its steps' maps: ``min_reward`` stops the remaining steps;
``mean`` averages each key over the steps that have a verifier result (a key a step lacks
counts 0); ``final`` takes the last step's result as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from ray_bench.config.bounded import read_capped
from ray_bench.models.task import MultiStepRewardStrategy
from ray_bench.numbers import NotFinite, finite, parse_finite

Rewards = dict[str, float]

#: A reward file is a number or a small map; a verifier that writes more is broken (Harbor
#: reads it whole; a runner reading hostile output does not).
MAX_REWARD_BYTES = 64 * 1024


class _Unreadable(ValueError):
    pass


def read_rewards(verifier_dir: Path) -> tuple[Rewards | None, str | None]:
    """Every reward key the verifier wrote, and where it came from (``reward.json`` or
    ``reward.txt``, or ``<file> unreadable: <why>``); ``(None, None)`` when it wrote neither."""
    for name, parse in (("reward.json", _parse_json), ("reward.txt", _parse_text)):
        path = verifier_dir / name
        if path.is_file():
            try:
                return parse(_small_text(path)), name
            except _Unreadable as exc:
                return None, f"{name} unreadable: {exc}"
    return None, None


def headline(rewards: Rewards | None) -> float | None:
    """The one number a row carries (see the module's docstring)."""
    if not rewards:
        return None
    return rewards["reward"] if "reward" in rewards else rewards[min(rewards)]


def _small_text(path: Path) -> str:
    try:
        data = read_capped(path, MAX_REWARD_BYTES)
    except OSError as exc:
        raise _Unreadable(exc.strerror or str(exc)) from exc
    if data is None:
        raise _Unreadable(f"larger than {MAX_REWARD_BYTES} bytes")
    text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise _Unreadable("empty")
    return text


def _parse_text(text: str) -> Rewards:
    try:  # ray_bench.numbers: the one finiteness rule
        return {"reward": parse_finite(text.strip())}
    except NotFinite:
        raise _Unreadable("not finite") from None
    except ValueError as exc:
        raise _Unreadable(str(exc)) from None


def _parse_json(text: str) -> Rewards:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise _Unreadable("not JSON") from None
    if not isinstance(data, dict):
        raise _Unreadable("not a JSON object of rewards")
    if not data:
        raise _Unreadable("no keys")
    rewards: Rewards = {}
    for key, value in data.items():
        if not isinstance(value, int | float):  # bool is an int, as in Harbor's check
            raise _Unreadable(f"{key!r} is not a number")
        try:  # a bool counts as 1 or 0 (pydantic's coercion into VerifierResult.rewards)
            number = finite(int(value) if isinstance(value, bool) else value)
        except ValueError:  # NotFinite: the only way a number fails here
            raise _Unreadable(f"{key!r} is not finite") from None
        rewards[str(key)] = number
    return rewards


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
