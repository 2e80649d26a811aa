"""A HOME login travels into a container; what the CLI refreshed there comes back to the host
HOME (newest wins) and no token, old or new, is left anywhere under the attempt directory.
On Docker (root) and on a Daytona sandbox of the default snapshot, which runs as a non-root
user: the login is staged under a directory that user owns (the local Daytona fixture)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes import make_backend

pytestmark = pytest.mark.docker
#: The Daytona fixture's key route (not a secret: the fixture accepts only this).
KEY_ENV = "RAY_BENCH_TEST_LOGIN_DAYTONA_KEY"
OLD = ("sk-ant-oat01-old-" + "a" * 40, "sk-ant-ort01-old-" + "b" * 40)
NEW = ("sk-ant-oat01-new-" + "c" * 40, "sk-ant-ort01-new-" + "d" * 40)


def _doc(tokens: tuple[str, str], expires_in: float) -> str:
    return json.dumps({"claudeAiOauth": {"accessToken": tokens[0], "refreshToken": tokens[1],
                                         "expiresAt": int((time.time() + expires_in) * 1000)}})


@pytest.fixture(params=["docker", "daytona-non-root"])
def backend(request: pytest.FixtureRequest, docker_client: Any, base_image: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(backend, its options, the image: ``None`` is Daytona's default snapshot, user 1000)."""
    if request.param == "docker":
        yield "docker", {}, base_image
        return
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from support.daytona_server import DaytonaServer

    monkeypatch.setenv(KEY_ENV, "fake-login-daytona-key")
    server = DaytonaServer(docker_client=docker_client, default_image=base_image,
                           api_key=os.environ[KEY_ENV]).start()
    try:
        yield "daytona", {"api_url": server.api_url, "api_key_env": KEY_ENV}, None
        assert server.sandbox_ids() == []
    finally:
        server.stop()


def test_refreshed_login_comes_back_and_no_token_stays(
        tmp_path: Path, backend: tuple[str, dict[str, Any], str | None]) -> None:
    name, options, image = backend
    home = tmp_path / "login"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(_doc(OLD, 60))
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    # The stand-in for the CLI's refresh: it writes what Claude Code's refresh writes, and
    # (carelessly) prints both logins into its logs.
    refresh = (f"test -O $HOME/.claude/.credentials.json || exit 9; "  # the sandbox user's own copy
               f"cat $HOME/.claude/.credentials.json > $LOGS_DIR/agent/before.json; "
               f"printf '%s' '{_doc(NEW, 3600)}' > $HOME/.claude/.credentials.json; "
               f"cat $HOME/.claude/.credentials.json; echo '{{\"input_tokens\": 1, \"output_tokens\": 2}}' "
               f"> $LOGS_DIR/agent/usage.json")
    spec = AttemptSpec(
        run_id="loginrun", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="a", rep=1, account="acct",
        task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend=name, backend_options=options, agent_command=refresh,
        agent_env={}, agent_dir=None, route_env={}, route_home=str(home), agent_timeout_sec=60,
        verifier_timeout_sec=60, verifier_env={}, image=image, build_context=None, workdir="/app",
        network=False, cpus=None, memory_mb=256, pids=None, expose_solution=True, artifact_cap_bytes=1 << 20,
        seed="s")

    async def go() -> AttemptSummary:
        impl = make_backend(name, **options)
        try:
            return await run_attempt(spec, impl)
        finally:
            await impl.close()

    summary = asyncio.run(go())
    assert summary.to_json()["error"] is None, summary.to_json()["error"]
    assert summary.agent is not None and summary.agent.exit_code == 0
    assert summary.to_json()["login_written_back"] == [".claude/.credentials.json"]
    host = json.loads((home / ".claude" / ".credentials.json").read_text())
    assert host["claudeAiOauth"]["refreshToken"] == NEW[1]
    leaks = [p for p in (tmp_path / "attempt").rglob("*") if p.is_file()
             and any(t in p.read_text(errors="replace") for t in (*OLD, *NEW))]
    assert leaks == []
    assert "[redacted]" in (tmp_path / "attempt" / "logs" / "agent" / "before.json").read_text()
