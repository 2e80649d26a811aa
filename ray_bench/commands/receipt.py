"""The receipt: what an operator reads before confirming a plan."""

from __future__ import annotations

import shlex
from collections import Counter

from ray_bench.commands.receipt_terms import (
    cells_line,
    estimate_lines,
    glossary_lines,
    lineage_lines,
    power_lines,
    task_lines,
    workspace_lines,
)
from ray_bench.models.plan import Plan
from ray_bench.plan.agents import agents_section
from ray_bench.plan.arm_diff import render_differences
from ray_bench.plan.roles import render_roles, render_verifier_routes, verifier_names
from ray_bench.plan.watchdog import watchdog_lines
from ray_bench.scheduler.builds import build_settings, build_targets, quota_line
from ray_bench.scheduler.runstate import attempt_cap
from ray_bench.textsafe import code_span, escape_controls, table_cell


def render_receipt(plan: Plan, identity: str) -> str:
    out: list[str] = [f"# Launch receipt: {plan.run_id}", ""]
    out += [f"- plan identity: `{identity}`", f"- suite: `{plan.suite}`",
            f"- created with: {plan.created_with}",
            f"- {cells_line(plan)}",
            *(f"- {line}" for line in lineage_lines(plan)),
            f"- preflight cells: {len(plan.preflight)}",
            f"- cells with history (expected duration from earlier runs): {_with_history(plan)}",
            f"- attempts per cell at most: {plan.max_attempts} failing on the cell itself (task, tool, "
            f"evaluator, executor, behaviour), {attempt_cap(plan.max_attempts)} failed attempts of any "
            "class (stack, provider, capacity, auth and lost runners included)",
            f"- spend limit: {f'${plan.spend_limit_usd:.2f}' if plan.spend_limit_usd else 'none'}",
            f"- paired: {'no (one-arm plan)' if plan.unpaired else 'yes'}"]
    if plan.skipped:
        out.append(f"- tasks left out (--skip-unsupported): {len(plan.skipped)}, listed below")
    out += ["", "## Warnings", ""]
    out += [f"- {w}" for w in plan.warnings] or ["- none"]
    if plan.skipped:
        out += ["", "## Tasks left out (the backend cannot run them)", "", "| task | why |", "|---|---|"]
        out += [f"| {table_cell(s.id)} | {table_cell(s.reason)} |" for s in plan.skipped]
    out += ["", "## Arms", "", "| arm | role | command | agent timeout | env names |", "|---|---|---|---|---|"]
    for arm in plan.arms:
        timeout = f"{arm.agent_timeout_sec:g}s" if arm.agent_timeout_sec else "task's"
        shown = arm.command or f"{arm.agent} adapter"
        out.append(f"| {table_cell(arm.name)} | {arm.role} | {code_span(shown)} | {timeout} | "
                   f"{table_cell(', '.join(sorted(arm.env))) or '-'} |")
    out += ["", *render_differences(plan.arms)]
    out += agents_section(plan)
    out += ["", *workspace_lines(plan)]
    out += ["", *render_roles(plan.arms)]
    wanted: dict[str, list[str]] = {}
    for task in plan.tasks:
        for var in sorted(verifier_names(task.config)):
            wanted.setdefault(var, []).append(task.id)
    routes = render_verifier_routes(plan.arms, plan.accounts, wanted)
    if routes:
        out += ["", *routes]
    out += ["", *watchdog_lines(plan.arms)]
    out += ["", "## Accounts", "",
            "| account | provider | route | max concurrent | starts/min | window quota | spend budget |",
            "|---|---|---|---|---|---|---|"]
    for acc in plan.accounts:
        route = ", ".join(f"{t}<-${s}" for t, s in sorted(acc.route.env.items()))
        if acc.route.home:
            route = (route + ", " if route else "") + f"HOME={acc.route.home}"
        lim = acc.limits
        window = "-"
        if lim.window is not None:
            parts = [f"{lim.window.max_cells} cells" if lim.window.max_cells else "",
                     f"${lim.window.max_usd:g}" if lim.window.max_usd else ""]
            window = " / ".join(p for p in parts if p) + f" per {lim.window.hours:g}h"
        out.append(f"| {acc.name} | {acc.provider} | {route} | {lim.max_concurrent} (floor {lim.min_concurrent}) | "
                   f"{lim.starts_per_minute or '-'} | {window} | {f'${lim.spend_usd:.2f}' if lim.spend_usd else '-'} |")
    out += ["", "## Backends", ""]
    for name, backend in sorted(plan.backends.items()):
        pool = f"pool {backend.max_sandboxes or 'default'}"
        if name in plan.capacity.backend_pools:  # the limit that binds, not only max_sandboxes
            binds = plan.capacity.backend_binds.get(name)
            pool = f"pool {plan.capacity.backend_pools[name]}" + (f" ({binds} binds)" if binds else "")
        out.append(f"- `{name}`: {pool}, options {', '.join(sorted(backend.options)) or 'none'}")
    settings = build_settings(plan)
    if targets := build_targets(plan, settings.default_size):
        out.append(f"- {quota_line(targets, settings.snapshot_quota)}")
    out += ["", "## Capacity", ""] + [f"- {line}" for line in plan.capacity.lines]
    per_arm = Counter(c.arm for c in plan.cells)
    out += ["", "## Cells", "", "| arm | cells |", "|---|---|"]
    out += [f"| {arm} | {n} |" for arm, n in sorted(per_arm.items())]
    out += ["", f"## Tasks ({len({c.task for c in plan.cells})})", "", *task_lines(plan)]
    out += ["", "## Estimate", "", *estimate_lines(plan)]
    out += ["", "## Power", "", *power_lines(plan)]
    out += ["", "## Inputs (re-checked before every new attempt)", ""]
    kinds = Counter(i.kind for i in plan.inputs)
    listed: set[tuple[str, str]] = set()
    for item in plan.inputs:
        if item.kind != "task" and (item.path, item.sha256) not in listed:  # arms may share an agent dir
            listed.add((item.path, item.sha256))
            out.append(f"- {item.kind} `{item.path}` sha256 `{item.sha256[:16]}`")
    out.append(f"- {kinds['task']} task directories (checksums in the plan)")
    # the plan's real path: a receipt of `plan --runs-dir elsewhere` names elsewhere
    plan_path = f"{plan.run_root}/launch-plan.json" if plan.run_root else f"runs/{plan.run_id}/launch-plan.json"
    out += ["", "## Confirm", "", "```", f"ray-bench execute --plan {shlex.quote(plan_path)} --confirm {identity}",
            "```", ""]
    out += ["## Terms", "", *glossary_lines(), ""]
    # one escape pass over every line: no value from a file can send a terminal control
    # sequence or start a line (a forged table row) of its own
    return "\n".join(escape_controls(line) for line in out)


def _with_history(plan: Plan) -> int:
    known = {t.id for t in plan.tasks if t.expected_sec is not None}
    return sum(1 for c in plan.cells if c.task in known)
