"""A corpus of malformed inputs, generated per test from a valid suite: every one is refused
with one clear ``error:`` line per problem on stderr that names the file, no traceback,
exit 2, and nothing written under the runs directory.

The CLI runs in-process through typer's CliRunner (none of these starts Ray); a few cases
also run as real subprocesses, so that what an operator sees is checked end to end."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.driver_process import cli_env, run_cli
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli.app import app

pytestmark = [pytest.mark.slow]


@dataclass
class Env:
    """A valid suite, accounts and selection, and one valid plan in ``runs/ok``."""

    root: Path
    suite: Path
    accounts: Path
    runs: Path
    plan: Path
    identity: str

    @property
    def tasks(self) -> Path:
        return self.root / "s" / "tasks"

    def edit_yaml(self, path: Path, change: Callable[[dict[str, object]], None]) -> None:
        doc = yaml.safe_load(path.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def file(self, name: str, text: str) -> Path:
        path = self.root / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def plan_args(self, *extra: str, suite: Path | None = None) -> list[str]:
        return ["plan", "--suite", str(suite or self.suite), "--accounts", str(self.accounts),
                "--runs-dir", str(self.runs), "--run-id", "new", *extra]

    def execute_args(self, plan: Path | None = None, confirm: str | None = "same") -> list[str]:
        args = ["execute", "--plan", str(plan or self.plan), "--no-metrics",
                "--state-root", str(self.root / "state")]
        if confirm is not None:
            args += ["--confirm", self.identity if confirm == "same" else confirm]
        return args


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus-base")
    suite, accounts = make_suite(root / "s", tasks=["hello-world", "sum-list"])
    plan_run(suite=suite, accounts=accounts, runs_dir=root / "runs", run_id="ok")
    return root


@pytest.fixture
def env(base: Path, tmp_path: Path) -> Env:
    root = tmp_path / "c"
    shutil.copytree(base, root, symlinks=True)
    suite, accounts = root / "s" / "suite.yaml", root / "s" / "accounts.yaml"
    plan = root / "runs" / "ok" / "launch-plan.json"
    # the copied plan names the base's files: re-plan in place so paths are this copy's
    shutil.rmtree(root / "runs")
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=root / "runs", run_id="ok")
    identity = planned.identity
    return Env(root, suite, accounts, root / "runs", plan, identity)


# Each case: mutate the environment, return (argv, [substring naming the file or option per
# expected error line]).
Case = Callable[[Env], tuple[list[str], list[str]]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn
    return register


# -- suite files -----------------------------------------------------------------------------

@case("suite-yaml-syntax")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.suite.write_text("name: t\narms: [\n  - oops: {\n")
    return e.plan_args(), [str(e.suite)]


@case("suite-not-a-mapping")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.suite.write_text("- just\n- a list\n")
    return e.plan_args(), [str(e.suite)]


@case("suite-empty")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.suite.write_text("")
    return e.plan_args(), [str(e.suite)]


@case("suite-unknown-key")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(repetitions=3))
    return e.plan_args(), [str(e.suite)]


@case("suite-reps-not-a-number")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(reps="three"))
    return e.plan_args(), [str(e.suite)]


@case("suite-no-arms")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(arms=[]))
    return e.plan_args(), [str(e.suite)]


@case("suite-two-problems")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(reps=-1, max_attempts="x"))
    return e.plan_args(), [str(e.suite), str(e.suite)]


@case("suite-unknown-backend")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(backend="kubernetes-pods"))
    return e.plan_args(), [str(e.suite)]


@case("suite-missing-file")
def _(e: Env) -> tuple[list[str], list[str]]:
    missing = e.root / "nope" / "suite.yaml"
    return e.plan_args(suite=missing), [str(missing)]


@case("suite-tasks-dir-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(tasks_dir="no-such-tasks"))
    return e.plan_args(), ["no-such-tasks"]


@case("suite-agent-dir-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    def change(d: dict[str, object]) -> None:
        arms = d["arms"]
        assert isinstance(arms, list)
        arms[0]["agent_dir"] = "no-such-agent"
    e.edit_yaml(e.suite, change)
    return e.plan_args(), [str(e.suite)]


@case("suite-binary-garbage")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.suite.write_bytes(b"\x00\xff\xfe garbage \x80\x81")
    return e.plan_args(), [str(e.suite)]


# -- accounts files --------------------------------------------------------------------------

@case("accounts-yaml-syntax")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.accounts.write_text("accounts:\n  - name: a\n   route: {\n")
    return e.plan_args(), [str(e.accounts)]


@case("accounts-empty-list")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.accounts.write_text("accounts: []\n")
    return e.plan_args(), [str(e.accounts)]


@case("accounts-negative-concurrency")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0]["limits"].update(max_concurrent=-2))  # type: ignore[index]
    return e.plan_args(), [str(e.accounts)]


@case("accounts-two-unset-env-vars")
def _(e: Env) -> tuple[list[str], list[str]]:
    def change(d: dict[str, object]) -> None:
        accounts = d["accounts"]
        assert isinstance(accounts, list)
        accounts[0]["route"] = {"env": {"DEMO_API_KEY": "RB_NOT_SET_ANYWHERE_1"}}
        accounts[1]["route"] = {"env": {"DEMO_API_KEY": "RB_NOT_SET_ANYWHERE_2"}}
    e.edit_yaml(e.accounts, change)
    return e.plan_args(), [str(e.accounts), str(e.accounts)]


@case("accounts-home-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(  # type: ignore[index]
        route={"home": str(e.root / "no-such-home")}))
    return e.plan_args(), [str(e.accounts)]


@case("accounts-secret-value-inline")
def _(e: Env) -> tuple[list[str], list[str]]:
    # a value where a route names a variable: refused without echoing it anywhere
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(  # type: ignore[index]
        route={"env": {"DEMO_API_KEY": "sk-live-not-a-variable-name"}}))
    return e.plan_args(), [str(e.accounts)]


# -- selection files -------------------------------------------------------------------------

@case("selection-json-syntax")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.json", '{"tasks": [{"task_id": "hello-world",}]')
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-json-wrong-shape")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.json", '{"selected": ["hello-world"]}')
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-unknown-task")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.txt", "hello-world\nno-such-task\n")
    return e.plan_args("--selection-file", str(sel)), ["no-such-task"]


@case("selection-empty")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.txt", "\n\n")
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-duplicate")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.yaml", "- hello-world\n- hello-world\n")
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-bad-reps")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "hello-world", "reps": [0, "x"]}]}))
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.root / "in" / "absent.json"
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


@case("selection-not-a-task-id")
def _(e: Env) -> tuple[list[str], list[str]]:
    sel = e.file("sel.txt", "hello-world\nrm -rf / ; echo\n")
    return e.plan_args("--selection-file", str(sel)), [str(sel)]


# -- task directories ------------------------------------------------------------------------

@case("task-toml-syntax")
def _(e: Env) -> tuple[list[str], list[str]]:
    toml = e.tasks / "sum-list" / "task.toml"
    toml.write_text("[agent\ntimeout_sec = ")
    return e.plan_args(), [str(toml)]


@case("task-toml-wrong-type")
def _(e: Env) -> tuple[list[str], list[str]]:
    toml = e.tasks / "sum-list" / "task.toml"
    toml.write_text('[agent]\ntimeout_sec = "forever"\n')
    return e.plan_args(), [str(toml)]


@case("task-no-instruction")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.tasks / "sum-list" / "instruction.md").unlink()
    return e.plan_args(), [str(e.tasks / "sum-list")]


@case("task-no-verifier")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.tasks / "sum-list" / "tests" / "test.sh").unlink()
    return e.plan_args(), [str(e.tasks / "sum-list")]


@case("task-two-broken")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.tasks / "sum-list" / "instruction.md").unlink()
    (e.tasks / "hello-world" / "tests" / "test.sh").unlink()
    return e.plan_args(), [str(e.tasks / "hello-world"), str(e.tasks / "sum-list")]


@case("validate-task-dir")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.tasks / "sum-list" / "task.toml").unlink()
    return ["validate", str(e.tasks / "sum-list")], [str(e.tasks / "sum-list")]


@case("validate-three-files")
def _(e: Env) -> tuple[list[str], list[str]]:
    bad_suite = e.file("suite.yaml", "name: t\ntasks_dir: tasks\narms: 3\n")
    bad_acc = e.file("accounts.yaml", "accounts: {a: 1}\n")
    bad_sel = e.file("sel.json", "{")
    return ["validate", str(bad_suite), str(bad_acc), str(bad_sel)], [str(bad_suite), str(bad_acc),
                                                                      str(bad_sel)]


# -- plan options ----------------------------------------------------------------------------

@case("run-id-traversal")
def _(e: Env) -> tuple[list[str], list[str]]:
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "../escape"
    return args, ["--run-id"]


@case("run-id-spaces")
def _(e: Env) -> tuple[list[str], list[str]]:
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "my run"
    return args, ["--run-id"]


@case("run-id-already-started")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.runs / "ok" / "ledger.sqlite").write_bytes(b"")
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "ok"
    return args, [str(e.runs / "ok")]


@case("both-one-arm-flags")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.plan_args("--baseline-only", "--full-only"), ["--baseline-only"]


@case("one-arm-without-counterpart")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.plan_args("--baseline-only", "--runs", str(e.runs)), ["--runs"]


# -- plans and confirmations -----------------------------------------------------------------

@case("plan-not-json")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.plan.write_text("{ this is not json")
    return e.execute_args(), [str(e.plan)]


@case("plan-edited")
def _(e: Env) -> tuple[list[str], list[str]]:
    doc = json.loads(e.plan.read_text())
    doc["max_attempts"] = 99
    e.plan.write_text(json.dumps(doc))
    return e.execute_args(), [str(e.plan)]


@case("plan-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    missing = e.runs / "nope" / "launch-plan.json"
    return e.execute_args(plan=missing), [str(missing)]


@case("plan-is-a-directory")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.execute_args(plan=e.runs / "ok"), [str(e.runs / "ok")]


@case("confirm-missing")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.execute_args(confirm=None), ["--confirm"]


@case("confirm-other-plan")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.execute_args(confirm="sha256:" + "0" * 64), [str(e.plan)]


@case("confirm-garbage")
def _(e: Env) -> tuple[list[str], list[str]]:
    return e.execute_args(confirm="yes please"), ["--confirm"]


@case("suite-changed-after-planning")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.edit_yaml(e.suite, lambda d: d.update(max_attempts=5))
    return e.execute_args(), [str(e.suite)]


@case("task-changed-after-planning")
def _(e: Env) -> tuple[list[str], list[str]]:
    (e.tasks / "sum-list" / "instruction.md").write_text("a different instruction\n")
    return e.execute_args(), ["sum-list"]


@case("accounts-deleted-after-planning")
def _(e: Env) -> tuple[list[str], list[str]]:
    e.accounts.unlink()
    return e.execute_args(), [str(e.accounts)]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.name != ".execute.lock"}


def _check(result_stderr: str, exit_code: int, names: list[str], before: dict[str, tuple[int, int]],
           runs: Path) -> None:
    lines = [line for line in result_stderr.splitlines() if line.strip()]
    assert exit_code == 2, result_stderr
    assert "Traceback" not in result_stderr
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors, result_stderr
    assert len(errors) == len(names), result_stderr  # one line per problem
    for name in names:
        assert any(name in line for line in errors), (name, result_stderr)
    assert _tree(runs) == before  # nothing written


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_is_refused(env: Env, name: str) -> None:
    args, names = CASES[name](env)
    before = _tree(env.runs)
    result = CliRunner().invoke(app, args, env=cli_env(), catch_exceptions=False)
    _check(result.stderr, result.exit_code, names, before, env.runs)


@pytest.mark.parametrize("name", ["suite-yaml-syntax", "run-id-traversal", "confirm-other-plan",
                                  "suite-changed-after-planning"])
def test_malformed_input_as_a_process(env: Env, name: str) -> None:
    args, names = CASES[name](env)
    before = _tree(env.runs)
    result = run_cli(*args, cwd=env.root, timeout=120)
    _check(result.stderr, result.returncode, names, before, env.runs)
