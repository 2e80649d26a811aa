"""The hostile-input corpus (tests/reliability/hostile_corpus.py) run under a 1 GB
address-space limit and a 30 s alarm per case: every case exits with its code (2: bad input),
prints one ``error:`` line per problem naming the file or option, never a traceback, writes
nothing, and echoes no secret (at most its first four characters).

The cases run in two processes of many cases each (the CLI in-process): the same limits as a
process per case at a fraction of the start-up cost. A few run as real ``ray-bench``
processes too, so that what an operator sees is checked end to end."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_corpus import (
    CASE_SECONDS,
    CASE_WALL_SECONDS,
    Env,
    all_cases,
    limit_address_space,
    make_base,
    run_case,
    tree,
)
from support.driver_process import BIN, cli_env
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli.app import app
from ray_bench.config.loader import MAX_ERROR_LINES
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary

pytestmark = [pytest.mark.slow]

CORPUS = Path(__file__).with_name("hostile_corpus.py")
CASES = all_cases()
WORKERS = 2


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-base")
    make_base(root)
    return root


@pytest.fixture(scope="module")
def results(base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("hostile-work")
    names = sorted(CASES)
    batches = [names[i::WORKERS] for i in range(WORKERS)]
    procs = []
    for i, batch in enumerate(batches):
        out = work / f"results-{i}.json"
        procs.append((out, batch, subprocess.Popen(
            [sys.executable, str(CORPUS), str(base), str(work), str(out), *batch],
            env=cli_env({"MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1"}),
            # setrlimit only between fork and exec: no lock a thread of this process could hold
            preexec_fn=limit_address_space,  # noqa: PLW1509
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    found: dict[str, dict[str, Any]] = {}
    for out, batch, proc in procs:
        _, stderr = proc.communicate(timeout=CASE_WALL_SECONDS * len(batch) + 120)
        assert out.exists(), stderr[-3000:]
        found.update({r["name"]: r for r in json.loads(out.read_text())})
    return found


def check(name: str, code: int, stdout: str, stderr: str, names: list[str] | None, secrets: list[str],
          expected_code: int = 2) -> None:
    text = stdout + stderr
    assert "Traceback" not in text, text[-3000:]
    assert "\x1b" not in text and "\x07" not in text, (name, "a control byte reached the terminal")
    assert code == expected_code, (name, code, text[-3000:])
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert errors, (name, stderr)
    if names is None:
        assert len(errors) <= MAX_ERROR_LINES
    else:
        assert len(errors) == len(names), (name, stderr)
        for wanted in names:
            assert any(wanted in line for line in errors), (name, wanted, stderr)
    for secret in secrets:
        # never more than its first four characters
        assert secret[4:] not in text and secret not in text, (name, "secret echoed")


def test_the_corpus_covers_every_class() -> None:
    assert len(CASES) >= 60
    prefixes = {"suite-alias-bomb", "accounts-alias-bomb", "selection-alias-bomb", "suite-oversized",
                "suite-reps-twice", "suite-reps-true", "route-holds-anthropic-key-plan",
                "probe-command-holds-openai-key", "arm-env-holds-route-value", "selection-arm-not-in-suite",
                "selection-unpairs-the-plan", "gaps-runs-names-no-run-root",
                "plan-command-edited-new-identity-pasted", "plan-copied-to-another-run-root",
                "execute-address-unreachable", "execute-metrics-port-out-of-range",
                "execute-state-root-is-a-file", "plan-runs-dir-is-a-file", "report-of-a-run-never-executed"}
    assert prefixes <= set(CASES)


def test_the_corpus_covers_hostile_trees_text_identities_terminals_and_capacity() -> None:
    """One case at least per class of issue 28 items 3, 4, 9, 10, 11 and issue 27 items 1, 5."""
    classes = {"task-fifo-under-solution", "task-link-to-dev-zero", "task-sparse-2gb-file", "task-too-many-files",
               "plan-reps-a-billion", "selection-800k-entries-yaml", "drift-fifo-added-after-planning",
               "task-dir-named-like-a-key", "selection-real-ids-and-one-key", "task-instruction-holds-key",
               "task-env-template-names-route-variable", "exclude-reason-holds-key", "execute-hypothesis-holds-key",
               "task-dirs-differ-only-in-case", "selection-reps-repeated", "selection-arms-empty", "task-timeout-inf",
               "plan-run-id-with-trailing-newline", "task-dir-with-escape-bytes-broken-toml",
               "docker-task-asks-more-memory-than-the-host", "daytona-task-larger-than-the-pool"}
    assert classes <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_is_refused(results: dict[str, dict[str, Any]], name: str) -> None:
    r = results[name]
    assert not r["crashed"], (name, r["crashed"], r["stderr"][-2000:])
    assert r["cpu_seconds"] < CASE_SECONDS and r["seconds"] < CASE_WALL_SECONDS
    check(name, r["code"], r["stdout"], r["stderr"], r["names"], r["secrets"], r["expected_code"])
    assert r["changed"] == [], (name, "wrote", r["changed"])


@pytest.mark.parametrize("name", ["suite-alias-bomb", "route-holds-anthropic-key-plan",
                                  "plan-command-edited-new-identity-pasted", "execute-address-unreachable"])
def test_hostile_input_as_a_process(base: Path, tmp_path: Path, name: str) -> None:
    root = tmp_path / "c"
    shutil.copytree(base, root, symlinks=True)
    shutil.rmtree(root / "runs")
    identity = plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                        runs_dir=root / "runs", run_id="ok").identity
    spec = CASES[name](Env(root, identity))
    before = tree(root)
    started = time.monotonic()
    done = subprocess.run([str(BIN), *spec.argv], env=cli_env(), capture_output=True, text=True,
                          timeout=CASE_WALL_SECONDS, preexec_fn=limit_address_space,
                          check=False)
    assert time.monotonic() - started < CASE_WALL_SECONDS
    check(name, done.returncode, done.stdout, done.stderr, spec.names, spec.secrets, spec.code)
    assert tree(root) == before


def test_an_edited_plan_with_its_new_identity_never_runs(base: Path, tmp_path: Path) -> None:
    """The attack of the issue, step by step: the refusal of the old identity names no new
    identity, and pasting the new one anyway is refused too."""
    result = run_case("plan-command-edited-old-identity", base, tmp_path)
    assert result["code"] == 2 and "receipt.md" in result["stderr"] and "ray-bench plan" in result["stderr"]
    assert "sha256:" not in result["stderr"]


def _executed_run(base: Path, root: Path) -> Path:
    """A run root whose ledger holds one finished attempt and one that failed, written and
    closed as the driver would (no -wal/-shm left after a clean close)."""
    shutil.copytree(base, root, symlinks=True)
    shutil.rmtree(root / "runs")
    planned = plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                       runs_dir=root / "runs", run_id="ok")
    plan = json.loads((planned.run_root / "launch-plan.json").read_text())
    ledger = Ledger.create(planned.run_root, run_id="ok", plan_identity=planned.identity)
    for i, cell in enumerate(plan["cells"][:2]):
        task = next(t for t in plan["tasks"] if t["id"] == cell["task"])
        row = ledger.start_attempt(cell_id=cell["id"], task=cell["task"], task_checksum=task["checksum"],
                                   arm=cell["arm"], rep=cell["rep"], account="acct-a", backend="local",
                                   epoch=planned.identity, preflight=False)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=i == 0, reward=1.0 if i == 0 else 0.0,
                              failure_class=None if i == 0 else "task", fingerprint=None if i == 0 else "f",
                              counts=True, cost_usd=0.0,
                              summary=AttemptSummary(attempt_id=row.attempt_id, cell_id=cell["id"]))
    ledger.event("run_started", {})
    ledger.event("run_finished", {"exit_code": 1, "stopped": None})  # a finished session, as the driver writes it
    ledger.close()
    assert not list(planned.run_root.glob("ledger.sqlite-*"))
    return planned.run_root


@pytest.mark.parametrize("command", ["status", "status-json", "gaps", "report"])
def test_read_only_commands_leave_nothing_behind(base: Path, tmp_path: Path, command: str) -> None:
    run_root = _executed_run(base, tmp_path / "c")
    suite = tmp_path / "c" / "s" / "suite.yaml"
    argv = {"status": ["status", str(run_root)], "status-json": ["status", str(run_root), "--json"],
            "gaps": ["gaps", "--suite", str(suite), "--runs", str(run_root), "--target", "1",
                     "--out", str(tmp_path / "sel" / "g.json")],
            "report": ["report", str(run_root)]}[command]
    before = tree(run_root)
    result = CliRunner().invoke(app, argv, env=cli_env(), catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert not list(run_root.glob("ledger.sqlite-*"))  # no -shm, no -wal
    if command != "report":  # report writes report.* beside the ledger; nothing else does
        assert tree(run_root) == before


def test_the_read_only_ledger_sees_a_live_writer(base: Path, tmp_path: Path) -> None:
    """With a -wal present (a driver running), the read uses it: commits not yet checkpointed
    are seen."""
    run_root = _executed_run(base, tmp_path / "c")
    writer = sqlite3.connect(run_root / "ledger.sqlite")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("INSERT INTO events (ts, kind, data) VALUES (1, 'live', '{}')")
    writer.commit()
    try:
        assert (run_root / "ledger.sqlite-wal").exists()
        with Ledger.reading(run_root) as reader:
            assert [e.kind for e in reader.events("live")] == ["live"]
    finally:
        writer.close()


def test_rerun_reads_its_base_read_only(base: Path, tmp_path: Path) -> None:
    run_root = _executed_run(base, tmp_path / "c")
    before = tree(run_root)
    result = CliRunner().invoke(app, ["rerun", str(run_root), "--failed"], env=cli_env(), catch_exceptions=False)
    assert "Traceback" not in result.stderr
    assert tree(run_root) == before
