from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ray_bench.errors import UserInputError
from ray_bench.evidence import Catalog, classify, fingerprint
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.models.attempt import AttemptSummary

CATALOG = Catalog.default()


def summary(**kw: Any) -> AttemptSummary:
    """A summary in the JSON shape the runner writes (and the first ledgers stored)."""
    base: dict[str, Any] = {"agent": {"exit_code": 0, "timed_out": False, "output_tail": ""},
                            "verifier": {"exit_code": 0, "output_tail": ""}, "reward": 1.0,
                            "error": None, "agent_error": None, "usage": None}
    base.update(kw)
    return AttemptSummary.parse(base)


def test_solved_is_valid() -> None:
    v = classify(summary(), CATALOG)
    assert v.valid and v.effect == "success" and v.failure_class is None


def test_failed_task_is_a_valid_row_with_reward_zero() -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": "gave up"}), CATALOG)
    assert v.valid


def test_agent_timeout_is_valid_and_flagged() -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": -9, "timed_out": True}), CATALOG)
    assert v.valid and "agent_timeout" in v.flags


def test_no_reward_is_evaluator() -> None:
    v = classify(summary(reward=None, verifier={"exit_code": 2}), CATALOG)
    assert not v.valid and v.failure_class == "evaluator" and v.counts


@pytest.mark.parametrize(("text", "cls", "effect"), [
    ("Error: 429 Too Many Requests", "provider", "rate_limited"),
    ("API Error: Overloaded", "provider", "rate_limited"),
    ("OAuth token has expired", "auth", "auth_failed"),
    ("invalid_api_key", "auth", "auth_failed"),
    ("MCP server sourcegraph failed to connect", "tool", "none"),
])
def test_agent_output_is_classified_when_the_agent_failed(text: str, cls: str, effect: str) -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": text}), CATALOG)
    assert (v.valid, v.failure_class, v.effect) == (False, cls, effect)


@pytest.mark.parametrize(("exit_code", "text"), [
    (127, "sh: claude: command not found"),
    (127, "bash: /opt/agent/run.sh: No such file or directory"),
    (126, "sh: 1: ./agent: Permission denied"),
])
def test_an_agent_the_shell_could_not_start_is_a_tool_failure(exit_code: int, text: str) -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": exit_code, "output_tail": text}), CATALOG)
    assert (v.valid, v.failure_class) == (False, "tool")
    assert v.counts  # a broken agent command uses up the cell's attempts


@pytest.mark.parametrize("text", [
    "cat: /app/input.txt: No such file or directory\nI could not find the input; giving up.",
    "$ ./solve\nbash: ./solve: Permission denied\nbash: jq: command not found\nError: task failed",
])
def test_the_same_words_in_an_agent_s_transcript_leave_a_valid_reward_0_row(text: str) -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": text}), CATALOG)
    assert (v.valid, v.failure_class) == (True, None)


@pytest.mark.parametrize("text", [
    '{"type":"user","message":{"content":[{"type":"tool_result","content":"HTTP/1.1 401 Unauthorized"}]}}',
    '{"type":"item.completed","item":{"type":"command_execution","aggregated_output":"429 Too Many Requests"}}',
])
def test_a_cli_adapter_s_transcript_is_not_matched_by_the_catalog(text: str) -> None:
    usage = {"input_tokens": 900, "output_tokens": 120}
    v = classify(summary(reward=0.0, model="m", agent_kind="claude-code", usage=usage,
                         agent={"exit_code": 1, "output_tail": text}), CATALOG)
    assert (v.valid, v.failure_class, v.effect) == (True, None, "success")
    # the same line from a `command` agent is still read as its own report of trouble
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": text}), CATALOG)
    assert not v.valid and v.failure_class in ("auth", "provider")


