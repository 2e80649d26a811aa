"""Parts of the receipt that say what the operator confirms: the cells as tasks x arms x reps,
the task list, the estimated makespan and cost, and what each term means.

Kept apart from :mod:`ray_bench.commands.receipt` (which lays out the page) so that each part can
change without touching the others.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ray_bench.models.plan import Plan
from ray_bench.textsafe import code_span, table_cell

#: Past this many tasks the receipt lists the first and last few and says how many it left out.
TASK_LIST_MAX = 20

#: Every term the receipt uses, explained once (in the order an operator meets them).
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("plan identity", "sha256 of the plan's canonical JSON; `execute --confirm` must name it exactly"),
    ("task", "one benchmark problem (a Harbor task directory)"),
    ("arm", "one agent configuration; `baseline` is the reference the variants are paired with"),
    ("rep", "repetition: the same task and arm run again, as a separate cell"),
    ("cell", "one (task, arm, rep): the unit of work, run until it has one valid row"),
    ("pair", "the cells of one (task, rep) across the arms, launched close together"),
    ("attempt", "one execution of a cell; a cell gets up to the attempts shown before it counts as failed "
                "(rate limits, auth and sandbox failures do not use one up)"),
    ("valid row", "an attempt whose verifier gave a reward, with no infrastructure failure; reward 0 is "
                  "still valid (valid is about the evidence, solved about the reward)"),
    ("preflight", "the first cells (one pair per backend) that must give valid rows before the rest start"),
    ("max concurrent (floor N)", "cells in flight on the account at most; the limit adapts down on rate "
                                 "limits and never below the floor N"),
    ("window quota", "cells or dollars the account may use per rolling window"),
    ("capacity", "cells that can run at once: the smallest of the accounts' concurrency, the backends' "
                 "pools and --parallel"),
    ("makespan", "wall time from the first start to the last finish"),
    ("detectable delta", "the smallest mean paired delta (variant - baseline reward) the planned repetitions "
                         "find 80% of the time at alpha 0.05; smaller true deltas are likely missed"),
)


def cells_line(plan: Plan) -> str:
    """``cells: 32 = 8 tasks x 2 arms x 2 reps`` (or the spread when reps differ by task)."""
    tasks = {c.task for c in plan.cells}
    arms = {c.arm for c in plan.cells}
    per = Counter((c.task, c.arm) for c in plan.cells)
    reps = sorted(set(per.values()))
    n = len(plan.cells)
    numbers = sorted({c.rep for c in plan.cells})
    # a gap-fill's cells are later repetitions (rep 3 of a run that has 1-2): say which
    adds = "" if numbers == list(range(1, len(numbers) + 1)) else (
        f" (adds rep{'s' if len(numbers) > 1 else ''} {_spans(numbers)})")
    if len(reps) == 1 and len(per) == len(tasks) * len(arms):
        return f"cells: {n} = {len(tasks)} tasks x {len(arms)} arms x {reps[0]} reps{adds}"
    return (f"cells: {n} over {len(tasks)} tasks x {len(arms)} arms, {reps[0]}-{reps[-1]} reps per task "
            f"and arm (set by the selection){adds}")


def lineage_lines(plan: Plan) -> list[str]:
    """The runs a gap-fill tops up and the runs its history was read from (issue 56: a gap-fill's
    receipt named neither, and said "no history" though the lineage ran its tasks)."""
    out: list[str] = []
    if plan.tops_up:
        out.append(f"tops up {len(plan.tops_up)} run{'s' * (len(plan.tops_up) > 1)} (the lineage `ray-bench gaps` "
                   f"read; `ray-bench report --runs` over them and this run reports the whole): {_paths(plan.tops_up)}")
    if plan.history_from:
        source = "the lineage it tops up" if set(plan.history_from) <= set(_resolved(plan.tops_up)) \
            else "--history and --runs"
        out.append(f"history read from {len(plan.history_from)} earlier run{'s' * (len(plan.history_from) > 1)} "
                   f"({source}): {_paths(plan.history_from)}")
    return out


def _resolved(paths: list[str]) -> list[str]:
    return [str(Path(p).resolve()) for p in paths]


def _paths(paths: list[str], most: int = 5) -> str:
    shown = ", ".join(code_span(p) for p in paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _spans(numbers: list[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``2-4, 7``."""
    spans: list[list[int]] = []
    for k in numbers:
        if spans and k == spans[-1][1] + 1:
            spans[-1][1] = k
        else:
            spans.append([k, k])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def task_lines(plan: Plan) -> list[str]:
    """The tasks of the plan, with their cells; collapsed past :data:`TASK_LIST_MAX`."""
    per_task = Counter(c.task for c in plan.cells)
    apart = {t.id for t in plan.tasks if t.config.verifier.separate}
    names = sorted(per_task)
    shown = names if len(names) <= TASK_LIST_MAX else names[:10] + names[-5:]
    out = [f"- `{name}` ({per_task[name]} cells{'; its verifier runs in a sandbox of its own' * (name in apart)})"
           for name in shown]
    if len(names) > TASK_LIST_MAX:
        out.insert(10, f"- ... {len(names) - 15} more (the plan file lists every task)")
    return out


