"""Plan-time checks of the arms' agents: what can be known before anything starts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ray_bench.agents import ADAPTERS
from ray_bench.errors import ConfigError, MultipleInputErrors, TaskDirError, UserInputError
from ray_bench.harbor.arms import HOST_SIDE, HOW_TO_GET, harbor_arm, interpreter_refusal, laid_cli
from ray_bench.models.plan import Plan, PlanTask
from ray_bench.models.suite import Arm, BackendConfig
from ray_bench.models.task import TaskRef
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.textsafe import code_span, table_cell

#: Agents whose CLI a backend with an agent layer lays over the task image (ray_bench.agents.layer).
LAID_AGENTS = frozenset({"claude-code", "codex"})


def closed_backends(backends: set[str]) -> list[str]:
    """The backends whose sandboxes are isolated from the network unless opened: an agent calling
    its provider from there needs `network: public`. (A backend that enforces a task's allowlist,
    docker, still needs it: an agent phase is opened whole, never narrowed to its provider's hosts,
    :func:`ray_bench.tasks.network.phase_network`.)"""
    return sorted(b for b in backends if capabilities(b).isolated_network)


def check_agents(arms: list[Arm], backends: set[str], where: Path, errors: list[UserInputError]) -> None:
    for arm in arms:
        adapter = ADAPTERS.get(arm.agent)
        if adapter is None:
            errors.append(ConfigError(f"arms.{arm.name}.agent: unknown agent {arm.agent!r}", where=str(where),
                                      fix=f"use one of {', '.join(sorted(ADAPTERS))}"))
            continue
        if arm.agent == "harbor":
            _check_harbor(arm, backends, where, errors)
            continue
        refusal = adapter.refuse_model(arm.model)
        if refusal is not None:
            errors.append(ConfigError(f"arms.{arm.name}.model: {refusal}", where=str(where),
                                      fix="name a model this agent runs"))
        closed = closed_backends(backends)
        if adapter.binary and closed and arm.network != "public":
            errors.append(ConfigError(
                f"arms.{arm.name}: agent {arm.agent} must reach {', '.join(adapter.provider_hosts[:1])} but "
                f"backend {closed[0]} gives its sandboxes no network unless the arm opens it", where=str(where),
                fix="add `network: public` to the arm (the receipt shows it)"))


def _check_harbor(arm: Arm, backends: set[str], where: Path, errors: list[UserInputError]) -> None:
    """Harbor's own registry and option models decide; refused where Harbor cannot run. An
    installed agent calls its model from the sandbox, so it needs the network a CLI arm does."""
    closed = closed_backends(backends)
    if (arm.harbor_agent or "") not in HOST_SIDE and closed and arm.network != "public":
        errors.append(ConfigError(
            f"arms.{arm.name}: Harbor agent {arm.harbor_agent} runs in the sandbox and calls its model from there, "
            f"but backend {closed[0]} gives its sandboxes no network unless the arm opens it", where=str(where),
            fix="add `network: public` to the arm (the receipt shows it)"))
        return

    refusal = interpreter_refusal()
    if refusal is not None:
        errors.append(ConfigError(f"arms.{arm.name}: agent harbor {refusal}", where=str(where), fix=HOW_TO_GET))
        return
    facts = harbor_arm(arm)
    if isinstance(facts, str):
        errors.append(ConfigError(f"arms.{arm.name}.harbor_agent: {facts}", where=str(where),
                                  fix="name an agent and options Harbor accepts (`harbor agent schema NAME`)"))


def refuse_long_instructions(tasks: list[TaskRef], arms: list[Arm],
                             arms_of: Mapping[str, tuple[str, ...] | None] | None = None) -> None:
    """An instruction longer than one command-line argument can be, for an arm whose adapter
    passes it as one (:attr:`AgentAdapter.instruction_limit`), is refused now: at exec time it
    is an E2BIG in every attempt, after the sandbox is up. Sizes come from ``stat``; the files
    were checked as regular and bounded when the task was loaded. ``arms_of``: a selection's
    arms per task (None: all)."""
    bound = [(arm, limit) for arm in arms
             if (limit := getattr(ADAPTERS.get(arm.agent), "instruction_limit", None)) is not None]
    if not bound:
        return
    errors: list[UserInputError] = []
    for task in tasks:
        chosen = (arms_of or {}).get(task.id)
        steps = task.config.steps or []
        for rel in ([f"steps/{step.name}/instruction.md" for step in steps] or ["instruction.md"]):
            path = Path(task.path) / rel
            size = path.stat().st_size if path.is_file() else 0
            over = [arm for arm, limit in bound if size > limit and (chosen is None or arm.name in chosen)]
            if over:
                limit = min(limit for arm, limit in bound if arm in over)
                errors.append(TaskDirError(
                    f"task {task.id}: {rel} is {size:,} bytes, over the {limit:,} bytes one command-line argument "
                    f"holds (Linux MAX_ARG_STRLEN), and arm{'s' if len(over) > 1 else ''} "
                    f"{', '.join(a.name for a in over)} pass{'' if len(over) > 1 else 'es'} it as one "
                    f"({', '.join(sorted({a.agent for a in over}))})", where=task.path,
                    fix="shorten the instruction (put long material in a file the task ships and name it), or "
                        "run the task with an arm whose agent reads $INSTRUCTION_FILE (agent: command)"))
                break
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors[:20])


def agent_network(arm: Arm) -> bool:
    """Whether the agent phase of this arm has a network."""
    return arm.network == "public"


def sandbox_image(task: PlanTask, arm: Arm, backend: BackendConfig | None) -> tuple[str | None, str | None]:
    """The image a cell of ``task`` in ``arm`` runs, and the build context built instead (or
    None): the arm's image overrides the task's environment; then the task's Dockerfile when it
    builds (:meth:`PlanTask.builds`), else its prebuilt ``docker_image``; then the backend's."""
    if arm.image:
        return arm.image, None
    context = str(Path(task.path) / "environment") if task.builds() else None
    return task.image or (backend.image if backend else None), context


