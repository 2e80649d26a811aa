"""A cut attempt's cost estimated from its tokens (ray_bench/agents/prices.py), read from the
real CLIs' recorded output: marked ``estimated``, never $0 for a model without a price."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_bench.agents.prices import estimate_usd, price_of, with_cost
from ray_bench.agents.runtime import record
from ray_bench.models.agent import Usage
from ray_bench.models.attempt import AttemptSummary

CLAUDE = Path(__file__).parent / "fixtures" / "claude-code-2.1.197"
CODEX = Path(__file__).parent / "fixtures" / "codex-0.171.0"


def test_the_sonnet_price_reproduces_claude_codes_own_cost() -> None:
    checked = 0
    for path in sorted(CLAUDE.glob("*.stream.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") != "result" or not event.get("total_cost_usd"):
                continue
            raw = event["usage"]
            usage = Usage(input_tokens=raw["input_tokens"], output_tokens=raw["output_tokens"],
                          cache_read_tokens=raw["cache_read_input_tokens"],
                          cache_write_tokens=raw["cache_creation_input_tokens"], model="claude-sonnet-4-5")
            assert estimate_usd(usage) == pytest.approx(event["total_cost_usd"], rel=1e-9), path.name
            checked += 1
    assert checked >= 2


def test_models_without_a_price_stay_unknown_never_zero() -> None:
    assert price_of("claude-sonnet-4-5-20250929") == price_of("sonnet") is not None
    assert price_of("claude-opus-4-5") != price_of("claude-opus-4-1")
    for model in ("opus", "some-local-model", None, ""):
        assert price_of(model) is None, model
    usage = Usage(input_tokens=100, output_tokens=10, model="some-local-model")
    # its cost stays unknown; what it says is only its bound (issue 25: exact, not cut mid-turn)
    assert with_cost(usage, "some-local-model") == usage.model_copy(update={"bound": "exact"})
    assert usage.cost_usd is None
    assert estimate_usd(Usage.unknown(), "gpt-5") is None  # no tokens: nothing to price
    # The CLI's own figure is kept and said to be its own, even $0 (every call refused).
    assert with_cost(Usage(cost_usd=0.0), "gpt-5") == Usage(cost_usd=0.0, cost_basis="reported", bound="exact")


def test_the_gemini_models_the_cli_runs_are_priced_and_its_aliases_are_not() -> None:
    # Gemini CLI 0.61.0's default (auto: a pro model), its flash fallback and its helpers' models.
    for model in ("gemini-2.5-pro", "gemini-3-pro-preview", "gemini-3.1-pro-preview", "gemini-3-flash-preview",
                  "gemini-3.5-flash", "gemini-3.8-flash", "gemini-3.1-flash-lite", "gemini-3.5-flash-lite",
                  "gemini-2.5-flash", "gemini-2.5-flash-lite", "models/gemini-2.5-pro"):
        assert price_of(model) is not None, model
    assert price_of("gemini-2.5-flash-lite") != price_of("gemini-2.5-flash") != price_of("gemini-2.5-pro")
    for model in ("auto", "pro", "flash", "flash-lite", "gemini-3-flash", "gemini-9-ultra"):
        assert price_of(model) is None, model
    # The usage of tests/agents/test_gemini_translate.py's finished run: 700 fresh, 55 out (thoughts
    # in), 50 cache reads, at $1.25 / $10 / $0.125 per million.
    usage = Usage(input_tokens=700, output_tokens=55, cache_read_tokens=50, model="gemini-2.5-pro")
    priced = with_cost(usage, "auto")
    assert priced is not None and priced.cost_basis == "estimated"
    assert priced.cost_usd == pytest.approx((700 * 1.25 + 55 * 10 + 50 * 0.125) / 1e6)
    # the arm's alias alone prices nothing: unknown, never $0
    assert with_cost(usage.model_copy(update={"model": None}), "auto").cost_usd is None  # type: ignore[union-attr]


def _logs(tmp: Path, fixtures: Path, name: str, session_path: str, lines: list[str]) -> Path:
    logs = tmp / "agent"
    (logs / "sessions" / session_path).parent.mkdir(parents=True)
    (logs / "agent-output.txt").write_text("\n".join(lines))
    for kept in fixtures.glob(f"{name}.*.jsonl"):
        if "stream" not in kept.name:
            shutil.copy(kept, logs / "sessions" / session_path)
    return logs


def test_a_killed_claude_attempt_gets_the_cost_its_cli_would_have_printed(tmp_path: Path) -> None:
    lines = (CLAUDE / "killed.stream.jsonl").read_text().splitlines()
    logs = _logs(tmp_path, CLAUDE, "killed", "p/s.jsonl", lines)
    report = record("claude-code", "", "", None, False, 6.0, logs, "repeated_tool_call: ...", model="sonnet")
    assert report is not None and report.usage is not None
    written = json.loads((logs / "usage.json").read_text())
    # 300 input, 20 output (the transcript's final count) at Sonnet's $3 / $15 a million.
    assert written["source"] == "session" and written["cost_basis"] == "estimated"
    assert written["cost_usd"] == pytest.approx(300 * 3e-6 + 20 * 15e-6)
    summary = AttemptSummary.parse({"usage": written})
    assert summary.spent_usd == summary.cost_usd == pytest.approx(0.0012)
    # The same attempt on a model with no price: tokens known, cost unknown (not $0).
    (logs / "usage.json").unlink()
    record("claude-code", "", "", None, False, 6.0, logs, "x", model="house-model")
    written = json.loads((logs / "usage.json").read_text())
    assert written["model"] == "claude-sonnet-4-5"  # the usage's own model wins over the arm's
    assert written["cost_basis"] == "estimated"


def test_codex_attempts_finished_or_cut_are_priced_at_their_model(tmp_path: Path) -> None:
    for cut in (False, True):
        lines = (CODEX / "ok.stream.jsonl").read_text().splitlines()
        if cut:
            lines = [ln for ln in lines if '"turn.completed"' not in ln]
        logs = _logs(tmp_path / str(cut), CODEX, "ok", "2026/12/01/rollout.jsonl", lines)
        record("codex", "", "", None if cut else 0, cut, 40.0, logs, model="gpt-5")
        written = json.loads((logs / "usage.json").read_text())
        # 400 fresh input, 100 cached, 33 output at gpt-5's $1.25 / $0.125 / $10 a million.
        assert written["cost_basis"] == "estimated", cut
        assert written["cost_usd"] == pytest.approx(400 * 1.25e-6 + 100 * 0.125e-6 + 33 * 10e-6), cut
    logs = _logs(tmp_path / "unpriced", CODEX, "ok", "2026/12/01/rollout.jsonl",
                 (CODEX / "ok.stream.jsonl").read_text().splitlines())
    record("codex", "", "", 0, False, 40.0, logs, model="gpt-oss-house")
    written = json.loads((logs / "usage.json").read_text())
    assert "cost_usd" not in written and written["output_tokens"] == 33
    assert AttemptSummary.parse({"usage": written}).spent_usd is None  # unknown, not $0
