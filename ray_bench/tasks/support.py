"""What each sandbox backend can honour of a task, decided at plan time from its capabilities
(:mod:`ray_bench.sandboxes.capabilities`).

A task that asks for what its backend cannot give (GPUs, a TPU, Windows, a multi-container
compose file, a separate verifier container where the backend cannot make one, continuous
verification, an allowlist network, another user, a network that changes between phases) is
refused with one line each: never a silent run without what the task asked for. What a backend
only cannot *enforce* (a disk quota on docker, isolation on ``local``) is a receipt warning.
"""

from __future__ import annotations

from pathlib import Path

from ray_bench.models.task import MAIN_SERVICE, NetworkMode, TaskConfig, TaskRef, artifact_entries
from ray_bench.sandboxes.capabilities import BUILTIN, BackendCapabilities, capabilities, having
from ray_bench.sandboxes.daytona_lists import (
    DAYTONA_MAX_DOMAINS,
    DAYTONA_MAX_NETWORKS,
    create_entries,
    split_networks,
    unsayable,
)
from ray_bench.sandboxes.gpus import DaemonGpus
from ray_bench.tasks.network import all_policies, in_agent_sandbox, sandbox_allowlist, varies
from ray_bench.tasks.verifier_env import has_verifier_compose


def refusals(task: TaskRef, backend: str, *, stand_in_image: bool = False, agent_online: bool = False,
             some_agent_online: bool = False, daemon: DaemonGpus | None = None) -> list[str]:
    """Why ``backend`` cannot run ``task`` as it is written; empty when it can. ``stand_in_image``:
    an image runs where the task names none (the backend's ``image``, or every arm's). ``agent_online``:
    every arm opens its agent's phase (`network: public`), so the task's own policy for that phase
    does not apply; ``some_agent_online``: some arm does (its sandbox's phases may then differ)."""
    can = capabilities(backend)
    cfg = task.config
    env = cfg.environment
    out: list[str] = []
    if can.image and not (can.default_image or env.docker_image or task.has_dockerfile or task.has_compose
                          or stand_in_image):
        # Harbor does not load such a task either (``Task.is_valid_dir``: an image or environment/)
        out.append(f"names neither [environment] docker_image nor environment/Dockerfile, and backend {backend} "
                   "has no image to stand in: nothing to start its container from (give it one of those, or "
                   f"set backends.{backend}.image)")
    if env.gpus and not gives_gpus(can, daemon):
        out.append(f"asks for {env.gpus} GPU(s){' of ' + '/'.join(env.gpu_types) if env.gpu_types else ''}; "
                   f"{_gpu_backends(backend, daemon)}")
    if env.tpu is not None:
        out.append(f"asks for a TPU ({env.tpu.type} {env.tpu.topology}); backend {backend} has none")
    if env.os != "linux":
        out.append(f"asks for os = {env.os!r}; backend {backend} runs Linux containers only")
    out.extend(compose_refusals(task, backend))
    out.extend(_verifier_apart(task, backend, daemon))
    verifiers = [("verifier", cfg.verifier)] + [(f"steps.{s.name}.verifier", s.verifier) for s in cfg.steps or []]
    for where, verifier in verifiers:
        if verifier.continuous.enabled:
            out.append(f"{where}.continuous is enabled; ray-bench verifies after the agent only")
        for hook in verifier.collect:
            if hook.service != MAIN_SERVICE and not _runs_service(task, hook.service, can.compose):
                out.append(f"{where}.collect runs in compose service {hook.service!r}, "
                           + _no_service(task, hook.service, backend))
                break
    artifacts = artifact_entries(cfg.artifacts) + [a for s in cfg.steps or [] for a in artifact_entries(s.artifacts)]
    if any(a.service not in (None, MAIN_SERVICE) for a in artifacts):
        out.append(f"an artifact names a compose service; ray-bench collects artifacts from '{MAIN_SERVICE}' only")
    for phase, policy in all_policies(cfg, agent_online):
        if policy.mode == NetworkMode.ALLOWLIST and not can.allowlist:
            # the backends that hold any allowlist a task may write (the provider-held ones have limits)
            enforcing = [b for b in having(BUILTIN, lambda c: c.allowlist or (
                c.allowlist_at_create and c.allowlist_names_at_create and c.network_per_phase)) if b != backend]
            opens = " (or give every arm `network: public`, which opens the agent's phase)" \
                if phase.endswith("agent") else ""
            if can.allowlist_at_create:
                problem = _create_allowlist(cfg, phase, policy.hosts, agent_online, some_agent_online,
                                            names=can.allowlist_names_at_create, per_phase=can.network_per_phase)
                if problem is not None:
                    out.append(f"{phase} network is an allowlist ({', '.join(policy.hosts) or 'no hosts'}); backend "
                               f"{backend} {problem}: run it on {' or '.join(enforcing)}{opens}")
                    break
                continue
            out.append(f"{phase} network is an allowlist ({', '.join(policy.hosts) or 'no hosts'}); backend "
                       f"{backend} cannot enforce one: run it on {' or '.join(enforcing)}{opens}")
            break
    if varies(cfg, agent_online) and not can.network_per_phase:
        out.append(f"its phases differ in network access; backend {backend} fixes the network at create")
    users = [("agent", cfg.agent.user), ("verifier", cfg.verifier.user)]
    users += [(f"steps.{s.name}.{p}", getattr(s, p).user) for s in cfg.steps or [] for p in ("agent", "verifier")]
    users += [("verifier.collect", h.user) for h in cfg.verifier.collect]
    for where, user in users:
        if user is not None and not can.users:
            out.append(f"{where}.user = {user!r}; backend {backend} cannot run a command as another user")
            break
    return out


