"""Harbor's installed claude-code and codex as two arms of one whole run on docker (plan, the
driver, Ray, the account actors), two accounts with different limits, against the fake provider
on the docker bridge: each CLI laid over the busybox image once per content hash, Harbor's own
setup in each sandbox finding it offline. Every cell is valid, the ledger's tokens and cost are
what the fake served and billed, every request id settles, no key is in the run root. Then a
setup that cannot work offline (a version the layer does not carry) fails the preflight as a
``tool`` failure, and no other cell starts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.agent_clis import missing
from support.bridge import bridge_gateway
from support.fake_provider import Answer, FakeProvider
from support.runs import ledger_rows, plan_and_run
from support.suites import make_suite

from ray_bench.evidence.settle import settle_run

pytestmark = [pytest.mark.docker, pytest.mark.harbor, pytest.mark.ray, pytest.mark.slow]
KEYS = {"RB_HIW_A_ANT": "sk-ant-hiw-a-0123456789", "RB_HIW_A_OAI": "sk-hiw-a-openai-0123456789",
        "RB_HIW_B_ANT": "sk-ant-hiw-b-0123456789", "RB_HIW_B_OAI": "sk-hiw-b-openai-0123456789"}
# Set at import, before the session's Ray starts: its workers see the environment it started with.
os.environ.update(KEYS)


def _accounts() -> list[dict[str, Any]]:
    return [{"name": "a", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HIW_A_ANT", "OPENAI_API_KEY": "RB_HIW_A_OAI"}},
             "limits": {"max_concurrent": 2}},
            {"name": "b", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HIW_B_ANT", "OPENAI_API_KEY": "RB_HIW_B_OAI"}},
             "limits": {"max_concurrent": 1}}]


def _arms(fake: FakeProvider, image: str, claude_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    base = f"http://{bridge_gateway()}:{fake.port}"
    common = {"agent": "harbor", "image": image, "network": "public", "agent_timeout_sec": 180}
    return [{"name": "cc", "role": "baseline", **common, "harbor_agent": "claude-code",
             "model": "anthropic/claude-sonnet-4-5", "env": {"ANTHROPIC_BASE_URL": base},
             "harbor_options": claude_options or {}},
            {"name": "cx", "role": "variant", **common, "harbor_agent": "codex", "model": "openai/gpt-5",
             "env": {"OPENAI_BASE_URL": f"{base}/v1"}}]


@pytest.fixture(autouse=True)
def _clis() -> None:
    for cli in ("claude", "codex"):
        reason = missing(cli)
        if reason is not None:
            pytest.skip(f"agent CLI {cli}: {reason}")


def test_harbors_claude_code_and_codex_on_docker_over_two_accounts_settle(tmp_path: Path, base_image: str) -> None:
    answer = Answer(input_tokens=300, output_tokens=40, cache_read_tokens=100)
    with FakeProvider(host=bridge_gateway(), default=answer) as fake:
        suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], accounts=_accounts(),
                                          preflight_cells=1, backend="docker",
                                          backends={"docker": {"max_sandboxes": 3}}, arms=_arms(fake, base_image),
                                          reps=2)
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        served = fake.served
    attempts, rows = ledger_rows(root)
    # the fake answers "Done." and writes nothing: each row a valid, honest reward 0
    assert len(rows) == 4 and all(r.valid and r.reward == 0.0 for r in rows.values()), outcome.detail
    assert len(attempts) == 4, [(a.attempt_id, a.failure_class) for a in attempts]
    usages = [json.loads(p.read_text()) for p in root.rglob("logs/agent/usage.json")]
    assert len(usages) == 4
    # Anthropic's Messages API counts cache reads apart from input; the Responses API inside it
    assert sum(u["output_tokens"] for u in usages) == served.output_tokens == 4 * 40
    assert sum(u["cache_read_tokens"] for u in usages) == served.cache_read_tokens == 4 * 100
    assert sum(u["input_tokens"] for u in usages) == 2 * 300 + 2 * 200
    # cost: Claude Code's own (reported) and Harbor's for Codex (gpt-5's list price, estimated)
    claude_usd = 300 * 3e-6 + 100 * 3e-7 + 40 * 1.5e-5
    codex_usd = 200 * 1.25e-6 + 100 * 0.125e-6 + 40 * 10e-6
    assert sorted(a.cost_usd or 0.0 for a in attempts) == pytest.approx(sorted([codex_usd] * 2 + [claude_usd] * 2))
    assert sorted(u["cost_basis"] for u in usages) == ["estimated", "estimated", "reported", "reported"]
    ids = sorted(i for u in usages for i in u["request_ids"])
    # Claude Code records the Messages API's request ids, Codex the Responses API's response ids
    # (the fake gives a Responses call a request id too, which Codex does not see)
    assert len(ids) == 4 and sorted(i for i in ids if i.startswith("resp_")) == sorted(served.response_ids)
    assert {i for i in ids if not i.startswith("resp_")} <= set(served.request_ids)
    charges = tmp_path / "charges.csv"
    charges.write_text("request_id,cost_usd\n" + "".join(f"{i},0.001\n" for i in ids))
    settled = settle_run(root, charges, by="test")
    assert settled.counts().get("settled", 0) == len(attempts)
    assert settled.counts().get("missing", 0) == 0 and settled.unmatched_charges == 0
    files = [p for p in root.rglob("*") if p.is_file()]
    for key in KEYS.values():
        assert not [p for p in files if key.encode() in p.read_bytes()], key
    # the receipt names the agents, their versions, the layer and the model roles
    receipt = (root / "receipt.md").read_text()
    assert "| cc | claude-code | 2.1." in receipt and "| cx | codex | 0." in receipt, receipt
    assert "agent layer: `claude`" in receipt and "executor: anthropic/claude-sonnet-4-5" in receipt


def test_a_harbor_setup_that_fails_offline_stops_the_run_at_its_preflight(tmp_path: Path, base_image: str) -> None:
    with FakeProvider(host=bridge_gateway()) as fake:
        suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], accounts=_accounts(),
                                          preflight_cells=1, backend="docker",
                                          backends={"docker": {"max_sandboxes": 3}},
                                          arms=_arms(fake, base_image, {"version": "0.0.1"}), reps=3)
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        claude_calls = [r for r in fake.requests if r["path"].split("?")[0].endswith("/v1/messages")]
    assert outcome.stopped == "preflight", (outcome.stopped, outcome.detail)
    attempts, _ = ledger_rows(root)
    cc = [a for a in attempts if a.arm == "cc"]
    assert cc and all(a.failure_class == "tool" and not a.valid for a in cc), [(a.failure_class, a.arm) for a in cc]
    assert claude_calls == []
    # only the preflight's pair started: no cell of the other repetitions
    assert len({a.cell_id for a in attempts}) <= 2, [a.cell_id for a in attempts]
    errors = [json.loads(p.read_text()) for p in root.rglob("logs/agent/error.json")]
    assert errors and all(e["type"] == "setup" for e in errors if "claude-code" in e["message"])
