"""Settlement by request id against provider usage exports in their real shapes (LiteLLM spend
logs, OpenRouter generations, CSV), and the time-bucketed Anthropic/OpenAI reports refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reports.report_ledgers import Writer, first_run
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.evidence.promote import check_gates, promote_run
from ray_bench.evidence.rows import load_epoch
from ray_bench.evidence.settle import read_settlement, settle_run, usage_unknown
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file
from ray_bench.reports.build import build_report, render_markdown


def _charged(root: Path) -> list[str]:
    """Attempt ids that recorded usage (every finished attempt; the stale one did not)."""
    with Ledger.reading(root) as ledger:
        return sorted(a for a, s in ledger.summaries() if s.usage is not None)


def _events(root: Path) -> int:
    with Ledger.reading(root) as ledger:
        return len(ledger.events())


def test_csv_export_settles_flags_missing_and_disputed(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    ids = _charged(root)
    assert len(ids) == 17
    lines = ["request_id,model,cost_usd"]
    lines += [f"req_{a},claude-sonnet-4-5,0.012" for a in ids[2:]]  # first two not billed yet
    lines.append(f"req_{ids[5]},claude-sonnet-4-5,0.012")  # a duplicated request id
    lines.append("req_unrelated,claude-sonnet-4-5,0.5")
    export = tmp_path / "usage.csv"
    export.write_text("\n".join(lines) + "\n")
    result = settle_run(root, export, by="fin")
    counts = result.counts()
    assert counts == {"settled": 15, "missing": 2, "disputed": 0, "n/a": 1}
    assert result.attempts[ids[0]].status == "missing" and result.attempts[ids[0]].settled_usd is None
    # a request billed twice is summed: the provider charged it twice
    assert result.attempts[ids[5]].settled_usd == pytest.approx(0.024)
    assert result.attempts[ids[3]].estimated_usd == pytest.approx(0.01)
    assert result.attempts[ids[3]].settled_usd == pytest.approx(0.012)
    assert (result.unmatched_charges, result.unmatched_usd) == (1, pytest.approx(0.5))
    assert read_settlement(root) == result

    report = build_report(root)
    arms = report.arms.set_index("arm")
    assert arms.loc["baseline", "cost_usd"] == pytest.approx(0.09)  # estimates unchanged
    assert report.arms.settled_usd.sum() == pytest.approx(14 * 0.012 + 0.024)
    row = report.settlement.iloc[0]
    assert (row.settled, row.missing, row.by, row.source) == (15, 2, "fin", "usage.csv")
    md = render_markdown(report)
    assert "## Settlement" in md and "cost settled (USD)" in md

    # promote with settlement present: missing charges block it
    gates = {g.name: g for g in promote_run(root, reason="x", audit=lambda _: 0).gates}
    assert not gates["settlement"].ok and "2 missing" in gates["settlement"].detail


def test_litellm_and_openrouter_exports_and_a_disputed_charge(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    ids = _charged(root)
    litellm = [{"request_id": f"req_{a}", "call_type": "acompletion", "api_key": "hashed", "spend": 0.011,
                "total_tokens": 110, "prompt_tokens": 100, "completion_tokens": 10,
                "startTime": "2026-11-30T10:00:00Z", "endTime": "2026-11-30T10:00:05Z",
                "model": "claude-sonnet-4-5", "metadata": {}} for a in ids]
    export = tmp_path / "spend-logs.json"
    export.write_text(json.dumps(litellm))
    result = settle_run(root, export)
    assert result.format == "litellm" and result.complete and result.counts()["settled"] == 17

    # OpenRouter: the generation id is OpenRouter's; upstream_id is the provider's request id
    generations = [{"data": {"id": f"gen-{n}", "upstream_id": f"req_{a}", "total_cost": 0.013,
                             "model": "anthropic/claude-sonnet-4.5", "tokens_prompt": 100,
                             "tokens_completion": 10}} for n, a in enumerate(ids)]
    # a charge whose two ids name two different attempts: which one spent it is ambiguous
    generations[1]["data"]["id"] = f"req_{ids[0]}"
    export = tmp_path / "generations.json"
    export.write_text(json.dumps(generations))
    result = settle_run(root, export)
    assert result.format == "openrouter"
    assert result.attempts[ids[0]].status == result.attempts[ids[1]].status == "disputed"
    assert result.counts()["settled"] == 15
    assert read_settlement(root) == result  # the latest settlement counts


ANTHROPIC_USAGE = {"data": [{"starting_at": "2026-11-30T00:00:00Z", "ending_at": "2026-12-01T00:00:00Z",
                             "results": [{"uncached_input_tokens": 1000, "cache_read_input_tokens": 0,
                                          "output_tokens": 100, "model": "claude-sonnet-4-5",
                                          "workspace_id": None, "api_key_id": None}]}],
                   "has_more": False, "next_page": None}
OPENAI_COSTS = {"object": "page", "data": [{"object": "bucket", "start_time": 1730419200,
                                            "end_time": 1730505600, "results": [
                                                {"object": "organization.costs.result",
                                                 "amount": {"value": 0.06, "currency": "usd"},
                                                 "line_item": None, "project_id": None}]}],
                "has_more": False, "next_page": None}


@pytest.mark.parametrize(("name", "content", "says"), [
    ("anthropic.json", json.dumps(ANTHROPIC_USAGE), "Anthropic usage/cost report export: time-bucketed"),
    ("openai.json", json.dumps(OPENAI_COSTS), "OpenAI organization usage/costs export: time-bucketed"),
    ("odd.csv", "date,amount\n2026-11-30,1.0\n", "format not understood (CSV columns: date, amount)"),
    ("odd.json", '{"hello": 1}', "format not understood"),
    ("broken.json", '[{"request_id": "x", "spend": "lots"}]', "is not a number"),
])
def test_unusable_exports_exit_2_with_one_line_and_write_nothing(tmp_path: Path, name: str, content: str,
                                                                  says: str) -> None:
    root = first_run(tmp_path)
    before = _events(root)
    export = tmp_path / name
    export.write_text(content)
    result = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert _events(root) == before and read_settlement(root) is None


def test_promote_can_require_settlement(tmp_path: Path) -> None:
    root = first_run(tmp_path)
    for cell in ("count-words/mcp/1", "count-words/mcp/2", "fizzbuzz/baseline/2"):
        CliRunner().invoke(app, ["exclude", str(root), "--cell", cell, "--reason", "broken", "--by", "ana"])
    gates = {g.name: g for g in promote_run(root, reason="x", require_settlement=True,
                                            audit=lambda _: 0).gates}
    assert not gates["settlement"].ok and "no settlement" in gates["settlement"].detail
    export = tmp_path / "usage.csv"
    export.write_text("request_id,cost_usd\n" + "".join(f"req_{a},0.01\n" for a in _charged(root)))
    settled = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export), "--by", "fin"])
    assert settled.exit_code == 0 and "17 settled, 0 missing, 0 disputed" in settled.stdout
    done = promote_run(root, reason="settled", require_settlement=True, audit=lambda _: 0)
    assert done.promoted, done.gates


@pytest.mark.parametrize(("content", "says"), [
    ("[]", "usage export has no charges"),
    ("request_id,cost_usd\n", "usage export has no charges"),
    ('[{"request_id": "req_of_another_account", "cost_usd": 0.4}]',
     "foreign usage export: none of its 1 charges names a request or session id of run"),
])
def test_an_empty_or_foreign_export_is_refused_and_writes_nothing(tmp_path: Path, content: str,
                                                                   says: str) -> None:
    root = first_run(tmp_path)
    export = tmp_path / "usage.json"
    export.write_text(content)
    good = tmp_path / "good.csv"
    good.write_text("request_id,cost_usd\n" + "".join(f"req_{a},0.01\n" for a in _charged(root)))
    first = settle_run(root, good)
    before = _events(root)
    result = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert _events(root) == before and read_settlement(root) == first  # the good one still counts


def _session(root: Path) -> None:
    """The driver's session around the attempts, so that status reads the run as finished."""
    plan, identity = load_plan_file(root / "launch-plan.json")
    ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
    try:
        ledger.event("run_started", {"options": {}}, now=1.0)
        ledger.event("run_finished", {"stopped": None}, now=2.0)
    finally:
        ledger.close()


