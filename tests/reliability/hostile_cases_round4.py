"""The fourth round of hostile inputs (issue 58), registered into hostile_corpus.CASES: names
that are not valid UTF-8, credentials typed into every free-text option and held in task files."""

from __future__ import annotations

import os
import shutil

from hostile_cases_inputs import ROUTE_VALUE
from hostile_corpus import Case, Env, case

#: A file name as a Linux filesystem may hold it: bytes that are no UTF-8 (Latin-1 "ÿ").
NOT_UTF8 = os.fsdecode(b"caf\xff")


@case("task-dir-name-not-utf8")
def _(e: Env) -> Case:
    shutil.copytree(e.tasks / "hello-world", e.tasks / NOT_UTF8)
    return Case(e.plan_args(), ["task directory caf\\xff has a name that is not valid UTF-8"])


@case("task-file-name-not-utf8")
def _(e: Env) -> Case:
    (e.tasks / "sum-list" / "tests" / f"{NOT_UTF8}.txt").write_text("x\n")
    return Case(e.plan_args(), ["tests/caf\\xff.txt has a name that is not valid UTF-8"])


@case("suite-path-not-utf8")
def _(e: Env) -> Case:
    suite = e.suite.with_name(f"{NOT_UTF8}.yaml")
    shutil.copy(e.suite, suite)
    return Case(e.plan_args(suite=suite), ["--suite: the path"])


# -- a live route value typed or written where a key never belongs ---------------------------

@case("pause-reason-holds-route-value")
def _(e: Env) -> Case:
    return Case(["pause", str(e.plan.parent), "--reason", f"rotating {ROUTE_VALUE}"], ["--reason"],
                secrets=[ROUTE_VALUE])


@case("promote-reason-holds-route-value")
def _(e: Env) -> Case:
    return Case(["promote", str(e.plan.parent), "--reason", f"ok {ROUTE_VALUE}"], ["--reason"], secrets=[ROUTE_VALUE])


@case("rerun-hypothesis-holds-route-value")
def _(e: Env) -> Case:
    return Case(["rerun", str(e.plan.parent), "--failed", "--hypothesis", ROUTE_VALUE], ["--hypothesis"],
                secrets=[ROUTE_VALUE])


@case("accounts-hold-reason-holds-route-value")
def _(e: Env) -> Case:
    return Case(["accounts", "hold", "--accounts", str(e.accounts), "--name", "acct-a", "--reason", ROUTE_VALUE],
                ["--reason"], secrets=[ROUTE_VALUE])


@case("task-test-sh-holds-route-value")
def _(e: Env) -> Case:
    test = e.tasks / "sum-list" / "tests" / "test.sh"
    test.write_text(test.read_text() + f"\ncurl -H 'x-api-key: {ROUTE_VALUE}' https://example.invalid\n")
    return Case(e.plan_args(), ["tests/test.sh:"], secrets=[ROUTE_VALUE])


@case("validate-task-dir-not-utf8")
def _(e: Env) -> Case:
    shutil.copytree(e.tasks / "hello-world", e.tasks / NOT_UTF8)
    return Case(["validate", str(e.tasks / NOT_UTF8)], ["caf\\xff is not valid UTF-8"])


@case("validate-suite-path-not-utf8")
def _(e: Env) -> Case:
    suite = e.suite.with_name(f"{NOT_UTF8}.yaml")
    shutil.copy(e.suite, suite)
    return Case(["validate", str(suite)], ["caf\\xff.yaml is not valid UTF-8"])
