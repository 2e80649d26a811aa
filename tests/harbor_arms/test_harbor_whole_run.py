"""A whole run (plan, the driver, Ray, the account actors) of Harbor's oracle and Terminus 2
against the fake provider on local: cells valid, the tokens the ledger kept equal what the fake
served, request ids settle, and a refused key's account gives its cell to the other account."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.fake_provider import Answer, FakeProvider
from support.runs import ledger_rows, plan_and_run
from support.suites import make_suite
from support.terminus import SOLVE

from ray_bench.evidence.settle import settle_run

pytestmark = [pytest.mark.harbor, pytest.mark.ray, pytest.mark.slow]
GOOD, BAD = "sk-ant-harbor-good-0123456789", "sk-ant-harbor-refused-0123456789"
# Set at import, before the session's Ray starts: its workers see the environment it started with.
os.environ["RB_HARBOR_GOOD"], os.environ["RB_HARBOR_BAD"] = GOOD, BAD


def test_oracle_and_terminus_2_arms_run_whole_and_their_usage_settles(tmp_path: Path) -> None:
    with FakeProvider(default=Answer(text=SOLVE, input_tokens=300, output_tokens=40, cache_read_tokens=100)) as fake:
        fake.refused_keys.add(BAD)
        accounts = [{"name": "refused", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HARBOR_BAD"}},
                     "limits": {"max_concurrent": 1}},
                    {"name": "good", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HARBOR_GOOD"}},
                     "limits": {"max_concurrent": 2}}]
        arms: list[dict[str, Any]] = [
            {"name": "oracle", "role": "baseline", "agent": "harbor", "harbor_agent": "oracle"},
            {"name": "t2", "role": "variant", "agent": "harbor", "harbor_agent": "terminus-2",
             "model": "anthropic/claude-sonnet-4-5", "harbor_options": {"max_turns": 5}, "agent_timeout_sec": 180,
             # the base URL in the arm's env, as the CLI arms name theirs (known only once the fake is up)
             "env": {"ANTHROPIC_BASE_URL": fake.url}}]
        suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], accounts=accounts, preflight_cells=0,
                                          backends={"local": {"max_sandboxes": 2,
                                                              "options": {"root": str(tmp_path / "sbx")}}},
                                          arms=arms, reps=2)
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        served = fake.served
    attempts, rows = ledger_rows(root)
    assert len(rows) == 4 and all(r.valid and r.reward == 1.0 for r in rows.values()), outcome.detail
    assert all(r.account == "good" for r in rows.values() if r.arm == "t2")
    # a Terminus 2 cell started on the refused key ended classed auth, and its cell moved on
    assert all(a.failure_class == "auth" and not a.valid for a in attempts if a.arm == "t2" and a.account == "refused")
    usages = [json.loads(p.read_text()) for p in root.rglob("logs/agent/usage.json")]
    assert sum(u["output_tokens"] for u in usages) == served.output_tokens
    # The answered calls' ids are the billed ones; the refused calls' are kept apart (with their
    # class) and never expected on a bill: the charges are what the fake billed, and no more.
    ids = sorted(i for u in usages for i in u["request_ids"])
    assert ids == sorted(served.request_ids)
    refused = sorted(r["request_id"] for u in usages for r in u.get("refused", []))
    assert refused == sorted(served.failed_request_ids)
    charges = tmp_path / "charges.csv"
    charges.write_text("request_id,cost_usd\n" + "".join(f"{i},0.001\n" for i in served.request_ids))
    settled = settle_run(root, charges, by="test")
    t2 = [a for a in attempts if a.arm == "t2"]
    refused_only = [a for a in t2 if a.account == "refused"]
    assert settled.counts().get("settled", 0) == len(t2) - len(refused_only)
    assert all(settled.attempts[a.attempt_id].status == "n/a" for a in refused_only)  # nothing to bill
    assert settled.counts().get("missing", 0) == 0 and settled.unmatched_charges == 0 and settled.complete
    assert not [p for p in root.rglob("*") if p.is_file() and GOOD in p.read_text(errors="replace")]