def estimate_lines(plan: Plan) -> list[str]:
    """Estimated makespan and cost, from the simulator on the plan's history of task durations
    and costs (every limit ``simulate --plan`` models, dollar ones priced by the recorded costs),
    or "no history" when there is none to base them on."""
    known = [t for t in plan.tasks if t.expected_sec]
    if not known:
        return ["- no history: no earlier run of these tasks gave durations, so no estimate. "
                f"`ray-bench simulate --plan runs/{plan.run_id}/launch-plan.json --median-min M` gives "
                "one under an assumed median cell time"]
    from ray_bench.sim.from_plan import dollar_limits, estimate_run

    found = estimate_run(plan)
    cover = f"{len(known)} of {len(plan.tasks)} tasks"
    priced = [t for t in known if t.expected_usd is not None]
    lines = [f"- history: durations of {cover} from earlier runs"
             + (f", costs of {len(priced)}" if priced else "")]
    if found is None:
        return lines
    left_out = f" ({', '.join(sorted(plan.capacity.left_out))} left out)" if plan.capacity.left_out else ""
    lines.append(f"- estimated makespan: {found.makespan_h:.2f} h at capacity {plan.capacity.effective}{left_out} "
                 "(the driver on a virtual clock over these cells at their expected durations, "
                 "under every account limit)")
    dollars = dollar_limits(plan)
    if not priced:
        if dollars:
            lines.append(f"- the estimate leaves out {', '.join(dollars)}: no cost history to say when "
                         "they bind (`ray-bench simulate --plan ... --usd-per-hour X` models them)")
        lines.append("- estimated cost: no cost history (spend is recorded per attempt once the run starts)")
        return lines
    lines.append(f"- estimated cost: ${found.spend_usd:.2f} at ${found.usd_per_hour:.2f} per running cell-hour "
                 f"(the costs earlier runs recorded for {len(priced)} of {len(plan.tasks)} tasks)"
                 + (f"; {', '.join(dollars)} modelled at that price" if dollars else ""))
    if found.stopped is not None:
        lines.append(f"- the estimate stops after {found.valid_cells} of {found.cells} cells: "
                     f"{found.detail or found.stopped}")
    return lines


def workspace_lines(plan: Plan) -> list[str]:
    """Which arms keep the agent's final workspace for ``ray-bench regrade``, and what that costs:
    the tarball shares each attempt's artifact cap with its logs (never cut short: a workspace
    over what the logs leave is not kept, and its cell can only be rerun), so the most a run keeps
    is its cells times the cap."""
    per_arm = Counter(c.arm for c in plan.cells)
    cap = plan.artifact_cap_mb
    lines = ["## Kept workspaces (for `ray-bench regrade`)", "",
             f"| arm | keep_workspace | cells | what it costs against the artifact cap ({cap} MiB per attempt) |",
             "|---|---|---|---|"]
    for arm in plan.arms:
        cells = per_arm.get(arm.name, 0)
        cost = (f"the workdir's tarball shares the {cap} MiB with the attempt's logs; at most "
                f"{cells * cap:,} MiB over {cells} cells; one over what its logs leave is not kept (rerun)"
                if arm.keep_workspace else "none: a changed tests/ needs the agent run again")
        lines.append(f"| {table_cell(arm.name)} | {'yes' if arm.keep_workspace else 'no'} | {cells} | {cost} |")
    return lines


