"""`ray-bench regrade` end to end on docker (busybox, real dockerd) and on daytona (the local fixture
server, tests/support/daytona_server.py): `ray-bench plan` of two tasks x two arms keeping their
workspaces (the receipt says so, with the artifact cap), the driver running every cell through the
real runner on the backend (no Ray), then only hello-world's `tests/` edited so the unsolved
baseline's reward flips. Regrade writes one new attempt of kind `regrade` per regraded cell in a
fresh sandbox, the source rows as they were, the report uses the new reward, and the agent never
ran again: each agent run calls a counter on the host (through the docker bridge's gateway), and
the count stays at the cells'. Bad input is one line, exit 2, nothing written: a run that is not
finished, and a task whose instruction or environment changed too (a rerun's case)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.bridge import bridge_gateway
from support.local_pool import InProcessPool
from support.regrades import FAST, LENIENT, invoke
from support.suites import make_suite

from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.sandboxes import SandboxBackend
from ray_bench.sandboxes.base import LABEL_RUN
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.sim.driven import roomy_host

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: The daytona test's credential route. Not a secret: the fixture accepts only this value.
DAYTONA_KEY_ENV = "RAY_BENCH_TEST_REGRADE_DAYTONA_KEY"
os.environ.setdefault(DAYTONA_KEY_ENV, "fake-daytona-regrade-key")


class Counter:
    """Counts the agent's runs: an HTTP server on every interface, which an agent in a container
    reaches through the docker bridge's gateway (busybox's wget)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                counter.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer((bridge_gateway(), 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Counter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _arms(url: str) -> list[dict[str, Any]]:
    # The scripted agent solves every task (skill 100) or none (skill 0), after one call home.
    command = f'wget -q -O /dev/null "{url}/$SCRIPTED_SKILL" || exit 9; sh "$AGENT_DIR/scripted-agent.sh"'
    return [{"name": name, "role": role, "command": command, "agent_dir": "agents", "network": "public",
             "env": {**FAST, "SCRIPTED_SKILL": skill}, "expose_solution": True, "keep_workspace": True}
            for name, role, skill in (("baseline", "baseline", "0"), ("mcp", "variant", "100"))]


def _files(root: Path) -> dict[str, bytes]:
    """Every file under the run's attempts, by path (relative to attempts/), with its bytes."""
    attempts = root / "attempts"
    return {str(p.relative_to(attempts)): p.read_bytes() for p in sorted(attempts.rglob("*")) if p.is_file()}


def _summary(root: Path, attempt_id: str) -> AttemptSummary:
    with Ledger.reading(root) as ledger:
        summary = ledger.summary(attempt_id)
    assert summary is not None
    return summary


def _plan(suite: Path, accounts: Path, runs: Path, run_id: str) -> Path:
    code, identity, err = invoke("plan", "--suite", str(suite), "--accounts", str(accounts), "--runs-dir",
                                  str(runs), "--run-id", run_id)
    assert code == 0, err
    assert identity.strip().startswith("sha256:")
    return runs / run_id


def _execute(root: Path, pool: InProcessPool, tmp_path: Path, stop: str | None = None) -> int:
    plan, identity = load_plan_file(root / PLAN_FILE)
    options = RunOptions(tick_sec=0.05, state_root=tmp_path / "state", stop_signal=(lambda: stop) if stop else None)
    outcome = Driver(plan, identity, root, pool, CoreGate(plan.accounts), roomy_host(plan), options=options).run()
    return outcome.exit_code


@pytest.fixture
def counter() -> Iterator[Counter]:
    with Counter() as c:
        yield c


def test_a_docker_run_is_regraded_through_the_cli_without_running_its_agents(
        tmp_path: Path, docker_client: Any, base_image: str, counter: Counter) -> None:
    from ray_bench.sandboxes.docker import DockerBackend

    _regrade_end_to_end(tmp_path, counter, "docker", {"image": base_image, "max_sandboxes": 2}, DockerBackend)
    assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}=rgd"}) == []


@pytest.mark.daytona
def test_a_daytona_run_is_regraded_through_the_cli_without_running_its_agents(
        tmp_path: Path, docker_client: Any, base_image: str, counter: Counter) -> None:
    """The same on the daytona backend, against the local Daytona-compatible fixture: the
    workspace leaves one fixture sandbox through the toolbox's file API and enters a fresh one."""
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from support.daytona_server import DaytonaServer

    from ray_bench.sandboxes import make_backend

    server = DaytonaServer(docker_client=docker_client, default_image=base_image,
                           api_key=os.environ[DAYTONA_KEY_ENV]).start()
    try:
        options = {"api_url": server.api_url, "api_key_env": DAYTONA_KEY_ENV}
        _regrade_end_to_end(tmp_path, counter, "daytona",
                            {"image": base_image, "max_sandboxes": 2, "options": options},
                            lambda: make_backend("daytona", **options))
        assert server.sandbox_ids() == [] and server.containers() == []
        assert server.counts["created"] == 6  # 4 cells and 2 regrades, each in a sandbox of its own
    finally:
        server.stop()


def _regrade_end_to_end(tmp_path: Path, counter: Counter, backend_name: str, backend_cfg: dict[str, Any],
                        make: Callable[[], SandboxBackend]) -> None:
    url = f"http://{bridge_gateway()}:{counter.port}/agent"
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "count-words"], arms=_arms(url),
                                 preflight_cells=0, backend=backend_name, artifact_cap_mb=8,
                                 backends={backend_name: backend_cfg})
    tasks = tmp_path / "s" / "tasks"
    root = _plan(suite, accounts, tmp_path / "runs", "rgd")
    receipt = (root / "receipt.md").read_text()
    assert "## Kept workspaces (for `ray-bench regrade`)" in receipt
    assert "| baseline | yes | 2 | the workdir's tarball shares the 8 MiB with the attempt's logs; at most 16 MiB " \
           "over 2 cells;" in receipt

    pool = InProcessPool(make())
    try:
        assert _execute(root, pool, tmp_path) == 0
        # A second plan of the suite, stopped before its first cell: not finished.
        stopped = _plan(suite, accounts, tmp_path / "runs", "rgd-stopped")
        _execute(stopped, pool, tmp_path, stop="SIGTERM")
    finally:
        pool.close()
    before = Ledger.read_attempts(root)
    assert len(before) == 4 and all(a.valid and a.kind == "run" and a.backend == backend_name for a in before)
    assert sorted(counter.hits) == ["/agent/0", "/agent/0", "/agent/100", "/agent/100"]
    baseline = next(a for a in before if a.task == "hello-world" and a.arm == "baseline")
    assert baseline.reward == 0.0

    as_run = _files(root)

    # Not finished: one line, exit 2, nothing written.
    left, stopped_files = Ledger.read_attempts(stopped), _files(stopped)
    code, out, err = invoke("regrade", str(stopped))
    assert code == 2 and err.count("\n") == 1 and out == "" and "not finished" in err, err
    assert Ledger.read_attempts(stopped) == left and _files(stopped) == stopped_files

    (tasks / "hello-world" / "tests" / "test.sh").write_text(LENIENT)
    instruction = tasks / "count-words" / "instruction.md"
    as_planned = instruction.read_text()
    instruction.write_text(as_planned + "\nCount hyphenated words once.\n")
    environment = tasks / "count-words" / "environment"
    environment.mkdir()
    (environment / "Dockerfile").write_text("FROM busybox\n")
    # count-words changed beyond its tests: a rerun, refused whole (hello-world not graded either).
    for args in ([], ["--tasks", "count-words"]):
        code, out, err = invoke("regrade", str(root), *args)
        assert code == 2 and err.count("\n") == 1 and out == "", err
        assert "2 cells of count-words changed beyond tests/ (environment, instruction): they need a rerun" in err
        assert ("--tasks hello-world" in err) == (not args)
    assert Ledger.read_attempts(root) == before and _files(root) == as_run
    assert len(counter.hits) == 4

    code, out, err = invoke("regrade", str(root), "--tasks", "hello-world")
    assert code == 0, err
    after = Ledger.read_attempts(root)
    assert after[:len(before)] == before  # the source attempts untouched: their rows and their files
    assert {k: v for k, v in _files(root).items() if k.split("/")[0] in {a.attempt_id for a in before}} == {
        k: v for k, v in as_run.items() if k.split("/")[0] in {a.attempt_id for a in before}}
    regrades = {a.source_attempt: a for a in after if a.kind == "regrade"}
    assert len(after) == len(before) + 2 and len(regrades) == 2
    for row in before:
        if row.task == "hello-world":
            new = regrades[row.attempt_id]
            assert (new.cell_id, new.valid, new.reward, new.cost_usd, new.counts, new.backend) == (
                row.cell_id, True, 1.0, 0.0, False, backend_name)
            graded, source = _summary(root, new.attempt_id), _summary(root, row.attempt_id)
            assert graded.regrade_of == row.attempt_id and graded.agent is None  # only the verifier ran
            assert graded.sandbox_id and graded.sandbox_id != source.sandbox_id  # in a fresh container
    assert f"{baseline.attempt_id} -> {regrades[baseline.attempt_id].attempt_id}, reward 0.0 -> 1.0" in out
    assert len(counter.hits) == 4  # no agent ran: the counter is where the run left it

    code, report, err = invoke("report", str(root))
    assert code == 0, err
    assert (f"| hello-world | baseline | 1 | {baseline.attempt_id} | {regrades[baseline.attempt_id].attempt_id} "
            "| 0.00 | 1.00 |") in report
    assert "| baseline | 2 | 2 | 0 | 1 | 0.500 |" in report  # hello-world's regraded 1, count-words' 0

    instruction.write_text(as_planned)  # count-words as graded again: nothing left to do
    (environment / "Dockerfile").unlink()
    environment.rmdir()
    code, _, err = invoke("regrade", str(root))
    assert code == 0 and "nothing to regrade" in err, err
    assert len(Ledger.read_attempts(root)) == len(after) and len(counter.hits) == 4