def image_of(plan: Plan, arm: Arm, backend: str) -> str:
    """Which image the arm's cells run on ``backend``, in words (the receipt's column)."""
    can = capabilities(backend)
    if not can.image:
        return "none (host process)"
    config = plan.backends.get(backend)
    built = any(t.builds() for t in plan.tasks)
    named = sorted({t.image for t in plan.tasks if t.image and not t.builds()})
    if arm.image:
        base = f"`{arm.image}` (the arm's, in place of every task's image and Dockerfile)"
    elif built or named:
        base = " / ".join(["each task's Dockerfile build"] * built + [f"`{n}`" for n in named[:3]])
        if config is not None and config.image and not all(t.builds() or t.image for t in plan.tasks):
            base += f"; `{config.image}` for tasks naming none"
    else:
        base = f"`{config.image}` (the backend's)" if config is not None and config.image else "none named"
    adapter = ADAPTERS.get(arm.agent)
    if arm.agent == "harbor":
        laid = laid_cli(arm.harbor_agent)
        if laid is not None and can.agent_layer:
            cli = ADAPTERS[laid]
            base += (f" + agent layer: `{cli.binary}` of the node's `{cli.npm_package}` install (Harbor's setup "
                     "finds it by its version command and installs nothing)")
        elif (arm.harbor_agent or "") not in HOST_SIDE and can.image:
            base += " (no agent layer: Harbor's setup installs the agent, which needs the image's network)"
        return base
    if adapter is not None and adapter.binary and can.agent_layer:
        if arm.agent in LAID_AGENTS:
            base += f" + agent layer: `{adapter.binary}` of the node's `{adapter.npm_package}` install"
        else:
            base += f" (no agent layer for {arm.agent}: the image must have `{adapter.binary}`; the preflight checks)"
    elif adapter is not None and adapter.binary:
        base += f" (the image must have `{adapter.binary}`; the preflight checks)"
    return base


def agents_section(plan: Plan) -> list[str]:
    out = ["", "## Agents, models and images", "",
           "| arm | agent | model | backend | image | agent phase network |", "|---|---|---|---|---|---|"]
    backends = sorted({c.backend for c in plan.cells})
    for arm in plan.arms:
        adapter = ADAPTERS.get(arm.agent)
        net = "public (arm's `network: public`)" if arm.network == "public" else "task's"
        if adapter is not None and adapter.binary and arm.network != "public":
            net += f"; provider hosts {', '.join(adapter.provider_hosts)}"
        for backend in backends:
            out.append(f"| {arm.name} | {arm.agent} | {arm.model or '-'} | {backend} | {image_of(plan, arm, backend)} "
                       f"| {net} |")
    out += harbor_lines(plan, backends)
    out += ["", "- seed: `RAY_BENCH_SEED` = `<cell id>:<attempt seq>` in every agent's env",
            "- verifier: each task's `tests/test.sh`, with the task's verifier env and network",
            "- evidence: an arm with a model needs a usage record with output tokens for a valid row"]
    return out


def harbor_lines(plan: Plan, backends: list[str]) -> list[str]:
    """The Harbor arms as Harbor reports them: agent, version, options, model roles, image."""
    arms = [arm for arm in plan.arms if arm.agent == "harbor"]
    if not arms:
        return []
    out = ["", "### Harbor agents", "",
           "| arm | Harbor agent | version | options | model roles | runs | image |", "|---|---|---|---|---|---|---|"]
    refusal = interpreter_refusal()
    for arm in arms:
        facts = harbor_arm(arm) if refusal is None else refusal
        if isinstance(facts, str):
            out.append(f"| {arm.name} | {table_cell(arm.harbor_agent or '-')} | - | - | - | - | {table_cell(facts)} |")
            continue
        options = json.dumps(facts.options, sort_keys=True, separators=(",", ":"))
        roles = "; ".join(f"{role}: {model} ({by})" for role, model, by in facts.roles) or "none (no model)"
        where = "host (drives the sandbox from outside)" if facts.host_side else "sandbox (installed by its setup)"
        for backend in backends:
            image = image_of(plan, arm, backend)
            if facts.agent == "terminus-2" and capabilities(backend).image:
                image += "; needs tmux (Terminus 2's setup installs it with the image's package manager if missing)"
            out.append(f"| {arm.name} | {facts.agent} | {facts.version} (Harbor {facts.harbor_version}) | "
                       f"{code_span(options)} | {table_cell(roles)} | {where} | {table_cell(image)} |")
    return out