def power_lines(plan: Plan) -> list[str]:
    """The smallest mean paired delta the lineage can detect once the plan has run (the pairs
    earlier runs hold of these tasks with the plan's own), or that none the rewards allow can be,
    and the repetitions a few target deltas need (:mod:`ray_bench.plan.power`)."""
    from ray_bench.plan.power import ALPHA, ASSUMED, POWER, TARGETS, plan_power, reps_needed

    arms = {c.arm for c in plan.cells}
    if plan.unpaired or len(arms) < 2:
        return ["- one-arm plan: no paired delta to power (its pairs come from earlier runs)"]
    spread = plan.reward_spread
    if spread is not None:
        basis = (f"- basis: `plan --history`, {spread.pairs} paired rows of {spread.tasks} of these tasks in "
                 f"earlier runs of these arm configurations: SD of a paired delta within a task "
                 f"{spread.within_var ** 0.5:.3f}, between tasks {spread.between_var ** 0.5:.3f}")
    else:
        spread = ASSUMED
        basis = (f"- basis: assumed (no paired history; `plan --history runs/` measures it): pass/fail "
                 f"rewards at 50% in both arms, independent, so SD of a paired delta "
                 f"{ASSUMED.within_var ** 0.5:.3f} and no spread between tasks")
    # the lineage's pairs of each task once this plan has run: its own repetitions with the ones
    # earlier runs hold paired (a cell is its content: one the history holds is not counted twice)
    checksum = {t.id: t.checksum for t in plan.tasks}
    own: dict[str, set[int]] = {}
    for c in plan.cells:
        own.setdefault(c.task, set()).add(c.rep)
    held = {task: set(spread.paired_reps.get(checksum.get(task, ""), [])) for task in own}
    tasks = len(own)
    reps = min(len(own[t] | held[t]) for t in own)
    pairs = sum(len(own[t] | held[t]) for t in own)
    lines = [basis]
    if any(held[t] - own[t] for t in own):
        planned = min(len(v) for v in own.values())
        lines.append(f"- counted over the lineage: the {sum(len(v) for v in held.values())} pairs earlier runs "
                     f"hold of these tasks with this plan's {planned} reps per task and arm: {pairs} pairs, "
                     f"at least {reps} per task")
    power = plan_power(spread, tasks, reps)
    test = f"two-sided alpha {ALPHA:g}, power {POWER:g}, a paired t-test over the tasks' mean deltas"
    if power.mde != power.mde:  # NaN: one task
        return [*lines, f"- {tasks} task: no test across tasks, so no detectable delta (plan 2 tasks or more)"]
    if not power.detectable:
        lines.append(f"- smallest detectable mean paired delta: not detectable with {pairs} pairs ({tasks} tasks "
                     f"x {reps} reps per arm): it would take a mean paired delta above "
                     f"{power.reward_range:g}, more than rewards from {spread.reward_low:g} to "
                     f"{spread.reward_high:g} allow ({test}); add tasks or reps")
    else:
        lines.append(f"- smallest detectable mean paired delta: {power.mde:.3f} with {tasks} tasks x {reps} reps "
                     f"per arm ({test})")
    for target in TARGETS:
        need = reps_needed(spread, tasks, target)
        lines.append(f"- a delta of {target:.2f} needs {need} reps per task and arm" if need is not None else
                     f"- a delta of {target:.2f} is out of reach with {tasks} tasks at any number of reps "
                     "(the spread between tasks: add tasks)")
    lines.append("- `ray-bench gaps --target-mde D` plans the repetitions a delta D needs")
    return lines


def glossary_lines() -> list[str]:
    return [f"- **{term}**: {meaning}" for term, meaning in GLOSSARY]
