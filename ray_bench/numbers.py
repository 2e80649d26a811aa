"""Numbers read from the world, checked where they are read.

A reward, a token count or a cost comes from a file an agent or a verifier wrote (``reward.txt``,
``reward.json``, ``usage.json``) or from a provider's answer. Python reads ``nan``, ``inf`` and
``1e400`` as floats and JSON's ``NaN`` / ``Infinity`` as well, and a sum, a mean or a budget
comparison with one in it is poisoned for good (issue 58: one ``"cost_usd": Infinity`` wrote
``$inf`` into two accounts' lifetime spend and stopped every later run on the state root; a
reward of ``inf`` counted as solved). So every such number is taken only when it is finite, in
range and of the right sign; anything else is refused with the reason, and the reader makes the
record unknown or invalid, never stored, summed or credited.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: The largest token count or USD amount one attempt can plausibly report: far above any real
#: one (a million-token context at $100 per million is $100), far below where a sum loses
#: its cents (a float holds integers exactly up to 2**53, about 9e15).
MAX_AMOUNT = 1e12


class NotFinite(ValueError):
    """A number that is not finite (NaN, +-Infinity, or one too large for a float)."""


def finite(value: object) -> float:
    """``value`` as a float when it is a finite real number; ``ValueError`` saying why otherwise
    (NaN, +-Infinity, an overflow such as ``1e400`` or a 400-digit integer, a bool, a string)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a {type(value).__name__} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise NotFinite("an integer too large for a float") from None
    if not math.isfinite(number):
        raise NotFinite(f"{number!r} is not a finite number")
    return number


def parse_finite(text: str) -> float:
    """A number written as text (``reward.txt``): ``float()``'s grammar, finite only. The
    reason never quotes the text (a verifier's file may hold anything)."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    return finite(number)


def amount(value: object) -> float:
    """A token count or a USD amount: finite, not negative, at most :data:`MAX_AMOUNT`;
    ``ValueError`` saying why otherwise."""
    return _within(finite(value), MAX_AMOUNT, "")


def _within(number: float, most: float, unit: str) -> float:
    """The one range rule of amounts and durations: not negative, at most ``most``."""
    if number < 0:
        raise ValueError(f"{number:g}{unit} is negative")
    if number > most:
        raise ValueError(f"{number:g}{unit} is {'longer' if unit else 'larger'} than {most:g}{unit}")
    return number


#: The longest wait a provider, a CLI or an agent can plausibly name, in seconds: a weekly usage
#: window with room to spare (31 days). A ``retry_after`` of ``Infinity`` or ``1e300`` would cool
#: an account for good; a ``reset_at`` of ``Infinity`` the same.
MAX_WAIT_SEC = 31 * 86400.0


def duration(value: object, *, most: float = MAX_WAIT_SEC) -> float:
    """A duration in seconds read from the world (an agent's ``retry_after``, a CLI's
    ``retry_delay_ms`` / 1000, a ``Retry-After`` header, a usage window's reset less now): finite,
    not negative, at most ``most``; ``ValueError`` saying why otherwise."""
    return _within(finite(value), most, " s")


def duration_or_none(value: object, *, most: float = MAX_WAIT_SEC) -> float | None:
    """:func:`duration`, or None (unknown: the caller's default wait) for anything it refuses.
    A wait is advice; one that is no duration is no advice, never a reason to stop."""
    try:
        return duration(value, most=most)
    except ValueError:
        return None


def epoch_or_none(value: object, now: float, *, most: float = MAX_WAIT_SEC) -> float | None:
    """An epoch second read from the world (a usage window's ``resetsAt``, an error.json's
    ``reset_at``) when it is finite and at most ``most`` seconds after ``now``; None otherwise.
    One in the past is kept (the window is open again)."""
    try:
        number = finite(value)
    except ValueError:
        return None
    return number if number - now <= most else None


#: The usage record's counts and costs by name: ``*_tokens``, ``*_usd`` and these.
_COUNTS = frozenset({"turns", "unfinished_messages", "request_ids_missing"})


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def is_amount_key(key: str) -> bool:
    return key.endswith(("_tokens", "_usd")) or key in _COUNTS


def amounts_problem(record: Mapping[str, object]) -> str | None:
    """Why a usage record's numbers are no evidence (``cost_usd: inf is not a finite number``),
    or None. Every number at its top level must be finite; its counts and costs
    (:func:`is_amount_key`: ``input_tokens``, ``cache_read_tokens``, ``cost_usd``, ``turns``, ...)
    amounts as well (:func:`amount`). Other numbers an agent adds (a duration, a timestamp) are
    its own."""
    for key, value in record.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        try:
            amount(value) if is_amount_key(key) else finite(value)
        except ValueError as exc:  # a key an agent made up is named only if it reads as a name
            return f"{key if _NAME.fullmatch(key) else 'a number'}: {exc}"
    return None


def strict_json(data: object, **dumps: Any) -> str:
    """``data`` as strict JSON (RFC 8259 has no ``NaN`` nor ``Infinity``, and ``jq`` and most
    parsers refuse Python's spelling of them): a number that is not finite is written as
    ``null``; the writer says beside it why, where it knows (``tokens_unlimited``)."""
    return json.dumps(_finite_or_null(data), allow_nan=False, **dumps)


def _finite_or_null(data: object) -> object:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite_or_null(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite_or_null(v) for v in data]
    return data
