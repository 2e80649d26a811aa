"""The first round's malformed-input corpus (47 cases), ported into the hostile corpus so that
every bad input runs under the same bounds (1 GB address space, 30 s) and checks: broken
syntax, wrong types, missing files, unknown tasks, unsafe run ids, edited plans, inputs changed
after planning (registered into hostile_corpus.CASES)."""

from __future__ import annotations

import json

from hostile_corpus import Case, Env, case

# -- suite files -----------------------------------------------------------------------------

@case("malformed-suite-yaml-syntax")
def _(e: Env) -> Case:
    e.suite.write_text("name: t\narms: [\n  - oops: {\n")
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-not-a-mapping")
def _(e: Env) -> Case:
    e.suite.write_text("- just\n- a list\n")
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-empty")
def _(e: Env) -> Case:
    e.suite.write_text("")
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-unknown-key")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(repetitions=3))
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-reps-not-a-number")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(reps="three"))
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-no-arms")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(arms=[]))
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-two-problems")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(reps=-1, max_attempts="x"))
    return Case(e.plan_args(), [str(e.suite), str(e.suite)])


@case("malformed-suite-unknown-backend")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(backend="kubernetes-pods"))
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-missing-file")
def _(e: Env) -> Case:
    missing = e.root / "nope" / "suite.yaml"
    return Case(e.plan_args(suite=missing), [str(missing)])


@case("malformed-suite-tasks-dir-missing")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(tasks_dir="no-such-tasks"))
    return Case(e.plan_args(), ["no-such-tasks"])


@case("malformed-suite-agent-dir-missing")
def _(e: Env) -> Case:
    def change(d: dict[str, object]) -> None:
        arms = d["arms"]
        assert isinstance(arms, list)
        arms[0]["agent_dir"] = "no-such-agent"
    e.edit_yaml(e.suite, change)
    return Case(e.plan_args(), [str(e.suite)])


@case("malformed-suite-binary-garbage")
def _(e: Env) -> Case:
    e.suite.write_bytes(b"\x00\xff\xfe garbage \x80\x81")
    return Case(e.plan_args(), [str(e.suite)])


# -- accounts files --------------------------------------------------------------------------

@case("malformed-accounts-yaml-syntax")
def _(e: Env) -> Case:
    e.accounts.write_text("accounts:\n  - name: a\n   route: {\n")
    return Case(e.plan_args(), [str(e.accounts)])


@case("malformed-accounts-empty-list")
def _(e: Env) -> Case:
    e.accounts.write_text("accounts: []\n")
    return Case(e.plan_args(), [str(e.accounts)])


@case("malformed-accounts-negative-concurrency")
def _(e: Env) -> Case:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0]["limits"].update(max_concurrent=-2))  # type: ignore[index]
    return Case(e.plan_args(), [str(e.accounts)])


@case("malformed-accounts-two-unset-env-vars")
def _(e: Env) -> Case:
    def change(d: dict[str, object]) -> None:
        accounts = d["accounts"]
        assert isinstance(accounts, list)
        accounts[0]["route"] = {"env": {"DEMO_API_KEY": "RB_NOT_SET_ANYWHERE_1"}}
        accounts[1]["route"] = {"env": {"DEMO_API_KEY": "RB_NOT_SET_ANYWHERE_2"}}
    e.edit_yaml(e.accounts, change)
    return Case(e.plan_args(), [str(e.accounts), str(e.accounts)])


@case("malformed-accounts-home-missing")
def _(e: Env) -> Case:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(  # type: ignore[index]
        route={"home": str(e.root / "no-such-home")}))
    return Case(e.plan_args(), [str(e.accounts)])


@case("malformed-accounts-secret-value-inline")
def _(e: Env) -> Case:
    # a value where a route names a variable: refused without echoing it anywhere
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(  # type: ignore[index]
        route={"env": {"DEMO_API_KEY": "sk-live-not-a-variable-name"}}))
    return Case(e.plan_args(), [str(e.accounts)])


# -- selection files -------------------------------------------------------------------------

