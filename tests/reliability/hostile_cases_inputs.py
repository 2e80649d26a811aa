"""Hostile config, selection and task files: bombs, oversized and nested files, duplicate
keys, loose types, secrets, selections that unpair (registered into hostile_corpus.CASES)."""

from __future__ import annotations

import json

from hostile_corpus import Case, Env, case

SK_ANT = "sk-ant-api03-" + "Q7vB2xLm9Pq4Rt8Zk1Wy5Nc3Hd6Fg0Js" + "-AbCdEf"
OPENAI = "sk-proj-" + "Tz3Lq8Vw1Xk6Bn4Mc9Rd2Hf7Gj5Ps0Ya"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SLACK = "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
ENTROPY = "Zx8Qp2Lm9Rt4Vb7Nc3Kd6Wf1Gh5Js0TyUe"
#: The value tests/support/ray_local.py gives the route variable RB_TEST_KEY_A.
ROUTE_VALUE = "test-value-a-123456"


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


@case("selection-dataset-toml-deeply-nested")
def _(e: Env) -> Case:
    sel = e.file("dataset.toml", '[dataset]\nname = "a/b"\nx = ' + "[" * 200_000 + "]" * 200_000 + "\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("selection-dataset-toml-too-many-tasks")
def _(e: Env) -> Case:
    task = '[[tasks]]\nname = "o/t"\ndigest = "sha256:' + "a" * 64 + '"\n'
    sel = e.file("dataset.toml", '[dataset]\nname = "a/b"\n' + task * 100_001)
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


# -- simulation inputs -----------------------------------------------------------------------

@case("simulate-spec-alias-bomb")
def _(e: Env) -> Case:
    spec = e.file("spec.yaml", _bomb() + "seed: 1\n")
    return Case(["simulate", "--spec", str(spec)], [str(spec)])


@case("simulate-events-alias-bomb")
def _(e: Env) -> Case:
    events = e.file("events.yaml", _bomb() + "items: *l9\n")
    return Case(["simulate", "--plan", str(e.plan), "--events", str(events)], [str(events)])


@case("simulate-durations-csv-not-a-number")
def _(e: Env) -> Case:
    durations = e.file("durations.csv", "task,seconds\nhello-world,12\nsum-list,twelve\n")
    return Case(["simulate", "--plan", str(e.plan), "--durations-csv", str(durations)], [f"{durations}:3"])


@case("simulate-durations-csv-infinite")
def _(e: Env) -> Case:
    durations = e.file("durations.csv", "seconds\ninf\n")
    return Case(["simulate", "--plan", str(e.plan), "--durations-csv", str(durations)], [f"{durations}:2"])