def _promoted(tmp_path: Path) -> Path:
    root = first_run(tmp_path)
    _session(root)
    for cell in ("count-words/mcp/1", "count-words/mcp/2", "fizzbuzz/baseline/2"):
        CliRunner().invoke(app, ["exclude", str(root), "--cell", cell, "--reason", "broken", "--by", "ana"])
    assert promote_run(root, reason="all pairs", by="lead", audit=lambda _: 0).promoted
    return root


def test_settle_after_promote_is_refused_until_the_run_is_demoted_on_the_record(tmp_path: Path) -> None:
    root = _promoted(tmp_path)
    export = tmp_path / "usage.csv"
    export.write_text("request_id,cost_usd\n" + "".join(f"req_{a},0.02\n" for a in _charged(root)))
    before = _events(root)
    refused = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export)])
    assert refused.exit_code == 2, refused.output
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is official" in lines[0] and "ray-bench demote" in lines[0], refused.stderr
    assert _events(root) == before and read_settlement(root) is None

    # demote needs a reason, and writes nothing without one
    no_reason = CliRunner().invoke(app, ["demote", str(root), "--reason", " "])
    assert no_reason.exit_code == 2 and _events(root) == before
    demoted = CliRunner().invoke(app, ["demote", str(root), "--reason", "late provider charges",
                                       "--by", "fin"])
    assert demoted.exit_code == 0, demoted.output
    assert "staging again: demoted by fin" in demoted.stdout

    status = CliRunner().invoke(app, ["status", str(root)])
    assert "(finished, staging)" in status.stdout
    assert "staging again: demoted by fin at" in status.stdout and "late provider charges" in status.stdout
    as_json = json.loads(CliRunner().invoke(app, ["status", str(root), "--json"]).stdout)
    assert as_json["category"] == "staging" and as_json["promotion"] is None
    assert as_json["demotion"]["by"] == "fin" and as_json["demotion"]["reason"] == "late provider charges"
    report = build_report(root)
    assert report.category == "staging" and "Staging again." in render_markdown(report)
    assert "demoted by fin" in render_markdown(report)

    settled = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export)])
    assert settled.exit_code == 0, settled.output
    assert read_settlement(root) is not None and read_settlement(root).complete  # type: ignore[union-attr]
    again = CliRunner().invoke(app, ["demote", str(root), "--reason", "twice"])
    assert again.exit_code == 2 and "is not official" in again.stderr
    # promoted again, it is official again (the demotion no longer stands)
    assert promote_run(root, reason="settled", audit=lambda _: 0).promoted
    assert json.loads(CliRunner().invoke(app, ["status", str(root), "--json"]).stdout)["demotion"] is None


