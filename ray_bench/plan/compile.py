"""``ray-bench plan``: files in, a canonical plan and its receipt out. Model-free: it reads
files and checks that credential routes exist by name; it starts nothing and calls nothing."""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ray_bench import __version__
from ray_bench.cells.home_logins import expired_logins
from ray_bench.config.loader import load_accounts, load_suite
from ray_bench.config.secrets import find_secrets, refuse_secret_text, route_values, shown_field
from ray_bench.config.selection import Selection, select_in_suite
from ray_bench.config.tasks import AGENT_LIMITS, collect_tasks, index_tasks, link_problem, task_checksum
from ray_bench.errors import (
    ConfigError,
    MultipleInputErrors,
    PairingGuardError,
    SelectionError,
    TaskDirError,
    UserInputError,
)
from ray_bench.ledger.rows import valid_rows_by_task_arm
from ray_bench.models.accounts import Account
from ray_bench.models.build import SNAPSHOT_PREFIX
from ray_bench.models.plan import Capacity, InputFile, Plan, PlanCell, PlanTask, RewardSpread, SkippedTask
from ray_bench.models.suite import Arm, BackendConfig, ResourceLimits, Suite
from ray_bench.models.task import TaskRef
from ray_bench.plan.agents import agent_network, check_agents, refuse_long_instructions
from ray_bench.plan.arm_identity import arm_config, arm_digest, run_arm_digests
from ray_bench.plan.backends import pool_config
from ray_bench.plan.egress import refuse_unreachable_providers
from ray_bench.plan.history import (
    costs_from_runs,
    durations_from_runs,
    expected_value,
    history_roots,
    paired_deltas,
    rewards_from_runs,
)
from ray_bench.plan.identity import canonical_bytes, cell_id, file_sha256
from ray_bench.plan.power import lineage_spread
from ray_bench.plan.readiness import Looks, readiness
from ray_bench.plan.roles import check_role_routes, verifier_route_vars
from ray_bench.sandboxes import Resources, backend_available, backend_names
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.sandboxes.daytona_lookup import check_snapshots
from ray_bench.sandboxes.daytona_pool import DaytonaPool
from ray_bench.sandboxes.gpus import DaemonGpus, attempt_gpus, daemon_gpus
from ray_bench.sandboxes.host import HostResources, admit, max_concurrent, render_admission
from ray_bench.tasks.mcp import task_mcp_servers
from ray_bench.tasks.network import needs_network
from ray_bench.tasks.support import notices, refusals

ArmFilter = Literal["all", "baseline-only", "full-only"]
UNPAIRED_ENV = "ALLOW_UNPAIRED_SINGLE_CONFIG"
#: Harbor leaves [agent] timeout_sec unset by default (no limit); ray-bench needs one to hold
#: an account for a bounded time, and uses Harbor's former default.
DEFAULT_AGENT_TIMEOUT_SEC = 600.0


@dataclass
class PlanRequest:
    suite: Path
    accounts: Path
    run_id: str
    selection: Path | None = None
    reps: int | None = None
    arms: ArmFilter = "all"
    parallel: int | None = None
    counterpart_runs: list[Path] = field(default_factory=list)
    #: ``plan --history``: run roots (or directories of them) read for durations, costs and paired
    #: rewards, with ``counterpart_runs``; None (not given): a gap-fill selection's lineage (its
    #: ``tops_up``). What they give is added to ``history``, ``costs`` and ``rewards``.
    history_runs: list[Path] | None = None
    history: Mapping[str, float] = field(default_factory=dict)
    #: Earlier runs' cost per cell (:func:`ray_bench.plan.history.costs_from_runs`, keyed as
    #: ``history``): the receipt's estimate runs the dollar limits on it.
    costs: Mapping[str, float] = field(default_factory=dict)
    #: Earlier runs' paired rewards (:func:`ray_bench.plan.history.rewards_from_runs`): the
    #: spread of a paired delta the receipt's power is computed from.
    rewards: Mapping[tuple[str, str, int], float] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    #: Keep only these (task, arm, rep) cells; None keeps every cell (``ray-bench rerun``).
    only_cells: frozenset[tuple[str, str, int]] | None = None
    #: The run root the plan is bound to (``execute`` refuses a copy anywhere else).
    run_root: Path | None = None
    #: ``plan --task ID`` (repeatable): these tasks only, without a selection file.
    task_ids: tuple[str, ...] = ()
    #: ``plan --limit N``: the first N tasks (by id) of what is selected.
    limit: int | None = None
    #: ``plan --force-build``: build Dockerfiles even where a prebuilt docker_image is named.
    force_build: bool = False
    #: ``plan --skip-unsupported``: leave out the tasks the backend cannot run (listed in the
    #: receipt with their reasons) instead of refusing the plan.
    skip_unsupported: bool = False
    #: ``plan --strict``: refuse the plan where execute would trip (:mod:`ray_bench.plan.readiness`)
    #: instead of warning in the receipt.
    strict: bool = False
    #: What is on this machine (images, CLIs, reachable hosts); None asks the machine itself.
    looks: Looks | None = None


def _reward_spread(req: PlanRequest, arms: list[Arm], digests: list[str], tasks: list[TaskRef]) -> RewardSpread | None:
    """The spread of a paired delta of these tasks in earlier runs of these arms' configurations."""
    by_role = dict(zip([a.name for a in arms], digests, strict=True))
    baseline = next((by_role[a.name] for a in arms if a.role == "baseline"), None)
    if baseline is None or not req.rewards:
        return None
    variants = [by_role[a.name] for a in arms if a.role != "baseline"]
    checksums = {t.checksum for t in tasks}
    # the range of the rows of these tasks and arms: the largest delta the power can report
    rewards = [r for (_, key, _), r in req.rewards.items()
               if key.partition("@")[0] in checksums and key.partition("@")[2] in digests]
    return lineage_spread(paired_deltas(req.rewards, checksums, baseline, variants), rewards)


