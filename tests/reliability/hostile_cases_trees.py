"""Hostile task trees, free text, identities, terminals and capacity (issue 28 items 3, 4, 9,
10, 11; issue 27 items 1 and 5), registered into hostile_corpus.CASES: special files and
links in a task, sizes read by stat, counts a user can type, keys in task files and in every
option that is stored or printed, ids that differ only in case or Unicode form, repeated or
empty lists, non-finite numbers, control bytes, and plans that could never start."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

from hostile_cases_inputs import AWS, ENTROPY, GITHUB, OPENAI, ROUTE_VALUE, SK_ANT
from hostile_corpus import Case, Env, case

from ray_bench.sandboxes.host import HostResources

#: A real SWE-bench Pro instance id (issue 27): hex and words, never a key.
NODEBB = ("instance_NodeBB__NodeBB-76c6e30282906ac664f2c9278fc90999b27b1f48-"
          "vd59a5728dfc977f44533186ace531248c2917516")
ESC = "\x1b]0;owned\x07\x1b[2J"


def _task(e: Env, name: str = "sum-list") -> Path:
    return e.tasks / name


def _toml(e: Env, text: str, section: str = "[agent]\n") -> None:
    toml = _task(e) / "task.toml"
    toml.write_text(toml.read_text().replace(section, section + text))


def _cell(e: Env) -> str:
    return str(json.loads(e.plan.read_text())["cells"][0]["id"])


# -- bounded reads of task trees (28.3) -----------------------------------------------------

@case("task-fifo-under-solution")
def _(e: Env) -> Case:
    os.mkfifo(_task(e) / "solution" / "pipe")  # a read would block plan forever
    return Case(e.plan_args(), ["solution/pipe is a FIFO"])


@case("task-instruction-is-a-fifo")
def _(e: Env) -> Case:
    (_task(e) / "instruction.md").unlink()
    os.mkfifo(_task(e) / "instruction.md")
    return Case(e.plan_args(), ["instruction.md is a FIFO"])


@case("task-socket-in-tests")
def _(e: Env) -> Case:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(_task(e) / "tests" / "s.sock"))
    sock.close()
    return Case(e.plan_args(), ["tests/s.sock is a socket"])


@case("task-link-to-dev-zero")
def _(e: Env) -> Case:
    (_task(e) / "tests" / "data.bin").symlink_to("/dev/zero")
    return Case(e.plan_args(), ["tests/data.bin links outside the task"])


@case("task-link-out-of-the-task")
def _(e: Env) -> Case:
    (_task(e) / "solution" / "passwd").symlink_to("/etc/passwd")
    return Case(e.plan_args(), ["solution/passwd links outside the task"])


@case("task-link-to-a-sibling-task")
def _(e: Env) -> Case:
    (_task(e) / "tests" / "other").symlink_to(_task(e, "hello-world") / "task.toml")
    return Case(e.plan_args(), ["tests/other links outside the task"])


@case("task-dir-linked-out-of-the-root")
def _(e: Env) -> Case:
    outside = e.root / "elsewhere" / "linked-task"
    shutil.copytree(_task(e, "hello-world"), outside)
    (e.tasks / "linked-task").symlink_to(outside)
    return Case(e.plan_args(), ["'linked-task' escapes the task roots"])


@case("task-symlink-loop")
def _(e: Env) -> Case:
    (_task(e) / "a").symlink_to(_task(e) / "b")
    (_task(e) / "b").symlink_to(_task(e) / "a")
    return Case(e.plan_args(), ["is a symlink loop"])


@case("task-dangling-link")
def _(e: Env) -> Case:
    (_task(e) / "tests" / "gone.sh").symlink_to(_task(e) / "nowhere")
    return Case(e.plan_args(), ["tests/gone.sh is a dangling symlink"])


@case("task-sparse-2gb-file")
def _(e: Env) -> Case:
    with (_task(e) / "solution" / "big.bin").open("wb") as handle:
        handle.truncate(2 << 30)  # no block written: refused by its size, never read
    return Case(e.plan_args(), ["solution/big.bin takes the task over 512 MiB"])


@case("task-too-many-files")
def _(e: Env) -> Case:
    many = _task(e) / "tests" / "many"
    many.mkdir()
    for i in range(10_001):
        (many / f"f{i}").touch()
    return Case(e.plan_args(), ["holds more than 10,000 files"])


@case("task-50mb-instruction")
def _(e: Env) -> Case:
    (_task(e) / "instruction.md").write_bytes(b"x" * (50 << 20))
    return Case(e.plan_args(), ["instruction.md"])


@case("suite-file-is-a-fifo")
def _(e: Env) -> Case:
    fifo = e.root / "in" / "suite.yaml"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    return Case(e.plan_args(suite=fifo), ["is not a regular file"])


@case("selection-is-dev-zero")
def _(e: Env) -> Case:
    return Case(e.plan_args("--selection-file", "/dev/zero"), ["/dev/zero"])


@case("plan-reps-a-billion")
def _(e: Env) -> Case:
    return Case(e.plan_args("--reps", "1000000000"), ["--reps"])


@case("selection-800k-entries-yaml")
def _(e: Env) -> Case:
    sel = e.file("big.yaml", "".join(f"- t{i}\n" for i in range(800_000)))
    return Case(e.plan_args("--selection-file", str(sel)), ["800,000 entries"])


@case("selection-800k-comment-lines-yaml")
def _(e: Env) -> Case:
    sel = e.file("long.yaml", "# x\n" * 800_000 + "- hello-world\n")  # issue 56: bounded before parsing
    return Case(e.plan_args("--selection-file", str(sel)), ["800,001 lines"])


@case("selection-task-ids-differing-in-case")
def _(e: Env) -> Case:
    sel = e.file("case.txt", "hello-world\nHELLO-WORLD\n")  # issue 56: one task, planned twice
    return Case(e.plan_args("--selection-file", str(sel)), ["'hello-world' and 'HELLO-WORLD' are one task"])


@case("selection-reps-list-over-the-cell-bound")
def _(e: Env) -> Case:
    sel = e.file("reps.json", json.dumps({"tasks": [{"task_id": "hello-world", "reps": list(range(1, 300_001))}]}))
    return Case(e.plan_args("--selection-file", str(sel)), ["600,000 cells"])


@case("drift-fifo-added-after-planning")
def _(e: Env) -> Case:
    os.mkfifo(_task(e) / "tests" / "pipe")
    return Case(e.execute_args(), ["tests/pipe is a FIFO"])


@case("drift-link-to-dev-zero-after-planning")
def _(e: Env) -> Case:
    (_task(e) / "tests" / "zero").symlink_to("/dev/zero")
    return Case(e.execute_args(), ["changed after planning"])


# -- secrets in names, task files and free text (27.1, 28.4) --------------------------------

@case("task-dir-named-like-a-key")
def _(e: Env) -> Case:
    _task(e).rename(e.tasks / SK_ANT)
    return Case(e.plan_args(), ["the task directory's name"], secrets=[SK_ANT])


@case("task-dir-named-like-a-key-validate")
def _(e: Env) -> Case:
    _task(e).rename(e.tasks / GITHUB)
    return Case(["validate", str(e.tasks / GITHUB)], ["the task directory's name"], secrets=[GITHUB])


@case("selection-real-ids-and-one-key")
def _(e: Env) -> Case:
    sel = e.file("sel.txt", f"hello-world\n{NODEBB}\n{OPENAI}\n")
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)], secrets=[OPENAI])


@case("task-instruction-holds-key")
def _(e: Env) -> Case:
    (_task(e) / "instruction.md").write_text(f"Sum the list.\nUse token {GITHUB} for the API.\n")
    return Case(e.plan_args(), ["instruction.md:2"], secrets=[GITHUB])


@case("task-test-sh-holds-key")
def _(e: Env) -> Case:
    test = _task(e) / "tests" / "test.sh"
    test.write_text(test.read_text() + f"\nexport AWS_ACCESS_KEY_ID={AWS}\n")
    return Case(e.plan_args(), ["tests/test.sh:"], secrets=[AWS])


@case("task-dockerfile-holds-key")
def _(e: Env) -> Case:
    (_task(e) / "environment").mkdir()
    (_task(e) / "environment" / "Dockerfile").write_text(f"FROM busybox\nENV OPENAI_API_KEY={OPENAI}\n")
    return Case(e.plan_args(), ["environment/Dockerfile:2"], secrets=[OPENAI])


@case("task-env-template-names-route-variable")
def _(e: Env) -> Case:
    _toml(e, 'env = { TOKEN = "${RB_TEST_KEY_A}" }\n', "[verifier]\n")
    return Case(e.plan_args(), ["RB_TEST_KEY_A"])


@case("task-env-template-names-agent-variable")
def _(e: Env) -> Case:
    _toml(e, 'env = { K = "$DEMO_API_KEY" }\n', "[environment]\n")
    return Case(e.plan_args(), ["DEMO_API_KEY"])


@case("exclude-reason-holds-key")
def _(e: Env) -> Case:
    return Case(["exclude", str(e.plan.parent), "--cell", _cell(e), "--reason", f"leaked {SK_ANT}"],
                ["--reason"], secrets=[SK_ANT])


@case("exclude-reason-holds-high-entropy-token")
def _(e: Env) -> Case:
    return Case(["exclude", str(e.plan.parent), "--cell", _cell(e), "--reason", ENTROPY],
                ["--reason"], secrets=[ENTROPY])


@case("exclude-reason-holds-route-value")
def _(e: Env) -> Case:
    return Case(["exclude", str(e.plan.parent), "--cell", _cell(e), "--reason", f"key was {ROUTE_VALUE}"],
                ["--reason"], secrets=[ROUTE_VALUE])


@case("execute-hypothesis-holds-route-value")
def _(e: Env) -> Case:
    return Case(e.execute_args("--hypothesis", ROUTE_VALUE), ["--hypothesis"], secrets=[ROUTE_VALUE])


@case("exclude-by-holds-key")
def _(e: Env) -> Case:
    return Case(["exclude", str(e.plan.parent), "--cell", _cell(e), "--reason", "flaky", "--by", GITHUB],
                ["--by"], secrets=[GITHUB])


@case("include-reason-holds-key")
def _(e: Env) -> Case:
    return Case(["include", str(e.plan.parent), "--cell", _cell(e), "--reason", AWS], ["--reason"], secrets=[AWS])


@case("promote-reason-holds-key")
def _(e: Env) -> Case:
    return Case(["promote", str(e.plan.parent), "--reason", OPENAI], ["--reason"], secrets=[OPENAI])


@case("promote-by-holds-key")
def _(e: Env) -> Case:
    return Case(["promote", str(e.plan.parent), "--reason", "good", "--by", SK_ANT], ["--by"], secrets=[SK_ANT])


@case("execute-hypothesis-holds-key")
def _(e: Env) -> Case:
    return Case(e.execute_args("--hypothesis", f"rotated to {OPENAI}"), ["--hypothesis"], secrets=[OPENAI])


@case("execute-clearance-reason-holds-key")
def _(e: Env) -> Case:
    return Case(e.execute_args("--clear-halt", str(e.plan.parent / "resource-halt.json"),
                               "--clearance-reason", GITHUB), ["--clearance-reason"], secrets=[GITHUB])


@case("rerun-hypothesis-holds-key")
def _(e: Env) -> Case:
    return Case(["rerun", str(e.plan.parent), "--failed", "--hypothesis", AWS], ["--hypothesis"], secrets=[AWS])


@case("pause-reason-holds-key")
def _(e: Env) -> Case:
    return Case(["pause", str(e.plan.parent), "--reason", SK_ANT], ["--reason"], secrets=[SK_ANT])


@case("accounts-hold-reason-holds-key")
def _(e: Env) -> Case:
    return Case(["accounts", "hold", "--accounts", str(e.accounts), "--name", "acct-a", "--reason", OPENAI],
                ["--reason"], secrets=[OPENAI])


@case("plan-run-id-is-a-key")
def _(e: Env) -> Case:
    argv = e.plan_args()
    argv[argv.index("--run-id") + 1] = OPENAI
    return Case(argv, ["--run-id"], secrets=[OPENAI])


@case("plan-task-option-is-a-key")
def _(e: Env) -> Case:
    return Case(e.plan_args("--task", SK_ANT), ["--task"], secrets=[SK_ANT])


# -- identities, lists and numbers (28.9, 28.11) ---------------------------------------------

@case("task-dirs-differ-only-in-case")
def _(e: Env) -> Case:
    shutil.copytree(_task(e, "hello-world"), e.tasks / "HELLO-WORLD")
    return Case(e.plan_args(), ["'hello-world' and 'HELLO-WORLD' are one id"])


@case("task-dirs-differ-only-in-unicode-form")
def _(e: Env) -> Case:
    shutil.copytree(_task(e, "hello-world"), e.tasks / "\uff48ello-world")  # fullwidth h: NFKC folds it
    return Case(e.plan_args(), ["are one id"])


@case("selection-reps-repeated")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  reps: [1, 1]\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["reps names '1' twice"])


@case("selection-reps-empty")
def _(e: Env) -> Case:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "hello-world", "reps": []}]}))
    return Case(e.plan_args("--selection-file", str(sel)), ["reps is an empty list"])


@case("selection-arms-empty")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  arms: []\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["arms is an empty list"])


@case("selection-arms-repeated")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", "- task_id: hello-world\n  arms: [baseline, baseline]\n")
    return Case(e.plan_args("--selection-file", str(sel)), ["arms names 'baseline' twice"])


@case("task-timeout-inf")
def _(e: Env) -> Case:
    toml = _task(e) / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = inf"))
    return Case(e.plan_args(), ["agent.timeout_sec"])


@case("task-timeout-nan")
def _(e: Env) -> Case:
    toml = _task(e) / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 30.0", "timeout_sec = nan"))
    return Case(e.plan_args(), ["verifier.timeout_sec"])


@case("suite-arm-timeout-inf")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d["arms"][0].update(agent_timeout_sec=float("inf")))
    return Case(e.plan_args(), [str(e.suite)])


@case("plan-run-id-with-trailing-newline")
def _(e: Env) -> Case:
    argv = e.plan_args()
    argv[argv.index("--run-id") + 1] = "x\n"
    return Case(argv, ["--run-id"])


# -- control bytes never reach the terminal (28.10) ------------------------------------------

@case("selection-names-task-with-escape-bytes")
def _(e: Env) -> Case:
    sel = e.file("sel.yaml", json.dumps([f"evil{ESC}"]))
    return Case(e.plan_args("--selection-file", str(sel)), [str(sel)])


@case("task-dir-with-escape-bytes-broken-toml")
def _(e: Env) -> Case:
    bad = e.tasks / f"t{ESC}"
    bad.mkdir()
    (bad / "task.toml").write_text("[agent\n")
    return Case(e.plan_args(), ["invalid TOML", "instruction.md is missing", "tests/test.sh is missing"])


# -- plans that could never start (27.5) -----------------------------------------------------

@case("docker-task-asks-more-memory-than-the-host")
def _(e: Env) -> Case:
    more = HostResources.read().memory_mb // 1024 + 6  # the 30 GB on a 24 GB host
    _toml(e, f'memory = "{more}G"\n', "[environment]\n")
    e.edit_yaml(e.suite, lambda d: d.update(backend="docker", backends={"docker": {"image": "debian:bookworm-slim"}}))
    return Case(e.plan_args(), ["task sum-list (arm baseline) asks for"])


@case("docker-task-asks-more-cpus-than-the-host")
def _(e: Env) -> Case:
    _toml(e, f"cpus = {int(HostResources.read().cpus) + 1}\n", "[environment]\n")
    e.edit_yaml(e.suite, lambda d: d.update(backend="docker", backends={"docker": {"image": "debian:bookworm-slim"}}))
    return Case(e.plan_args(), ["not one sandbox of this size fits"])


@case("daytona-task-larger-than-the-pool")
def _(e: Env) -> Case:
    _toml(e, "cpus = 8\n", "[environment]\n")
    pool = {"vcpu": 4, "memory_gib": 16, "disk_gib": 100, "creates_per_minute": 60}
    e.edit_yaml(e.suite, lambda d: d.update(backend="daytona", backends={"daytona": {"options": {"pool": pool}}}))
    return Case(e.plan_args(), ["the Daytona pool has 4 vCPU"])


@case("gaps-target-a-billion")
def _(e: Env) -> Case:
    return Case(["gaps", "--suite", str(e.suite), "--runs", str(e.plan.parent), "--target", "1000000000",
                 "--out", str(e.root / "sel" / "gaps.json")], ["--target"])