def _create_allowlist(cfg: TaskConfig, phase: str, hosts: tuple[str, ...], agent_online: bool,
                      some_agent_online: bool = False, *, names: bool = False, per_phase: bool = False) -> str | None:
    """Why an allowlist the provider holds (Daytona's ``networkAllowList``, and ``domainAllowList``
    where ``names``) cannot hold ``phase``'s: an entry the lists cannot say (IPv6, a host name where
    only networks are taken, a name the API's rule refuses), more entries than the API takes, or,
    where the lists are fixed at create (not ``per_phase``), another phase of the same sandbox with
    another network."""
    bad = unsayable(hosts, names)
    if bad and names:
        return (f"sets an allowlist at create of IPv4 addresses, CIDRs (networkAllowList) and domain names with "
                f"a dot and an alphabetic TLD, optionally '*.'-prefixed (domainAllowList), not {', '.join(bad[:3])}")
    if bad:
        return (f"fixes an allowlist at create of IPv4 addresses and CIDRs only (networkAllowList), not host "
                f"names ({', '.join(bad[:3])})")
    networks, domains = split_networks(create_entries(hosts, names) or ())
    if len(networks) > DAYTONA_MAX_NETWORKS:
        return f"takes at most {DAYTONA_MAX_NETWORKS} networks in an allowlist, not {len(networks)}"
    if len(domains) > DAYTONA_MAX_DOMAINS:
        return f"takes at most {DAYTONA_MAX_DOMAINS} domains in an allowlist, not {len(domains)}"
    apart = cfg.verifier.separate and not cfg.steps and phase == "verifier"
    if per_phase:
        return None
    for online in sorted({agent_online, agent_online or some_agent_online}):
        if not apart and sandbox_allowlist(in_agent_sandbox(cfg, online), names) is None:
            shared = ", ".join(f"{name} {p.mode.value}" for name, p in in_agent_sandbox(cfg, online))
            arm = " for an arm with `network: public`" if online and not agent_online else ""
            return f"fixes the network at create, and the phases of one sandbox differ{arm} ({shared})"
    return None


def gives_gpus(can: BackendCapabilities, daemon: DaemonGpus | None) -> bool:
    """The backend gives sandboxes GPUs: always, or where its daemon said it has a GPU runtime."""
    return can.gpus or (can.gpus_by_daemon and daemon is not None and daemon.gives)


def _gpu_backends(backend: str, daemon: DaemonGpus | None) -> str:
    """What this backend has instead, and where GPUs could come from."""
    if capabilities(backend).gpus_by_daemon:
        return daemon.have(backend) if daemon is not None else f"{backend}'s daemon was not asked for its runtimes"
    givers = having(BUILTIN, lambda c: c.gpus)
    by_daemon = having(BUILTIN, lambda c: c.gpus_by_daemon)
    where = [*givers, *(f"{b} (where its daemon has the nvidia runtime)" for b in by_daemon)]
    return f"backend {backend} gives sandboxes none; {', '.join(where)} can" if where else \
        f"no ray-bench backend gives a sandbox GPUs ({', '.join(sorted(BUILTIN))} have none)"


def _verifier_apart(task: TaskRef, backend: str, daemon: DaemonGpus | None = None) -> list[str]:
    """A separate verifier: a second sandbox where the backend makes one per attempt (docker,
    daytona); ``local`` runs host processes, with no image to make a second from."""
    cfg = task.config
    out = [f"steps.{s.name}.verifier asks for a separate verifier container; ray-bench runs a separate "
           "verifier for single-step tasks only" for s in cfg.steps or [] if s.verifier.separate]
    if not cfg.verifier.separate:
        return out
    if cfg.steps:
        out.append("verifier asks for a separate verifier container; ray-bench runs a separate verifier "
                   "for single-step tasks only")
    elif not capabilities(backend).verifier_apart:
        why = ("it has no image to make a second sandbox from" if not capabilities(backend).image
               else "it cannot make a second sandbox per attempt")
        out.append(f"verifier asks for a separate verifier container; backend {backend} does not run one "
                   f"({why}; use backend docker or daytona)")
    elif has_verifier_compose(Path(task.path)):
        out.append("tests/docker-compose.yaml makes the separate verifier a compose project; "
                   f"backend {backend} runs one container for it")
    own = cfg.verifier.environment
    if own is not None and own.gpus and not gives_gpus(capabilities(backend), daemon):
        out.append(f"verifier.environment asks for {own.gpus} GPU(s); {_gpu_backends(backend, daemon)}")
    if own is not None and (own.os != "linux" or own.tpu is not None):
        out.append(f"verifier.environment asks for {'a TPU' if own.tpu is not None else f'os = {own.os!r}'}; "
                   f"backend {backend} runs Linux containers without TPUs only")
    return out