def with_earlier_runs(req: PlanRequest, selection: Selection | None) -> tuple[PlanRequest, list[str]]:
    """``req`` with the history of its earlier runs read in, and those run roots: ``--history``
    (else the lineage a gap-fill selection tops up, issue 56: its plan said "no history" though
    the lineage ran those tasks) and ``--runs``."""
    lineage = list(selection.tops_up) if selection is not None else []
    if req.history_runs is None and lineage:
        gone = [r for r in lineage if not Path(r).is_dir()]
        if gone:
            raise SelectionError(f"the run {gone[0]} this gap-fill tops up (its tops_up) is gone",
                                 where=str(req.selection), fix="give --history with the runs to read instead, "
                                 "or write the selection again with `ray-bench gaps`")
    given = req.history_runs if req.history_runs is not None else [Path(r) for r in lineage]
    roots = history_roots([*given, *req.counterpart_runs])
    if not roots:
        return req, []
    return replace(req, history={**durations_from_runs(roots), **req.history},
                   costs={**costs_from_runs(roots), **req.costs},
                   rewards={**rewards_from_runs(roots), **req.rewards}), [str(r.resolve()) for r in roots]


def resolve_agent_dirs(arms: list[Arm], suite_path: Path, errors: list[UserInputError]) -> tuple[
        list[Arm], dict[str, str]]:
    resolved: list[Arm] = []
    checksums: dict[str, str] = {}
    for arm in arms:
        if arm.agent_dir is None:
            resolved.append(arm)
            continue
        problem = link_problem(suite_path.parent / arm.agent_dir)
        if problem is not None:
            errors.append(ConfigError(f"arms.{arm.name}.agent_dir: {arm.agent_dir} {problem}", where=str(suite_path),
                                      fix="point agent_dir at the agent's files"))
            resolved.append(arm)
            continue
        path = (suite_path.parent / arm.agent_dir).resolve()
        if not path.is_dir():
            errors.append(ConfigError(f"arms.{arm.name}.agent_dir: {path} is not a directory",
                                      where=str(suite_path), fix="point agent_dir at the agent's files"))
            resolved.append(arm)
            continue
        checksums[arm.name] = task_checksum(path, limits=AGENT_LIMITS)
        resolved.append(arm.model_copy(update={"agent_dir": str(path)}))
    return resolved, checksums


def _named_tasks(req: PlanRequest, suite_tasks: list[str] | None, only: list[str] | None) -> list[str] | None:
    """``--task`` narrows the suite (or the selection) to the tasks named, in their order."""
    if not req.task_ids:
        return only
    for name in req.task_ids:  # a task name is an id: known key shapes only
        refuse_secret_text(name, "--task", entropy=False)
    allowed = only if only is not None else suite_tasks
    outside = [t for t in req.task_ids if allowed is not None and t not in allowed]
    if outside:
        raise SelectionError(f"--task names tasks outside the {'selection' if req.selection else 'suite'}: "
                             f"{', '.join(outside[:5])}", where=str(req.selection or req.suite),
                             fix="name tasks the suite (and selection) contains")
    return list(dict.fromkeys(req.task_ids))