def test_unknown_usage_is_never_settled_as_zero_and_blocks_a_required_settlement(tmp_path: Path) -> None:
    """A run of one attempt cut before anything recorded what it spent (usage ``unknown``, no
    cost): it did not spend $0, so settlement calls it missing and --require-settlement refuses."""
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=1)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="u1").run_root
    w = Writer(root)
    # the baseline's cut attempt kept one request id (its charge settles it); the variant's none
    for arm, ids in (("baseline", ["req_cut"]), ("mcp", [])):
        w.attempt("hello-world", arm, 1, 100, reward=1.0, usage={"source": "unknown", "request_ids": ids})
    # Refused throughout (a 401 loop): a session id, nothing spent: nothing to settle.
    w.attempt("hello-world", "baseline", 1, 120, fail=("auth", "auth-1"),
              usage={"input_tokens": 0, "output_tokens": 0, "session_id": "sess-refused", "request_ids": []})
    w.ledger.close()
    gates = {g.name: g for g in promote_run(root, reason="x", require_settlement=True, audit=lambda _: 0).gates}
    assert not gates["settlement"].ok and "2 attempts with unknown usage" in gates["settlement"].detail
    # Without the requirement nothing has spent money; the gate lets it through (the report shows it).
    # (check_gates: the same gates, recording nothing, so the run stays open to the settlement below)
    gates = {g.name: g for g in check_gates([load_epoch(root)], max_invalid_rate=0.25, require_settlement=False,
                                            audit=lambda _: 0)}
    assert gates["settlement"].ok
    export = tmp_path / "usage.csv"
    export.write_text("request_id,cost_usd\nreq_cut,0.01\nreq_other,0.02\n")
    result = settle_run(root, export, by="fin")
    rows = load_epoch(root).attempts
    cut = {a.arm: a for a in rows if a.failure_class is None}
    refused = next(a for a in rows if a.failure_class == "auth")
    assert result.counts() == {**result.counts(), "missing": 1, "settled": 1, "n/a": 1} and not result.complete
    assert result.attempts[cut["baseline"].attempt_id].status == "settled"
    assert "usage unknown" in result.attempts[cut["mcp"].attempt_id].detail
    assert result.attempts[refused.attempt_id].status == "n/a"
    report = build_report(root)
    # the refused attempt's tokens are known (0) but no cost was reported: unknown cost, not $0
    assert report.usage.set_index("arm").unknown_attempts.to_dict() == {"baseline": 1, "mcp": 1}
    assert report.usage.set_index("arm").settled_attempts.to_dict() == {"baseline": 1, "mcp": 0}
    unknown_ids = set(report.attempts[report.attempts.input_tokens.isna()].attempt_id)
    assert unknown_ids == {cut["baseline"].attempt_id, cut["mcp"].attempt_id}  # no token count made up
    assert "| unknown |" in render_markdown(report)


