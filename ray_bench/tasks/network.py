"""The network each phase of a task gets: the one place that decides it.

Harbor's rule: a phase's own ``network_mode`` (``[steps.agent]`` over ``[agent]``, or
``[steps.verifier]`` over ``[verifier]``) wins; otherwise the ``[environment]`` baseline, whose
default is ``public``. Setup, healthchecks and collect hooks run under the baseline. The agent's
own route to its model provider is the agent adapter's business (agents issue), not this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ray_bench.models.task import NetworkMode, StepConfig, TaskConfig
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.sandboxes.daytona_lists import create_entries

Phase = Literal["setup", "agent", "verifier"]


@dataclass(frozen=True)
class NetworkPolicy:
    mode: NetworkMode
    hosts: tuple[str, ...] = ()

    @property
    def online(self) -> bool:
        return self.mode != NetworkMode.NO_NETWORK


def phase_network(config: TaskConfig, phase: Phase, step: StepConfig | None = None, *,
                  agent_online: bool = False) -> NetworkPolicy:
    """The network of ``phase``. ``agent_online``: the arm's agent must reach its model
    provider (``plan.agents.agent_network``), so its phase is public whatever the task says."""
    if phase == "agent" and agent_online:
        return NetworkPolicy(NetworkMode.PUBLIC)
    env = config.environment
    if phase == "verifier" and step is None and config.verifier.separate and config.verifier.environment:
        # A separate verifier's baseline is its own environment's (harbor/trial/network_policy.py,
        # resolve_trial_network_plan: verifier_env_baseline), a copy of [environment] without one.
        env = config.verifier.environment
    base = NetworkPolicy(env.network_mode, tuple(env.allowed_hosts or ()))
    if phase == "setup":
        return base
    layers = [getattr(step, phase)] if step is not None else []
    layers.append(getattr(config, phase))
    for layer in layers:
        if layer.network_mode is not None or layer.allowed_hosts:
            return NetworkPolicy(layer.network_mode or NetworkMode.ALLOWLIST, tuple(layer.allowed_hosts or ()))
    return base


def all_policies(config: TaskConfig, agent_online: bool = False) -> list[tuple[str, NetworkPolicy]]:
    """Every (phase, policy) a run of the task goes through, named for messages."""
    out: list[tuple[str, NetworkPolicy]] = [("setup", phase_network(config, "setup"))]
    for step in config.steps or [None]:  # type: ignore[list-item]
        prefix = f"steps.{step.name}." if step is not None else ""
        out.append((f"{prefix}agent", phase_network(config, "agent", step, agent_online=agent_online)))
        out.append((f"{prefix}verifier", phase_network(config, "verifier", step)))
    return out


def in_agent_sandbox(config: TaskConfig, agent_online: bool = False) -> list[tuple[str, NetworkPolicy]]:
    """The (phase, policy) pairs that run in the agent's sandbox: all but a separate verifier,
    which has a sandbox of its own made with its network (ray_bench.cells.verifier_apart)."""
    separate = config.verifier.separate and not config.steps
    return [(name, policy) for name, policy in all_policies(config, agent_online)
            if not (separate and name == "verifier")]


def needs_network(config: TaskConfig) -> bool:
    """Whether the agent's sandbox must be made with a network (some phase in it is online)."""
    return any(policy.online for _, policy in in_agent_sandbox(config))


def varies(config: TaskConfig, agent_online: bool = False) -> bool:
    """Whether the phases in the agent's sandbox differ, so its network must change during the run."""
    return len({policy.online for _, policy in in_agent_sandbox(config, agent_online)}) > 1


def sandbox_allowlist(policies: list[tuple[str, NetworkPolicy]], names: bool = False) -> tuple[str, ...] | None:
    """The allowlist one sandbox is made with where the network is fixed at create: every phase in
    it has the same allowlist (else None: no allowlist, or phases that differ, which plan refuses).
    ``names``: the backend's list takes host names too (``allowlist_names_at_create``)."""
    kinds = {policy for _, policy in policies}
    if len(kinds) != 1:
        return None
    (policy,) = kinds
    return create_entries(policy.hosts, names) if policy.mode == NetworkMode.ALLOWLIST else None


def create_allowlist(backend: str, policies: list[tuple[str, NetworkPolicy]]) -> tuple[str, ...] | None:
    """What a sandbox of ``backend`` holding ``policies`` is made with: the one allowlist of its phases
    where the backend fixes allowlists at create and enforces none per phase, else None."""
    can = capabilities(backend)
    if not can.allowlist_at_create or can.allowlist:
        return None
    return sandbox_allowlist(policies, can.allowlist_names_at_create)