def compile_plan(req: PlanRequest) -> Plan:
    suite = load_suite(req.suite)
    accounts_file = load_accounts(req.accounts)
    roots = suite_roots(suite, req.suite)
    index = index_tasks(roots)
    selection = select_in_suite(req.selection, suite.name, suite.tasks, roots, index) if req.selection else None
    req, history_from = with_earlier_runs(req, selection)
    only = suite.tasks
    if selection is not None:
        only = selection.task_ids
        _check_selection_arms(selection, suite)
    only = _named_tasks(req, suite.tasks, only)
    # Every problem of every file in one pass: the tasks that do not load, what the backend
    # cannot run, the suite's, the accounts' and the agents' problems, and tasks no node fits.
    errors: list[UserInputError] = []
    warnings: list[str] = list(selection.warnings) if selection is not None else []
    tasks = collect_tasks(roots, only, index, errors,
                          route_values([a.route.env for a in accounts_file.accounts], req.environ))
    if req.limit is not None:
        tasks = sorted(tasks, key=lambda t: t.id)[: req.limit]
    skipped: list[SkippedTask] = []
    # Every arm opening its agent's phase leaves the task's own policy for that phase unused.
    opened = all(agent_network(a) for a in _select_arms(suite, req.arms))
    some_opened = any(agent_network(a) for a in _select_arms(suite, req.arms))
    tasks = _check_tasks(tasks, suite.backend, errors, warnings, skipped if req.skip_unsupported else None,
                         stand_in_image=_stand_in_image(suite, _select_arms(suite, req.arms)), agent_online=opened,
                         some_agent_online=some_opened, daemon=_daemon_gpus(suite, tasks))
    _check_backends(suite, req.suite, errors)
    _check_routes(accounts_file.accounts, req.accounts, req.environ, errors, warnings)
    arms, agent_sums = resolve_agent_dirs(_select_arms(suite, req.arms), req.suite, errors)
    check_agents(arms, {suite.backend}, req.suite, errors)
    check_role_routes(arms, accounts_file.accounts, req.environ, req.suite, errors)
    force_build = req.force_build or suite.force_build
    digests = [arm_digest(a, agent_sums.get(a.name)) for a in arms]
    plan_tasks = [plan_task(t, suite, req.history, digests, force_build=force_build, costs=req.costs) for t in tasks]
    for task, problem in unfit_tasks(suite, arms, plan_tasks):
        if req.skip_unsupported:
            skipped.append(SkippedTask(id=task.id, path=task.path, reason=problem))
        else:
            errors.append(ConfigError(f"task {task.id} {problem}", where=task.path,
                                      fix="lower the task's or arm's resources, or leave the task out "
                                          "(plan --skip-unsupported)"))
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    gone = {s.id for s in skipped}
    tasks = [t for t in tasks if t.id not in gone]
    plan_tasks = [t for t in plan_tasks if t.id not in gone]
    if not tasks:
        raise ConfigError(f"--skip-unsupported leaves no task: all {len(skipped)} are unsupported on "
                        f"{suite.backend} (first: {skipped[0].id}: {skipped[0].reason})", where=str(req.suite),
                        fix="pick a backend that can run them")

    unpaired = req.arms != "all"
    if unpaired:
        warnings.extend(_pairing_guard(suite, arms, tasks, req))
    elif selection is not None and req.only_cells is None:
        # entries whose `arms:` leave out an arm of the plan unpair those tasks: the same guard
        # as --baseline-only/--full-only, task by task
        lopsided = _unpaired_by_selection(selection, arms, tasks)
        for chosen, subset in lopsided.items():
            warnings.extend(_pairing_guard(suite, [a for a in arms if a.name in chosen], subset, req))
        unpaired = bool(lopsided)

    reps = req.reps or suite.reps
    refuse_oversized(tasks, arms, reps, selection, req)
    refuse_route_templates(tasks, accounts_file.accounts, arms)
    refuse_long_instructions(tasks, arms, {e.task_id: e.arms for e in selection.entries} if selection else None)
    warnings.extend(refuse_missing_snapshots(suite, arms, plan_tasks, req.environ, req.suite))
    refuse_unreachable_providers(suite, arms, accounts_file.accounts, req.environ, str(req.suite))
    cells = _cells(tasks, arms, agent_sums, reps, suite.backend, selection)
    if req.only_cells is not None:
        cells = [c for c in cells if (c.task, c.arm, c.rep) in req.only_cells]
    if not cells:
        raise SelectionError("the selection leaves no cells to run", where=str(req.selection or req.suite),
                             fix="check reps and arms in the selection")
    cells = cell_order(cells, plan_tasks, arms)
    preflight = pick_preflight(cells, suite.preflight_cells, len(arms))
    left_out = _expired(accounts_file.accounts, warnings)
    capacity = _capacity(suite, accounts_file.accounts, req.parallel, arms, plan_tasks, left_out)
    if capacity.effective < 1:
        # execute would wait for a slot forever
        raise ConfigError(f"no cell could ever start: {capacity.lines[-1]}",
                          where="--parallel" if req.parallel is not None and req.parallel < 1 else str(req.suite),
                          fix="raise the limit that is 0 (accounts' max_concurrent, max_sandboxes, --parallel)")
    warnings.extend(derived_warnings(capacity, len(arms), accounts_file.accounts, suite.spend_limit_usd))
    warnings.extend(reserve_warnings(suite.host_reserve_mb, suite.host_reserve_disk_mb, HostResources.read(),
                                     *_disk_mb(tempfile.gettempdir())))
    findings = readiness(suite, arms, plan_tasks, accounts_file.accounts, req.looks)
    if req.strict and findings:
        refused: list[UserInputError] = [ConfigError(f.what, where=f.where, fix=f.fix) for f in findings]
        raise refused[0] if len(refused) == 1 else MultipleInputErrors(refused)
    warnings.extend(f.line() for f in findings)

    inputs = [_input("suite", suite.name, req.suite), _input("accounts", "accounts", req.accounts)]
    inputs += [InputFile(kind="task", name=t.id, path=t.path, sha256=t.checksum) for t in tasks]
    inputs += [InputFile(kind="agent", name=name, path=str(next(a.agent_dir for a in arms if a.name == name)),
                         sha256=checksum) for name, checksum in sorted(agent_sums.items())]
    if selection is not None and req.selection is not None:
        inputs.append(_input("selection", "selection", req.selection))
    backends = dict(suite.backends)
    backends.setdefault(suite.backend, BackendConfig())
    plan = Plan(
        run_id=req.run_id,
        run_root=str(req.run_root.resolve()) if req.run_root is not None else "",
        suite=suite.name,
        created_with=f"ray-bench {__version__}",
        inputs=inputs,
        arms=arms,
        accounts=accounts_file.accounts,
        backends=backends,
        tasks=plan_tasks,
        cells=cells,
        preflight=preflight,
        max_attempts=suite.max_attempts,
        artifact_cap_mb=suite.artifact_cap_mb,
        spend_limit_usd=suite.spend_limit_usd,
        host_reserve_mb=suite.host_reserve_mb,
        host_reserve_disk_mb=suite.host_reserve_disk_mb,
        force_build=force_build,
        skipped=skipped,
        capacity=capacity,
        warnings=warnings,
        unpaired=unpaired,
        reward_spread=_reward_spread(req, arms, digests, tasks) if not unpaired else None,
        tops_up=list(selection.tops_up) if selection is not None else [],
        history_from=history_from,
    )
    refuse_route_values(plan, req)
    return plan


#: Repetitions one plan may ask for (the suite's own bound), and cells one plan may hold: a
#: 100,000-cell plan is 8.6 MiB of JSON, and a plan file may be 64 MiB.
MAX_REPS = 1000
MAX_PLAN_CELLS = 500_000


def refuse_oversized(tasks: list[TaskRef], arms: list[Arm], reps: int, selection: Selection | None,
                     req: PlanRequest) -> None:
    """The cell count, computed before a cell is made: ``--reps 1000000000`` is refused in
    microseconds instead of growing until the kernel kills it."""
    if reps > MAX_REPS:
        raise ConfigError(f"--reps {reps} is over {MAX_REPS:,}", where="--reps",
                          fix=f"plan at most {MAX_REPS:,} repetitions; split larger studies into runs")
    wanted = {e.task_id: e for e in selection.entries} if selection else {}
    count = 0
    listed = False  # some entry names its own reps
    for task in tasks:
        entry = wanted.get(task.id)
        listed = listed or bool(entry is not None and entry.reps)
        count += (len(entry.reps) if entry is not None and entry.reps else reps) * len(arms)
    if count > MAX_PLAN_CELLS:
        raise ConfigError(f"the plan would hold {count:,} cells ({len(tasks):,} tasks, {len(arms)} arms, "
                          f"{'the reps the selection lists' if listed else f'{reps} reps'}), over the "
                          f"{MAX_PLAN_CELLS:,} one plan may hold",
                          where="--reps" if req.reps else str(req.selection or req.suite),
                          fix="plan fewer tasks or repetitions per run (--limit, a selection)")


