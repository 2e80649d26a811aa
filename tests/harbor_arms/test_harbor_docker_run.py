"""Terminus 2 arms on the docker backend, a whole run (plan, the driver, Ray, the account actors)
against the fake provider, in the tmux image (tests/conftest.py ``tmux_image``). Two accounts with
different limits; the provider answers one of them 429 with ``retry-after: 90``. The cells end
valid on the other, the limited account cools for the server's 90 s (the policy's own floor is
60 s), the ledger's tokens and cost are what the fake served, every request id (the refused
calls' too) settles, and no key value is anywhere in the run root."""

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

from ray_bench.accounts.store import AccountStore
from ray_bench.evidence.settle import settle_run

pytestmark = [pytest.mark.docker, pytest.mark.harbor, pytest.mark.ray, pytest.mark.slow]
GOOD, LIMITED = "sk-ant-harbor-docker-good-0123456789", "sk-ant-harbor-docker-limited-0123456789"
# Set at import, before the session's Ray starts: its workers see the environment it started with.
os.environ["RB_HARBOR_DOCKER_GOOD"], os.environ["RB_HARBOR_DOCKER_LIMITED"] = GOOD, LIMITED
RETRY_AFTER = 90
#: Anthropic's list prices of claude-sonnet-4-5 per token (LiteLLM's shipped price map), as the
#: fake's answers are billed: fresh input, cache reads, output.
PRICE_IN, PRICE_CACHE, PRICE_OUT = 3e-6, 3e-7, 1.5e-5


def test_terminus_2_on_docker_moves_off_a_429_account_and_its_usage_settles(tmp_path: Path, tmux_image: str) -> None:
    answer = Answer(text=SOLVE, input_tokens=300, output_tokens=40, cache_read_tokens=100)
    with FakeProvider(default=answer) as fake:
        fake.limited_keys[LIMITED] = RETRY_AFTER
        # "limited" has the more room, so the scheduler's first choice is it
        accounts = [{"name": "limited", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HARBOR_DOCKER_LIMITED"}},
                     "limits": {"max_concurrent": 2}},
                    {"name": "good", "route": {"env": {"ANTHROPIC_API_KEY": "RB_HARBOR_DOCKER_GOOD"}},
                     "limits": {"max_concurrent": 1}}]
        t2 = {"agent": "harbor", "harbor_agent": "terminus-2", "model": "anthropic/claude-sonnet-4-5",
              "image": tmux_image, "agent_timeout_sec": 180, "env": {"ANTHROPIC_BASE_URL": fake.url}}
        arms: list[dict[str, Any]] = [{"name": "t2", "role": "baseline", **t2, "harbor_options": {"max_turns": 5}},
                                      {"name": "t2b", "role": "variant", **t2, "harbor_options": {"max_turns": 6}}]
        suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], accounts=accounts,
                                          preflight_cells=0, backend="docker",
                                          backends={"docker": {"max_sandboxes": 3}}, arms=arms, reps=2)
        outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
        served = fake.served
    attempts, rows = ledger_rows(root)
    assert len(rows) == 4 and all(r.valid and r.reward == 1.0 for r in rows.values()), outcome.detail
    assert all(r.account == "good" for r in rows.values())
    limited = [a for a in attempts if a.account == "limited"]
    assert limited and all(a.failure_class == "provider" and not a.valid for a in limited)
    # one refused call per attempt on that account: the agent stopped, it did not retry for 45 s
    assert served.errors == {"rate_limit": len(limited)}

    # the limited account cools for the server's retry-after from its last refusal (not the 60 s floor)
    store = AccountStore.open_readonly(os.environ["RAY_BENCH_STATE_ROOT"])
    assert store is not None
    try:
        health = store.load("limited", 0.0)
    finally:
        store.close()
    last = max(a.finished_at for a in limited if a.finished_at is not None)
    assert health.cooling_until - last == pytest.approx(RETRY_AFTER, abs=10)
    errors = [json.loads(p.read_text()) for p in root.rglob("logs/agent/error.json")]
    assert [e["retry_after"] for e in errors] == [RETRY_AFTER] * len(limited)

    # tokens (usage.json) and cost (the ledger) are what the fake served and billed
    usages = [json.loads(p.read_text()) for p in root.rglob("logs/agent/usage.json")]
    assert sum(u["output_tokens"] for u in usages) == served.output_tokens
    assert sum(u["input_tokens"] for u in usages) == served.input_tokens
    assert sum(u["cache_read_tokens"] for u in usages) == served.cache_read_tokens
    billed = (served.input_tokens * PRICE_IN + served.cache_read_tokens * PRICE_CACHE
              + served.output_tokens * PRICE_OUT)
    assert all(a.cost_usd is not None for a in attempts)
    assert sum(a.cost_usd or 0.0 for a in attempts) == pytest.approx(billed)
    # The answered calls' ids are the billed ones; the refused calls' are kept apart (with their
    # class) and never expected on a bill: the charges are what the fake billed, and no more.
    ids = sorted(i for u in usages for i in u["request_ids"])
    assert ids == sorted(served.request_ids)
    refused = sorted(r["request_id"] for u in usages for r in u.get("refused", []))
    assert refused == sorted(served.failed_request_ids)
    charges = tmp_path / "charges.csv"
    charges.write_text("request_id,cost_usd\n" + "".join(f"{i},0.001\n" for i in served.request_ids))
    settled = settle_run(root, charges, by="test")
    # an attempt refused throughout (the limited key's) had nothing to bill: n/a, not missing
    assert settled.counts().get("settled", 0) == len(attempts) - len(limited)
    assert all(settled.attempts[a.attempt_id].status == "n/a" for a in limited)
    assert settled.counts().get("missing", 0) == 0 and settled.unmatched_charges == 0 and settled.complete
    for key in (GOOD, LIMITED):
        assert not [p for p in root.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