def test_tokens_without_a_cost_are_an_unknown_cost_that_a_required_settlement_refuses() -> None:
    """A model with no list price (ray_bench/agents/prices.py): its tokens are known, its cost is
    not; the promotion gate counts it with the unknown usages, never as $0."""
    def summary(usage: dict[str, object] | None) -> AttemptSummary:
        return AttemptSummary.parse({"usage": usage})
    assert usage_unknown(summary({"input_tokens": 300, "output_tokens": 20, "source": "session"}))
    assert usage_unknown(summary({"source": "unknown"}))
    assert not usage_unknown(summary({"input_tokens": 300, "output_tokens": 20, "cost_usd": 0.0012,
                                      "cost_basis": "estimated"}))
    assert not usage_unknown(summary({"input_tokens": 0, "output_tokens": 0, "source": "stream"}))  # refused
    assert not usage_unknown(summary(None)) and not usage_unknown(None)


def test_partial_request_ids_never_settle_an_attempt_and_an_unknown_cost_has_no_estimate() -> None:
    """Gemini CLI's telemetry loses the ids of its last answers at a kill (its 5-s batch): the ids
    it kept match charges, and the attempt is still missing, not settled on part of its bill."""
    from ray_bench.evidence.settle import reconcile
    from ray_bench.evidence.usage_export import Charge, UsageExport
    from ray_bench.ledger.store import AttemptRow

    def row(attempt: str, cost: float | None) -> AttemptRow:
        return AttemptRow(attempt, attempt, "t", "c", "a", 1, 1, "acc", "local", "e", False, 1.0, "finished", 2.0,
                          True, 1.0, cost_usd=cost)
    summaries = {
        "whole": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.01, "request_ids": ["r1"]}}),
        "partial": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.02, "request_ids": ["r2"],
                                                   "request_ids_missing": 1}}),
        "priceless": AttemptSummary.parse({"usage": {"output_tokens": 9, "request_ids": ["r3"]}}),
        # two calls broken off by the CLI's loop detection: served, and in no record with their id
        "broken": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.02, "request_ids": ["r4"],
                                                  "calls_unfinished": 2, "bound": "lower_bound"}})}
    export = UsageExport("csv", (Charge(("r1",), 0.01), Charge(("r2",), 0.01), Charge(("r3",), 0.03),
                                 Charge(("r4",), 0.01), Charge(("r5",), 0.01), Charge(("r6",), 0.01)))
    out, unclaimed, _ = reconcile([row("whole", 0.01), row("partial", 0.02), row("priceless", None),
                                   row("broken", 0.02)], summaries, export)
    assert out["broken"].status == "missing" and "2 call(s)" in out["broken"].detail and out["broken"].lower_bound
    assert out["whole"].status == "settled"
    assert out["partial"].status == "missing" and "no request id recorded" in out["partial"].detail
    assert out["priceless"].estimated_usd is None and out["priceless"].settled_usd == 0.03  # unknown, not $0
    assert unclaimed == 2


