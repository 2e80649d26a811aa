"""Plan-time checks of the arms' agents: what can be known before anything starts."""

from __future__ import annotations

from pathlib import Path

from ray_bench.agents import ADAPTERS
from ray_bench.errors import ConfigError, UserInputError
from ray_bench.models.plan import Plan
from ray_bench.models.suite import Arm

#: Backends whose sandboxes are isolated from the network unless opened; none of them can
#: enforce a per-host allowlist today, so a CLI agent there needs `network: public`.
CLOSED_BACKENDS = frozenset({"docker", "daytona"})
#: Agents whose CLI the docker backend lays over the task image (ray_bench.agents.layer).
LAID_AGENTS = frozenset({"claude-code", "codex"})


def check_agents(arms: list[Arm], backends: set[str], where: Path, errors: list[UserInputError]) -> None:
    for arm in arms:
        adapter = ADAPTERS.get(arm.agent)
        if adapter is None:
            errors.append(ConfigError(f"arms.{arm.name}.agent: unknown agent {arm.agent!r}", where=str(where),
                                      fix=f"use one of {', '.join(sorted(ADAPTERS))}"))
            continue
        refusal = adapter.refuse_model(arm.model)
        if refusal is not None:
            errors.append(ConfigError(f"arms.{arm.name}.model: {refusal}", where=str(where),
                                      fix="name a model this agent runs"))
        closed = sorted(backends & CLOSED_BACKENDS)
        if adapter.binary and closed and arm.network != "public":
            errors.append(ConfigError(
                f"arms.{arm.name}: agent {arm.agent} must reach {', '.join(adapter.provider_hosts[:1])} but "
                f"backend {closed[0]} cannot enforce a host allowlist", where=str(where),
                fix="add `network: public` to the arm (the receipt shows it)"))


def agent_network(arm: Arm) -> bool:
    """Whether the agent phase of this arm has a network."""
    return arm.network == "public"


def image_of(plan: Plan, arm: Arm, backend: str) -> str:
    """Which image the arm's cells run on ``backend``, in words (the receipt's column)."""
    if backend == "local":
        return "none (host process)"
    config = plan.backends.get(backend)
    built = any(t.has_dockerfile for t in plan.tasks)
    named = sorted({t.image for t in plan.tasks if t.image and not t.has_dockerfile})
    if arm.image:
        base = f"`{arm.image}` (the arm's)"
    elif built or named:
        base = " / ".join(["each task's Dockerfile build"] * built + [f"`{n}`" for n in named[:3]])
        if config is not None and config.image and not all(t.has_dockerfile or t.image for t in plan.tasks):
            base += f"; `{config.image}` for tasks naming none"
    else:
        base = f"`{config.image}` (the backend's)" if config is not None and config.image else "none named"
    adapter = ADAPTERS.get(arm.agent)
    if adapter is not None and adapter.binary and backend == "docker":
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
    out += ["", "- seed: `RAY_BENCH_SEED` = `<cell id>:<attempt seq>` in every agent's env",
            "- verifier: each task's `tests/test.sh`, with the task's verifier env and network",
            "- evidence: an arm with a model needs a usage record with output tokens for a valid row"]
    return out
