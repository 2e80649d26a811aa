"""The attempt summary reads what the first ledgers stored, and writes the same shape."""

from __future__ import annotations

import json

import pytest

from ray_bench.models.attempt import AttemptSummary

#: A result.json as the first-round runner wrote it (dict built by hand, every key present).
OLD = {
    "attempt_id": "c1-a1", "cell_id": "c1", "task": "hello", "arm": "baseline", "rep": 1,
    "account": "a", "backend": "local", "node": "n", "pid": 7, "python": "3.11.9",
    "started_at": 10.0, "finished_at": 12.5, "phases": {"agent": 1.0, "total": 2.5},
    "agent": {"exit_code": 0, "timed_out": False, "duration_sec": 1.0, "truncated_bytes": 0,
              "oom_killed": False, "output_tail": "done"},
    "verifier": {"exit_code": 0, "timed_out": False, "duration_sec": 0.2, "truncated_bytes": 0,
                 "oom_killed": False, "output_tail": ""},
    "reward": 1.0, "reward_source": "reward.txt", "usage": {"output_tokens": 5, "cost_usd": 0.25, "extra": 1},
    "agent_error": None, "error": None, "cancelled": False, "sandbox_id": "sb", "artifact_bytes": 10,
    "verdict": {"valid": True, "failure_class": None, "fingerprint": None, "message": "valid", "flags": []},
}


def test_old_summary_round_trips_with_the_same_keys_and_values() -> None:
    s = AttemptSummary.parse(OLD)
    assert s.reward == 1.0 and s.agent is not None and s.agent.output_tail == "done"
    assert s.cost_usd == 0.25 and s.verdict is not None and s.verdict.valid
    written = json.loads(s.dumps())
    for key, value in OLD.items():
        if key != "usage":
            assert written[key] == value, key
    assert written["usage"]["extra"] == 1  # an agent's own usage keys are kept


def test_stale_and_pool_made_summaries_parse() -> None:
    assert AttemptSummary.parse({"stale": True, "sandboxes_removed": 2}).stale
    lost = AttemptSummary.parse({"error": {"type": "RayActorError", "message": "x", "failure_class": "executor"}})
    assert lost.error is not None and lost.error.type == "RayActorError"


def test_a_field_that_does_not_fit_is_dropped_not_the_record() -> None:
    s = AttemptSummary.parse({**OLD, "phases": "garbled", "reward": 0.5})
    assert s.phases == {} and s.reward == 0.5
    assert AttemptSummary.loads("not json") == AttemptSummary()
    assert AttemptSummary.parse([1, 2]) == AttemptSummary()


def test_a_usage_record_with_a_number_not_finite_or_negative_is_unknown_and_invalid() -> None:
    """Issue 58: ``"cost_usd": Infinity`` was summed into the run's and the accounts' spend, a
    cost of -100 was credited, negative tokens stored. Read from an agent's file or a ledger
    (``Infinity`` as Python's json writes it), the record keeps no number, only why."""
    for record in ('{"cost_usd": Infinity, "output_tokens": 5, "model": "m", "request_ids": ["r1"]}',
                   '{"cost_usd": NaN}', '{"cost_usd": -100}', '{"output_tokens": -3}', '{"cost_usd": "inf"}',
                   '{"cache_read_tokens": 1e400}'):
        s = AttemptSummary.loads(json.dumps({**OLD, "usage": None})[:-1] + f', "usage": {record}}}')
        assert s.usage is not None and s.usage.invalid, record
        assert not s.usage.known and s.spent_usd is None and s.cost_usd == 0.0, record
        assert s.usage.output_tokens is None and s.usage.input_tokens is None
        again = AttemptSummary.loads(s.dumps())  # a refused record reads back as itself
        assert again.usage == s.usage
    kept = AttemptSummary.loads(json.dumps({**OLD, "usage": {"cost_usd": float("inf"), "model": "m",
                                                             "request_ids": ["r1"]}}))
    assert kept.usage is not None and (kept.usage.model, kept.usage.model_extra) == ("m", {"request_ids": ["r1"]})
    assert "Infinity" not in kept.dumps()


def test_a_usage_record_without_a_problem_keeps_its_shape() -> None:
    s = AttemptSummary.parse(OLD)
    assert s.usage is not None and s.usage.invalid is None and "invalid" not in json.loads(s.dumps())["usage"]


@pytest.mark.parametrize("text", [
    '{"usage": {"input_tokens": 5, "cost_usd": 0.5, "cache_read_tokens": 7}, "verdict": {"message": "ok"},'
    ' "rep": "not a number", "stale": true}',
    '{"usage": {"input_tokens": -5}, "verdict": {"valid": "maybe"}, "phases": {"agent": "x"}}',
    '{"usage": {"cost_usd": Infinity, "model": "m"}, "stale": "yes", "reward": NaN}',
    '[1, 2]', 'not json', '{"usage": null, "verdict": {"message": "m", "flags": [1]}}',
])
def test_a_summary_read_for_some_fields_reads_them_as_the_whole_summary_does(text: str) -> None:
    """Issue 57: the report reads three fields of 100,000 summaries; each must be what the whole
    read gives, a bad field beside it or not."""
    whole, part = AttemptSummary.loads(text), AttemptSummary.loads(text, ("usage", "verdict", "stale"))
    assert (part.usage, part.verdict, part.stale) == (whole.usage, whole.verdict, whole.stale)
    assert part.rep == 0 and part.phases == {}