@case("malformed-selection-json-syntax")
def _(e: Env) -> Case:
    sel = e.file("sel.json", '{"tasks": [{"task_id": "hello-world",}]')
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-json-wrong-shape")
def _(e: Env) -> Case:
    sel = e.file("sel.json", '{"selected": ["hello-world"]}')
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-unknown-task")
def _(e: Env) -> Case:
    sel = e.file("sel.txt", "hello-world\nno-such-task\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["no-such-task"])


@case("malformed-selection-empty")
def _(e: Env) -> Case:
    sel = e.file("sel.txt", "\n\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-duplicate")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- hello-world\n- hello-world\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-bad-reps")
def _(e: Env) -> Case:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "hello-world", "reps": [0, "x"]}]}))
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-missing")
def _(e: Env) -> Case:
    sel = e.root / "in" / "absent.json"
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("malformed-selection-not-a-task-id")
def _(e: Env) -> Case:
    sel = e.file("sel.txt", "hello-world\nrm -rf / ; echo\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


# -- task directories ------------------------------------------------------------------------

@case("malformed-task-toml-syntax")
def _(e: Env) -> Case:
    toml = e.tasks / "sum-list" / "task.toml"
    toml.write_text("[agent\ntimeout_sec = ")
    return Case(e.plan_args(), [str(toml)])


@case("malformed-task-toml-wrong-type")
def _(e: Env) -> Case:
    toml = e.tasks / "sum-list" / "task.toml"
    toml.write_text('[agent]\ntimeout_sec = "forever"\n')
    return Case(e.plan_args(), [str(toml)])


@case("malformed-task-no-instruction")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "instruction.md").unlink()
    return Case(e.plan_args(), [str(e.tasks / "sum-list")])


@case("malformed-task-no-verifier")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "tests" / "test.sh").unlink()
    return Case(e.plan_args(), [str(e.tasks / "sum-list")])


@case("malformed-task-two-broken")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "instruction.md").unlink()
    (e.tasks / "hello-world" / "tests" / "test.sh").unlink()
    return Case(e.plan_args(), [str(e.tasks / "hello-world"), str(e.tasks / "sum-list")])


@case("malformed-validate-task-dir")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "task.toml").unlink()
    return Case(["validate", str(e.tasks / "sum-list")], [str(e.tasks / "sum-list")])


@case("malformed-validate-three-files")
def _(e: Env) -> Case:
    bad_suite = e.file("suite.yaml", "name: t\ntasks_dir: tasks\narms: 3\n")
    bad_acc = e.file("accounts.yaml", "accounts: {a: 1}\n")
    bad_sel = e.file("sel.json", "{")
    return Case(["validate", str(bad_suite), str(bad_acc), str(bad_sel)], [str(bad_suite), str(bad_acc),
                                                                      str(bad_sel)])


# -- plan options ----------------------------------------------------------------------------

@case("malformed-run-id-traversal")
def _(e: Env) -> Case:
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "../escape"
    return Case(args, ["--run-id"])


@case("malformed-run-id-spaces")
def _(e: Env) -> Case:
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "my run"
    return Case(args, ["--run-id"])


@case("malformed-run-id-already-started")
def _(e: Env) -> Case:
    (e.runs / "ok" / "ledger.sqlite").write_bytes(b"")
    args = e.plan_args()
    args[args.index("--run-id") + 1] = "ok"
    return Case(args, [str(e.runs / "ok")])


@case("malformed-both-one-arm-flags")
def _(e: Env) -> Case:
    return Case(e.plan_args("--baseline-only", "--full-only"), ["--baseline-only"])


@case("malformed-one-arm-without-counterpart")
def _(e: Env) -> Case:
    return Case(e.plan_args("--baseline-only", "--runs", str(e.runs)), ["--runs"])


# -- plans and confirmations -----------------------------------------------------------------

@case("malformed-plan-not-json")
def _(e: Env) -> Case:
    e.plan.write_text("{ this is not json")
    return Case(e.execute_args(), [str(e.plan)])


@case("malformed-plan-edited")
def _(e: Env) -> Case:
    doc = json.loads(e.plan.read_text())
    doc["max_attempts"] = 99
    e.plan.write_text(json.dumps(doc))
    return Case(e.execute_args(), [str(e.plan)])


@case("malformed-plan-missing")
def _(e: Env) -> Case:
    missing = e.runs / "nope" / "launch-plan.json"
    return Case(e.execute_args(plan=missing), [str(missing)])


@case("malformed-plan-is-a-directory")
def _(e: Env) -> Case:
    return Case(e.execute_args(plan=e.runs / "ok"), [str(e.runs / "ok")])


@case("malformed-confirm-missing")
def _(e: Env) -> Case:
    return Case([a for a in e.execute_args() if a not in ("--confirm", e.identity)], ["--confirm"])


@case("malformed-confirm-other-plan")
def _(e: Env) -> Case:
    return Case(e.execute_args(confirm="sha256:" + "0" * 64), [str(e.plan)])


@case("malformed-confirm-garbage")
def _(e: Env) -> Case:
    return Case(e.execute_args(confirm="yes please"), ["--confirm"])


@case("malformed-suite-changed-after-planning")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(max_attempts=5))
    return Case(e.execute_args(), [str(e.suite)])


@case("malformed-task-changed-after-planning")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "instruction.md").write_text("a different instruction\n")
    return Case(e.execute_args(), ["sum-list"])


@case("malformed-accounts-deleted-after-planning")
def _(e: Env) -> Case:
    e.accounts.unlink()
    return Case(e.execute_args(), [str(e.accounts)])