def _runs_service(task: TaskRef, service: str, can_compose: bool) -> bool:
    project = task.compose
    return can_compose and project is not None and not project.main_only and service in project.services


def _no_service(task: TaskRef, service: str, backend: str) -> str:
    project = task.compose
    if project is not None and service in project.services and not project.main_only:
        return f"which backend {backend} does not run"
    return "which its environment/docker-compose.yaml does not declare"


def compose_refusals(task: TaskRef, backend: str) -> list[str]:
    """Why ``backend`` cannot run the task's compose project (none for a file that restates main:
    that is the default container on every backend)."""
    project = task.compose
    if project is None or project.main_only:
        return []
    if not capabilities(backend).compose:
        # Harbor's Daytona environment runs a compose task in a privileged Docker-in-Docker
        # sandbox (harbor/environments/daytona/environment.py, _DaytonaDinD: docker:28.3.3-dind).
        return [f"has a compose project ({', '.join(project.services)}); backend {backend} runs one "
                "container per attempt (Harbor runs it in Docker-in-Docker there; run it on docker)"]
    return list(project.unsupported)


def notices(task: TaskRef, backend: str) -> list[str]:
    """What the backend runs but does not enforce or use (receipt warnings)."""
    can = capabilities(backend)
    env = task.config.environment
    out: list[str] = []
    if not can.image and task.has_dockerfile:
        out.append(f"environment/Dockerfile is not built on {backend}: the task runs as host processes, "
                   "with what the host has installed")
    elif not can.image and env.docker_image:
        out.append(f"docker_image {env.docker_image!r} is not used on {backend}: the task runs as host processes")
    if env.cpus is not None and not can.cpu_limit:
        out.append(f"cpus = {env.cpus} is not held on {backend}: its processes share the host's CPUs")
    if env.storage_mb is not None and not can.disk_limit:
        out.append(f"storage_mb = {env.storage_mb} is not enforced on {backend} (no per-sandbox disk quota)")
    if env.memory_mb is not None and not can.memory_limit:
        out.append(f"memory_mb = {env.memory_mb} is not enforced on {backend} (host processes)")
    if not can.isolated_network and any(not p.online for _, p in all_policies(task.config)):
        out.append(f"no-network is not enforced on {backend} (no isolation)")
    lists = [(phase, p) for phase, p in all_policies(task.config) if p.mode == NetworkMode.ALLOWLIST]
    if lists and can.allowlist:
        phases = ", ".join(phase for phase, _ in lists)
        out.append(f"its allowlist ({phases}) is enforced through an HTTP(S) proxy named in HTTPS_PROXY / "
                   "HTTP_PROXY: a client that ignores those variables reaches no host")
    elif lists and can.allowlist_at_create:
        phases = ", ".join(phase for phase, _ in lists)
        what = ("network and domain allow lists (IPv4 networks, host names)" if can.allowlist_names_at_create
                else "network allow list (IPv4 networks only)")
        when = "at create, and changed between phases" if can.network_per_phase else "at create"
        out.append(f"its allowlist ({phases}) is set {when} as {backend}'s {what}: a connection to any other "
                   "host fails")
    if task.compose is not None and not task.compose.main_only and can.compose:
        out.append(f"runs as a compose project ({', '.join(task.compose.services)}): each service is held to "
                   "the cell's cpus and memory unless it sets its own, and host admission counts main only")
    if task.compose is not None and task.compose.offline:
        out.append("its compose main has network_mode: none: no phase has a network, the agent's neither "
                   "(as in Harbor)")
    if env.gpus and env.gpu_types and can.gpus_by_daemon:
        # As Harbor's docker environment, which logs that it ignores them (harbor/environments/docker/docker.py)
        out.append(f"gpu_types = {'/'.join(env.gpu_types)} is not selected on {backend}: a device request asks "
                   f"for any {env.gpus} GPU(s) the daemon has")
    if env.skills_dir is not None:
        out.append(f"skills_dir = {env.skills_dir!r} is passed to the agent as RAY_BENCH_SKILLS_DIR only")
    return out