def test_a_rule_with_exit_codes_matches_only_those_codes(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("rules:\n  - {id: segv, class: stack, fields: [agent_output], pattern: 'core dumped',"
                    " exit_codes: [139]}\n")
    catalog = Catalog.with_user_rules(path)
    crashed = classify(summary(reward=0.0, agent={"exit_code": 139, "output_tail": "core dumped"}), catalog)
    assert crashed.failure_class == "stack"
    said = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": "core dumped"}), catalog)
    assert said.valid


def test_error_json_poisons_even_a_reward() -> None:
    v = classify(summary(agent_error={"type": "rate_limit", "message": "429", "retry_after": 30}), CATALOG)
    assert not v.valid and v.failure_class == "provider" and v.retry_after == 30.0
    assert not v.counts  # a rate limit is not blamed on the cell


def test_a_loop_the_cli_stopped_itself_is_degenerate_whatever_the_reward() -> None:
    # Gemini CLI's loop detection ended the run ("success" on its result line) and the verifier
    # happened to pass: a degenerate agent is no row, and counts against the cell like the watchdog's.
    v = classify(summary(agent_error={"type": "loop", "message": "Loop detected, stopping execution "
                                      "(consecutive_identical_tool_calls); 429 calls"}), CATALOG)
    assert not v.valid and v.failure_class == "behaviour" and "degeneration" in v.flags and v.counts
    assert v.effect == "none"  # never read as a rate limit from the numbers in its message


def test_runner_exception_keeps_its_class() -> None:
    v = classify(summary(error={"type": "SandboxUnavailableError", "message": "daemon down",
                                "failure_class": "stack"}), CATALOG)
    assert (v.valid, v.failure_class) == (False, "stack")


def test_memory_limit_kill_is_capacity_even_with_a_reward() -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 137, "oom_killed": True, "output_tail": ""}), CATALOG)
    assert (v.valid, v.failure_class) == (False, "capacity")
    assert not v.counts  # the limit, not the cell


def test_zero_output_tokens_is_provider() -> None:
    v = classify(summary(reward=0.0, usage={"output_tokens": 0}, agent={"exit_code": 1, "output_tail": "x"}),
                 CATALOG)
    assert v.failure_class == "provider"


def test_fingerprint_folds_numbers_and_paths() -> None:
    assert fingerprint("stack", "r", "container 0xdeadbeef died at /var/lib/x 12") == \
        fingerprint("stack", "r", "container 0xfeedface died at /tmp/y 13")
    assert fingerprint("stack", "r", "a") != fingerprint("tool", "r", "a")


def test_fingerprint_folds_every_id_format() -> None:
    import uuid

    def same(template: str, *ids: tuple[str, str]) -> bool:
        return len({fingerprint("stack", "r", template.format(*each)) for each in ids}) == 1

    uuids = [(str(uuid.uuid4()),) for _ in range(20)]  # short groups of letters only ("beef") among them
    assert same("Daytona sandbox {} still creating after 15s", *uuids)
    assert same("exec in sandbox {}: 502", ("rb-" + uuid.uuid4().hex,), ("rb-" + uuid.uuid4().hex,))
    assert same("container {} exited", ("ray-bench-deadbeefcafef00d",), ("ray-bench-0123456789abcdef",))
    assert same("snapshot {} failed", ("rb-build-abcdef012345",), ("rb-build-feedfacecafe",))
    assert same("request {} failed", ("01ARZ3NDEKTSV4RRFFQ69G5FAV",), ("01HQXW5P7B9JZ8K3M2N4R6T8VA",))
    assert same("{}: overloaded", ("req_011CSHgKqDwmP4pHk3NwRYy6",), ("req_0a1b2c3d4e5f60718293",))
    assert same("id {} gone", ("deadbeef",), ("cafebabe",))
    assert same("token {} bad", ("aZ09bY18cX27dW36eV45",), ("Qq1Ww2Ee3Rr4Tt5Yy6Uu",))
    # what the failure is still tells failures apart
    assert fingerprint("stack", "r", "sandbox 1 timed out") != fingerprint("stack", "r", "sandbox 1 refused")


