"""Numbers read from the world (ray_bench.numbers): finite, in range, of the right sign, and
JSON output that strict parsers accept (issue 58)."""

from __future__ import annotations

import json
import math

import pytest

from ray_bench import numbers
from ray_bench.numbers import MAX_AMOUNT, NotFinite, amount, amounts_problem, finite, parse_finite, strict_json


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "Infinity", "1e400", "-1e400"])
def test_text_that_is_not_a_finite_number_is_refused(text: str) -> None:
    with pytest.raises(NotFinite):
        parse_finite(text)


def test_json_spellings_read_by_python_are_refused() -> None:
    for value in json.loads('[NaN, Infinity, -Infinity, 1e400]'):
        with pytest.raises(NotFinite):
            finite(value)
    with pytest.raises(NotFinite):
        finite(10 ** 400)  # a 401-digit JSON integer reads as an int, too large for a float


def test_what_is_not_a_number_is_refused_but_not_as_not_finite() -> None:
    for value in (True, "1", None, [1]):
        with pytest.raises(ValueError, match="is not a number") as caught:
            finite(value)
        assert not isinstance(caught.value, NotFinite)
    with pytest.raises(ValueError, match="not a number") as caught:
        parse_finite("sk-" + "x" * 40)
    assert "sk-" not in str(caught.value)  # a verifier's text is never quoted back


def test_amounts_are_finite_not_negative_and_bounded() -> None:
    assert amount(0) == 0.0 and amount(1.5) == 1.5
    for bad in (-100, -0.01, MAX_AMOUNT * 10, math.inf):
        with pytest.raises(ValueError, match=r"negative|larger|finite"):
            amount(bad)


def test_a_usage_record_names_its_first_bad_number() -> None:
    assert amounts_problem({"input_tokens": 10, "cost_usd": 0.2, "model": "m", "ok": True}) is None
    assert amounts_problem({"cost_usd": math.inf}) == "cost_usd: inf is not a finite number"
    assert amounts_problem({"output_tokens": -5}) == "output_tokens: -5 is negative"
    assert amounts_problem({"cache_read_tokens": math.nan}) == "cache_read_tokens: nan is not a finite number"
    # an agent's own numbers (a duration, a timestamp) need only be finite
    assert amounts_problem({"duration_ms": -3, "started_ms": 1.7e12}) is None
    assert amounts_problem({"duration_ms": math.inf}) == "duration_ms: inf is not a finite number"
    # a key that is not a name (a secret, say) is not echoed
    assert amounts_problem({"sk-ant-api03-abcdef": math.nan}) == "a number: nan is not a finite number"


def test_strict_json_writes_null_for_what_is_not_finite() -> None:
    text = strict_json({"tokens": math.inf, "x": [math.nan, 1.5], "n": 2}, indent=2)
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text, parse_constant=pytest.fail) == {"tokens": None, "x": [None, 1.5], "n": 2}


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 1e300, True, "5"])
def test_durations_are_finite_not_negative_and_bounded(value: object) -> None:
    with pytest.raises(ValueError, match=r"negative|finite|longer|not a number"):
        numbers.duration(value)
    assert numbers.duration_or_none(value) is None
    assert numbers.duration(0) == 0.0 and numbers.duration(7 * 86400) == 7 * 86400


def test_an_epoch_from_the_world_is_finite_and_not_past_the_longest_window() -> None:
    now = 1_796_000_000.0
    assert numbers.epoch_or_none(now + 3600, now) == now + 3600
    assert numbers.epoch_or_none(now - 3600, now) == now - 3600  # past: open again, kept
    for bad in (float("inf"), float("nan"), now + 1e9, "x"):
        assert numbers.epoch_or_none(bad, now) is None
