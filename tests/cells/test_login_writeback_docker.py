"""A HOME login travels into a container; what the CLI refreshed there comes back to the host
HOME (newest wins) and no token, old or new, is left anywhere under the attempt directory."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.docker import DockerBackend

pytestmark = pytest.mark.docker
OLD = ("sk-ant-oat01-old-" + "a" * 40, "sk-ant-ort01-old-" + "b" * 40)
NEW = ("sk-ant-oat01-new-" + "c" * 40, "sk-ant-ort01-new-" + "d" * 40)


def _doc(tokens: tuple[str, str], expires_in: float) -> str:
    return json.dumps({"claudeAiOauth": {"accessToken": tokens[0], "refreshToken": tokens[1],
                                         "expiresAt": int((time.time() + expires_in) * 1000)}})


def test_refreshed_login_comes_back_and_no_token_stays(tmp_path: Path, docker_client: Any, base_image: str) -> None:
    home = tmp_path / "login"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(_doc(OLD, 60))
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    # The stand-in for the CLI's refresh: it writes what Claude Code's refresh writes, and
    # (carelessly) prints both logins into its logs.
    refresh = (f"cat $HOME/.claude/.credentials.json > $LOGS_DIR/agent/before.json; "
               f"printf '%s' '{_doc(NEW, 3600)}' > $HOME/.claude/.credentials.json; "
               f"cat $HOME/.claude/.credentials.json; echo '{{\"input_tokens\": 1, \"output_tokens\": 2}}' "
               f"> $LOGS_DIR/agent/usage.json")
    spec = AttemptSpec(
        run_id="loginrun", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="a", rep=1, account="acct",
        task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend="docker", backend_options={}, agent_command=refresh,
        agent_env={}, agent_dir=None, route_env={}, route_home=str(home), agent_timeout_sec=60,
        verifier_timeout_sec=60, verifier_env={}, image=base_image, build_context=None, workdir="/app",
        network=False, cpus=None, memory_mb=256, pids=None, expose_solution=True, artifact_cap_bytes=1 << 20,
        seed="s")

    async def go() -> AttemptSummary:
        backend = DockerBackend()
        try:
            return await run_attempt(spec, backend)
        finally:
            await backend.close()

    summary = asyncio.run(go())
    assert summary.to_json()["error"] is None, summary.to_json()["error"]
    assert summary.to_json()["login_written_back"] == [".claude/.credentials.json"]
    host = json.loads((home / ".claude" / ".credentials.json").read_text())
    assert host["claudeAiOauth"]["refreshToken"] == NEW[1]
    leaks = [p for p in (tmp_path / "attempt").rglob("*") if p.is_file()
             and any(t in p.read_text(errors="replace") for t in (*OLD, *NEW))]
    assert leaks == []
    assert "[redacted]" in (tmp_path / "attempt" / "logs" / "agent" / "before.json").read_text()