_TEMPLATE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def refuse_route_templates(tasks: list[TaskRef], accounts: list[Account], arms: list[Arm]) -> None:
    """A task env value ``${VAR}`` is filled from the host's environment: naming a variable
    that holds an account's key would hand that key to the task's verifier or solution. A
    ``[verifier].env`` template is the exception when every arm routes that variable to verifiers
    through its judge role (:func:`ray_bench.plan.roles.judge_account`): the verifier then gets it
    from that account's route, by name (Senior SWE-Bench's LLM judges)."""
    owners: dict[str, str] = {}
    for account in accounts:
        for agent_var, source in account.route.env.items():
            owners.setdefault(source, account.name)
            owners.setdefault(agent_var, account.name)
    by_name = {a.name: a for a in accounts}
    routed = [verifier_route_vars(arm, by_name) for arm in arms]
    errors: list[UserInputError] = []
    for task in tasks:
        for loc, text in _env_values(task.config.model_dump(mode="json")):
            for name in _TEMPLATE.findall(text):
                if name not in owners:
                    continue
                if loc[:2] == ("verifier", "env") and routed and all(
                        r and all(name in names for names in r.values()) for r in routed):
                    continue
                errors.append(TaskDirError(
                    f"task {task.id}: {'.'.join(map(str, loc))} = ${{{name}}} names the credential "
                    f"variable of account {owners[name]}: the task would see that account's key",
                    where=task.path,
                    fix="remove it; only an agent gets a key, through its account's route"
                        + (", and a verifier through its arm's judge role (roles: [{role: judge, route: "
                           "ACCOUNT, ...}] with an account whose route names it)"
                           if loc[:2] == ("verifier", "env") else "")))
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)


