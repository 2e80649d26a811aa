"""Multi-step Harbor tasks (``[[steps]]``), run as Harbor's multi-step trial runs them: one
sandbox; per step its ``workdir/`` files and ``setup.sh``, its healthcheck, the agent with the
step's instruction and timeout, collect hooks and artifacts, then the verifier with the task's
``tests/`` overlaid by the step's. A step below its ``min_reward`` stops the rest; the task's
reward is the declared strategy over the steps' rewards.

Also the task-wide env (``[environment].env``, ``[verifier].env``, ``[solution].env``) and the
extras an agent gets (the MCP config file, the skills directory).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ray_bench.agents.runtime import command_for, record
from ray_bench.cells.contract_files import bound_contract_files, bounds_below
from ray_bench.cells.credentials import Redactor
from ray_bench.cells.lifetime import STEP_SETUP_TIMEOUT_SEC
from ray_bench.cells.phases import (
    ARTIFACTS_DIR,
    VERIFIER_SCRIPT,
    NetworkSwitch,
    collect_hooks,
    collect_sessions,
    copy_artifacts,
    healthcheck,
    user_of,
)
from ray_bench.cells.spec import AttemptSpec
from ray_bench.errors import TaskEnvironmentError
from ray_bench.models.attempt import AgentError, AttemptSummary, ExecFacts, HealthcheckFacts, StepFacts, Usage
from ray_bench.models.task import StepConfig, TaskConfig, artifact_entries
from ray_bench.sandboxes import ExecResult, Sandbox
from ray_bench.tasks.envvars import resolve_env
from ray_bench.tasks.rewards import below_min, combine, headline, read_rewards

_SETUP = 'if command -v bash >/dev/null 2>&1; then exec bash ./setup.sh; else exec sh ./setup.sh; fi'
_DEFAULT_AGENT_TIMEOUT_SEC = 600.0


@dataclass(frozen=True)
class TaskEnv:
    """The task's env tables with ``${VAR}`` filled from this node; ``secrets`` are the values
    that came from the host, for the redactor."""

    environment: dict[str, str]
    verifier: dict[str, str]
    solution: dict[str, str]
    #: Per step: [verifier].env with [steps.verifier].env over it.
    step_verifier: dict[str, dict[str, str]]
    secrets: tuple[str, ...]
    #: A separate verifier's container env: [verifier.environment].env, else [environment].env
    #: (Harbor gives it a copy of the top-level environment).
    verifier_environment: dict[str, str] | None = None

    @classmethod
    def resolve(cls, config: TaskConfig, host: Mapping[str, str], judge: Mapping[str, str] | None = None) -> TaskEnv:
        """``judge``: the verifier's credential variables from its account route (resolved on this
        node), which fill ``[verifier].env``'s templates before the host's env does."""
        environment, a = resolve_env(config.environment.env, host)
        verifier, b = resolve_env(config.verifier.env, {**host, **(judge or {})})
        solution, c = resolve_env(config.solution.env, host)
        secrets = a + b + c
        own = config.verifier.environment
        box, d = resolve_env(own.env, host) if own is not None else (environment, [])
        secrets += d
        steps: dict[str, dict[str, str]] = {}
        for step in config.steps or []:
            extra, more = resolve_env(step.verifier.env, {**host, **(judge or {})})
            steps[step.name] = {**verifier, **extra}
            secrets += more
        return cls(environment, verifier, solution, steps, tuple(secrets), box)


async def agent_extras(sandbox: Sandbox, config: TaskConfig) -> dict[str, str]:
    """The skills directory, named in the agent's env (``RAY_BENCH_SKILLS_DIR``). (The MCP
    servers reach the agent through its adapter: ``AttemptSpec.mcp_servers``.)"""
    extras: dict[str, str] = {}
    if config.environment.skills_dir:
        extras["RAY_BENCH_SKILLS_DIR"] = sandbox.path(config.environment.skills_dir)
    return extras


def stage_steps(spec: AttemptSpec, task_dir: Path, stage: Path) -> None:
    """Each step's instruction at /task/steps/<name>/instruction.md, and for oracle-style arms
    its solution at /solution/steps/<name>/."""
    for step in spec.task_config.steps or []:
        src = task_dir / "steps" / step.name
        (stage / "task" / "steps" / step.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / "instruction.md", stage / "task" / "steps" / step.name / "instruction.md")
        if spec.expose_solution and (src / "solution").is_dir():
            shutil.copytree(src / "solution", stage / "solution" / "steps" / step.name, symlinks=True,
                            dirs_exist_ok=True)


@dataclass
class StepRun:
    sandbox: Sandbox
    spec: AttemptSpec
    task_dir: Path
    workdir: str
    agent_env: dict[str, str]
    base_env: dict[str, str]
    task_env: TaskEnv
    network: NetworkSwitch
    redactor: Redactor


async def run_steps(run: StepRun, summary: AttemptSummary) -> None:
    cfg = run.spec.task_config
    rewards: list[dict[str, float] | None] = []
    for step in cfg.steps or []:
        facts = StepFacts(name=step.name)
        summary.steps.append(facts)
        step_rewards = await _run_step(run, step, facts, summary)
        rewards.append(step_rewards)
        facts.stopped = below_min(step_rewards, step.min_reward)
        if facts.stopped is not None:
            break
    combined = combine(rewards, cfg.reward_strategy)
    summary.rewards = combined
    summary.reward = headline(combined)
    summary.reward_source = f"steps ({cfg.reward_strategy.value} of {len(rewards)})"
    summary.agent = _last([s.agent for s in summary.steps])
    summary.verifier = _last([s.verifier for s in summary.steps])
    usage = [s.usage for s in summary.steps if s.usage is not None]
    summary.usage = sum_usage(usage) if usage else None
    errors = [s.agent_error for s in summary.steps if s.agent_error is not None]
    summary.agent_error = errors[-1] if errors else None


async def _run_step(run: StepRun, step: StepConfig, facts: StepFacts,
                    summary: AttemptSummary) -> dict[str, float] | None:
    sandbox, spec, cfg = run.sandbox, run.spec, run.spec.task_config
    step_dir = run.task_dir / "steps" / step.name
    out = Path(spec.attempt_dir) / "steps" / step.name
    await run.network.enter("setup")
    if (step_dir / "workdir").is_dir():
        await sandbox.put_dir(step_dir / "workdir", run.workdir)
        if (step_dir / "workdir" / "setup.sh").is_file():
            setup = await sandbox.exec(_SETUP, timeout=STEP_SETUP_TIMEOUT_SEC, env=run.base_env, cwd=run.workdir)
            facts.setup_exit = setup.exit_code
            if setup.exit_code != 0:
                raise TaskEnvironmentError(f"step {step.name}: setup.sh exited {setup.exit_code}: "
                                           f"{run.redactor.text(setup.stderr[-300:].strip())}")
    if step.healthcheck is not None:
        facts.healthcheck = HealthcheckFacts()
        await healthcheck(sandbox, step.healthcheck, env=run.base_env, cwd=run.workdir, facts=facts.healthcheck)

    env = {**run.agent_env, "INSTRUCTION_FILE": sandbox.path(f"/task/steps/{step.name}/instruction.md"),
           "RAY_BENCH_STEP": step.name}
    if spec.expose_solution and (step_dir / "solution").is_dir():
        env["SOLUTION_DIR"] = sandbox.path(f"/solution/steps/{step.name}")
    timeout = step.agent.timeout_sec or cfg.agent.timeout_sec or _DEFAULT_AGENT_TIMEOUT_SEC
    t = time.monotonic()
    await run.network.enter("agent", step)
    command = command_for(spec.agent, spec.model, spec.agent_command, spec.agent_args, spec.mcp_servers,
                          spec.max_turns)
    agent_user = user_of(step.agent.user if step.agent.user is not None else cfg.agent.user)
    summary.agent_started = True  # from here a cancelled attempt may have spent (ray_bench.ledger.cost)
    agent = await sandbox.exec(command, timeout=timeout, env=env, user=agent_user)
    facts.phases["agent"] = time.monotonic() - t
    took = await collect_sessions(sandbox, spec.agent, agent.stdout, env=env, cwd=run.workdir, user=agent_user)
    if took is not None:
        facts.phases["sessions"] = took
    facts.agent = _exec_facts(agent, run.redactor, 4000)

    await run.network.enter("setup")
    facts.collect = await collect_hooks(sandbox, [*cfg.verifier.collect, *step.verifier.collect],
                                        env=run.base_env, cwd=run.workdir)
    await copy_artifacts(sandbox, artifact_entries([*cfg.artifacts, *step.artifacts]), env=run.base_env,
                         cwd=run.workdir, into=f"{ARTIFACTS_DIR}/steps/{step.name}")

    # Each step's verifier sees the task's tests/ with the step's own files over them.
    t = time.monotonic()
    await run.network.enter("verifier", step)
    tests, logs_verifier = sandbox.path("/tests"), sandbox.path("/logs/verifier")
    await sandbox.exec(f'rm -rf "{tests}" "{logs_verifier}"; mkdir -p "{tests}" "{logs_verifier}"; '
                       f'chmod 777 "{logs_verifier}"', timeout=60)
    if (run.task_dir / "tests").is_dir():
        await sandbox.put_dir(run.task_dir / "tests", "/tests")
    if (step_dir / "tests").is_dir():
        await sandbox.put_dir(step_dir / "tests", "/tests")
    verifier_env = run.task_env.step_verifier.get(step.name, run.task_env.verifier)
    user = step.verifier.user if step.verifier.user is not None else cfg.verifier.user
    verifier = await sandbox.exec_script(VERIFIER_SCRIPT, timeout=step.verifier.timeout_sec,
                                         env={**run.base_env, **verifier_env}, cwd=run.workdir, user=user_of(user))
    facts.phases["verifier"] = time.monotonic() - t
    facts.verifier = _exec_facts(verifier, run.redactor, 2000)

    # The step's logs leave the sandbox now (the next step starts with empty ones).
    room = max(0, spec.artifact_cap_bytes - summary.artifact_bytes)
    taken = 0
    for name in ("verifier", "agent"):
        taken += await sandbox.get_dir(f"/logs/{name}", out / name, max_bytes=max(0, room - taken),
                                       bounds=bounds_below(name))
    summary.artifact_bytes += taken - bound_contract_files(out)
    record(spec.agent, agent.stdout, agent.stderr, agent.exit_code, agent.timed_out, agent.duration_sec,
           out / "agent", agent.stopped, model=spec.model, killed=agent.killed)
    run.redactor.tree(out)
    agent_logs = sandbox.path("/logs/agent")
    await sandbox.exec(f'rm -rf "{agent_logs}"; mkdir -p "{agent_logs}"; chmod 777 "{agent_logs}"', timeout=60)
    rewards, source = read_rewards(out / "verifier")
    facts.rewards, facts.reward, facts.reward_source = rewards, headline(rewards), source
    facts.usage = _model(Usage, out / "agent" / "usage.json")
    facts.agent_error = _model(AgentError, out / "agent" / "error.json")
    return rewards


def _exec_facts(result: ExecResult, redactor: Redactor, tail: int) -> ExecFacts:
    return ExecFacts(exit_code=result.exit_code, timed_out=result.timed_out,
                     duration_sec=round(result.duration_sec, 3), truncated_bytes=result.truncated_bytes,
                     oom_killed=result.oom_killed, output_tail=redactor.text((result.stdout + result.stderr)[-tail:]))


def _last(found: list[ExecFacts | None]) -> ExecFacts | None:
    """The phase facts the classifier reads: the last step's, flagged when any step's agent
    timed out or any phase was OOM-killed."""
    have = [f for f in found if f is not None]
    if not have:
        return None
    return have[-1].model_copy(update={"timed_out": any(f.timed_out for f in have),
                                       "oom_killed": any(f.oom_killed for f in have)})


#: The counts of a usage record: unknown in the total when any step's is (never summed as 0).
_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def sum_usage(items: list[Usage]) -> Usage:
    """An attempt's usage over its steps (each step's agent wrote its own ``usage.json``): counts
    summed; every step's request ids, refused calls and session ids kept (``session_ids``), so
    ``settle`` expects the whole charge, not the first step's; a flag any step raised (a call
    under way, stopped mid-turn) raised; ``lower_bound`` when any step's is. A step whose usage
    is ``unknown`` makes the total unknown (its counts and cost None, never 0); a step with
    tokens and no cost (a model without a price) makes the cost unknown."""
    total: dict[str, Any] = {}
    for usage in items:
        for key, value in usage.model_dump(exclude_none=True).items():
            if isinstance(value, list):
                kept = total.setdefault(key, [])
                kept += [v for v in value if v not in kept]
            elif isinstance(value, bool):
                total[key] = total.get(key, False) or value
            elif isinstance(value, int | float):
                total[key] = total.get(key, 0) + value
            else:
                total.setdefault(key, value)
    sessions = [u.model_dump().get("session_id") for u in items]
    total["session_ids"] = list(dict.fromkeys([*total.get("session_ids", []), *(s for s in sessions if s)]))
    bounds = {u.bound for u in items}
    total["bound"] = "lower_bound" if "lower_bound" in bounds else "exact" if bounds == {"exact"} else None
    if any(u.cost_basis == "estimated" for u in items):
        total["cost_basis"] = "estimated"
    if any(not u.known for u in items):
        total.update(dict.fromkeys((*_COUNTS, "cost_usd", "cost_basis", "bound")), source="unknown")
    elif any(_cost(u) is None for u in items):
        total.update(cost_usd=None, cost_basis=None)
    return Usage.model_validate(total)


def _cost(usage: Usage) -> float | None:
    """One step's cost: its own; 0 when it used no token; None when it used some without a cost."""
    if usage.cost_usd is not None:
        return float(usage.cost_usd)
    return None if (usage.input_tokens or usage.output_tokens) else 0.0


_M = TypeVar("_M", bound=BaseModel)


def _model(model: type[_M], path: Path) -> _M | None:
    """An agent-written JSON file as its model; one that does not fit is kept as text."""
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    try:
        data = json.loads(text)
        return model.model_validate(data if isinstance(data, dict) else {"value": data})
    except (ValueError, ValidationError):
        return model.model_validate({"unparseable": text[:500]})