def test_a_lower_bound_estimate_is_said_so_in_settle_and_kept_in_the_ledger(tmp_path: Path) -> None:
    """An attempt whose CLI was SIGKILLed in its grace (usage ``bound: lower_bound``): settle's
    estimated line says "at least" and how many, and the recorded settlement keeps the flag."""
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=1)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="lb").run_root
    w = Writer(root)
    w.attempt("hello-world", "baseline", 1, 100, reward=1.0,
              usage={"input_tokens": 730, "output_tokens": 40, "cost_usd": 0.002, "request_ids": ["req_a"],
                     "bound": "lower_bound"})
    w.attempt("hello-world", "mcp", 1, 100, reward=1.0,
              usage={"input_tokens": 700, "output_tokens": 40, "cost_usd": 0.002, "request_ids": ["req_b"],
                     "bound": "exact"})
    w.ledger.close()
    export = tmp_path / "usage.csv"
    export.write_text("request_id,cost_usd\nreq_a,0.002\nreq_b,0.002\nreq_grace,0.0012\n")
    done = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export), "--by", "fin"])
    assert done.exit_code == 0, done.output
    assert "estimated at least $0.0040 (1 attempt cut" in done.output and "lower bound" in done.output
    assert "1 charges matched no attempt" in done.output
    saved = read_settlement(root)
    assert saved is not None and saved.lower_bounds() == 1
    assert sorted(a.lower_bound for a in saved.attempts.values()) == [False, True]


def test_refused_calls_are_kept_but_never_expected_on_a_bill() -> None:
    """Issue 54 item 4: a refused call (429, 5xx, 401: no token served) is not billed by the
    provider. Its id and class stay in the usage record, apart from the answered calls' ids:
    an attempt with refusals settles on its answered calls alone, one refused throughout is n/a
    (not missing), and a charge that does name a refused call is still the attempt's."""
    from ray_bench.evidence.settle import reconcile
    from ray_bench.evidence.usage_export import Charge, UsageExport
    from ray_bench.ledger.store import AttemptRow

    def row(attempt: str, cost: float | None) -> AttemptRow:
        return AttemptRow(attempt, attempt, "t", "c", "a", 1, 1, "acc", "local", "e", False, 1.0, "finished", 2.0,
                          True, 1.0, cost_usd=cost)

    def refused(*ids: str, status: int = 429, kind: str = "rate_limit") -> list[dict[str, object]]:
        return [{"request_id": i, "status": status, "type": kind} for i in ids]
    summaries = {
        "retried": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.02, "request_ids": ["a1", "a2"],
                                                   "refused": refused("x1") + refused("x2", status=500,
                                                                                       kind="server_error")}}),
        "refused": AttemptSummary.parse({"usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0,
                                                   "source": "stream", "session_id": "s-refused",
                                                   "refused": refused("x3", "x4", status=401, kind="auth")}}),
        # an agent that also lists a refused call among its request ids: still not expected
        "listed": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.01, "request_ids": ["b1", "x5"],
                                                  "refused": refused("x5")}}),
        # a provider that did bill a refusal: the charge is this attempt's, not a stranger's
        "billed": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.01, "request_ids": ["c1"],
                                                  "refused": refused("x6", status=503, kind="overloaded")}})}
    export = UsageExport("csv", (Charge(("a1",), 0.01), Charge(("a2",), 0.01), Charge(("b1",), 0.01),
                                 Charge(("c1",), 0.01), Charge(("x6",), 0.002)))
    out, unclaimed, _ = reconcile([row("retried", 0.02), row("refused", 0.0), row("listed", 0.01),
                                   row("billed", 0.01)], summaries, export)
    assert out["retried"].status == "settled" and out["retried"].settled_usd == pytest.approx(0.02)
    assert "2 refused call(s), not billed" in out["retried"].detail
    assert out["refused"].status == "n/a" and out["refused"].settled_usd is None, out["refused"]
    assert out["listed"].status == "settled" and out["listed"].settled_usd == pytest.approx(0.01)
    assert out["billed"].status == "settled" and out["billed"].settled_usd == pytest.approx(0.012)
    assert unclaimed == 0
    # Before the refusals were kept apart, the same ids among the request ids made each missing.
    lumped = {"retried": AttemptSummary.parse({"usage": {"output_tokens": 9, "cost_usd": 0.02,
                                                         "request_ids": ["a1", "a2", "x1", "x2"]}}),
              "refused": AttemptSummary.parse({"usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0,
                                                         "source": "stream", "request_ids": ["x3", "x4"]}})}
    before, _, _ = reconcile([row("retried", 0.02), row("refused", 0.0)], lumped, export)
    assert before["retried"].status == before["refused"].status == "missing"