def test_user_rules_come_first(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("rules:\n  - {id: flaky-net, class: stack, fields: [agent_output], pattern: 'ECONNRESET'}\n")
    catalog = Catalog.with_user_rules(path)
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": "ECONNRESET 429"}), catalog)
    assert v.failure_class == "stack"


def test_bad_catalog_rule(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("rules:\n  - {id: x, class: nonsense, fields: [error], pattern: '('}\n")
    with pytest.raises(UserInputError):
        Catalog.with_user_rules(path)


def test_circuit_opens_on_repeats_without_success() -> None:
    circuit = RecoveryCircuit(threshold=3)
    for _ in range(2):
        assert circuit.record_failure("stack", "fp", account="a", backend="docker") == []
    assert circuit.record_failure("stack", "fp", account="a", backend="docker") == ["backend:docker", "run"]
    assert circuit.blocks(account="b", backend="docker") == "run"
    # A hypothesis puts both on probation: nothing blocks, but a cell there goes as their probe.
    assert circuit.hypothesis("restarted dockerd") == ["backend:docker", "run"]
    assert circuit.blocks(account="b", backend="docker") is None
    assert circuit.probing_for(account="b", backend="docker") == ["run", "backend:docker"]


def test_circuit_streak_broken_by_success_or_other_signature() -> None:
    circuit = RecoveryCircuit(threshold=2)
    circuit.record_failure("auth", "x", account="a", backend="local")
    circuit.record_success(account="a", backend="local")
    assert circuit.record_failure("auth", "x", account="a", backend="local") == []
    assert circuit.record_failure("auth", "y", account="a", backend="local") == []
    assert circuit.record_failure("auth", "y", account="a", backend="local") == ["account:a"]
    assert circuit.blocks(account="b", backend="local") is None
    assert circuit.blocks(account="a", backend="local") == "account:a"


def test_task_failures_never_open_a_circuit() -> None:
    circuit = RecoveryCircuit(threshold=1)
    assert circuit.record_failure("task", "x", account="a", backend="local") == []
    assert circuit.record_failure("provider", "x", account="a", backend="local") == []


def test_lost_runner_is_infrastructure() -> None:
    v = classify(summary(lost=True, error={"type": "ActorDiedError", "message": "node died",
                                           "failure_class": "executor"}), CATALOG)
    assert not v.valid and v.lost and not v.counts


def test_retry_after_read_from_the_message_when_not_given() -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": "429 rate limit; retry-after: 45"}),
                 CATALOG)
    assert (v.effect, v.retry_after) == ("rate_limited", 45.0)


@pytest.mark.parametrize(("text", "expired"), [
    ("authentication_error: OAuth token has expired", True),
    ("401 invalid_api_key", False),
])
def test_auth_expiry_is_decided_by_the_classifier(text: str, expired: bool) -> None:
    v = classify(summary(reward=0.0, agent={"exit_code": 1, "output_tail": text}), CATALOG)
    assert (v.effect, v.expired) == ("auth_failed", expired)


UNKNOWN_USAGE = {"input_tokens": None, "output_tokens": None, "source": "unknown"}


@pytest.mark.parametrize(("usage", "cls"), [(None, "tool"), ({"input_tokens": 9, "output_tokens": 0}, "provider"),
                                            (UNKNOWN_USAGE, "tool")])
def test_an_arm_with_a_model_needs_usage_evidence_whatever_the_reward(usage: Any, cls: str) -> None:
    v = classify(summary(model="claude-sonnet-4-5", agent_kind="claude-code", usage=usage, reward=1.0), CATALOG)
    assert not v.valid and v.failure_class == cls and "no usage evidence" in v.message


def test_usage_evidence_makes_a_model_row_valid_and_a_modelless_arm_needs_none() -> None:
    assert classify(summary(model="m", usage={"input_tokens": 1, "output_tokens": 5}), CATALOG).valid
    assert classify(summary(usage=None), CATALOG).valid


@pytest.mark.parametrize(("etype", "cls", "effect"), [
    ("usage_limit", "provider", "rate_limited"), ("overloaded", "provider", "rate_limited"),
    ("server_error", "provider", "server_error"), ("no_answer", "provider", "none"), ("expired", "auth", "auth_failed"),
    ("cli_missing", "tool", "none")])
def test_the_adapters_error_types_classify(etype: str, cls: str, effect: str) -> None:
    v = classify(summary(model="m", agent_error={"type": etype, "message": "x", "retry_after": 60}), CATALOG)
    assert (v.valid, v.failure_class, v.effect) == (False, cls, effect)


@pytest.mark.parametrize("exit_code", [-9, 137, 139, 143])
@pytest.mark.parametrize("model", [None, "claude-sonnet-4-5"])
def test_an_agent_killed_by_a_signal_is_never_a_valid_row(exit_code: int, model: str | None) -> None:
    usage = {"input_tokens": 10, "output_tokens": 5} if model else None
    v = classify(summary(reward=1.0, agent={"exit_code": exit_code, "output_tail": "Killed"},
                         model=model, usage=usage), CATALOG)
    assert not v.valid and v.failure_class == "tool" and v.counts and "crashed" in v.flags
    assert "killed by signal" in v.message


@pytest.mark.parametrize("agent", [{"exit_code": -9, "timed_out": True}, {"exit_code": 137, "stopped": "watchdog"},
                                   {"exit_code": 1}, {"exit_code": 255}, {"exit_code": 128}])
def test_our_own_kills_and_plain_exit_codes_are_not_crashes(agent: dict[str, Any]) -> None:
    v = classify(summary(reward=1.0, agent=agent), CATALOG)
    assert "crashed" not in v.flags
    if "stopped" not in agent:
        assert v.valid


def test_a_command_agents_usage_limit_cools_its_account_until_its_reset() -> None:
    """Issue 54 item 11: a ``command`` agent writes the error contract by hand, often with only
    ``reset_at`` (an epoch): its window opens in three days, so its account cools three days, not
    the 60 s default. A ``retry_after`` it also gives that is longer still wins."""
    from ray_bench.accounts.health import AccountHealth

    end = 1_796_000_000.0
    reset = end + 3 * 86400
    error = {"type": "usage_limit", "message": "weekly quota used up", "reset_at": reset}
    v = classify(summary(agent_error=error, started_at=end - 30, finished_at=end), CATALOG)
    assert v.effect == "rate_limited" and v.retry_after == pytest.approx(3 * 86400)
    health = AccountHealth()
    health.on_rate_limited(end, end - 30, v.retry_after)
    assert health.blocked_until(end + 86400) == pytest.approx(reset)  # still cooling a day later
    # a retry_after beyond the reset is the later wait; a reset already past says nothing
    v = classify(summary(agent_error={**error, "retry_after": 4 * 86400}, finished_at=end), CATALOG)
    assert v.retry_after == pytest.approx(4 * 86400)
    v = classify(summary(agent_error={**error, "reset_at": end - 10, "retry_after": 30}, finished_at=end), CATALOG)
    assert v.retry_after == 30


@pytest.mark.parametrize("usage", [{"cost_usd": float("inf"), "output_tokens": 9},
                                   {"cost_usd": -100.0, "output_tokens": 9}, {"output_tokens": -1}])
@pytest.mark.parametrize("model", [None, "claude-x"])
def test_a_refused_usage_record_makes_the_attempt_invalid_with_its_reason(usage: dict[str, Any],
                                                                          model: str | None) -> None:
    """Issue 58: whatever the reward and whether the arm names a model, numbers that are no
    evidence make no row (class ``tool``: the agent wrote them)."""
    v = classify(summary(usage=usage, model=model), CATALOG)
    assert not v.valid and v.failure_class == "tool"
    assert v.message.startswith("usage record refused: ") and ("finite" in v.message or "negative" in v.message)


def test_a_retry_after_of_infinity_is_not_taken() -> None:
    v = classify(summary(agent_error={"type": "rate_limit", "message": "429", "retry_after": float("inf")}), CATALOG)
    assert v.retry_after is None or v.retry_after < 1e9


@pytest.mark.parametrize("reset_at", [float("inf"), 1e300, float("nan")])
def test_a_reset_at_that_is_no_time_does_not_cool_an_account_for_good(reset_at: float) -> None:
    """Issue 58: an error.json's ``reset_at`` is a number from the world; ``Infinity`` or
    ``1e300`` would cool its account for good (``reset_at - end`` seconds). It says nothing."""
    end = 1_796_000_000.0
    error = {"type": "usage_limit", "message": "weekly quota used up", "reset_at": reset_at}
    v = classify(summary(agent_error=error, started_at=end - 30, finished_at=end), CATALOG)
    assert v.retry_after is None or v.retry_after <= 31 * 86400
    v = classify(summary(agent_error={**error, "retry_after": 1e300}, finished_at=end), CATALOG)
    assert v.retry_after is None or v.retry_after <= 31 * 86400