def _env_values(data: object, loc: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
    """Every string under an ``env`` table of a task's config, with its location."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "env" and isinstance(value, dict):
                out.extend(((*loc, key, k), v) for k, v in value.items() if isinstance(v, str))
            else:
                out.extend(_env_values(value, (*loc, key)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.extend(_env_values(value, (*loc, i)))
    return out


def refuse_missing_snapshots(suite: Suite, arms: list[Arm], tasks: list[PlanTask],
                             environ: Mapping[str, str], suite_path: Path) -> list[str]:
    """A Daytona snapshot a task, arm or the backend names (``snapshot:NAME``, the ``snapshot``
    option) that the service says does not exist: refused here, one line, rather than fail
    every cell at its create. Offline (no key where plan runs, the API unreachable) nothing is
    refused: a receipt warning says so, and the backend refuses at the first create."""
    if not capabilities(suite.backend).snapshots:
        return []
    config = suite.backends.get(suite.backend, BackendConfig())
    named: dict[str, str] = {}  # snapshot -> who names it
    for task in tasks:
        for arm in arms:
            image = arm.image or task.image or config.image or config.options.get("image")
            if isinstance(image, str) and image.startswith(SNAPSHOT_PREFIX):
                named.setdefault(image[len(SNAPSHOT_PREFIX):], f"task {task.id} (arm {arm.name})")
            elif image is None and not task.builds() and config.options.get("snapshot"):
                named.setdefault(str(config.options["snapshot"]), "backends.daytona.options.snapshot")
    if not named:
        return []
    found = check_snapshots(named, config.options, environ)
    if found.missing:
        name = found.missing[0]
        raise ConfigError(f"{named[name]} names Daytona snapshot {name!r}, which does not exist on the service"
                          + (f" (nor {len(found.missing) - 1} more)" if len(found.missing) > 1 else ""),
                          where=str(suite_path),
                          fix="create the snapshot (daytona snapshot create) or name one that exists")
    if found.unchecked:
        return [f"Daytona snapshots {', '.join(sorted(named))} not checked ({found.unchecked}): "
                "a missing one fails its cells at their first create"]
    return []


def unfit_tasks(suite: Suite, arms: list[Arm], tasks: list[PlanTask]) -> list[tuple[PlanTask, str]]:
    """The tasks whose sandbox no node of the backend can hold (they would wait forever), each
    with what it asks for against what the host (docker) or the pool (daytona) has."""
    config = suite.backends.get(suite.backend, BackendConfig())
    found: list[tuple[PlanTask, str]] = []
    if capabilities(suite.backend).host_admission and config.max_sandboxes is None:
        host = HostResources.read()
        reserve = suite.host_reserve_mb
        def fits(res: Resources) -> bool:
            return max_concurrent(res, host, reserve, 0.0) >= 1
        has = f"the host has {host.cpus:g} CPUs / {host.memory_mb} MiB, {reserve} MiB kept in reserve"
    elif pool_config(suite.backends, suite.backend) is not None:
        try:
            pool = DaytonaPool.model_validate(config.options["pool"])
        except ValidationError:
            return []  # _capacity says what is wrong with the pool
        def fits(res: Resources) -> bool:
            return pool.slots(res.cpus, res.memory_mb) >= 1
        has = f"the Daytona pool has {pool.vcpu} vCPU / {pool.memory_gib} GiB"
    else:
        return []
    for task in tasks:
        for arm in arms:
            res = _sandbox_of(arm, task, config.resources)
            if not fits(res):
                found.append((task, f"(arm {arm.name}) asks for {res.cpus or 'unlimited'} CPUs / "
                                    f"{res.memory_mb or 'unlimited'} MiB; {has}: not one sandbox of this size fits"))
                break
    return found


def refuse_route_values(plan: Plan, req: PlanRequest) -> None:
    """No field of the plan may hold the value of a route variable (a key pasted into an arm's
    env, a probe command or a task's verifier env) or anything else credential-like that the
    file scans could not see (task.toml values)."""
    values = route_values([a.route.env for a in plan.accounts], req.environ)
    sources = {"accounts": req.accounts, "tasks": "task.toml"}
    # tasks[].verifier_env is a copy of tasks[].config.verifier.env: looked at once
    found = find_secrets(plan.model_dump(mode="json", exclude={"inputs": True, "cells": True, "preflight": True,
                                                               "tasks": {"__all__": {"verifier_env"}}}), values)
    if not found:
        return
    errors: list[UserInputError] = []
    for loc, kind, shown in found[:20]:
        field = shown_field(loc)
        where = str(sources.get(str(loc[0]), req.suite))
        if loc[0] == "tasks" and len(loc) > 1 and isinstance(loc[1], int):
            where = plan.tasks[loc[1]].path
        errors.append(ConfigError(f"{field} holds what looks like {kind} ({shown})", where=where,
                                  fix="never write a secret into a config file: name its env var in an "
                                      "account's route"))
    raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)


def _check_selection_arms(selection: Selection, suite: Suite) -> None:
    known = [a.name for a in suite.arms]
    for entry in selection.entries:
        unknown = [a for a in entry.arms or () if a not in known]
        if unknown:
            raise SelectionError(f"task {entry.task_id}: arm {unknown[0][:40]!r} is not in suite {suite.name} "
                                 f"(arms: {', '.join(known)})", where=selection.path,
                                 fix="name arms of this suite")


def _unpaired_by_selection(selection: Selection, arms: list[Arm], tasks: list[TaskRef]) -> dict[
        frozenset[str], list[TaskRef]]:
    """Arms kept -> the tasks whose selection entry keeps only those arms of the plan."""
    names = {a.name for a in arms}
    by_id = {t.id: t for t in tasks}
    out: dict[frozenset[str], list[TaskRef]] = {}
    for entry in selection.entries:
        if entry.arms is None or entry.task_id not in by_id:
            continue
        kept = frozenset(entry.arms) & names
        if kept != names:
            out.setdefault(kept, []).append(by_id[entry.task_id])
    return out


def _input(kind: Literal["suite", "accounts", "selection"], name: str, path: Path) -> InputFile:
    return InputFile(kind=kind, name=name, path=str(path.resolve()), sha256=file_sha256(path.read_bytes()))


def suite_roots(suite: Suite, suite_path: Path) -> list[Path]:
    """The suite's task roots, absolute; a root that is a symlink loop or a dangling link is
    refused naming it (a root that is not there is index_tasks' "not found")."""
    key = "tasks_dir" if suite.tasks_dir is not None else "task_roots"
    errors: list[UserInputError] = []
    for root in suite.roots:
        problem = link_problem(suite_path.parent / root)
        if problem is not None:
            errors.append(ConfigError(f"{key}: {root} {problem}", where=str(suite_path),
                                      fix="point it at the directory of task directories"))
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    return [(suite_path.parent / root).resolve() for root in suite.roots]


def _stand_in_image(suite: Suite, arms: list[Arm]) -> bool:
    """An image runs where a task names none (:func:`ray_bench.plan.agents.sandbox_image`): the
    backend's, or every arm's own."""
    config = suite.backends.get(suite.backend)
    return bool(config is not None and config.image) or (bool(arms) and all(a.image for a in arms))


def _daemon_gpus(suite: Suite, tasks: list[TaskRef]) -> DaemonGpus | None:
    """The backend's daemon's GPU runtimes, asked (one ``docker info``) only when a task asks for
    GPUs on a backend whose GPUs are its daemon's."""
    if not capabilities(suite.backend).gpus_by_daemon or not any(attempt_gpus(t.config) for t in tasks):
        return None
    config = suite.backends.get(suite.backend)
    url = config.options.get("base_url") if config is not None else None
    return daemon_gpus(str(url) if url else None)


def _check_tasks(tasks: list[TaskRef], backend: str, errors: list[UserInputError], warnings: list[str],
                 skipped: list[SkippedTask] | None, *, stand_in_image: bool = False,
                 agent_online: bool = False, some_agent_online: bool = False,
                 daemon: DaemonGpus | None = None) -> list[TaskRef]:
    """The tasks the backend can run. What it cannot give is refused, one line per reason, or,
    given ``skipped`` (``--skip-unsupported``), the task is left out and listed there. Unknown
    keys and what the backend runs without enforcing are warned."""
    kept: list[TaskRef] = []
    for task in tasks:
        reasons = refusals(task, backend, stand_in_image=stand_in_image, agent_online=agent_online,
                           some_agent_online=some_agent_online, daemon=daemon)
        if reasons and skipped is not None:
            skipped.append(SkippedTask(id=task.id, path=task.path, reason="; ".join(reasons)))
            continue
        for reason in reasons:
            errors.append(TaskDirError(f"task {task.id}: {reason}", where=task.path,
                                       fix="run it on a backend that can, leave it out of the selection, "
                                           "or plan --skip-unsupported"))
        warnings.extend(f"task {task.id}: {line}" for line in (*task.warnings, *notices(task, backend)))
        kept.append(task)
    return kept


def _check_backends(suite: Suite, where: Path, errors: list[UserInputError]) -> None:
    for name in sorted({suite.backend, *suite.backends}):
        if not backend_available(name):  # imports only the backends the suite names
            known = backend_names()
            errors.append(ConfigError(f"backend {name!r} is not available (known: {', '.join(known)})",
                                      where=str(where), fix="install its extra or pick another backend"))


def _check_routes(accounts: list[Account], where: Path, environ: Mapping[str, str],
                  errors: list[UserInputError], warnings: list[str]) -> None:
    for account in accounts:
        for source in account.route.env.values():
            if source not in environ:
                errors.append(ConfigError(f"account {account.name}: env var {source} is not set",
                                          where=str(where), fix=f"export {source} before planning"))
            elif not environ[source]:
                errors.append(ConfigError(f"account {account.name}: env var {source} is empty",
                                          where=str(where), fix=f"set {source}"))
        if account.route.home is not None:
            home = Path(account.route.home).expanduser()
            if not home.is_dir():
                errors.append(ConfigError(f"account {account.name}: home {home} does not exist",
                                          where=str(where), fix="log in into that HOME first"))
            elif not any(home.iterdir()):
                warnings.append(f"account {account.name}: home {home} is empty")


def _select_arms(suite: Suite, which: ArmFilter) -> list[Arm]:
    if which == "baseline-only":
        return [suite.baseline]
    if which == "full-only":
        return [a for a in suite.arms if a.role == "variant"]
    return list(suite.arms)


def _pairing_guard(suite: Suite, arms: list[Arm], tasks: list[TaskRef], req: PlanRequest) -> list[str]:
    """A one-arm plan needs valid rows of the other arm(s) for every selected task: rows of the
    other arm's *configuration* (ray_bench.plan.arm_identity), not of an arm of that name."""
    if req.environ.get(UNPAIRED_ENV, "").lower() == "true":
        return [f"UNPAIRED: {UNPAIRED_ENV}=true bypassed the pairing guard; this plan runs "
                f"only {', '.join(a.name for a in arms)}"]
    chosen = {a.name for a in arms}
    errors: list[UserInputError] = []
    others, agent_sums = resolve_agent_dirs([a for a in suite.arms if a.name not in chosen], req.suite, errors)
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    wanted = {a.name: arm_digest(a, agent_sums.get(a.name)) for a in others}
    have: dict[tuple[str, str, str], int] = {}
    renamed: set[str] = set()  # an earlier arm of this name ran another configuration
    for root in req.counterpart_runs:
        for (task, checksum, name, digest), count in valid_rows_by_task_arm(root, run_arm_digests).items():
            have[(task, checksum, digest)] = have.get((task, checksum, digest), 0) + count
            if name in wanted and digest != wanted[name]:
                renamed.add(name)
    missing = [t.id for t in tasks for other in others
               if have.get((t.id, t.checksum, wanted[other.name]), 0) == 0]
    if missing:
        shown = ", ".join(sorted(set(missing))[:5])
        changed = (f" (the {'/'.join(sorted(renamed))} rows there ran another configuration of that arm: "
                   "agent, model, env, ...)") if renamed else ""
        raise PairingGuardError(
            f"one-arm plan refused: no valid {'/'.join(a.name for a in others)} rows for {shown}"
            + (f" and {len(set(missing)) - 5} more" if len(set(missing)) > 5 else "") + changed,
            where="--runs" if req.counterpart_runs else "plan",
            fix=f"name run roots with --runs, plan both arms, or set {UNPAIRED_ENV}=true",
        )
    return []


def builds_dockerfile(has_dockerfile: bool, docker_image: str | None, *, force_build: bool) -> bool:
    """Harbor's choice (``should_use_prebuilt_docker_image``, harbor 0.26): a named prebuilt
    ``docker_image`` runs unless a build is forced; the Dockerfile is the fallback."""
    return has_dockerfile and (force_build or not docker_image)


def plan_task(task: TaskRef, suite: Suite, history: Mapping[str, float], arm_digests: Sequence[str] = (), *,
              force_build: bool = False, costs: Mapping[str, float] | None = None) -> PlanTask:
    cfg = task.config
    env = cfg.environment
    steps = cfg.steps or []
    # A multi-step task holds its account for every step's agent and verifier.
    agent_sec = sum(s.agent.timeout_sec or cfg.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC for s in steps) \
        if steps else (cfg.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC)
    verifier_sec = sum(s.verifier.timeout_sec for s in steps) if steps else cfg.verifier.timeout_sec
    pinned = task.compose.pinned_network if task.compose is not None else None
    return PlanTask(
        id=task.id,
        path=task.path,
        checksum=task.checksum,
        agent_timeout_sec=agent_sec,
        verifier_timeout_sec=verifier_sec,
        image=env.docker_image,
        has_dockerfile=task.has_dockerfile,
        build=builds_dockerfile(task.has_dockerfile, env.docker_image, force_build=force_build),
        has_solution=task.has_solution,
        network=needs_network(cfg) if pinned is None else pinned,
        workdir=env.workdir,
        resources=ResourceLimits(cpus=env.cpus, memory_mb=env.memory_mb),
        verifier_env=cfg.verifier.env,
        expected_sec=expected_value(history, task.id, task.checksum, arm_digests),
        expected_usd=expected_value(costs or {}, task.id, task.checksum, arm_digests),
        config=cfg,
        warnings=list(task.warnings),
        mcp_servers=task_mcp_servers(env.mcp_servers),
        compose=task.compose,
    )


def _cells(tasks: list[TaskRef], arms: list[Arm], agent_sums: dict[str, str], reps: int, backend: str,
           selection: Selection | None) -> list[PlanCell]:
    wanted = {e.task_id: e for e in selection.entries} if selection else {}
    configs = {arm.name: canonical_bytes(arm_config(arm, agent_sums.get(arm.name))) for arm in arms}
    cells: list[PlanCell] = []
    for task in tasks:
        entry = wanted.get(task.id)
        task_reps = entry.reps if entry is not None and entry.reps else range(1, reps + 1)
        for rep in task_reps:
            for arm in arms:
                if entry is not None and entry.arms and arm.name not in entry.arms:
                    continue
                cells.append(PlanCell(id=cell_id(task.id, task.checksum, configs[arm.name], rep),
                                      task=task.id, arm=arm.name, rep=rep, backend=backend))
    return cells


def cell_order(cells: list[PlanCell], tasks: list[PlanTask], arms: list[Arm]) -> list[PlanCell]:
    """Longest expected pairs first (LPT) so that a four-hour straggler does not start last;
    the arms of a pair stay adjacent so they launch close together."""
    order = {t.id: t.expected_sec or 0.0 for t in tasks}
    names = [a.name for a in arms]
    return sorted(cells, key=lambda c: (-order[c.task], c.rep, c.task, names.index(c.arm)))


def pick_preflight(cells: list[PlanCell], pairs: int, n_arms: int) -> list[str]:
    """The first ``pairs`` pairs of each backend: at least one cell per arm and backend."""
    chosen: list[str] = []
    per_backend: dict[str, set[tuple[str, int]]] = {}
    for cell in cells:
        seen = per_backend.setdefault(cell.backend, set())
        key = (cell.task, cell.rep)
        if key in seen or len(seen) < pairs:
            seen.add(key)
            chosen.append(cell.id)
    return chosen


def derived_warnings(capacity: Capacity, n_arms: int, accounts: list[Account],
                     spend_limit_usd: float | None) -> list[str]:
    """The warnings that follow from the plan's own content (verification asks for them too)."""
    out: list[str] = []
    if capacity.effective < n_arms:
        out.append(f"capacity {capacity.effective} is below the {n_arms} arms of a pair: pairs cannot start together")
    unbudgeted = [a.name for a in accounts if a.limits.spend_usd is None]
    if unbudgeted and spend_limit_usd is None:
        out.append(f"{_accounts_named(unbudgeted)} no spend budget and the suite no spend limit")
    return out


def _accounts_named(names: list[str]) -> str:
    """``account a has`` / ``accounts a, b and c have``: every name, in file order."""
    if len(names) == 1:
        return f"account {names[0]} has"
    return f"accounts {', '.join(names[:-1])} and {names[-1]} have"


def _disk_mb(path: str) -> tuple[int, int, str]:
    usage = shutil.disk_usage(path)
    return usage.total >> 20, usage.free >> 20, path


def reserve_warnings(memory_reserve_mb: int, disk_reserve_mb: int, host: HostResources,
                     disk_total_mb: int, disk_free_mb: int, disk_path: str) -> list[str]:
    """The host reserves against this host (the one planning; a cluster's nodes may differ,
    and override them: RAY_BENCH_HOST_RESERVE_MB): a reserve above what the host has halts the
    run at its supervisor's first reading, before any cell can finish."""
    out: list[str] = []
    if memory_reserve_mb >= host.memory_mb:
        out.append(f"host_reserve_mb {memory_reserve_mb} MiB is not below this host's memory "
                   f"({host.memory_mb} MiB): a run here halts at its first reading; lower it")
    elif memory_reserve_mb > host.available_mb:
        out.append(f"host_reserve_mb {memory_reserve_mb} MiB is above the memory available now "
                   f"({host.available_mb} MiB): a run here halts at once unless memory frees up")
    if disk_reserve_mb and disk_reserve_mb >= disk_total_mb:
        out.append(f"host_reserve_disk_mb {disk_reserve_mb} MiB is not below the disk at {disk_path} "
                   f"({disk_total_mb} MiB): a run here halts at its first reading; lower it")
    elif disk_reserve_mb > disk_free_mb:
        out.append(f"host_reserve_disk_mb {disk_reserve_mb} MiB is above the free disk at {disk_path} "
                   f"({disk_free_mb} MiB): a run here halts at once unless disk frees up")
    return out


def _sandbox_of(arm: Arm, task: PlanTask, backend: ResourceLimits) -> Resources:
    """The limits one cell asks for: the arm's, else the task's, else the backend's; with a
    separate verifier whose environment sets its own, the larger of each (its container starts
    after the agent's is deleted, so the two never hold the host at once: cells/verifier_apart.py)."""
    cpus = arm.resources.cpus or task.resources.cpus or backend.cpus
    memory_mb = arm.resources.memory_mb or task.resources.memory_mb or backend.memory_mb
    own = task.config.verifier.environment if task.config.verifier.separate else None
    if own is not None:
        cpus = max(cpus or 0, own.cpus or 0) or None
        memory_mb = max(memory_mb or 0, own.memory_mb or 0) or None
    return Resources(cpus=cpus, memory_mb=memory_mb)


def _largest_sandbox(suite: Suite, arms: list[Arm], tasks: list[PlanTask]) -> Resources:
    """The biggest limits any cell of the plan asks for (arm, then task, then backend)."""
    backend = suite.backends.get(suite.backend, BackendConfig()).resources
    cpus: list[float] = []
    mems: list[int] = []
    for arm in arms:
        for task in tasks:
            each = _sandbox_of(arm, task, backend)
            if each.cpus:
                cpus.append(each.cpus)
            if each.memory_mb:
                mems.append(each.memory_mb)
    disks = [t.config.environment.storage_mb for t in tasks if t.config.environment.storage_mb]
    return Resources(cpus=max(cpus) if cpus else None, memory_mb=max(mems) if mems else None,
                     disk_mb=max(disks) if disks else None)


def _daytona_pool(config: BackendConfig) -> DaytonaPool:
    try:
        return DaytonaPool.model_validate(config.options["pool"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"backends.daytona.options.pool.{where}: {first['msg']}",
                          fix="give vcpu, memory_gib, disk_gib and creates_per_minute") from exc


def _daytona_sizes(pool: DaytonaPool, suite: Suite, arms: list[Arm], tasks: list[PlanTask]) -> None:
    """Refuse a task whose sandbox is bigger than Daytona lets one sandbox be (the pool's
    ``max_sandbox_*``): the create would be refused for every cell of it."""
    for task in tasks:
        each = _largest_sandbox(suite, arms, [task])
        if (too_big := pool.too_big(each.cpus, each.memory_mb, each.disk_mb)) is not None:
            raise ConfigError(f"task {task.id}: {too_big}",
                              fix="lower the task's resources in its task.toml or raise "
                                  "backends.daytona.options.pool.max_sandbox_* to the organisation's limit")


def _daytona_slots(pool: DaytonaPool, suite: Suite, arms: list[Arm], tasks: list[PlanTask],
                   lines: list[str]) -> int:
    """The organisation's pool (vCPU, memory, disk) divided by the largest sandbox of the plan."""
    _daytona_sizes(pool, suite, arms, tasks)
    each = _largest_sandbox(suite, arms, tasks)
    slots = pool.slots(each.cpus, each.memory_mb, each.disk_mb)
    if slots < 1:
        raise ConfigError("backends.daytona.options.pool: not one sandbox of the plan fits the pool",
                          fix="raise the pool to the organisation's quota or lower the sandboxes' resources")
    disk = f"{math.ceil(each.disk_mb / 1024)}" if each.disk_mb else f"{pool.default_disk_gib}"
    cpu, memory, disk_gib = pool.asked(each.cpus, each.memory_mb, each.disk_mb)
    binding = min((pool.vcpu // cpu, "vCPU"), (pool.memory_gib // memory, "memory"),
                  (pool.disk_gib // disk_gib, "disk"))
    lines.append(f"backend daytona: organisation pool {pool.vcpu} vCPU / {pool.memory_gib} GiB / "
                 f"{pool.disk_gib} GiB disk fits {slots} sandboxes of {each.cpus or pool.default_vcpu} vCPU / "
                 f"{each.memory_mb or str(pool.default_memory_gib * 1024)} MiB / {disk} GiB disk "
                 f"(its {binding[1]} binds)")
    return slots


def _expired(accounts: list[Account], warnings: list[str]) -> dict[str, str]:
    """Account -> why, for the accounts whose HOME login has already expired (no refresh token):
    the driver starts no cell on them, so capacity and the estimate leave them out (issue 56)."""
    homes = {a.name: a.route.home for a in accounts if a.route.home}
    out: dict[str, str] = {}
    for name, expires in expired_logins(homes, time.time()).items():
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires))
        out[name] = f"its HOME login expired at {when}"
        warnings.append(f"account {name}: {out[name]} and has no refresh token: left out of capacity and the "
                        f"estimate; log in again in {homes[name]} and plan again")
    return out


def _capacity(suite: Suite, accounts: list[Account], parallel: int | None, arms: list[Arm],
              tasks: list[PlanTask], left_out: Mapping[str, str] | None = None) -> Capacity:
    left_out = dict(left_out or {})
    usable = [a for a in accounts if a.name not in left_out]
    accounts_total = sum(a.limits.max_concurrent for a in usable)
    pools: dict[str, int] = {}
    binds: dict[str, str] = {}
    lines = [f"accounts: {' + '.join(f'{a.name} {a.limits.max_concurrent}' for a in usable) or 'none'}"
             f" = {accounts_total} concurrent sessions"]
    lines += [f"account {name} left out: {why}" for name, why in left_out.items()]
    for name in {suite.backend}:
        config = suite.backends.get(name, BackendConfig())
        can = capabilities(name)
        # every limit on the backend's sandboxes at once; the smallest binds (issue 56: the receipt
        # showed max_sandboxes 8 where the organisation pool's 3 bound)
        limits: list[tuple[str, int]] = []
        if pool_config(suite.backends, name) is not None:
            # The organisation's pool binds even under a max_sandboxes (the smaller wins), and is
            # checked here whole: a field missing is bad input now, not an error in execute.
            limits.append(("organisation pool", _daytona_slots(_daytona_pool(config), suite, arms, tasks, lines)))
        if config.max_sandboxes is not None:
            limits.append(("max_sandboxes", config.max_sandboxes))
            lines.append(f"backend {name}: max_sandboxes = {config.max_sandboxes}")
        elif not limits and not can.image:  # host processes: one per core
            limits.append(("host cores", os.cpu_count() or 1))
            lines.append(f"backend {name}: host cores = {limits[-1][1]} (set backends.{name}.max_sandboxes to change)")
        elif not limits and not can.host_admission:
            limits.append(("accounts", accounts_total))
            lines.append(f"backend {name}: no pool set; bounded by accounts")
        if can.host_admission:
            # Host admission: the limits of every running container plus the next stay under
            # the host's totals minus the reserve. CPU is not overcommitted either.
            host = HostResources.read()
            each = _largest_sandbox(suite, arms, tasks)
            fits = max_concurrent(each, host, suite.host_reserve_mb, 0.0)
            decision = admit([each] * max(0, fits - 1), each, host, suite.host_reserve_mb, 0.0)
            lines.append(f"backend {name}: host admission fits {fits} sandboxes of "
                         f"{each.cpus or 'unlimited (counted as 1)'} CPUs / "
                         f"{each.memory_mb or 'unlimited (counted as 2048)'} MiB each")
            lines.extend(line.removeprefix("- ") for line in render_admission(decision))
            limits.append(("host admission", fits))
        if limits:
            binds[name], pools[name] = min(limits, key=lambda kv: kv[1])
            if len(limits) > 1:
                lines.append(f"backend {name}: {pools[name]} sandboxes at once, {binds[name]} binds "
                             f"(min of {', '.join(f'{what} {n}' for what, n in limits)})")
    effective = min(accounts_total, *pools.values())
    if parallel is not None:
        lines.append(f"--parallel caps it at {parallel}")
        effective = min(effective, parallel)
    lines.append(f"effective parallelism = min({accounts_total}, {', '.join(map(str, pools.values()))}"
                 + (f", {parallel}" if parallel is not None else "") + f") = {effective}")
    return Capacity(accounts_concurrency=accounts_total, backend_pools=pools, parallel_cap=parallel,
                    effective=effective, lines=lines, backend_binds=binds, left_out=left_out)