def test_status_shows_the_settled_spend_after_settlement(tmp_path: Path) -> None:
    """Issue 54 item 12: once settled, ``status`` counts the provider's charges (not the agents'
    estimates) for the attempts the settlement settled, and says so beside the estimate."""
    from ray_bench.status.read import read_status
    from ray_bench.status.text import status_lines

    root = first_run(tmp_path)
    _session(root)
    ids = _charged(root)
    before = read_status(root)
    assert before.settled_attempts == 0 and before.estimated_usd is None
    export = tmp_path / "usage.csv"
    export.write_text("request_id,cost_usd\n" + "".join(f"req_{a},0.5\n" for a in ids[2:]))  # two unbilled yet
    settle_run(root, export, by="fin")
    after = read_status(root)
    estimates = {a.attempt_id: a.cost_usd for a in Ledger.read_attempts(root)}
    unsettled = sum(estimates[a] or 0.0 for a in estimates if a not in ids[2:])
    assert after.settled_attempts == 15 and after.estimated_usd == pytest.approx(before.spend_usd)
    assert after.spend_usd == pytest.approx(15 * 0.5 + unsettled)
    assert after.to_json()["spend_usd"] == pytest.approx(15 * 0.5 + unsettled, abs=1e-4)
    line = next(ln for ln in status_lines(after) if ln.startswith("spend:"))
    assert f"${15 * 0.5 + unsettled:.2f}" in line and "settled by the provider's charges for 15 of" in line, line


def test_settle_keeps_each_attempt_s_cost_at_full_precision() -> None:
    """A call of a cheap model costs under a micro-dollar (gemini-2.5-flash-lite: 400 tokens in,
    10 out = $0.000044; one of 3 tokens in: $0.0000003): settle keeps what it read, unrounded."""
    from ray_bench.evidence.settle import reconcile
    from ray_bench.evidence.usage_export import Charge, UsageExport
    from ray_bench.ledger.store import AttemptRow

    row = AttemptRow("tiny", "tiny", "t", "c", "a", 1, 1, "acc", "local", "e", False, 1.0, "finished", 2.0,
                     True, 1.0, cost_usd=3e-7)
    summaries = {"tiny": AttemptSummary.parse({"usage": {"output_tokens": 0, "input_tokens": 3, "cost_usd": 3e-7,
                                                         "request_ids": ["r1", "r2"]}})}
    export = UsageExport("csv", (Charge(("r1",), 1.4e-7), Charge(("r2",), 1.7e-7), Charge(("r9",), 2.5e-8)))
    out, unclaimed, unclaimed_usd = reconcile([row], summaries, export)
    assert out["tiny"].status == "settled"
    assert out["tiny"].estimated_usd == 3e-7 and out["tiny"].settled_usd == pytest.approx(3.1e-7, rel=1e-12)
    assert unclaimed == 1 and unclaimed_usd == 2.5e-8  # was rounded to $0.0
